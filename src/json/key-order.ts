/**
 * Which members of a JSON object JSON.parse keeps, and in what order it lists
 * them: one member per distinct key — its first position, its last value —
 * with array-index keys first, ascending. The body parser (body-bytes.ts) asks
 * for `properties`; the value scan (value-scan.ts) for each nested object
 * that prints rewritten. Members are records in an Int32Array (key token
 * start and end first), never strings: an object may hold 2 M keys.
 */
import { tuning } from "../config/limits.js";
import { Byte } from "./bytes.js";
import type { ByteScanner } from "./byte-scanner.js";
import { KeyTable } from "./object-keys.js";

/** A member on the value scan's member stack: key token start and end, value start, value end, the containers its value keeps. */
export const memberSlots = 5;

/**
 * Objects up to this many members, with plain keys this long in all, are
 * checked for duplicate and index keys by comparing bytes pairwise; others are
 * grouped by hashing their keys (object-keys.ts).
 */
const simpleObjectMembersMax = tuning.objectMembersComparedPairwiseMax;
const simpleObjectKeyBytesMax = tuning.objectKeyBytesComparedPairwiseMax;
/** keptContainerCountOfFew's table: a power of two with four slots per member at least. */
const fewKeysSlotMask = 2 ** Math.ceil(Math.log2(simpleObjectMembersMax * 4)) - 1;
const indexKeysInsertionSortedMax = tuning.indexKeysInsertionSortedMax;
/** Index keys up to this many are sorted packed as value × this + place (exact below 2³² × 2²¹ = 2⁵³). */
const packedSortCountMax = 2 ** 21;
/** keepMembers marks in lastOf a key already placed among the index keys. */
const alreadyPlaced = -1;

/** Printed order of two keys of one object: array indexes (≥ 0) first, ascending, then the rest as written. */
function printsBefore(index: number, entry: number, otherIndex: number, otherEntry: number): boolean {
  if (index >= 0 && otherIndex >= 0) return index < otherIndex;
  if (index >= 0 || otherIndex >= 0) return index >= 0;
  return entry < otherEntry;
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

/** One per parser: its scratch is sized by the largest object seen. */
export class KeyOrder {
  readonly keyTable = new KeyTable();
  /**
   * The kept members in printed order (orderMembers, keepMembers): record
   * offsets of the member giving the key (first) and the value (last).
   */
  keptFirsts = new Int32Array(64);
  keptLasts = new Int32Array(64);
  keptCount = 0;
  // orderFewMembers' scratch, one slot per member (at most simpleObjectMembersMax).
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
  /** Per member of the object being kept: the last member spelling its key, when it is the first. */
  private lastOf = new Int32Array(64);
  private indexKeyValues = new Uint32Array(64);
  private indexKeyMembers = new Int32Array(64);
  private sortedIndexKeys = new Float64Array(64);
  private unsortedIndexKeyMembers = new Int32Array(64);

  constructor(private readonly scanner: ByteScanner) {}

  /**
   * Whether the printed members of the object whose members are
   * `members[base, top)` differ from its written ones (duplicates dropped or
   * keys reordered); when they do, keptCount, keptFirsts and keptLasts hold them.
   */
  orderMembers(members: Int32Array, base: number, top: number): boolean {
    const count = (top - base) / memberSlots;
    let simple = count <= simpleObjectMembersMax;
    let keyBytes = 0;
    for (let at = base; simple && at < top; at += memberSlots) {
      keyBytes += members[at + 1] - members[at];
      if (keyBytes > simpleObjectKeyBytesMax || this.scanner.hasEscape(members[at], members[at + 1])) simple = false;
    }
    return simple ? this.orderFewMembers(members, base, top) : this.orderManyMembers(members, base, top);
  }

  /** The containers the kept members of `members[base, top)` hold: `written` unless a duplicate key drops some. */
  keptContainerCount(members: Int32Array, base: number, top: number, written: number): number {
    const count = (top - base) / memberSlots;
    if (count <= simpleObjectMembersMax) {
      const kept = this.keptContainerCountOfFew(members, base, top);
      if (kept !== undefined) return kept;
    }
    const table = this.keyTable;
    table.group(this.scanner.bytes, members, base, memberSlots, count);
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
   * keptContainerCount for at most simpleObjectMembersMax members: walked from
   * the last, a member is kept when its key was not seen yet, looked up in a
   * small table of key bytes that is never cleared (slots of other objects
   * carry older stamps). Undefined when a key holds an escape: those are compared in
   * canonical form, by the key table.
   */
  private keptContainerCountOfFew(members: Int32Array, base: number, top: number): number | undefined {
    const bytes = this.scanner.bytes;
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
        if (byte === Byte.Backslash) return undefined;
        hash = Math.imul(hash ^ byte, 0x01000193);
      }
      let slot = (hash ^ (hash >>> 16)) & fewKeysSlotMask;
      let seen = false;
      while (stamps[slot] === stamp) {
        const other = slotMembers[slot];
        if (this.scanner.sameBytes(members[other], members[other + 1], keyStart, keyEnd)) {
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

  /**
   * Whether the members `members[base, top)` spell so many distinct keys that
   * their object prints longer than `budget` bytes. Keys are told apart only
   * until there are that many: a 20 MiB object of 2 M keys needs 13 k, not all.
   */
  tooManyKeysToPrint(members: Int32Array, base: number, top: number, budget: number): boolean {
    // n distinct keys print as at least 5n + 1 bytes: `{`, then per member a key of two quotes
    // and a byte (but for one empty key), a colon, a one-byte value and a comma or the `}`.
    const distinctTooMany = Math.floor(Math.max(0, budget - 1) / 5) + 1;
    const count = (top - base) / memberSlots;
    return count >= distinctTooMany && this.keyTable.holdsDistinct(this.scanner.bytes, members, base, memberSlots, count, distinctTooMany);
  }

  /**
   * Few members with plain keys: duplicates are found by comparing key bytes,
   * index keys by reading their digits, so the common object allocates nothing.
   */
  private orderFewMembers(members: Int32Array, base: number, top: number): boolean {
    const scanner = this.scanner;
    let hasDuplicate = false;
    let hasIndexKey = false;
    for (let at = base; at < top; at += memberSlots) {
      if (!hasIndexKey && scanner.arrayIndex(members[at], members[at + 1]) >= 0) hasIndexKey = true;
      for (let earlier = base; !hasDuplicate && earlier < at; earlier += memberSlots) {
        if (scanner.sameBytes(members[earlier], members[earlier + 1], members[at], members[at + 1])) hasDuplicate = true;
      }
    }
    if (!hasDuplicate && !hasIndexKey) return false;
    // One entry per key: its first member's position, its last member's value.
    const keyAts = this.entryKeyAts;
    const valueAts = this.entryValueAts;
    const indexes = this.entryIndexes;
    const order = this.entryOrder;
    let entryCount = 0;
    for (let at = base; at < top; at += memberSlots) {
      let entry = 0;
      while (entry < entryCount && !scanner.sameBytes(members[keyAts[entry]], members[keyAts[entry] + 1], members[at], members[at + 1])) entry++;
      if (entry === entryCount) {
        keyAts[entry] = at;
        indexes[entry] = scanner.arrayIndex(members[at], members[at + 1]);
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
    if (inOrder) return false;
    this.reserveKept(entryCount);
    for (let position = 0; position < entryCount; position++) {
      this.keptFirsts[position] = keyAts[order[position]];
      this.keptLasts[position] = valueAts[order[position]];
    }
    this.keptCount = entryCount;
    return true;
  }

  /** Many members or escaped keys: distinct keys found by hashing their canonical bytes. */
  private orderManyMembers(members: Int32Array, base: number, top: number): boolean {
    const kept = this.keepMembers(members, base, top, memberSlots);
    const firsts = this.keptFirsts;
    let inOrder = kept === (top - base) / memberSlots;
    for (let position = 0; inOrder && position < kept; position++) inOrder = firsts[position] === base + position * memberSlots;
    return !inOrder;
  }

  /**
   * The members JSON.parse keeps of an object whose members are the records
   * `records[base, top)` (`stride` slots each, key token start and end first):
   * one per distinct key, at its first record's position with its last
   * record's value, index keys first, ascending. Writes them in printed order
   * to keptFirsts and keptLasts (record offsets) and returns their count.
   */
  keepMembers(records: Int32Array, base: number, top: number, stride: number): number {
    const table = this.keyTable;
    const count = (top - base) / stride;
    table.group(this.scanner.bytes, records, base, stride, count);
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
        lastOf[member] = alreadyPlaced;
      }
    }
    for (let member = 0; member < count; member++) {
      if (firstOf[member] !== member || lastOf[member] === alreadyPlaced) continue;
      keptFirsts[position] = base + member * stride;
      keptLasts[position++] = base + lastOf[member] * stride;
    }
    this.keptCount = kept;
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
    if (count <= indexKeysInsertionSortedMax) {
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
}
