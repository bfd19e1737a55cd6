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
 * The seal writes the index of a segment's most used keys into the segment
 * (storage/value-counts-index.ts); every thread reads those in place. Other
 * columns get theirs on the first count over them (one pass, about the cost
 * of the scan it replaces), kept while the column is: the index is held
 * weakly under the column's array, which lives in the worker's sealed-view
 * cache (segment-views.ts). Its size is at most a quarter of the column's
 * rows in bytes (chunks grow with the column's dictionary; event marks are
 * kept only within an eighth), and columns of more than
 * `valueCountsValuesMax` values get none: they are scanned.
 */
import type { ValueIdColumn } from "../segment-view.js";
import { buildValueCounts, segmentValueCountMarks, valueCountsValuesMax, type ValueCounts } from "../../storage/value-counts-index.js";
import { lowerBoundUser } from "./rows.js";

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

/** A column's index read from its segment (segment-views.ts): valueCountsOf answers it instead of building one. */
export function presetValueCounts(valueIds: ValueIdColumn, counts: ValueCounts): void {
  built.set(valueIds, counts);
}

/** The column's index when its segment stored it or a query already built it; never builds one. */
export function valueCountsKept(valueIds: ValueIdColumn, valueCount: number): ValueCounts | undefined {
  const counts = built.get(valueIds);
  return counts === undefined || counts === null || counts.valueCount !== valueCount ? undefined : counts;
}

/** The column's index, built at first use; undefined when its dictionary is too large to index. `runStarts`: the segment's event runs. */
export function valueCountsOf(valueIds: ValueIdColumn, valueCount: number, runStarts: ArrayLike<number>): ValueCounts | undefined {
  let counts = built.get(valueIds);
  if (counts === undefined || (counts !== null && counts.valueCount !== valueCount)) {
    counts = valueCount > valueCountsValuesMax ? null : buildValueCounts(valueIds, valueCount, segmentValueCountMarks(valueIds.length, valueCount, runStarts));
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
