/**
 * Worker threads run EVENTIDE_WORKER_NICE steps (default 10) below the main
 * thread, so that waking one to parse a task does not take the main thread's
 * core from under it (src/workers/worker.ts); 0 leaves every thread equal.
 * Linux only: a thread's nice value is read from /proc/<pid>/task/<tid>/stat.
 */
import { readdirSync, readFileSync } from "node:fs";
import { getPriority } from "node:os";
import { describe, expect, it } from "vitest";
import { serversPerFile } from "../helpers/server.js";

const startServer = serversPerFile();

/** Nice value of every thread of `pid`, main thread first. */
function threadNiceValues(pid: number): { main: number; others: number[] } {
  const niceOf = (threadId: string) => {
    const stat = readFileSync(`/proc/${pid}/task/${threadId}/stat`, "utf8");
    // Fields after the parenthesised name: state is field 3, nice field 19.
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]);
  };
  const threads = readdirSync(`/proc/${pid}/task`).filter((threadId) => threadId !== String(pid));
  return { main: niceOf(String(pid)), others: threads.map(niceOf) };
}

// Run under nice 10 or more, the server's workers cannot go 10 steps lower (19 is the floor): nothing to observe.
const niceFloorReached = process.platform === "linux" && getPriority() + 10 > 19;
if (niceFloorReached) console.warn(`SKIPPED worker lowering check: this run is at nice ${getPriority()}, so workers cannot go 10 steps lower; run npm test at nice < 10`);

describe.runIf(process.platform === "linux")("worker thread priority", () => {
  it.skipIf(niceFloorReached)("runs each worker thread 10 nice steps below the main thread by default, and no other thread", async () => {
    // The test harness runs workers at nice 0 (test/helpers/server.ts); unset, the server's own default applies.
    const server = await startServer({ workers: 3, env: { EVENTIDE_WORKER_NICE: undefined } });
    const { main, others } = threadNiceValues(server.process.pid!);
    const lowered = others.filter((nice) => nice === Math.min(19, main + 10));
    expect(lowered).toHaveLength(3);
    expect(others.filter((nice) => nice !== main && nice !== Math.min(19, main + 10))).toEqual([]);
  });

  it("leaves every thread at the main thread's priority with EVENTIDE_WORKER_NICE=0", async () => {
    const server = await startServer({ workers: 2, env: { EVENTIDE_WORKER_NICE: "0" } });
    const { main, others } = threadNiceValues(server.process.pid!);
    expect(others.filter((nice) => nice !== main)).toEqual([]);
  });
});
