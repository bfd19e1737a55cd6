/**
 * The server as a child process of the CLI: `eventide serve` runs it in the
 * foreground, and commands that need a server when none runs (import into a
 * stopped store, workspace delete sealing the write-ahead log) start a private
 * one on free ports, use it, and stop it with SIGTERM (a clean stop seals
 * every row, SPEC §0). The lifecycle commands reach the store only through a
 * server or through immutable and append-only files (snapshot.ts), never by
 * opening the store in the CLI's own process beside a server.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import type { CliContext } from "../cli.js";
import { serverLockName } from "../storage/lock-file.js";
import { serverNodeFlags } from "../config/node-flags.js";

/** The compiled server: beside this module in dist/, or dist/ of the checkout when this runs from src/ (tests). */
export function serverEntryPath(): string {
  const beside = fileURLToPath(new URL("../main.js", import.meta.url));
  if (existsSync(beside)) return beside;
  return fileURLToPath(new URL("../../dist/src/main.js", import.meta.url));
}

export function spawnServer(environment: Readonly<Record<string, string | undefined>>, dataDir: string, stdio: "inherit" | "pipe"): ChildProcess {
  return spawn(process.execPath, [...serverNodeFlags, serverEntryPath()], {
    env: { ...environment, EVENTIDE_DATA_DIR: dataDir },
    stdio: stdio === "inherit" ? "inherit" : ["ignore", "pipe", "pipe"],
  });
}

export interface PrivateServer {
  ingestUrl: string;
  queryUrl: string;
  /** SIGTERM, and the exit code. */
  stop(): Promise<number | null>;
}

/** How long a private server may take to start: a store with a long write-ahead log replays it first. */
const privateServerStartMs = 120_000;

/**
 * Starts a server on `dataDir` listening on 127.0.0.1, ports chosen by the
 * kernel, for this process alone. Its logs are passed to `diagnostic`.
 */
export async function startPrivateServer(environment: Readonly<Record<string, string | undefined>>, dataDir: string, diagnostic: (text: string) => void): Promise<PrivateServer> {
  const child = spawnServer({ ...environment, EVENTIDE_HOST: "127.0.0.1", EVENTIDE_QUERY_PORT: "0", EVENTIDE_INGEST_PORT: "0" }, dataDir, "pipe");
  let stderrTail = "";
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (text: string) => {
    stderrTail = (stderrTail + text).slice(-4000);
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const urls = await new Promise<{ ingestUrl: string; queryUrl: string }>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGTERM");
      reject(new Error(`the server started for this command did not listen within ${privateServerStartMs} ms: ${stderrTail}`));
    }, privateServerStartMs);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      let parsed: { event?: string; ingestUrl?: string; queryUrl?: string };
      try {
        parsed = JSON.parse(line);
      } catch {
        return;
      }
      // Its credentials line (a first start) is not shown: this server's workspace is the caller's business.
      if (parsed.event === "listening") {
        clearTimeout(timer);
        resolve({ ingestUrl: parsed.ingestUrl!, queryUrl: parsed.queryUrl! });
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the server started for this command exited with ${code} before listening: ${stderrTail.trim()}`));
    });
  });
  diagnostic(`eventide: started a server of its own on ${urls.ingestUrl}\n`);
  return {
    ...urls,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const code = await exited;
      if (code !== 0) diagnostic(`eventide: the server started for this command stopped with ${code}: ${stderrTail.trim()}\n`);
      return code;
    },
  };
}

/**
 * Whether a server holds `dataDir` now: the kernel name it binds for its whole
 * life (storage/lock-file.ts holdServerLock) is taken. Linux only; elsewhere false.
 */
export async function serverHoldsDataDir(dataDir: string): Promise<boolean> {
  if (process.platform !== "linux" || !existsSync(dataDir)) return false;
  const probe = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once("error", reject);
      probe.listen({ path: serverLockName(dataDir), exclusive: true }, resolve);
    });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EADDRINUSE") return true;
    throw error;
  }
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return false;
}

/**
 * Where a lifecycle command reaches the server of its data directory, on the
 * `listener` it needs: --ingest-url / --query-url, EVENTIDE_INGEST_URL /
 * EVENTIDE_QUERY_URL, the running server at EVENTIDE_HOST and its port, or,
 * when no server holds the directory, a private one started now (the caller
 * stops it).
 */
export async function reachServer(listener: "ingest" | "query", { io, dataDir, options }: CliContext): Promise<{ url: string; server?: PrivateServer }> {
  const given = options[`${listener}-url`];
  if (typeof given === "string") return { url: given.replace(/\/$/, "") };
  const environment = io.environment;
  const urlVariable = environment[listener === "ingest" ? "EVENTIDE_INGEST_URL" : "EVENTIDE_QUERY_URL"];
  if (urlVariable || (await serverHoldsDataDir(dataDir))) {
    if (urlVariable) return { url: urlVariable };
    const port = listener === "ingest" ? environment.EVENTIDE_INGEST_PORT || "8081" : environment.EVENTIDE_QUERY_PORT || "8080";
    return { url: `http://${environment.EVENTIDE_HOST || "127.0.0.1"}:${port}` };
  }
  const server = await startPrivateServer(environment, dataDir, io.writeDiagnostic);
  return { url: listener === "ingest" ? server.ingestUrl : server.queryUrl, server };
}
