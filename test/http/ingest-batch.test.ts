/**
 * SPEC §2 `/ingest/batch`: the envelope is all-or-nothing, each event is then
 * judged alone, errors carry the event's index (at most the first 100), and
 * the 1 000-event limit holds at exactly 1 000 and refuses 1 001 whole.
 */
import { describe, expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import { countEvents, expectError, expectOk, ingestBatch, ingestOne, send, sendJson, uniqueName } from "../helpers/http.js";

const server = serverPerFile();

const day = "2024-06-01";
const at = `${day}T08:00:00Z`;

describe("per-event errors", () => {
  it("stores the valid events, skips the invalid ones and reports each by index with a message naming the field", async () => {
    const event = uniqueName("mixed");
    const events = [
      { event, distinctId: "a", timestamp: at },
      { event: "", distinctId: "b", timestamp: at },
      5,
      null,
      [{ event, distinctId: "c" }],
      { event, timestamp: at },
      { event, distinctId: "d", timestamp: at },
      { event, distinctId: "e", timestamp: at, properties: [] },
      { event, distinctId: "f", timestamp: "2024-02-30T00:00:00Z" },
      { event, distinctId: "g", timestamp: at, uuid: "nope" },
      "event",
    ];
    const body = expectOk(await ingestBatch(server, server.apiKey, events));
    expect(Object.keys(body).sort()).toEqual(["accepted", "errors", "ok"]);
    expect(body.ok).toBe(true);
    expect(body.accepted).toBe(2);
    expect(body.errors.map((error: { index: number }) => error.index)).toEqual([1, 2, 3, 4, 5, 7, 8, 9, 10]);
    for (const error of body.errors) {
      expect(Object.keys(error).sort()).toEqual(["code", "index", "message"]);
      expect(error.code).toBe("invalid_request");
      expect(error.message).toBeTypeOf("string");
    }
    const messageAt = (index: number) => body.errors.find((error: { index: number }) => error.index === index).message;
    expect(messageAt(1)).toContain("event");
    expect(messageAt(5)).toContain("distinctId");
    expect(messageAt(7)).toContain("properties");
    expect(messageAt(8)).toContain("timestamp");
    expect(messageAt(9)).toContain("uuid");
    expect(await countEvents(server, server.token, event, day)).toBe(2);
  });

  it("omits errors when every event is valid", async () => {
    const event = uniqueName("all-valid");
    const answer = await ingestBatch(server, server.apiKey, [
      { event, distinctId: "a", timestamp: at },
      { event, distinctId: "b", timestamp: at },
    ]);
    expect(expectOk(answer)).toEqual({ ok: true, accepted: 2 });
    expect(answer.body).not.toHaveProperty("errors");
  });

  it("answers an empty events array with exactly {ok:true, accepted:0}", async () => {
    const answer = await ingestBatch(server, server.apiKey, []);
    expect(expectOk(answer)).toEqual({ ok: true, accepted: 0 });
    expect(Object.keys(answer.body)).toHaveLength(2);
  });

  it("lists at most the first 100 errors, in index order, and still stores every valid event", async () => {
    const event = uniqueName("many-errors");
    const events: unknown[] = [];
    const invalidIndexes: number[] = [];
    for (let index = 0; index < 160; index++) {
      if (index % 16 === 0) {
        events.push({ event, distinctId: `u${index}`, timestamp: at });
      } else {
        invalidIndexes.push(index);
        events.push({ event, distinctId: "", timestamp: at });
      }
    }
    const body = expectOk(await ingestBatch(server, server.apiKey, events));
    expect(body.accepted).toBe(10);
    expect(body.errors).toHaveLength(100);
    expect(body.errors.map((error: { index: number }) => error.index)).toEqual(invalidIndexes.slice(0, 100));
    expect(await countEvents(server, server.token, event, day)).toBe(10);
  });

  it("answers 200 with accepted 0 when all 1 000 events are invalid", async () => {
    const events = Array.from({ length: 1000 }, () => ({ event: "x", distinctId: null }));
    const body = expectOk(await ingestBatch(server, server.apiKey, events));
    expect(body.accepted).toBe(0);
    expect(body.errors).toHaveLength(100);
    expect(body.errors[99].index).toBe(99);
  });
});

describe("batch size", () => {
  it("accepts exactly 1 000 events and stores all of them", async () => {
    const event = uniqueName("thousand");
    const events = Array.from({ length: 1000 }, (_, index) => ({ event, distinctId: `u${index % 37}`, timestamp: at }));
    expect(expectOk(await ingestBatch(server, server.apiKey, events))).toEqual({ ok: true, accepted: 1000 });
    expect(await countEvents(server, server.token, event, day)).toBe(1000);
  });

  it("refuses 1 001 valid events with 413 batch_too_large and stores none of them", async () => {
    const event = uniqueName("thousand-and-one");
    const events = Array.from({ length: 1001 }, (_, index) => ({ event, distinctId: `u${index % 37}`, timestamp: at }));
    expectError(await ingestBatch(server, server.apiKey, events), 413, "batch_too_large");
    expect(await countEvents(server, server.token, event, day)).toBe(0);
  });
});

describe("the envelope", () => {
  it.each([
    ["missing", undefined],
    ["an object", { 0: { event: "e", distinctId: "u" } }],
    ["a string", "[]"],
    ["a number", 1],
    ["null", null],
  ])("refuses events that are %s with 400 invalid_request naming events", async (_, events) => {
    expectError(await sendJson(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, events }), 400, "invalid_request", "events");
  });

  it("stores nothing when events is not an array, even if it holds valid events", async () => {
    const event = uniqueName("envelope");
    const events = { 0: { event, distinctId: "u", timestamp: at }, length: 1 };
    expectError(await sendJson(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, events }), 400, "invalid_request", "events");
    expect(await countEvents(server, server.token, event, day)).toBe(0);
  });

  it.each([
    ["an array", "[]"],
    ["an array of events", '[{"event":"e","distinctId":"u"}]'],
    ["a string", '"events"'],
    ["a number", "42"],
    ["null", "null"],
    ["empty", ""],
    ["truncated JSON", '{"apiKey":"k","events":['],
    ["JSON followed by garbage", '{"events":[]} x'],
  ])("refuses a body that is %s with 400 invalid_json, on both ingest endpoints", async (_, body) => {
    expectError(await send(`${server.ingestUrl}/ingest/batch`, { body }), 400, "invalid_json");
    expectError(await send(`${server.ingestUrl}/ingest`, { body }), 400, "invalid_json");
  });

  it("refuses a batch without an apiKey, or with a token in its place, with 401 and stores nothing", async () => {
    const event = uniqueName("no-key");
    const events = [{ event, distinctId: "u", timestamp: at }];
    expectError(await sendJson(`${server.ingestUrl}/ingest/batch`, { events }), 401, "unauthorized");
    expectError(await ingestBatch(server, "", events), 401, "unauthorized");
    expectError(await ingestBatch(server, server.token, events), 401, "unauthorized");
    expect(await countEvents(server, server.token, event, day)).toBe(0);
  });
});

describe("single /ingest", () => {
  it("answers exactly {ok:true} once stored", async () => {
    const event = uniqueName("single");
    const answer = await ingestOne(server, server.apiKey, { event, distinctId: "u", timestamp: at });
    expect(expectOk(answer)).toEqual({ ok: true });
    expect(await countEvents(server, server.token, event, day)).toBe(1);
  });

  it("answers 400 for an invalid event and stores nothing", async () => {
    const event = uniqueName("single-invalid");
    expectError(await ingestOne(server, server.apiKey, { event, timestamp: at }), 400, "invalid_request", "distinctId");
    expect(await countEvents(server, server.token, event, day)).toBe(0);
  });

  it("treats a body in batch form as one event without a name", async () => {
    expectError(await sendJson(`${server.ingestUrl}/ingest`, { apiKey: server.apiKey, events: [{ event: "e", distinctId: "u" }] }), 400, "invalid_request", "event");
  });
});
