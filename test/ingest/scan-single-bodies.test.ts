/**
 * scanSingleBodies: how the main thread reads small plain single events. It
 * takes only what the byte scanners take whole, and for those it must build
 * exactly the answers and chunks that validateBodies (a worker's way) builds
 * for the same bodies; everything else it leaves, unread, for a worker.
 */
import { pack } from "msgpackr";
import { describe, expect, it } from "vitest";
import { scanSingleBodies, validateBodies, type BodyInput } from "../../src/ingest/event-validation.js";
import { Random } from "../helpers/random.js";

const receivedAtMs = Date.UTC(2024, 4, 1, 12);

function json(value: unknown): BodyInput {
  return { bytes: Buffer.from(JSON.stringify(value)), gzip: false, receivedAtMs };
}

function msgpack(value: unknown): BodyInput {
  return { bytes: pack(value), gzip: false, receivedAtMs, format: "msgpack" };
}

const hex = (chunk: ArrayBuffer) => Buffer.from(chunk).toString("hex");

describe("scanSingleBodies", () => {
  it("takes flat events, in one chunk per key, exactly as a worker would (seeded bodies)", () => {
    for (let seed = 1; seed <= 30; seed++) {
      const random = new Random(seed);
      const bodies: BodyInput[] = [];
      for (let index = 0; index < 40; index++) {
        const event: Record<string, unknown> = {
          apiKey: `ek_${random.integer(0, 2)}`,
          event: `e${random.integer(0, 5)}`,
          distinctId: random.chance(0.2) ? random.integer(0, 99) : `user-${random.integer(0, 30)}`,
          properties: { country: ["US", "DE", "FR"][random.integer(0, 2)], price: random.integer(0, 1000) / 10, paid: random.chance(0.5), none: null },
        };
        if (random.chance(0.5)) event.timestamp = new Date(receivedAtMs - random.integer(0, 86_400_000)).toISOString();
        if (random.chance(0.3)) event.uuid = `00000000-0000-4000-8000-${String(random.integer(0, 20)).padStart(12, "0")}`;
        bodies.push(random.chance(0.3) ? msgpack(event) : json(event));
      }
      const scanned = scanSingleBodies(bodies);
      const validated = validateBodies(bodies, "single");
      expect(scanned.results.every((result) => result !== undefined)).toBe(true);
      expect(scanned.results).toEqual(validated.results);
      expect(scanned.chunks.map(({ apiKey, chunk }) => [apiKey, hex(chunk)])).toEqual(validated.chunks.map(({ apiKey, chunk }) => [apiKey, hex(chunk)]));
    }
  });

  it("leaves to a worker what the scanner leaves, and keeps the rest", () => {
    const flat = { apiKey: "ek_a", event: "view", distinctId: "u1" };
    const left = [
      json({ ...flat, properties: { nested: { a: [1, 2] } } }),
      json({ ...flat, properties: { quote: 'a"b' } }),
      json({ apiKey: "ek_a", event: "view" }),
      { bytes: Buffer.from(`{"apiKey":"ek_a","event":"view","distinctId":"u1","distinctId":"u2"}`), gzip: false, receivedAtMs },
    ];
    const bodies = [json(flat), ...left, msgpack(flat)];
    const { results, chunks } = scanSingleBodies(bodies);
    expect(results.map((result) => result === undefined)).toEqual([false, true, true, true, true, false]);
    expect(results[0]).toMatchObject({ kind: "parsed", apiKey: "ek_a", acceptedCount: 1, chunkIndex: 0 });
    expect(results[5]).toMatchObject({ kind: "parsed", apiKey: "ek_a", acceptedCount: 1, chunkIndex: 0 });
    // The two taken events share their key's chunk; the left ones added no row to it.
    expect(chunks.map(({ apiKey, chunk }) => [apiKey, new Uint32Array(chunk, 0, 2)[1]])).toEqual([["ek_a", 2]]);
  });

  it("answers a body that is not UTF-8 itself, as a worker would", () => {
    const body: BodyInput = { bytes: Uint8Array.of(0x7b, 0xff, 0x7d), gzip: false, receivedAtMs };
    const scanned = scanSingleBodies([body]).results[0];
    expect(scanned).toBeDefined();
    expect(scanned).toEqual(validateBodies([body], "single").results[0]);
  });
});
