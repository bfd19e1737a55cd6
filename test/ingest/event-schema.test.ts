/**
 * The zod schema of an event (event-schema.ts), from which the OpenAPI
 * document describes ingest bodies, judges sample events as the validation
 * that runs does: the byte scanner and the parsed-JSON path of validateBody,
 * each on its own. A rule changed in one place and not the other fails here.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { limits } from "../../src/config/limits.js";
import { ChunkBuilder } from "../../src/storage/chunk-codec.js";
import { eventFieldsSchema, singleBodySchema, batchBodySchema } from "../../src/ingest/event-schema.js";
import { validateBody, type IngestParser } from "../../src/ingest/event-validation.js";

function validatorAccepts(event: unknown, parser: IngestParser): boolean {
  const body = JSON.stringify({ apiKey: "ek_sample", ...(event as object) });
  const builder = new ChunkBuilder();
  const result = validateBody(Buffer.from(body, "utf8"), false, "single", Date.now(), () => ({ builder, chunkIndex: 0 }), parser);
  return result.kind === "parsed" && result.error === undefined && result.acceptedCount === 1;
}

const big = "x".repeat(limits.propertiesBytesMax);
const samples: Array<Record<string, unknown>> = [
  { event: "signup", distinctId: "u1" },
  { event: "signup", distinctId: 42 },
  { event: "signup", distinctId: 1.5e300 },
  { event: "signup", distinctId: "" },
  { event: "", distinctId: "u1" },
  { event: "e".repeat(limits.eventNameLengthMax), distinctId: "u1" },
  { event: "e".repeat(limits.eventNameLengthMax + 1), distinctId: "u1" },
  { event: "signup", distinctId: "d".repeat(limits.distinctIdLengthMax + 1) },
  { event: "signup" },
  { distinctId: "u1" },
  { event: 7, distinctId: "u1" },
  { event: "signup", distinctId: true },
  { event: "signup", distinctId: ["u1"] },
  { event: "signup", distinctId: "u1", timestamp: "2024-05-01T12:00:00Z" },
  { event: "signup", distinctId: "u1", timestamp: "2024-05-01T12:00:00.123+02:00" },
  { event: "signup", distinctId: "u1", timestamp: "2024-05-01T12:00:00" },
  { event: "signup", distinctId: "u1", timestamp: "2024-02-30T12:00:00Z" },
  { event: "signup", distinctId: "u1", timestamp: "1969-12-31T23:59:59Z" },
  { event: "signup", distinctId: "u1", timestamp: "yesterday" },
  { event: "signup", distinctId: "u1", timestamp: 1714564800000 },
  { event: "signup", distinctId: "u1", timestamp: null },
  { event: "signup", distinctId: "u1", properties: { plan: "pro", n: 3, nested: { a: [1, 2] } } },
  { event: "signup", distinctId: "u1", properties: [] },
  { event: "signup", distinctId: "u1", properties: "text" },
  { event: "signup", distinctId: "u1", properties: null },
  { event: "signup", distinctId: "u1", properties: { big } },
  { event: "signup", distinctId: "u1", properties: { big: big.slice(0, limits.propertiesBytesMax - 20) } },
  { event: "signup", distinctId: "u1", uuid: "0190e0a4-8c1d-7b4e-9d2a-3f5e6a7b8c9d" },
  { event: "signup", distinctId: "u1", uuid: "0190E0A4-8C1D-7B4E-9D2A-3F5E6A7B8C9D" },
  { event: "signup", distinctId: "u1", uuid: "not-a-uuid" },
  { event: "signup", distinctId: "u1", uuid: 5 },
  { event: "signup", distinctId: "u1", unknownField: { ignored: true } },
  { event: "lone \ud800 surrogate", distinctId: "u1" },
  { event: "signup", distinctId: "u1", properties: { "\udc00": 1 } },
];

describe("the event schema of the OpenAPI document", () => {
  for (const parser of ["auto", "native"] as const) {
    it(`agrees with validateBody (${parser === "auto" ? "byte scanner first" : "parsed JSON"}) on every sample event`, () => {
      for (const sample of samples) {
        const label = JSON.stringify(sample).slice(0, 120);
        expect(eventFieldsSchema.safeParse(sample).success, label).toBe(validatorAccepts(sample, parser));
      }
    });
  }

  it("agrees with validateBody on generated events", () => {
    const text = fc.oneof(fc.string({ maxLength: 4 }), fc.string({ minLength: 199, maxLength: 202 }));
    const field = fc.oneof(text, fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.dictionary(fc.string({ maxLength: 3 }), fc.jsonValue({ maxDepth: 2 })));
    const event = fc.record(
      { event: field, distinctId: field, timestamp: fc.oneof(field, fc.date({ min: new Date(0), max: new Date(Date.now() + 3_600_000), noInvalidDate: true }).map((date) => date.toISOString())), properties: field, uuid: fc.oneof(field, fc.uuid()) },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(event, (sample) => {
        expect(eventFieldsSchema.safeParse(sample).success, JSON.stringify(sample)).toBe(validatorAccepts(sample, "auto"));
      }),
      { numRuns: 500, seed: 8 },
    );
  });

  it("describes the bodies: apiKey required, events an array of at most the batch limit", () => {
    expect(singleBodySchema.safeParse({ event: "e", distinctId: "u" }).success).toBe(false);
    expect(singleBodySchema.safeParse({ apiKey: "k", event: "e", distinctId: "u" }).success).toBe(true);
    expect(batchBodySchema.safeParse({ apiKey: "k", events: Array.from({ length: limits.batchEventsMax + 1 }, () => ({ event: "e", distinctId: "u" })) }).success).toBe(false);
  });
});
