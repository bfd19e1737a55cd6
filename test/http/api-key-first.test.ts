/**
 * A batch that opens with an unknown apiKey is refused 401 after its syntax is
 * checked, without being parsed (its cost is measured in the README, not timed
 * here). SPEC §1's order still holds: a body that is not JSON answers 400
 * first, an unknown key 401 before the batch size 413; and the key that counts
 * is JSON.parse's, the last `apiKey` member.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";
import { countEvents, expectError, expectOk, mebibyte, send, uniqueName } from "../helpers/http.js";

const madeUpKey = "made-up-key-0123456789abcdefghijklmnopqrstu";
const day = "2024-06-03";
let server: ServerHandle;

beforeAll(async () => {
  server = await startServer();
});

afterAll(async () => {
  await server?.stop();
  if (server) removeDataDir(server.dataDir);
});

/** `count` events with nested property values (the byte scanner leaves those to a full parse), as JSON text. */
function eventsText(event: string, count: number, keysPerEvent: number): string {
  const properties = Object.fromEntries(Array.from({ length: keysPerEvent }, (_, key) => [`key${key}`, { value: key, text: `text-${key}` }]));
  return JSON.stringify(Array.from({ length: count }, (_, index) => ({ event, distinctId: `u${index}`, timestamp: `${day}T10:00:00Z`, properties })));
}

function post(body: string) {
  return send(`${server.ingestUrl}/ingest/batch`, { method: "POST", body, headers: { "content-type": "application/json" } });
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
