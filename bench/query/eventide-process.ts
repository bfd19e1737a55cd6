/**
 * The Eventide side of the query benchmark: starts `dist/src/main.js` as a
 * child process on free ports over a fresh data directory, reads the
 * credentials and URLs it prints (SPEC §0), and talks to it over keep-alive
 * HTTP: batches to the ingest listener, queries to the query listener.
 *
 * Estimate: a keep-alive POST on loopback costs the client ~50–100 µs, small
 * next to a 1 000-event batch (~3 ms of server work) and to be subtracted in
 * the mind from the fastest trend answers (target ≤ 5 ms).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { serverNodeFlags } from "../../src/config/node-flags.js";

export interface EventideProcess {
  child: ChildProcess;
  pid: number;
  queryUrl: string;
  ingestUrl: string;
  apiKey: string;
  token: string;
  stderr: () => string;
  stop: () => Promise<number | null>;
}

const startedChildren = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of startedChildren) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});

/**
 * Starts Eventide and waits for its `listening` line. A fresh data directory makes it
 * create the default workspace and print its credentials; on a restart over the same
 * directory it prints none, so the caller passes the ones it kept.
 */
export async function startEventide(
  mainScript: string,
  cwd: string,
  dataDirectory: string,
  known?: { apiKey: string; token: string },
  extraEnvironment: Record<string, string> = {},
): Promise<EventideProcess> {
  const child = spawn(process.execPath, [...serverNodeFlags, mainScript], {
    cwd,
    env: { ...process.env, EVENTIDE_QUERY_PORT: "0", EVENTIDE_INGEST_PORT: "0", EVENTIDE_HOST: "127.0.0.1", EVENTIDE_DATA_DIR: dataDirectory, ...extraEnvironment },
    stdio: ["ignore", "pipe", "pipe"],
  });
  startedChildren.add(child);
  let stderrText = "";
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (chunk: string) => {
    stderrText = (stderrText + chunk).slice(-65_536);
  });
  const exited = new Promise<number | null>((resolveExit) =>
    child.once("exit", (code) => {
      startedChildren.delete(child);
      resolveExit(code);
    }),
  );
  const lines: Record<string, unknown>[] = [];
  const listening = new Promise<Record<string, unknown>>((resolveListening, rejectListening) => {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      try {
        const value: unknown = JSON.parse(line);
        if (value === null || typeof value !== "object") return;
        lines.push(value as Record<string, unknown>);
        if ((value as { event?: unknown }).event === "listening") resolveListening(value as Record<string, unknown>);
      } catch {
        // Not every stdout line need be JSON.
      }
    });
    void exited.then((code) => rejectListening(new Error(`eventide exited (${code}) before listening; stderr:\n${stderrText}`)));
    setTimeout(() => rejectListening(new Error(`eventide did not print listening within 60 s; stderr:\n${stderrText}`)), 60_000).unref();
  });
  const ready = await listening;
  const created = lines.find((line) => line.event === "workspace-created") ?? known;
  if (created === undefined || typeof created.apiKey !== "string" || typeof created.token !== "string") {
    throw new Error(`eventide printed no workspace-created line with apiKey and token: ${JSON.stringify(lines)}`);
  }
  return {
    child,
    pid: child.pid!,
    queryUrl: String(ready.queryUrl).replace(/\/$/, ""),
    ingestUrl: String(ready.ingestUrl).replace(/\/$/, ""),
    apiKey: created.apiKey,
    token: created.token,
    stderr: () => stderrText,
    stop: async () => {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** A field of /proc/<pid>/status in kB (VmRSS, VmHWM), NaN when unreadable. */
export function statusKilobytes(pid: number, field: string): number {
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "latin1"));
    return match ? Number(match[1]) : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** utime + stime of every thread of a process, in milliseconds (Linux /proc). */
export function processCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
  } catch {
    return Number.NaN;
  }
}
