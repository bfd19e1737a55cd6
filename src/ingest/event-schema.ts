/**
 * The ingest bodies of SPEC §2 as zod schemas, for the OpenAPI document. The
 * validation that runs is event-validation.ts's addEvent and the byte scanner
 * (event-scanner.ts), which never build these objects; these schemas describe
 * the same rules with the same parsers and limits, and a test
 * (test/ingest/event-schema.test.ts) checks that both judge a set of sample
 * events alike. A rule changed there and not here fails that test.
 */
import { z } from "zod";
import { limits } from "../config/limits.js";
import { timestampWindowError } from "./batch-cardinality.js";
import { parseTimestampMs, parseUuid } from "./event-fields.js";

const uuidScratch = new Uint8Array(16);

const wellFormed = (text: string) => text.isWellFormed();

const boundedText = (lengthMax: number, what: string) =>
  z
    .string()
    .min(1)
    .max(lengthMax)
    .refine(wellFormed, { error: "contains a lone UTF-16 surrogate" })
    .describe(`${what}, 1–${lengthMax} characters (JavaScript string length)`);

/** Absent and null are the same for the optional fields. */
const optional = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

function compactBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value), "utf8");
}

export const eventFieldsSchema = z.looseObject({
  event: boundedText(limits.eventNameLengthMax, "the event's name"),
  distinctId: z
    .union([boundedText(limits.distinctIdLengthMax, "the user's id"), z.number().refine(Number.isFinite, { error: "must be finite" })])
    .describe("the user's id: a string, or a finite number stored as String(n)"),
  timestamp: optional(
    z
      .string()
      .refine((text) => parseTimestampMs(text) !== undefined, { error: "must be an ISO 8601 date-time between 1970 and 9999 (UTC)" })
      .refine((text) => timestampWindowError(parseTimestampMs(text) ?? 0, Date.now()) === undefined, { error: "outside the accepted window around the server's time" })
      .describe("ISO 8601 date-time; without a zone it is UTC; absent: the server's time at receipt"),
  ),
  properties: optional(
    z
      .record(z.string(), z.unknown())
      .refine((properties) => Object.entries(properties).every(([key, value]) => key.isWellFormed() && (typeof value !== "string" || value.isWellFormed())), {
        error: "contains a lone UTF-16 surrogate",
      })
      .refine((properties) => compactBytes(properties) <= limits.propertiesBytesMax, { error: `larger than ${limits.propertiesBytesMax} bytes` })
      .describe(`a JSON object, at most ${limits.propertiesBytesMax} bytes as compact UTF-8 JSON`),
  ),
  uuid: optional(
    z
      .string()
      .refine((text) => parseUuid(text, uuidScratch), { error: "must be a UUID string" })
      .describe("makes retries idempotent: an event whose uuid the workspace already holds is acknowledged and not stored again"),
  ),
});

const apiKey = z.string().describe("the workspace's ingest API key");

export const singleBodySchema = eventFieldsSchema.extend({ apiKey });

export const batchBodySchema = z.looseObject({
  apiKey,
  events: z.array(eventFieldsSchema).max(limits.batchEventsMax).describe(`at most ${limits.batchEventsMax} events; each is checked on its own`),
});
