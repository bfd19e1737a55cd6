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
import { limits } from "../config/limits.js";
import { ByteSink, KeyTable, arrayIndexOf, writeCanonicalString } from "./object-keys.js";

/**
 * A nested property value, already printed as JSON.stringify prints it.
 * `text` is undefined when the value is too large: it holds more arrays and
 * objects than the limit allows (`tooManyContainers`, decided before printing,
 * as validation decides it for a parsed value), or it would print past what
 * the limit leaves beside the event's other values.
 */
export class PrintedValue {
  constructor(
    readonly text: string | undefined,
    readonly tooManyContainers = false,
  ) {}
}

export type BodyShape = "batch" | "single";

export type ParsedBody = { kind: "object"; value: Record<string, unknown> } | { kind: "not-object" } | { kind: "syntax-error" };

/** Parses an ingest body (batch or single event) from bytes that are valid UTF-8. */
export function parseBodyBytes(bytes: Uint8Array, shape: BodyShape): ParsedBody {
  const parser = new BodyParser(bytes);
  try {
    parser.skipWhitespace();
    let parsed: ParsedBody;
    if (parser.peek() === openBrace) {
      parsed = { kind: "object", value: parser.parseObject(shape === "batch" ? Level.batchBody : Level.singleBody) };
    } else {
      parser.skipValue();
      parsed = { kind: "not-object" };
    }
    parser.skipWhitespace();
    if (!parser.atEnd()) throw syntaxError;
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
    parser.skipWhitespace();
    let checked: CheckedEnvelope;
    if (parser.peek() === openBrace) {
      const apiKey = parser.parseObject(Level.envelope).apiKey;
      checked = { kind: "object", apiKey: typeof apiKey === "string" ? apiKey : undefined };
    } else {
      parser.skipValue();
      checked = { kind: "not-object" };
    }
    parser.skipWhitespace();
    if (!parser.atEnd()) throw syntaxError;
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

/** Thrown (one shared value, no stack captured) on the first byte JSON.parse would refuse. */
const syntaxError = new Error("JSON syntax error");

const openBrace = 0x7b;
const closeBrace = 0x7d;
const openBracket = 0x5b;
const closeBracket = 0x5d;
const quote = 0x22;
const backslash = 0x5c;
const comma = 0x2c;
const colon = 0x3a;
const minus = 0x2d;
const plus = 0x2b;
const zero = 0x30;
const nine = 0x39;
const point = 0x2e;

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
/**
 * Each array or object prints as at least two bytes, so a value holding more of
 * them than this is longer than the properties limit: it is not printed at all.
 */
const printedContainersMax = Math.floor(limits.propertiesBytesMax / 2);

/**
 * An object whose printed members differ from its written ones (duplicates
 * dropped or keys reordered) is recorded in the rewrite arena, once it is
 * printed, as: offset just past its closing brace, kept member count, then the
 * key start and value start of each kept member in printed order (the rest is
 * found again when printed, which stops at the properties limit).
 */
const rewriteHeaderSlots = 2;
const rewriteMemberSlots = 2;
/** In place of a rewrite record: an object of scalars whose kept members are found when it is printed. */
const rewriteDeferred = -2;
/** rewriteAt's answer for an object that prints longer than what is left of the budget. */
const printsTooLong = -3;
/**
 * In place of a rewrite record, membersRecordedBase − r (≤ this): an object
 * whose members are recorded as written at arena record r (same layout), to be
 * ordered when printed.
 */
const membersRecordedBase = -4;

const memberSlots = 5;
/** Index keys up to this many are sorted packed as value × this + place. */
const packedSortCountMax = 2 ** 21;
/** parseProperties' record of a member: key token start and end, value start, the containers the value keeps. */
const propertyRecordSlots = 4;
/** Properties with more members than this have the rest of their values scanned tracked only when built. */
const propertiesTrackedMembersMax = 4096;
/** A property record's containers when its value was only syntax-checked. */
const untrackedContainers = -1;
/**
 * Properties with this many distinct keys print longer than the limit: n
 * members print as at least 6n bytes (each a key of one byte or more, but for
 * one empty key, two quotes, a colon, a one-byte value and a comma or the
 * closing brace; then the opening brace).
 */
const propertiesBuiltMax = Math.floor(limits.propertiesBytesMax / 6) + 1;

/** Printed order of two keys of one object: array indexes (≥ 0) first, ascending, then the rest as written. */
function printsBefore(index: number, entry: number, otherIndex: number, otherEntry: number): boolean {
  if (index >= 0 && otherIndex >= 0) return index < otherIndex;
  if (index >= 0 || otherIndex >= 0) return index >= 0;
  return entry < otherEntry;
}
/**
 * Objects up to this many members, with plain keys this long in all, are
 * checked for duplicate and index keys by comparing bytes pairwise; others are
 * grouped by hashing their keys (object-keys.ts).
 */
const simpleObjectMembersMax = 16;
/** keptContainerCountOfFew's table: four slots per member at most. */
const fewKeysSlotMask = 63;
const simpleObjectKeyBytesMax = 256;

/** Printing: a stream copies one value token by token; a rewritten object walks its kept members. */
type PrintFrame = { position: number; depth: number } | { rewrite: number; member: number };

const frameArray = 0;
const frameObject = 1;

class BodyParser {
  private position = 0;
  private readonly text: Buffer;
  // Scan stack, one slot per open container, reused across values and grown by doubling.
  // Only kinds are kept when a value is just syntax-checked; the rest when it is tracked.
  private frameKinds = new Uint8Array(64);
  /** The object slot of each open object. */
  private frameObjectSlots = new Int32Array(64);
  private frameContainers = new Int32Array(64);
  private frameMemberBases = new Int32Array(64);
  /** keyStart, keyEnd, valueStart of the member being read, per open object. */
  private frameKeys = new Int32Array(64 * 3);
  /** Finished members of open objects: keyStart, keyEnd, valueStart, valueEnd, containers each. */
  private members = new Int32Array(64 * memberSlots);
  private memberTop = 0;
  // Every object of the tracked value, in the order they open (so by start offset):
  // its start and its record in the rewrite arena, -1 when it prints as written.
  private objectStarts = new Int32Array(64);
  private objectRewrites = new Int32Array(64);
  private objectCount = 0;
  private rewriteArena = new Int32Array(256);
  private rewriteTop = 0;
  /** The most bytes a tracked value may print as (parseProperties' budget for any one value). */
  private scanBudget = Number.POSITIVE_INFINITY;
  // recordPrintedOrderOfFew's scratch, one slot per member (at most simpleObjectMembersMax).
  private readonly entryKeyAts = new Int32Array(simpleObjectMembersMax);
  private readonly entryValueAts = new Int32Array(simpleObjectMembersMax);
  private readonly entryIndexes = new Float64Array(simpleObjectMembersMax);
  private readonly entryOrder = new Int32Array(simpleObjectMembersMax);
  // keptContainerCountOfFew's table: the object each slot was last filled for, and the member.
  private readonly fewKeysStamps = new Int32Array(fewKeysSlotMask + 1);
  private readonly fewKeysMembers = new Int32Array(fewKeysSlotMask + 1);
  /** Counts objects; one parser reads one body, which holds fewer than 2³¹ of them. */
  private fewKeysStamp = 0;
  // keepMembers' scratch, one slot per member of the largest object seen.
  private readonly keyTable = new KeyTable();
  /** Per member of the object being kept: the last member spelling its key, when it is the first. */
  private lastOf = new Int32Array(64);
  private indexKeyValues = new Uint32Array(64);
  private indexKeyMembers = new Int32Array(64);
  private sortedIndexKeys = new Float64Array(64);
  private unsortedIndexKeyMembers = new Int32Array(64);
  private keptFirsts = new Int32Array(64);
  private keptLasts = new Int32Array(64);
  /** parseProperties' first pass: keyStart, keyEnd, valueStart of each member. */
  private propertyRecords = new Int32Array(64 * 3);
  /** Where escaped names and strings are rewritten to be compared or checked. */
  private readonly canonicalScratch = new ByteSink();
  private readonly output = new ByteSink();

  constructor(private readonly bytes: Uint8Array) {
    this.text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  peek(): number {
    return this.position < this.bytes.length ? this.bytes[this.position] : -1;
  }

  atEnd(): boolean {
    return this.position >= this.bytes.length;
  }

  skipWhitespace(): void {
    this.position = skipWhitespaceAt(this.bytes, this.position);
  }

  private expect(byte: number): void {
    this.skipWhitespace();
    if (this.bytes[this.position] !== byte) throw syntaxError;
    this.position++;
  }

  /** An object at one of the levels validation reads; the opening brace is next. */
  parseObject(level: Level): Record<string, unknown> {
    const target = Object.create(null) as Record<string, unknown>;
    this.position++;
    this.skipWhitespace();
    if (this.peek() === closeBrace) {
      this.position++;
      return target;
    }
    for (;;) {
      this.skipWhitespace();
      if (this.peek() !== quote) throw syntaxError;
      const key = this.parseFieldName();
      this.expect(colon);
      this.skipWhitespace();
      const wanted = this.memberLevel(level, key);
      if (wanted === undefined) this.skipValue();
      else if (wanted === "scalar") target[key] = this.parseScalarOrStandIn();
      else target[key] = this.parseAt(wanted);
      this.skipWhitespace();
      const next = this.bytes[this.position++];
      if (next === closeBrace) return target;
      if (next !== comma) throw syntaxError;
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
    const byte = this.peek();
    if (level === Level.events && byte === openBracket) return this.parseEvents();
    if (level === Level.properties && byte === openBrace) return this.parseProperties();
    if (level !== Level.events && byte === openBrace) return this.parseObject(level);
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
    const bytes = this.bytes;
    let top = 0;
    this.objectCount = 0;
    this.rewriteTop = 0;
    // Whatever is left for a value when it is printed, it is at most this.
    this.scanBudget = printedBytesMax;
    /** Whether some member might be refused by itself (see refusedByItself); false when none can be. */
    let mayRefuseOne = false;
    this.position++;
    this.skipWhitespace();
    if (this.peek() === closeBrace) {
      this.position++;
    } else {
      for (;;) {
        this.skipWhitespace();
        if (this.peek() !== quote) throw syntaxError;
        if (top + propertyRecordSlots > this.propertyRecords.length) this.propertyRecords = doubled(this.propertyRecords);
        const keyStart = this.position;
        this.position = this.stringEnd(keyStart);
        if (this.stringEscaped && !this.wellFormedString(keyStart, this.position)) mayRefuseOne = true;
        this.propertyRecords[top] = keyStart;
        this.propertyRecords[top + 1] = this.position;
        this.expect(colon);
        this.skipWhitespace();
        const valueStart = this.position;
        const tracked = top < propertiesTrackedMembersMax * propertyRecordSlots;
        const containers = tracked ? this.scanValue(true) : untrackedContainers;
        if (!tracked) this.skipValue();
        this.propertyRecords[top + 2] = valueStart;
        this.propertyRecords[top + 3] = containers;
        top += propertyRecordSlots;
        if (bytes[valueStart] === quote) {
          if (this.stringEscaped && !this.wellFormedString(valueStart, this.position)) mayRefuseOne = true;
        } else if (tracked ? containers > printedContainersMax : this.position - valueStart > 2 * printedContainersMax) {
          // Each container is at least two bytes: a shorter value cannot hold too many.
          mayRefuseOne = true;
        }
        this.skipWhitespace();
        const next = bytes[this.position++];
        if (next === closeBrace) break;
        if (next !== comma) throw syntaxError;
      }
    }
    const end = this.position;
    this.scanBudget = Number.POSITIVE_INFINITY;
    const records = this.propertyRecords;
    const count = top / propertyRecordSlots;
    let kept: number;
    let firsts: Int32Array;
    let lasts: Int32Array;
    if (!mayRefuseOne && count >= propertiesBuiltMax && this.keyTable.holdsDistinct(bytes, records, 0, propertyRecordSlots, count, propertiesBuiltMax)) {
      // Too many keys to print within the limit, and no member validation would refuse by
      // itself: validation refuses these properties for their size whichever members it reads
      // and in whatever order. So only the first keys found are built, each with its first
      // value, and the rest (2 M keys in a 20 MiB body) are neither grouped nor sorted.
      kept = propertiesBuiltMax;
      firsts = this.keyTable.firstOf.slice(0, kept).map((member) => member * propertyRecordSlots);
      lasts = firsts;
    } else {
      kept = this.keepMembers(records, 0, top, propertyRecordSlots);
      // Printing a value reuses keepMembers' scratch.
      firsts = this.keptFirsts.slice(0, kept);
      lasts = this.keptLasts.slice(0, kept);
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
      const container = byte === openBracket || byte === openBrace;
      const containers = container && count > propertiesTrackedMembersMax ? this.trackValue(valueStart, printedBytesMax - printedBytes) : records[lasts[position] + 3];
      // Past the members that fit, validation refuses these properties at the first member it
      // refuses by itself, or else for their size: only that member is built.
      if (position >= propertiesBuiltMax && !this.refusedByItself(keyStart, keyEnd, valueStart, containers)) continue;
      this.stringEnd(keyStart);
      const key = this.decodeString(keyStart, keyEnd);
      this.position = valueStart;
      if (container) {
        const value = this.printValue(valueStart, containers, printedBytesMax - printedBytes);
        printedBytes += value.text === undefined ? printedBytesMax + 1 : this.output.length;
        target[key] = value;
      } else {
        target[key] = this.parseScalarOrStandIn();
      }
      if (position >= propertiesBuiltMax) break;
    }
    this.position = end;
    return target;
  }

  /**
   * Scans the value at `start` tracked, alone (what earlier values recorded is
   * dropped), to be printed within `budget` bytes; returns its containers.
   */
  private trackValue(start: number, budget: number): number {
    this.objectCount = 0;
    this.rewriteTop = 0;
    this.position = start;
    this.scanBudget = budget;
    const containers = this.scanValue(true);
    this.scanBudget = Number.POSITIVE_INFINITY;
    return containers;
  }

  /**
   * Whether validation refuses a property by itself, whatever the others hold:
   * a key or string value that is not well-formed UTF-16, or a value holding
   * more arrays and objects than a printed value may (event-validation.ts).
   */
  private refusedByItself(keyStart: number, keyEnd: number, valueStart: number, containers: number): boolean {
    // Raw UTF-8 holds no lone surrogate: only escaped strings need decoding to tell.
    if (!this.wellFormedString(keyStart, keyEnd)) return true;
    const byte = this.bytes[valueStart];
    if (byte === quote) return !this.wellFormedString(valueStart, this.stringEnd(valueStart));
    return containers > printedContainersMax;
  }

  /** Whether the string token at [start, end) decodes to well-formed UTF-16 (String.isWellFormed). */
  private wellFormedString(start: number, end: number): boolean {
    this.stringEnd(start);
    if (!this.stringEscaped) return true;
    const scratch = this.canonicalScratch;
    scratch.length = 0;
    return writeCanonicalString(this.bytes, start, end, scratch);
  }

  /** The events array: its first elements parsed, the rest only counted (more answers 413 anyway). */
  private parseEvents(): unknown[] {
    const events: unknown[] = [];
    let count = 0;
    this.position++;
    this.skipWhitespace();
    if (this.peek() === closeBracket) {
      this.position++;
      return events;
    }
    for (;;) {
      this.skipWhitespace();
      if (count > limits.batchEventsMax) this.skipValue();
      else events.push(this.peek() === openBrace ? this.parseObject(Level.event) : this.parseScalarOrStandIn());
      count++;
      this.skipWhitespace();
      const next = this.bytes[this.position++];
      if (next === closeBracket) break;
      if (next !== comma) throw syntaxError;
    }
    events.length = count;
    return events;
  }

  /** A scalar as JSON.parse reads it; an array or object as an empty stand-in of the same type. */
  private parseScalarOrStandIn(): unknown {
    const byte = this.peek();
    switch (byte) {
      case quote:
        return this.parseString();
      case openBracket:
      case openBrace:
        this.skipValue();
        return byte === openBracket ? emptyArrayStandIn : emptyObjectStandIn;
      case 0x74: // t
        this.literal("true");
        return true;
      case 0x66: // f
        this.literal("false");
        return false;
      case 0x6e: // n
        this.literal("null");
        return null;
      default:
        return this.parseNumber();
    }
  }

  private literal(word: string): void {
    const bytes = this.bytes;
    for (let index = 0; index < word.length; index++) {
      if (bytes[this.position + index] !== word.charCodeAt(index)) throw syntaxError;
    }
    this.position += word.length;
  }

  /** Set by stringEnd: whether the string just scanned holds an escape. */
  private stringEscaped = false;

  /** Offset just past the string token starting at `start` (a quote); throws on bad escapes or raw controls. */
  private stringEnd(start: number): number {
    const bytes = this.bytes;
    let position = start + 1;
    let escaped = false;
    for (;;) {
      if (position >= bytes.length) throw syntaxError;
      const byte = bytes[position];
      if (byte === quote) {
        this.stringEscaped = escaped;
        return position + 1;
      }
      if (byte < 0x20) throw syntaxError;
      if (byte === backslash) {
        escaped = true;
        const next = bytes[position + 1];
        if (next === 0x75) {
          for (let digit = 2; digit < 6; digit++) if (!isHexDigit(bytes[position + digit])) throw syntaxError;
          position += 6;
          continue;
        }
        if (next !== quote && next !== backslash && next !== 0x2f && next !== 0x62 && next !== 0x66 && next !== 0x6e && next !== 0x72 && next !== 0x74) throw syntaxError;
        position += 2;
        continue;
      }
      position++;
    }
  }

  /**
   * A member name at a level where only a few field names matter: the field
   * it spells, or unknownFieldName. Names are compared as bytes (an escaped one
   * in its canonical form), not made into strings: an event may hold 2 M
   * fields nobody reads.
   */
  private parseFieldName(): string {
    const start = this.position;
    this.position = this.stringEnd(start);
    if (!this.stringEscaped) return fieldNameOf(this.bytes, start + 1, this.position - 1);
    const scratch = this.canonicalScratch;
    scratch.length = 0;
    writeCanonicalString(this.bytes, start, this.position, scratch);
    return fieldNameOf(scratch.bytes, 0, scratch.length);
  }

  private parseString(): string {
    const start = this.position;
    this.position = this.stringEnd(start);
    return this.decodeString(start, this.position);
  }

  /** The string token just scanned by stringEnd. */
  private decodeString(start: number, end: number): string {
    // Escapes are rare: JSON.parse of the token itself decodes them exactly as it would in place.
    return this.stringEscaped ? (JSON.parse(this.text.toString("utf8", start, end)) as string) : this.text.toString("utf8", start + 1, end - 1);
  }

  /** Offset just past the number token at `start`, checked against JSON's grammar. */
  private numberEnd(start: number): number {
    const bytes = this.bytes;
    let position = start;
    if (bytes[position] === minus) position++;
    if (bytes[position] === zero) {
      position++;
    } else if (bytes[position] > zero && bytes[position] <= nine) {
      while (bytes[position] >= zero && bytes[position] <= nine) position++;
    } else {
      throw syntaxError;
    }
    if (bytes[position] === point) {
      position++;
      if (!(bytes[position] >= zero && bytes[position] <= nine)) throw syntaxError;
      while (bytes[position] >= zero && bytes[position] <= nine) position++;
    }
    if (bytes[position] === 0x65 || bytes[position] === 0x45) {
      position++;
      if (bytes[position] === plus || bytes[position] === minus) position++;
      if (!(bytes[position] >= zero && bytes[position] <= nine)) throw syntaxError;
      while (bytes[position] >= zero && bytes[position] <= nine) position++;
    }
    return position;
  }

  private parseNumber(): number {
    const start = this.position;
    this.position = this.numberEnd(start);
    // The grammar was checked: Number() reads the same value JSON.parse would (both round correctly).
    return Number(this.text.toString("latin1", start, this.position));
  }

  /** Syntax-checks one value and moves past it. */
  skipValue(): void {
    this.scanValue(false);
  }

  /**
   * Checks one value's syntax and moves past it. With `track`, also counts the
   * arrays and objects JSON.parse would keep (duplicate keys drop members) and
   * records each object's start, with what printing it will need (closeObject).
   * Iterative: nesting is as deep as the body is long, so a level costs one
   * byte untracked and a few words tracked.
   */
  private scanValue(tracked: boolean): number {
    let track = tracked;
    const bytes = this.bytes;
    let depth = 0;
    let position = this.position;
    // Tracked objects and their rewrites are kept across values until the caller resets them.
    if (track) this.memberTop = 0;
    // Containers opened while no object is open can never be dropped by a duplicate key: once
    // more of them than a printed value may hold are seen, the value is too large, and the rest
    // is only syntax-checked (20 MiB of `[[[…` then costs a byte per level, not a tracked frame).
    let openObjects = 0;
    let keptForSure = 0;
    let tooManyContainers = false;
    for (;;) {
      // A value starts here.
      position = skipWhitespaceAt(bytes, position);
      let byte = bytes[position];
      let valueContainers = 0;
      if (byte === openBracket && !track && bytes[position + 1] === openBracket) {
        // A run of `[[[…` only syntax-checked, as the deepest bodies hold: a store per level.
        // The run's last bracket is read below like any other (it may open an empty array).
        let kinds = this.frameKinds;
        do {
          if (depth === kinds.length) kinds = this.frameKinds = doubled(kinds);
          kinds[depth++] = frameArray;
          position++;
        } while (bytes[position + 1] === openBracket);
      }
      if (byte === openBracket || byte === openBrace) {
        if (track) {
          if (openObjects === 0 && ++keptForSure > printedContainersMax) {
            track = false;
            tooManyContainers = true;
          }
          if (byte === openBrace) openObjects++;
        }
        this.pushFrame(depth, byte === openBracket ? frameArray : frameObject, position, track);
        depth++;
        position++;
        position = skipWhitespaceAt(bytes, position);
        if (bytes[position] !== (byte === openBracket ? closeBracket : closeBrace)) {
          if (byte === openBrace) position = this.scanKey(depth - 1, position, track);
          continue;
        }
        position++;
        depth--;
        if (track && byte === openBrace) openObjects--;
        valueContainers = 1;
      } else if (byte === quote) {
        position = this.stringEnd(position);
      } else if (byte === 0x74 || byte === 0x66 || byte === 0x6e) {
        this.position = position;
        this.literal(byte === 0x74 ? "true" : byte === 0x66 ? "false" : "null");
        position = this.position;
      } else {
        position = this.numberEnd(position);
      }
      // A value ended at `position`: hand it to its container, closing containers as they end.
      for (;;) {
        if (depth === 0) {
          this.position = position;
          return tooManyContainers ? printedContainersMax + 1 : valueContainers;
        }
        const frame = depth - 1;
        const isArray = this.frameKinds[frame] === frameArray;
        if (track) {
          if (isArray) this.frameContainers[frame] += valueContainers;
          else this.pushMember(frame, position, valueContainers);
        }
        position = skipWhitespaceAt(bytes, position);
        byte = bytes[position++];
        if (byte === comma) {
          position = skipWhitespaceAt(bytes, position);
          if (!isArray) position = this.scanKey(frame, position, track);
          break;
        }
        if (byte !== (isArray ? closeBracket : closeBrace)) throw syntaxError;
        depth--;
        if (!track) {
          // Likewise a run of `]]]…`: a load and a compare per level.
          const kinds = this.frameKinds;
          while (depth > 0 && bytes[position] === closeBracket && kinds[depth - 1] === frameArray) {
            depth--;
            position++;
          }
          continue;
        }
        if (isArray) {
          valueContainers = 1 + this.frameContainers[frame];
          continue;
        }
        openObjects--;
        valueContainers = 1 + this.closeObject(frame, position);
      }
    }
  }

  private pushFrame(depth: number, kind: number, start: number, track: boolean): void {
    if (depth === this.frameKinds.length) this.frameKinds = doubled(this.frameKinds);
    this.frameKinds[depth] = kind;
    if (!track) return;
    if (depth === this.frameObjectSlots.length) {
      this.frameObjectSlots = doubled(this.frameObjectSlots);
      this.frameContainers = doubled(this.frameContainers);
      this.frameMemberBases = doubled(this.frameMemberBases);
      this.frameKeys = doubled(this.frameKeys);
    }
    this.frameContainers[depth] = 0;
    this.frameMemberBases[depth] = this.memberTop;
    if (kind !== frameObject) return;
    if (this.objectCount === this.objectStarts.length) {
      this.objectStarts = doubled(this.objectStarts);
      this.objectRewrites = doubled(this.objectRewrites);
    }
    const slot = this.objectCount++;
    this.objectStarts[slot] = start;
    this.objectRewrites[slot] = -1;
    this.frameObjectSlots[depth] = slot;
  }

  /** Reads `"key"` and the colon after it; the member's value starts at the returned offset. */
  private scanKey(frame: number, position: number, track: boolean): number {
    const bytes = this.bytes;
    if (bytes[position] !== quote) throw syntaxError;
    const keyEnd = this.stringEnd(position);
    if (track) {
      this.frameKeys[frame * 3] = position;
      this.frameKeys[frame * 3 + 1] = keyEnd;
    }
    position = keyEnd;
    position = skipWhitespaceAt(bytes, position);
    if (bytes[position++] !== colon) throw syntaxError;
    position = skipWhitespaceAt(bytes, position);
    if (track) this.frameKeys[frame * 3 + 2] = position;
    return position;
  }

  /**
   * Records a finished member of an open object on the member stack. An inner
   * object's members sit above its parent's and are popped when it closes, so
   * an object's members are contiguous when it closes.
   */
  private pushMember(frame: number, valueEnd: number, containers: number): void {
    if (this.memberTop + memberSlots > this.members.length) this.members = doubled(this.members);
    const members = this.members;
    const top = this.memberTop;
    members[top] = this.frameKeys[frame * 3];
    members[top + 1] = this.frameKeys[frame * 3 + 1];
    members[top + 2] = this.frameKeys[frame * 3 + 2];
    members[top + 3] = valueEnd;
    members[top + 4] = containers;
    this.memberTop = top + memberSlots;
  }

  /**
   * Pops a closing object's members and returns the arrays and objects its kept
   * members hold. JSON.parse keeps one member per key — the last value, at the
   * first position — and lists array-index keys first, ascending. Which members
   * print, and in what order, is worked out only if the object is printed
   * (printedOrder): many never are, since a member dropped by a duplicate key
   * or past the limit is not, and a 20 MiB body may hold 600 k objects.
   */
  private closeObject(frame: number, end: number): number {
    const base = this.frameMemberBases[frame];
    const top = this.memberTop;
    this.memberTop = base;
    const members = this.members;
    const count = (top - base) / memberSlots;
    if (count === 0) return 0;
    if (count === 1) return members[base + 4];
    let containers = 0;
    for (let at = base + 4; at < top; at += memberSlots) containers += members[at];
    const slot = this.frameObjectSlots[frame];
    if (containers === 0) {
      // Only scalars: none is kept whichever members are, and the members can be read again
      // cheaply when printed. The value itself (frame 0) is printed whenever its member is kept:
      // when it has too many keys to fit any budget it may get, that is known now, while its
      // members are at hand, rather than by reading them all again.
      const tooLong = frame === 0 && this.tooManyKeysToPrint(base, top, this.scanBudget);
      this.objectRewrites[slot] = tooLong ? printsTooLong : rewriteDeferred;
      return 0;
    }
    // Values hold containers, which a duplicate key may drop: duplicates are found now (no
    // order needed), and the members are recorded as written, since reading them again
    // would read every nested value again, once per level.
    const record = this.reserveRewrite(slot, end, count);
    const arena = this.rewriteArena;
    // Written inline rather than by writeRewriteMember: this runs for every such object of a body.
    for (let at = base, slotAt = record + rewriteHeaderSlots; at < top; at += memberSlots, slotAt += rewriteMemberSlots) {
      arena[slotAt] = members[at];
      arena[slotAt + 1] = members[at + 2];
    }
    this.objectRewrites[slot] = membersRecordedBase - record;
    return this.keptContainerCount(base, top, containers);
  }

  /** The containers the kept members of `members[base, top)` hold: `written` unless a duplicate key drops some. */
  private keptContainerCount(base: number, top: number, written: number): number {
    const members = this.members;
    const count = (top - base) / memberSlots;
    if (count <= simpleObjectMembersMax) {
      const kept = this.keptContainerCountOfFew(base, top);
      if (kept >= 0) return kept;
    }
    const table = this.keyTable;
    table.group(this.bytes, members, base, memberSlots, count);
    const firstOf = table.firstOf;
    let member = 0;
    while (member < count && firstOf[member] === member) member++;
    if (member === count) return written;
    this.reserveKept(count);
    const lastOf = this.lastOf;
    for (member = 0; member < count; member++) lastOf[firstOf[member]] = member;
    let kept = 0;
    for (member = 0; member < count; member++) if (firstOf[member] === member) kept += members[base + lastOf[member] * memberSlots + 4];
    return kept;
  }

  /**
   * Records the object in `slot`, whose members are `members[base, top)`, in
   * the rewrite arena when its printed members differ from its written ones.
   */
  private recordPrintedOrder(slot: number, base: number, top: number, end: number): void {
    const members = this.members;
    const count = (top - base) / memberSlots;
    let simple = count <= simpleObjectMembersMax;
    let keyBytes = 0;
    for (let at = base; simple && at < top; at += memberSlots) {
      keyBytes += members[at + 1] - members[at];
      if (keyBytes > simpleObjectKeyBytesMax || this.hasEscape(members[at], members[at + 1])) simple = false;
    }
    if (simple) this.recordPrintedOrderOfFew(slot, base, top, end);
    else this.recordPrintedOrderByTable(slot, base, top, end);
  }

  /**
   * The rewrite record of the object of only scalars at `start` (tracked slot
   * `slot`) whose kept members closeObject left to be worked out when printed:
   * its members are read again (syntax was checked) and kept and ordered as
   * JSON.parse keeps them. Returns -1 when it prints as written, and
   * printsTooLong when it has so many distinct keys that it prints longer than
   * `budget` bytes.
   */
  private printedOrder(slot: number, start: number, budget: number): number {
    const bytes = this.bytes;
    this.memberTop = 0;
    let position = skipWhitespaceAt(bytes, start + 1);
    for (;;) {
      position = this.scanKey(0, position, true);
      const byte = bytes[position];
      let valueEnd: number;
      if (byte === quote) valueEnd = this.stringEnd(position);
      else if (byte === 0x74 || byte === 0x6e) valueEnd = position + 4;
      else if (byte === 0x66) valueEnd = position + 5;
      else valueEnd = this.numberEnd(position);
      this.pushMember(0, valueEnd, 0);
      position = skipWhitespaceAt(bytes, valueEnd);
      // The scan found a comma or the closing brace here.
      if (bytes[position++] === closeBrace) break;
      position = skipWhitespaceAt(bytes, position);
    }
    this.objectRewrites[slot] = -1;
    const top = this.memberTop;
    this.memberTop = 0;
    if (this.tooManyKeysToPrint(0, top, budget)) return printsTooLong;
    this.recordPrintedOrder(slot, 0, top, position);
    return this.objectRewrites[slot];
  }

  /**
   * keptContainerCount for at most simpleObjectMembersMax members: walked from
   * the last, a member is kept when its key was not seen yet, looked up in a
   * small table of key bytes that is never cleared (slots of other objects
   * carry older stamps). -1 when a key holds an escape: those are compared in
   * canonical form, by the key table.
   */
  private keptContainerCountOfFew(base: number, top: number): number {
    const members = this.members;
    const bytes = this.bytes;
    const stamp = ++this.fewKeysStamp;
    const stamps = this.fewKeysStamps;
    const slotMembers = this.fewKeysMembers;
    let kept = 0;
    for (let at = top - memberSlots; at >= base; at -= memberSlots) {
      const keyStart = members[at];
      const keyEnd = members[at + 1];
      // FNV-1a over the key's bytes: an object of few members cannot make collisions cost much.
      let hash = 0x811c9dc5;
      for (let position = keyStart + 1; position < keyEnd - 1; position++) {
        const byte = bytes[position];
        if (byte === backslash) return -1;
        hash = Math.imul(hash ^ byte, 0x01000193);
      }
      let slot = (hash ^ (hash >>> 16)) & fewKeysSlotMask;
      let seen = false;
      while (stamps[slot] === stamp) {
        const other = slotMembers[slot];
        if (this.sameBytes(members[other], members[other + 1], keyStart, keyEnd)) {
          seen = true;
          break;
        }
        slot = (slot + 1) & fewKeysSlotMask;
      }
      if (seen) continue;
      stamps[slot] = stamp;
      slotMembers[slot] = at;
      kept += members[at + 4];
    }
    return kept;
  }

  /** As printedOrder, for an object holding containers, whose written members closeObject recorded at arena `record`. */
  private printedOrderOfRecorded(slot: number, record: number, budget: number): number {
    const end = this.rewriteArena[record];
    const count = this.rewriteArena[record + 1];
    while (count * memberSlots > this.members.length) this.members = doubled(this.members);
    const members = this.members;
    for (let member = 0; member < count; member++) {
      const at = member * memberSlots;
      const keyStart = this.rewriteArena[record + rewriteHeaderSlots + member * rewriteMemberSlots];
      members[at] = keyStart;
      members[at + 1] = this.stringEnd(keyStart);
      members[at + 2] = this.rewriteArena[record + rewriteHeaderSlots + member * rewriteMemberSlots + 1];
      // Value ends and containers are not needed to order the members.
      members[at + 3] = 0;
      members[at + 4] = 0;
    }
    const top = count * memberSlots;
    this.objectRewrites[slot] = -1;
    if (this.tooManyKeysToPrint(0, top, budget)) return printsTooLong;
    this.recordPrintedOrder(slot, 0, top, end);
    return this.objectRewrites[slot];
  }

  /**
   * Whether the members `members[base, top)` spell so many distinct keys that
   * their object prints longer than `budget` bytes. Keys are told apart only
   * until there are that many: a 20 MiB object of 2 M keys needs 13 k, not all.
   */
  private tooManyKeysToPrint(base: number, top: number, budget: number): boolean {
    // n distinct keys print as at least 5n + 1 bytes: `{`, then per member a key of two quotes
    // and a byte (but for one empty key), a colon, a one-byte value and a comma or the `}`.
    const distinctTooMany = Math.floor(Math.max(0, budget - 1) / 5) + 1;
    const count = (top - base) / memberSlots;
    return count >= distinctTooMany && this.keyTable.holdsDistinct(this.bytes, this.members, base, memberSlots, count, distinctTooMany);
  }

  /**
   * Few members with plain keys: duplicates are found by comparing key bytes,
   * index keys by reading their digits, so the common object allocates nothing.
   */
  private recordPrintedOrderOfFew(slot: number, base: number, top: number, end: number): void {
    const members = this.members;
    let hasDuplicate = false;
    let hasIndexKey = false;
    for (let at = base; at < top; at += memberSlots) {
      if (!hasIndexKey && this.arrayIndex(members[at], members[at + 1]) >= 0) hasIndexKey = true;
      for (let earlier = base; !hasDuplicate && earlier < at; earlier += memberSlots) {
        if (this.sameBytes(members[earlier], members[earlier + 1], members[at], members[at + 1])) hasDuplicate = true;
      }
    }
    if (!hasDuplicate && !hasIndexKey) return;
    // One entry per key: its first member's position, its last member's value.
    const keyAts = this.entryKeyAts;
    const valueAts = this.entryValueAts;
    const indexes = this.entryIndexes;
    const order = this.entryOrder;
    let entryCount = 0;
    for (let at = base; at < top; at += memberSlots) {
      let entry = 0;
      while (entry < entryCount && !this.sameBytes(members[keyAts[entry]], members[keyAts[entry] + 1], members[at], members[at + 1])) entry++;
      if (entry === entryCount) {
        keyAts[entry] = at;
        indexes[entry] = this.arrayIndex(members[at], members[at + 1]);
        entryCount++;
      }
      valueAts[entry] = at;
    }
    // Index keys first, ascending; then the others as written (an insertion sort: a few entries).
    for (let entry = 0; entry < entryCount; entry++) {
      let position = entry;
      while (position > 0 && printsBefore(indexes[entry], entry, indexes[order[position - 1]], order[position - 1])) {
        order[position] = order[position - 1];
        position--;
      }
      order[position] = entry;
    }
    let inOrder = !hasDuplicate;
    for (let position = 0; inOrder && position < entryCount; position++) inOrder = order[position] === position;
    if (inOrder) return;
    const record = this.reserveRewrite(slot, end, entryCount);
    for (let position = 0; position < entryCount; position++) {
      this.writeRewriteMember(record, position, keyAts[order[position]], valueAts[order[position]]);
    }
  }

  /** Starts an arena record for the object in `slot`; members are written by writeRewriteMember. */
  private reserveRewrite(slot: number, end: number, memberCount: number): number {
    const size = rewriteHeaderSlots + memberCount * rewriteMemberSlots;
    while (this.rewriteTop + size > this.rewriteArena.length) this.rewriteArena = doubled(this.rewriteArena);
    const record = this.rewriteTop;
    this.rewriteArena[record] = end;
    this.rewriteArena[record + 1] = memberCount;
    this.rewriteTop += size;
    this.objectRewrites[slot] = record;
    return record;
  }

  /** Kept member `position` of a rewrite: the key of the member at `keyAt`, the value of the one at `valueAt`. */
  private writeRewriteMember(record: number, position: number, keyAt: number, valueAt: number): void {
    const arena = this.rewriteArena;
    const members = this.members;
    const at = record + rewriteHeaderSlots + position * rewriteMemberSlots;
    arena[at] = members[keyAt];
    arena[at + 1] = members[valueAt + 2];
  }

  /** Many members or escaped keys: distinct keys found by hashing their canonical bytes. */
  private recordPrintedOrderByTable(slot: number, base: number, top: number, end: number): void {
    const kept = this.keepMembers(this.members, base, top, memberSlots);
    const firsts = this.keptFirsts;
    const lasts = this.keptLasts;
    let inOrder = kept === (top - base) / memberSlots;
    for (let position = 0; inOrder && position < kept; position++) inOrder = firsts[position] === base + position * memberSlots;
    if (inOrder) return;
    const record = this.reserveRewrite(slot, end, kept);
    for (let position = 0; position < kept; position++) this.writeRewriteMember(record, position, firsts[position], lasts[position]);
  }

  /**
   * The members JSON.parse keeps of an object whose members are the records
   * `records[base, top)` (`stride` slots each, key token start and end first):
   * one per distinct key, at its first record's position with its last
   * record's value, index keys first, ascending. Writes them in printed order
   * to keptFirsts and keptLasts (record offsets) and returns their count.
   */
  private keepMembers(records: Int32Array, base: number, top: number, stride: number): number {
    const table = this.keyTable;
    const count = (top - base) / stride;
    table.group(this.bytes, records, base, stride, count);
    this.reserveKept(count);
    // Members are counted from 0 here; records are at base + member * stride.
    const firstOf = table.firstOf;
    const lastOf = this.lastOf;
    let kept = 0;
    let indexKeys = 0;
    for (let member = 0; member < count; member++) {
      const first = firstOf[member];
      if (first === member) {
        kept++;
        const index = table.arrayIndex(member);
        if (index >= 0) {
          this.indexKeyValues[indexKeys] = index;
          this.indexKeyMembers[indexKeys++] = member;
        }
      }
      lastOf[first] = member;
    }
    const keptFirsts = this.keptFirsts;
    const keptLasts = this.keptLasts;
    let position = 0;
    if (indexKeys > 0) {
      this.sortIndexKeys(indexKeys);
      for (let rank = 0; rank < indexKeys; rank++) {
        const member = this.indexKeyMembers[rank];
        keptFirsts[position] = base + member * stride;
        keptLasts[position++] = base + lastOf[member] * stride;
        // Marks the key as placed, for the pass over the others below.
        lastOf[member] = -1;
      }
    }
    for (let member = 0; member < count; member++) {
      if (firstOf[member] !== member || lastOf[member] < 0) continue;
      keptFirsts[position] = base + member * stride;
      keptLasts[position++] = base + lastOf[member] * stride;
    }
    return kept;
  }

  /** keepMembers' per-member scratch for `count` members, grown together (they share one length). */
  private reserveKept(count: number): void {
    if (count <= this.lastOf.length) return;
    // Doubled, not fitted: objects of growing size would otherwise reallocate every time.
    const size = Math.max(count, this.lastOf.length * 2);
    this.lastOf = new Int32Array(size);
    this.keptFirsts = new Int32Array(size);
    this.keptLasts = new Int32Array(size);
    this.indexKeyValues = new Uint32Array(size);
    this.indexKeyMembers = new Int32Array(size);
  }

  /**
   * Sorts the first `count` index keys (distinct values, with their members) by
   * value: by insertion when few, else natively (a radix sort's tables, ~0.5 MiB
   * a call, cost too much for the many small objects one value may hold: a
   * 20 MiB body of 33-key objects took 14–18 s that way).
   */
  private sortIndexKeys(count: number): void {
    const values = this.indexKeyValues;
    const members = this.indexKeyMembers;
    if (count <= 16) {
      for (let next = 1; next < count; next++) {
        const value = values[next];
        const member = members[next];
        let position = next;
        for (; position > 0 && values[position - 1] > value; position--) {
          values[position] = values[position - 1];
          members[position] = members[position - 1];
        }
        values[position] = value;
        members[position] = member;
      }
      return;
    }
    if (count > this.sortedIndexKeys.length) {
      this.sortedIndexKeys = new Float64Array(Math.max(count, this.sortedIndexKeys.length * 2));
      this.unsortedIndexKeyMembers = new Int32Array(this.sortedIndexKeys.length);
    }
    const sorted = this.sortedIndexKeys.subarray(0, count);
    const unsortedMembers = this.unsortedIndexKeyMembers;
    unsortedMembers.set(members.subarray(0, count));
    if (count <= packedSortCountMax) {
      // Each value with its place beside it in one double, exact below 2³² × 2²¹ = 2⁵³.
      for (let index = 0; index < count; index++) sorted[index] = values[index] * packedSortCountMax + index;
      sorted.sort();
      for (let index = 0; index < count; index++) {
        const place = sorted[index] % packedSortCountMax;
        values[index] = (sorted[index] - place) / packedSortCountMax;
        members[index] = unsortedMembers[place];
      }
      return;
    }
    // More than a 20 MiB body can hold (raised limits): the values are distinct, so each
    // member goes to its value's rank, found by binary search (~2× slower).
    for (let index = 0; index < count; index++) sorted[index] = values[index];
    sorted.sort();
    for (let index = 0; index < count; index++) members[rankOf(sorted, values[index])] = unsortedMembers[index];
    values.set(sorted);
  }

  /**
   * The arena record of the tracked object starting at `start`, -1 when it
   * prints as written, or printsTooLong when it prints longer than `budget`.
   */
  private rewriteAt(start: number, budget: number): number {
    let low = 0;
    let high = this.objectCount - 1;
    while (low <= high) {
      const middle = (low + high) >>> 1;
      const middleStart = this.objectStarts[middle];
      if (middleStart === start) {
        const rewrite = this.objectRewrites[middle];
        if (rewrite === rewriteDeferred) return this.printedOrder(middle, start, budget);
        if (rewrite <= membersRecordedBase) return this.printedOrderOfRecorded(middle, membersRecordedBase - rewrite, budget);
        return rewrite;
      }
      if (middleStart < start) low = middle + 1;
      else high = middle - 1;
    }
    return -1;
  }

  private hasEscape(start: number, end: number): boolean {
    const bytes = this.bytes;
    for (let position = start + 1; position < end - 1; position++) if (bytes[position] === backslash) return true;
    return false;
  }

  /** The array index an unescaped key token spells (canonical decimal ≤ 2³² − 2), or -1. */
  private arrayIndex(start: number, end: number): number {
    return arrayIndexOf(this.bytes, start + 1, end - 1);
  }

  private sameBytes(leftStart: number, leftEnd: number, rightStart: number, rightEnd: number): boolean {
    if (leftEnd - leftStart !== rightEnd - rightStart) return false;
    const bytes = this.bytes;
    for (let offset = 0; offset < leftEnd - leftStart; offset++) if (bytes[leftStart + offset] !== bytes[rightStart + offset]) return false;
    return true;
  }

  /**
   * A property's array or object value at `start`, scanned tracked (it keeps
   * `containers`), printed from the bytes as JSON.stringify(JSON.parse(…))
   * would, unless it is longer than `budget` bytes (what the properties limit
   * leaves once other values are printed).
   */
  private printValue(start: number, containers: number, budget: number): PrintedValue {
    if (containers > printedContainersMax) return new PrintedValue(undefined, true);
    return new PrintedValue(budget < 0 ? undefined : this.print(start, budget));
  }

  /**
   * Prints the value at `start` without whitespace, each scalar in JSON.stringify's
   * form, each rewritten object by its kept members; undefined once the text
   * passes `budget` bytes. One frame per rewritten object, not per level.
   */
  private print(start: number, budget: number): string | undefined {
    const bytes = this.bytes;
    this.output.length = 0;
    // A stream frame copies one value token by token; a rewritten frame walks kept members.
    const streams: PrintFrame[] = [{ position: start, depth: 0 }];
    while (streams.length > 0) {
      if (this.output.length > budget) return undefined;
      const frame = streams[streams.length - 1];
      if ("rewrite" in frame) {
        const arena = this.rewriteArena;
        if (frame.member === arena[frame.rewrite + 1]) {
          this.emitByte(closeBrace);
          streams.pop();
          // The stream that reached this object ends with it when the object was its whole value.
          const parent = streams[streams.length - 1];
          if (parent !== undefined && "depth" in parent && parent.depth === 0) streams.pop();
          continue;
        }
        const at = frame.rewrite + rewriteHeaderSlots + frame.member * rewriteMemberSlots;
        this.emitByte(frame.member === 0 ? openBrace : comma);
        this.emitString(arena[at], this.stringEnd(arena[at]));
        this.emitByte(colon);
        frame.member++;
        streams.push({ position: arena[at + 1], depth: 0 });
        continue;
      }
      let position = frame.position;
      position = skipWhitespaceAt(bytes, position);
      const byte = bytes[position];
      const rewrite = byte === openBrace ? this.rewriteAt(position, budget - this.output.length) : -1;
      if (rewrite === printsTooLong) return undefined;
      if (rewrite >= 0) {
        frame.position = this.rewriteArena[rewrite];
        streams.push({ rewrite, member: 0 });
        continue;
      }
      // Syntax was checked by the scan: tokens only need telling apart. A token at depth 0 is the whole value.
      let valueEnded = true;
      if (byte === openBrace || byte === openBracket) {
        this.emitByte(byte);
        frame.depth++;
        position++;
        valueEnded = false;
      } else if (byte === closeBrace || byte === closeBracket) {
        this.emitByte(byte);
        frame.depth--;
        position++;
      } else if (byte === comma || byte === colon) {
        this.emitByte(byte);
        position++;
        valueEnded = false;
      } else if (byte === quote) {
        const end = this.stringEnd(position);
        this.emitString(position, end);
        position = end;
      } else if (byte === 0x74 || byte === 0x66 || byte === 0x6e) {
        const length = byte === 0x66 ? 5 : 4;
        this.emitBytes(position, position + length);
        position += length;
      } else {
        const end = this.numberEnd(position);
        this.emitNumber(position, end);
        position = end;
      }
      frame.position = position;
      if (valueEnded && frame.depth === 0) streams.pop();
    }
    if (this.output.length > budget) return undefined;
    return Buffer.from(this.output.bytes.buffer, 0, this.output.length).toString("utf8");
  }

  private emitByte(byte: number): void {
    this.output.reserve(1);
    this.output.bytes[this.output.length++] = byte;
  }

  private emitBytes(start: number, end: number): void {
    this.output.reserve(end - start);
    this.output.bytes.set(this.bytes.subarray(start, end), this.output.length);
    this.output.length += end - start;
  }

  private emitText(text: string): void {
    const output = this.output;
    output.reserve(text.length * 3);
    output.length += Buffer.from(output.bytes.buffer, 0, output.bytes.length).write(text, output.length, "utf8");
  }

  /** A string token as JSON.stringify prints it: unescaped tokens already are; escaped ones are rewritten. */
  private emitString(start: number, end: number): void {
    this.stringEnd(start);
    if (!this.stringEscaped) {
      this.emitBytes(start, end);
      return;
    }
    this.emitByte(quote);
    writeCanonicalString(this.bytes, start, end, this.output);
    this.emitByte(quote);
  }

  /** A number token as JSON.stringify prints it: short plain integers already are. */
  private emitNumber(start: number, end: number): void {
    const bytes = this.bytes;
    const digitsStart = bytes[start] === minus ? start + 1 : start;
    let plainInteger = end - digitsStart <= 15 && (bytes[digitsStart] !== zero || end - start === 1);
    for (let position = digitsStart; plainInteger && position < end; position++) {
      if (bytes[position] < zero || bytes[position] > nine) plainInteger = false;
    }
    if (plainInteger) this.emitBytes(start, end);
    else this.emitText(JSON.stringify(Number(this.text.toString("latin1", start, end))));
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

/** Where `value` sits in ascending `sorted`, which holds it. */
function rankOf(sorted: Float64Array, value: number): number {
  let low = 0;
  let high = sorted.length - 1;
  for (;;) {
    const middle = (low + high) >>> 1;
    if (sorted[middle] < value) low = middle + 1;
    else if (sorted[middle] > value) high = middle - 1;
    else return middle;
  }
}

function isWhitespace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

/** The first offset at or after `position` that is not JSON whitespace. */
function skipWhitespaceAt(bytes: Uint8Array, position: number): number {
  while (position < bytes.length && isWhitespace(bytes[position])) position++;
  return position;
}

function doubled<T extends Uint8Array | Int32Array>(array: T): T {
  const grown = new (array.constructor as new (length: number) => T)(array.length * 2);
  grown.set(array);
  return grown;
}

function isHexDigit(byte: number): boolean {
  return (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x46) || (byte >= 0x61 && byte <= 0x66);
}
