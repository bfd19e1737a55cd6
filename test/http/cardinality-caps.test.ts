/**
 * Cardinality caps on ingest: what one client holding the public ingest key
 * can make the store keep. Timestamps outside a window around receipt, events
 * on more distinct UTC days than a batch may touch, and events bringing a new
 * event name or property key past the workspace's cap are each refused on
 * their own, with a per-event `invalid_request` naming the field and the
 * setting (a single event: 400); the rest of the batch is stored.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";
import { countEvents, elapsedUntil, eventideOk, expectError, expectOk, ingestBatch, ingestOne, trendData, uniqueName, utcDate } from "../helpers/http.js";
import { dayMs, isoTime } from "../helpers/events.js";

const pastDays = 365;
const namesMax = 20;
const keysMax = 20;
let server: ServerHandle;

beforeAll(async () => {
  // The future window is off by default (the contract accepts years up to 9999): this server sets the
  // production value of 1 day; the days per batch are lowered to 31 to keep the test's batches small.
  server = await startServer({
    env: {
      EVENTIDE_TIMESTAMP_FUTURE_DAYS: "1",
      EVENTIDE_BATCH_DAYS_MAX: "31",
      EVENTIDE_TIMESTAMP_PAST_DAYS: String(pastDays),
      EVENTIDE_WORKSPACE_EVENT_NAMES_MAX: String(namesMax),
      EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX: String(keysMax),
    },
  });
});

afterAll(async () => {
  await server?.stop();
  if (server) removeDataDir(server.dataDir);
});

/** A workspace of its own (its names and keys count against its own caps), once the server knows its key. */
async function freshWorkspace(): Promise<{ apiKey: string; token: string }> {
  const created = await eventideOk(server.dataDir, "workspace", "create", uniqueName("caps"));
  await elapsedUntil(async () => (await ingestBatch(server, created.apiKey, [])).status === 200, 10_000);
  return { apiKey: created.apiKey, token: created.token };
}

type BatchError = { index: number; code: string; message: string };

describe("the timestamp window", () => {
  it("refuses, per event, a timestamp more than a day after the server's time, and stores the others", async () => {
    const event = uniqueName("future");
    const nowMs = Date.now();
    const events = [
      { event, distinctId: "a", timestamp: isoTime(nowMs) },
      { event, distinctId: "b", timestamp: isoTime(nowMs + 2 * dayMs) },
      { event, distinctId: "c", timestamp: "9999-12-31T23:59:59.999Z" },
      { event, distinctId: "d", timestamp: isoTime(nowMs + dayMs / 2) },
    ];
    const body = expectOk(await ingestBatch(server, server.apiKey, events));
    expect(body.accepted).toBe(2);
    expect(body.errors.map((error: BatchError) => error.index)).toEqual([1, 2]);
    for (const error of body.errors) {
      expect(error.code).toBe("invalid_request");
      expect(error.message).toMatch(/^timestamp: .*EVENTIDE_TIMESTAMP_FUTURE_DAYS/);
    }
    // a and d are stored (d shares a's UTC day before noon); b, were it stored, would fall inside this range too.
    expect(await countEvents(server, server.token, event, utcDate(nowMs), utcDate(nowMs + 2 * dayMs))).toBe(2);
  });

  it("refuses a single event dated years ahead with 400 naming timestamp", async () => {
    expectError(await ingestOne(server, server.apiKey, { event: uniqueName("future-one"), distinctId: "u", timestamp: "9000-01-01T00:00:00Z" }), 400, "invalid_request", "timestamp");
  });

  it("refuses a timestamp older than the configured past, and keeps an older one inside it", async () => {
    const event = uniqueName("past");
    const nowMs = Date.now();
    const inside = nowMs - (pastDays - 2) * dayMs;
    const events = [
      { event, distinctId: "a", timestamp: isoTime(nowMs - (pastDays + 2) * dayMs) },
      { event, distinctId: "b", timestamp: isoTime(inside) },
      { event, distinctId: "c", timestamp: "1970-01-01T00:00:00Z" },
    ];
    const body = expectOk(await ingestBatch(server, server.apiKey, events));
    expect(body.accepted).toBe(1);
    expect(body.errors.map((error: BatchError) => error.index)).toEqual([0, 2]);
    for (const error of body.errors) expect(error.message).toMatch(/^timestamp: .*EVENTIDE_TIMESTAMP_PAST_DAYS/);
    expect(await countEvents(server, server.token, event, utcDate(inside))).toBe(1);
  });
});

describe("distinct days per batch", () => {
  it("stores the events of the first 31 distinct days and refuses, per event, those of later new days", async () => {
    const event = uniqueName("days");
    const firstDayMs = Math.floor(Date.now() / dayMs) * dayMs - 100 * dayMs;
    // 40 days, then the first day again: a day already in the batch is never refused.
    const dayOffsets = [...Array.from({ length: 40 }, (_, day) => day), 0];
    const events = dayOffsets.map((day, index) => ({ event, distinctId: `u${index}`, timestamp: isoTime(firstDayMs + day * dayMs + 3_600_000) }));
    const body = expectOk(await ingestBatch(server, server.apiKey, events));
    expect(body.accepted).toBe(32);
    expect(body.errors.map((error: BatchError) => error.index)).toEqual(Array.from({ length: 9 }, (_, index) => 31 + index));
    for (const error of body.errors) expect(error.message).toMatch(/^timestamp: .*31 distinct UTC days.*EVENTIDE_BATCH_DAYS_MAX/);
    expect(await countEvents(server, server.token, event, utcDate(firstDayMs))).toBe(2);
    expect(await countEvents(server, server.token, event, utcDate(firstDayMs + 30 * dayMs))).toBe(1);
    expect(await countEvents(server, server.token, event, utcDate(firstDayMs + 31 * dayMs))).toBe(0);
  });
});

describe("distinct event names per workspace", () => {
  it("refuses, per event, an event bringing a new name past the cap, and keeps taking known names", async () => {
    const workspace = await freshWorkspace();
    const timestamp = isoTime(Date.now());
    const day = timestamp.slice(0, 10);
    const events = [
      ...Array.from({ length: namesMax + 5 }, (_, index) => ({ event: `name-${index}`, distinctId: "u", timestamp })),
      { event: "name-0", distinctId: "v", timestamp },
    ];
    const body = expectOk(await ingestBatch(server, workspace.apiKey, events));
    expect(body.accepted).toBe(namesMax + 1);
    expect(body.errors.map((error: BatchError) => error.index)).toEqual([20, 21, 22, 23, 24]);
    for (const error of body.errors) {
      expect(error.code).toBe("invalid_request");
      expect(error.message).toMatch(/^event: "name-2\d" .*EVENTIDE_WORKSPACE_EVENT_NAMES_MAX/);
    }
    expect(await countEvents(server, workspace.token, "name-0", day)).toBe(2);
    expect(await countEvents(server, workspace.token, "name-19", day)).toBe(1);
    expect(await countEvents(server, workspace.token, "name-20", day)).toBe(0);

    expectError(await ingestOne(server, workspace.apiKey, { event: "one-too-many", distinctId: "u", timestamp }), 400, "invalid_request", /^event: .*EVENTIDE_WORKSPACE_EVENT_NAMES_MAX/);
    expectOk(await ingestOne(server, workspace.apiKey, { event: "name-19", distinctId: "w", timestamp }));
    expect(await countEvents(server, workspace.token, "name-19", day)).toBe(2);
    expect(await countEvents(server, workspace.token, "one-too-many", day)).toBe(0);
  });
});

describe("distinct property keys per workspace", () => {
  it("refuses, per event, an event bringing a new key past the cap, whole, and stores the others", async () => {
    const workspace = await freshWorkspace();
    const timestamp = isoTime(Date.now());
    const day = timestamp.slice(0, 10);
    const keys = (from: number, to: number) => Object.fromEntries(Array.from({ length: to - from }, (_, index) => [`k${from + index}`, index]));
    const events = [
      { event: "wide", distinctId: "a", timestamp, properties: keys(0, 15) },
      { event: "wide", distinctId: "b", timestamp, properties: keys(15, 20) },
      { event: "wide", distinctId: "c", timestamp, properties: { ...keys(0, 3), k20: "new" } },
      { event: "wide", distinctId: "d", timestamp, properties: keys(5, 10) },
    ];
    const body = expectOk(await ingestBatch(server, workspace.apiKey, events));
    expect(body.accepted).toBe(3);
    expect(body.errors).toEqual([{ index: 2, code: "invalid_request", message: expect.stringMatching(/^properties: "k20" .*EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX/) }]);
    expect(await countEvents(server, workspace.token, "wide", day)).toBe(3);
    // Nothing of the refused event was kept: none of its keys counts it.
    const [withK0] = await trendData(server, workspace.token, { event: "wide", dateFrom: day, dateTo: day, filters: [{ property: "k0", op: "is_set" }] });
    expect(withK0.count).toBe(1);
  });
});

describe("active segments between checkpoints", () => {
  it("seals once batches spread over many days have opened the configured number of active segments", async () => {
    const spread = await startServer({
      env: { EVENTIDE_CHECKPOINT_ACTIVE_SEGMENTS_MAX: "50", EVENTIDE_CHECKPOINT_IDLE_MS: "600000", EVENTIDE_CHECKPOINT_INTERVAL_MS: "600000" },
    });
    try {
      const event = uniqueName("spread");
      const firstDayMs = Math.floor(Date.now() / dayMs) * dayMs - 400 * dayMs;
      // 60 distinct days: past the 50 active segments, while rows, bytes and time stay far below their triggers.
      const events = Array.from({ length: 60 }, (_, day) => ({ event, distinctId: `u${day}`, timestamp: isoTime(firstDayMs + day * dayMs) }));
      expect(expectOk(await ingestBatch(spread, spread.apiKey, events)).accepted).toBe(60);
      await elapsedUntil(async () => existsSync(join(spread.dataDir, "_checkpoint.json")), 30_000);
      expect(await countEvents(spread, spread.token, event, utcDate(firstDayMs), utcDate(firstDayMs + 59 * dayMs))).toBe(60);
    } finally {
      await spread.stop();
      removeDataDir(spread.dataDir);
    }
  });
});
