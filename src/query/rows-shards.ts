/**
 * SPEC §7 queries in user shards: each shard answers its users with every
 * breakdown value listed (no limit, no "other"), and the shards' answers are
 * merged here: series of one value add up (shards hold disjoint users), the
 * merged series are ranked by their merged weight (§7.3's ties) and cut to
 * the limit, and `breakdownOther` adds up the series left out.
 *
 * Not every answer merges: a unique trend's "other" counts users across
 * several values (a user with two left-out values counts once), an average
 * needs its counts. A funnel's medians of times to convert merge from each
 * shard's times, which its plan asks it to keep. `shardable` says which plans merge;
 * a unique trend whose merged values exceed the limit answers undefined, and
 * the caller runs it again in one task.
 */
import { timesToConvert, type FunnelChainsAnswer, type StepCounts } from "./kernels/funnel-chains.js";
import type { CohortCounts, RetentionCohortsAnswer } from "./kernels/retention-cohorts.js";
import type { BucketValues, TrendSeriesAnswer } from "./kernels/trend-series.js";
import type { RowsAnswer, RowsAnswerPlan } from "./query-protocol.js";

/** A breakdown limit that lists every value a shard has. */
const everyValue = Number.MAX_SAFE_INTEGER;

/** Whether shards of this plan merge into the one-task answer. */
export function shardable(plan: RowsAnswerPlan): boolean {
  switch (plan.kind) {
    case "trend":
      return plan.plan.math === "total" || plan.plan.math === "unique" || plan.plan.math === "sum" || plan.plan.math === "min" || plan.plan.math === "max";
    case "funnel":
    case "retention":
      return true;
  }
}

/** The plan each shard runs: every value listed. */
export function shardPlan(plan: RowsAnswerPlan): RowsAnswerPlan {
  const keepTimes = plan.kind === "funnel" && plan.plan.timeToConvert;
  if (plan.plan.breakdownLimit === undefined && !keepTimes) return plan;
  return { ...plan, plan: { ...plan.plan, ...(plan.plan.breakdownLimit === undefined ? {} : { breakdownLimit: everyValue }), ...(keepTimes ? { keepTimes } : {}) } } as RowsAnswerPlan;
}

type Value = string | null;

/** SPEC §7.3 ranking: weight descending, then value with null last, strings by UTF-16 code units. */
function ranked<T>(series: Map<Value, { weight: number; item: T }>, limit: number): { listed: Array<[Value, T]>; others: T[] } {
  const entries = [...series.entries()].sort(([leftValue, left], [rightValue, right]) => {
    if (left.weight !== right.weight) return right.weight - left.weight;
    if (leftValue === rightValue) return 0;
    if (leftValue === null) return 1;
    if (rightValue === null) return -1;
    return leftValue < rightValue ? -1 : 1;
  });
  return { listed: entries.slice(0, limit).map(([value, { item }]) => [value, item]), others: entries.slice(limit).map(([, { item }]) => item) };
}

/** Merges shard answers of `plan` (the caller's plan, with its real limit); undefined when they do not merge. */
export function mergeRowsShards(plan: RowsAnswerPlan, answers: readonly RowsAnswer[]): RowsAnswer | undefined {
  switch (plan.kind) {
    case "trend": {
      const answer = mergeTrend(plan.plan.math, plan.plan.breakdownLimit, answers.map((shard) => (shard as Extract<RowsAnswer, { kind: "trend" }>).answer));
      return answer === undefined ? undefined : { kind: "trend", answer };
    }
    case "funnel":
      return { kind: "funnel", answer: mergeFunnel(plan.plan.breakdownLimit, answers.map((shard) => (shard as Extract<RowsAnswer, { kind: "funnel" }>).answer)) };
    case "retention":
      return { kind: "retention", answer: mergeRetention(plan.plan.breakdownLimit, answers.map((shard) => (shard as Extract<RowsAnswer, { kind: "retention" }>).answer)) };
  }
}

// ---------------------------------------------------------------------------

/** One value's series of one shard: its weight and its counts. */
interface ShardSeries<T> {
  value: Value;
  weight: number;
  item: T;
}

/** Adds up each value's series over the shards, ranks them, keeps `limit`, and adds up the rest into `other`. */
function mergeSeries<T>(shards: ReadonlyArray<ReadonlyArray<ShardSeries<T>>>, limit: number, copy: (item: T) => T, add: (into: T, from: T) => void): { listed: Array<[Value, T]>; others: T[]; other: T | undefined; weightOf: (value: Value) => number } {
  const series = new Map<Value, { weight: number; item: T }>();
  for (const shard of shards) {
    for (const one of shard) {
      const merged = series.get(one.value);
      if (merged === undefined) series.set(one.value, { weight: one.weight, item: copy(one.item) });
      else {
        merged.weight += one.weight;
        add(merged.item, one.item);
      }
    }
  }
  const { listed, others } = ranked(series, limit);
  let other: T | undefined;
  if (others.length > 0) {
    other = copy(others[0]);
    for (const item of others.slice(1)) add(other, item);
  }
  return { listed, others, other, weightOf: (value) => series.get(value)!.weight };
}

function addBuckets(math: string, into: BucketValues, from: BucketValues): void {
  for (let bucket = 0; bucket < into.length; bucket++) {
    const left = into[bucket];
    const right = from[bucket];
    if (math === "min" || math === "max") {
      if (right === null) continue;
      into[bucket] = left === null ? right : math === "min" ? Math.min(left, right) : Math.max(left, right);
    } else {
      into[bucket] = (left ?? 0) + (right ?? 0);
    }
  }
}

function mergeTrend(math: string, limit: number | undefined, shards: readonly TrendSeriesAnswer[]): TrendSeriesAnswer | undefined {
  const add = (into: BucketValues, from: BucketValues) => addBuckets(math, into, from);
  const values = [...shards[0].values];
  for (const shard of shards.slice(1)) add(values, shard.values);
  if (limit === undefined) return { values, series: undefined, other: undefined };
  const merged = mergeSeries(
    shards.map((shard) => shard.series!.map((one) => ({ value: one.value, weight: one.weight, item: one.values }))),
    limit,
    (item) => [...item],
    add,
  );
  // A user with events of two left-out values counts once in "other": not a sum of series.
  if (merged.others.length > 0 && math === "unique") return undefined;
  return { values, series: merged.listed.map(([value, item]) => ({ value, values: item, weight: merged.weightOf(value) })), other: merged.other };
}

function addSteps(into: StepCounts, from: StepCounts): void {
  for (let step = 0; step < into.counts.length; step++) {
    into.counts[step] += from.counts[step];
    if (into.times !== undefined) for (const time of from.times![step]) into.times[step].push(time);
  }
}

function copySteps(steps: StepCounts): StepCounts {
  return { counts: [...steps.counts], medians: undefined, averages: undefined, times: steps.times?.map((times) => [...times]) };
}

/** The merged times' medians and means, in place of the times. */
function withTimesToConvert({ counts, times }: StepCounts): StepCounts {
  return times === undefined ? { counts, medians: undefined, averages: undefined } : { counts, ...timesToConvert(times) };
}

function mergeFunnel(limit: number | undefined, shards: readonly FunnelChainsAnswer[]): FunnelChainsAnswer {
  const all = copySteps(shards[0].all);
  for (const shard of shards.slice(1)) addSteps(all, shard.all);
  if (limit === undefined) return { all: withTimesToConvert(all), series: undefined, other: undefined };
  const merged = mergeSeries(
    shards.map((shard) => shard.series!.map((one) => ({ value: one.value, weight: one.steps.counts[0], item: one.steps }))),
    limit,
    copySteps,
    addSteps,
  );
  return {
    all: withTimesToConvert(all),
    series: merged.listed.map(([value, steps]) => ({ value, steps: withTimesToConvert(steps) })),
    other: merged.other === undefined ? undefined : withTimesToConvert(merged.other),
  };
}

function addCohorts(into: CohortCounts, from: CohortCounts): void {
  for (let period = 0; period < into.totals.length; period++) {
    into.totals[period] += from.totals[period];
    for (let offset = 0; offset < into.weeks[period].length; offset++) into.weeks[period][offset] += from.weeks[period][offset];
  }
}

function copyCohorts(counts: CohortCounts): CohortCounts {
  return { totals: [...counts.totals], weeks: counts.weeks.map((weeks) => [...weeks]) };
}

function mergeRetention(limit: number | undefined, shards: readonly RetentionCohortsAnswer[]): RetentionCohortsAnswer {
  const all = copyCohorts(shards[0].all);
  for (const shard of shards.slice(1)) addCohorts(all, shard.all);
  if (limit === undefined) return { all, series: undefined, other: undefined };
  const merged = mergeSeries(
    shards.map((shard) => shard.series!.map((one) => ({ value: one.value, weight: one.counts.totals.reduce((sum, total) => sum + total, 0), item: one.counts }))),
    limit,
    copyCohorts,
    addCohorts,
  );
  return { all, series: merged.listed.map(([value, counts]) => ({ value, counts })), other: merged.other };
}
