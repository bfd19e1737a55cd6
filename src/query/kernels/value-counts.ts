/**
 * Running counts of a sealed property column's value ids at marked rows:
 * how many rows of [start, end) hold a value a filter passes is then read
 * between the marks inside the range (one subtraction per passing value) and
 * only the rows before the first mark and after the last one are scanned.
 * Marks are every `chunkRows` rows and, when it costs little, the start of
 * every event's run, so a whole run (a query over every user) scans nothing.
 * A filtered `total` trend over a sealed segment costs what an unfiltered
 * one does, whatever the rows' count; a sum, average, minimum or maximum of
 * a property over whole days (trend-columns.ts) reads the counts of each of
 * its values the same way.
 *
 * Built on the first count over a column (one pass over it, about the cost
 * of the scan it replaces) and kept while the column is: the index is held
 * weakly under the column's array, which lives in the worker's sealed-view
 * cache (segment-views.ts). Its size is at most a quarter of the column's
 * rows in bytes (chunks grow with the column's dictionary; event marks are
 * kept only within an eighth), and columns of more than
 * `valueCountsValuesMax` values get none: they are scanned.
 */
import type { ValueIdColumn } from "../segment-view.js";
import { lowerBoundUser } from "./rows.js";

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

export function buildValueCounts(valueIds: ValueIdColumn, valueCount: number, marks: Uint32Array): ValueCounts {
  const prefix = new Uint32Array(marks.length * valueCount);
  const running = new Uint32Array(valueCount);
  let row = 0;
  for (let mark = 0; mark < marks.length; mark++) {
    for (const end = marks[mark]; row < end; row++) running[valueIds[row]]++;
    prefix.set(running, mark * valueCount);
  }
  return { valueCount, marks, prefix };
}

/** Rows counted per value id (`counts[at + id]`, ids below `valueCount`) whose value `passes`. */
export function countPassingValues(counts: Uint32Array, passes: Uint8Array, at = 0, valueCount = counts.length): number {
  let total = 0;
  for (let id = 0; id < valueCount; id++) if (passes[id] !== 0) total += counts[at + id];
  return total;
}

/** Rows of [marks[low], marks[high]) whose value `passes`. */
export function countPassingBetweenMarks(counts: ValueCounts, passes: Uint8Array, low: number, high: number): number {
  const { prefix, valueCount } = counts;
  return countPassingValues(prefix, passes, high * valueCount, valueCount) - countPassingValues(prefix, passes, low * valueCount, valueCount);
}

const built = new WeakMap<ValueIdColumn, ValueCounts | null>();

/** The column's index, built at first use; undefined when its dictionary is too large to index. `runStarts`: the segment's event runs. */
export function valueCountsOf(valueIds: ValueIdColumn, valueCount: number, runStarts: ArrayLike<number>): ValueCounts | undefined {
  let counts = built.get(valueIds);
  if (counts === undefined || (counts !== null && counts.valueCount !== valueCount)) {
    counts = valueCount > valueCountsValuesMax ? null : buildValueCounts(valueIds, valueCount, valueCountMarks(valueIds.length, valueCount, chunkRowsFor(valueCount), runStarts));
    built.set(valueIds, counts);
  }
  return counts ?? undefined;
}

/**
 * Rows of [start, end) whose value passes: between the first and last marks
 * inside the range from the index, the rows outside them by `scan` (the
 * caller's row loop).
 */
export function countPassingIndexed(
  counts: ValueCounts,
  passes: Uint8Array,
  start: number,
  end: number,
  scan: (passes: Uint8Array, start: number, end: number) => number,
): number {
  const { low, high } = innerMarks(counts.marks, start, end);
  if (low >= high) return scan(passes, start, end);
  return scan(passes, start, counts.marks[low]) + countPassingBetweenMarks(counts, passes, low, high) + scan(passes, counts.marks[high], end);
}

/**
 * How many rows of [start, end) hold each value id, into `into[0 … valueCount)`:
 * between the first and last marks inside the range from the index, the rows
 * outside them read one by one.
 */
export function countValuesIndexed(counts: ValueCounts, valueIds: ValueIdColumn, start: number, end: number, into: Float64Array): void {
  const { marks, prefix, valueCount } = counts;
  into.fill(0, 0, valueCount);
  const { low, high } = innerMarks(marks, start, end);
  if (low >= high) return addRowValues(valueIds, start, end, into);
  addRowValues(valueIds, start, marks[low], into);
  for (let id = 0, lowAt = low * valueCount, highAt = high * valueCount; id < valueCount; id++) into[id] += prefix[highAt + id] - prefix[lowAt + id];
  addRowValues(valueIds, marks[high], end, into);
}

function addRowValues(valueIds: ValueIdColumn, start: number, end: number, into: Float64Array): void {
  for (let row = start; row < end; row++) into[valueIds[row]]++;
}

/** Reused: the indexes innerMarks answers. */
const inner = { low: 0, high: 0 };

/** The first mark at or after start (`low`) and the last at or before end (`high`); none lies between them when low ≥ high. */
function innerMarks(marks: Uint32Array, start: number, end: number): { low: number; high: number } {
  // lowerBoundUser searches any ascending u32s.
  inner.low = lowerBoundUser(marks, 0, marks.length, start);
  inner.high = lowerBoundUser(marks, 0, marks.length, end + 1) - 1;
  return inner;
}
