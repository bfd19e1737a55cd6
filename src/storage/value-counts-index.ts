/**
 * Value counts of a sealed segment's property column: running counts of its
 * value ids at marked rows (every `chunkRowsFor` rows and, when it costs
 * little, the start of every event's run), so how many rows of a range hold
 * each value is read between marks instead of row by row. The seal writes
 * them into the segment for its most used keys (segment-writer.ts); queries
 * build the same index for other columns at first use
 * (query/kernels/value-counts.ts, which reads them).
 */
import { directoryFields, DirectoryField, findRecord, valueCountsFields, ValueCountsField, type ValueIdArray } from "./segment-layout.js";

/** A dictionary this large makes chunks so long that the end scans cost most of a full one. */
export const valueCountsValuesMax = 4096;
/** Shortest chunk: below it the per-chunk subtractions cost about what reading the rows does. */
export const chunkRowsMin = 1024;

export interface ValueCounts {
  /** Value ids 0 … valueCount - 1 (0: not set). */
  valueCount: number;
  /** Ascending row numbers, from 0. */
  marks: Uint32Array;
  /** Entry (mark index · valueCount + id): rows in [0, marks[mark index]) holding id. */
  prefix: Uint32Array;
}

/** Rows per chunk for a dictionary of `valueCount` ids: the chunk marks stay within rows / 8 bytes. */
export function chunkRowsFor(valueCount: number, minimum = chunkRowsMin): number {
  let rows = minimum;
  while (rows < valueCount * 32) rows *= 2;
  return rows;
}

/** Marks every chunkRows rows, plus `runStarts` (ascending) when they fit within rows / 8 bytes of counts. */
export function valueCountMarks(rowCount: number, valueCount: number, chunkRows: number, runStarts: ArrayLike<number>): Uint32Array {
  const marks: number[] = [];
  for (let row = 0; row <= rowCount; row += chunkRows) marks.push(row);
  if (runStarts.length * valueCount * 4 <= rowCount / 8) {
    for (let index = 0; index < runStarts.length; index++) if (runStarts[index] <= rowCount) marks.push(runStarts[index]);
  }
  const sorted = Uint32Array.from(marks).sort();
  let kept = 0;
  for (let index = 0; index < sorted.length; index++) if (kept === 0 || sorted[index] !== sorted[kept - 1]) sorted[kept++] = sorted[index];
  return sorted.slice(0, kept);
}

/** The index of `valueIds` at `marks`; its prefix is written into `prefix` when given (a segment's memory). */
export function buildValueCounts(valueIds: ValueIdArray, valueCount: number, marks: Uint32Array, prefix: Uint32Array = new Uint32Array(marks.length * valueCount)): ValueCounts {
  const running = new Uint32Array(valueCount);
  let row = 0;
  for (let mark = 0; mark < marks.length; mark++) {
    for (const end = marks[mark]; row < end; row++) running[valueIds[row]]++;
    prefix.set(running, mark * valueCount);
  }
  return { valueCount, marks, prefix };
}

/** A segment column's index as the seal writes it and a query builds it when the segment has none: the same marks, so the same counts. */
export function segmentValueCountMarks(rowCount: number, valueCount: number, eventRowStart: ArrayLike<number>): Uint32Array {
  return valueCountMarks(rowCount, valueCount, chunkRowsFor(valueCount), eventRowStart);
}

/** Stored counts per segment at most this many bytes per row: each indexed key costs ~0.1–0.25 B per row (a 25-value key ~0.12). */
const storedBytesPerRowMax = 1;

/** A key set on fewer than one row in this many gets no stored counts: its rows are few enough to scan. */
const storedRowShareMin = 64;

/** Where the seal puts each indexed key's counts (its layout fields) and the marks it counts at. */
export interface StoredValueCountsPlan {
  keys: number[];
  marks: Uint32Array[];
  /** Each indexed key's place in the property directory. */
  directoryIndexes: number[];
  /** Byte end of the span in the segment's memory. */
  end: number;
}

/**
 * Chooses the keys whose counts the seal stores — keys of at most
 * valueCountsValuesMax ids set on at least 1/storedRowShareMin of the rows,
 * the most set first, within storedBytesPerRowMax — and places them from
 * byte `start` (8-aligned) of the segment's memory.
 */
export function planStoredValueCounts(directory: Float64Array, keyCount: number, rowCount: number, eventRowStart: Uint32Array, start: number): StoredValueCountsPlan {
  const candidates: number[] = [];
  for (let key = 0; key < keyCount; key++) {
    const base = key * directoryFields;
    if (directory[base + DirectoryField.EntryCount] * storedRowShareMin >= rowCount && directory[base + DirectoryField.ValueCount] + 1 <= valueCountsValuesMax) candidates.push(key);
  }
  candidates.sort((a, b) => directory[b * directoryFields + DirectoryField.EntryCount] - directory[a * directoryFields + DirectoryField.EntryCount] || a - b);
  const chosen: Array<{ key: number; valueCount: number; marks: Uint32Array }> = [];
  let bytes = 0;
  for (const key of candidates) {
    const valueCount = directory[key * directoryFields + DirectoryField.ValueCount] + 1;
    const marks = segmentValueCountMarks(rowCount, valueCount, eventRowStart);
    const keyBytes = 4 * marks.length * (1 + valueCount);
    if (bytes + keyBytes > rowCount * storedBytesPerRowMax) continue;
    bytes += keyBytes;
    chosen.push({ key, valueCount, marks });
  }
  chosen.sort((a, b) => directory[a.key * directoryFields + DirectoryField.KeyId] - directory[b.key * directoryFields + DirectoryField.KeyId]);
  const keys: number[] = [];
  let offset = start;
  for (const { key, valueCount, marks } of chosen) {
    keys.push(directory[key * directoryFields + DirectoryField.KeyId], valueCount, marks.length, offset);
    offset += 4 * marks.length * (1 + valueCount);
  }
  return { keys, marks: chosen.map((entry) => entry.marks), directoryIndexes: chosen.map((entry) => entry.key), end: offset };
}

/** Writes the planned counts into the segment's memory; `valueIdsAt` gives the dense value ids of a directory entry. */
export function writeStoredValueCounts(plan: StoredValueCountsPlan, memory: SharedArrayBuffer, valueIdsAt: (directoryIndex: number) => ValueIdArray): void {
  for (let index = 0; index < plan.marks.length; index++) {
    const { valueCount, marks, prefix } = storedValueCountsAt(plan.keys, index, memory);
    marks.set(plan.marks[index]);
    buildValueCounts(valueIdsAt(plan.directoryIndexes[index]), valueCount, marks, prefix);
  }
}

/** The `index`-th stored key's counts, viewed in the segment's memory. */
export function storedValueCountsAt(keys: readonly number[], index: number, memory: SharedArrayBuffer): ValueCounts & { keyId: number } {
  const base = index * valueCountsFields;
  const valueCount = keys[base + ValueCountsField.ValueCount];
  const markCount = keys[base + ValueCountsField.MarkCount];
  const marksOffset = keys[base + ValueCountsField.MarksOffset];
  return {
    keyId: keys[base + ValueCountsField.KeyId],
    valueCount,
    marks: new Uint32Array(memory, marksOffset, markCount),
    prefix: new Uint32Array(memory, marksOffset + 4 * markCount, markCount * valueCount),
  };
}

/** The index of `keyId`'s stored counts in `keys` (sorted by key id), or -1. */
export function storedValueCountsIndex(keys: readonly number[], keyId: number): number {
  return findRecord(keys, valueCountsFields, keys.length / valueCountsFields, ValueCountsField.KeyId, keyId);
}

/** Whether every stored key's marks and counts lie inside the span its layout gives them (checked at load, as row counts are). */
export function storedValueCountsFit(keys: readonly number[], span: { offset: number; bytes: number }): boolean {
  if (keys.length % valueCountsFields !== 0) return false;
  for (let base = 0; base < keys.length; base += valueCountsFields) {
    const start = keys[base + ValueCountsField.MarksOffset];
    const end = start + 4 * keys[base + ValueCountsField.MarkCount] * (1 + keys[base + ValueCountsField.ValueCount]);
    if (!(start >= span.offset && end <= span.offset + span.bytes && start % 4 === 0)) return false;
  }
  return true;
}
