/**
 * Trend kernel (SPEC §4): events of one name per time bucket, for the users of
 * one shard [userLo, userHi). Workers run it once per shard over the same
 * segments and the answer is the element-wise sum of the partials, which is
 * exact even for `unique` because shards hold disjoint users.
 *
 * Shape is decided per segment, then one tight loop runs:
 *   1. rows: a sealed segment holds the event's rows contiguous and sorted by
 *      (user, time), so the shard's rows are a range found by binary search;
 *      an active segment is scanned once into a row selection;
 *   2. filters: each filter is compiled against the segment's dictionary into a
 *      pass table and narrows the rows into (or within) the selection; a filter
 *      that passes every id is skipped, one that passes none skips the segment;
 *   3. counting: `total` per day/week/month is just the number of rows; `hour`
 *      adds one per row at its hour; `unique` marks each user with the bucket it
 *      was last counted in (an epoch mark, so nothing is cleared between queries).
 * Segments are visited in day order, so every segment of one bucket is visited
 * consecutively, and a mark equal to the current bucket means "already counted"
 * however many segments (sealed, active, several days of a week) hold the user.
 */
import type { SegmentView, ValueIdColumn } from "../segment-view.js";
import { hourMs, trendBucketOfDay, type TrendLayout } from "../buckets.js";
import { compileFilter, filterPassesNotSet, type FilterPlan } from "../filters.js";
import { EpochMarks, GrowableInt32, ScratchUint32 } from "./scratch.js";
import { segmentsByDay, sealedShardRows, type RowRange } from "./rows.js";

export type TrendMath = "total" | "unique";

export interface TrendPlan {
  /** Workspace event id; undefined when the name was never ingested (the answer is all zeros). */
  eventId: number | undefined;
  layout: TrendLayout;
  /** All must hold (AND). */
  filters: readonly FilterPlan[];
  math: TrendMath;
}

/** `unique`: the bucket (for hour: the day) each user was last counted in. */
const userMarks = new EpochMarks();
/** `unique` by hour: bit h is set when the user was counted in hour h of its marked day. */
const userHourMasks = new GrowableInt32();
const rowSelection = new ScratchUint32();
const shardRows: RowRange = { start: 0, end: 0 };

/** Counts per bucket (layout.bucketCount entries) for users in [userLo, userHi). */
export function trendPartial(segments: readonly SegmentView[], plan: TrendPlan, userLo: number, userHi: number): Float64Array {
  const layout = plan.layout;
  const counts = new Float64Array(layout.bucketCount);
  const eventId = plan.eventId;
  if (eventId === undefined || userLo >= userHi) return counts;

  const hourly = layout.groupBy === "hour";
  const unique = plan.math === "unique";
  const markBase = unique ? userMarks.claim(hourly ? layout.bucketCount / 24 : layout.bucketCount) : 0;
  const order = segmentsByDay(segments, layout.fromMs, layout.toMsExclusive);

  for (const segmentIndex of order) {
    const segment = segments[segmentIndex];
    const bucket = trendBucketOfDay(layout, segment.dayStartMs);

    // 1. The event's rows in the shard: [shardRows.start, shardRows.end), or selection[0, selectedCount).
    let selection = rowSelection.get(0);
    let selectedCount = -1;
    if (segment.eventRowStart !== undefined) {
      sealedShardRows(segment.eventRowStart, segment.userIds, eventId, userLo, userHi, shardRows);
      if (shardRows.start === shardRows.end) continue;
    } else {
      selection = rowSelection.get(segment.rowCount);
      selectedCount = selectActiveRows(segment.eventIds!, segment.userIds, segment.rowCount, eventId, userLo, userHi, selection);
      if (selectedCount === 0) continue;
    }

    // 2. Filters narrow the rows into the selection.
    let excluded = false;
    for (const filter of plan.filters) {
      const column = filter.keyId === undefined ? undefined : segment.property(filter.keyId);
      if (column === undefined) {
        // No row of this segment sets the property: every row answers as "not set".
        if (filterPassesNotSet(filter.op)) continue;
        excluded = true;
        break;
      }
      const compiled = compileFilter(column.texts, filter.op, filter.value);
      if (compiled.passingCount === compiled.passes.length) continue;
      if (compiled.passingCount === 0) {
        excluded = true;
        break;
      }
      if (selectedCount < 0) {
        selection = rowSelection.get(shardRows.end - shardRows.start);
        selectedCount = selectRange(compiled.passes, column.valueIds, shardRows.start, shardRows.end, selection);
      } else {
        selectedCount = selectAgain(compiled.passes, column.valueIds, selection, selectedCount);
      }
    }
    if (excluded || selectedCount === 0) continue;

    // 3. Count.
    const ranged = selectedCount < 0;
    if (!unique && !hourly) {
      counts[bucket] += ranged ? shardRows.end - shardRows.start : selectedCount;
    } else if (!unique) {
      if (ranged) countHoursInRange(counts, bucket, segment.timeOffsetMs, shardRows.start, shardRows.end);
      else countHoursInSelection(counts, bucket, segment.timeOffsetMs, selection, selectedCount);
    } else if (!hourly) {
      const mark = markBase + bucket;
      counts[bucket] += ranged
        ? countNewUsersInRange(segment.userIds, shardRows.start, shardRows.end, userLo, mark)
        : countNewUsersInSelection(segment.userIds, selection, selectedCount, userLo, mark);
    } else {
      const mark = markBase + bucket / 24;
      if (ranged) countNewUserHoursInRange(counts, bucket, segment.userIds, segment.timeOffsetMs, shardRows.start, shardRows.end, userLo, mark);
      else countNewUserHoursInSelection(counts, bucket, segment.userIds, segment.timeOffsetMs, selection, selectedCount, userLo, mark);
    }
  }
  return counts;
}

/** Sum of the shards' partials. */
export function mergeTrendPartials(partials: readonly Float64Array[]): Float64Array {
  return sumPartials(partials);
}

export function sumPartials(partials: readonly Float64Array[]): Float64Array {
  const total = new Float64Array(partials.length === 0 ? 0 : partials[0].length);
  for (const partial of partials) {
    if (partial.length !== total.length) throw new Error(`partial of length ${partial.length}, expected ${total.length}`);
    for (let index = 0; index < total.length; index++) total[index] += partial[index];
  }
  return total;
}

// ---------------------------------------------------------------------------
// Row selection

function selectActiveRows(
  eventIds: Uint32Array,
  userIds: Uint32Array,
  rowCount: number,
  eventId: number,
  userLo: number,
  userHi: number,
  selection: Uint32Array,
): number {
  let selectedCount = 0;
  for (let row = 0; row < rowCount; row++) {
    const user = userIds[row];
    if (eventIds[row] === eventId && user >= userLo && user < userHi) selection[selectedCount++] = row;
  }
  return selectedCount;
}

/** Rows of [start, end) that pass, written to selection; branch-free so mixed pass tables do not mispredict. */
function selectRange(passes: Uint8Array, valueIds: ValueIdColumn, start: number, end: number, selection: Uint32Array): number {
  let selectedCount = 0;
  for (let row = start; row < end; row++) {
    selection[selectedCount] = row;
    selectedCount += passes[valueIds[row]];
  }
  return selectedCount;
}

/** Keeps the selected rows that pass, in order, in place. */
function selectAgain(passes: Uint8Array, valueIds: ValueIdColumn, selection: Uint32Array, selectedCount: number): number {
  let keptCount = 0;
  for (let index = 0; index < selectedCount; index++) {
    const row = selection[index];
    selection[keptCount] = row;
    keptCount += passes[valueIds[row]];
  }
  return keptCount;
}

// ---------------------------------------------------------------------------
// Counting

function countHoursInRange(counts: Float64Array, dayBucket: number, timeOffsetMs: Uint32Array, start: number, end: number): void {
  for (let row = start; row < end; row++) counts[dayBucket + ((timeOffsetMs[row] / hourMs) | 0)]++;
}

function countHoursInSelection(
  counts: Float64Array,
  dayBucket: number,
  timeOffsetMs: Uint32Array,
  selection: Uint32Array,
  selectedCount: number,
): void {
  for (let index = 0; index < selectedCount; index++) counts[dayBucket + ((timeOffsetMs[selection[index]] / hourMs) | 0)]++;
}

/** Users of the rows not yet marked with `mark`; sealed rows come grouped by user, so repeats are skipped cheaply. */
function countNewUsersInRange(userIds: Uint32Array, start: number, end: number, userLo: number, mark: number): number {
  let marks = userMarks.values;
  let newCount = 0;
  let previousUser = -1;
  for (let row = start; row < end; row++) {
    const user = userIds[row];
    if (user === previousUser) continue;
    previousUser = user;
    const slot = user - userLo;
    if (slot >= marks.length) marks = userMarks.grow(slot + 1);
    if (marks[slot] !== mark) {
      marks[slot] = mark;
      newCount++;
    }
  }
  return newCount;
}

function countNewUsersInSelection(userIds: Uint32Array, selection: Uint32Array, selectedCount: number, userLo: number, mark: number): number {
  let marks = userMarks.values;
  let newCount = 0;
  let previousUser = -1;
  for (let index = 0; index < selectedCount; index++) {
    const user = userIds[selection[index]];
    if (user === previousUser) continue;
    previousUser = user;
    const slot = user - userLo;
    if (slot >= marks.length) marks = userMarks.grow(slot + 1);
    if (marks[slot] !== mark) {
      marks[slot] = mark;
      newCount++;
    }
  }
  return newCount;
}

/**
 * Distinct (user, hour) pairs of one day. The mark says which day a user's hour
 * mask belongs to; a stale mark means an empty mask. Works in any row order,
 * so active segments and several segments of one day need no sorting.
 */
function countNewUserHoursInRange(
  counts: Float64Array,
  dayBucket: number,
  userIds: Uint32Array,
  timeOffsetMs: Uint32Array,
  start: number,
  end: number,
  userLo: number,
  mark: number,
): void {
  let marks = userMarks.values;
  let masks = userHourMasks.values;
  for (let row = start; row < end; row++) {
    const slot = userIds[row] - userLo;
    if (slot >= marks.length) marks = userMarks.grow(slot + 1);
    if (slot >= masks.length) masks = userHourMasks.grow(slot + 1);
    const hour = (timeOffsetMs[row] / hourMs) | 0;
    const bit = 1 << hour;
    if (marks[slot] !== mark) {
      marks[slot] = mark;
      masks[slot] = bit;
      counts[dayBucket + hour]++;
    } else if ((masks[slot] & bit) === 0) {
      masks[slot] |= bit;
      counts[dayBucket + hour]++;
    }
  }
}

function countNewUserHoursInSelection(
  counts: Float64Array,
  dayBucket: number,
  userIds: Uint32Array,
  timeOffsetMs: Uint32Array,
  selection: Uint32Array,
  selectedCount: number,
  userLo: number,
  mark: number,
): void {
  let marks = userMarks.values;
  let masks = userHourMasks.values;
  for (let index = 0; index < selectedCount; index++) {
    const row = selection[index];
    const slot = userIds[row] - userLo;
    if (slot >= marks.length) marks = userMarks.grow(slot + 1);
    if (slot >= masks.length) masks = userHourMasks.grow(slot + 1);
    const hour = (timeOffsetMs[row] / hourMs) | 0;
    const bit = 1 << hour;
    if (marks[slot] !== mark) {
      marks[slot] = mark;
      masks[slot] = bit;
      counts[dayBucket + hour]++;
    } else if ((masks[slot] & bit) === 0) {
      masks[slot] |= bit;
      counts[dayBucket + hour]++;
    }
  }
}
