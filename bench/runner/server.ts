/**
 * The servers every bench measures (the suite, bench:ingest, bench:query) and
 * the peer set beside Eventide. Either the bench starts Eventide itself
 * (`dist/src/main.js` on free ports over a fresh data directory, reading the
 * credentials it prints, SPEC §0) or the suite is given a running one
 * (`--query-url`, `--ingest-url`, `--api-key`, `--token`, and `--server-pid`
 * when it runs on this machine, for its CPU and memory). The ceiling peer — a
 * bare uWS server that only JSON.parses — always runs here.
 *
 * Estimate: Eventide starts in ~0.3–1 s (worker threads, the registry, an
 * empty store); stopping it fsyncs and seals, ~0.1–2 s with a few million rows.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { serverNodeFlags } from "../../src/config/node-flags.js";

export interface Target {
  kind: "self-started" | "external";
  queryUrl: string;
  ingestUrl: string;
  apiKey: string;
  token: string;
  /** The server's process id when known (self-started, or --server-pid). */
  pid: number | undefined;
  /** Self-started only: its data directory. */
  dataDirectory?: string;
  /** SIGTERM and wait (self-started; a no-op for an external server). */
  stop(): Promise<number | null>;
  /** Removes the self-started server's data directory unless --keep-data (after stop). */
  cleanup(): void;
  /**
   * Self-started only: SIGTERM (which seals every active segment) and start
   * again over the same data, keeping the credentials; URLs and pid change.
   */
  restart?(): Promise<void>;
  stderrTail(): string;
}

const startedChildren = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Kills every server the suite started (on an interrupted run). */
export function killStartedServers(): void {
  for (const child of startedChildren) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
}

interface Child {
  child: ChildProcess;
  jsonLines: Record<string, unknown>[];
  stderr: () => string;
  exited: Promise<number | null>;
}

function startChild(script: string, cwd: string, environment: Record<string, string>, nodeFlags: readonly string[], nice: number): Child {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", killStartedServers);
  }
  // `nice` sets the priority before exec, so every thread of the server (workers included) inherits it.
  const [command, args] = nice === 0 ? [process.execPath, [...nodeFlags, script]] : ["nice", ["-n", String(nice), process.execPath, ...nodeFlags, script]];
  const child = spawn(command, args, { cwd, env: { ...process.env, ...environment }, stdio: ["ignore", "pipe", "pipe"] });
  startedChildren.add(child);
  let stderrText = "";
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (chunk: string) => {
    stderrText = (stderrText + chunk).slice(-65_536);
  });
  const jsonLines: Record<string, unknown>[] = [];
  createInterface({ input: child.stdout! }).on("line", (line) => {
    try {
      const value: unknown = JSON.parse(line);
      if (value !== null && typeof value === "object") jsonLines.push(value as Record<string, unknown>);
    } catch {
      // Not every stdout line need be JSON.
    }
  });
  const exited = new Promise<number | null>((resolveExit) =>
    child.once("exit", (code) => {
      startedChildren.delete(child);
      resolveExit(code);
    }),
  );
  return { child, jsonLines, stderr: () => stderrText, exited };
}

async function waitForLine(started: Child, event: string, timeoutMs: number, name: string): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const line = started.jsonLines.find((candidate) => candidate.event === event);
    if (line !== undefined) return line;
    if (started.child.exitCode !== null || started.child.signalCode !== null) {
      throw new Error(`${name} exited (${started.child.exitCode ?? started.child.signalCode}) before printing ${event}; stderr:\n${started.stderr()}`);
    }
    if (Date.now() > deadline) throw new Error(`${name} did not print ${event} within ${timeoutMs} ms; stderr:\n${started.stderr()}`);
    await new Promise((resolveWait) => setTimeout(resolveWait, 25));
  }
}

function stopper(started: Child): () => Promise<number | null> {
  return async () => {
    if (started.child.exitCode !== null || started.child.signalCode !== null) return started.child.exitCode;
    started.child.kill("SIGTERM");
    const timer = setTimeout(() => started.child.kill("SIGKILL"), 30_000);
    const code = await started.exited;
    clearTimeout(timer);
    return code;
  };
}

export interface EventideStart {
  repositoryRoot: string;
  /** Another checkout whose build to start instead (`--server-root`), so two commits are timed by one harness. */
  serverRoot?: string;
  /** EVENTIDE_WORKERS; undefined: the server's default. */
  workers?: number;
  keepData: boolean;
  /** Nice value of the server process and its threads; below 0 needs root. */
  nice?: number;
  /** More node flags for the server (such as --cpu-prof), after the usual ones. */
  extraNodeFlags?: readonly string[];
  /** More environment for the server (such as EVENTIDE_STORE), over this process's. */
  environment?: Readonly<Record<string, string>>;
}

/** Starts Eventide on free ports over a fresh data directory under the system's temporary directory. */
export async function startEventide(options: EventideStart): Promise<Target> {
  const serverRoot = options.serverRoot ?? options.repositoryRoot;
  const mainScript = join(serverRoot, "dist", "src", "main.js");
  if (!existsSync(mainScript)) throw new Error(`${mainScript} is missing: run npm run build first`);
  const workDirectory = mkdtempSync(join(tmpdir(), "eventide-bench-server-"));
  const dataDirectory = join(workDirectory, "data");
  mkdirSync(dataDirectory);
  const environment: Record<string, string> = {
    ...options.environment,
    EVENTIDE_QUERY_PORT: "0",
    EVENTIDE_INGEST_PORT: "0",
    EVENTIDE_HOST: "127.0.0.1",
    EVENTIDE_DATA_DIR: dataDirectory,
  };
  if (options.workers !== undefined) environment.EVENTIDE_WORKERS = String(options.workers);
  // A fresh store creates the default workspace and prints its credentials; a restart prints none.
  const launch = async (known: { apiKey: string; token: string } | undefined) => {
    const started = startChild(mainScript, serverRoot, environment, [...serverNodeFlags, ...(options.extraNodeFlags ?? [])], options.nice ?? 0);
    const listening = await waitForLine(started, "listening", 60_000, "eventide");
    const created = started.jsonLines.find((line) => line.event === "workspace-created") ?? known;
    if (created === undefined || typeof created.apiKey !== "string" || typeof created.token !== "string") {
      throw new Error(`eventide printed no workspace-created line with apiKey and token: ${JSON.stringify(started.jsonLines)}`);
    }
    return {
      started,
      queryUrl: String(listening.queryUrl).replace(/\/$/, ""),
      ingestUrl: String(listening.ingestUrl).replace(/\/$/, ""),
      apiKey: created.apiKey,
      token: created.token,
    };
  };
  let current = await launch(undefined);
  const target: Target = {
    kind: "self-started",
    queryUrl: current.queryUrl,
    ingestUrl: current.ingestUrl,
    apiKey: current.apiKey,
    token: current.token,
    pid: current.started.child.pid,
    dataDirectory,
    stop: () => stopper(current.started)(),
    cleanup: () => {
      if (!options.keepData) rmSync(workDirectory, { recursive: true, force: true });
    },
    restart: async () => {
      const code = await stopper(current.started)();
      if (code !== 0) throw new Error(`eventide exited ${code} on SIGTERM before its restart; stderr:\n${current.started.stderr().slice(-2000)}`);
      current = await launch({ apiKey: target.apiKey, token: target.token });
      target.queryUrl = current.queryUrl;
      target.ingestUrl = current.ingestUrl;
      target.pid = current.started.child.pid;
    },
    stderrTail: () => current.started.stderr().slice(-2000),
  };
  return target;
}

export function externalTarget(options: { queryUrl: string; ingestUrl: string; apiKey: string; token: string; pid: number | undefined }): Target {
  return {
    kind: "external",
    queryUrl: options.queryUrl.replace(/\/$/, ""),
    ingestUrl: options.ingestUrl.replace(/\/$/, ""),
    apiKey: options.apiKey,
    token: options.token,
    pid: options.pid,
    stop: async () => null,
    cleanup: () => undefined,
    stderrTail: () => "",
  };
}

export interface CeilingServer {
  url: string;
  pid: number | undefined;
  stop(): Promise<number | null>;
}

/** The uWS ceiling peer of the ingest scenarios (bench/ingest/ceiling-server.ts). */
export async function startCeiling(repositoryRoot: string, nice = 0): Promise<CeilingServer> {
  const script = join(repositoryRoot, "dist", "bench", "ingest", "ceiling-server.js");
  if (!existsSync(script)) throw new Error(`${script} is missing: run npm run build first`);
  const started = startChild(script, repositoryRoot, { CEILING_HOST: "127.0.0.1", CEILING_PORT: "0" }, [], nice);
  const listening = await waitForLine(started, "listening", 15_000, "ceiling server");
  return { url: `http://127.0.0.1:${Number(listening.port)}`, pid: started.child.pid, stop: stopper(started) };
}
