// Over 500 lines: one scanner class whose field readers share its cursor and scratch in a monomorphic hot loop.
/**
 * The fast path of ingest: a body of flat events read straight from its bytes
 * into a chunk. JSON.parse builds an object per event and a string per field,
 * and validation then walks them and the chunk encodes the strings back to
 * bytes; here a string is a byte range of the body from scan to chunk, hashed
 * once and copied once.
 *
 * The scanner takes only bodies it can read exactly as JSON.parse followed by
 * event validation would (same rows, same strings, same order), which are
 * what SDKs send:
 *   - the body holds `apiKey` and `events` (a batch) or `apiKey` and the event
 *     fields (a single event), each once;
 *   - every event is valid, with fields among `event`, `distinctId`,
 *     `timestamp`, `uuid` and `properties`, each once;
 *   - strings hold no escape;
 *   - property values are strings, numbers, booleans or null, under distinct
 *     keys that do not start with a digit (JSON.parse moves integer-like keys
 *     to the front), at most propertiesScannedMax (4 096) of them;
 *   - a number is one String(number) prints back, or one that
 *     Number/String read and print without surprise (finite).
 * Anything else — an escape, a nested property value, an unknown or repeated
 * field, an invalid event, invalid JSON — and `scanBody` returns undefined
 * having touched no chunk. The body then goes the JSON.parse path, which gives
 * the same answer or finds the error and words it.
 *
 * Two passes: the scan records every field as a byte range in scratch arrays
 * and checks every rule; only a body that passed is appended to the chunk, so
 * giving up halfway needs no undoing.
 */
import { limits } from "../config/limits.js";
import { byteKeys, bytesEqual, finishHash, fnvPrime, hashBasis, hashBytes } from "../storage/chunk-codec.js";
import { parseTimestampBytes, parseUuidBytes } from "./event-fields.js";
import { Byte } from "../json/bytes.js";
import { Field, propertiesScannedMax, ScannedEvents, ValueKind, type ScannedBody } from "./scanned-events.js";

export type { ScannedBody } from "./scanned-events.js";

/**
 * A field name's bytes with its closing quote, so that one compare both
 * matches the name and finds its end. Uint8Arrays like the scanned bodies, so
 * that comparing them stays monomorphic.
 */
const quotedName = (name: string) => new Uint8Array(Buffer.from(`${name}"`, "latin1"));
const apiKeyName = quotedName("apiKey");
const eventsName = quotedName("events");
const eventName = quotedName("event");
const distinctIdName = quotedName("distinctId");
const timestampName = quotedName("timestamp");
const uuidName = quotedName("uuid");
const propertiesName = quotedName("properties");

/** Bytes of a timestamp as SDKs send it, `2024-05-01T12:00:00.000Z`. */
const isoTimestampLength = 24;
const uuidLength = 36;

/** The JSON grammar over ScannedEvents: one scanner per worker, reused for every body. */
class EventScanner extends ScannedEvents {
  scan(source: Uint8Array, shape: "batch" | "single", receivedAtMs: number): ScannedBody | undefined {
    this.begin(source);
    const scanned = shape === "batch" ? this.scanBatch(receivedAtMs) : this.scanSingle(receivedAtMs);
    if (scanned) this.skipWhitespace();
    if (scanned && this.at === this.end) return this;
    this.release();
    return undefined;
  }

  private scanBatch(receivedAtMs: number): boolean {
    if (!this.openObject()) return false;
    let seen = 0;
    let apiKeyStart = -1;
    let apiKeyEnd = -1;
    for (let more = this.firstMember(false); more; more = this.nextMember(false)) {
      const field = this.memberField;
      if ((seen & field) !== 0) return false;
      seen |= field;
      if (field === Field.ApiKey) {
        if (!this.stringSpan()) return false;
        apiKeyStart = this.stringStart;
        apiKeyEnd = this.stringEnd;
      } else if (field === Field.Events) {
        if (!this.events(receivedAtMs)) return false;
      } else {
        return false;
      }
    }
    if (this.failed || seen !== (Field.ApiKey | Field.Events)) return false;
    this.apiKey = this.apiKeyOf(apiKeyStart, apiKeyEnd);
    return true;
  }

  private events(receivedAtMs: number): boolean {
    this.skipWhitespace();
    if (this.source[this.at] !== Byte.OpenBracket) return false;
    this.at++;
    this.skipWhitespace();
    if (this.source[this.at] === Byte.CloseBracket) {
      this.at++;
      return true;
    }
    for (;;) {
      // Past the limit JSON.parse's path answers batch_too_large.
      if (this.eventCount === limits.batchEventsMax) return false;
      if (this.event(receivedAtMs, false) === undefined) return false;
      this.skipWhitespace();
      const next = this.source[this.at++];
      if (next === Byte.CloseBracket) return true;
      if (next !== Byte.Comma) return false;
      this.skipWhitespace();
    }
  }

  /** An event object at `at` (after whitespace). */
  protected event(receivedAtMs: number, withApiKey: boolean): string | undefined {
    if (!this.openObject()) return undefined;
    const event = this.eventCount;
    let seen = 0;
    let apiKey = "";
    let timeMs = receivedAtMs;
    this.hasUuid[event] = 0;
    for (let more = this.firstMember(false); more; more = this.nextMember(false)) {
      const field = this.memberField;
      if ((seen & field) !== 0) return undefined;
      seen |= field;
      switch (field) {
        case Field.Event: {
          if (!this.stringValue() || !this.takeName(event)) return undefined;
          break;
        }
        case Field.DistinctId: {
          if (this.source[this.at] === Byte.Quote) {
            if (!this.stringValue() || !this.takeDistinctId(event)) return undefined;
          } else {
            // A numeric distinctId is stored as String(number).
            const kind = this.numberValue();
            if (kind === ValueKind.Unscannable) return undefined;
            if (kind === ValueKind.Bytes) {
              this.idStart[event] = this.stringStart;
              this.idEnd[event] = this.stringEnd;
              this.idHash[event] = hashBytes(this.source, this.stringStart, this.stringEnd);
            } else {
              this.idStart[event] = -this.printedTexts.length; // the number's text was the last one pushed
            }
          }
          break;
        }
        case Field.Timestamp: {
          if (this.literal("null")) break;
          const parsed = this.timestampValue();
          if (parsed === undefined) return undefined;
          timeMs = parsed;
          break;
        }
        case Field.Uuid: {
          if (this.literal("null")) break;
          // A uuid is 36 bytes, each one parsed: the closing quote is where it must be, or the uuid is invalid.
          const at = this.at;
          if (this.source[at] !== Byte.Quote || this.source[at + 1 + uuidLength] !== Byte.Quote) return undefined;
          if (!parseUuidBytes(this.source, at + 1, at + 1 + uuidLength, this.uuids, event * 16)) return undefined;
          this.at = at + uuidLength + 2;
          this.hasUuid[event] = 1;
          break;
        }
        case Field.Properties: {
          if (this.literal("null")) break;
          if (!this.properties()) return undefined;
          break;
        }
        case Field.ApiKey: {
          if (!withApiKey || !this.stringSpan()) return undefined;
          apiKey = this.apiKeyOf(this.stringStart, this.stringEnd);
          break;
        }
        default:
          return undefined;
      }
    }
    return !this.failed && this.closeEvent(event, seen, withApiKey, timeMs, receivedAtMs) ? apiKey : undefined;
  }

  /**
   * A timestamp string at `at`, parsed; undefined when it is not one. The
   * common form is parsed in place, its closing quote where it must be:
   * parseTimestampBytes checks every byte, so no quote, escape or control
   * byte can hide inside, and the string need not be scanned for its end.
   */
  private timestampValue(): number | undefined {
    const at = this.at;
    const source = this.source;
    if (source[at] === Byte.Quote && source[at + 1 + isoTimestampLength] === Byte.Quote) {
      const parsed = parseTimestampBytes(source, at + 1, at + 1 + isoTimestampLength);
      if (parsed !== undefined) {
        this.at = at + isoTimestampLength + 2;
        return parsed;
      }
    }
    if (!this.stringSpan()) return undefined;
    return parseTimestampBytes(source, this.stringStart, this.stringEnd);
  }

  /** Scans a flat properties object, checking keys distinct and its compact JSON within the limit. */
  private properties(): boolean {
    if (!this.openObject()) return false;
    const first = this.propertyCount;
    const stamp = ++this.keyStamp;
    // JSON.stringify(properties): braces, commas, and per member `"key":value`.
    let compactBytes = 2;
    for (let more = this.firstMember(true); more; more = this.nextMember(true)) {
      const property = this.propertyCount;
      if (property - first === propertiesScannedMax) return false;
      if (property === this.keyStart.length) this.growProperties();
      const keyStart = this.memberKeyStart;
      const keyEnd = this.memberKeyEnd;
      // Integer-like keys come first in Object.keys order: the JSON.parse path keeps that order.
      const firstByte = this.source[keyStart];
      if (firstByte >= Byte.Zero && firstByte <= Byte.Nine) return false;
      const hash = this.memberKeyHash;
      if (!this.claimKey(property, keyStart, keyEnd, hash, stamp)) return false;
      this.keyStart[property] = keyStart;
      this.keyEnd[property] = keyEnd;
      this.keyHash[property] = hash;
      const valueFirst = this.source[this.at];
      let valueLength: number;
      if (valueFirst === Byte.Quote) {
        if (!this.stringValue()) return false;
        this.valueKind[property] = ValueKind.Bytes;
        valueLength = this.stringEnd - this.stringStart + 2;
      } else if (valueFirst === Byte.LowerT || valueFirst === Byte.LowerF || valueFirst === Byte.LowerN) {
        const start = this.at;
        const kind = this.literal("true") || this.literal("false") ? ValueKind.Bytes : this.literal("null") ? ValueKind.Null : ValueKind.Unscannable;
        if (kind === ValueKind.Unscannable) return false;
        this.valueKind[property] = kind;
        this.stringStart = start;
        this.stringEnd = this.at;
        this.stringHash = hashBytes(this.source, start, this.at);
        valueLength = this.at - start;
      } else {
        const kind = this.numberValue();
        if (kind === ValueKind.Unscannable) return false;
        this.valueKind[property] = kind;
        if (kind === ValueKind.Printed) {
          const printed = this.printedTexts.length - 1;
          this.stringStart = printed;
          valueLength = this.printedTexts[printed].length;
        } else {
          this.stringHash = hashBytes(this.source, this.stringStart, this.stringEnd);
          valueLength = this.stringEnd - this.stringStart;
        }
      }
      this.valueStart[property] = this.stringStart;
      this.valueEnd[property] = this.stringEnd;
      this.valueHash[property] = this.stringHash;
      compactBytes += (keyEnd - keyStart) + 3 + valueLength + (property > first ? 1 : 0);
      this.propertyCount = property + 1;
    }
    // Too large: JSON.parse's path refuses it and words the error.
    return !this.failed && compactBytes <= limits.propertiesBytesMax;
  }

  // ---- JSON grammar, as far as the scanner takes it ----

  /** Set when a member list ended in something other than `,` or `}`. */
  private failed = false;
  /** The key of the member just entered by firstMember/nextMember: a property's key, or a field's bit. */
  private memberField = 0;
  private memberKeyStart = 0;
  private memberKeyEnd = 0;
  private memberKeyHash = 0;

  private skipWhitespace(): void {
    const source = this.source;
    let at = this.at;
    for (;;) {
      const byte = source[at];
      // Compact JSON has no whitespace: every other byte is above the space, one compare.
      if (byte > Byte.Space || (byte !== Byte.Space && byte !== Byte.LineFeed && byte !== Byte.CarriageReturn && byte !== Byte.Tab)) break;
      at++;
    }
    this.at = at;
  }

  private openObject(): boolean {
    this.skipWhitespace();
    if (this.source[this.at] !== Byte.OpenBrace) return false;
    this.at++;
    this.failed = false;
    return true;
  }

  /**
   * Enters the first member of the object just opened: true with `at` on its
   * value and its key in memberKeyStart..memberKeyEnd and memberKeyHash (a
   * property) or memberField (a field), false at `}` (or on a syntax or a
   * field name this scanner does not take, with `failed` set).
   */
  private firstMember(isProperty: boolean): boolean {
    this.skipWhitespace();
    if (this.source[this.at] === Byte.CloseBrace) {
      this.at++;
      return false;
    }
    return this.memberKey(isProperty);
  }

  /** After a member's value: enters the next member, or leaves the object at `}`. */
  private nextMember(isProperty: boolean): boolean {
    this.skipWhitespace();
    const byte = this.source[this.at++];
    if (byte === Byte.CloseBrace) return false;
    if (byte !== Byte.Comma) {
      this.failed = true;
      return false;
    }
    this.skipWhitespace();
    return this.memberKey(isProperty);
  }

  /**
   * Property keys are scanned with their hash, for the duplicate-key check and
   * the intern; field names are only matched, never interned.
   */
  private memberKey(isProperty: boolean): boolean {
    if (isProperty) {
      if (!this.stringValue()) {
        this.failed = true;
        return false;
      }
      this.memberKeyStart = this.stringStart;
      this.memberKeyEnd = this.stringEnd;
      this.memberKeyHash = this.stringHash;
    } else {
      this.memberField = this.fieldName();
      // Any other name, even one spelled with escapes, is left to the JSON.parse path.
      if (this.memberField === 0) {
        this.failed = true;
        return false;
      }
    }
    this.skipWhitespace();
    if (this.source[this.at] !== Byte.Colon) {
      this.failed = true;
      return false;
    }
    this.at++;
    this.skipWhitespace();
    return true;
  }

  /**
   * Consumes a field name at `at` and returns its bit; 0 for any other key.
   * The first byte leaves one candidate (two for `e`), whose bytes and closing
   * quote are compared in place: the name is never scanned for its end.
   */
  private fieldName(): number {
    const source = this.source;
    const at = this.at;
    if (source[at] !== Byte.Quote) return 0;
    let field: number;
    let name: Uint8Array;
    switch (source[at + 1]) {
      case Byte.LowerA:
        field = Field.ApiKey;
        name = apiKeyName;
        break;
      case Byte.LowerD:
        field = Field.DistinctId;
        name = distinctIdName;
        break;
      case Byte.LowerE: {
        const plural = source[at + 6] === Byte.LowerS;
        field = plural ? Field.Events : Field.Event;
        name = plural ? eventsName : eventName;
        break;
      }
      case Byte.LowerP:
        field = Field.Properties;
        name = propertiesName;
        break;
      case Byte.LowerT:
        field = Field.Timestamp;
        name = timestampName;
        break;
      case Byte.LowerU:
        field = Field.Uuid;
        name = uuidName;
        break;
      default:
        return 0;
    }
    if (!bytesEqual(name, 0, source, at + 1, name.length)) return 0;
    this.at = at + 1 + name.length;
    return field;
  }

  /**
   * A string without escapes at `at`: its contents in stringStart..stringEnd
   * and hashBytes of them in stringHash (hashed while scanned: one pass for
   * scan and intern).
   */
  private stringValue(): boolean {
    const source = this.source;
    let at = this.at;
    if (source[at] !== Byte.Quote) return false;
    const start = ++at;
    const end = this.end;
    let hash = hashBasis;
    for (;;) {
      if (at >= end) return false;
      const byte = source[at];
      if (byte === Byte.Quote) break;
      // An escape may print differently than it is written; a control byte is invalid JSON.
      if (byte === Byte.Backslash || byte < Byte.Space) return false;
      hash = Math.imul(hash ^ byteKeys[byte], fnvPrime);
      at++;
    }
    this.stringStart = start;
    this.stringEnd = at;
    this.stringHash = finishHash(hash);
    this.at = at + 1;
    return true;
  }

  /**
   * stringValue without the hash, for strings that are parsed but never
   * interned (the apiKey, timestamps of an uncommon length). stringHash is
   * left as it was.
   */
  private stringSpan(): boolean {
    const source = this.source;
    let at = this.at;
    if (source[at] !== Byte.Quote) return false;
    const start = ++at;
    const end = this.end;
    for (;;) {
      if (at >= end) return false;
      const byte = source[at];
      if (byte === Byte.Quote) break;
      if (byte === Byte.Backslash || byte < Byte.Space) return false;
      at++;
    }
    this.stringStart = start;
    this.stringEnd = at;
    this.at = at + 1;
    return true;
  }

  /** Consumes `word` at `at` when it is there. */
  private literal(word: "true" | "false" | "null"): boolean {
    const source = this.source;
    const at = this.at;
    for (let index = 0; index < word.length; index++) if (source[at + index] !== word.charCodeAt(index)) return false;
    this.at = at + word.length;
    return true;
  }

  /**
   * A JSON number at `at`, its bytes in stringStart..stringEnd. Returns
   * ValueKind.Bytes when String(Number(text)) is the text itself, ValueKind.Printed
   * when it is another text (pushed on printedTexts), Unscannable when the number is
   * not JSON or not finite.
   */
  private numberValue(): ValueKind {
    const source = this.source;
    const start = this.at;
    let at = start;
    if (source[at] === Byte.Minus) at++;
    const integerStart = at;
    if (source[at] === Byte.Zero) {
      at++;
    } else {
      if (!(source[at] > Byte.Zero && source[at] <= Byte.Nine)) return ValueKind.Unscannable;
      while (source[at] >= Byte.Zero && source[at] <= Byte.Nine) at++;
    }
    const integerDigits = at - integerStart;
    let plainInteger = true;
    if (source[at] === Byte.Point) {
      plainInteger = false;
      const fractionStart = ++at;
      while (source[at] >= Byte.Zero && source[at] <= Byte.Nine) at++;
      if (at === fractionStart) return ValueKind.Unscannable;
    }
    if (source[at] === Byte.LowerE || source[at] === Byte.UpperE) {
      plainInteger = false;
      at++;
      if (source[at] === Byte.Plus || source[at] === Byte.Minus) at++;
      const exponentStart = at;
      while (source[at] >= Byte.Zero && source[at] <= Byte.Nine) at++;
      if (at === exponentStart) return ValueKind.Unscannable;
    }
    if (at > this.end) return ValueKind.Unscannable;
    this.at = at;
    this.stringStart = start;
    this.stringEnd = at;
    // Integers below 2^53 print as written, except -0 (String(-0) is "0").
    if (plainInteger && integerDigits <= 15 && !(source[start] === Byte.Minus && source[integerStart] === Byte.Zero)) return ValueKind.Bytes;
    const text = this.textOf(start, at, "latin1");
    const value = Number(text);
    if (!Number.isFinite(value)) return ValueKind.Unscannable;
    const printed = String(value);
    if (printed === text) return ValueKind.Bytes;
    this.printedTexts.push(printed);
    return ValueKind.Printed;
  }
}

const scanner = new EventScanner();

/**
 * Scans a plain (inflated, UTF-8-checked) body of the given shape; undefined
 * when the JSON.parse path must read it. The result is valid until the next call.
 */
export function scanBody(plain: Uint8Array, shape: "batch" | "single", receivedAtMs: number): ScannedBody | undefined {
  return scanner.scan(plain, shape, receivedAtMs);
}
