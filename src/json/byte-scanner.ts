/**
 * The tokenizer of the ingest body parser (body-bytes.ts): a cursor over a
 * body's UTF-8 bytes that checks and steps over JSON tokens as JSON.parse's
 * grammar has them, and decodes the few strings and numbers validation keeps.
 * The value scan, the key order and the printer read tokens through it.
 */
import { Byte, isDigit, isHexDigit, isSingleEscapeLetter, skipWhitespaceAt } from "./bytes.js";
import { ByteSink, arrayIndexOf, writeCanonicalString } from "./object-keys.js";

/** Thrown (one shared value, no stack captured) on the first byte JSON.parse would refuse. */
export const syntaxError = new Error("JSON syntax error");

/** What peek answers past the last byte. */
export const endOfInput = -1;

export class ByteScanner {
  position = 0;
  readonly text: Buffer;
  /** Set by stringEnd: whether the string just scanned holds an escape. */
  stringEscaped = false;
  /** Where escaped names and strings are rewritten to be compared or checked. */
  readonly canonicalScratch = new ByteSink();

  constructor(readonly bytes: Uint8Array) {
    this.text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  peek(): number {
    return this.position < this.bytes.length ? this.bytes[this.position] : endOfInput;
  }

  atEnd(): boolean {
    return this.position >= this.bytes.length;
  }

  skipWhitespace(): void {
    this.position = skipWhitespaceAt(this.bytes, this.position);
  }

  expect(byte: number): void {
    this.skipWhitespace();
    if (this.bytes[this.position] !== byte) throw syntaxError;
    this.position++;
  }

  literal(word: string): void {
    const bytes = this.bytes;
    for (let index = 0; index < word.length; index++) {
      if (bytes[this.position + index] !== word.charCodeAt(index)) throw syntaxError;
    }
    this.position += word.length;
  }

  /** Offset just past the string token starting at `start` (a quote); throws on bad escapes or raw controls. */
  stringEnd(start: number): number {
    const bytes = this.bytes;
    let position = start + 1;
    let escaped = false;
    for (;;) {
      if (position >= bytes.length) throw syntaxError;
      const byte = bytes[position];
      if (byte === Byte.Quote) {
        this.stringEscaped = escaped;
        return position + 1;
      }
      if (byte < Byte.Space) throw syntaxError;
      if (byte === Byte.Backslash) {
        escaped = true;
        const next = bytes[position + 1];
        if (next === Byte.LowerU) {
          for (let digit = 2; digit < 6; digit++) if (!isHexDigit(bytes[position + digit])) throw syntaxError;
          position += 6;
          continue;
        }
        if (!isSingleEscapeLetter(next)) throw syntaxError;
        position += 2;
        continue;
      }
      position++;
    }
  }

  /** Offset just past the number token at `start`, checked against JSON's grammar. */
  numberEnd(start: number): number {
    const bytes = this.bytes;
    let position = start;
    if (bytes[position] === Byte.Minus) position++;
    if (bytes[position] === Byte.Zero) {
      position++;
    } else if (bytes[position] > Byte.Zero && bytes[position] <= Byte.Nine) {
      while (isDigit(bytes[position])) position++;
    } else {
      throw syntaxError;
    }
    if (bytes[position] === Byte.Point) {
      position++;
      if (!isDigit(bytes[position])) throw syntaxError;
      while (isDigit(bytes[position])) position++;
    }
    if (bytes[position] === Byte.LowerE || bytes[position] === Byte.UpperE) {
      position++;
      if (bytes[position] === Byte.Plus || bytes[position] === Byte.Minus) position++;
      if (!isDigit(bytes[position])) throw syntaxError;
      while (isDigit(bytes[position])) position++;
    }
    return position;
  }

  parseString(): string {
    const start = this.position;
    this.position = this.stringEnd(start);
    return this.decodeString(start, this.position);
  }

  /** The string token just scanned by stringEnd. */
  decodeString(start: number, end: number): string {
    // Escapes are rare: JSON.parse of the token itself decodes them exactly as it would in place.
    return this.stringEscaped ? (JSON.parse(this.text.toString("utf8", start, end)) as string) : this.text.toString("utf8", start + 1, end - 1);
  }

  parseNumber(): number {
    const start = this.position;
    this.position = this.numberEnd(start);
    // The grammar was checked: Number() reads the same value JSON.parse would (both round correctly).
    return Number(this.text.toString("latin1", start, this.position));
  }

  /** Whether the string token at [start, end) decodes to well-formed UTF-16 (String.isWellFormed). */
  wellFormedString(start: number, end: number): boolean {
    this.stringEnd(start);
    if (!this.stringEscaped) return true;
    const scratch = this.canonicalScratch;
    scratch.length = 0;
    return writeCanonicalString(this.bytes, start, end, scratch);
  }

  hasEscape(start: number, end: number): boolean {
    const bytes = this.bytes;
    for (let position = start + 1; position < end - 1; position++) if (bytes[position] === Byte.Backslash) return true;
    return false;
  }

  /** The array index an unescaped key token spells (canonical decimal ≤ 2³² − 2), or notAnArrayIndex. */
  arrayIndex(start: number, end: number): number {
    return arrayIndexOf(this.bytes, start + 1, end - 1);
  }

  sameBytes(leftStart: number, leftEnd: number, rightStart: number, rightEnd: number): boolean {
    if (leftEnd - leftStart !== rightEnd - rightStart) return false;
    const bytes = this.bytes;
    for (let offset = 0; offset < leftEnd - leftStart; offset++) if (bytes[leftStart + offset] !== bytes[rightStart + offset]) return false;
    return true;
  }
}
