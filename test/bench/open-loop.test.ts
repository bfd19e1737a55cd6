/**
 * Open-loop scheduling: requests are due at fixed times whatever the server
 * does, and latency counts from the due time, so a stall is charged to every
 * request it delayed (coordinated omission). Checked on the dispatcher alone
 * with a simulated clock and server, then end to end: the real generator
 * process against a local server that stalls.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LoadProgress } from "../../bench/load/http-load.js";
import { dueCount, firstIndexAtOrAfter, intendedTimeMs, OpenLoopDispatcher, processSchedule } from "../../bench/load/open-loop-schedule.js";
import { percentileOfSorted } from "../../bench/runner/stats.js";
import { repoRoot } from "../helpers/server.js";

/** The compiled generator (built by `npm test` before vitest runs): spawnLoad starts its own file as the child, which must be JavaScript. */
async function compiledGenerator(): Promise<typeof import("../../bench/load/http-load.js")> {
  return (await import(pathToFileURL(join(repoRoot, "dist", "bench", "load", "http-load.js")).href)) as typeof import("../../bench/load/http-load.js");
}

describe("the open-loop schedule", () => {
  it("spaces requests evenly at the rate, request 0 due at the start", () => {
    const schedule = processSchedule(200, 1000, 0, 1);
    expect(schedule.intervalMs).toBe(5);
    expect(intendedTimeMs(schedule, 0)).toBe(1000);
    expect(intendedTimeMs(schedule, 3)).toBe(1015);
    expect(dueCount(schedule, 999.9)).toBe(0);
    expect(dueCount(schedule, 1000)).toBe(1);
    expect(dueCount(schedule, 1014.9)).toBe(3);
    expect(dueCount(schedule, 1015)).toBe(4);
  });

  it("splits a rate over processes so their requests interleave into one even stream", () => {
    const processes = 3;
    const times = Array.from({ length: processes }, (_, index) => processSchedule(300, 0, index, processes)).flatMap((schedule) =>
      Array.from({ length: 10 }, (_, request) => intendedTimeMs(schedule, request)),
    );
    times.sort((left, right) => left - right);
    for (let index = 1; index < times.length; index += 1) expect(times[index] - times[index - 1]).toBeCloseTo(1000 / 300, 9);
  });

  it("finds the first request due at or after a time, exactly on the boundary too", () => {
    const schedule = processSchedule(3, 0, 0, 1);
    expect(firstIndexAtOrAfter(schedule, 0)).toBe(0);
    expect(firstIndexAtOrAfter(schedule, 1000)).toBe(3);
    expect(firstIndexAtOrAfter(schedule, 1000.0001)).toBe(4);
    expect(firstIndexAtOrAfter(schedule, -5)).toBe(0);
    for (let timeMs = 0; timeMs < 5000; timeMs += 37.3) {
      const index = firstIndexAtOrAfter(schedule, timeMs);
      expect(intendedTimeMs(schedule, index)).toBeGreaterThanOrEqual(timeMs);
      if (index > 0) expect(intendedTimeMs(schedule, index - 1)).toBeLessThan(timeMs);
    }
  });

  it("refuses a rate that is not a positive number", () => {
    expect(() => processSchedule(0, 0, 0, 1)).toThrow();
    expect(() => processSchedule(Number.NaN, 0, 0, 1)).toThrow();
    expect(() => processSchedule(10, 0, 1, 1)).toThrow();
  });
});

/**
 * A discrete-event replay of the dispatcher against a server that answers in
 * `serviceMs(startMs)`, one request at a time per connection; returns the
 * latency of each request both ways (from its due time, and from its send).
 */
function simulate(options: { rate: number; connections: number; durationMs: number; serviceMs: (sendMs: number) => number }) {
  const schedule = processSchedule(options.rate, 0, 0, 1);
  const endIndex = firstIndexAtOrAfter(schedule, options.durationMs);
  const fromDue: number[] = [];
  const fromSend: number[] = [];
  const completions: { atMs: number; connection: number; intendedMs: number; sendMs: number }[] = [];
  const dispatcher = new OpenLoopDispatcher<number>(schedule, endIndex, (connection, _index, intendedMs, nowMs) => {
    completions.push({ atMs: nowMs + options.serviceMs(nowMs), connection, intendedMs, sendMs: nowMs });
  });
  let nowMs = 0;
  for (let connection = 0; connection < options.connections; connection += 1) dispatcher.release(connection, 0);
  let wakeMs = 0;
  for (let guard = 0; guard < 1_000_000 && (!dispatcher.finished || completions.length > 0); guard += 1) {
    const delay = dispatcher.pump(nowMs);
    wakeMs = delay >= 0 ? nowMs + delay : Number.POSITIVE_INFINITY;
    completions.sort((left, right) => left.atMs - right.atMs);
    const next = completions[0];
    if (next !== undefined && next.atMs <= wakeMs) {
      completions.shift();
      nowMs = next.atMs;
      fromDue.push(nowMs - next.intendedMs);
      fromSend.push(nowMs - next.sendMs);
      dispatcher.release(next.connection, nowMs);
    } else if (Number.isFinite(wakeMs)) {
      nowMs = wakeMs;
    } else {
      break;
    }
  }
  return { fromDue: fromDue.sort((a, b) => a - b), fromSend: fromSend.sort((a, b) => a - b), sent: dispatcher.next, endIndex, backlogMax: dispatcher.backlogMax };
}

describe("the open-loop dispatcher", () => {
  it("sends every request at its due time when the server keeps up", () => {
    const result = simulate({ rate: 1000, connections: 4, durationMs: 1000, serviceMs: () => 0.5 });
    expect(result.sent).toBe(1000);
    expect(result.fromDue.length).toBe(1000);
    expect(result.fromDue.at(-1)).toBeCloseTo(0.5, 9);
    expect(result.backlogMax).toBeLessThanOrEqual(1);
  });

  it("charges a 200 ms stall to every request due during it, where send-to-answer timing sees only a few", () => {
    // 1 000 requests/s on 10 connections; answers take 1 ms, but requests sent in [300, 500) ms wait until 500 ms.
    const result = simulate({ rate: 1000, connections: 10, durationMs: 1000, serviceMs: (sendMs) => (sendMs >= 300 && sendMs < 500 ? 500 - sendMs + 1 : 1) });
    expect(result.sent).toBe(1000);
    // ~200 requests fell due in the stall: from their due time they waited ~100 ms on average, up to ~200 ms.
    const slowFromDue = result.fromDue.filter((latency) => latency > 10).length;
    expect(slowFromDue).toBeGreaterThan(180);
    expect(percentileOfSorted(result.fromDue, 99)).toBeGreaterThan(150);
    expect(percentileOfSorted(result.fromDue, 90)).toBeGreaterThan(50);
    // From the send, only the ~10 requests that were in flight when the stall began look slow.
    const slowFromSend = result.fromSend.filter((latency) => latency > 10).length;
    expect(slowFromSend).toBeLessThanOrEqual(12);
    expect(percentileOfSorted(result.fromSend, 90)).toBeLessThan(2);
    // The requests that could not be sent during the stall queued up.
    expect(result.backlogMax).toBeGreaterThan(150);
  });

  it("builds an ever longer queue, never dropping a request, when the rate is above what the server can do", () => {
    // 2 connections × 1 request per 4 ms = 500/s, asked for 1 000/s.
    const result = simulate({ rate: 1000, connections: 2, durationMs: 500, serviceMs: () => 4 });
    expect(result.sent).toBe(result.endIndex);
    expect(result.fromDue.length).toBe(500);
    // The last request was due at ~499 ms but sent at ~1 000 ms: latency grows linearly.
    expect(result.fromDue.at(-1)).toBeGreaterThan(450);
    expect(result.fromSend.at(-1)).toBeCloseTo(4, 9);
  });

  it("forgets a connection that closed while idle", () => {
    const sent: number[] = [];
    const dispatcher = new OpenLoopDispatcher<string>(processSchedule(1000, 0, 0, 1), 10, (connection) => sent.push(connection === "a" ? 1 : 2));
    dispatcher.release("a", -1);
    dispatcher.release("b", -1);
    dispatcher.remove("a");
    dispatcher.pump(0.5);
    expect(sent).toEqual([2]);
    expect(dispatcher.idleCount).toBe(0);
  });

  it("hands each due request to the connection idle longest, so every connection stays in use", () => {
    const sent: string[] = [];
    const dispatcher = new OpenLoopDispatcher<string>(processSchedule(1000, 0, 0, 1), 100, (connection) => sent.push(connection));
    for (const connection of ["a", "b", "c"]) dispatcher.release(connection, -1);
    for (let step = 0; step < 6; step += 1) {
      dispatcher.pump(step);
      // Each answer comes back at once: the connection goes to the back of the queue.
      dispatcher.release(sent.at(-1)!, step + 0.5);
    }
    expect(sent.slice(0, 6)).toEqual(["a", "b", "c", "a", "b", "c"]);
  });
});

describe("the generator process in open loop", () => {
  let server: Server;
  let port = 0;
  let stallUntilMs = 0;
  let stallAtRequest = 0;
  /** From this request on, the server never answers. */
  let hangFromRequest = Number.POSITIVE_INFINITY;
  let requests = 0;
  let directory = "";

  beforeAll(async () => {
    directory = mkdtempSync(join(tmpdir(), "eventide-open-loop-"));
    server = createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        requests += 1;
        if (requests >= hangFromRequest) return;
        if (requests === stallAtRequest) stallUntilMs = Date.now() + 300;
        const answer = () => response.writeHead(200, { "content-type": "application/json", "content-length": "11" }).end('{"ok":true}');
        const waitMs = stallUntilMs - Date.now();
        if (waitMs > 0) setTimeout(answer, waitMs);
        else answer();
      });
    });
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolveListen) => server.listen(0, "127.0.0.1", resolveListen));
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    await new Promise((resolveClose) => server.close(resolveClose));
    rmSync(directory, { recursive: true, force: true });
  });

  it("keeps its rate, reports progress, and counts a 300 ms server stall against the requests due in it", async () => {
    const bodiesFile = join(directory, "bodies.ndjson");
    writeFileSync(bodiesFile, '{"event":"e","distinctId":"u"}\n');
    requests = 0;
    // The stall begins on the 300th request: ~0.3 s into the 1 s window at 500/s, after the 0.3 s warm-up.
    stallAtRequest = 300;
    const progress: LoadProgress[] = [];
    const { spawnLoad } = await compiledGenerator();
    const report = await spawnLoad({
      url: `http://127.0.0.1:${port}/ingest`,
      bodiesFile,
      eventsPerBody: 1,
      connections: 16,
      warmupSeconds: 0.3,
      durationSeconds: 1,
      restampUuids: false,
      uuidStamp: 1,
      rate: 500,
      drainSeconds: 2,
      progressSeconds: 0.25,
      onProgress: (sample) => progress.push(sample),
    });
    expect(report.mode).toBe("open");
    expect(report.targetRate).toBe(500);
    // Every request due in the 1 s window was sent and answered: ~500 of them.
    expect(report.requests).toBeGreaterThanOrEqual(490);
    expect(report.requests).toBeLessThanOrEqual(510);
    expect(report.okResponses).toBe(report.requests);
    expect(report.timedOut).toBe(0);
    // 16 connections fill within ~32 ms of the stall; the ~150 requests due later in it wait for its end.
    expect(report.latencyMs.p90).toBeGreaterThan(50);
    expect(report.latencyMs.max).toBeGreaterThan(250);
    // Service time (from the actual send) sees the stall only on the 16 requests in flight.
    expect(report.serviceLatencyMs.p50).toBeLessThan(report.latencyMs.p90);
    expect(report.backlogMax).toBeGreaterThan(50);
    expect(progress.length).toBeGreaterThanOrEqual(4);
    expect(progress.reduce((sum, sample) => sum + sample.completed, 0)).toBeGreaterThanOrEqual(report.requests);
  });

  it("counts requests never answered by the end of the drain as timed out, at no less than their wait", async () => {
    const bodiesFile = join(directory, "bodies.ndjson");
    writeFileSync(bodiesFile, '{"event":"e","distinctId":"u"}\n');
    requests = 0;
    stallAtRequest = 0;
    // 200/s: warm-up 0.2 s (40 requests), then 20 answered, then silence.
    hangFromRequest = 61;
    try {
      const { spawnLoad } = await compiledGenerator();
      const report = await spawnLoad({
        url: `http://127.0.0.1:${port}/ingest`,
        bodiesFile,
        eventsPerBody: 1,
        connections: 4,
        warmupSeconds: 0.2,
        durationSeconds: 0.5,
        restampUuids: false,
        uuidStamp: 1,
        rate: 200,
        drainSeconds: 0.5,
      });
      // 100 requests were due in the window; ~20 were answered, the other ~80 (4 stuck in flight, the rest never sent) timed out.
      expect(report.requests).toBeGreaterThanOrEqual(98);
      expect(report.requests).toBeLessThanOrEqual(102);
      expect(report.okResponses).toBeGreaterThanOrEqual(15);
      expect(report.okResponses).toBeLessThanOrEqual(25);
      expect(report.timedOut).toBe(report.requests - report.okResponses);
      // The last one was due at the window's end and waited the whole drain; the first waited ~0.9 s.
      expect(report.latencyMs.p50).toBeGreaterThan(400);
      expect(report.latencyMs.max).toBeGreaterThan(850);
    } finally {
      hangFromRequest = Number.POSITIVE_INFINITY;
    }
  });
});
