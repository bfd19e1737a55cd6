/**
 * The byte primitives every JSON reader here shares: the body parser
 * (body-bytes.ts and its units), the key table (object-keys.ts) and ingest's
 * fast event scanner. One set of names and tables, so the three readers agree
 * on what JSON's grammar calls whitespace, a digit, a hex digit or an escape.
 */

/** The bytes JSON's grammar names (ASCII). A const enum: each use compiles to a small integer. */
export const enum Byte {
  Tab = 0x09,
  LineFeed = 0x0a,
  CarriageReturn = 0x0d,
  Space = 0x20,
  Quote = 0x22,
  Plus = 0x2b,
  Comma = 0x2c,
  Minus = 0x2d,
  Point = 0x2e,
  Slash = 0x2f,
  Zero = 0x30,
  Nine = 0x39,
  Colon = 0x3a,
  UpperE = 0x45,
  OpenBracket = 0x5b,
  Backslash = 0x5c,
  CloseBracket = 0x5d,
  LowerA = 0x61,
  LowerB = 0x62,
  LowerD = 0x64,
  LowerE = 0x65,
  LowerF = 0x66,
  LowerN = 0x6e,
  LowerP = 0x70,
  LowerR = 0x72,
  LowerS = 0x73,
  LowerT = 0x74,
  LowerU = 0x75,
  OpenBrace = 0x7b,
  CloseBrace = 0x7d,
}

/** Character classes, one bit each, in byteClasses. */
const enum ByteClass {
  HexDigit = 1,
  /** A letter that may follow a backslash alone: `"` `\` `/` b f n r t (`u` takes four hex digits). */
  SingleEscape = 2,
}

const byteClasses = new Uint8Array(256);
for (const byte of Buffer.from("0123456789abcdefABCDEF", "latin1")) byteClasses[byte] |= ByteClass.HexDigit;
for (const byte of Buffer.from('"\\/bfnrt', "latin1")) byteClasses[byte] |= ByteClass.SingleEscape;

/** JSON whitespace: space, tab, line feed, carriage return. */
export function isWhitespace(byte: number): boolean {
  return byte === Byte.Space || byte === Byte.LineFeed || byte === Byte.CarriageReturn || byte === Byte.Tab;
}

/** The first offset at or after `position` that is not JSON whitespace. */
export function skipWhitespaceAt(bytes: Uint8Array, position: number): number {
  while (position < bytes.length && isWhitespace(bytes[position])) position++;
  return position;
}

export function isDigit(byte: number): boolean {
  return byte >= Byte.Zero && byte <= Byte.Nine;
}

/** Whether `byte` is 0-9, a-f or A-F; false past the end of a buffer (undefined). */
export function isHexDigit(byte: number): boolean {
  return (byteClasses[byte] & ByteClass.HexDigit) !== 0;
}

/** Whether `\` followed by `letter` is a one-letter escape JSON accepts. */
export function isSingleEscapeLetter(letter: number): boolean {
  return (byteClasses[letter] & ByteClass.SingleEscape) !== 0;
}

/** The value of a hex digit (already checked to be one). */
export function hexDigitValue(byte: number): number {
  return byte <= Byte.Nine ? byte - Byte.Zero : (byte | 0x20) - Byte.LowerA + 10;
}

/** The lower-case hex digits JSON.stringify escapes with, by value. */
export const lowerHexDigits = Uint8Array.from(Buffer.from("0123456789abcdef", "latin1"));

/** The letter JSON.stringify escapes a control character with (`\b` for 0x08…), 0 when it uses `\u00XX`. */
export const shortEscapeLetters = new Uint8Array(0x20);
shortEscapeLetters[0x08] = Byte.LowerB;
shortEscapeLetters[0x09] = Byte.LowerT;
shortEscapeLetters[0x0a] = Byte.LowerN;
shortEscapeLetters[0x0c] = Byte.LowerF;
shortEscapeLetters[0x0d] = Byte.LowerR;

/** A scratch array twice as long, holding the same contents (scratch grows by doubling). */
export function doubled<T extends Uint8Array | Int32Array | Uint32Array>(array: T): T {
  const grown = new (array.constructor as new (length: number) => T)(array.length * 2);
  grown.set(array);
  return grown;
}
