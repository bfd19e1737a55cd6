/**
 * The row order sealing gives a segment: (event id, user id, time), so an
 * event's rows are one contiguous run — a day's total is a subtraction — and
 * its users come out sorted for its bitmap; and the property entries put in
 * that order. Stable LSD radix sorts over typed arrays, allocation-free per
 * row; segment-writer.ts calls them once per seal.
 */
import { tuning } from "../config/limits.js";

/**
 * The counting half of a radix pass: counts[d] becomes where the first key
 * with digit d = (key >>> shift) & mask goes. Returns false when every key has
 * the same digit: the pass would move nothing.
 */
function digitStarts(key: Uint32Array, shift: number, mask: number, counts: Uint32Array): boolean {
  const length = key.length;
  counts.fill(0, 0, mask + 1);
  for (let index = 0; index < length; index++) counts[(key[index] >>> shift) & mask]++;
  if (length === 0 || counts[(key[0] >>> shift) & mask] === length) return false;
  let sum = 0;
  for (let digit = 0; digit <= mask; digit++) {
    const count = counts[digit];
    counts[digit] = sum;
    sum += count;
  }
  return true;
}

/** Rows being put in sealed order: the input row and its three sort keys, moved together. */
export interface RowColumns {
  row: Uint32Array;
  time: Uint32Array;
  user: Uint32Array;
  event: Uint32Array;
}

function rowColumns(rowCount: number): RowColumns {
  return { row: new Uint32Array(rowCount), time: new Uint32Array(rowCount), user: new Uint32Array(rowCount), event: new Uint32Array(rowCount) };
}

/**
 * One stable counting pass of `source` into `target` on the digit
 * (key >>> shift) & (2^bits − 1), `key` being one of source's columns.
 * Returns false, and moves nothing, when every row has the same digit.
 */
function rowRadixPass(source: RowColumns, target: RowColumns, key: Uint32Array, shift: number, bits: number, counts: Uint32Array): boolean {
  const mask = (1 << bits) - 1;
  if (!digitStarts(key, shift, mask, counts)) return false;
  const length = key.length;
  const { row, time, user, event } = source;
  const targetRow = target.row;
  const targetTime = target.time;
  const targetUser = target.user;
  const targetEvent = target.event;
  for (let index = 0; index < length; index++) {
    const at = counts[(key[index] >>> shift) & mask]++;
    targetRow[at] = row[index];
    targetTime[at] = time[index];
    targetUser[at] = user[index];
    targetEvent[at] = event[index];
  }
  return true;
}

/** Property entries being put in sealed order: sealed row, key index, value id. */
export interface EntryColumns {
  row: Uint32Array;
  key: Uint32Array;
  value: Uint32Array;
}

const entryDigitBits = tuning.entrySortDigitBits;

/**
 * One stable counting pass of entries on the digit (row >>> shift) & 2 047,
 * `source` into `target`; false, and nothing moved, when all share the digit.
 */
function entryRadixPass(source: EntryColumns, target: EntryColumns, shift: number, counts: Uint32Array): boolean {
  const { row, key, value } = source;
  const mask = (1 << entryDigitBits) - 1;
  if (!digitStarts(row, shift, mask, counts)) return false;
  const length = row.length;
  const targetRow = target.row;
  const targetKey = target.key;
  const targetValue = target.value;
  for (let index = 0; index < length; index++) {
    const sealedRow = row[index];
    const at = counts[(sealedRow >>> shift) & mask]++;
    targetRow[at] = sealedRow;
    targetKey[at] = key[index];
    targetValue[at] = value[index];
  }
  return true;
}

/** Rows in sealed order: `order[index]` is the input row, rows of event e are order[eventStart[e]…eventStart[e+1]). */
export interface SealedOrder {
  order: Uint32Array;
  /** The time and user columns in sealed order. */
  time: Uint32Array;
  user: Uint32Array;
  eventStart: Uint32Array;
  eventCount: number;
}

const rowDigitBitsMax = tuning.rowSortDigitBitsMax;

/**
 * Orders rows by (event, user, time) with a stable LSD radix sort: counting
 * passes over time, then user, then event, each key cut into as few digits
 * of at most 11 bits as its largest value needs. The rows move through the
 * passes with their keys, so every pass reads its columns front to back; and
 * a digit that every row shares (the high bits of the time of a segment that
 * spans an hour) costs one read, no pass. Passes that read each row's key
 * through the order, with 65 536 places to write to, and the gathers of the
 * time and user columns after them took ~330 ms of a 2 M-row seal (200 k
 * users); these take ~200, bound by moving four columns through memory.
 */
export function sortRows(rowCount: number, timeOffsetMs: Uint32Array, userIds: Uint32Array, eventIds: Uint32Array): SealedOrder {
  const eventCount = maxOf(eventIds) + 1;
  const input: RowColumns = { row: identityOrder(rowCount), time: timeOffsetMs, user: userIds, event: eventIds };
  // The input columns are only read: the passes move rows between two sets of their own.
  let source = input;
  let target = rowColumns(rowCount);
  let spare: RowColumns | undefined;
  const counts = new Uint32Array(1 << rowDigitBitsMax);
  const largest = { time: maxOf(timeOffsetMs), user: maxOf(userIds), event: eventCount - 1 };
  for (const column of ["time", "user", "event"] as const) {
    const keyBits = rowCount === 0 ? 0 : 32 - Math.clz32(largest[column]);
    if (keyBits === 0) continue;
    const digitBits = Math.ceil(keyBits / Math.ceil(keyBits / rowDigitBitsMax));
    for (let shift = 0; shift < keyBits; shift += digitBits) {
      if (!rowRadixPass(source, target, source[column], shift, digitBits, counts)) continue;
      const drained = source;
      source = target;
      target = drained === input ? (spare ??= rowColumns(rowCount)) : drained;
    }
  }
  return { order: source.row, time: source.time, user: source.user, eventStart: runStarts(eventIds, eventCount), eventCount };
}

/** The largest value; -1 when there is none. */
function maxOf(values: Uint32Array): number {
  let max = -1;
  for (let index = 0; index < values.length; index++) if (values[index] > max) max = values[index];
  return max;
}

function identityOrder(rowCount: number): Uint32Array {
  const order = new Uint32Array(rowCount);
  for (let row = 0; row < rowCount; row++) order[row] = row;
  return order;
}

/** Where each event's run starts once rows are grouped by event (eventCount + 1 entries). */
function runStarts(eventIds: Uint32Array, eventCount: number): Uint32Array {
  const eventStart = new Uint32Array(eventCount + 1);
  for (let row = 0; row < eventIds.length; row++) eventStart[eventIds[row] + 1]++;
  for (let event = 0; event < eventCount; event++) eventStart[event + 1] += eventStart[event];
  return eventStart;
}

/** sealedIndexOf[row] = index where order[index] = row. */
export function inversePermutation(order: Uint32Array): Uint32Array {
  const sealedIndexOf = new Uint32Array(order.length);
  for (let index = 0; index < order.length; index++) sealedIndexOf[order[index]] = index;
  return sealedIndexOf;
}

/**
 * Puts `entries` in sealed row order, stably (so keys stay ascending within a
 * row when they came so): an LSD radix sort whose passes move the three
 * columns together, each pass reading them front to back. Returns the sorted
 * columns and the spare set, free once the sort is done.
 */
export function sortEntriesByRow(entries: EntryColumns, rowCount: number): { sorted: EntryColumns; spare: EntryColumns } {
  let spare: EntryColumns = { row: new Uint32Array(entries.row.length), key: new Uint32Array(entries.row.length), value: new Uint32Array(entries.row.length) };
  const rowBits = 32 - Math.clz32(Math.max(1, rowCount - 1));
  const counts = new Uint32Array(1 << entryDigitBits);
  for (let shift = 0; shift < rowBits; shift += entryDigitBits) {
    if (entryRadixPass(entries, spare, shift, counts)) [entries, spare] = [spare, entries];
  }
  return { sorted: entries, spare };
}
