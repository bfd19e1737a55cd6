/**
 * msgpack ingest bodies (msgpack-body.ts) against JSON ones: the same events
 * sent either way validate to the same answer and the same chunk, byte for
 * byte (so the same rows are stored); what JSON cannot hold is refused.
 */
import fc from "fast-check";
import { Packr, pack } from "msgpackr";
import { describe, expect, it } from "vitest";
import { limits } from "../../src/config/limits.js";
import { ChunkBuilder } from "../../src/storage/chunk-codec.js";
import { validateBody, type IngestParser, type IngestShape } from "../../src/ingest/event-validation.js";
import { bodyFormatOf, leadingMsgpackApiKey, msgpackRefusal } from "../../src/json/msgpack-body.js";

const receivedAtMs = Date.UTC(2024, 4, 1, 12);

function validate(bytes: Uint8Array, shape: IngestShape, parser: IngestParser) {
  const builder = new ChunkBuilder();
  const result = validateBody(bytes, false, shape, receivedAtMs, () => ({ builder, chunkIndex: 0 }), parser);
  return { result, chunk: Buffer.from(builder.finish()).toString("hex") };
}

function expectSameAsJson(body: Record<string, unknown>, shape: IngestShape): void {
  const json = validate(Buffer.from(JSON.stringify(body), "utf8"), shape, "auto");
  const msgpack = validate(pack(body), shape, "msgpack");
  expect(msgpack, JSON.stringify(body).slice(0, 200)).toEqual(json);
}

const big = "x".repeat(limits.propertiesBytesMax);
const events: Array<Record<string, unknown>> = [
  { event: "signup", distinctId: "u1" },
  { event: "signup", distinctId: 42 },
  { event: "signup", distinctId: -0 },
  { event: "signup", distinctId: 1.5e300 },
  { event: "signup", distinctId: 2 ** 53 + 2 },
  { event: "signup", distinctId: 0.1 },
  { event: "signup", distinctId: "" },
  { event: "", distinctId: "u1" },
  { event: "e".repeat(limits.eventNameLengthMax + 1), distinctId: "u1" },
  { event: "😀".repeat(100), distinctId: "é".repeat(200) },
  { event: "signup" },
  { event: 7, distinctId: "u1" },
  { event: "signup", distinctId: true },
  { event: "signup", distinctId: "u1", timestamp: "2024-05-01T12:00:00Z" },
  { event: "signup", distinctId: "u1", timestamp: "2024-05-01T12:00:00.123+02:00" },
  { event: "signup", distinctId: "u1", timestamp: "2024-02-30T12:00:00Z" },
  { event: "signup", distinctId: "u1", timestamp: 1714564800000 },
  { event: "signup", distinctId: "u1", timestamp: null },
  { event: "signup", distinctId: "u1", properties: { plan: "pro", n: 3, f: 2.5, yes: true, no: false, none: null, nested: { a: [1, 2, { b: null }] } } },
  { event: "signup", distinctId: "u1", properties: { "10": "integer-like keys come first", b: 1, "2": 2 } },
  { event: "signup", distinctId: "u1", properties: { big: 1e21, small: 1e-7, negative: -0, huge: 2 ** 64 } },
  { event: "signup", distinctId: "u1", properties: [] },
  { event: "signup", distinctId: "u1", properties: "text" },
  { event: "signup", distinctId: "u1", properties: { big } },
  { event: "signup", distinctId: "u1", uuid: "0190e0a4-8c1d-7b4e-9d2a-3f5e6a7b8c9d" },
  { event: "signup", distinctId: "u1", uuid: "0190E0A4-8C1D-7B4E-9D2A-3F5E6A7B8C9D" },
  { event: "signup", distinctId: "u1", uuid: "not-a-uuid" },
  { event: "signup", distinctId: "u1", unknownField: { ignored: true } },
];

describe("a msgpack body validates as the same body in JSON", () => {
  it("one event at a time, on every sample event", () => {
    for (const event of events) expectSameAsJson({ apiKey: "ek_sample", ...event }, "single");
  });

  it("as one batch of every sample event, repeated uuids included", () => {
    const repeated = { event: "again", distinctId: "u", uuid: "0190e0a4-8c1d-7b4e-9d2a-3f5e6a7b8c9d" };
    expectSameAsJson({ apiKey: "ek_sample", events: [...events, repeated, repeated, 5, null, "text"] }, "batch");
  });

  it("for envelope errors: no apiKey, events not an array, too many events, an empty batch", () => {
    expectSameAsJson({ events: [] }, "batch");
    expectSameAsJson({ apiKey: 5, events: [] }, "batch");
    expectSameAsJson({ apiKey: "k", events: "no" }, "batch");
    expectSameAsJson({ apiKey: "k" }, "batch");
    expectSameAsJson({ apiKey: "k", events: [] }, "batch");
    expectSameAsJson({ apiKey: "k", events: Array.from({ length: limits.batchEventsMax + 1 }, () => ({ event: "e", distinctId: "u" })) }, "batch");
  });

  it("on generated events", () => {
    const text = fc.oneof(fc.string({ maxLength: 4 }), fc.string({ minLength: 199, maxLength: 202 }));
    const field = fc.oneof(text, fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null), fc.dictionary(fc.string({ maxLength: 3 }), fc.jsonValue({ maxDepth: 2 })));
    const event = fc.record(
      { event: field, distinctId: field, timestamp: fc.oneof(field, fc.date({ min: new Date(0), max: new Date(receivedAtMs), noInvalidDate: true }).map((date) => date.toISOString())), properties: field, uuid: fc.oneof(field, fc.uuid()) },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(fc.array(event, { maxLength: 20 }), (sample) => {
        // JSON has no __proto__ trouble to speak of here: fc's dictionaries may hold that key, which msgpack refuses (below).
        const body = { apiKey: "ek_sample", events: sample };
        if (JSON.stringify(body).includes('"__proto__"')) return;
        expectSameAsJson(body, "batch");
      }),
      { numRuns: 300, seed: 22 },
    );
  });
});

describe("a msgpack body JSON could not have written", () => {
  const event = { apiKey: "k", event: "e", distinctId: "u" };
  const withValue = (value: unknown) => pack({ ...event, properties: { value } });
  const cases: Array<[string, Uint8Array]> = [
    ["bin", withValue(Buffer.from([1, 2, 3]))],
    ["the msgpack timestamp ext", pack({ ...event, timestamp: new Date(receivedAtMs) })],
    ["a fixext", Buffer.from([0x81, 0xa1, 0x61, 0xd4, 0x72, 0x00])],
    ["a msgpackr record", new Packr({ useRecords: true }).pack({ ...event, properties: { plan: "pro" } })],
    ["msgpackr's bundled strings", new Packr({ bundleStrings: true }).pack({ ...event, properties: { plan: "pro".repeat(10) } })],
    ["a map with a number key", pack(new Map<unknown, unknown>([["apiKey", "k"], [1, "x"]]))],
    ["NaN", withValue(Number.NaN)],
    ["an infinity", withValue(Number.POSITIVE_INFINITY)],
    ["a float32 NaN", Buffer.from([0x81, 0xa1, 0x61, 0xca, 0x7f, 0xc0, 0x00, 0x00])],
    ["the key __proto__", Buffer.concat([Buffer.from([0x81, 0xa9]), Buffer.from("__proto__"), Buffer.from([0x01])])],
    ["bytes after the value", Buffer.concat([pack(event), Buffer.from([0xc0])])],
    ["a truncated value", pack(event).subarray(0, 10)],
    ["an empty body", new Uint8Array()],
    ["the unused byte 0xc1", Buffer.from([0xc1])],
    ["invalid UTF-8 in a string", Buffer.from([0x81, 0xa1, 0x61, 0xa2, 0xc3, 0x28])],
    // JSON can write one as an escape (answered per event); a msgpack str is UTF-8, which cannot hold one.
    ["a lone surrogate (as msgpackr packs one)", pack({ ...event, event: "lone \ud800 surrogate" })],
    ["an array of 2^32-1 items in a few bytes", Buffer.from([0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0])],
    ["a map of 2^32-1 entries in a few bytes", Buffer.from([0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 0x61, 0xc0])],
    ["arrays nested past the limit", Buffer.concat([Buffer.from([0x81, 0xa1, 0x61]), Buffer.alloc(limits.msgpackNestingDepthMax, 0x91), Buffer.from([0xc0])])],
  ];

  it.each(cases)("refuses %s as invalid_json, for both shapes", (_, bytes) => {
    expect(msgpackRefusal(bytes)).toBeTypeOf("string");
    for (const shape of ["single", "batch"] as const) {
      const { result } = validate(bytes, shape, "msgpack");
      expect(result).toMatchObject({ kind: "rejected", error: { code: "invalid_json" } });
    }
  });

  it("refuses a body that is not a map as JSON refuses one that is not an object", () => {
    for (const value of [[1, 2], "text", 5, null]) {
      expect(validate(pack(value), "single", "msgpack").result).toMatchObject({ kind: "rejected", error: { code: "invalid_json" } });
      expect(validate(Buffer.from(JSON.stringify(value)), "single", "auto").result).toMatchObject({ kind: "rejected", error: { code: "invalid_json" } });
    }
  });

  it("takes nesting up to the limit", () => {
    const deepest = Buffer.concat([Buffer.from([0x81, 0xa1, 0x61]), Buffer.alloc(limits.msgpackNestingDepthMax - 1, 0x91), Buffer.from([0xc0])]);
    expect(msgpackRefusal(deepest)).toBeUndefined();
  });
});

describe("the content type and the opening key", () => {
  it("reads application/msgpack and application/x-msgpack, parameters and case aside; anything else is JSON", () => {
    expect(bodyFormatOf("application/msgpack")).toBe("msgpack");
    expect(bodyFormatOf("Application/X-MsgPack; charset=binary")).toBe("msgpack");
    expect(bodyFormatOf("application/json")).toBe("json");
    expect(bodyFormatOf("")).toBe("json");
    expect(bodyFormatOf("text/plain")).toBe("json");
  });

  it("finds the apiKey a msgpack batch opens with, and only that", () => {
    expect(leadingMsgpackApiKey(pack({ apiKey: "ek_abc", events: [] }), 256)).toBe("ek_abc");
    expect(leadingMsgpackApiKey(pack({ events: [], apiKey: "ek_abc" }), 256)).toBeUndefined();
    expect(leadingMsgpackApiKey(pack({ apiKey: 5, events: [] }), 256)).toBeUndefined();
    expect(leadingMsgpackApiKey(pack({ apiKey: "ek_abc" }).subarray(0, 9), 256)).toBeUndefined();
  });
});
