/**
 * A query may read more sealed segments than the segment cache keeps: a small
 * EVENTIDE_SEGMENT_CACHE_BYTES_MAX (a container's memory limit sets it too)
 * makes loading one segment drop another the same query is waiting for. The
 * answer must still be exact, however small the budget.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countEvents, expectOk, ingestBatch, sendJson, uniqueName } from "../helpers/http.js";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";
import { dayMs, isoTime } from "../helpers/events.js";

const dayCount = 30;
const eventsPerDay = 30;
const firstDayMs = Date.UTC(2024, 0, 1);
// One byte: every segment loaded pushes every other one out of the cache.
const env = { EVENTIDE_SEGMENT_CACHE_BYTES_MAX: "1" };
const event = uniqueName("cached");
let first: ServerHandle | undefined;
let server: ServerHandle;

const dateTo = new Date(firstDayMs + (dayCount - 1) * dayMs).toISOString().slice(0, 10);
const queries: Array<[string, Record<string, unknown>]> = [
  ["trend", { event, dateFrom: "2024-01-01", dateTo }],
  ["trend", { event, dateFrom: "2024-01-01", dateTo, math: "unique", groupBy: "week" }],
  ["funnel", { steps: [event, event], dateFrom: "2024-01-01", dateTo, conversionWindow: 86_400 }],
  ["retention", { cohortEvent: event, retentionEvent: event, dateFrom: "2024-01-01", dateTo, windowDays: 7 }],
];
let expected: unknown[];

async function answers(target: ServerHandle): Promise<unknown[]> {
  const bodies = [];
  for (const [kind, body] of queries) {
    const answer = await sendJson(`${target.queryUrl}/api/v1/query/${kind}`, body, { token: target.token });
    expect(answer.status, `${kind}: ${answer.text.slice(0, 300)} ${target.stderr().slice(-1000)}`).toBe(200);
    bodies.push(answer.body);
  }
  return bodies;
}

beforeAll(async () => {
  // The first server keeps the default cache and answers from its active rows: the yardstick.
  first = await startServer();
  const events = [];
  for (let day = 0; day < dayCount; day++) {
    for (let index = 0; index < eventsPerDay; index++) {
      events.push({ event, distinctId: `u${index % 7}`, timestamp: isoTime(firstDayMs + day * dayMs + index * 60_000) });
    }
  }
  expect(expectOk(await ingestBatch(first, first.apiKey, events)).accepted).toBe(events.length);
  expected = await answers(first);
  // A clean stop seals every day's rows, so the restarted server reads only sealed segments, loaded on demand.
  expect(await first.stop()).toBe(0);
  const { dataDir, apiKey, token, workspaceId } = first;
  first = undefined;
  server = await startServer({ env, dataDir, credentials: { apiKey, token, workspaceId } });
});

afterAll(async () => {
  // A failed set-up may leave the first server running.
  if (first !== undefined) {
    await first.stop();
    removeDataDir(first.dataDir);
  }
  await server?.stop();
  if (server) removeDataDir(server.dataDir);
});

describe("a segment cache smaller than one query's segments", () => {
  it("answers trends, funnels and retention over every day as a server with the default cache does", async () => {
    expect(await countEvents(server, server.token, event, "2024-01-01", dateTo)).toBe(dayCount * eventsPerDay);
    expect(await answers(server)).toEqual(expected);
    // Twice: the second round finds some segments still loaded, others dropped.
    expect(await answers(server)).toEqual(expected);
  });
});
