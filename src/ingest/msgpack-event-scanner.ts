/**
 * The fast path of msgpack ingest bodies: event-scanner.ts's twin for the
 * msgpack format. msgpackr builds an object per event and a string per field,
 * which validation then walks and the chunk encodes back to bytes; here a
 * string is a byte range of the body from scan to chunk, its length read from
 * its header, hashed once and copied once.
 *
 * It takes the bodies the JSON scanner takes, written in msgpack: a map of
 * `apiKey` and `events` (a batch) or of `apiKey` and the event fields (a
 * single event), each once; every event valid, with fields among the five,
 * each once; property values strings, numbers, booleans or nil under distinct
 * keys that do not start with a digit, at most propertiesScannedMax of them.
 * A msgpack string needs no escape, so none is left for that; a number is
 * stored as String(number), as msgpackr's value would be. Anything else —
 * bin, ext, a non-string key, NaN, invalid UTF-8, the key __proto__, bytes
 * after the value, an unknown or repeated field, an invalid event, a nested
 * property value — and `scanMsgpackBody` returns undefined having touched no
 * chunk. The body then goes the msgpackr path (msgpack-body.ts), which gives
 * the same answer or finds the error and words it.
 */
import { isUtf8 } from "node:buffer";
import { limits } from "../config/limits.js";
import { byteKeys, bytesEqual, finishHash, fnvPrime, hashBasis } from "../storage/chunk-codec.js";
import { parseTimestampBytes, parseUuidBytes } from "./event-fields.js";
import { Field, propertiesScannedMax, ScannedEvents, ValueKind, type ScannedBody } from "./scanned-events.js";

/** msgpack's format bytes this scanner reads (the spec's names). */
const enum Format {
  FixMapFirst = 0x80,
  FixMapLast = 0x8f,
  FixArrayFirst = 0x90,
  FixArrayLast = 0x9f,
  FixStrFirst = 0xa0,
  FixStrLast = 0xbf,
  Nil = 0xc0,
  False = 0xc2,
  True = 0xc3,
  Float32 = 0xca,
  Float64 = 0xcb,
  Uint8 = 0xcc,
  Uint16 = 0xcd,
  Uint32 = 0xce,
  Uint64 = 0xcf,
  Int8 = 0xd0,
  Int16 = 0xd1,
  Int32 = 0xd2,
  Int64 = 0xd3,
  Str8 = 0xd9,
  Str16 = 0xda,
  Str32 = 0xdb,
  Array16 = 0xdc,
  Array32 = 0xdd,
  Map16 = 0xde,
  Map32 = 0xdf,
  NegativeFixIntFirst = 0xe0,
}

/** Maps nested in the deepest scanned body: the body, `events`, an event, its properties. */
const scannedNestingDepth = 4;

const fieldName = (name: string) => new Uint8Array(Buffer.from(name, "latin1"));
const apiKeyName = fieldName("apiKey");
const eventsName = fieldName("events");
const eventName = fieldName("event");
const distinctIdName = fieldName("distinctId");
const timestampName = fieldName("timestamp");
const uuidName = fieldName("uuid");
const propertiesName = fieldName("properties");
/** msgpack-body.ts refuses a body holding this key: the msgpackr path says so. */
const protoName = fieldName("__proto__");

/**
 * Bytes JSON.stringify adds to a string for each of its bytes: `"` and `\`
 * are escaped with a backslash, as are the control bytes with a short escape;
 * other control bytes become `\u00XX`. Properties are limited by their
 * compact JSON size (SPEC §2), and a msgpack string may hold any of these.
 */
const escapeExtraBytes = new Uint8Array(256);
for (let byte = 0; byte < 0x20; byte++) escapeExtraBytes[byte] = 5;
for (const byte of [0x08, 0x09, 0x0a, 0x0c, 0x0d, 0x22, 0x5c]) escapeExtraBytes[byte] = 1;

const uuidLength = 36;
const emptyView = new DataView(new ArrayBuffer(0));

/** The msgpack grammar over ScannedEvents: one scanner per worker, reused for every body. */
class MsgpackEventScanner extends ScannedEvents {
  private view: DataView = emptyView;
  /** What JSON.stringify would add to the string just read (text). */
  private stringEscapeBytes = 0;

  scan(source: Uint8Array, shape: "batch" | "single", receivedAtMs: number): ScannedBody | undefined {
    // A depth the msgpackr path refuses is its to word.
    if (limits.msgpackNestingDepthMax < scannedNestingDepth) return undefined;
    this.begin(source);
    this.view = new DataView(this.source.buffer, this.source.byteOffset, this.source.byteLength);
    const scanned = shape === "batch" ? this.scanBatch(receivedAtMs) : this.scanSingle(receivedAtMs);
    if (scanned && this.at === this.end) return this;
    this.release();
    return undefined;
  }

  protected override release(): void {
    super.release();
    this.view = emptyView;
  }

  private scanBatch(receivedAtMs: number): boolean {
    let members = this.mapHeader();
    if (members < 0) return false;
    let seen = 0;
    let apiKeyStart = -1;
    let apiKeyEnd = -1;
    for (; members > 0; members--) {
      const field = this.field();
      if (field === 0 || (seen & field) !== 0) return false;
      seen |= field;
      if (field === Field.ApiKey) {
        if (!this.apiKeyValue()) return false;
        apiKeyStart = this.stringStart;
        apiKeyEnd = this.stringEnd;
      } else if (field === Field.Events) {
        if (!this.events(receivedAtMs)) return false;
      } else {
        return false;
      }
    }
    if (seen !== (Field.ApiKey | Field.Events)) return false;
    this.apiKey = this.apiKeyOf(apiKeyStart, apiKeyEnd);
    return true;
  }

  private events(receivedAtMs: number): boolean {
    const count = this.arrayHeader();
    // Past the limit the msgpackr path answers batch_too_large.
    if (count < 0 || count > limits.batchEventsMax) return false;
    for (let index = 0; index < count; index++) if (this.event(receivedAtMs, false) === undefined) return false;
    return true;
  }

  /** An event map at `at`. */
  protected event(receivedAtMs: number, withApiKey: boolean): string | undefined {
    let members = this.mapHeader();
    if (members < 0) return undefined;
    const event = this.eventCount;
    const source = this.source;
    let seen = 0;
    let apiKey = "";
    let timeMs = receivedAtMs;
    this.hasUuid[event] = 0;
    for (; members > 0; members--) {
      const field = this.field();
      if (field === 0 || (seen & field) !== 0) return undefined;
      seen |= field;
      switch (field) {
        case Field.Event: {
          if (!this.text() || !this.takeName(event)) return undefined;
          break;
        }
        case Field.DistinctId: {
          if (this.isString()) {
            if (!this.text() || !this.takeDistinctId(event)) return undefined;
          } else {
            // A numeric distinctId is stored as String(number).
            if (this.printedNumber() === ValueKind.Unscannable) return undefined;
            this.idStart[event] = -this.printedTexts.length;
          }
          break;
        }
        case Field.Timestamp: {
          if (this.nil()) break;
          if (!this.span()) return undefined;
          const parsed = parseTimestampBytes(source, this.stringStart, this.stringEnd);
          if (parsed === undefined) return undefined;
          timeMs = parsed;
          break;
        }
        case Field.Uuid: {
          if (this.nil()) break;
          // Every byte of a uuid is parsed as a hex digit or a dash: a string that is one is ASCII.
          if (!this.span() || this.stringEnd - this.stringStart !== uuidLength) return undefined;
          if (!parseUuidBytes(source, this.stringStart, this.stringEnd, this.uuids, event * 16)) return undefined;
          this.hasUuid[event] = 1;
          break;
        }
        case Field.Properties: {
          if (this.nil()) break;
          if (!this.properties()) return undefined;
          break;
        }
        case Field.ApiKey: {
          if (!withApiKey || !this.apiKeyValue()) return undefined;
          apiKey = this.apiKeyOf(this.stringStart, this.stringEnd);
          break;
        }
        default:
          return undefined;
      }
    }
    return this.closeEvent(event, seen, withApiKey, timeMs, receivedAtMs) ? apiKey : undefined;
  }

  /** Scans a flat properties map, checking keys distinct and its compact JSON within the limit. */
  private properties(): boolean {
    let members = this.mapHeader();
    if (members < 0 || members > propertiesScannedMax) return false;
    const first = this.propertyCount;
    const stamp = ++this.keyStamp;
    const source = this.source;
    // JSON.stringify(properties): braces, commas, and per member `"key":value`.
    let compactBytes = 2;
    for (; members > 0; members--) {
      const property = this.propertyCount;
      if (property === this.keyStart.length) this.growProperties();
      if (!this.text()) return false;
      const keyStart = this.stringStart;
      const keyEnd = this.stringEnd;
      // Integer-like keys come first in Object.keys order: the msgpackr path keeps that order.
      const firstByte = source[keyStart];
      if (firstByte >= 0x30 && firstByte <= 0x39) return false;
      if (keyEnd - keyStart === protoName.length && bytesEqual(protoName, 0, source, keyStart, protoName.length)) return false;
      const hash = this.stringHash;
      if (!this.claimKey(property, keyStart, keyEnd, hash, stamp)) return false;
      this.keyStart[property] = keyStart;
      this.keyEnd[property] = keyEnd;
      this.keyHash[property] = hash;
      const keyBytes = keyEnd - keyStart + this.stringEscapeBytes;
      let valueLength: number;
      if (this.isString()) {
        if (!this.text()) return false;
        this.valueKind[property] = ValueKind.Bytes;
        this.valueStart[property] = this.stringStart;
        this.valueEnd[property] = this.stringEnd;
        this.valueHash[property] = this.stringHash;
        valueLength = this.stringEnd - this.stringStart + this.stringEscapeBytes + 2;
      } else if (this.nil()) {
        this.valueKind[property] = ValueKind.Null;
        valueLength = 4;
      } else {
        if (!this.printedBoolean() && this.printedNumber() === ValueKind.Unscannable) return false;
        const printed = this.printedTexts.length - 1;
        this.valueKind[property] = ValueKind.Printed;
        this.valueStart[property] = printed;
        valueLength = this.printedTexts[printed].length;
      }
      compactBytes += keyBytes + 3 + valueLength + (property > first ? 1 : 0);
      this.propertyCount = property + 1;
    }
    // Too large: the msgpackr path refuses it and words the error.
    return compactBytes <= limits.propertiesBytesMax;
  }

  // ---- msgpack grammar, as far as the scanner takes it ----

  /** Entries of the map at `at`, its header consumed; -1 when it is not a map. */
  private mapHeader(): number {
    const token = this.source[this.at];
    if (token >= Format.FixMapFirst && token <= Format.FixMapLast) {
      this.at++;
      return token - Format.FixMapFirst;
    }
    return token === Format.Map16 || token === Format.Map32 ? this.countAfter(token === Format.Map16 ? 2 : 4) : -1;
  }

  /** Items of the array at `at`, its header consumed; -1 when it is not an array. */
  private arrayHeader(): number {
    const token = this.source[this.at];
    if (token >= Format.FixArrayFirst && token <= Format.FixArrayLast) {
      this.at++;
      return token - Format.FixArrayFirst;
    }
    return token === Format.Array16 || token === Format.Array32 ? this.countAfter(token === Format.Array16 ? 2 : 4) : -1;
  }

  /** The big-endian count of `width` bytes after the token at `at`; -1 when the body ends first. */
  private countAfter(width: 2 | 4): number {
    const at = this.at + 1;
    if (at + width > this.end) return -1;
    this.at = at + width;
    return width === 2 ? this.view.getUint16(at) : this.view.getUint32(at);
  }

  private isString(): boolean {
    const token = this.source[this.at];
    return (token >= Format.FixStrFirst && token <= Format.FixStrLast) || token === Format.Str8 || token === Format.Str16 || token === Format.Str32;
  }

  /** Consumes nil at `at` when it is there. */
  private nil(): boolean {
    if (this.source[this.at] !== Format.Nil) return false;
    this.at++;
    return true;
  }

  /** A string at `at`: its bytes in stringStart..stringEnd, unchecked. False when there is none. */
  private span(): boolean {
    const source = this.source;
    let at = this.at;
    const token = source[at++];
    let length: number;
    if (token >= Format.FixStrFirst && token <= Format.FixStrLast) length = token - Format.FixStrFirst;
    else if (token === Format.Str8 && at < this.end) length = source[at++];
    else if (token === Format.Str16 && at + 2 <= this.end) {
      length = this.view.getUint16(at);
      at += 2;
    } else if (token === Format.Str32 && at + 4 <= this.end) {
      length = this.view.getUint32(at);
      at += 4;
    } else return false;
    if (length > this.end - at) return false;
    this.stringStart = at;
    this.stringEnd = at + length;
    this.at = at + length;
    return true;
  }

  /** A string at `at` as span, checked UTF-8, with its hash (hashBytes') and its JSON escapes counted. */
  private text(): boolean {
    if (!this.span()) return false;
    const source = this.source;
    const end = this.stringEnd;
    let hash = hashBasis;
    let highBits = 0;
    let escapeBytes = 0;
    for (let at = this.stringStart; at < end; at++) {
      const byte = source[at];
      hash = Math.imul(hash ^ byteKeys[byte], fnvPrime);
      highBits |= byte;
      escapeBytes += escapeExtraBytes[byte];
    }
    if (highBits >= 0x80 && !isUtf8(source.subarray(this.stringStart, end))) return false;
    this.stringHash = finishHash(hash);
    this.stringEscapeBytes = escapeBytes;
    return true;
  }

  /** The apiKey's string: checked UTF-8, not hashed. */
  private apiKeyValue(): boolean {
    if (!this.span()) return false;
    for (let at = this.stringStart; at < this.stringEnd; at++) if (this.source[at] >= 0x80) return isUtf8(this.source.subarray(this.stringStart, this.stringEnd));
    return true;
  }

  /**
   * A field name at `at`, consumed; its bit, or 0 for any other key (a key
   * that is not a string among them). Names are told apart by their length
   * and first byte, then compared whole.
   */
  private field(): number {
    if (!this.span()) return 0;
    const start = this.stringStart;
    const first = this.source[start];
    let field: number;
    let name: Uint8Array;
    switch (this.stringEnd - start) {
      case 4:
        field = Field.Uuid;
        name = uuidName;
        break;
      case 5:
        field = Field.Event;
        name = eventName;
        break;
      case 6:
        field = first === 0x61 ? Field.ApiKey : Field.Events;
        name = first === 0x61 ? apiKeyName : eventsName;
        break;
      case 9:
        field = Field.Timestamp;
        name = timestampName;
        break;
      case 10:
        field = first === 0x64 ? Field.DistinctId : Field.Properties;
        name = first === 0x64 ? distinctIdName : propertiesName;
        break;
      default:
        return 0;
    }
    return bytesEqual(name, 0, this.source, start, name.length) ? field : 0;
  }

  /** A boolean at `at` consumed and its text pushed on printedTexts; false when there is none. */
  private printedBoolean(): boolean {
    const token = this.source[this.at];
    if (token !== Format.True && token !== Format.False) return false;
    this.at++;
    this.printedTexts.push(token === Format.True ? "true" : "false");
    return true;
  }

  /**
   * A number at `at` consumed and its text (String(value), as the msgpackr
   * path stores it) pushed on printedTexts: ValueKind.Printed.
   * Unscannable for anything else, a float that is not finite among them.
   */
  private printedNumber(): ValueKind {
    const source = this.source;
    const view = this.view;
    const at = this.at;
    const token = source[at];
    let value: number;
    let width = 0;
    if (token <= 0x7f) value = token;
    else if (token >= Format.NegativeFixIntFirst) value = token - 0x100;
    else {
      switch (token) {
        case Format.Uint8:
        case Format.Int8:
          width = 1;
          break;
        case Format.Uint16:
        case Format.Int16:
          width = 2;
          break;
        case Format.Uint32:
        case Format.Int32:
        case Format.Float32:
          width = 4;
          break;
        case Format.Uint64:
        case Format.Int64:
        case Format.Float64:
          width = 8;
          break;
        default:
          return ValueKind.Unscannable;
      }
      if (at + 1 + width > this.end) return ValueKind.Unscannable;
      const from = at + 1;
      switch (token) {
        case Format.Uint8:
          value = source[from];
          break;
        case Format.Int8:
          value = view.getInt8(from);
          break;
        case Format.Uint16:
          value = view.getUint16(from);
          break;
        case Format.Int16:
          value = view.getInt16(from);
          break;
        case Format.Uint32:
          value = view.getUint32(from);
          break;
        case Format.Int32:
          value = view.getInt32(from);
          break;
        case Format.Float32:
          value = view.getFloat32(from);
          break;
        case Format.Float64:
          value = view.getFloat64(from);
          break;
        // 64-bit integers as msgpackr reads them with int64AsType "number": one rounding, in this order.
        case Format.Uint64:
          value = view.getUint32(from) * 0x100000000 + view.getUint32(from + 4);
          break;
        default:
          value = view.getInt32(from) * 0x100000000 + view.getUint32(from + 4);
          break;
      }
      if (!Number.isFinite(value)) return ValueKind.Unscannable;
    }
    this.at = at + 1 + width;
    this.printedTexts.push(String(value));
    return ValueKind.Printed;
  }
}

const scanner = new MsgpackEventScanner();

/**
 * Scans a plain (inflated) msgpack body of the given shape; undefined when the
 * msgpackr path must read it. The result is valid until the next call.
 */
export function scanMsgpackBody(plain: Uint8Array, shape: "batch" | "single", receivedAtMs: number): ScannedBody | undefined {
  return scanner.scan(plain, shape, receivedAtMs);
}
