/**
 * Keys of a JSON object told apart by their bytes, for body-bytes.ts. JSON.parse
 * keeps one member per distinct key; finding those with a prototype-less object
 * or a Map costs ~1–3 µs a key once an object holds a million of them (a 20 MiB
 * body can hold 3.5 M), while hashing the key bytes costs tens of nanoseconds.
 *
 * Two tokens spell the same key exactly when their canonical forms are equal:
 * the bytes JSON.stringify prints for the decoded string. An unescaped token
 * already is canonical (raw UTF-8 holds no lone surrogates, controls, quotes or
 * backslashes), so only escaped keys are rewritten.
 */
import { randomFillSync } from "node:crypto";
import { tuning } from "../config/limits.js";
import { Byte, hexDigitValue, lowerHexDigits, shortEscapeLetters } from "./bytes.js";

/** A growable byte buffer. */
export class ByteSink {
  bytes = new Uint8Array(1024);
  length = 0;

  reserve(extra: number): void {
    if (this.length + extra <= this.bytes.length) return;
    let size = this.bytes.length * 2;
    while (size < this.length + extra) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.bytes.subarray(0, this.length));
    this.bytes = grown;
  }
}

/** The code unit of the `\uXXXX` escape at `at`, or -1 when none starts there. */
function unicodeEscapeAt(source: Uint8Array, at: number, end: number): number {
  if (at + 6 > end || source[at] !== Byte.Backslash || source[at + 1] !== Byte.LowerU) return -1;
  return (hexDigitValue(source[at + 2]) << 12) | (hexDigitValue(source[at + 3]) << 8) | (hexDigitValue(source[at + 4]) << 4) | hexDigitValue(source[at + 5]);
}

/**
 * Appends the string token source[start, end) (quotes included, syntax already
 * checked) as JSON.stringify prints its value, without the quotes. Returns
 * false when the value holds a lone surrogate (String.isWellFormed is false).
 * Never writes more bytes than the token holds.
 */
export function writeCanonicalString(source: Uint8Array, start: number, end: number, sink: ByteSink): boolean {
  sink.reserve(end - start);
  const out = sink.bytes;
  let length = sink.length;
  let wellFormed = true;
  const last = end - 1;
  let position = start + 1;
  while (position < last) {
    const byte = source[position];
    if (byte !== Byte.Backslash) {
      out[length++] = byte;
      position++;
      continue;
    }
    const letter = source[position + 1];
    if (letter !== Byte.LowerU) {
      // Every one-letter escape prints as itself, but `\/`, which prints as `/`.
      if (letter === Byte.Slash) {
        out[length++] = letter;
      } else {
        out[length++] = Byte.Backslash;
        out[length++] = letter;
      }
      position += 2;
      continue;
    }
    const unit = unicodeEscapeAt(source, position, last);
    position += 6;
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const low = unicodeEscapeAt(source, position, last);
      if (low >= 0xdc00 && low <= 0xdfff) {
        // A pair: one code point, printed raw as four UTF-8 bytes.
        const point = 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00);
        out[length++] = 0xf0 | (point >> 18);
        out[length++] = 0x80 | ((point >> 12) & 0x3f);
        out[length++] = 0x80 | ((point >> 6) & 0x3f);
        out[length++] = 0x80 | (point & 0x3f);
        position += 6;
        continue;
      }
    }
    if (unit >= 0xd800 && unit <= 0xdfff) {
      wellFormed = false;
      length = writeUnicodeEscape(out, length, unit);
    } else if (unit < 0x20) {
      const letterOut = shortEscapeLetters[unit];
      if (letterOut !== 0) {
        out[length++] = Byte.Backslash;
        out[length++] = letterOut;
      } else {
        length = writeUnicodeEscape(out, length, unit);
      }
    } else if (unit === Byte.Quote || unit === Byte.Backslash) {
      out[length++] = Byte.Backslash;
      out[length++] = unit;
    } else if (unit < 0x80) {
      out[length++] = unit;
    } else if (unit < 0x800) {
      out[length++] = 0xc0 | (unit >> 6);
      out[length++] = 0x80 | (unit & 0x3f);
    } else {
      out[length++] = 0xe0 | (unit >> 12);
      out[length++] = 0x80 | ((unit >> 6) & 0x3f);
      out[length++] = 0x80 | (unit & 0x3f);
    }
  }
  sink.length = length;
  return wellFormed;
}

/** `\uXXXX` in lower-case hex, as JSON.stringify escapes controls and lone surrogates. */
function writeUnicodeEscape(out: Uint8Array, length: number, unit: number): number {
  out[length++] = Byte.Backslash;
  out[length++] = Byte.LowerU;
  out[length++] = lowerHexDigits[(unit >> 12) & 0xf];
  out[length++] = lowerHexDigits[(unit >> 8) & 0xf];
  out[length++] = lowerHexDigits[(unit >> 4) & 0xf];
  out[length++] = lowerHexDigits[unit & 0xf];
  return length;
}

/** The array index canonical key bytes spell (decimal without leading zeros, ≤ 2³² − 2), or -1. */
export function arrayIndexOf(bytes: Uint8Array, start: number, end: number): number {
  const length = end - start;
  if (length < 1 || length > 10 || (length > 1 && bytes[start] === Byte.Zero)) return -1;
  let value = 0;
  for (let position = start; position < end; position++) {
    const digit = bytes[position] - Byte.Zero;
    if (digit < 0 || digit > 9) return -1;
    value = value * 10 + digit;
  }
  return value <= 4_294_967_294 ? value : -1;
}

/**
 * Hashing is keyed by a per-process random substitution of byte values, so a
 * body cannot be built offline whose keys all collide (hash flooding): the
 * collisions of a fixed hash are known once its source is.
 */
const byteSubstitution = randomFillSync(new Uint32Array(256));
const hashBasis = randomFillSync(new Uint32Array(1))[0];

const partitionMembersTarget = tuning.keyTablePartitionMembersTarget;

/**
 * Groups the members of one object by key. A table over millions of keys is
 * tens of megabytes, and each lookup a cache miss (~160 ns here, 2 M keys took
 * 0.3–0.5 s); so members are first partitioned by the top bits of their hash,
 * in order, and each partition is grouped in its own small table (~0.1 s).
 */
export class KeyTable {
  /** Per member, in written order: the member that first spells its key. */
  firstOf = new Int32Array(64);
  private source: Uint8Array = new Uint8Array(0);
  // Per member: its key's hash, and where its canonical bytes are: a range of `source`,
  // or of `escapedKeys` when escaped.
  private hashes = new Int32Array(64);
  private canonicalStarts = new Int32Array(64);
  private canonicalEnds = new Int32Array(64);
  private canonicalEscaped = new Uint8Array(64);
  private readonly escapedKeys = new ByteSink();
  // Members by partition (in written order within each), with their hashes beside them.
  private partitioned = new Int32Array(64);
  private partitionedHashes = new Int32Array(64);
  /** Member + 1 per slot, 0 when empty; open addressing with linear probing, at most half full. */
  private slots = new Int32Array(64);

  /**
   * Groups `count` members whose key tokens (quotes included) are
   * source[records[at], records[at + 1]) for at = base, base + stride, …:
   * afterwards firstOf[m] is the first member spelling member m's key.
   */
  group(source: Uint8Array, records: Int32Array, base: number, stride: number, count: number): void {
    this.source = source;
    this.escapedKeys.length = 0;
    this.reserve(count);
    if (count <= partitionMembersTarget) {
      // One table that fits in cache already: no partitions, nothing allocated.
      for (let member = 0; member < count; member++) {
        const at = base + member * stride;
        this.hashKey(member, records[at], records[at + 1]);
      }
      const capacity = tableCapacity(count);
      if (capacity > this.slots.length) this.slots = new Int32Array(capacity);
      this.slots.fill(0, 0, capacity);
      for (let member = 0; member < count; member++) this.firstOf[member] = this.firstMember(member, this.hashes[member], capacity - 1);
      return;
    }
    const partitionBits = Math.min(12, Math.ceil(Math.log2(count / partitionMembersTarget)));
    const partitionStarts = new Int32Array((1 << partitionBits) + 1);
    for (let member = 0; member < count; member++) {
      const at = base + member * stride;
      const hash = this.hashKey(member, records[at], records[at + 1]);
      partitionStarts[partitionOf(hash, partitionBits) + 1]++;
    }
    let largest = 0;
    for (let partition = 1; partition < partitionStarts.length; partition++) {
      largest = Math.max(largest, partitionStarts[partition]);
      partitionStarts[partition] += partitionStarts[partition - 1];
    }
    const cursors = partitionStarts.slice(0, partitionStarts.length - 1);
    for (let member = 0; member < count; member++) {
      const hash = this.hashes[member];
      const at = cursors[partitionOf(hash, partitionBits)]++;
      this.partitioned[at] = member;
      this.partitionedHashes[at] = hash;
    }
    if (largest * 2 > this.slots.length) this.slots = new Int32Array(tableCapacity(largest));
    for (let partition = 0; partition + 1 < partitionStarts.length; partition++) {
      // Sized for this partition: the keys of a partition may be all the object's keys, or none.
      const capacity = tableCapacity(partitionStarts[partition + 1] - partitionStarts[partition]);
      this.slots.fill(0, 0, capacity);
      for (let at = partitionStarts[partition]; at < partitionStarts[partition + 1]; at++) {
        this.firstOf[this.partitioned[at]] = this.firstMember(this.partitioned[at], this.partitionedHashes[at], capacity - 1);
      }
    }
  }

  /**
   * Whether the members `records` holds (as for group) spell at least
   * `distinct` different keys. Members are entered in written order into one
   * table for `distinct` keys, which stays in cache, until that many are found.
   * Afterwards firstOf[k] is the member that first spells the k-th key found.
   */
  holdsDistinct(source: Uint8Array, records: Int32Array, base: number, stride: number, count: number, distinct: number): boolean {
    this.source = source;
    this.escapedKeys.length = 0;
    this.reserve(Math.min(count, distinct));
    const capacity = tableCapacity(distinct);
    if (capacity > this.slots.length) this.slots = new Int32Array(capacity);
    this.slots.fill(0, 0, capacity);
    let found = 0;
    for (let member = 0; member < count; member++) {
      const at = base + member * stride;
      // Only keys not seen before are entered, numbered as found: the per-member arrays need `distinct` slots.
      const hash = this.hashKey(found, records[at], records[at + 1]);
      if (this.firstMember(found, hash, capacity - 1) !== found) continue;
      this.firstOf[found] = member;
      if (++found === distinct) return true;
    }
    return false;
  }

  /** Per-member arrays for `count` members. */
  private reserve(count: number): void {
    if (count <= this.firstOf.length) return;
    // Doubled, not fitted: objects of growing size would otherwise reallocate every time.
    const size = Math.max(count, this.firstOf.length * 2);
    this.firstOf = new Int32Array(size);
    this.hashes = new Int32Array(size);
    this.canonicalStarts = new Int32Array(size);
    this.canonicalEnds = new Int32Array(size);
    this.canonicalEscaped = new Uint8Array(size);
    this.partitioned = new Int32Array(size);
    this.partitionedHashes = new Int32Array(size);
  }

  /** The array index member's key spells, or -1. */
  arrayIndex(member: number): number {
    return arrayIndexOf(this.canonicalEscaped[member] === 1 ? this.escapedKeys.bytes : this.source, this.canonicalStarts[member], this.canonicalEnds[member]);
  }

  /** Hashes a member's canonical key bytes (writing them out first when its token holds escapes). */
  private hashKey(member: number, start: number, end: number): number {
    const source = this.source;
    let hash = hashBasis;
    let escaped = false;
    for (let position = start + 1; position < end - 1; position++) {
      const byte = source[position];
      if (byte === Byte.Backslash) {
        escaped = true;
        break;
      }
      hash = Math.imul(hash ^ byteSubstitution[byte], 0x01000193);
    }
    let canonicalStart = start + 1;
    let canonicalEnd = end - 1;
    if (escaped) {
      const sink = this.escapedKeys;
      canonicalStart = sink.length;
      writeCanonicalString(source, start, end, sink);
      canonicalEnd = sink.length;
      hash = hashBasis;
      for (let position = canonicalStart; position < canonicalEnd; position++) hash = Math.imul(hash ^ byteSubstitution[sink.bytes[position]], 0x01000193);
    }
    hash = finalHash(hash);
    this.hashes[member] = hash;
    this.canonicalStarts[member] = canonicalStart;
    this.canonicalEnds[member] = canonicalEnd;
    this.canonicalEscaped[member] = escaped ? 1 : 0;
    return hash;
  }

  /** The first member of the current partition with member's key, entering member when it is the first. */
  private firstMember(member: number, hash: number, mask: number): number {
    const slots = this.slots;
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      const occupant = slots[slot];
      if (occupant === 0) {
        slots[slot] = member + 1;
        return member;
      }
      if (this.hashes[occupant - 1] === hash && this.sameKey(occupant - 1, member)) return occupant - 1;
    }
  }

  private sameKey(left: number, right: number): boolean {
    const leftStart = this.canonicalStarts[left];
    const rightStart = this.canonicalStarts[right];
    const length = this.canonicalEnds[left] - leftStart;
    if (this.canonicalEnds[right] - rightStart !== length) return false;
    const leftBytes = this.canonicalEscaped[left] === 1 ? this.escapedKeys.bytes : this.source;
    const rightBytes = this.canonicalEscaped[right] === 1 ? this.escapedKeys.bytes : this.source;
    for (let offset = 0; offset < length; offset++) if (leftBytes[leftStart + offset] !== rightBytes[rightStart + offset]) return false;
    return true;
  }
}

/** A power of two at least twice `members`, so that a table stays at most half full. */
function tableCapacity(members: number): number {
  let capacity = 16;
  while (capacity < members * 2) capacity *= 2;
  return capacity;
}

function partitionOf(hash: number, partitionBits: number): number {
  // A shift by 32 is a shift by 0 in JavaScript.
  return partitionBits === 0 ? 0 : hash >>> (32 - partitionBits);
}

/** Mixes the high bits into the low ones, which pick the slot. */
function finalHash(hash: number): number {
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  return hash;
}
