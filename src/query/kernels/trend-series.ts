/**
 * Trend of SPEC §7 (time zones, event filters, breakdowns, math over a
 * property) over gathered event rows (event-rows.ts): every row of the
 * reference (bit 0) is placed in its bucket by binary search over the
 * query's boundary instants, then summed per (group, bucket), where the
 * groups are the whole answer, the listed breakdown values and the rest.
 */
import { boundaryIndex } from "../buckets.js";
import type { TrendMath } from "../schemas.js";
import { rowsByUser, type EventRows } from "./event-rows.js";
import { rankSeries, valueOf } from "./series.js";

export interface TrendSeriesPlan {
  /** Bucket i is [startsMs[i], startsMs[i + 1]). */
  startsMs: Float64Array;
  math: TrendMath;
  /** undefined: no breakdown. */
  breakdownLimit: number | undefined;
}

export type BucketValues = Array<number | null>;

export interface TrendSeriesAnswer {
  values: BucketValues;
  /** `weight`: what the series was ranked by (events, users or counted events), for merging shards. */
  series: Array<{ value: string | null; values: BucketValues; weight: number }> | undefined;
  other: BucketValues | undefined;
}

export function trendSeries(rows: EventRows, plan: TrendSeriesPlan): TrendSeriesAnswer {
  const bucketCount = plan.startsMs.length - 1;
  const { masks, timesMs, values, users, numbers } = rows;
  const firstMs = plan.startsMs[0];
  const endMs = plan.startsMs[bucketCount];
  const buckets = new Int32Array(rows.count).fill(-1);
  for (let row = 0; row < rows.count; row++) {
    if ((masks[row] & 1) === 0 || timesMs[row] < firstMs || timesMs[row] >= endMs) continue;
    buckets[row] = boundaryIndex(plan.startsMs, timesMs[row]);
  }

  // Rows grouped by user, once, for the maths that count distinct users.
  let byUser: Uint32Array | undefined;
  const userOrder = () => (byUser ??= rowsByUser(rows));

  // Groups: 0 the whole answer; with a breakdown, the listed values and the rest.
  const valueCount = rows.valueTexts.length;
  let groupOfValue: Int32Array = new Int32Array(valueCount);
  let groupCount = 1;
  let listed: number[] = [];
  let hasOther = false;
  const weights = new Float64Array(plan.breakdownLimit === undefined ? 0 : valueCount);
  if (plan.breakdownLimit !== undefined) {
    const present = new Uint8Array(valueCount);
    if (plan.math === "unique") {
      countUsersPerValue(rows, userOrder(), buckets, weights);
      for (let value = 0; value < valueCount; value++) present[value] = weights[value] > 0 ? 1 : 0;
    } else {
      for (let row = 0; row < rows.count; row++) {
        if (buckets[row] < 0) continue;
        weights[values[row]]++;
        present[values[row]] = 1;
      }
    }
    const ranked = rankSeries(weights, present, rows.valueTexts, plan.breakdownLimit);
    groupOfValue = ranked.groupOfValue;
    groupCount = ranked.groupCount;
    listed = ranked.listed;
    hasOther = ranked.hasOther;
  }

  const cells = groupCount * bucketCount;
  const results = new Array<number | null>(cells);
  switch (plan.math) {
    case "total": {
      const counts = new Float64Array(cells);
      for (let row = 0; row < rows.count; row++) {
        const bucket = buckets[row];
        if (bucket < 0) continue;
        counts[bucket]++;
        if (groupCount > 1) counts[groupOfValue[values[row]] * bucketCount + bucket]++;
      }
      for (let cell = 0; cell < cells; cell++) results[cell] = counts[cell];
      break;
    }
    case "unique":
    case "avg_per_user": {
      const userCounts = countUsersPerCell(rows, userOrder(), buckets, groupOfValue, groupCount, bucketCount);
      if (plan.math === "unique") {
        for (let cell = 0; cell < cells; cell++) results[cell] = userCounts[cell];
        break;
      }
      const eventCounts = new Float64Array(cells);
      for (let row = 0; row < rows.count; row++) {
        const bucket = buckets[row];
        if (bucket < 0) continue;
        eventCounts[bucket]++;
        if (groupCount > 1) eventCounts[groupOfValue[values[row]] * bucketCount + bucket]++;
      }
      for (let cell = 0; cell < cells; cell++) results[cell] = userCounts[cell] === 0 ? 0 : eventCounts[cell] / userCounts[cell];
      break;
    }
    case "sum":
    case "avg":
    case "min":
    case "max": {
      const sums = new Float64Array(cells);
      const counted = new Float64Array(cells);
      const minimums = new Float64Array(cells).fill(Infinity);
      const maximums = new Float64Array(cells).fill(-Infinity);
      const add = (cell: number, number: number) => {
        sums[cell] += number;
        counted[cell]++;
        if (number < minimums[cell]) minimums[cell] = number;
        if (number > maximums[cell]) maximums[cell] = number;
      };
      for (let row = 0; row < rows.count; row++) {
        const bucket = buckets[row];
        const number = numbers[row];
        if (bucket < 0 || Number.isNaN(number)) continue;
        add(bucket, number);
        if (groupCount > 1) add(groupOfValue[values[row]] * bucketCount + bucket, number);
      }
      for (let cell = 0; cell < cells; cell++) {
        if (plan.math === "sum") results[cell] = sums[cell];
        else if (counted[cell] === 0) results[cell] = null;
        else results[cell] = plan.math === "avg" ? sums[cell] / counted[cell] : plan.math === "min" ? minimums[cell] : maximums[cell];
      }
      break;
    }
  }
  // -0 would print as 0 anyway; keep sums of nothing at 0.
  const group = (index: number) => results.slice(index * bucketCount, (index + 1) * bucketCount);
  return {
    values: group(0),
    series: plan.breakdownLimit === undefined ? undefined : listed.map((value, rank) => ({ value: valueOf(rows.valueTexts, value), values: group(rank + 1), weight: weights[value] })),
    other: hasOther ? group(groupCount - 1) : undefined,
  };
}

/**
 * Distinct users per (group, bucket): rows grouped by user (time order does
 * not matter here), and a cell counts a user when the cell's last counted
 * user is another one.
 */
function countUsersPerCell(rows: EventRows, order: Uint32Array, buckets: Int32Array, groupOfValue: Int32Array, groupCount: number, bucketCount: number): Float64Array {
  const counts = new Float64Array(groupCount * bucketCount);
  const lastUser = new Float64Array(groupCount * bucketCount).fill(-1);
  const { users, values } = rows;
  for (let index = 0; index < order.length; index++) {
    const row = order[index];
    const bucket = buckets[row];
    if (bucket < 0) continue;
    const user = users[row];
    if (lastUser[bucket] !== user) {
      lastUser[bucket] = user;
      counts[bucket]++;
    }
    if (groupCount > 1) {
      const cell = groupOfValue[values[row]] * bucketCount + bucket;
      if (lastUser[cell] !== user) {
        lastUser[cell] = user;
        counts[cell]++;
      }
    }
  }
  return counts;
}

/** Distinct users per breakdown value over the whole range (the rank of a unique trend's series). */
function countUsersPerValue(rows: EventRows, order: Uint32Array, buckets: Int32Array, weights: Float64Array): void {
  const lastUser = new Float64Array(weights.length).fill(-1);
  const { users, values } = rows;
  for (let index = 0; index < order.length; index++) {
    const row = order[index];
    if (buckets[row] < 0) continue;
    const value = values[row];
    if (lastUser[value] === users[row]) continue;
    lastUser[value] = users[row];
    weights[value]++;
  }
}
