/**
 * A sealed segment's layout: the files it holds, the roles of its columns,
 * where each sits in the segment's one SharedArrayBuffer, and `_meta.json`,
 * the self-describing record of all of it with its own checksum. The writer
 * (segment-writer.ts) produces a layout, the reader (segment-reader.ts)
 * trusts nothing but one that checks out; both agree through this module.
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
 *   value-counts.u32      the value counts of the most used keys (format 3;
 *                         value-counts-index.ts), so no thread builds them
 *   uuid-row.u32, uuid.b16   rows that carried a uuid, and their 16 bytes (dedupe only)
 */
import { crc32 } from "node:zlib";

/** 3: value counts stored (value-counts.u32). 2: properties in one file, dense or sparse per key (1 had a dense file per key). */
export const segmentFormatVersion = 3;
/** Older formats this version reads as they are: 2 has no value counts (queries build them). */
export const segmentFormatOldestRead = 2;

/** The file of each part of a segment; `meta` describes the others. */
export const segmentFiles = {
  meta: "_meta.json",
  time: "time.u32",
  user: "user.u32",
  eventStart: "event-start.u32",
  bitmaps: "bitmaps.roaring",
  bitmapEnds: "bitmap-end.u32",
  properties: "properties.bin",
  valueCounts: "value-counts.u32",
  uuidRows: "uuid-row.u32",
  uuids: "uuid.b16",
} as const;

/**
 * The offset written for what has no place in the segment's memory: the uuid
 * files (not loaded for queries) and a dense key's rows. A value of the file
 * format: it stays -1.
 */
export const notInMemoryOffset = -1;

export interface ColumnSpan {
  file: string;
  /** Byte offset inside the segment's SharedArrayBuffer (query columns only; else notInMemoryOffset). */
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

/** float64s per key in the property directory. */
export const directoryFields = 10;
export const enum DirectoryField {
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

/**
 * Stored value counts (value-counts-index.ts): one span of the segment's
 * memory holding, per indexed key, its marks and then its prefix counts,
 * each a run of u32s; `keys` lists `valueCountsFields` numbers per key,
 * sorted by key id.
 */
export interface ValueCountsLayout {
  span: ColumnSpan;
  keys: number[];
}

export const valueCountsFields = 4;
export const enum ValueCountsField {
  KeyId = 0,
  /** Ids counted: the key's distinct texts plus id 0 (not set). */
  ValueCount = 1,
  MarkCount = 2,
  /** Byte offset of the marks in the segment's memory; the prefix counts follow them. */
  MarksOffset = 3,
}

/**
 * The index of the record whose `keyField` is `key` among `count` records of
 * `stride` numbers each, sorted by that field (the property directory, the
 * stored value counts), or -1.
 */
export function findRecord(records: ArrayLike<number>, stride: number, count: number, keyField: number, key: number): number {
  let low = 0;
  let high = count;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (records[middle * stride + keyField] < key) low = middle + 1;
    else high = middle;
  }
  return low < count && records[low * stride + keyField] === key ? low : -1;
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

export function valueIdArray(memory: SharedArrayBuffer, width: 1 | 2 | 4, offset: number, length: number): ValueIdArray {
  return width === 1 ? new Uint8Array(memory, offset, length) : width === 2 ? new Uint16Array(memory, offset, length) : new Uint32Array(memory, offset, length);
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
  /** Format 3, when some key is indexed: the value counts of its keys. */
  valueCounts?: ValueCountsLayout;
  /** Segments of the same day this one replaces (a merge); start-up deletes them if they remain. */
  replaces?: string[];
  /**
   * The directory name it was published under (absent in segments written before it was kept):
   * start-up tells a damaged name from the leftover of a checkpoint that never completed by it.
   */
  name?: string;
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

/** Every part of a segment's memory starts 8-byte aligned, so any typed array can view it. */
export function align8(value: number): number {
  return (value + 7) & ~7;
}

export class SegmentCorruptError extends Error {}

/** How a segment load's failure begins once it crossed from a worker (an error crosses threads as its message): its files' fault, not the pool's. */
export const segmentDamageMarker = "damaged segment: ";

/** The key `_meta.json` ends with: the CRC32 of the text before it, closed by "}". */
const layoutChecksumKey = ',"crc32":';

/** `_meta.json`'s text: the layout's JSON with its own checksum as the last key. */
export function encodeLayout(layout: SegmentLayout): string {
  const text = JSON.stringify(layout);
  return `${text.slice(0, -1)}${layoutChecksumKey}${crc32(text)}}`;
}

/**
 * The layout `_meta.json`'s text describes, its checksum verified. Segments
 * written before the checksum existed have none; a flip that hides the key
 * leaves the rest intact. Throws SegmentCorruptError naming `path`.
 */
export function decodeLayout(text: string, path: string): SegmentLayout {
  const keyAt = text.lastIndexOf(layoutChecksumKey);
  const body = keyAt < 0 ? text : `${text.slice(0, keyAt)}}`;
  if (keyAt >= 0 && String(crc32(body)) !== text.slice(keyAt + layoutChecksumKey.length, -1)) throw new SegmentCorruptError(`${path}: checksum mismatch`);
  try {
    return JSON.parse(body) as SegmentLayout;
  } catch (error) {
    throw new SegmentCorruptError(`${path}: unreadable (${(error as Error).message})`);
  }
}
