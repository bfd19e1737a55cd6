/**
 * The chunk: validated events in columnar binary form. A worker encodes one per
 * request body; the main thread writes it verbatim as a WAL record payload and
 * decodes it to apply the rows to active segments. Replay after a crash runs
 * the same decoder, so live ingest and recovery share one code path.
 *
 * Strings (event names, distinctIds, property keys and value texts) are
 * deduplicated per chunk into one string table, so the main thread decodes each
 * distinct string once per chunk rather than once per row.
 *
 * Layout (little-endian, every section 8-byte aligned):
 *   header  u32 × 8: magic, rowCount, stringCount, stringBytes, keyCount, entryCount, flags, 0
 *   f64[rows]  timeMs
 *   u32[rows]  event name string index
 *   u32[rows]  distinctId string index
 *   u8[rows]   uuid present (0/1)            } only when flags & hasUuid
 *   u8[16 × rows] uuid bytes                 }
 *   u32[strings + 1] string end offsets (cumulative, first is 0)
 *   u8[stringBytes] UTF-8
 *   u32[keys] key string index; u32[keys + 1] entry start per key
 *   u32[entries] row; u32[entries] value string index
 */
import { strict as assert } from "node:assert";
import { randomFillSync } from "node:crypto";

const chunkMagic = 0x31435645; // "EVC1"
const headerBytes = 32;
const flagHasUuid = 1;

function align8(value: number): number {
  return (value + 7) & ~7;
}

let scratch = Buffer.allocUnsafe(256);

/**
 * Writes `text` as UTF-8 into a scratch buffer shared by this thread and
 * returns its byte length; utf8Scratch() holds the bytes until the next call.
 * Most texts are ASCII, and a char loop beats Buffer.write on a few bytes.
 */
export function writeUtf8Scratch(text: string): number {
  const length = text.length;
  if (scratch.length < length * 3) scratch = Buffer.allocUnsafe(length * 3);
  let byteLength = 0;
  for (; byteLength < length; byteLength++) {
    const code = text.charCodeAt(byteLength);
    if (code >= 0x80) break;
    scratch[byteLength] = code;
  }
  if (byteLength < length) byteLength = scratch.write(text, 0, "utf8");
  return byteLength;
}

export function utf8Scratch(): Buffer {
  return scratch;
}

/** Builds one chunk. Arrow-style: capacities double, lengths are tracked apart. */
export class ChunkBuilder {
  rowCount = 0;
  private timeMs = new Float64Array(64);
  private eventNameString = new Uint32Array(64);
  private distinctIdString = new Uint32Array(64);
  private uuidPresent = new Uint8Array(64);
  private uuidBytes = new Uint8Array(64 * 16);
  private hasUuid = false;
  /**
   * The string table, keyed by UTF-8 bytes: the byte scanner (event-scanner.ts)
   * interns strings straight from the request body without making JS strings,
   * and strings that arrive as JS strings are encoded first, so one text has
   * one index whichever way it came.
   */
  private stringCount = 0;
  private stringBytes = new Uint8Array(4096);
  private stringEnds = new Uint32Array(65);
  private stringHashes = new Uint32Array(64);
  /** Open addressing, load at most 1/2: string index + 1, 0 for an empty slot. */
  private stringSlots = new Int32Array(128);
  /**
   * Key numbers, in order of first use: keyStrings[key number] is its string,
   * keyNumberOfString[string] its number + 1 (0: not a key yet). Indexed by the
   * string's number rather than a Map of its own: a batch can bring a million
   * new keys, and a second Map insert each cost ~0.3 s plus its garbage.
   */
  private keyCount = 0;
  private keyStrings = new Uint32Array(64);
  private keyNumberOfString = new Uint32Array(64);
  // Entries as added: key number, row, value string. Grouped by key in finish(), with a counting
  // sort: an object and two arrays per key cost ~0.7 µs and much GC with a million distinct keys.
  private entryKeys = new Uint32Array(64);
  private entryRows = new Uint32Array(64);
  private entryValues = new Uint32Array(64);
  private entryCount = 0;

  /**
   * Empties the builder for the next chunk, keeping its arrays: a batch's
   * builder grew them from 64 rows and 128 slots, rehashing its strings at
   * each doubling, for every body. A builder grown past `bytesKept` is not
   * worth keeping (false): a 20 MiB body's arrays would stay for good.
   */
  reset(bytesKept: number): boolean {
    const bytes = this.timeMs.byteLength * 2 + this.uuidBytes.byteLength + this.stringBytes.byteLength + this.stringSlots.byteLength * 4 + this.entryKeys.byteLength * 3;
    if (bytes > bytesKept) return false;
    if (this.hasUuid) {
      this.uuidPresent.fill(0, 0, this.rowCount);
      this.uuidBytes.fill(0, 0, this.rowCount * 16);
    }
    this.keyNumberOfString.fill(0, 0, Math.min(this.stringCount, this.keyNumberOfString.length));
    this.stringSlots.fill(0);
    this.rowCount = 0;
    this.hasUuid = false;
    this.stringCount = 0;
    this.keyCount = 0;
    this.entryCount = 0;
    return true;
  }

  /** The chunk's index of `text`. */
  intern(text: string): number {
    const byteLength = writeUtf8Scratch(text);
    const scratch = utf8Scratch();
    return this.internBytes(scratch, 0, byteLength, hashBytes(scratch, 0, byteLength));
  }

  /** The chunk's index of the UTF-8 text in `source[start, end)`; `hash` is hashBytes of it. */
  internBytes(source: Uint8Array, start: number, end: number, hash: number): number {
    const length = end - start;
    const { stringHashes, stringEnds } = this;
    let slots = this.stringSlots;
    let mask = slots.length - 1;
    let slot = hash & mask;
    for (let entry = slots[slot]; entry !== 0; entry = slots[slot]) {
      const index = entry - 1;
      const known = stringEnds[index];
      if (stringHashes[index] === hash && stringEnds[index + 1] - known === length && bytesEqual(this.stringBytes, known, source, start, length)) return index;
      slot = (slot + 1) & mask;
    }
    const index = this.stringCount++;
    if (index + 1 === this.stringEnds.length) {
      this.stringHashes = grown(this.stringHashes, this.stringEnds.length * 2 - 1);
      this.stringEnds = grown(this.stringEnds, this.stringEnds.length * 2);
    }
    const offset = this.stringEnds[index];
    if (offset + length > this.stringBytes.length) {
      const bytes = new Uint8Array(Math.max(this.stringBytes.length * 2, offset + length));
      bytes.set(this.stringBytes.subarray(0, offset));
      this.stringBytes = bytes;
    }
    const stringBytes = this.stringBytes;
    // A loop copies a short text faster than a subarray view and set() would.
    if (length <= 64) for (let byte = 0; byte < length; byte++) stringBytes[offset + byte] = source[start + byte];
    else stringBytes.set(source.subarray(start, end), offset);
    this.stringEnds[index + 1] = offset + length;
    this.stringHashes[index] = hash;
    if (this.stringCount * 2 > slots.length) {
      slots = this.stringSlots = new Int32Array(slots.length * 2);
      mask = slots.length - 1;
      for (let known = 0; known < index; known++) {
        let free = this.stringHashes[known] & mask;
        while (slots[free] !== 0) free = (free + 1) & mask;
        slots[free] = known + 1;
      }
      slot = hash & mask;
      while (slots[slot] !== 0) slot = (slot + 1) & mask;
    }
    slots[slot] = index + 1;
    return index;
  }

  /** Makes room for `rows` more rows and `entries` more property entries, so that adding them grows nothing. */
  reserve(rows: number, entries: number): void {
    // At least doubled: single events reserve one row at a time, and growing to the exact
    // need copied every row and entry so far for each body, quadratic in the bodies of a task.
    const rowsNeeded = this.rowCount + rows;
    if (rowsNeeded > this.timeMs.length) this.growRows(Math.max(rowsNeeded, this.timeMs.length * 2));
    const entriesNeeded = this.entryCount + entries;
    if (entriesNeeded > this.entryKeys.length) {
      const capacity = Math.max(entriesNeeded, this.entryKeys.length * 2);
      this.entryKeys = grown(this.entryKeys, capacity);
      this.entryRows = grown(this.entryRows, capacity);
      this.entryValues = grown(this.entryValues, capacity);
    }
  }

  private growRows(capacity: number): void {
    const grow = <T extends Float64Array | Uint32Array | Uint8Array>(source: T, perRow = 1): T => {
      const target = new (source.constructor as new (length: number) => T)(capacity * perRow);
      target.set(source);
      return target;
    };
    this.timeMs = grow(this.timeMs);
    this.eventNameString = grow(this.eventNameString);
    this.distinctIdString = grow(this.distinctIdString);
    this.uuidPresent = grow(this.uuidPresent);
    this.uuidBytes = grow(this.uuidBytes, 16);
  }

  /** Appends a row; returns its index for addProperty. `uuid` is 16 bytes or undefined. */
  addRow(timeMs: number, eventName: string, distinctId: string, uuid: Uint8Array | undefined): number {
    return this.addInternedRow(timeMs, this.intern(eventName), this.intern(distinctId), uuid, 0);
  }

  /** addRow with the strings already interned; the uuid is `uuidSource[uuidOffset, uuidOffset + 16)` when present. */
  addInternedRow(timeMs: number, eventNameString: number, distinctIdString: number, uuidSource: Uint8Array | undefined, uuidOffset: number): number {
    if (this.rowCount === this.timeMs.length) this.growRows(this.rowCount * 2);
    const row = this.rowCount++;
    this.timeMs[row] = timeMs;
    this.eventNameString[row] = eventNameString;
    this.distinctIdString[row] = distinctIdString;
    if (uuidSource !== undefined) {
      this.uuidPresent[row] = 1;
      const uuidBytes = this.uuidBytes;
      for (let byte = 0; byte < 16; byte++) uuidBytes[row * 16 + byte] = uuidSource[uuidOffset + byte];
      this.hasUuid = true;
    }
    return row;
  }

  addProperty(row: number, key: string, text: string): void {
    this.addInternedProperty(row, this.intern(key), this.intern(text));
  }

  /** addProperty with the key and text already interned. */
  addInternedProperty(row: number, keyString: number, textString: number): void {
    while (keyString >= this.keyNumberOfString.length) this.keyNumberOfString = doubled(this.keyNumberOfString);
    let keyNumber = this.keyNumberOfString[keyString] - 1;
    if (keyNumber < 0) {
      keyNumber = this.keyCount++;
      this.keyNumberOfString[keyString] = keyNumber + 1;
      if (keyNumber === this.keyStrings.length) this.keyStrings = doubled(this.keyStrings);
      this.keyStrings[keyNumber] = keyString;
    }
    const entry = this.entryCount++;
    if (entry === this.entryKeys.length) {
      this.entryKeys = doubled(this.entryKeys);
      this.entryRows = doubled(this.entryRows);
      this.entryValues = doubled(this.entryValues);
    }
    this.entryKeys[entry] = keyNumber;
    this.entryRows[entry] = row;
    this.entryValues[entry] = textString;
  }

  finish(): ArrayBuffer {
    const rows = this.rowCount;
    const stringCount = this.stringCount;
    const stringBytes = this.stringEnds[stringCount];
    const keyCount = this.keyCount;

    let size = headerBytes;
    const timeOffset = size;
    size = align8(size + rows * 8);
    const eventOffset = size;
    size = align8(size + rows * 4);
    const distinctOffset = size;
    size = align8(size + rows * 4);
    const uuidPresentOffset = size;
    const uuidBytesOffset = this.hasUuid ? align8(size + rows) : size;
    if (this.hasUuid) size = align8(uuidBytesOffset + rows * 16);
    const stringEndOffset = size;
    size = align8(size + (stringCount + 1) * 4);
    const stringBytesOffset = size;
    size = align8(size + stringBytes);
    const keyStringOffset = size;
    size = align8(size + keyCount * 4);
    const entryStartOffset = size;
    size = align8(size + (keyCount + 1) * 4);
    const entryRowOffset = size;
    size = align8(size + this.entryCount * 4);
    const entryValueOffset = size;
    size = align8(size + this.entryCount * 4);

    const buffer = new ArrayBuffer(size);
    const header = new Uint32Array(buffer, 0, 8);
    header[0] = chunkMagic;
    header[1] = rows;
    header[2] = stringCount;
    header[3] = stringBytes;
    header[4] = keyCount;
    header[5] = this.entryCount;
    header[6] = this.hasUuid ? flagHasUuid : 0;
    new Float64Array(buffer, timeOffset, rows).set(this.timeMs.subarray(0, rows));
    new Uint32Array(buffer, eventOffset, rows).set(this.eventNameString.subarray(0, rows));
    new Uint32Array(buffer, distinctOffset, rows).set(this.distinctIdString.subarray(0, rows));
    if (this.hasUuid) {
      new Uint8Array(buffer, uuidPresentOffset, rows).set(this.uuidPresent.subarray(0, rows));
      new Uint8Array(buffer, uuidBytesOffset, rows * 16).set(this.uuidBytes.subarray(0, rows * 16));
    }
    new Uint32Array(buffer, stringEndOffset, stringCount + 1).set(this.stringEnds.subarray(0, stringCount + 1));
    new Uint8Array(buffer, stringBytesOffset, stringBytes).set(this.stringBytes.subarray(0, stringBytes));
    new Uint32Array(buffer, keyStringOffset, keyCount).set(this.keyStrings.subarray(0, keyCount));
    // Entries grouped by key (keys in order of first use, entries in order added): count, then place.
    const entryStarts = new Uint32Array(buffer, entryStartOffset, keyCount + 1);
    const entryRows = new Uint32Array(buffer, entryRowOffset, this.entryCount);
    const entryValues = new Uint32Array(buffer, entryValueOffset, this.entryCount);
    for (let entry = 0; entry < this.entryCount; entry++) entryStarts[this.entryKeys[entry] + 1]++;
    for (let key = 1; key <= keyCount; key++) entryStarts[key] += entryStarts[key - 1];
    const cursors = entryStarts.slice(0, keyCount);
    for (let entry = 0; entry < this.entryCount; entry++) {
      const target = cursors[this.entryKeys[entry]]++;
      entryRows[target] = this.entryRows[entry];
      entryValues[target] = this.entryValues[entry];
    }
    return buffer;
  }
}

function doubled(array: Uint32Array<ArrayBuffer>): Uint32Array<ArrayBuffer> {
  return grown(array, array.length * 2);
}

function grown(array: Uint32Array<ArrayBuffer>, length: number): Uint32Array<ArrayBuffer> {
  const larger = new Uint32Array(length);
  larger.set(array);
  return larger;
}

/**
 * FNV-1a over UTF-8 bytes, keyed by a per-process random substitution of byte
 * values and a random basis: a body cannot be built offline whose strings all
 * collide (hash flooding would make each intern walk all of them). Exported so
 * that the byte scanner hashes a string while it scans it, once for both its
 * duplicate-key check and the intern; it must step exactly as this does.
 */
export function hashBytes(source: Uint8Array, start: number, end: number): number {
  let hash = hashBasis;
  for (let at = start; at < end; at++) hash = Math.imul(hash ^ byteKeys[source[at]], fnvPrime);
  return finishHash(hash);
}

export const byteKeys = randomFillSync(new Uint32Array(256));
export const hashBasis = randomFillSync(new Uint32Array(1))[0] | 0;
export const fnvPrime = 0x01000193;

/** Mixes the high bits into the low ones, which pick the slot. */
export function finishHash(hash: number): number {
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  return hash >>> 0;
}

export function bytesEqual(left: Uint8Array, leftStart: number, right: Uint8Array, rightStart: number, length: number): boolean {
  for (let offset = 0; offset < length; offset++) if (left[leftStart + offset] !== right[rightStart + offset]) return false;
  return true;
}

/**
 * A decoded view over a chunk: typed arrays into its bytes, each string decoded
 * when first asked for, then kept. Lazily, because a chunk may hold two million
 * distinct strings (a batch of new property keys): decoded all at once they
 * held the main thread for a tenth of a second, where the store's apply reads
 * them in slices.
 */
export interface DecodedChunk {
  rowCount: number;
  timeMs: Float64Array;
  eventNameString: Uint32Array;
  distinctIdString: Uint32Array;
  /** undefined when no row has a uuid. */
  uuidPresent: Uint8Array | undefined;
  uuidBytes: Uint8Array | undefined;
  stringCount: number;
  string(index: number): string;
  /** The strings' UTF-8, one after another: string i is [stringEnds[i], stringEnds[i + 1]). */
  stringBytes: Uint8Array;
  stringEnds: Uint32Array;
  keyStrings: Uint32Array;
  entryStarts: Uint32Array;
  entryRows: Uint32Array;
  entryValues: Uint32Array;
}

export class ChunkFormatError extends Error {}

/**
 * Decodes a chunk. `bytes` may be any aligned view (a WAL record payload read
 * from disk, or a worker's transferred buffer). Throws ChunkFormatError on a
 * malformed chunk; callers that read from disk check a CRC first, so this only
 * guards against bugs and version mismatches.
 */
export function decodeChunk(bytes: Uint8Array): DecodedChunk {
  if (bytes.byteOffset % 8 !== 0) bytes = new Uint8Array(bytes); // copy to realign
  const { buffer, byteOffset, byteLength } = bytes;
  if (byteLength < headerBytes) throw new ChunkFormatError("chunk shorter than its header");
  const header = new Uint32Array(buffer, byteOffset, 8);
  if (header[0] !== chunkMagic) throw new ChunkFormatError("bad chunk magic");
  const rows = header[1];
  const stringCount = header[2];
  const stringBytes = header[3];
  const keyCount = header[4];
  const entryCount = header[5];
  const hasUuid = (header[6] & flagHasUuid) !== 0;

  let offset = headerBytes;
  const take = <T>(make: (at: number) => T, bytesTaken: number): T => {
    if (offset + bytesTaken > byteLength) throw new ChunkFormatError("chunk section past its end");
    const value = make(byteOffset + offset);
    offset = align8(offset + bytesTaken);
    return value;
  };
  const timeMs = take((at) => new Float64Array(buffer, at, rows), rows * 8);
  const eventNameString = take((at) => new Uint32Array(buffer, at, rows), rows * 4);
  const distinctIdString = take((at) => new Uint32Array(buffer, at, rows), rows * 4);
  let uuidPresent: Uint8Array | undefined;
  let uuidBytes: Uint8Array | undefined;
  if (hasUuid) {
    uuidPresent = take((at) => new Uint8Array(buffer, at, rows), rows);
    uuidBytes = take((at) => new Uint8Array(buffer, at, rows * 16), rows * 16);
  }
  const stringEnds = take((at) => new Uint32Array(buffer, at, stringCount + 1), (stringCount + 1) * 4);
  const textStart = offset;
  take((at) => at, stringBytes);
  const source = Buffer.from(buffer, byteOffset + textStart, stringBytes);
  const decoded: Array<string | undefined> = [];
  const string = (index: number): string => (decoded[index] ??= source.toString("utf8", stringEnds[index], stringEnds[index + 1]));
  const keyStrings = take((at) => new Uint32Array(buffer, at, keyCount), keyCount * 4);
  const entryStarts = take((at) => new Uint32Array(buffer, at, keyCount + 1), (keyCount + 1) * 4);
  const entryRows = take((at) => new Uint32Array(buffer, at, entryCount), entryCount * 4);
  const entryValues = take((at) => new Uint32Array(buffer, at, entryCount), entryCount * 4);
  assert(entryStarts[keyCount] === entryCount || keyCount === 0, "chunk entry starts disagree with entry count");
  return {
    rowCount: rows,
    timeMs,
    eventNameString,
    distinctIdString,
    uuidPresent,
    uuidBytes,
    stringCount,
    string,
    stringBytes: source,
    stringEnds,
    keyStrings,
    entryStarts,
    entryRows,
    entryValues,
  };
}

/** Re-encodes a chunk keeping only rows whose keep[row] is 1 (used to drop uuid duplicates). */
export function filterChunk(chunk: DecodedChunk, keep: Uint8Array): ArrayBuffer {
  const builder = new ChunkBuilder();
  const newRow = new Int32Array(chunk.rowCount).fill(-1);
  for (let row = 0; row < chunk.rowCount; row++) {
    if (!keep[row]) continue;
    const uuid = chunk.uuidPresent?.[row] ? chunk.uuidBytes!.subarray(row * 16, row * 16 + 16) : undefined;
    newRow[row] = builder.addRow(
      chunk.timeMs[row],
      chunk.string(chunk.eventNameString[row]),
      chunk.string(chunk.distinctIdString[row]),
      uuid,
    );
  }
  for (let key = 0; key < chunk.keyStrings.length; key++) {
    const keyText = chunk.string(chunk.keyStrings[key]);
    for (let entry = chunk.entryStarts[key]; entry < chunk.entryStarts[key + 1]; entry++) {
      const row = newRow[chunk.entryRows[entry]];
      if (row >= 0) builder.addProperty(row, keyText, chunk.string(chunk.entryValues[entry]));
    }
  }
  return builder.finish();
}
