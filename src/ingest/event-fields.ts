/**
 * The two event fields with a syntax of their own, `timestamp` and `uuid`,
 * parsed from bytes: the byte scanner (event-scanner.ts) reads them straight
 * from the request body, and validation of parsed JSON (event-validation.ts)
 * encodes its strings first, so both paths share one parser per field.
 * Both fields are ASCII when valid; a string holding anything else is refused
 * before its bytes are looked at.
 */

/** Where a string field is copied to be parsed as bytes (both fields are short). */
const asciiScratch = new Uint8Array(64);

/** Copies an ASCII `text` to asciiScratch; -1 when it is longer than the scratch or not ASCII. */
function asciiBytesOf(text: string): number {
  if (text.length > asciiScratch.length) return -1;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (code >= 0x80) return -1;
    asciiScratch[index] = code;
  }
  return text.length;
}

/** Hex digit value by byte, -1 for anything else. */
const hexValues = new Int8Array(256).fill(-1);
for (let digit = 0; digit < 10; digit++) hexValues[48 + digit] = digit;
for (let digit = 0; digit < 6; digit++) hexValues[97 + digit] = hexValues[65 + digit] = 10 + digit;

/** Parses 8-4-4-4-12 hex (any case) into `target` at `targetOffset`; false when the text is not a UUID. */
export function parseUuidBytes(source: Uint8Array, start: number, end: number, target: Uint8Array, targetOffset: number): boolean {
  if (end - start !== 36) return false;
  let at = start;
  for (let byte = 0; byte < 16; byte++) {
    const relative = at - start;
    if (relative === 8 || relative === 13 || relative === 18 || relative === 23) {
      if (source[at] !== 45) return false; // '-'
      at++;
    }
    const high = hexValues[source[at]];
    const low = hexValues[source[at + 1]];
    if (high < 0 || low < 0) return false;
    target[targetOffset + byte] = (high << 4) | low;
    at += 2;
  }
  return true;
}

/** parseUuidBytes of a string, into target[0, 16). */
export function parseUuid(text: string, target: Uint8Array): boolean {
  const length = asciiBytesOf(text);
  return length >= 0 && parseUuidBytes(asciiScratch, 0, length, target, 0);
}

const latestTimeMs = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const daysInMonth = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's days_from_civil). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yearOfEra = y - era * 400;
  const dayOfYear = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const dayOfEra = yearOfEra * 365 + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100) + dayOfYear;
  return era * 146_097 + dayOfEra - 719_468;
}

/** Value of `count` ASCII digits at `at`, or -1 when any is not a digit or lies at or past `end`. */
function digits(source: Uint8Array, at: number, count: number, end: number): number {
  if (at + count > end) return -1;
  let value = 0;
  for (let index = at; index < at + count; index++) {
    const digit = source[index] - 48;
    if (digit < 0 || digit > 9) return -1;
    value = value * 10 + digit;
  }
  return value;
}

/**
 * ISO 8601 date-time in `source[start, end)` → UTC ms (truncated to the
 * millisecond), or undefined when invalid or outside 1970–9999. Accepts
 * YYYY-MM-DD, then T (or t, or a space as RFC 3339 allows), HH:MM[:SS[.fraction]]
 * (a comma may stand for the point), then an optional zone Z, ±HH, ±HHMM or
 * ±HH:MM. One pass over bytes, no regular expression and no Date object: every
 * ingested event comes through here.
 */
export function parseTimestampBytes(source: Uint8Array, start: number, end: number): number | undefined {
  if (end - start < 16) return undefined;
  const year = digits(source, start, 4, end);
  const month = digits(source, start + 5, 2, end);
  const day = digits(source, start + 8, 2, end);
  const hour = digits(source, start + 11, 2, end);
  const minute = digits(source, start + 14, 2, end);
  const separator = source[start + 10];
  if (year < 0 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 || minute < 0 || minute > 59) return undefined;
  if (source[start + 4] !== 45 || source[start + 7] !== 45 || source[start + 13] !== 58) return undefined; // '-', '-', ':'
  if (separator !== 84 && separator !== 116 && separator !== 32) return undefined; // 'T', 't', ' '
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  if (day > (month === 2 && leap ? 29 : daysInMonth[month - 1])) return undefined;
  let at = start + 16;
  let second = 0;
  let millisecond = 0;
  if (at < end && source[at] === 58) {
    second = digits(source, at + 1, 2, end);
    if (second < 0 || second > 59) return undefined;
    at += 3;
    const point = source[at];
    if (at < end && (point === 46 || point === 44)) {
      at++;
      const fractionStart = at;
      while (at < end && source[at] >= 48 && source[at] <= 57) at++;
      const fractionDigits = at - fractionStart;
      if (fractionDigits < 1 || fractionDigits > 9) return undefined;
      // Kept to the millisecond: further digits are truncated.
      for (let index = 0; index < 3; index++) {
        millisecond = millisecond * 10 + (index < fractionDigits ? source[fractionStart + index] - 48 : 0);
      }
    }
  }
  let offsetMinutes = 0;
  if (at < end) {
    const zone = source[at];
    if (zone === 90 || zone === 122) {
      at++; // 'Z', 'z'
    } else if (zone === 43 || zone === 45) {
      const offsetHours = digits(source, at + 1, 2, end);
      if (offsetHours < 0 || offsetHours > 23) return undefined;
      at += 3;
      let zoneMinutes = 0;
      if (at < end) {
        if (source[at] === 58) at++;
        zoneMinutes = digits(source, at, 2, end);
        if (zoneMinutes < 0 || zoneMinutes > 59) return undefined;
        at += 2;
      }
      offsetMinutes = (offsetHours * 60 + zoneMinutes) * (zone === 45 ? -1 : 1);
    } else {
      return undefined;
    }
  }
  if (at !== end) return undefined;
  const timeMs = ((daysFromCivil(year, month, day) * 24 + hour) * 60 + minute - offsetMinutes) * 60_000 + second * 1000 + millisecond;
  if (timeMs < 0 || timeMs > latestTimeMs) return undefined;
  return timeMs;
}

/** parseTimestampBytes of a string. */
export function parseTimestampMs(text: string): number | undefined {
  const length = asciiBytesOf(text);
  return length < 0 ? undefined : parseTimestampBytes(asciiScratch, 0, length);
}
