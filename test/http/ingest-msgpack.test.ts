/**
 * msgpack bodies (Content-Type: application/msgpack) on both ingest endpoints,
 * through the real server: every SPEC §1/§2 error has a msgpack twin with the
 * JSON body's status and code, and the same events sent either way are stored
 * alike (queried back with breakdowns over every property).
 */
import { gzipSync } from "node:zlib";
import { pack } from "msgpackr";
import { describe, expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import { expectError, expectOk, mebibyte, send, sendJson, uniqueName, type HttpAnswer } from "../helpers/http.js";

const server = serverPerFile();

const day = "2024-07-01";
const at = `${day}T08:00:00Z`;

function sendMsgpack(path: string, value: unknown, options: { gzip?: boolean; bytes?: Uint8Array } = {}): Promise<HttpAnswer> {
  const packed = options.bytes ?? pack(value);
  const headers: Record<string, string> = { "content-type": "application/msgpack" };
  if (options.gzip) headers["content-encoding"] = "gzip";
  return send(`${server.ingestUrl}${path}`, { headers, body: options.gzip ? gzipSync(packed) : packed });
}

function sendJsonBody(path: string, value: unknown, options: { gzip?: boolean } = {}): Promise<HttpAnswer> {
  if (!options.gzip) return sendJson(`${server.ingestUrl}${path}`, value);
  return send(`${server.ingestUrl}${path}`, { headers: { "content-type": "application/json", "content-encoding": "gzip" }, body: gzipSync(JSON.stringify(value)) });
}

/** Sends `value` both ways and expects the same status, and the same code or the same 200 body. */
async function expectTwins(path: string, value: unknown, status: number, code?: string, options: { gzip?: boolean } = {}): Promise<HttpAnswer> {
  const json = await sendJsonBody(path, value, options);
  const msgpack = await sendMsgpack(path, value, options);
  if (code === undefined) {
    expect(json.status, json.text).toBe(status);
    expect(msgpack.text).toBe(json.text);
  } else {
    expectError(json, status, code);
    expectError(msgpack, status, code);
  }
  return msgpack;
}

const event = (name: string) => ({ event: name, distinctId: "u", timestamp: at });

describe("/ingest with a msgpack body", () => {
  it("stores the event and answers as JSON does, gzip'd or not", async () => {
    await expectTwins("/ingest", { apiKey: server.apiKey, ...event(uniqueName("single")) }, 200);
    await expectTwins("/ingest", { apiKey: server.apiKey, ...event(uniqueName("single-gzip")) }, 200, undefined, { gzip: true });
  });

  it.each([
    ["a body that is not a map", [1, 2], 400, "invalid_json"],
    ["no apiKey", event("e"), 401, "unauthorized"],
    ["an apiKey that is not a string", { apiKey: 5, ...event("e") }, 401, "unauthorized"],
    ["an unknown apiKey", { apiKey: "ek_unknown", ...event("e") }, 401, "unauthorized"],
    ["an event without distinctId", { apiKey: "KEY", event: "e" }, 400, "invalid_request"],
    ["a timestamp that is a number", { apiKey: "KEY", ...event("e"), timestamp: 1714564800000 }, 400, "invalid_request"],
    ["properties that are an array", { apiKey: "KEY", ...event("e"), properties: [1] }, 400, "invalid_request"],
    ["an invalid uuid", { apiKey: "KEY", ...event("e"), uuid: "nope" }, 400, "invalid_request"],
    ["properties over 64 KiB", { apiKey: "KEY", ...event("e"), properties: { big: "x".repeat(70_000) } }, 400, "invalid_request"],
  ] as const)("answers %s as JSON does", async (_, value, status, code) => {
    const body = JSON.parse(JSON.stringify(value).replace('"KEY"', JSON.stringify(server.apiKey)));
    const json = await sendJsonBody("/ingest", body);
    const msgpack = await sendMsgpack("/ingest", body);
    expectError(json, status, code);
    expectError(msgpack, status, code);
    // An event's error names its field in the same words; a body's error names its format.
    if (code === "invalid_request") expect(msgpack.body.error.message).toBe(json.body.error.message);
  });

  it("refuses invalid msgpack and msgpack JSON cannot hold as invalid_json, before the apiKey", async () => {
    expectError(await send(`${server.ingestUrl}/ingest`, { body: "{", headers: { "content-type": "application/json" } }), 400, "invalid_json");
    expectError(await sendMsgpack("/ingest", undefined, { bytes: pack({ apiKey: server.apiKey, ...event("e") }).subarray(0, 12) }), 400, "invalid_json");
    expectError(await sendMsgpack("/ingest", { apiKey: "ek_unknown", ...event("e"), properties: { blob: Buffer.from([1]) } }), 400, "invalid_json");
    expectError(await sendMsgpack("/ingest", { apiKey: server.apiKey, ...event("e"), timestamp: new Date(at) }), 400, "invalid_json");
    expectError(await sendMsgpack("/ingest", { apiKey: server.apiKey, ...event("e"), properties: { n: Number.NaN } }), 400, "invalid_json");
  });

  it("applies the 1 MiB body limit, after decompression for gzip", async () => {
    const padded = { apiKey: server.apiKey, ...event(uniqueName("big")), pad: "x".repeat(mebibyte) };
    await expectTwins("/ingest", padded, 413, "payload_too_large");
    await expectTwins("/ingest", padded, 413, "payload_too_large", { gzip: true });
  });
});

describe("/ingest/batch with a msgpack body", () => {
  it("answers a batch with invalid events and repeated uuids as JSON does, gzip'd or not", async () => {
    const uuid = "0190e0a4-8c1d-7b4e-9d2a-3f5e6a7b8c9d";
    const events = (name: string) => [event(name), { event: name }, 5, { ...event(name), uuid }, { ...event(name), uuid }, { ...event(name), timestamp: "yesterday" }];
    const answer = await expectTwins("/ingest/batch", { apiKey: server.apiKey, events: events(uniqueName("batch")) }, 200);
    expect(answer.body).toMatchObject({ ok: true, accepted: 3 });
    expect(answer.body.errors.map((error: { index: number }) => error.index)).toEqual([1, 2, 5]);
    await expectTwins("/ingest/batch", { apiKey: server.apiKey, events: events(uniqueName("batch-gzip")) }, 200, undefined, { gzip: true });
  });

  it.each([
    ["a body that is not a map", "text", 400, "invalid_json"],
    ["no apiKey", { events: [] }, 401, "unauthorized"],
    ["an unknown apiKey first", { apiKey: "ek_unknown", events: [] }, 401, "unauthorized"],
    ["an unknown apiKey last", { events: [], apiKey: "ek_unknown" }, 401, "unauthorized"],
    ["events that are not an array", { apiKey: "KEY", events: {} }, 400, "invalid_request"],
    ["no events", { apiKey: "KEY" }, 400, "invalid_request"],
    ["1 001 events", { apiKey: "KEY", events: Array.from({ length: 1001 }, () => event("e")) }, 413, "batch_too_large"],
  ] as const)("answers %s as JSON does", async (_, value, status, code) => {
    const body = JSON.parse(JSON.stringify(value).replace('"KEY"', JSON.stringify(server.apiKey)));
    await expectTwins("/ingest/batch", body, status, code);
    await expectTwins("/ingest/batch", body, status, code, { gzip: true });
  });

  it("takes a known apiKey written after the events (read by a worker, then parsed)", async () => {
    await expectTwins("/ingest/batch", { events: [event(uniqueName("key-last"))], apiKey: server.apiKey }, 200);
    await expectTwins("/ingest/batch", { events: [event(uniqueName("key-last-gzip"))], apiKey: server.apiKey }, 200, undefined, { gzip: true });
  });

  it("applies the 20 MiB body limit, after decompression for gzip", async () => {
    const padded = { apiKey: server.apiKey, events: [event(uniqueName("big"))], pad: "x".repeat(20 * mebibyte) };
    await expectTwins("/ingest/batch", padded, 413, "payload_too_large", { gzip: true });
  });

  it("stores the same events as JSON: same counts, same users, same property values", async () => {
    const names = { json: uniqueName("stored-json"), msgpack: uniqueName("stored-msgpack") };
    const properties = (index: number) => ({ plan: ["free", "pro"][index % 2], price: index * 1.25, big: 2 ** 60 + index, flag: index % 3 === 0, nested: { list: [index, "x", null] }, none: null, "7": "integer-like" });
    const batch = (name: string) => Array.from({ length: 50 }, (_, index) => ({ event: name, distinctId: index % 7 === 0 ? index : `user-${index % 11}`, timestamp: `${day}T${String(index % 24).padStart(2, "0")}:00:00.${String(index).padStart(3, "0")}Z`, properties: properties(index) }));
    expectOk(await sendJsonBody("/ingest/batch", { apiKey: server.apiKey, events: batch(names.json) }));
    expectOk(await sendMsgpack("/ingest/batch", { apiKey: server.apiKey, events: batch(names.msgpack) }));
    for (const single of [0, 1]) {
      expectOk(await sendJsonBody("/ingest", { apiKey: server.apiKey, ...batch(names.json)[single] }));
      expectOk(await sendMsgpack("/ingest", { apiKey: server.apiKey, ...batch(names.msgpack)[single] }));
    }
    for (const breakdown of ["plan", "price", "big", "flag", "nested", "none", "7"]) {
      for (const math of ["total", "unique"]) {
        const answers = await Promise.all(
          [names.json, names.msgpack].map((name) => sendJson(`${server.queryUrl}/api/v1/query/trend`, { event: name, dateFrom: day, dateTo: day, groupBy: "hour", math, breakdown, breakdownLimit: 1000 }, { token: server.token })),
        );
        expect(answers[0].status, answers[0].text).toBe(200);
        expect(answers[1].body, `${breakdown} ${math}`).toEqual(answers[0].body);
      }
    }
  });
});
