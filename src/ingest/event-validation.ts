/**
 * Event validation (SPEC §2), run in the worker pool: request bytes in, a chunk
 * of valid events plus per-event errors out. Nothing here touches the store or
 * credentials: the main thread checks the apiKey the worker extracted, so a
 * worker never needs the registry.
 *
 * Check order follows SPEC §1: body size (gzip inflated under a hard output
 * cap), JSON, then the envelope; the main thread then checks the apiKey and the
 * batch size before the per-event errors found here are reported.
 */
import { limits } from "../config/limits.js";
import type { ServiceError } from "../errors.js";
import { checkEnvelope, parseBodyBytes } from "../json/body-bytes.js";
import { PrintedValue } from "../json/value-printer.js";
import { inflatedBody, invalidJson, notAnObject, parseJsonObject, plainUtf8Body } from "../json/body.js";
import { parseMsgpackObject, type BodyFormat } from "../json/msgpack-body.js";
import { ChunkBuilder } from "../storage/chunk-codec.js";
import { parseTimestampMs, parseUuid } from "./event-fields.js";
import { scanBody } from "./event-scanner.js";
import type { ScannedBody } from "./scanned-events.js";
import { scanMsgpackBody } from "./msgpack-event-scanner.js";
import { BatchDays, batchDaysExceeded, timestampWindowError } from "./batch-cardinality.js";
import { log } from "../log.js";

export type IngestShape = "batch" | "single";

export interface EventError {
  index: number;
  code: "invalid_request";
  message: string;
}

/** What a worker decided about one body (the main thread finishes the decision). */
export type IngestBodyResult =
  | { kind: "rejected"; error: ServiceError }
  | {
      kind: "parsed";
      /** undefined when missing or not a string: 401 on the main thread. */
      apiKey: string | undefined;
      /** Checked after the apiKey: batch_too_large, or an envelope/event error. */
      error: ServiceError | undefined;
      /** Valid events, counting uuid repeats (SPEC: acknowledged and counted in `accepted`). */
      acceptedCount: number;
      /** Batch: the first limits.batchErrorsReportedMax per-event errors. */
      errors: EventError[];
      /** Batch: how many events were skipped, all of them (for metrics; `errors` is cut short); absent when none. */
      refusedCount?: number;
      /** Index into the task's chunks of the chunk holding this body's rows; -1 when none. */
      chunkIndex: number;
      /** Batch: the event index of each row of the chunk; undefined when row r is event r. */
      eventIndexOfRow?: number[];
    };

/**
 * Valid rows of the task's bodies, one chunk per apiKey: gathered single events
 * that share a key become one chunk, so one WAL record and one apply serve them all.
 */
export interface KeyedChunk {
  apiKey: string;
  chunk: ArrayBuffer;
}

export interface BodyInput {
  bytes: Uint8Array;
  gzip: boolean;
  receivedAtMs: number;
  /** Absent: JSON. */
  format?: BodyFormat;
}

/** Builders of this thread's finished chunks, emptied for the next task's (ChunkBuilder.reset). */
const idleBuilders: ChunkBuilder[] = [];
const idleBuildersMax = 4;
/** A builder past this (a batch of tens of thousands of events) is dropped rather than kept. */
const idleBuilderBytesMax = 2 * 1024 * 1024;

/** The chunks of one task: one per apiKey for single events, one per body for batches. */
class TaskChunks {
  private readonly builders = new Map<string, { builder: ChunkBuilder; chunkIndex: number }>();
  private readonly order: Array<{ apiKey: string; builder: ChunkBuilder }> = [];

  constructor(private readonly shape: IngestShape) {}

  readonly builderFor: BuilderFor = (apiKey) => {
    let entry = this.shape === "single" ? this.builders.get(apiKey) : undefined;
    if (entry === undefined) {
      entry = { builder: idleBuilders.pop() ?? new ChunkBuilder(), chunkIndex: this.order.length };
      this.order.push({ apiKey, builder: entry.builder });
      if (this.shape === "single") this.builders.set(apiKey, entry);
    }
    return entry;
  };

  finish(): KeyedChunk[] {
    return this.order.map(({ apiKey, builder }) => {
      const chunk = builder.finish();
      if (idleBuilders.length < idleBuildersMax && builder.reset(idleBuilderBytesMax)) idleBuilders.push(builder);
      return { apiKey, chunk };
    });
  }
}

/** Validates every body of a task. */
export function validateBodies(bodies: readonly BodyInput[], shape: IngestShape): { results: IngestBodyResult[]; chunks: KeyedChunk[] } {
  const chunks = new TaskChunks(shape);
  const results = bodies.map((body) => validateBodyIsolated(body.bytes, body.gzip, shape, body.receivedAtMs, body.format === "msgpack" ? "msgpack" : "auto", chunks.builderFor));
  return { results, chunks: chunks.finish() };
}

/**
 * Plain (not gzipped) single-event bodies read by the byte scanners alone, as
 * the main thread reads small ones: their cost is a few nanoseconds a byte
 * whatever the body holds. A body the scanner leaves (escapes, nested property
 * values, an invalid event: JSON.parse and the general validator, whose cost
 * per byte a body can choose) has no result here and goes to a worker.
 */
export function scanSingleBodies(bodies: readonly BodyInput[]): { results: Array<IngestBodyResult | undefined>; chunks: KeyedChunk[] } {
  return scanBodies(bodies, "single");
}

/** scanSingleBodies for bodies of either shape (plain ones: the caller leaves gzipped bodies to a worker). */
export function scanBodies(bodies: readonly BodyInput[], shape: IngestShape): { results: Array<IngestBodyResult | undefined>; chunks: KeyedChunk[] } {
  const chunks = new TaskChunks(shape);
  const results = bodies.map((body): IngestBodyResult | undefined => {
    try {
      const msgpack = body.format === "msgpack";
      const plain = plainBody(body.bytes, false, shape, msgpack);
      if (!(plain instanceof Uint8Array)) return { kind: "rejected", error: plain };
      const scanned = scanPlainBody(plain, shape, body.receivedAtMs, msgpack);
      return scanned === undefined ? undefined : scannedResult(scanned, chunks.builderFor);
    } catch (error) {
      return failedUnexpectedly(error);
    }
  });
  return { results, chunks: chunks.finish() };
}

/** The body inflated (a JSON one also checked as UTF-8), or the error that refuses it. */
function plainBody(bytes: Uint8Array, gzip: boolean, shape: IngestShape, msgpack: boolean): Uint8Array | ServiceError {
  return msgpack ? inflatedBody(bytes, gzip, bodyBytesMax(shape)) : plainUtf8Body(bytes, gzip, bodyBytesMax(shape));
}

/** The byte scanner's reading of a plain body; undefined when it leaves the body to the general parse. */
function scanPlainBody(plain: Uint8Array, shape: IngestShape, receivedAtMs: number, msgpack: boolean): ScannedBody | undefined {
  return msgpack ? scanMsgpackBody(plain, shape, receivedAtMs) : scanBody(plain, shape, receivedAtMs);
}

/** A body whose validation threw: answered 500 alone, and logged. */
function failedUnexpectedly(error: unknown): IngestBodyResult {
  log.error({ err: error }, "ingest: validation failed unexpectedly");
  return { kind: "rejected", error: { code: "internal_error", message: "internal error" } };
}

/** A body the byte scanner took whole: its events go into its key's chunk. */
function scannedResult(scanned: ScannedBody, builderFor: BuilderFor): IngestBodyResult {
  const target = builderFor(scanned.apiKey);
  scanned.appendTo(target.builder);
  const chunkIndex = scanned.eventCount > 0 ? target.chunkIndex : -1;
  return { kind: "parsed", apiKey: scanned.apiKey, error: undefined, acceptedCount: scanned.eventCount, errors: [], chunkIndex };
}

type BuilderFor = (apiKey: string) => { builder: ChunkBuilder; chunkIndex: number };

/**
 * One body's failure must not fail the other bodies gathered into the same
 * task: an unexpected exception answers 500 for that body alone. (Rows it may
 * have added before throwing are not at risk: addEvent appends a row only
 * after every check of its event passed.)
 */
function validateBodyIsolated(bytes: Uint8Array, gzip: boolean, shape: IngestShape, receivedAtMs: number, parser: IngestParser, builderFor: BuilderFor): IngestBodyResult {
  try {
    return validateBody(bytes, gzip, shape, receivedAtMs, builderFor, parser);
  } catch (error) {
    return failedUnexpectedly(error);
  }
}

export function bodyBytesMax(shape: IngestShape): number {
  return shape === "batch" ? limits.batchBodyBytesMax : limits.ingestBodyBytesMax;
}


/**
 * Which parser reads an ingest body: V8's JSON.parse ("native") or body-bytes.ts
 * ("bytes"), which does not build nested property values. "auto" first tries
 * event-scanner.ts, which reads flat events straight into the chunk, and for
 * the bodies it leaves picks between the other two by the body's shape.
 * "msgpackr" reads a msgpack body (msgpack-body.ts) into the value JSON.parse
 * would have built, which is then validated exactly as a parsed JSON body;
 * "msgpack" first tries msgpack-event-scanner.ts, then msgpackr.
 */
export type IngestParser = "native" | "bytes" | "auto" | "msgpack" | "msgpackr";

/** Parses an inflated, UTF-8-checked ingest body; validation cannot tell which parser read it. */
function parsePlainBody(plain: Uint8Array, shape: IngestShape, parser: IngestParser): { value: unknown } | ServiceError {
  if (parser === "msgpack" || parser === "msgpackr") return parseMsgpackObject(plain);
  if (parser === "native" || (parser === "auto" && !holdsManyContainersOrMembers(plain))) return parseJsonObject(plain);
  const parsed = parseBodyBytes(plain, shape);
  return parsed.kind === "object" ? { value: parsed.value } : parsed.kind === "not-object" ? notAnObject : invalidJson;
}

/** A batch's key check (BatchKeyCheck): a final answer, or the apiKey read for the main thread to judge. */
export type BatchKeyOutcome = { kind: "judged"; result: IngestBodyResult } | { kind: "read"; apiKey: string; plain: Uint8Array };

/**
 * Checks a batch body's syntax without building anything and reads its apiKey
 * (JSON.parse's: the last member). SPEC §1 answers a body that is not JSON 400
 * before a key 401, so the syntax comes first; a missing key, or the unknown
 * one the main thread saw the body open with, is refused here, unparsed.
 */
export function checkBatchApiKey(bytes: Uint8Array, gzip: boolean, unknownApiKey: string | undefined, format: BodyFormat = "json"): BatchKeyOutcome {
  if (format === "msgpack") return checkMsgpackBatchApiKey(bytes, gzip, unknownApiKey);
  const plain = plainUtf8Body(bytes, gzip, bodyBytesMax("batch"));
  if (!(plain instanceof Uint8Array)) return { kind: "judged", result: { kind: "rejected", error: plain } };
  const envelope = checkEnvelope(plain);
  if (envelope.kind !== "object") return { kind: "judged", result: { kind: "rejected", error: envelope.kind === "not-object" ? notAnObject : invalidJson } };
  if (envelope.apiKey === undefined || envelope.apiKey === unknownApiKey) {
    // 401 even if the key was created since it was looked up: its events were not read.
    const error: ServiceError = { code: "unauthorized", message: "apiKey: missing or unknown" };
    return { kind: "judged", result: { kind: "parsed", apiKey: envelope.apiKey, error, acceptedCount: 0, errors: [], chunkIndex: -1 } };
  }
  return { kind: "read", apiKey: envelope.apiKey, plain };
}

/** checkBatchApiKey for a msgpack body: there is no cheaper syntax check than the decode, so it decodes (and a known key decodes again). */
function checkMsgpackBatchApiKey(bytes: Uint8Array, gzip: boolean, unknownApiKey: string | undefined): BatchKeyOutcome {
  const plain = inflatedBody(bytes, gzip, bodyBytesMax("batch"));
  if (!(plain instanceof Uint8Array)) return { kind: "judged", result: { kind: "rejected", error: plain } };
  const parsed = parseMsgpackObject(plain);
  if (!("value" in parsed)) return { kind: "judged", result: { kind: "rejected", error: parsed } };
  const apiKey = (parsed.value as Record<string, unknown>).apiKey;
  if (typeof apiKey !== "string" || apiKey === unknownApiKey) {
    const error: ServiceError = { code: "unauthorized", message: "apiKey: missing or unknown" };
    return { kind: "judged", result: { kind: "parsed", apiKey: typeof apiKey === "string" ? apiKey : undefined, error, acceptedCount: 0, errors: [], chunkIndex: -1 } };
  }
  return { kind: "read", apiKey, plain };
}

export function validateBody(bytes: Uint8Array, gzip: boolean, shape: IngestShape, receivedAtMs: number, builderFor: BuilderFor, parser: IngestParser = "auto"): IngestBodyResult {
  const msgpack = parser === "msgpack" || parser === "msgpackr";
  const plain = plainBody(bytes, gzip, shape, msgpack);
  if (!(plain instanceof Uint8Array)) return { kind: "rejected", error: plain };
  if (parser === "auto" || parser === "msgpack") {
    const scanned = scanPlainBody(plain, shape, receivedAtMs, parser === "msgpack");
    if (scanned !== undefined) return scannedResult(scanned, builderFor);
  }
  const parsed = parsePlainBody(plain, shape, parser);
  if (!("value" in parsed)) return { kind: "rejected", error: parsed };
  const body = parsed.value as Record<string, unknown>;
  const apiKey = typeof body.apiKey === "string" ? body.apiKey : undefined;
  const refused = (error: ServiceError): IngestBodyResult => ({ kind: "parsed", apiKey, error, acceptedCount: 0, errors: [], chunkIndex: -1 });
  // Without a key the answer is 401 whatever the events hold: don't spend time on them.
  if (apiKey === undefined) return refused({ code: "unauthorized", message: "apiKey: missing or not a string" });

  if (shape === "single") {
    const target = builderFor(apiKey);
    const message = addEvent(body, receivedAtMs, target.builder);
    if (message !== undefined) return refused({ code: "invalid_request", message });
    return { kind: "parsed", apiKey, error: undefined, acceptedCount: 1, errors: [], chunkIndex: target.chunkIndex };
  }

  const events = body.events;
  if (!Array.isArray(events)) return refused({ code: "invalid_request", message: events === undefined ? "events: required" : "events: must be an array" });
  if (events.length > limits.batchEventsMax) {
    return refused({ code: "batch_too_large", message: `events: at most ${limits.batchEventsMax} events per batch, got ${events.length}` });
  }
  const target = builderFor(apiKey);
  const errors: EventError[] = [];
  let acceptedCount = 0;
  // Filled once an event is skipped: until then row r is event r.
  let eventIndexOfRow: number[] | undefined;
  batchDays.reset();
  for (let index = 0; index < events.length; index++) {
    const event = events[index];
    const message =
      event === null || typeof event !== "object" || Array.isArray(event)
        ? "event must be a JSON object"
        : addEvent(event as Record<string, unknown>, receivedAtMs, target.builder, batchDays);
    if (message === undefined) {
      if (eventIndexOfRow !== undefined) eventIndexOfRow.push(index);
      acceptedCount++;
    } else {
      eventIndexOfRow ??= Array.from({ length: acceptedCount }, (_, row) => row);
      if (errors.length < limits.batchErrorsReportedMax) errors.push({ index, code: "invalid_request", message });
    }
  }
  const chunkIndex = target.builder.rowCount > 0 ? target.chunkIndex : -1;
  const refusedCount = events.length - acceptedCount;
  // Only when some were: a batch the byte scanner takes whole has none, and both paths must answer alike.
  return { kind: "parsed", apiKey, error: undefined, acceptedCount, errors, ...(refusedCount > 0 ? { refusedCount } : {}), chunkIndex, eventIndexOfRow };
}

/**
 * Validates one event and appends it to the chunk. Returns an error message
 * naming the field, or undefined when the event was accepted (a uuid already
 * seen in this body is accepted but not appended again).
 */
function addEvent(
  event: Record<string, unknown>,
  receivedAtMs: number,
  builder: ChunkBuilder,
  days?: BatchDays,
): string | undefined {
  const name = event.event;
  if (name === undefined || name === null) return "event: required";
  if (typeof name !== "string") return "event: must be a string";
  if (name.length < 1 || name.length > limits.eventNameLengthMax) {
    return `event: must be 1–${limits.eventNameLengthMax} characters`;
  }
  if (!name.isWellFormed()) return notWellFormed("event");

  const rawDistinctId = event.distinctId;
  let distinctId: string;
  if (rawDistinctId === undefined || rawDistinctId === null) return "distinctId: required";
  if (typeof rawDistinctId === "string") {
    if (rawDistinctId.length < 1 || rawDistinctId.length > limits.distinctIdLengthMax) {
      return `distinctId: must be 1–${limits.distinctIdLengthMax} characters`;
    }
    if (!rawDistinctId.isWellFormed()) return notWellFormed("distinctId");
    distinctId = rawDistinctId;
  } else if (typeof rawDistinctId === "number" && Number.isFinite(rawDistinctId)) {
    distinctId = String(rawDistinctId);
  } else {
    return "distinctId: must be a string or a finite number";
  }

  let timeMs = receivedAtMs;
  const rawTimestamp = event.timestamp;
  if (rawTimestamp !== undefined && rawTimestamp !== null) {
    if (typeof rawTimestamp !== "string") return "timestamp: must be an ISO 8601 date-time string";
    const parsedMs = parseTimestampMs(rawTimestamp);
    if (parsedMs === undefined) return "timestamp: must be an ISO 8601 date-time between 1970 and 9999 (UTC)";
    const outside = timestampWindowError(parsedMs, receivedAtMs);
    if (outside !== undefined) return outside;
    timeMs = parsedMs;
  }

  const rawProperties = event.properties;
  let properties: Record<string, unknown> | undefined;
  if (rawProperties !== undefined && rawProperties !== null) {
    if (typeof rawProperties !== "object" || Array.isArray(rawProperties)) return "properties: must be a JSON object";
    properties = rawProperties as Record<string, unknown>;
  }

  let uuid: Uint8Array | undefined;
  const rawUuid = event.uuid;
  if (rawUuid !== undefined && rawUuid !== null) {
    if (typeof rawUuid !== "string" || !parseUuid(rawUuid, uuidScratch)) return "uuid: must be a UUID string";
    uuid = uuidScratch;
  }

  // Property texts are computed before the row is added, so a too-large event leaves no trace.
  let keys: string[] | undefined;
  const texts = textScratch;
  if (properties !== undefined) {
    keys = Object.keys(properties);
    // Upper bound of the compact JSON size without serializing: every UTF-16 unit
    // is at most 6 bytes once escaped. Only events near the limit pay for an exact count.
    let upperBoundBytes = 2;
    let printedPastLimit = false;
    for (let index = 0; index < keys.length; index++) {
      const value = properties[keys[index]];
      if (!keys[index].isWellFormed() || (typeof value === "string" && !value.isWellFormed())) return notWellFormed(`properties.${keys[index]}`);
      let text: string | undefined;
      if (value instanceof PrintedValue) {
        // Refused here only when nestingDepth would refuse it; a value printed past the limit is
        // refused after every key was checked, as a long value is below.
        if (value.tooManyContainers) return `properties: larger than ${limits.propertiesBytesMax} bytes`;
        text = value.text;
        if (text === undefined) printedPastLimit = true;
      } else if (typeof value === "object" && value !== null) {
        // Refused before it is printed: a value nested hundreds of thousands of levels deep (JSON.parse
        // accepts ~1 MiB of `[[[…]]]`) took ~0.4 s to print, twice, only to be found too large (fuzz suite).
        const depth = nestingDepth(value, limits.propertiesBytesMax / 2);
        if (depth < 0) return `properties: larger than ${limits.propertiesBytesMax} bytes`;
        text = compactJson(value, depth);
      } else {
        text = propertyText(value);
      }
      texts[index] = text ?? "";
      upperBoundBytes += 6 * keys[index].length + 4 + (typeof value === "string" ? 6 * text!.length + 2 : text === undefined ? 4 : 6 * text.length);
    }
    if (printedPastLimit || (upperBoundBytes > limits.propertiesBytesMax && compactPropertiesBytes(properties, keys, texts) > limits.propertiesBytesMax)) {
      return `properties: larger than ${limits.propertiesBytesMax} bytes`;
    }
  }

  // Last of the checks, so that only an event that is stored takes one of the batch's days.
  if (days !== undefined && !days.admit(timeMs)) return batchDaysExceeded;

  // A uuid repeated within this chunk is dropped by the store, which claims
  // every uuid of a chunk in row order (SPEC: acknowledged, stored once).
  const row = builder.addRow(timeMs, name, distinctId, uuid);
  if (keys !== undefined) {
    for (let index = 0; index < keys.length; index++) {
      const value = properties![keys[index]];
      if (value === null || value === undefined) continue;
      builder.addProperty(row, keys[index], texts[index]);
    }
  }
  return undefined;
}

/**
 * Nesting depth of a parsed JSON value (1 for a container of scalars), or -1
 * when it holds more than `limit` arrays and objects. Iterative: JSON.parse
 * accepts nesting far deeper than the call stack.
 */
function nestingDepth(root: object, limit: number): number {
  const values: unknown[] = [root];
  const depths: number[] = [1];
  let count = 0;
  let deepest = 0;
  while (values.length > 0) {
    const value = values.pop();
    const depth = depths.pop()!;
    if (value === null || typeof value !== "object") continue;
    if (++count > limit) return -1;
    if (depth > deepest) deepest = depth;
    if (Array.isArray(value)) {
      for (const element of value) {
        values.push(element);
        depths.push(depth + 1);
      }
    } else {
      for (const key of Object.keys(value)) {
        values.push((value as Record<string, unknown>)[key]);
        depths.push(depth + 1);
      }
    }
  }
  return deepest;
}

/**
 * Up to this depth JSON.stringify prints a nested value (fastest when shallow);
 * deeper, linearJson does. JSON.stringify's cost grows with depth × size: a
 * 1 580-deep array took 0.65 ms, 1 580 sibling arrays 0.04 ms.
 */
const nativePrintDepthMax = 64;

/** Exact bytes of JSON.stringify(properties), from the texts already printed for its values. */
function compactPropertiesBytes(properties: Record<string, unknown>, keys: readonly string[], texts: readonly string[]): number {
  let bytes = 2 + Math.max(0, keys.length - 1);
  for (let index = 0; index < keys.length; index++) {
    const value = properties[keys[index]];
    bytes += Buffer.byteLength(JSON.stringify(keys[index]), "utf8") + 1;
    bytes += typeof value === "string" ? Buffer.byteLength(JSON.stringify(value), "utf8") : value === null ? 4 : Buffer.byteLength(texts[index], "utf8");
  }
  return bytes;
}

/**
 * Stored strings are UTF-8, which cannot hold a lone surrogate: such a string is
 * refused rather than stored altered, so every stored text round-trips exactly.
 */
function notWellFormed(field: string): string {
  return `${field}: contains a lone UTF-16 surrogate (not valid Unicode text)`;
}

const uuidScratch = new Uint8Array(16);
const batchDays = new BatchDays();
/** Property texts of the event being validated (reused: no allocation per event). */
const textScratch: string[] = [];

/** SPEC §4 "text" of a property value; undefined for null (not set). */
export function propertyText(value: unknown): string | undefined {
  switch (typeof value) {
    case "string":
      return value;
    case "number":
      return String(value);
    case "boolean":
      return value ? "true" : "false";
    case "object":
      return value === null ? undefined : compactJson(value);
    default:
      return undefined;
  }
}

/**
 * JSON.stringify of a value JSON.parse produced, printed by whichever is
 * faster at its depth (see nativePrintDepthMax); linearJson also prints nesting
 * deeper than JSON.stringify can recurse. `depth` when the caller measured it.
 */
export function compactJson(value: object, depth = nestingDepth(value, Number.POSITIVE_INFINITY)): string {
  return depth <= nativePrintDepthMax ? JSON.stringify(value) : linearJson(value);
}

/**
 * JSON.stringify's output for a value JSON.parse produced (no undefined,
 * functions, cycles or toJSON), in time linear in its size at any depth: one
 * frame per open container, scalars printed by JSON.stringify itself.
 */
export function linearJson(root: object): string {
  const parts: string[] = [];
  const containers: object[] = [root];
  const keyLists: Array<string[] | undefined> = [Array.isArray(root) ? undefined : Object.keys(root)];
  const positions: number[] = [0];
  parts.push(Array.isArray(root) ? "[" : "{");
  while (containers.length > 0) {
    const top = containers.length - 1;
    const container = containers[top];
    const keys = keyLists[top];
    const position = positions[top];
    if (position >= (keys === undefined ? (container as unknown[]).length : keys.length)) {
      parts.push(keys === undefined ? "]" : "}");
      containers.pop();
      keyLists.pop();
      positions.pop();
      continue;
    }
    positions[top] = position + 1;
    if (position > 0) parts.push(",");
    let element: unknown;
    if (keys === undefined) {
      element = (container as unknown[])[position];
    } else {
      parts.push(`${JSON.stringify(keys[position])}:`);
      element = (container as Record<string, unknown>)[keys[position]];
    }
    if (element !== null && typeof element === "object") {
      const isArray = Array.isArray(element);
      parts.push(isArray ? "[" : "{");
      containers.push(element);
      keyLists.push(isArray ? undefined : Object.keys(element));
      positions.push(0);
    } else {
      parts.push(JSON.stringify(element));
    }
  }
  return parts.join("");
}

/**
 * Bodies up to this size parse with JSON.parse in well under a second whatever
 * they hold (at most ~130 k arrays, objects or members at ~0.3–1 µs each).
 */
const nativeParseBodyBytesMax = 256 * 1024;
/**
 * Above this many `[`, `{` and `:` bytes a body goes to body-bytes.ts. An
 * ordinary 1 000-event batch holds ~20 k; JSON.parse builds each array and
 * object (~0.3 µs) and each member (~1 µs in an object of a million members).
 */
const nativeParseContainersAndMembersMax = 100_000;

function holdsManyContainersOrMembers(plain: Uint8Array): boolean {
  if (plain.length <= nativeParseBodyBytesMax) return false;
  let containersAndMembers = 0;
  for (let index = 0; index < plain.length; index++) {
    const byte = plain[index];
    // Stops at the threshold: a 20 MiB body of them is decided in its first few hundred KiB.
    if ((byte === 0x5b || byte === 0x7b || byte === 0x3a) && ++containersAndMembers > nativeParseContainersAndMembersMax) return true;
  }
  return false;
}
