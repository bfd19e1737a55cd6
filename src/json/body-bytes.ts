/**
 * An ingest body parsed from its UTF-8 bytes, for bodies holding millions of
 * arrays, objects or members. V8's JSON.parse materialises every one of them
 * (~0.3 µs each here, ~1–3 µs per key of an object with a million keys: a
 * 20 MiB batch took 2.6–4.7 s), although nothing but a property's printed text
 * is ever kept. This parser builds only what
 * validation reads — the envelope, the events, their fields and `properties` —
 * and prints each nested property value straight from the bytes, so its cost is
 * a few passes over the bytes whatever they hold.
 *
 * Its answer is JSON.parse's, with six differences validation cannot observe:
 * - objects have no prototype (so `__proto__` stays an own key, as JSON.parse keeps it);
 * - a property value that is an array or object is a PrintedValue holding
 *   JSON.stringify(JSON.parse(its text)), or undefined when that is known to be
 *   longer than the properties limit;
 * - arrays and objects where validation only looks at the type (an array
 *   `properties`, an object `event`) are empty stand-ins;
 * - fields validation never reads are only syntax-checked, not kept;
 * - an `events` array longer than the batch limit keeps its length but only its
 *   first elements;
 * - `properties` with more keys than can print within the limit keep only
 *   those validation reads before refusing them (when no member can be
 *   refused by itself: the first keys written, each with its first value).
 * Syntax is checked everywhere, as JSON.parse checks it; the caller has already
 * checked that the bytes are UTF-8.
 */
import { limits, tuning } from "../config/limits.js";
import { Byte, doubled } from "./bytes.js";
import { ByteScanner, syntaxError } from "./byte-scanner.js";
import { KeyOrder } from "./key-order.js";
import { writeCanonicalString } from "./object-keys.js";
import { ValuePrinter } from "./value-printer.js";
import { printedContainersMax, ValueScan } from "./value-scan.js";

export type BodyShape = "batch" | "single";

export type ParsedBody = { kind: "object"; value: Record<string, unknown> } | { kind: "not-object" } | { kind: "syntax-error" };

/** Parses an ingest body (batch or single event) from bytes that are valid UTF-8. */
export function parseBodyBytes(bytes: Uint8Array, shape: BodyShape): ParsedBody {
  const parser = new BodyParser(bytes);
  try {
    parser.scanner.skipWhitespace();
    let parsed: ParsedBody;
    if (parser.scanner.peek() === Byte.OpenBrace) {
      parsed = { kind: "object", value: parser.parseObject(shape === "batch" ? Level.batchBody : Level.singleBody) };
    } else {
      parser.skipValue();
      parsed = { kind: "not-object" };
    }
    parser.scanner.skipWhitespace();
    if (!parser.scanner.atEnd()) throw syntaxError;
    return parsed;
  } catch (error) {
    if (error === syntaxError) return { kind: "syntax-error" };
    throw error;
  }
}

export type CheckedEnvelope = { kind: "object"; apiKey: string | undefined } | { kind: "not-object" } | { kind: "syntax-error" };

/**
 * The whole body's syntax checked without building anything, and its apiKey
 * as JSON.parse would read it (the last top-level `apiKey` member; undefined
 * when that is not a string). A few times cheaper than parsing: a body whose
 * key turns out unknown is refused for the cost of this alone.
 */
export function checkEnvelope(bytes: Uint8Array): CheckedEnvelope {
  const parser = new BodyParser(bytes);
  try {
    parser.scanner.skipWhitespace();
    let checked: CheckedEnvelope;
    if (parser.scanner.peek() === Byte.OpenBrace) {
      const apiKey = parser.parseObject(Level.envelope).apiKey;
      checked = { kind: "object", apiKey: typeof apiKey === "string" ? apiKey : undefined };
    } else {
      parser.skipValue();
      checked = { kind: "not-object" };
    }
    parser.scanner.skipWhitespace();
    if (!parser.scanner.atEnd()) throw syntaxError;
    return checked;
  } catch (error) {
    if (error === syntaxError) return { kind: "syntax-error" };
    throw error;
  }
}

/** What validation reads at each level of the body; everything else is only syntax-checked. */
const enum Level {
  /** checkEnvelope: only `apiKey` is read. */
  envelope,
  batchBody,
  singleBody,
  events,
  event,
  properties,
}

/** Fields of an event that validation reads (SPEC §2), and of a body besides them. */
const eventFields = new Set(["event", "distinctId", "timestamp", "properties", "uuid"]);
/** Every field name validation reads, with its UTF-8 bytes (all ASCII). */
const fieldNames = ["apiKey", "events", ...eventFields].map((name) => ({ name, bytes: Buffer.from(name, "latin1") }));
/** What parseFieldName answers for a name that is none of them: no field name holds a backslash. */
const unknownFieldName = "\\";

const emptyArrayStandIn: readonly unknown[] = Object.freeze([]);
const emptyObjectStandIn: object = Object.freeze(Object.create(null) as object);

/** Printed values longer than this in all make the event's properties too large whatever else they hold. */
const printedBytesMax = limits.propertiesBytesMax;
/** parseProperties' record of a member: key token start and end, value start, the containers the value keeps. */
const propertyRecordSlots = 4;
/** Properties with more members than this have the rest of their values scanned tracked only when built. */
const propertiesTrackedMembersMax = tuning.propertiesTrackedMembersMax;
/** A property record's containers when its value was only syntax-checked (tracked counts are ≥ 0). */
const untrackedContainers = -1;
/**
 * Properties with this many distinct keys print longer than the limit: n
 * members print as at least 6n bytes (each a key of one byte or more, but for
 * one empty key, two quotes, a colon, a one-byte value and a comma or the
 * closing brace; then the opening brace).
 */
const propertiesBuiltMax = Math.floor(limits.propertiesBytesMax / 6) + 1;

/**
 * Reads one body: the levels validation reads are built here; the tokens come
 * from the byte scanner, nested values are scanned and printed by their units.
 */
class BodyParser {
  readonly scanner: ByteScanner;
  private readonly keyOrder: KeyOrder;
  private readonly scan: ValueScan;
  private readonly printer: ValuePrinter;
  /** parseProperties' first pass: propertyRecordSlots per member. */
  private propertyRecords = new Int32Array(64 * 3);

  constructor(bytes: Uint8Array) {
    this.scanner = new ByteScanner(bytes);
    this.keyOrder = new KeyOrder(this.scanner);
    this.scan = new ValueScan(this.scanner, this.keyOrder);
    this.printer = new ValuePrinter(this.scanner, this.scan);
  }

  /** Syntax-checks one value and moves past it. */
  skipValue(): void {
    this.scan.scanValue(false);
  }

  /** An object at one of the levels validation reads; the opening brace is next. */
  parseObject(level: Level): Record<string, unknown> {
    const target = Object.create(null) as Record<string, unknown>;
    this.scanner.position++;
    this.scanner.skipWhitespace();
    if (this.scanner.peek() === Byte.CloseBrace) {
      this.scanner.position++;
      return target;
    }
    for (;;) {
      this.scanner.skipWhitespace();
      if (this.scanner.peek() !== Byte.Quote) throw syntaxError;
      const key = this.parseFieldName();
      this.scanner.expect(Byte.Colon);
      this.scanner.skipWhitespace();
      const wanted = this.memberLevel(level, key);
      if (wanted === undefined) this.skipValue();
      else if (wanted === "scalar") target[key] = this.parseScalarOrStandIn();
      else target[key] = this.parseAt(wanted);
      this.scanner.skipWhitespace();
      const next = this.scanner.bytes[this.scanner.position++];
      if (next === Byte.CloseBrace) return target;
      if (next !== Byte.Comma) throw syntaxError;
    }
  }

  /** What a member's value is parsed as: a level, a scalar (containers become stand-ins), or nothing (skipped). */
  private memberLevel(level: Level, key: string): Level | "scalar" | undefined {
    switch (level) {
      case Level.envelope:
        return key === "apiKey" ? "scalar" : undefined;
      case Level.batchBody:
        return key === "events" ? Level.events : key === "apiKey" ? "scalar" : undefined;
      case Level.singleBody:
      case Level.event:
        // A single event's fields sit beside its apiKey.
        if (key === "apiKey") return level === Level.singleBody ? "scalar" : undefined;
        return key === "properties" ? Level.properties : eventFields.has(key) ? "scalar" : undefined;
      case Level.properties:
      case Level.events:
        return undefined;
    }
  }

  /** A value read at `level` when it is the container that level expects, else a scalar or stand-in. */
  private parseAt(level: Level): unknown {
    const byte = this.scanner.peek();
    if (level === Level.events && byte === Byte.OpenBracket) return this.parseEvents();
    if (level === Level.properties && byte === Byte.OpenBrace) return this.parseProperties();
    if (level !== Level.events && byte === Byte.OpenBrace) return this.parseObject(level);
    return this.parseScalarOrStandIn();
  }

  /**
   * An event's properties as JSON.parse would build them, with each array or
   * object value printed. Distinct keys are found by keepMembers rather than by
   * assignment, so a million keys cost about their bytes; of properties that
   * cannot print within the limit, only what validation reads before refusing
   * them is built.
   */
  private parseProperties(): Record<string, unknown> {
    // First pass: syntax, and each member's key token and value offset. The values of the first
    // members are scanned tracked, once: what each keeps and which of its objects print
    // rewritten is recorded beside the others' (objects in start order), to be printed from if
    // its member is kept. Past propertiesTrackedMembersMax members most values are never
    // printed: the rest are only syntax-checked, and every value built is then scanned again,
    // one at a time, as it is printed (trackValue drops what the others recorded).
    const bytes = this.scanner.bytes;
    let top = 0;
    this.scan.forgetObjects();
    // Whatever is left for a value when it is printed, it is at most this.
    this.scan.scanBudget = printedBytesMax;
    /** Whether some member might be refused by itself (see refusedByItself); false when none can be. */
    let mayRefuseOne = false;
    this.scanner.position++;
    this.scanner.skipWhitespace();
    if (this.scanner.peek() === Byte.CloseBrace) {
      this.scanner.position++;
    } else {
      for (;;) {
        this.scanner.skipWhitespace();
        if (this.scanner.peek() !== Byte.Quote) throw syntaxError;
        if (top + propertyRecordSlots > this.propertyRecords.length) this.propertyRecords = doubled(this.propertyRecords);
        const keyStart = this.scanner.position;
        this.scanner.position = this.scanner.stringEnd(keyStart);
        if (this.scanner.stringEscaped && !this.scanner.wellFormedString(keyStart, this.scanner.position)) mayRefuseOne = true;
        this.propertyRecords[top] = keyStart;
        this.propertyRecords[top + 1] = this.scanner.position;
        this.scanner.expect(Byte.Colon);
        this.scanner.skipWhitespace();
        const valueStart = this.scanner.position;
        const tracked = top < propertiesTrackedMembersMax * propertyRecordSlots;
        const containers = tracked ? this.scan.scanValue(true) : untrackedContainers;
        if (!tracked) this.skipValue();
        this.propertyRecords[top + 2] = valueStart;
        this.propertyRecords[top + 3] = containers;
        top += propertyRecordSlots;
        if (bytes[valueStart] === Byte.Quote) {
          if (this.scanner.stringEscaped && !this.scanner.wellFormedString(valueStart, this.scanner.position)) mayRefuseOne = true;
        } else if (tracked ? containers > printedContainersMax : this.scanner.position - valueStart > 2 * printedContainersMax) {
          // Each container is at least two bytes: a shorter value cannot hold too many.
          mayRefuseOne = true;
        }
        this.scanner.skipWhitespace();
        const next = bytes[this.scanner.position++];
        if (next === Byte.CloseBrace) break;
        if (next !== Byte.Comma) throw syntaxError;
      }
    }
    const end = this.scanner.position;
    this.scan.scanBudget = Number.POSITIVE_INFINITY;
    const records = this.propertyRecords;
    const count = top / propertyRecordSlots;
    let kept: number;
    let firsts: Int32Array;
    let lasts: Int32Array;
    if (!mayRefuseOne && count >= propertiesBuiltMax && this.keyOrder.keyTable.holdsDistinct(bytes, records, 0, propertyRecordSlots, count, propertiesBuiltMax)) {
      // Too many keys to print within the limit, and no member validation would refuse by
      // itself: validation refuses these properties for their size whichever members it reads
      // and in whatever order. So only the first keys found are built, each with its first
      // value, and the rest (2 M keys in a 20 MiB body) are neither grouped nor sorted.
      kept = propertiesBuiltMax;
      firsts = this.keyOrder.keyTable.firstOf.slice(0, kept).map((member) => member * propertyRecordSlots);
      lasts = firsts;
    } else {
      kept = this.keyOrder.keepMembers(records, 0, top, propertyRecordSlots);
      // Printing a value reuses keepMembers' scratch.
      firsts = this.keyOrder.keptFirsts.slice(0, kept);
      lasts = this.keyOrder.keptLasts.slice(0, kept);
    }
    const target = Object.create(null) as Record<string, unknown>;
    // Once the values printed so far pass the limit, the properties are refused for their size
    // unless a member is refused by itself: later values are scanned for that, not printed.
    let printedBytes = 0;
    for (let position = 0; position < kept; position++) {
      const keyStart = records[firsts[position]];
      const keyEnd = records[firsts[position] + 1];
      const valueStart = records[lasts[position] + 2];
      const byte = bytes[valueStart];
      const container = byte === Byte.OpenBracket || byte === Byte.OpenBrace;
      const containers = container && count > propertiesTrackedMembersMax ? this.scan.trackValue(valueStart, printedBytesMax - printedBytes) : records[lasts[position] + 3];
      // Past the members that fit, validation refuses these properties at the first member it
      // refuses by itself, or else for their size: only that member is built.
      if (position >= propertiesBuiltMax && !this.refusedByItself(keyStart, keyEnd, valueStart, containers)) continue;
      this.scanner.stringEnd(keyStart);
      const key = this.scanner.decodeString(keyStart, keyEnd);
      this.scanner.position = valueStart;
      if (container) {
        const value = this.printer.printValue(valueStart, containers, printedBytesMax - printedBytes);
        printedBytes += value.text === undefined ? printedBytesMax + 1 : this.printer.output.length;
        target[key] = value;
      } else {
        target[key] = this.parseScalarOrStandIn();
      }
      if (position >= propertiesBuiltMax) break;
    }
    this.scanner.position = end;
    return target;
  }

  /**
   * Whether validation refuses a property by itself, whatever the others hold:
   * a key or string value that is not well-formed UTF-16, or a value holding
   * more arrays and objects than a printed value may (event-validation.ts).
   */
  private refusedByItself(keyStart: number, keyEnd: number, valueStart: number, containers: number): boolean {
    // Raw UTF-8 holds no lone surrogate: only escaped strings need decoding to tell.
    if (!this.scanner.wellFormedString(keyStart, keyEnd)) return true;
    const byte = this.scanner.bytes[valueStart];
    if (byte === Byte.Quote) return !this.scanner.wellFormedString(valueStart, this.scanner.stringEnd(valueStart));
    return containers > printedContainersMax;
  }

  /** The events array: its first elements parsed, the rest only counted (more answers 413 anyway). */
  private parseEvents(): unknown[] {
    const events: unknown[] = [];
    let count = 0;
    this.scanner.position++;
    this.scanner.skipWhitespace();
    if (this.scanner.peek() === Byte.CloseBracket) {
      this.scanner.position++;
      return events;
    }
    for (;;) {
      this.scanner.skipWhitespace();
      if (count > limits.batchEventsMax) this.skipValue();
      else events.push(this.scanner.peek() === Byte.OpenBrace ? this.parseObject(Level.event) : this.parseScalarOrStandIn());
      count++;
      this.scanner.skipWhitespace();
      const next = this.scanner.bytes[this.scanner.position++];
      if (next === Byte.CloseBracket) break;
      if (next !== Byte.Comma) throw syntaxError;
    }
    events.length = count;
    return events;
  }

  /** A scalar as JSON.parse reads it; an array or object as an empty stand-in of the same type. */
  private parseScalarOrStandIn(): unknown {
    const byte = this.scanner.peek();
    switch (byte) {
      case Byte.Quote:
        return this.scanner.parseString();
      case Byte.OpenBracket:
      case Byte.OpenBrace:
        this.skipValue();
        return byte === Byte.OpenBracket ? emptyArrayStandIn : emptyObjectStandIn;
      case Byte.LowerT:
        this.scanner.literal("true");
        return true;
      case Byte.LowerF:
        this.scanner.literal("false");
        return false;
      case Byte.LowerN:
        this.scanner.literal("null");
        return null;
      default:
        return this.scanner.parseNumber();
    }
  }

  /**
   * A member name at a level where only a few field names matter: the field
   * it spells, or unknownFieldName. Names are compared as bytes (an escaped one
   * in its canonical form), not made into strings: an event may hold 2 M
   * fields nobody reads.
   */
  private parseFieldName(): string {
    const start = this.scanner.position;
    this.scanner.position = this.scanner.stringEnd(start);
    if (!this.scanner.stringEscaped) return fieldNameOf(this.scanner.bytes, start + 1, this.scanner.position - 1);
    const scratch = this.scanner.canonicalScratch;
    scratch.length = 0;
    writeCanonicalString(this.scanner.bytes, start, this.scanner.position, scratch);
    return fieldNameOf(scratch.bytes, 0, scratch.length);
  }
}

/** The field name that bytes[start, end) spell, or unknownFieldName. */
function fieldNameOf(bytes: Uint8Array, start: number, end: number): string {
  for (const field of fieldNames) {
    if (field.bytes.length !== end - start) continue;
    let same = true;
    for (let offset = 0; same && offset < field.bytes.length; offset++) same = bytes[start + offset] === field.bytes[offset];
    if (same) return field.name;
  }
  return unknownFieldName;
}
