/**
 * A batch whose apiKey is unknown or missing is refused 401 after its syntax
 * is checked, without being parsed, wherever the key sits and whether the body
 * is gzip or not (the cost is a measurement, not timed here). SPEC §1's order
 * still holds: a body that is not JSON answers 400 first, an unknown key 401
 * before the batch size 413; and the key that counts is JSON.parse's, the last
 * `apiKey` member.
 */
import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import { countEvents, expectError, expectOk, mebibyte, send, uniqueName } from "../helpers/http.js";

const madeUpKey = "made-up-key-0123456789abcdefghijklmnopqrstu";
const day = "2024-06-03";
const server = serverPerFile();

/** `count` events with nested property values (the byte scanner leaves those to a full parse), as JSON text. */
function eventsText(event: string, count: number, keysPerEvent: number): string {
  const properties = Object.fromEntries(Array.from({ length: keysPerEvent }, (_, key) => [`key${key}`, { value: key, text: `text-${key}` }]));
  return JSON.stringify(Array.from({ length: count }, (_, index) => ({ event, distinctId: `u${index}`, timestamp: `${day}T10:00:00Z`, properties })));
}

function post(body: string, gzip = false) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (gzip) headers["content-encoding"] = "gzip";
  return send(`${server.ingestUrl}/ingest/batch`, { method: "POST", body: gzip ? gzipSync(body) : body, headers });
}

describe("a batch opening with an unknown apiKey", () => {
  const hugeEvents = eventsText("huge", 1000, 500);

  it("is refused 401 when the body is 19 MiB of valid JSON", async () => {
    const body = `{"apiKey":${JSON.stringify(madeUpKey)},"events":${hugeEvents}}`;
    expect(body.length).toBeGreaterThan(18 * mebibyte);
    expectError(await post(body), 401, "unauthorized", "apiKey");
  });

  it("is refused 400 invalid_json when the body's last byte breaks its syntax, as SPEC §1 checks JSON first", async () => {
    expectError(await post(`{"apiKey":${JSON.stringify(madeUpKey)},"events":${hugeEvents}`), 400, "invalid_json");
    expectError(await post(`{"apiKey":${JSON.stringify(madeUpKey)},"events":[}`), 400, "invalid_json");
  });

  it("is refused 401 rather than 413 when it holds more events than a batch may", async () => {
    expectError(await post(`{"apiKey":${JSON.stringify(madeUpKey)},"events":${eventsText("many", 1001, 1)}}`), 401, "unauthorized");
  });

  it("is refused 401 when a later apiKey member is not a string", async () => {
    expectError(await post(`{"apiKey":${JSON.stringify(madeUpKey)},"events":[],"apiKey":5}`), 401, "unauthorized");
  });

  it("is stored when a later apiKey member, the one JSON.parse keeps, is the workspace's", async () => {
    const event = uniqueName("last-key");
    const body = `{"apiKey":${JSON.stringify(madeUpKey)},"events":${eventsText(event, 3, 2)},"apiKey":${JSON.stringify(server.apiKey)}}`;
    expect(expectOk(await post(body))).toEqual({ ok: true, accepted: 3 });
    expect(await countEvents(server, server.token, event, day)).toBe(3);
  });
});

describe("a batch whose apiKey is not the first member", () => {
  const events = eventsText("later", 200, 20);

  it("is refused 401 when its key, written last, is unknown, or when it has none", async () => {
    expectError(await post(`{"events":${events},"apiKey":${JSON.stringify(madeUpKey)}}`), 401, "unauthorized", "apiKey");
    expectError(await post(`{"events":${events}}`), 401, "unauthorized", "apiKey");
    expectError(await post(`{"events":${events},"apiKey":null}`), 401, "unauthorized", "apiKey");
  });

  it("is refused 400 invalid_json, not 401, when it is not JSON or not an object", async () => {
    expectError(await post(`{"events":${events},"apiKey":${JSON.stringify(madeUpKey)}`), 400, "invalid_json");
    expectError(await post(`[{"apiKey":${JSON.stringify(madeUpKey)}}]`), 400, "invalid_json");
  });

  it("is stored when its key, written last or with an escape, is the workspace's", async () => {
    const event = uniqueName("key-last");
    expect(expectOk(await post(`{"events":${eventsText(event, 4, 3)},"apiKey":${JSON.stringify(server.apiKey)}}`))).toEqual({ ok: true, accepted: 4 });
    const escaped = `"\\u00${server.apiKey.charCodeAt(0).toString(16)}${server.apiKey.slice(1)}"`;
    expect(expectOk(await post(`{"apiKey":${escaped},"events":${eventsText(event, 2, 3)}}`))).toEqual({ ok: true, accepted: 2 });
    expect(await countEvents(server, server.token, event, day)).toBe(6);
  });
});

describe("a gzip batch", () => {
  it("is refused 401 for an unknown key, first or last, 400 when it inflates to something not JSON, and stored for the workspace's key", async () => {
    const events = eventsText("gzip", 200, 20);
    expectError(await post(`{"apiKey":${JSON.stringify(madeUpKey)},"events":${events}}`, true), 401, "unauthorized");
    expectError(await post(`{"events":${events},"apiKey":${JSON.stringify(madeUpKey)}}`, true), 401, "unauthorized");
    expectError(await post(`{"apiKey":${JSON.stringify(madeUpKey)},"events":${events}`, true), 400, "invalid_json");
    const event = uniqueName("gzip-stored");
    expect(expectOk(await post(`{"apiKey":${JSON.stringify(server.apiKey)},"events":${eventsText(event, 5, 3)}}`, true))).toEqual({ ok: true, accepted: 5 });
    expect(expectOk(await post(`{"events":${eventsText(event, 5, 3)},"apiKey":${JSON.stringify(server.apiKey)}}`, true))).toEqual({ ok: true, accepted: 5 });
    expect(await countEvents(server, server.token, event, day)).toBe(10);
  });
});
