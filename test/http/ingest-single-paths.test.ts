/**
 * Single events take one of two ways through the server: small plain bodies
 * are read by the byte scanner on the main thread; gzipped or larger ones
 * (over 4 KiB), and small ones the scanner leaves (nested property values,
 * escapes, invalid events), by a worker. Sent together, in the same turns of
 * the event loop, every body must get its own answer and every valid event be
 * stored once, whichever way it and its uuid repeats went.
 */
import { randomUUID } from "node:crypto";
import { gzipSync } from "node:zlib";
import { pack } from "msgpackr";
import { describe, expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import { countEvents, expectError, paddedJson, send, uniqueName, type HttpAnswer } from "../helpers/http.js";
import { Random } from "../helpers/random.js";

const server = serverPerFile();
const day = "2024-08-14";

type Way = "plain" | "nested" | "gzip" | "large" | "msgpack" | "msgpack-gzip";
const ways: Way[] = ["plain", "nested", "gzip", "large", "msgpack", "msgpack-gzip"];

function sendSingle(way: Way, value: Record<string, unknown>): Promise<HttpAnswer> {
  const msgpack = way === "msgpack" || way === "msgpack-gzip";
  const bytes = msgpack ? pack(value) : Buffer.from(way === "large" ? paddedJson(value, 6000) : JSON.stringify(value));
  const headers: Record<string, string> = { "content-type": msgpack ? "application/msgpack" : "application/json" };
  const gzip = way === "gzip" || way === "msgpack-gzip";
  if (gzip) headers["content-encoding"] = "gzip";
  return send(`${server.ingestUrl}/ingest`, { headers, body: gzip ? gzipSync(bytes) : bytes });
}

describe("single events sent small and plain, gzipped, large and as msgpack, all at once", () => {
  it("answers each body as its own and stores each valid event once", async () => {
    const random = new Random(20261128);
    const pick = <T>(items: readonly T[]): T => items[random.integer(0, items.length - 1)];
    const name = uniqueName("paths");
    const uuids = Array.from({ length: 40 }, () => randomUUID());
    type Sent = { way: Way; kind: "valid" | "invalid" | "unknown-key"; uuid?: string };
    const sent: Sent[] = [];
    const requests: Array<Promise<HttpAnswer>> = [];
    for (let index = 0; index < 300; index++) {
      const way = pick(ways);
      const roll = random.next();
      const kind = roll < 0.1 ? "invalid" : roll < 0.18 ? "unknown-key" : "valid";
      // Half the valid events carry one of 40 uuids, so repeats go both ways, often in one turn.
      const uuid = kind === "valid" && random.chance(0.5) ? pick(uuids) : undefined;
      const event: Record<string, unknown> = {
        apiKey: kind === "unknown-key" ? "ek_not_a_key" : server.apiKey,
        event: name,
        timestamp: `${day}T10:00:00Z`,
        // "nested": small and plain, but the byte scanner leaves it (a nested value, an escape).
        properties: way === "nested" ? { way, index, nested: { list: [1, { quote: 'a"b' }] } } : { way, index },
      };
      if (kind !== "invalid") event.distinctId = `user-${index % 17}`;
      if (uuid !== undefined) event.uuid = uuid;
      sent.push({ way, kind, uuid });
      requests.push(sendSingle(way, event));
    }
    const answers = await Promise.all(requests);
    for (let index = 0; index < sent.length; index++) {
      const { way, kind } = sent[index];
      const answer = answers[index];
      if (kind === "valid") {
        expect(answer.status, `${way} #${index}: ${answer.text}`).toBe(200);
        expect(answer.body).toEqual({ ok: true });
      } else if (kind === "invalid") expectError(answer, 400, "invalid_request", /distinctId/);
      else expectError(answer, 401, "unauthorized");
    }
    const withoutUuid = sent.filter((body) => body.kind === "valid" && body.uuid === undefined).length;
    const distinctUuids = new Set(sent.filter((body) => body.kind === "valid" && body.uuid !== undefined).map((body) => body.uuid)).size;
    expect(await countEvents(server, server.token, name, day)).toBe(withoutUuid + distinctUuids);
    // Every way stored something, so none was silently dropped as a whole.
    const byWay = await send(`${server.queryUrl}/api/v1/query/trend`, {
      headers: { "content-type": "application/json" },
      token: server.token,
      body: JSON.stringify({ event: name, dateFrom: day, dateTo: day, breakdown: "way" }),
    });
    expect(byWay.status, byWay.text).toBe(200);
    const seriesWays = (byWay.body.breakdown as Array<{ value: unknown }>).map((series) => series.value).sort();
    expect(seriesWays).toEqual([...ways].sort());
  });
});
