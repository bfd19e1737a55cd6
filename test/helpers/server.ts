/**
 * Test harness: starts the real Eventide server (`node dist/src/main.js`, built by
 * `npm test` before vitest runs) as a child process on port 0 with its own data
 * directory, reads the credentials and URLs it prints, and talks HTTP to it.
 * Nothing here mocks storage or HTTP: every test goes through the same process a
 * user runs.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll } from "vitest";
import { serverNodeFlags } from "../../src/config/node-flags.js";

export const repoRoot = resolve(import.meta.dirname, "..", "..");
export const mainScript = join(repoRoot, "dist", "src", "main.js");

export interface ServerHandle {
  queryUrl: string;
  ingestUrl: string;
  /** Credentials of the `default` workspace printed on first start (undefined when the store already had one). */
  apiKey: string;
  token: string;
  workspaceId: string;
  dataDir: string;
  process: ChildProcess;
  /** Every stdout line printed so far. */
  stdoutLines: string[];
  stderr(): string;
  /** How the process ended (exit code or signal) and the tail of its stderr, for assertion messages. */
  exitReport(): string;
  /** SIGTERM and wait for exit; resolves with the exit code (null when a signal ended it). */
  stop(): Promise<number | null>;
  /** SIGKILL and wait for exit. */
  kill(): Promise<void>;
}

export interface StartOptions {
  dataDir?: string;
  /** Extra environment for the server; `undefined` removes a variable (so the server's own default applies). */
  env?: Record<string, string | undefined>;
  workers?: number;
  /** Credentials to report when the store already has a workspace (restart). */
  credentials?: { apiKey: string; token: string; workspaceId: string };
  startTimeoutMs?: number;
}

export function makeDataDir(prefix = "eventide-test-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function removeDataDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Worker threads run at the main thread's priority in tests unless a test (or
 * the environment vitest runs in) says otherwise. The server's default lowers
 * them 10 nice steps (src/workers/worker.ts) so that they yield to their own
 * main thread; but nice values weigh against every process on the machine, and
 * under `npm test` those are the other test file's servers and vitest itself
 * (two files run at once on a 2-core CI box): at +10 a worker gets about a
 * tenth of the CPU share of each of them, and a batch that parses in 5 ms
 * answers in hundreds. That measures the test harness, not the server. The
 * default itself is checked by test/resilience/worker-priority.test.ts, which
 * starts its server without this override; `EVENTIDE_WORKER_NICE=10 npm test`
 * runs everything at the production priority.
 */
const testDefaults: Record<string, string> = { EVENTIDE_WORKER_NICE: "0" };

export async function startServer(options: StartOptions = {}): Promise<ServerHandle> {
  const dataDir = options.dataDir ?? makeDataDir();
  const env: Record<string, string | undefined> = {
    ...testDefaults,
    ...process.env,
    EVENTIDE_QUERY_PORT: "0",
    EVENTIDE_INGEST_PORT: "0",
    EVENTIDE_HOST: "127.0.0.1",
    EVENTIDE_DATA_DIR: dataDir,
    EVENTIDE_WORKERS: String(options.workers ?? 2),
    ...options.env,
  };
  for (const [name, value] of Object.entries(env)) if (value === undefined) delete env[name];
  const child = spawn(process.execPath, [...serverNodeFlags, mainScript], {
    cwd: repoRoot,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const stdoutLines: string[] = [];
  let stderrText = "";
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (chunk: string) => {
    stderrText += chunk;
    if (stderrText.length > 1 << 20) stderrText = stderrText.slice(-(1 << 19));
  });
  let exitedAtMs: number | undefined;
  const exited = new Promise<number | null>((resolveExit) =>
    child.once("exit", (code) => {
      exitedAtMs = performance.now();
      resolveExit(code);
    }),
  );

  const ready = new Promise<{ queryUrl: string; ingestUrl: string; created?: Record<string, string> }>(
    (resolveReady, rejectReady) => {
      let created: Record<string, string> | undefined;
      const timeoutMs = options.startTimeoutMs ?? 20_000;
      const startTimer = setTimeout(() => {
        // A server that never listened is nobody's to stop: kill it here, or it outlives the test run.
        child.kill("SIGKILL");
        rejectReady(new Error(`server did not listen within ${timeoutMs} ms; stderr:\n${stderrText}`));
      }, timeoutMs);
      startTimer.unref();
      const lines = createInterface({ input: child.stdout! });
      lines.on("line", (line) => {
        stdoutLines.push(line);
        let parsed: Record<string, string>;
        try {
          parsed = JSON.parse(line);
        } catch {
          return;
        }
        if (parsed.event === "workspace-created") created = parsed;
        if (parsed.event !== "listening") return;
        clearTimeout(startTimer);
        resolveReady({ queryUrl: parsed.queryUrl, ingestUrl: parsed.ingestUrl, created });
      });
      child.once("exit", (code) => {
        clearTimeout(startTimer);
        rejectReady(new Error(`server exited with ${code} before listening; stderr:\n${stderrText}`));
      });
    },
  );
  const { queryUrl, ingestUrl, created } = await ready;
  const credentials = created
    ? { apiKey: created.apiKey, token: created.token, workspaceId: created.workspaceId }
    : options.credentials ?? { apiKey: "", token: "", workspaceId: "" };
  return {
    queryUrl,
    ingestUrl,
    ...credentials,
    dataDir,
    process: child,
    stdoutLines,
    stderr: () => stderrText,
    exitReport: () =>
      `exit code ${child.exitCode}, signal ${child.signalCode}` +
      (exitedAtMs === undefined ? "" : `, ${Math.round(performance.now() - exitedAtMs)} ms ago`) +
      `; stderr tail:\n${stderrText.slice(-2000)}`,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill("SIGTERM");
      return exited;
    },
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGKILL");
      await exited;
    },
  };
}

export interface JsonResponse {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

/** POST a JSON value (or a raw string/Buffer body) and parse the JSON answer. */
export async function post(
  url: string,
  body: unknown,
  options: { token?: string; headers?: Record<string, string>; raw?: boolean; method?: string } = {},
): Promise<JsonResponse> {
  const headers: Record<string, string> = { "content-type": "application/json", ...options.headers };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  const payload = options.raw ? (body as string | Uint8Array) : JSON.stringify(body);
  const response = await fetch(url, { method: options.method ?? "POST", headers, body: payload as never });
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: response.status, headers: response.headers, body: parsed, text };
}

/** Ingest events through /ingest/batch in chunks of at most 1 000; throws unless every event is accepted. */
export async function ingestAll(server: Pick<ServerHandle, "ingestUrl" | "apiKey">, events: object[]): Promise<void> {
  for (let start = 0; start < events.length; start += 1000) {
    const chunk = events.slice(start, start + 1000);
    const response = await post(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, events: chunk });
    if (response.status !== 200 || response.body?.accepted !== chunk.length) {
      throw new Error(`batch ingest failed: ${response.status} ${response.text.slice(0, 500)}`);
    }
  }
}

/**
 * One server for a whole test file: started before its first test, stopped and
 * its data directory removed after its last. The handle is filled in when the
 * server has started, so tests use it as they would startServer's answer.
 */
export function serverPerFile(options: StartOptions = {}): ServerHandle {
  const handle = {} as ServerHandle;
  beforeAll(async () => {
    Object.assign(handle, await startServer(options));
  });
  afterAll(async () => {
    if (handle.process === undefined) return;
    await handle.stop();
    removeDataDir(handle.dataDir);
  });
  return handle;
}

/**
 * Servers a test file starts as it goes: each is stopped (or, for files whose
 * servers may hang on purpose, killed) and its data directory removed after the
 * file's last test. Returns the function that starts one.
 */
export function serversPerFile(teardown: "stop" | "kill" = "stop"): (options?: StartOptions) => Promise<ServerHandle> {
  const servers: ServerHandle[] = [];
  afterAll(async () => {
    for (const server of servers) {
      await (teardown === "stop" ? server.stop() : server.kill());
      removeDataDir(server.dataDir);
    }
  });
  return async (options = {}) => {
    const server = await startServer(options);
    servers.push(server);
    return server;
  };
}
