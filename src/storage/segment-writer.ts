/**
 * Sealed segments: immutable column files for one workspace and UTC day,
 * published atomically (a tmp_ directory renamed into place). Rows are sorted
 * by (event id, user id, time), so an event's rows are one contiguous run — a
 * day's total is a subtraction — and each event carries a roaring bitmap of the
 * users it has, for funnels and retention.
 *
 *   _meta.json            layout, row count, per-file byte length and CRC32
 *   time.u32              ms since the UTC day start
 *   user.u32              dense user id
 *   event-start.u32       rows of event e are [start[e], start[e + 1])
 *   bitmaps.roaring       portable roaring bitmaps, one per event, concatenated
 *   bitmap-end.u32        byte end of each event's bitmap
 *   properties.bin        every property key's values and dictionary, with a
 *                         directory (see PropertyDirectory); one file, however
 *                         many keys, so a day with 30 000 distinct keys is not
 *                         90 000 files
 *   uuid-row.u32, uuid.b16   rows that carried a uuid, and their 16 bytes (dedupe only)
 *
 * In memory a segment is one SharedArrayBuffer holding every query column at
 * the offsets of its layout, so a query task passes one handle per segment.
 * Sealing and loading both run in the worker pool, off the main thread.
 */
import { strict as assert } from "node:assert";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { crc32 } from "node:zlib";
import roaring from "roaring";
import { injectFault } from "./fault-injection.js";
import { fsyncDirectory, makeDirectoryDurably, renameIntoPlace, writeFileDurably } from "./files.js";

const { RoaringBitmap32 } = roaring;

/** 2: properties in one file, dense or sparse per key (1 had a dense file per key). */
export const segmentFormatVersion = 2;

export interface ColumnSpan {
  file: string;
  /** Byte offset inside the segment's SharedArrayBuffer (query columns only). */
  offset: number;
  bytes: number;
  crc: number;
}

/**
 * The property section: one span of the segment's memory (and one file)
 * holding, per key, its value ids and its dictionary, plus a directory of
 * `directoryFields` float64s per key, sorted by key id.
 *
 * Each key is stored dense (a value id per row) or sparse (the rows that set
 * it, ascending, and their value ids), whichever is smaller: so a segment
 * costs bytes in proportion to the values it holds, not to keys × rows, and a
 * key set on a handful of rows among millions costs a handful of entries.
 */
export interface PropertiesLayout {
  keyCount: number;
  /** The whole section; the directory opens it. */
  span: ColumnSpan;
}

const directoryFields = 10;
const enum Field {
  KeyId = 0,
  /** 0 dense, 1 sparse. */
  Sparse = 1,
  /** Bytes per value id: 1, 2 or 4. */
  Width = 2,
  /** Distinct texts, id 0 (not set) excluded. */
  ValueCount = 3,
  /** Rows that set the key. */
  EntryCount = 4,
  ValuesOffset = 5,
  /** Sparse keys: the u32 row numbers, parallel to the values. */
  RowsOffset = 6,
  TextEndsOffset = 7,
  TextsOffset = 8,
  TextsBytes = 9,
}

export type ValueIdArray = Uint8Array | Uint16Array | Uint32Array;

/** One key of a sealed segment, read in place from shared memory. */
export interface StoredProperty {
  keyId: number;
  width: 1 | 2 | 4;
  valueCount: number;
  entryCount: number;
  /** Dense: one value id per row (0 = not set). Sparse: one per entry, parallel to `rows`. */
  values: ValueIdArray;
  /** Sparse keys only: the rows that set the key, ascending. */
  rows: Uint32Array | undefined;
  /** Decodes the dictionary: texts[id] for id 1..valueCount; texts[0] is "". */
  texts(): string[];
}

function valueIdArray(memory: SharedArrayBuffer, width: 1 | 2 | 4, offset: number, length: number): ValueIdArray {
  return width === 1 ? new Uint8Array(memory, offset, length) : width === 2 ? new Uint16Array(memory, offset, length) : new Uint32Array(memory, offset, length);
}

/** The property directory of a loaded segment: lookup by key id is a binary search. */
export class PropertyDirectory {
  readonly keyCount: number;
  private readonly fields: Float64Array;

  constructor(
    private readonly layout: SegmentLayout,
    private readonly memory: SharedArrayBuffer,
  ) {
    const section = layout.properties;
    this.keyCount = section?.keyCount ?? 0;
    this.fields = section ? new Float64Array(memory, section.span.offset, this.keyCount * directoryFields) : new Float64Array(0);
  }

  find(keyId: number): StoredProperty | undefined {
    let low = 0;
    let high = this.keyCount;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if (this.fields[middle * directoryFields + Field.KeyId] < keyId) low = middle + 1;
      else high = middle;
    }
    return low < this.keyCount && this.fields[low * directoryFields + Field.KeyId] === keyId ? this.at(low) : undefined;
  }

  at(index: number): StoredProperty {
    const base = index * directoryFields;
    const field = (name: Field) => this.fields[base + name];
    const memory = this.memory;
    const sparse = field(Field.Sparse) === 1;
    const width = field(Field.Width) as 1 | 2 | 4;
    const valueCount = field(Field.ValueCount);
    const entryCount = field(Field.EntryCount);
    const textEndsOffset = field(Field.TextEndsOffset);
    const textsOffset = field(Field.TextsOffset);
    const textsBytes = field(Field.TextsBytes);
    return {
      keyId: field(Field.KeyId),
      width,
      valueCount,
      entryCount,
      values: valueIdArray(memory, width, field(Field.ValuesOffset), sparse ? entryCount : this.layout.rowCount),
      rows: sparse ? new Uint32Array(memory, field(Field.RowsOffset), entryCount) : undefined,
      texts: () => {
        const ends = new Uint32Array(memory, textEndsOffset, valueCount + 1);
        // Buffer.from over shared memory copies nothing; toString decodes each text once.
        const bytes = Buffer.from(memory, textsOffset, textsBytes);
        const texts = new Array<string>(valueCount + 1);
        texts[0] = "";
        for (let id = 1; id <= valueCount; id++) texts[id] = bytes.toString("utf8", ends[id - 1], ends[id]);
        return texts;
      },
    };
  }
}

/** A dense value-id column of `rowCount` rows (0 = not set) for a stored key, built from the sparse form when needed. */
export function denseValueIds(property: StoredProperty, rowCount: number): ValueIdArray {
  if (property.rows === undefined) return property.values;
  const dense = property.width === 1 ? new Uint8Array(rowCount) : property.width === 2 ? new Uint16Array(rowCount) : new Uint32Array(rowCount);
  const { rows, values } = property;
  for (let entry = 0; entry < rows.length; entry++) dense[rows[entry]] = values[entry];
  return dense;
}

/**
 * One property key's values over a segment's rows before sealing, sparse:
 * `rows` ascending, `valueIds[i]` ≥ 1 indexes `texts` (texts[0] unused).
 */
export interface PropertyEntries {
  keyId: number;
  rows: Uint32Array;
  valueIds: Uint32Array;
  texts: string[];
}

export interface SegmentLayout {
  format: number;
  rowCount: number;
  dayStartMs: number;
  /** Number of event ids covered by eventStart (eventStart has eventCount + 1 entries). */
  eventCount: number;
  time: ColumnSpan;
  user: ColumnSpan;
  eventStart: ColumnSpan;
  bitmaps: ColumnSpan;
  bitmapEnds: ColumnSpan;
  /** Undefined when no row sets a property. */
  properties: PropertiesLayout | undefined;
  /** Segments of the same day this one replaces (a merge); start-up deletes them if they remain. */
  replaces?: string[];
  /** Not loaded for queries: read at start-up to rebuild the uuid set. */
  uuidRows: ColumnSpan | undefined;
  uuids: ColumnSpan | undefined;
  /** SharedArrayBuffer size holding every query column. */
  memoryBytes: number;
}

export interface LoadSegmentResult {
  kind: "load-segment";
  layout: SegmentLayout;
  memory: SharedArrayBuffer;
}

export interface SealInput {
  directory: string;
  dayStartMs: number;
  rowCount: number;
  timeOffsetMs: Uint32Array;
  userIds: Uint32Array;
  eventIds: Uint32Array;
  uuidPresent: Uint8Array;
  uuidBytes: Uint8Array;
  /** Any order; a key with no entries is left out of the segment. */
  properties: PropertyEntries[];
  fsync: boolean;
  /** Names of the segments a merge replaces. */
  replaces?: string[];
}

function align8(value: number): number {
  return (value + 7) & ~7;
}

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
interface RowColumns {
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
interface EntryColumns {
  row: Uint32Array;
  key: Uint32Array;
  value: Uint32Array;
}

/** 2 048 buckets: each pass writes to few enough places at once to stay in cache. */
const entryDigitBits = 11;

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
interface SealedOrder {
  order: Uint32Array;
  /** The time and user columns in sealed order. */
  time: Uint32Array;
  user: Uint32Array;
  eventStart: Uint32Array;
  eventCount: number;
}

/** Radix digits of at most this many bits: 2 048 places written at once stay in the caches and the TLB. */
const rowDigitBitsMax = 11;

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
function sortRows(rowCount: number, timeOffsetMs: Uint32Array, userIds: Uint32Array, eventIds: Uint32Array): SealedOrder {
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

/** Per-event user bitmaps, portable format, one after the other; `ends[e]` is where event e's ends. */
function eventBitmaps(user: Uint32Array, { eventStart, eventCount }: SealedOrder): { bitmaps: Buffer; ends: Uint32Array } {
  const parts: Uint8Array[] = [];
  const ends = new Uint32Array(eventCount);
  let bytes = 0;
  for (let event = 0; event < eventCount; event++) {
    if (eventStart[event + 1] > eventStart[event]) {
      const bitmap = new RoaringBitmap32(user.subarray(eventStart[event], eventStart[event + 1]));
      bitmap.runOptimize();
      const serialized = bitmap.serialize(true);
      parts.push(serialized);
      bytes += serialized.length;
    }
    ends[event] = bytes;
  }
  return { bitmaps: Buffer.concat(parts, bytes), ends };
}

/**
 * The property keys of a segment in sealed order. Key k's entries are
 * [keyEntryStart[k], keyEntryStart[k+1]) of `rows` (ascending sealed rows) and
 * `values` (ids renumbered in first-use order from 1); usedOldId[keyTextStart[k] + id]
 * is the input id of new id `id`, and usedTextCount[k] how many texts it keeps.
 */
interface SealedProperties {
  keys: PropertyEntries[];
  /**
   * Per key: its new ids by sealed row (0: not set) when it was read by
   * gathering (`sealDenseKey`), else undefined and its entries are in `rows` and `values`.
   */
  denseIds: Array<Uint32Array | undefined>;
  keyEntryStart: Uint32Array;
  keyTextStart: Uint32Array;
  rows: Uint32Array;
  values: Uint32Array;
  usedOldId: Uint32Array;
  usedTextCount: Uint32Array;
}

/**
 * A key set on at least half the rows is read by gathering (sealDenseKey).
 * For the others, every entry is tagged with its sealed row (read key by key, rows ascending,
 * so the lookups walk forward), then all entries are put in sealed row order,
 * keys ascending within a row, by a stable LSD radix sort that moves the
 * three columns together: each pass reads them front to back. Read back in
 * that order, every key's entries come out with ascending rows, and its
 * dictionary is renumbered in first-use order keeping only the texts this
 * segment uses. Grouping the entries by source row and reading them back
 * through the sort's order instead jumped through memory at every row: ~0.4 s
 * of a 2 M-row seal. Linear in rows + entries whatever the number of keys, and
 * in flat arrays with an offset per key: a day can hold a million keys of one
 * entry each, and four arrays per key spent seconds of the sealing worker in
 * allocation and garbage collection.
 */
function sealProperties(properties: PropertyEntries[], sealedIndexOf: Uint32Array): SealedProperties {
  const rowCount = sealedIndexOf.length;
  const keys = properties.filter((property) => property.rows.length > 0).sort((left, right) => left.keyId - right.keyId);
  const keyCount = keys.length;
  // A key set on at least half the rows is stored dense whatever its width;
  // it is read by gathering instead of sorting its entries.
  const gathered = keys.map((key) => key.rows.length * 2 >= rowCount);
  const keyEntryStart = new Uint32Array(keyCount + 1);
  const keyTextStart = new Uint32Array(keyCount + 1);
  for (let keyIndex = 0; keyIndex < keyCount; keyIndex++) {
    keyEntryStart[keyIndex + 1] = keyEntryStart[keyIndex] + (gathered[keyIndex] ? 0 : keys[keyIndex].rows.length);
    keyTextStart[keyIndex + 1] = keyTextStart[keyIndex] + keys[keyIndex].texts.length;
  }
  const usedOldId = new Uint32Array(keyTextStart[keyCount]);
  const usedTextCount = new Uint32Array(keyCount);
  const denseIds = new Array<Uint32Array | undefined>(keyCount).fill(undefined);
  for (let keyIndex = 0; keyIndex < keyCount; keyIndex++) {
    if (!gathered[keyIndex]) continue;
    const textStart = keyTextStart[keyIndex];
    const used = usedOldId.subarray(textStart, keyTextStart[keyIndex + 1]);
    const ids = new Uint32Array(rowCount);
    usedTextCount[keyIndex] = sealDenseKey(keys[keyIndex], sealedIndexOf, ids, used);
    denseIds[keyIndex] = ids;
  }
  let entries = tagEntries(keys, denseIds, keyEntryStart[keyCount], sealedIndexOf);
  let spare: EntryColumns = { row: new Uint32Array(entries.row.length), key: new Uint32Array(entries.row.length), value: new Uint32Array(entries.row.length) };
  const rowBits = 32 - Math.clz32(Math.max(1, rowCount - 1));
  const counts = new Uint32Array(1 << entryDigitBits);
  for (let shift = 0; shift < rowBits; shift += entryDigitBits) {
    if (entryRadixPass(entries, spare, shift, counts)) [entries, spare] = [spare, entries];
  }
  // The spare columns are free once sorted: they take the result.
  renumberValues(entries, keyEntryStart, keyTextStart, spare, usedOldId, usedTextCount);
  return { keys, denseIds, keyEntryStart, keyTextStart, rows: spare.row, values: spare.value, usedOldId, usedTextCount };
}

/**
 * One dense key in sealed order: its input ids scattered to their sealed rows
 * in `ids` (all 0, and rows without the key left so), then renumbered in place
 * in first-use order; usedOldId[new id] gets the input id. Returns the number
 * of texts used. The scatter reads the entries front to back; gathering the
 * ids through the sort's order instead missed the caches at every row, ~20 ns
 * a row and key of a 2 M-row seal.
 */
function sealDenseKey(key: PropertyEntries, sealedIndexOf: Uint32Array, ids: Uint32Array, usedOldId: Uint32Array): number {
  const { rows, valueIds } = key;
  for (let entry = 0; entry < rows.length; entry++) ids[sealedIndexOf[rows[entry]]] = valueIds[entry];
  const remap = new Uint32Array(key.texts.length);
  let usedCount = 0;
  for (let index = 0; index < ids.length; index++) {
    const oldId = ids[index];
    if (oldId === 0) continue;
    let newId = remap[oldId];
    if (newId === 0) {
      newId = remap[oldId] = ++usedCount;
      usedOldId[newId] = oldId;
    }
    ids[index] = newId;
  }
  return usedCount;
}

/** sealedIndexOf[row] = index where order[index] = row. */
function inversePermutation(order: Uint32Array): Uint32Array {
  const sealedIndexOf = new Uint32Array(order.length);
  for (let index = 0; index < order.length; index++) sealedIndexOf[order[index]] = index;
  return sealedIndexOf;
}

/** The entries of every key not gathered, one after the other, with their sealed rows. */
function tagEntries(keys: PropertyEntries[], denseIds: Array<Uint32Array | undefined>, entryTotal: number, sealedIndexOf: Uint32Array): EntryColumns {
  const entries: EntryColumns = { row: new Uint32Array(entryTotal), key: new Uint32Array(entryTotal), value: new Uint32Array(entryTotal) };
  for (let keyIndex = 0, slot = 0; keyIndex < keys.length; keyIndex++) {
    if (denseIds[keyIndex] !== undefined) continue;
    const { rows, valueIds } = keys[keyIndex];
    for (let entry = 0; entry < rows.length; entry++, slot++) {
      entries.row[slot] = sealedIndexOf[rows[entry]];
      entries.key[slot] = keyIndex;
      entries.value[slot] = valueIds[entry];
    }
  }
  return entries;
}

/**
 * Reads entries in sealed order into each key's place of `target` (rows and
 * new ids). remap[old id] is the new id (0: not used yet), from the key's text start.
 */
function renumberValues(
  entries: EntryColumns,
  keyEntryStart: Uint32Array,
  keyTextStart: Uint32Array,
  target: EntryColumns,
  usedOldId: Uint32Array,
  usedTextCount: Uint32Array,
): void {
  const keyCount = usedTextCount.length;
  const remap = new Uint32Array(keyTextStart[keyCount]);
  const keyFill = keyEntryStart.slice(0, keyCount);
  for (let slot = 0; slot < entries.row.length; slot++) {
    const keyIndex = entries.key[slot];
    const textStart = keyTextStart[keyIndex];
    const oldId = entries.value[slot];
    let newId = remap[textStart + oldId];
    if (newId === 0) {
      newId = ++usedTextCount[keyIndex];
      remap[textStart + oldId] = newId;
      usedOldId[textStart + newId] = oldId;
    }
    const cursor = keyFill[keyIndex]++;
    target.row[cursor] = entries.row[slot];
    target.value[cursor] = newId;
  }
}

/**
 * uuids: only the rows that carried one, in the order they arrived, each with
 * its sealed row (uuidRows), for dedupe rebuild and merges, which need the
 * uuids but not in any order. Copied front to back: read in sealed order, every
 * uuid was a cache miss (~0.1 µs a row of a 2 M-row seal).
 */
function sealUuids(sealedIndexOf: Uint32Array, uuidPresent: Uint8Array, uuidSource: Uint8Array): { uuidRows: Uint32Array; uuids: Uint8Array } {
  const rowCount = sealedIndexOf.length;
  let uuidCount = 0;
  for (let row = 0; row < rowCount; row++) uuidCount += uuidPresent[row];
  const uuidRows = new Uint32Array(uuidCount);
  const uuids = new Uint8Array(uuidCount * 16);
  // Four word copies per uuid where the source is word-aligned (always, from
  // the store), sixteen byte copies otherwise.
  const sourceWords = uuidSource.byteOffset % 4 === 0 ? new Uint32Array(uuidSource.buffer, uuidSource.byteOffset, uuidSource.length >>> 2) : undefined;
  const targetWords = new Uint32Array(uuids.buffer);
  for (let row = 0, cursor = 0; row < rowCount; row++) {
    if (uuidPresent[row] === 0) continue;
    uuidRows[cursor] = sealedIndexOf[row];
    if (sourceWords) {
      for (let word = 0; word < 4; word++) targetWords[cursor * 4 + word] = sourceWords[row * 4 + word];
    } else {
      for (let byte = 0; byte < 16; byte++) uuids[cursor * 16 + byte] = uuidSource[row * 16 + byte];
    }
    cursor++;
  }
  return { uuidRows, uuids };
}

/**
 * The property directory: per key its values, its rows (sparse keys), its
 * text ends and its texts, each 8-byte aligned from `start`. Returns the
 * directory and where the section ends.
 */
function layOutProperties(sealed: SealedProperties, rowCount: number, start: number): { directory: Float64Array; end: number } {
  const { keys, keyTextStart, usedOldId, usedTextCount } = sealed;
  const keyCount = keys.length;
  let end = align8(start + keyCount * directoryFields * Float64Array.BYTES_PER_ELEMENT);
  const directory = new Float64Array(keyCount * directoryFields);
  for (let keyIndex = 0; keyIndex < keyCount; keyIndex++) {
    const textCount = usedTextCount[keyIndex] + 1;
    const texts = keys[keyIndex].texts;
    const textStart = keyTextStart[keyIndex];
    const entryCount = keys[keyIndex].rows.length;
    const width: 1 | 2 | 4 = textCount <= 0xff ? 1 : textCount <= 0xffff ? 2 : 4;
    const sparse = entryCount * (4 + width) < rowCount * width;
    assert(!sparse || sealed.denseIds[keyIndex] === undefined, "a gathered key is stored dense");
    let textsBytes = 0;
    for (let id = 1; id < textCount; id++) textsBytes += Buffer.byteLength(texts[usedOldId[textStart + id]], "utf8");
    const base = keyIndex * directoryFields;
    directory[base + Field.KeyId] = keys[keyIndex].keyId;
    directory[base + Field.Sparse] = sparse ? 1 : 0;
    directory[base + Field.Width] = width;
    directory[base + Field.ValueCount] = textCount - 1;
    directory[base + Field.EntryCount] = entryCount;
    directory[base + Field.ValuesOffset] = end;
    end = align8(end + width * (sparse ? entryCount : rowCount));
    directory[base + Field.RowsOffset] = sparse ? end : -1;
    if (sparse) end = align8(end + entryCount * Uint32Array.BYTES_PER_ELEMENT);
    directory[base + Field.TextEndsOffset] = end;
    end = align8(end + textCount * Uint32Array.BYTES_PER_ELEMENT);
    directory[base + Field.TextsOffset] = end;
    directory[base + Field.TextsBytes] = textsBytes;
    end = align8(end + textsBytes);
  }
  return { directory, end };
}

/** Writes every key's values, rows, text ends and texts where `directory` places them in `memory`. */
function writeProperties(sealed: SealedProperties, directory: Float64Array, memory: SharedArrayBuffer, rowCount: number): void {
  const { keys, keyEntryStart, keyTextStart, usedOldId } = sealed;
  const memoryText = Buffer.from(memory);
  for (let keyIndex = 0; keyIndex < keys.length; keyIndex++) {
    const base = keyIndex * directoryFields;
    const width = directory[base + Field.Width] as 1 | 2 | 4;
    const entryCount = directory[base + Field.EntryCount];
    const entryStart = keyEntryStart[keyIndex];
    const keyValues = sealed.values.subarray(entryStart, entryStart + entryCount);
    const keyRows = sealed.rows.subarray(entryStart, entryStart + entryCount);
    const denseIds = sealed.denseIds[keyIndex];
    if (denseIds !== undefined) {
      // TypedArray.prototype.set narrows natively.
      valueIdArray(memory, width, directory[base + Field.ValuesOffset], rowCount).set(denseIds);
    } else if (directory[base + Field.Sparse] === 1) {
      // TypedArray.prototype.set narrows natively.
      valueIdArray(memory, width, directory[base + Field.ValuesOffset], entryCount).set(keyValues);
      new Uint32Array(memory, directory[base + Field.RowsOffset], entryCount).set(keyRows);
    } else {
      scatterValues(valueIdArray(memory, width, directory[base + Field.ValuesOffset], rowCount), keyRows, keyValues);
    }
    const textCount = directory[base + Field.ValueCount] + 1;
    const textEnds = new Uint32Array(memory, directory[base + Field.TextEndsOffset], textCount);
    const texts = keys[keyIndex].texts;
    const textStart = keyTextStart[keyIndex];
    const textsOffset = directory[base + Field.TextsOffset];
    let end = 0;
    for (let id = 1; id < textCount; id++) {
      end += memoryText.write(texts[usedOldId[textStart + id]], textsOffset + end, "utf8");
      textEnds[id] = end;
    }
  }
}

/** A dense key's values: values[rows[entry]] = ids[entry]. */
function scatterValues(values: ValueIdArray, rows: Uint32Array, ids: Uint32Array): void {
  for (let entry = 0; entry < rows.length; entry++) values[rows[entry]] = ids[entry];
}

/**
 * Sorts, encodes and publishes one segment; returns its in-memory form. Each
 * step is a function of its own: a seal runs once a checkpoint, and V8
 * optimises a hot loop by compiling the function around it. Written as one
 * function of some twenty loops, it was compiled ~40 times in a 10 s ingest
 * run, ~37 ms of a helper thread each, and ran its other loops unoptimised.
 */
export function sealSegment(input: SealInput): LoadSegmentResult {
  const { rowCount } = input;
  // The columns may be longer than rowCount (an active segment's capacity).
  const timeOffsetMs = input.timeOffsetMs.subarray(0, rowCount);
  const userIds = input.userIds.subarray(0, rowCount);
  const eventIds = input.eventIds.subarray(0, rowCount);
  const sorted = sortRows(rowCount, timeOffsetMs, userIds, eventIds);
  const { time, user, eventStart, eventCount } = sorted;
  const { bitmaps, ends: bitmapEnds } = eventBitmaps(user, sorted);
  // Columns are put in sealed order by scattering each row to its place, reading
  // the row's values front to back, rather than gathering them through `order`:
  // a miss that stalls per row of every column, where stores miss without waiting.
  const sealedIndexOf = inversePermutation(sorted.order);
  const properties = sealProperties(input.properties, sealedIndexOf);
  const keyCount = properties.keys.length;
  const { uuidRows, uuids } = sealUuids(sealedIndexOf, input.uuidPresent, input.uuidBytes);

  // Lay the query columns out in one shared buffer: first where each part goes, then the bytes.
  let memoryBytes = 0;
  const place = (file: string, bytes: Uint8Array): { span: ColumnSpan; bytes: Uint8Array } => {
    const span: ColumnSpan = { file, offset: memoryBytes, bytes: bytes.byteLength, crc: crc32(bytes) };
    memoryBytes = align8(memoryBytes + bytes.byteLength);
    return { span, bytes };
  };
  const asBytes = (array: ArrayBufferView) => new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
  const placed = [
    place("time.u32", asBytes(time)),
    place("user.u32", asBytes(user)),
    place("event-start.u32", asBytes(eventStart)),
    place("bitmaps.roaring", asBytes(bitmaps)),
    place("bitmap-end.u32", asBytes(bitmapEnds)),
  ];
  // The property section: the directory, then each key's parts (layOutProperties).
  const propertySectionStart = memoryBytes;
  const { directory, end } = layOutProperties(properties, rowCount, propertySectionStart);
  memoryBytes = end;
  const memory = new SharedArrayBuffer(Math.max(8, memoryBytes));
  const memoryView = new Uint8Array(memory);
  for (const { span, bytes } of placed) memoryView.set(bytes, span.offset);
  new Float64Array(memory, propertySectionStart, directory.length).set(directory);
  writeProperties(properties, directory, memory, rowCount);
  const propertySection = memoryView.subarray(propertySectionStart, memoryBytes);
  const propertiesLayout: PropertiesLayout | undefined =
    keyCount === 0 ? undefined : { keyCount, span: { file: "properties.bin", offset: propertySectionStart, bytes: propertySection.byteLength, crc: crc32(propertySection) } };

  const uuidRowsSpan: ColumnSpan | undefined = uuidRows.length ? { file: "uuid-row.u32", offset: -1, bytes: uuidRows.byteLength, crc: crc32(asBytes(uuidRows)) } : undefined;
  const uuidsSpan: ColumnSpan | undefined = uuidRows.length ? { file: "uuid.b16", offset: -1, bytes: uuids.byteLength, crc: crc32(uuids) } : undefined;

  const layout: SegmentLayout = {
    format: segmentFormatVersion,
    rowCount,
    dayStartMs: input.dayStartMs,
    eventCount,
    time: placed[0].span,
    user: placed[1].span,
    eventStart: placed[2].span,
    bitmaps: placed[3].span,
    bitmapEnds: placed[4].span,
    properties: propertiesLayout,
    uuidRows: uuidRowsSpan,
    uuids: uuidsSpan,
    memoryBytes: memory.byteLength,
    ...(input.replaces ? { replaces: input.replaces } : {}),
  };

  // Publish: every file into tmp_<name>, fsync each, then one rename makes the segment exist.
  const parent = dirname(input.directory);
  // Durably: the day directory's entry must survive a power loss once a checkpoint names its segments.
  makeDirectoryDurably(parent, input.fsync);
  const temporary = join(parent, `tmp_${input.directory.slice(parent.length + 1)}`);
  rmSync(temporary, { recursive: true, force: true });
  mkdirSync(temporary);
  injectFault("segment.write", temporary);
  for (const { span, bytes } of placed) writeFileDurably(join(temporary, span.file), bytes, input.fsync);
  if (propertiesLayout) writeFileDurably(join(temporary, propertiesLayout.span.file), propertySection, input.fsync);
  if (uuidRowsSpan) {
    writeFileDurably(join(temporary, uuidRowsSpan.file), asBytes(uuidRows), input.fsync);
    writeFileDurably(join(temporary, uuidsSpan!.file), uuids, input.fsync);
  }
  writeFileDurably(join(temporary, "_meta.json"), encodeLayout(layout), input.fsync);
  if (input.fsync) fsyncDirectory(temporary);
  injectFault("segment.rename", input.directory);
  renameIntoPlace(temporary, input.directory, input.fsync);
  return { kind: "load-segment", layout, memory };
}

export class SegmentCorruptError extends Error {}

/** The key `_meta.json` ends with: the CRC32 of the text before it, closed by "}". */
const layoutChecksumKey = ',"crc32":';

/** `_meta.json`'s text: the layout's JSON with its own checksum as the last key. */
function encodeLayout(layout: SegmentLayout): string {
  const text = JSON.stringify(layout);
  return `${text.slice(0, -1)}${layoutChecksumKey}${crc32(text)}}`;
}

export function readSegmentLayout(directory: string): SegmentLayout {
  const path = join(directory, "_meta.json");
  const text = readFileSync(path, "utf8");
  const keyAt = text.lastIndexOf(layoutChecksumKey);
  // Segments written before the checksum existed have none; a flip that hides the key leaves the rest intact.
  const body = keyAt < 0 ? text : `${text.slice(0, keyAt)}}`;
  if (keyAt >= 0 && String(crc32(body)) !== text.slice(keyAt + layoutChecksumKey.length, -1)) throw new SegmentCorruptError(`${path}: checksum mismatch`);
  let layout: SegmentLayout;
  try {
    layout = JSON.parse(body) as SegmentLayout;
  } catch (error) {
    throw new SegmentCorruptError(`${path}: unreadable (${(error as Error).message})`);
  }
  if (layout?.format !== segmentFormatVersion) throw new SegmentCorruptError(`${directory}: unknown segment format ${layout?.format}`);
  return layout;
}

/**
 * Reads every file of a sealed segment and checks it against its layout
 * (start-up and repair): throws SegmentCorruptError naming the first bad file.
 * The uuid files too: a damaged one would let a retried event be stored twice.
 */
export function verifySegment(directory: string, layout: SegmentLayout): void {
  const spans = [layout.time, layout.user, layout.eventStart, layout.bitmaps, layout.bitmapEnds, layout.properties?.span, layout.uuidRows, layout.uuids];
  let largest = 0;
  for (const span of spans) if (span) largest = Math.max(largest, span.bytes);
  const scratch = new Uint8Array(largest);
  for (const span of spans) if (span) readSpan(directory, span, scratch);
  if (layout.time.bytes !== layout.rowCount * 4 || layout.user.bytes !== layout.rowCount * 4 || layout.eventStart.bytes !== (layout.eventCount + 1) * 4) {
    throw new SegmentCorruptError(`${directory}: column sizes disagree with its row count`);
  }
}

function readSpan(directory: string, span: ColumnSpan, target: Uint8Array): void {
  const path = join(directory, span.file);
  if (!existsSync(path)) throw new SegmentCorruptError(`${path}: missing`);
  const fd = openSync(path, "r");
  try {
    let read = 0;
    while (read < span.bytes) {
      const count = readSync(fd, target, read, span.bytes - read, read);
      if (count === 0) throw new SegmentCorruptError(`${path}: shorter than ${span.bytes} bytes`);
      read += count;
    }
  } finally {
    closeSync(fd);
  }
  if (crc32(target.subarray(0, span.bytes)) !== span.crc) throw new SegmentCorruptError(`${path}: checksum mismatch`);
}

/** Reads a sealed segment's query columns into one shared buffer, verifying every checksum. */
export function loadSegment(directory: string): LoadSegmentResult {
  const layout = readSegmentLayout(directory);
  const memory = new SharedArrayBuffer(layout.memoryBytes);
  const spans = [layout.time, layout.user, layout.eventStart, layout.bitmaps, layout.bitmapEnds];
  if (layout.properties) spans.push(layout.properties.span);
  for (const span of spans) readSpan(directory, span, new Uint8Array(memory, span.offset, span.bytes));
  // Row counts are checked after reading as well as before writing (STYLE rule 2).
  assert.equal(layout.time.bytes, layout.rowCount * 4, `${directory}: time column disagrees with row count`);
  assert.equal(layout.user.bytes, layout.rowCount * 4, `${directory}: user column disagrees with row count`);
  const eventStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
  assert.equal(eventStart[layout.eventCount], layout.rowCount, `${directory}: event runs disagree with row count`);
  return { kind: "load-segment", layout, memory };
}

/** One file of a segment, checksum verified (files that are not query columns: uuids). */
export function readSegmentFile(directory: string, span: ColumnSpan): Uint8Array {
  const target = new Uint8Array(span.bytes);
  readSpan(directory, span, target);
  return target;
}

/** The 16-byte uuids a segment holds (start-up dedupe rebuild). */
export function readSegmentUuids(directory: string, layout: SegmentLayout): Uint8Array {
  if (!layout.uuids) return new Uint8Array(0);
  const target = new Uint8Array(layout.uuids.bytes);
  readSpan(directory, layout.uuids, target);
  return target;
}

export function segmentExists(directory: string): boolean {
  return existsSync(join(directory, "_meta.json"));
}

