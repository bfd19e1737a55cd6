/**
 * Running counts of a sealed property column's value ids, per chunk of rows:
 * how many rows of [start, end) hold a value a filter passes is then read
 * per chunk (one subtraction per passing value) and only the two partial
 * chunks at the ends are scanned. A filtered `total` trend over a sealed
 * segment costs what an unfiltered one does, whatever the rows' count.
 *
 * Built on the first count over a column (one pass over it, about the cost
 * of the scan it replaces) and kept while the column is: the index is held
 * weakly under the column's array, which lives in the worker's sealed-view
 * cache (segment-views.ts). Its size is at most an eighth of the column's
 * rows in bytes (chunks grow with the column's dictionary), and columns of
 * more than `valueCountsValuesMax` values get none: they are scanned.
 */
import type { ValueIdColumn } from "../segment-view.js";

/** A dictionary this large makes chunks so long that the end scans cost most of a full one. */
export const valueCountsValuesMax = 4096;
/** Shortest chunk: below it the per-chunk subtractions cost about what reading the rows does. */
export const chunkRowsMin = 1024;

export interface ValueCounts {
  chunkRows: number;
  /** Value ids 0 … valueCount - 1 (0: not set). */
  valueCount: number;
  /** Entry (chunk · valueCount + id): rows in [0, chunk · chunkRows) holding id; chunk 0 … wholeChunks. */
  prefix: Uint32Array;
  wholeChunks: number;
}

/** Rows per chunk for a dictionary of `valueCount` ids: the index stays within rows / 8 bytes. */
export function chunkRowsFor(valueCount: number, minimum = chunkRowsMin): number {
  let rows = minimum;
  while (rows < valueCount * 32) rows *= 2;
  return rows;
}

export function buildValueCounts(valueIds: ValueIdColumn, valueCount: number, chunkRows: number): ValueCounts {
  const wholeChunks = Math.floor(valueIds.length / chunkRows);
  const prefix = new Uint32Array((wholeChunks + 1) * valueCount);
  const running = new Uint32Array(valueCount);
  for (let chunk = 0; chunk < wholeChunks; chunk++) {
    const end = (chunk + 1) * chunkRows;
    for (let row = chunk * chunkRows; row < end; row++) running[valueIds[row]]++;
    prefix.set(running, (chunk + 1) * valueCount);
  }
  return { chunkRows, valueCount, prefix, wholeChunks };
}

/** Rows of [firstChunk · chunkRows, lastChunk · chunkRows) whose value `passes`; firstChunk ≤ lastChunk ≤ wholeChunks. */
export function countPassingChunks(counts: ValueCounts, passes: Uint8Array, firstChunk: number, lastChunk: number): number {
  const { prefix, valueCount } = counts;
  const low = firstChunk * valueCount;
  const high = lastChunk * valueCount;
  let total = 0;
  for (let id = 0; id < valueCount; id++) if (passes[id] !== 0) total += prefix[high + id] - prefix[low + id];
  return total;
}

const built = new WeakMap<ValueIdColumn, ValueCounts | null>();

/** The column's index, built at first use; undefined when its dictionary is too large to index. */
export function valueCountsOf(valueIds: ValueIdColumn, valueCount: number): ValueCounts | undefined {
  let counts = built.get(valueIds);
  if (counts === undefined || (counts !== null && counts.valueCount !== valueCount)) {
    counts = valueCount > valueCountsValuesMax ? null : buildValueCounts(valueIds, valueCount, chunkRowsFor(valueCount));
    built.set(valueIds, counts);
  }
  return counts ?? undefined;
}

/**
 * Rows of [start, end) whose value passes: whole chunks from the index, the
 * partial chunks at either end by `scan` (the caller's row loop).
 */
export function countPassingIndexed(
  counts: ValueCounts,
  passes: Uint8Array,
  start: number,
  end: number,
  scan: (passes: Uint8Array, start: number, end: number) => number,
): number {
  const { chunkRows } = counts;
  const firstChunk = Math.ceil(start / chunkRows);
  const lastChunk = Math.min(Math.floor(end / chunkRows), counts.wholeChunks);
  if (lastChunk <= firstChunk) return scan(passes, start, end);
  return scan(passes, start, firstChunk * chunkRows) + countPassingChunks(counts, passes, firstChunk, lastChunk) + scan(passes, lastChunk * chunkRows, end);
}
