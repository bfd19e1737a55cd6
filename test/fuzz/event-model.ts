/**
 * A model of SPEC §1–§2 for ingest bodies, written from the SPEC and importing
 * nothing from src/: given the exact bytes of a request, what must the server
 * answer, and which events of a batch must it store? The fuzz suites compare
 * every answer with it.
 *
 * Where the SPEC leaves a choice open (a timestamp spelling that ISO 8601 allows
 * but SPEC's examples do not show, `24:00`), the model says "either" and the
 * suites accept both answers. Everything else is decided: an event is stored
 * exactly when the SPEC says it is valid.
 */
import { isUtf8 } from "node:buffer";

export type Verdict = "valid" | "invalid" | "either";

export interface EventVerdict {
  verdict: Verdict;
  /** Fields the SPEC refuses in this event; the server's message must name one of them. */
  invalidFields: string[];
  /** For valid events: what the store must hold. */
  name?: string;
  distinctId?: string;
  /** undefined: no timestamp, so the server's time at receipt (or an "either" timestamp). */
  timeMs?: number;
  timestampGiven?: boolean;
  properties?: Record<string, unknown>;
  /** Lower-cased, for the dedupe rule. */
  uuid?: string;
}

export type IngestExpectation =
  | { kind: "refused"; status: number; codes: readonly string[] }
  | { kind: "batch"; events: EventVerdict[] }
  | { kind: "single"; event: EventVerdict };

export interface IngestModelOptions {
  shape: "batch" | "single";
  /** The one valid ingest API key of the workspace. */
  apiKey: string;
  /** The plain (decompressed) byte limit of the endpoint. */
  bodyBytesMax: number;
}

const batchEventsMax = 1000;
const nameLengthMax = 200;
const propertiesBytesMax = 65_536;
const latestTimeMs = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const uuidPattern = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** The expected answer to these plain (already decompressed) body bytes. */
export function expectIngest(bytes: Uint8Array, options: IngestModelOptions): IngestExpectation {
  if (bytes.length > options.bodyBytesMax) return { kind: "refused", status: 413, codes: ["payload_too_large"] };
  const parsed = parseJsonBytes(bytes);
  if (!parsed.ok || parsed.value === null || typeof parsed.value !== "object" || Array.isArray(parsed.value)) {
    return { kind: "refused", status: 400, codes: ["invalid_json"] };
  }
  const body = parsed.value as Record<string, unknown>;
  if (typeof body.apiKey !== "string" || body.apiKey !== options.apiKey) return { kind: "refused", status: 401, codes: ["unauthorized"] };
  if (options.shape === "single") return { kind: "single", event: judgeEvent(body) };
  const events = body.events;
  if (!Array.isArray(events)) return { kind: "refused", status: 400, codes: ["invalid_request"] };
  if (events.length > batchEventsMax) return { kind: "refused", status: 413, codes: ["batch_too_large"] };
  return { kind: "batch", events: events.map(judgeEvent) };
}

/** Strict UTF-8 (no replacement), the BOM kept as a character: what a careful server parses. */
export function parseJsonBytes(bytes: Uint8Array): { ok: true; value: unknown } | { ok: false } {
  if (!isUtf8(bytes)) return { ok: false };
  const text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false };
  }
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function own(record: Record<string, unknown>, key: string): unknown {
  return Object.prototype.hasOwnProperty.call(record, key) ? record[key] : undefined;
}

/** SPEC §2's field rules for one event. */
export function judgeEvent(event: unknown): EventVerdict {
  if (!isPlainObject(event)) return { verdict: "invalid", invalidFields: ["event"] };
  const invalidFields: string[] = [];
  let undecided = false;

  const name = own(event, "event");
  if (typeof name !== "string" || name.length < 1 || name.length > nameLengthMax || !name.isWellFormed()) invalidFields.push("event");

  const rawDistinctId = own(event, "distinctId");
  let distinctId: string | undefined;
  if (typeof rawDistinctId === "string" && rawDistinctId.length >= 1 && rawDistinctId.length <= nameLengthMax && rawDistinctId.isWellFormed()) {
    distinctId = rawDistinctId;
  } else if (typeof rawDistinctId === "number" && Number.isFinite(rawDistinctId)) {
    distinctId = String(rawDistinctId);
  } else {
    invalidFields.push("distinctId");
  }

  const rawTimestamp = own(event, "timestamp");
  let timeMs: number | undefined;
  const timestampGiven = rawTimestamp !== undefined && rawTimestamp !== null;
  if (timestampGiven) {
    const judged = typeof rawTimestamp === "string" ? judgeTimestamp(rawTimestamp) : ({ verdict: "invalid" } as const);
    if (judged.verdict === "valid") timeMs = judged.timeMs;
    else if (judged.verdict === "either") undecided = true;
    else invalidFields.push("timestamp");
  }

  const rawProperties = own(event, "properties");
  let properties: Record<string, unknown> | undefined;
  if (rawProperties !== undefined && rawProperties !== null) {
    if (!isPlainObject(rawProperties)) invalidFields.push("properties");
    else {
      const wellFormed = Object.keys(rawProperties).every((key) => {
        const value = rawProperties[key];
        return key.isWellFormed() && (typeof value !== "string" || value.isWellFormed());
      });
      if (!wellFormed || compactJsonBytes(rawProperties) > propertiesBytesMax) invalidFields.push("properties");
      else properties = rawProperties;
    }
  }

  const rawUuid = own(event, "uuid");
  let uuid: string | undefined;
  if (rawUuid !== undefined && rawUuid !== null) {
    if (typeof rawUuid !== "string" || !uuidPattern.test(rawUuid)) invalidFields.push("uuid");
    else uuid = rawUuid.toLowerCase();
  }

  if (invalidFields.length > 0) return { verdict: "invalid", invalidFields };
  return {
    verdict: undecided ? "either" : "valid",
    invalidFields,
    name: name as string,
    distinctId,
    timeMs,
    timestampGiven,
    properties,
    uuid,
  };
}

/**
 * SPEC §2 timestamps: the spellings of its examples (`2024-05-01T12:00:00Z`,
 * `…+02:00`, `…T12:00:00.123Z`, no zone = UTC) are decided; other ISO 8601
 * spellings (a space or `t` separator, no seconds, more than 3 fraction digits,
 * `±hh` or `±hhmm` zones, the basic format) are the server's choice.
 */
export function judgeTimestamp(text: string): { verdict: "valid"; timeMs: number } | { verdict: "invalid" | "either" } {
  const strict = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?(Z|([+-])(\d{2}):(\d{2}))?$/.exec(text);
  if (strict === null) {
    const lenient =
      /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}([.,]\d+)?)?([Zz]|[+-]\d{2}(:?\d{2})?)?$/.test(text) ||
      /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{4,}([Zz]|[+-]\d{2}:\d{2})?$/.test(text) ||
      /^\d{8}T\d{4,6}(\.\d+)?(Z|[+-]\d{2}(\d{2})?)?$/.test(text);
    return { verdict: lenient ? "either" : "invalid" };
  }
  const [year, month, day, hour, minute, second] = strict.slice(1, 7).map(Number);
  const millisecond = strict[7] === undefined ? 0 : Number(strict[7].padEnd(3, "0"));
  // ISO 8601 has 24:00 (end of day) and leap seconds: the SPEC does not say.
  if (hour === 24 || second === 60) return { verdict: "either" };
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month) || hour > 23 || minute > 59 || second > 59) return { verdict: "invalid" };
  let offsetMinutes = 0;
  if (strict[9] !== undefined) {
    const offsetHours = Number(strict[10]);
    const offsetMinutesPart = Number(strict[11]);
    if (offsetMinutesPart > 59) return { verdict: "invalid" };
    if (offsetHours > 23) return { verdict: "either" };
    offsetMinutes = (offsetHours * 60 + offsetMinutesPart) * (strict[9] === "-" ? -1 : 1);
  }
  const localMs = new Date(0).setUTCFullYear(year, month - 1, day) + ((hour * 60 + minute) * 60 + second) * 1000 + millisecond;
  const timeMs = localMs - offsetMinutes * 60_000;
  if (timeMs < 0 || timeMs > latestTimeMs) return { verdict: "invalid" };
  return { verdict: "valid", timeMs };
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/**
 * UTF-8 bytes of JSON.stringify(value), computed without recursion so that a
 * value nested 100 000 levels deep (which JSON.parse accepts and JSON.stringify
 * cannot print) still gets its size.
 */
export function compactJsonBytes(value: unknown): number {
  let bytes = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const item = stack.pop();
    if (item === null || typeof item !== "object") {
      bytes += Buffer.byteLength(JSON.stringify(item) ?? "null", "utf8");
    } else if (Array.isArray(item)) {
      bytes += 2 + Math.max(0, item.length - 1);
      for (const element of item) stack.push(element);
    } else {
      const keys = Object.keys(item);
      bytes += 2 + Math.max(0, keys.length - 1);
      for (const key of keys) {
        bytes += Buffer.byteLength(JSON.stringify(key), "utf8") + 1;
        stack.push((item as Record<string, unknown>)[key]);
      }
    }
  }
  return bytes;
}

/** SPEC §4: a property's text; undefined when not set (absent or null). */
export function propertyText(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value);
}

/** `YYYY-MM-DD` of the UTC day holding timeMs. */
export function dayOf(timeMs: number): string {
  return new Date(timeMs).toISOString().slice(0, 10);
}
