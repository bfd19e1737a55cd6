/**
 * Overload and slow clients, against one real server with one worker and a
 * four-task ingest queue (EVENTIDE_WORKER_QUEUE_TASKS_MAX), so that saturation
 * comes within a second on any machine; the rules are the same at the default
 * depth of 256.
 *
 * Overload: the sustainable ingest rate is measured first (four clients in a
 * closed loop, never more than the queue holds), then 64 clients send
 * 1 000-event batches as fast as the server answers them. The server must
 * refuse the excess with 503 `overloaded` and Retry-After instead of queueing
 * it, keep its memory bounded, count every batch it acknowledged, keep
 * answering queries, and accept the very next request once the load stops.
 * test/http/overload.test.ts checks that a refused batch stores nothing.
 *
 * Slow clients: connections that trickle their headers or their body, idle
 * keep-alive connections and silent ones are cut off by the server (uWS closes
 * an HTTP connection that makes no progress for ~10 s, checking every 4 s),
 * while a normal client keeps getting fast answers.
 */
import { readFileSync } from "node:fs";
import { Agent, request as httpRequest } from "node:http";
import { connect, type Socket } from "node:net";
import { describe, expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import { countEvents, ingestBatch, sendJson, trendData } from "../helpers/http.js";

const workerQueueTasksMax = 4;
const mebibyte = 1024 * 1024;
const day = "2024-11-05";

/**
 * No checkpoint runs while this file measures. About two million rows are
 * stored here (more on a faster machine), and the default 2 M-row bound would
 * start one mid-measurement at a point that depends on the machine's speed:
 * its seal holds the only worker for a second or more (acknowledged batches,
 * the query and the recovery batch wait behind it) and briefly doubles the
 * memory of the rows it packs, so the bounds below would measure a checkpoint
 * rather than overload. Every trigger is pushed out: rows, WAL bytes, property
 * values and texts, the interval, and the idle pause (the slow-client test
 * pauses ingest for seconds at a time). Checkpoints under load are covered in
 * test/durability; the rows stay in memory, which the growth bound allows for.
 * Worker threads run at the main thread's priority (test/helpers/server.ts).
 */
const noCheckpoints = {
  EVENTIDE_CHECKPOINT_ROWS_MAX: String(1_000_000_000),
  EVENTIDE_CHECKPOINT_WAL_BYTES_MAX: String(64 * 1024 ** 3),
  EVENTIDE_CHECKPOINT_PROPERTY_ENTRIES_MAX: String(1_000_000_000),
  EVENTIDE_CHECKPOINT_PROPERTY_TEXTS_MAX: String(1_000_000_000),
  EVENTIDE_CHECKPOINT_INTERVAL_MS: String(24 * 3_600_000),
  EVENTIDE_CHECKPOINT_IDLE_MS: String(24 * 3_600_000),
};

const server = serverPerFile({ workers: 1, env: { EVENTIDE_WORKER_QUEUE_TASKS_MAX: String(workerQueueTasksMax), ...noCheckpoints } });

/** A /proc/<pid>/status field in MiB (VmRSS: now; VmHWM: the peak since the process started). */
function memoryMebibytes(field: "VmRSS" | "VmHWM"): number {
  const status = readFileSync(`/proc/${server.process.pid}/status`, "utf8");
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
  if (match === null) throw new Error(`no ${field} in /proc/${server.process.pid}/status`);
  return Number(match[1]) / 1024;
}

/** One batch body of 1 000 events, built once per client and sent again and again. */
function batchBody(eventName: string, client: number): Buffer {
  const events = Array.from({ length: 1000 }, (_, row) => ({
    event: eventName,
    distinctId: `user-${row}`,
    timestamp: `${day}T${String(row % 24).padStart(2, "0")}:00:00Z`,
    properties: { client, row, plan: row % 3 === 0 ? "pro" : "free" },
  }));
  return Buffer.from(JSON.stringify({ apiKey: server.apiKey, events }));
}

function errorCode(text: string): string | undefined {
  try {
    return JSON.parse(text).error?.code;
  } catch {
    return undefined;
  }
}

interface LoadResult {
  accepted: number;
  refused: number;
  /** Answers other than 200 and 503 overloaded, and dropped connections. */
  unexpected: string[];
  requests: number;
  bodyBytes: number;
  durationMs: number;
  slowest200Ms: number;
  slowest503Ms: number;
}

/**
 * `clients` connections in a closed loop for `durationMs`, each sending its
 * batch again as soon as the previous one is answered (a refusal comes back
 * fast, so the offered rate far exceeds what is stored); past `durationMs`,
 * for as long as `moreWanted` says (at most `durationMaxMs` in all).
 */
async function drive(
  eventName: string,
  clients: number,
  durationMs: number,
  moreWanted: (result: LoadResult) => boolean = () => false,
  durationMaxMs = durationMs,
): Promise<LoadResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  const url = `${server.ingestUrl}/ingest/batch`;
  const result: LoadResult = { accepted: 0, refused: 0, unexpected: [], requests: 0, bodyBytes: 0, durationMs: 0, slowest200Ms: 0, slowest503Ms: 0 };
  const startedMs = performance.now();
  const endMs = startedMs + durationMs;
  const endMaxMs = startedMs + durationMaxMs;
  const goingOn = () => {
    const nowMs = performance.now();
    return nowMs < endMs || (nowMs < endMaxMs && moreWanted(result));
  };
  const client = async (index: number) => {
    const body = batchBody(eventName, index);
    while (goingOn()) {
      const sentMs = performance.now();
      const answer = await new Promise<{ status: number; text: string; retryAfter?: string; cors?: string } | { error: string }>((resolve) => {
        const outgoing = httpRequest(url, { method: "POST", agent, headers: { "content-type": "application/json", "content-length": String(body.length) } }, (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () =>
            resolve({
              status: response.statusCode ?? 0,
              text: Buffer.concat(chunks).toString("utf8"),
              retryAfter: response.headers["retry-after"] as string | undefined,
              cors: response.headers["access-control-allow-origin"] as string | undefined,
            }),
          );
        });
        outgoing.on("error", (error) => resolve({ error: error.message }));
        outgoing.end(body);
      });
      const tookMs = performance.now() - sentMs;
      result.requests++;
      result.bodyBytes += body.length;
      if ("error" in answer) {
        result.unexpected.push(`connection: ${answer.error}`);
      } else if (answer.status === 200 && answer.text === `{"ok":true,"accepted":1000}`) {
        result.accepted++;
        result.slowest200Ms = Math.max(result.slowest200Ms, tookMs);
      } else if (
        answer.status === 503 &&
        errorCode(answer.text) === "overloaded" &&
        /^[1-9]\d*$/.test(answer.retryAfter ?? "") &&
        answer.cors === "*"
      ) {
        result.refused++;
        result.slowest503Ms = Math.max(result.slowest503Ms, tookMs);
      } else {
        result.unexpected.push(`${answer.status} ${answer.text.slice(0, 200)} retry-after=${answer.retryAfter}`);
      }
    }
  };
  await Promise.all(Array.from({ length: clients }, (_, index) => client(index)));
  result.durationMs = performance.now() - startedMs;
  agent.destroy();
  return result;
}

describe("ingest far beyond the sustainable rate", () => {
  it("refuses the excess with 503 overloaded and Retry-After, keeps memory bounded, counts every acknowledged batch, and recovers at once", async () => {
    // 1. The sustainable rate: as many clients as the queue holds, so nothing should be refused.
    const sustained = await drive("sustained", workerQueueTasksMax, 2000);
    expect(sustained.unexpected).toEqual([]);
    expect(sustained.refused).toBe(0);
    const sustainableEventsPerSecond = (sustained.accepted * 1000 * 1000) / sustained.durationMs;
    const warmPeakMebibytes = memoryMebibytes("VmHWM");

    // 2. Overload: 64 clients, sampling RSS and running a query in the middle of it.
    let rssPeakMebibytes = 0;
    const sampler = setInterval(() => {
      rssPeakMebibytes = Math.max(rssPeakMebibytes, memoryMebibytes("VmRSS"));
    }, 20);
    const midQuery = (async () => {
      await new Promise((resolve) => setTimeout(resolve, 1500));
      const startedMs = performance.now();
      const answer = await sendJson(`${server.queryUrl}/api/v1/query/trend`, { event: "sustained", dateFrom: day, dateTo: day }, { token: server.token });
      return { status: answer.status, tookMs: performance.now() - startedMs };
    })();
    // At least 4 s; on a loaded machine, where this process offers less, until enough was refused for the memory
    // check below to mean something (see allowedGrowthMebibytes).
    const allowedGrowth = (load: LoadResult) => allowedGrowthMebibytes((sustained.accepted + load.accepted) * 1000);
    const overload = await drive("overload", 64, 4000, (load) => refusedMebibytes(load) < 2.5 * allowedGrowth(load), 15_000);
    clearInterval(sampler);
    const query = await midQuery;

    // 3. Right after the load stops, the next request is accepted (nothing is left queued).
    const recoveryStartedMs = performance.now();
    const recovery = await ingestBatch(server, server.apiKey, [{ event: "after-overload", distinctId: "u", timestamp: `${day}T12:00:00Z` }]);
    const recoveryMs = performance.now() - recoveryStartedMs;

    const peakMebibytes = memoryMebibytes("VmHWM");
    const offeredEventsPerSecond = (overload.requests * 1000 * 1000) / overload.durationMs;
    const storedEventsPerSecond = (overload.accepted * 1000 * 1000) / overload.durationMs;
    console.log(
      [
        `sustainable: ${Math.round(sustainableEventsPerSecond)} events/s (${sustained.accepted} batches in ${Math.round(sustained.durationMs)} ms), peak RSS after it ${peakString(warmPeakMebibytes)}`,
        `overload: offered ${Math.round(offeredEventsPerSecond)} events/s = ${(offeredEventsPerSecond / sustainableEventsPerSecond).toFixed(1)}× sustainable; stored ${Math.round(storedEventsPerSecond)} events/s;`,
        `  ${overload.accepted} batches accepted (slowest ${Math.round(overload.slowest200Ms)} ms), ${overload.refused} refused with 503 (slowest ${Math.round(overload.slowest503Ms)} ms), ${refusedMebibytes(overload).toFixed(0)} MiB of refused bodies in ${Math.round(overload.durationMs)} ms`,
        `  peak RSS ${peakString(peakMebibytes)} (sampled VmRSS max ${peakString(rssPeakMebibytes)}), growth ${peakString(peakMebibytes - warmPeakMebibytes)} over the warm peak`,
        `  trend query during overload: ${query.status} in ${Math.round(query.tookMs)} ms; first request after: ${recovery.status} in ${Math.round(recoveryMs)} ms`,
      ].join("\n"),
    );

    // Every answer was a 200 or a well-formed 503 overloaded: no other 5xx, no dropped connection.
    expect(overload.unexpected).toEqual([]);
    expect(overload.refused).toBeGreaterThan(0);
    expect(overload.accepted).toBeGreaterThan(0);
    // Well beyond what the server can store: 10–14× both what it stored meanwhile and the rate measured first, on an
    // idle machine. The offered rate is this process's own (64 clients on cores it shares with the server), so on a
    // busy box it falls with the load; the load can also change between the two phases, 2 s apart (5.2× the first
    // phase's rate was seen beside two CPU burners). What was stored in the same seconds is the fair comparison,
    // held to 5×; the first phase's rate to 3×.
    expect(offeredEventsPerSecond).toBeGreaterThan(5 * storedEventsPerSecond);
    expect(offeredEventsPerSecond).toBeGreaterThan(3 * sustainableEventsPerSecond);
    // Queries are not refused because ingest is saturated. How long answers took is a benchmark's figure (logged
    // above), not asserted: on a shared machine it measures the neighbours.
    expect(query.status).toBe(200);
    // Recovery is immediate: nothing is left queued to refuse the next request.
    expect(recovery.status, recovery.text).toBe(200);

    // Memory: what the server may hold beyond its warm state is bounded by its queues and by what it stored,
    // not by the offered load (see allowedGrowthMebibytes). Queueing the refused bodies instead would have needed
    // their full size, checked to be well past the bound.
    console.log(`  allowed growth ${peakString(allowedGrowth(overload))} (64 MiB + 128 B × ${(sustained.accepted + overload.accepted) * 1000} stored rows)`);
    expect(peakMebibytes - warmPeakMebibytes).toBeLessThan(allowedGrowth(overload));
    expect(refusedMebibytes(overload)).toBeGreaterThan(2 * allowedGrowth(overload));

    // Every acknowledged batch is counted, and only those.
    expect(await countEvents(server, server.token, "sustained", day)).toBe(sustained.accepted * 1000);
    expect(await countEvents(server, server.token, "overload", day)).toBe(overload.accepted * 1000);
    expect(await countEvents(server, server.token, "after-overload", day)).toBe(1);
  }, 60_000);
});

/**
 * What the server may hold beyond its warm state once it stores `rowsStored` rows in all. Queues and buffers:
 * 64 request bodies being read (64 × 73 KB ≈ 5 MiB), 4 queued + 1 running task with its parsed events
 * (≈ 5 × 2 MiB), and garbage of refused bodies awaiting collection: 64 MiB covers them. Stored rows live in
 * active segments (no checkpoint runs here): ≈ 45 B/row of columns (time, user, event, uuid flag, three
 * property value ids), doubled by capacity growth, plus dictionary texts: 128 B/row. Every stored row counts,
 * not only those stored under overload: the columns grow by doubling, and a doubling during the overload
 * re-allocates (and for a moment copies) the arrays holding the rows stored before it. Counting only the
 * overload's rows left ~15 % of margin when the total crossed a power of two (1.05 M rows: 126 MiB of 146).
 */
function allowedGrowthMebibytes(rowsStored: number): number {
  return 64 + (rowsStored * 128) / mebibyte;
}

/** The bodies the server refused, in MiB: what it would have had to hold had it queued them. */
function refusedMebibytes(load: LoadResult): number {
  return load.requests === 0 ? 0 : (load.refused * load.bodyBytes) / load.requests / mebibyte;
}

function peakString(mebibytes: number): string {
  return `${mebibytes.toFixed(0)} MiB`;
}

// ---------------------------------------------------------------------------
// Slow clients

interface SlowClient {
  label: string;
  socket: Socket;
  openedMs: number;
  closedMs?: number;
  /** True when we, not the server, ended it (the test's deadline). */
  closedByUs: boolean;
  received: string;
  timer?: NodeJS.Timeout;
}

function openSlowClient(label: string, url: string, start: (socket: Socket) => void, trickle?: string): SlowClient {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  const client: SlowClient = { label, socket, openedMs: performance.now(), closedByUs: false, received: "" };
  socket.setNoDelay(true);
  socket.on("data", (chunk: Buffer) => (client.received += chunk.toString("latin1")));
  socket.on("error", () => undefined);
  socket.on("close", () => {
    client.closedMs ??= performance.now();
    if (client.timer) clearInterval(client.timer);
  });
  socket.on("connect", () => {
    start(socket);
    // One byte every 500 ms: progress, but far below any sensible rate.
    if (trickle !== undefined) client.timer = setInterval(() => socket.writable && socket.write(trickle), 500);
  });
  return client;
}

describe("slow and idle clients", () => {
  // The server cuts them off after limits.idleTimeoutSeconds; how long that took, and the normal client's slowest round, are logged, not asserted.
  it("are cut off (headers trickled, body trickled, idle keep-alive, silent) while a normal client keeps getting answers", async () => {
    const copies = 10;
    const clients: SlowClient[] = [];
    for (let copy = 0; copy < copies; copy++) {
      for (const [listener, url] of [
        ["ingest", server.ingestUrl],
        ["query", server.queryUrl],
      ] as const) {
        const path = listener === "ingest" ? "/ingest" : "/api/v1/query/trend";
        clients.push(openSlowClient(`${listener}: headers trickled`, url, (socket) => socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nX-Slow: `), "a"));
        clients.push(
          openSlowClient(
            `${listener}: body trickled`,
            url,
            (socket) => socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{`),
            " ",
          ),
        );
        clients.push(
          openSlowClient(`${listener}: chunked body trickled`, url, (socket) => socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n`), "1\r\n \r\n"),
        );
        clients.push(openSlowClient(`${listener}: silent`, url, () => undefined));
      }
      // Idle keep-alive: one complete request, answered, then nothing.
      const body = JSON.stringify({ apiKey: server.apiKey, event: "idle-keep-alive", distinctId: "u", timestamp: `${day}T00:00:00Z` });
      clients.push(
        openSlowClient("ingest: idle keep-alive", server.ingestUrl, (socket) =>
          socket.write(`POST /ingest HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`),
        ),
      );
    }

    // A normal client meanwhile: a batch and a query every 100 ms, each on its own connection.
    let normalRequests = 0;
    let slowestNormalMs = 0;
    const normalFailures: string[] = [];
    const allClosed = () => clients.every((client) => client.closedMs !== undefined);
    const deadlineMs = performance.now() + 20_000;
    while (!allClosed() && performance.now() < deadlineMs) {
      const startedMs = performance.now();
      const ingest = await ingestBatch(server, server.apiKey, [{ event: "normal-client", distinctId: "u", timestamp: `${day}T00:00:00Z` }]);
      const trend = await trendData(server, server.token, { event: "normal-client", dateFrom: day, dateTo: day });
      const tookMs = performance.now() - startedMs;
      normalRequests++;
      slowestNormalMs = Math.max(slowestNormalMs, tookMs);
      if (ingest.status !== 200 || trend.length !== 1) normalFailures.push(`${ingest.status} ${ingest.text}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    for (const client of clients) {
      if (client.closedMs === undefined) {
        client.closedByUs = true;
        client.socket.destroy();
      }
    }

    const byLabel = new Map<string, number[]>();
    for (const client of clients) {
      const list = byLabel.get(client.label) ?? [];
      list.push(client.closedByUs ? Number.POSITIVE_INFINITY : (client.closedMs! - client.openedMs) / 1000);
      byLabel.set(client.label, list);
    }
    console.log(
      [
        `slow clients (${clients.length}), seconds until the server closed them:`,
        ...[...byLabel].map(([label, seconds]) => `  ${label}: ${Math.min(...seconds).toFixed(1)}–${Math.max(...seconds).toFixed(1)}`),
        `normal client meanwhile: ${normalRequests} rounds of ingest + query, slowest round ${Math.round(slowestNormalMs)} ms`,
      ].join("\n"),
    );

    for (const client of clients) expect(client.closedByUs, `${client.label} was still open after 20 s`).toBe(false);
    // The idle keep-alive connections got their answer before being closed.
    for (const client of clients.filter((candidate) => candidate.label.includes("idle"))) expect(client.received).toMatch(/^HTTP\/1\.1 200 /);
    expect(normalFailures).toEqual([]);
    expect(normalRequests).toBeGreaterThan(0);
    expect(await countEvents(server, server.token, "normal-client", day)).toBe(normalRequests);
    expect(await countEvents(server, server.token, "idle-keep-alive", day)).toBe(copies);
  }, 60_000);
});
