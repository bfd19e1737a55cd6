/**
 * Trend of SPEC §7 straight from the segments' columns, without gathering
 * rows (the fast path of trend-series.ts, which stays the reference shape).
 The scan (column-scan.ts) visits each user's rows
 * in bucket order, so a per-user mark "counted in bucket b" needs no
 * clearing, in any row order within a bucket (sealed or active segments).
 *
 * A breakdown value is a task-wide id read through a per-segment table (text
 * id → value id). Per (value, bucket) the kernel keeps its cells directly;
 * `unique` keeps per user a bit set of the values seen in the current bucket
 * and one of the values seen over the range (the rank). The "other" series
 * of `unique` and `avg_per_user` counts users across the left-out values, so
 * it takes a second scan once the ranking is known; the other maths add up
 * the left-out values' cells.
 *
 * Covered: any math, day/week/month buckets in any zone (days cut into at
 * most a few parts, column-scan.ts), at most `valueWordsMax` × 32 breakdown
 * values. Anything else answers undefined and runs through the
 * gathered rows (event-rows.ts, trend-series.ts).
 *
 * A sum, average, minimum or maximum without breakdown or filters reads no
 * rows of a day that lies whole in one bucket: how many of the event's rows
 * hold each value of the property comes from a sealed column's value counts
 * (value-counts.ts) or an active segment's index (active-index.ts, when the
 * task covers every user), and a value's number counts that many times. A
 * sealed day's totals are kept per column and row range for the next query.
 */
import { dayMs } from "../buckets.js";
import type { PropertyColumn, SegmentView } from "../segment-view.js";
import { blockUsersDefault, dayParts, planColumnScan, runColumnScan, type BatchVisit, type RowRepeats } from "./column-scan.js";
import { numbersOf } from "../filters.js";
import type { GatherPlan } from "./event-rows.js";
import { rankSeries, valueOf } from "./series.js";
import type { BucketValues, TrendSeriesAnswer, TrendSeriesPlan } from "./trend-series.js";
import { sealedShardRows, type RowRange } from "./rows.js";
import type { ValueCounts } from "../../storage/value-counts-index.js";
import { countValuesIndexed, valueCountsKept, valueCountsOf } from "./value-counts.js";

/** Per-user value bit sets of this many 32-bit words at most (128 values): `unique` keeps two arrays of users × words. */
const valueWordsMax = 4;

export function trendColumns(segments: readonly SegmentView[], gather: GatherPlan, plan: TrendSeriesPlan, userLo: number, userHi: number, blockUsers = blockUsersDefault): TrendSeriesAnswer | undefined {
  return trendFromColumns(segments, gather, plan, userLo, userHi, blockUsers, true);
}

/**
 * The same answer when every day is read from value counts or is a short
 * run of rows (a numeric math without breakdown or filters, every segment
 * sealed), building no counts; undefined otherwise. Cheap enough for the
 * thread that received the query: once a day's totals are kept, a few
 * hundred additions.
 */
export function trendFromCountsOnly(segments: readonly SegmentView[], gather: GatherPlan, plan: TrendSeriesPlan, userLo: number, userHi: number): TrendSeriesAnswer | undefined {
  return trendFromColumns(segments, gather, plan, userLo, userHi, blockUsersDefault, false);
}

function trendFromColumns(segments: readonly SegmentView[], gather: GatherPlan, plan: TrendSeriesPlan, userLo: number, userHi: number, blockUsers: number, rowsAllowed: boolean): TrendSeriesAnswer | undefined {
  const bucketCount = plan.startsMs.length - 1;
  // Only the distinct maths keep state per user: the others read each day in one run, not one per block.
  const distinct = plan.math === "unique" || plan.math === "avg_per_user";
  const counted = countedDays(segments, gather, plan, userLo, userHi, rowsAllowed);
  if (!rowsAllowed && (counted === undefined || counted.rest.length > 0 || counted.days.some((day) => day.activeCounts !== undefined))) return undefined;
  const scan = planColumnScan(counted?.rest ?? segments, gather, plan.startsMs, userLo, userHi, distinct ? blockUsers : Math.max(1, userHi - userLo));
  if (scan === undefined) return undefined;
  const valueTexts = scan.valueTexts;
  const breakdown = plan.breakdownLimit !== undefined;
  const valueCount = valueTexts.length;
  const words = breakdown ? (valueCount + 31) >>> 5 : 1;
  if (words > valueWordsMax) return undefined;
  const scanAll = (visit: BatchVisit, repeats: RowRepeats) => runColumnScan(scan, visit, repeats);

  const slots = userHi - userLo;
  const cells = (breakdown ? valueCount : 0) * bucketCount;
  const all = new Float64Array(bucketCount);
  const valueCells = new Float64Array(cells);
  const weights = new Float64Array(breakdown ? valueCount : 0);
  const math = plan.math;
  const numeric = math === "sum" || math === "avg" || math === "min" || math === "max";

  // Event counts (total, avg_per_user's numerator) or, for the numeric maths, counted numbers.
  const events = new Float64Array(bucketCount);
  const valueEvents = new Float64Array(cells);
  const sums = new Float64Array(numeric ? bucketCount : 0);
  const valueSums = new Float64Array(numeric ? cells : 0);
  const extremes = new Float64Array(numeric ? bucketCount : 0).fill(math === "min" ? Infinity : -Infinity);
  const valueExtremes = new Float64Array(numeric ? cells : 0).fill(math === "min" ? Infinity : -Infinity);
  const better = math === "min" ? (left: number, right: number) => left < right : (left: number, right: number) => left > right;

  const marks = new Int32Array(distinct ? slots : 0).fill(-1);
  const bucketValues = new Uint32Array(distinct && breakdown ? slots * words : 0);
  const rangeValues = new Uint32Array(distinct && breakdown ? slots * words : 0);

  for (const day of counted?.days ?? []) {
    let totals: NumberTotals;
    if (day.activeCounts !== undefined) {
      // An active day: the index's counts of every row the task sees, ids past the column's dictionary unseen by it.
      totals = numberTotals(day.column, day.activeCounts, Math.min(day.activeCounts.length, day.column.texts.length), activeTotals);
    } else {
      sealedShardRows(day.segment.eventRowStart!, day.segment.userIds, gather.references[0].eventId!, userLo, userHi, shardRows);
      if (shardRows.start === shardRows.end) continue;
      totals = sealedNumberTotals(day.column, day.counts, shardRows.start, shardRows.end);
    }
    if (totals.rows === 0) continue;
    const bucket = day.bucket;
    events[bucket] += totals.rows;
    sums[bucket] += totals.sum;
    if (better(math === "min" ? totals.min : totals.max, extremes[bucket])) extremes[bucket] = math === "min" ? totals.min : totals.max;
  }

  // One visitor per shape, chosen once: the row loop does not branch on the query.
  const countNumbers: BatchVisit = ({ count, values, numbers, buckets }) => {
    for (let index = 0; index < count; index++) {
      const value = values[index];
      const number = numbers[index];
      const bucket = buckets[index];
      const cell = value * bucketCount + bucket;
      if (breakdown) weights[value]++;
      if (Number.isNaN(number)) continue;
      events[bucket]++;
      sums[bucket] += number;
      if (better(number, extremes[bucket])) extremes[bucket] = number;
      if (breakdown) {
        valueEvents[cell]++;
        valueSums[cell] += number;
        if (better(number, valueExtremes[cell])) valueExtremes[cell] = number;
      }
    }
  };
  const countEvents: BatchVisit = ({ count, values, buckets }) => {
    for (let index = 0; index < count; index++) {
      const bucket = buckets[index];
      events[bucket]++;
      if (breakdown) {
        const value = values[index];
        weights[value]++;
        valueEvents[value * bucketCount + bucket]++;
      }
    }
  };
  const countUsers: BatchVisit = ({ count, slots, buckets }) => {
    for (let index = 0; index < count; index++) {
      const slot = slots[index];
      const bucket = buckets[index];
      events[bucket]++;
      if (marks[slot] !== bucket) {
        marks[slot] = bucket;
        all[bucket]++;
      }
    }
  };
  const rankByUsers = math === "unique";
  // avg_per_user also counts events; unique ranks by users, counted from rangeValues after the scan.
  const countsEvents = !rankByUsers;
  const countValueUsers: BatchVisit = ({ count, slots, values, buckets }) => {
    for (let index = 0; index < count; index++) {
      const slot = slots[index];
      const value = values[index];
      const bucket = buckets[index];
      const cell = value * bucketCount + bucket;
      if (countsEvents) {
        events[bucket]++;
        valueEvents[cell]++;
      }
      const base = slot * words;
      if (marks[slot] !== bucket) {
        marks[slot] = bucket;
        all[bucket]++;
        for (let word = 0; word < words; word++) bucketValues[base + word] = 0;
      }
      const word = base + (value >>> 5);
      const shift = value & 31;
      // Without branches: a new bit adds 1 to its cell (the bits' difference shifted down), a known one 0.
      const before = bucketValues[word];
      const after = before | (1 << shift);
      bucketValues[word] = after;
      valueCells[cell] += (after ^ before) >>> shift;
      rangeValues[word] |= 1 << shift;
    }
  };
  // Unique counts users: a row that repeats the previous one's user, bucket and value adds nothing.
  scanAll(numeric ? countNumbers : !distinct ? countEvents : breakdown ? countValueUsers : countUsers, math === "unique" ? "skip" : "visit");
  if (rankByUsers && breakdown) {
    for (let word = 0; word < rangeValues.length; word++) {
      let bits = rangeValues[word];
      while (bits !== 0) {
        const lowest = bits & -bits;
        weights[(word % words) * 32 + 31 - Math.clz32(lowest)]++;
        bits ^= lowest;
      }
    }
  }
  if (math === "avg_per_user" && breakdown) {
    // Ranked by events, like every math but unique.
    for (let value = 0; value < valueCount; value++) for (let bucket = 0; bucket < bucketCount; bucket++) weights[value] += valueEvents[value * bucketCount + bucket];
  }

  const finish = (users: ArrayLike<number>, counted: ArrayLike<number>, sumsOf: ArrayLike<number>, extremesOf: ArrayLike<number>, at: number): BucketValues => {
    const values: BucketValues = new Array(bucketCount);
    for (let bucket = 0; bucket < bucketCount; bucket++) {
      const cell = at + bucket;
      switch (math) {
        case "total":
          values[bucket] = counted[cell];
          break;
        case "unique":
          values[bucket] = users[cell];
          break;
        case "avg_per_user":
          values[bucket] = users[cell] === 0 ? 0 : counted[cell] / users[cell];
          break;
        case "sum":
          values[bucket] = sumsOf[cell];
          break;
        case "avg":
          values[bucket] = counted[cell] === 0 ? null : sumsOf[cell] / counted[cell];
          break;
        case "min":
        case "max":
          values[bucket] = counted[cell] === 0 ? null : extremesOf[cell];
          break;
      }
    }
    return values;
  };
  const values = finish(all, events, sums, extremes, 0);
  if (!breakdown) return { values, series: undefined, other: undefined };

  const present = new Uint8Array(valueCount);
  for (let value = 0; value < valueCount; value++) present[value] = weights[value] > 0 ? 1 : 0;
  const ranked = rankSeries(weights, present, valueTexts, plan.breakdownLimit!);
  const series = ranked.listed.map((value) => ({
    value: valueOf(valueTexts, value),
    values: finish(valueCells, valueEvents, valueSums, valueExtremes, value * bucketCount),
    weight: weights[value],
  }));
  if (!ranked.hasOther) return { values, series, other: undefined };

  // "other": every left-out value together.
  const otherUsers = new Float64Array(bucketCount);
  const otherEvents = new Float64Array(bucketCount);
  const otherSums = new Float64Array(bucketCount);
  const otherExtremes = new Float64Array(bucketCount).fill(math === "min" ? Infinity : -Infinity);
  const left = (value: number) => present[value] === 1 && ranked.groupOfValue[value] === ranked.otherGroup;
  for (let value = 0; value < valueCount; value++) {
    if (!left(value)) continue;
    for (let bucket = 0; bucket < bucketCount; bucket++) {
      const cell = value * bucketCount + bucket;
      otherEvents[bucket] += valueEvents[cell];
      if (numeric) {
        otherSums[bucket] += valueSums[cell];
        if (better(valueExtremes[cell], otherExtremes[bucket])) otherExtremes[bucket] = valueExtremes[cell];
      }
    }
  }
  if (distinct) {
    // A user with two left-out values counts once: a second scan, marks reused with buckets shifted past the first scan's.
    const isOther = new Uint8Array(valueCount);
    for (let value = 0; value < valueCount; value++) isOther[value] = left(value) ? 1 : 0;
    scanAll(({ count, slots, values, buckets }) => {
      for (let index = 0; index < count; index++) {
        const slot = slots[index];
        const bucket = buckets[index];
        if (isOther[values[index]] === 0 || marks[slot] === bucketCount + bucket) continue;
        marks[slot] = bucketCount + bucket;
        otherUsers[bucket]++;
      }
    }, "skip");
  }
  return { values, series, other: finish(otherUsers, otherEvents, otherSums, otherExtremes, 0) };
}

const shardRows: RowRange = { start: 0, end: 0 };
let valueRows = new Float64Array(0);

/** The rows of a range whose property is a finite number, and their sum, minimum and maximum. */
interface NumberTotals {
  rows: number;
  sum: number;
  min: number;
  max: number;
}

const activeTotals: NumberTotals = { rows: 0, sum: 0, min: Infinity, max: -Infinity };

/** Totals over `rowsOfValue[1, valueCount)`, the rows holding each value id of `column`, into `into`. */
function numberTotals(column: PropertyColumn, rowsOfValue: ArrayLike<number>, valueCount: number, into: NumberTotals): NumberTotals {
  const numbers = numbersOf(column);
  into.rows = 0;
  into.sum = 0;
  into.min = Infinity;
  into.max = -Infinity;
  for (let id = 1; id < valueCount; id++) {
    const rows = rowsOfValue[id];
    const number = numbers[id];
    if (rows === 0 || Number.isNaN(number)) continue;
    into.rows += rows;
    into.sum += rows * number;
    if (number < into.min) into.min = number;
    if (number > into.max) into.max = number;
  }
  return into;
}

/**
 * A sealed column's totals over rows [start, end) (an event's run, or a user
 * shard's part of it), kept per column and range: sealed rows never change, and
 * a dashboard asks the same sum of the same days again and again, which read
 * every value's rows of every day (~0.5 ms over 90 days of 10 M events) to
 * find a handful of numbers.
 */
const sealedTotals = new WeakMap<PropertyColumn, Map<number, NumberTotals & { end: number }>>();
/** Ranges kept per column: an event's run, times the shard counts queries used. */
const sealedTotalsPerColumnMax = 64;

function sealedNumberTotals(column: PropertyColumn, counts: ValueCounts | undefined, start: number, end: number): NumberTotals {
  let ranges = sealedTotals.get(column);
  const cached = ranges?.get(start);
  if (cached !== undefined && cached.end === end) return cached;
  let totals: NumberTotals & { end: number };
  if (counts === undefined) totals = { ...runNumberTotals(column, start, end), end };
  else {
    if (valueRows.length < counts.valueCount) valueRows = new Float64Array(counts.valueCount);
    countValuesIndexed(counts, column.valueIds, start, end, valueRows);
    totals = { ...numberTotals(column, valueRows, counts.valueCount, { rows: 0, sum: 0, min: Infinity, max: -Infinity }), end };
  }
  if (ranges === undefined) sealedTotals.set(column, (ranges = new Map()));
  if (ranges.size >= sealedTotalsPerColumnMax) ranges.clear();
  ranges.set(start, totals);
  return totals;
}

/** Rows [start, end) of a column read one by one: the totals of a run too short to need counts. */
function runNumberTotals(column: PropertyColumn, start: number, end: number): NumberTotals {
  const numbers = numbersOf(column);
  const { valueIds } = column;
  const totals: NumberTotals = { rows: 0, sum: 0, min: Infinity, max: -Infinity };
  for (let row = start; row < end; row++) {
    // Id 0 (not set) and texts that are no finite number are NaN.
    const number = numbers[valueIds[row]];
    if (Number.isNaN(number)) continue;
    totals.rows++;
    totals.sum += number;
    if (number < totals.min) totals.min = number;
    if (number > totals.max) totals.max = number;
  }
  return totals;
}

/**
 * Without a worker (`trendFromCountsOnly`), a sealed day whose column has no
 * stored counts is read row by row when the event's run is at most this long
 * (a purchase's price): no counts are built, and the totals are kept as
 * counted ones are.
 */
const runRowsWithoutCountsMax = 32_768;

interface CountedDay {
  segment: SegmentView;
  bucket: number;
  column: PropertyColumn;
  /** Sealed: the column's index; undefined for a short run read row by row (`runRowsWithoutCountsMax`). */
  counts: ValueCounts | undefined;
  /** Active: rows per value id of the event, from the worker's active index. */
  activeCounts: Uint32Array | undefined;
}

/**
 * Whether whole days of this trend are read from value counts (`countedDays`):
 * a sum, average, minimum or maximum of a property, of one event without
 * filters, without breakdown.
 */
export function mathFromValueCounts(gather: GatherPlan, plan: TrendSeriesPlan): boolean {
  const numeric = plan.math === "sum" || plan.math === "avg" || plan.math === "min" || plan.math === "max";
  const reference = gather.references[0];
  if (!numeric || plan.breakdownLimit !== undefined || gather.allEvents || gather.references.length !== 1) return false;
  return reference.eventId !== undefined && reference.filters.length === 0 && gather.math.kind === "key" && gather.math.keyId !== undefined;
}

/**
 * The days a numeric math without breakdown or filters reads from value
 * counts (a whole day in one bucket; sealed: its property column indexed;
 * active: the task covers every user and the worker's index counts the
 * event's values), and the segments left to the row scan; undefined when the
 * query is not such a math.
 */
function countedDays(segments: readonly SegmentView[], gather: GatherPlan, plan: TrendSeriesPlan, userLo: number, userHi: number, buildCounts: boolean): { days: CountedDay[]; rest: SegmentView[] } | undefined {
  if (!mathFromValueCounts(gather, plan)) return undefined;
  const reference = gather.references[0];
  const eventId = reference.eventId!;
  const keyId = (gather.math as { keyId: number }).keyId;
  const days: CountedDay[] = [];
  const rest: SegmentView[] = [];
  for (const segment of segments) {
    const sealed = segment.eventRowStart !== undefined;
    const dayInRange = dayParts(plan.startsMs, segment.dayStartMs);
    // A day outside every bucket has nothing to count or scan.
    if (dayInRange.length === 0) continue;
    const parts = sealed || userLo === 0 ? dayInRange : [];
    const whole = parts.length === 1 && parts[0].lowMs === 0 && parts[0].highMs === dayMs;
    const column = whole ? segment.property(keyId) : undefined;
    // No row of the day sets the property: none of its rows counts.
    if (whole && column === undefined) continue;
    const valueCount = column === undefined ? 0 : Math.max(1, column.texts.length);
    // Without building: the caller then has no rows to read either (a column's counts read all of its rows).
    const counts = column === undefined || !sealed ? undefined : buildCounts ? valueCountsOf(column.valueIds, valueCount, segment.eventRowStart!) : valueCountsKept(column.valueIds, valueCount);
    const activeCounts = column === undefined || sealed ? undefined : segment.eventValueCounts(eventId, keyId, userHi);
    const starts = segment.eventRowStart;
    const shortRun = !buildCounts && column !== undefined && sealed && counts === undefined && (eventId + 1 >= starts!.length || starts![eventId + 1] - starts![eventId] <= runRowsWithoutCountsMax);
    if (counts === undefined && activeCounts === undefined && !shortRun) rest.push(segment);
    else days.push({ segment, bucket: parts[0].bucket, column: column!, counts, activeCounts });
  }
  return { days, rest };
}
