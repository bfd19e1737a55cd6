/**
 * What `eventide import` needs to know of one NDJSON line to forward its bytes
 * into a batch body without parsing it: that it is one JSON object (so it is
 * exactly one element of the batch's `events` array, and the server's
 * per-event answer names it), whether it has a top-level `uuid`, and where
 * its top-level `timestamp` string is (its UTC day, for the batch's days
 * cap). The server validates everything else. A line this scan cannot vouch
 * for (a key written with escapes, brackets that close before its end) is
 * left to JSON.parse.
 */
import { isWhitespace } from "../json/bytes.js";

const quote = 0x22;
const backslash = 0x5c;
const openBrace = 0x7b;
const closeBrace = 0x7d;
const openBracket = 0x5b;
const closeBracket = 0x5d;
const comma = 0x2c;
const colon = 0x3a;
const dayMs = 86_400_000;

const uuidKey = Buffer.from("uuid");
const timestampKey = Buffer.from("timestamp");

function digitsAt(bytes: Uint8Array, start: number, count: number): number {
  let value = 0;
  for (let index = start; index < start + count; index++) {
    const digit = bytes[index] - 0x30;
    if (digit < 0 || digit > 9) return Number.NaN;
    value = value * 10 + digit;
  }
  return value;
}

/** Which day a line's events count for in the batch's distinct-days cap. */
export type LineDay = { kind: "day"; day: number } | { kind: "receipt" } | { kind: "none" };

const receiptDay: LineDay = { kind: "receipt" };
const noDay: LineDay = { kind: "none" };

/** A zone other than Z after the date: `+02:00`, `-0500`, `+02`. */
function hasOffset(bytes: Uint8Array, start: number, end: number): boolean {
  if (bytes[end - 1] === 0x5a || bytes[end - 1] === 0x7a) return false;
  for (let index = start; index < end; index++) if (bytes[index] === 0x2b || bytes[index] === 0x2d) return true;
  return false;
}

/**
 * One scanner, reused line after line: `scan` fills its fields and allocates
 * nothing. After a `true` answer, `uuidFound`, `timestampStart`/`timestampEnd`
 * (−1 when absent) and `memberCount` describe the line.
 */
export class LineScanner {
  uuidFound = false;
  timestampStart = -1;
  timestampEnd = -1;
  memberCount = 0;

  /** Whether bytes[start, end) (trimmed) is one object whose top level this scan read; false leaves the line to JSON.parse. */
  scan(bytes: Uint8Array, start: number, end: number): boolean {
    this.uuidFound = false;
    this.timestampStart = -1;
    this.timestampEnd = -1;
    this.memberCount = 0;
    if (end - start < 2 || bytes[start] !== openBrace || bytes[end - 1] !== closeBrace) return false;
    let depth = 0;
    /** At the top level: the next string is a key (after `{` or `,`), or the value of the key just read. */
    let keyNext = false;
    let valueOf: "other" | "timestamp" = "other";
    let index = start;
    while (index < end) {
      const byte = bytes[index];
      if (byte === quote) {
        const stringStart = index + 1;
        let escaped = false;
        index = stringStart;
        for (;;) {
          if (index >= end) return false;
          const inner = bytes[index];
          if (inner === quote) break;
          if (inner === backslash) {
            escaped = true;
            index++;
          }
          index++;
        }
        if (depth === 1) {
          if (keyNext) {
            // A key written with escapes may spell `uuid` or `timestamp`: JSON.parse reads it as the server does.
            if (escaped) return false;
            this.memberCount++;
            keyNext = false;
            const keyLength = index - stringStart;
            if (keyLength === 4 && equalBytes(bytes, stringStart, uuidKey)) this.uuidFound = true;
            valueOf = keyLength === 9 && equalBytes(bytes, stringStart, timestampKey) ? "timestamp" : "other";
          } else if (valueOf === "timestamp") {
            if (escaped) return false;
            this.timestampStart = stringStart;
            this.timestampEnd = index;
          }
        }
        index++;
        continue;
      }
      if (byte === openBrace || byte === openBracket) {
        depth++;
        if (depth === 1) keyNext = true;
      } else if (byte === closeBrace || byte === closeBracket) {
        depth--;
        // The object closes before the line ends: more than one value on the line.
        if (depth === 0 && index !== end - 1) return false;
      } else if (depth === 1) {
        if (byte === comma) keyNext = true;
        else if (byte !== colon && !isWhitespace(byte)) valueOf = "other";
      }
      index++;
    }
    return depth === 0;
  }

  /**
   * The UTC day of the timestamp found by `scan`: SPEC §2's `YYYY-MM-DD…`, UTC
   * without a zone or with `Z`; another offset is left to Date.parse. A line
   * without one is stored at the server's time of receipt; one that does not
   * read as a date takes no day (the server refuses it).
   */
  day(bytes: Uint8Array): LineDay {
    if (this.timestampStart < 0) return receiptDay;
    const start = this.timestampStart;
    const end = this.timestampEnd;
    if (end - start < 10 || bytes[start + 4] !== 0x2d || bytes[start + 7] !== 0x2d) return noDay;
    const year = digitsAt(bytes, start, 4);
    const month = digitsAt(bytes, start + 5, 2);
    const date = digitsAt(bytes, start + 8, 2);
    if (Number.isNaN(year + month + date)) return noDay;
    if (hasOffset(bytes, start + 10, end)) {
      const timeMs = Date.parse(Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString("latin1"));
      return Number.isNaN(timeMs) ? noDay : { kind: "day", day: Math.floor(timeMs / dayMs) };
    }
    return { kind: "day", day: Date.UTC(year, month - 1, date) / dayMs };
  }
}

function equalBytes(bytes: Uint8Array, start: number, expected: Uint8Array): boolean {
  for (let index = 0; index < expected.length; index++) if (bytes[start + index] !== expected[index]) return false;
  return true;
}

/** The line without blanks around it: [start, end). */
export function trimmedLine(bytes: Uint8Array, start: number, end: number): [number, number] {
  while (start < end && isWhitespace(bytes[start])) start++;
  while (end > start && isWhitespace(bytes[end - 1])) end--;
  return [start, end];
}
