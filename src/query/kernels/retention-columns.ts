/**
 * Retention of SPEC §7 straight from the segments' columns (the fast path of
 * retention-cohorts.ts, which stays the reference shape): one scan in period
 * order (column-scan.ts) keeps per user its cohort row's time, period and
 * value, and a bit set of the later periods it returned in. Each user's rows
 * are visited in period order, so when a retention row of period q is read,
 * a cohort period before q is final (the cohort row is the user's first),
 * and a return needs nothing but that. The counts and the breakdown's ranking then
 * come from one pass over the users.
 *
 * Covered: at most `periodWordsMax` × 32 periods, days cut into at most a few
 * parts (column-scan.ts). Anything else answers undefined and runs through
 * the gathered rows (event-rows.ts, retention-cohorts.ts).
 */
import type { SegmentView } from "../segment-view.js";
import { blockUsersDefault, planColumnScan, runColumnScan } from "./column-scan.js";
import { compareValues, type GatherPlan } from "./event-rows.js";
import type { CohortCounts, RetentionCohortsAnswer, RetentionCohortsPlan } from "./retention-cohorts.js";
import { rankSeries, valueOf, type SeriesGroups } from "./series.js";

/** Per-user return bit sets of this many 32-bit words at most (128 periods). */
const periodWordsMax = 4;

export function retentionColumns(segments: readonly SegmentView[], gather: GatherPlan, plan: RetentionCohortsPlan, userLo: number, userHi: number, blockUsers = blockUsersDefault): RetentionCohortsAnswer | undefined {
  const periodCount = plan.startsMs.length - 1;
  const words = (periodCount + 31) >>> 5;
  if (words > periodWordsMax) return undefined;
  const scan = planColumnScan(segments, gather, plan.startsMs, userLo, userHi, blockUsers);
  if (scan === undefined) return undefined;
  const { valueTexts } = scan;
  const slots = userHi - userLo;
  const cohortPeriods = new Int32Array(slots).fill(-1);
  const cohortTimesMs = new Float64Array(slots);
  const cohortValues = new Int32Array(slots);
  const returns = new Uint32Array(slots * words);
  // The users that have a cohort, in the order found: the passes after the scan visit them alone, not every user of the shard.
  const cohortSlots = new Int32Array(slots);
  let cohortCount = 0;
  runColumnScan(scan, ({ count, slots, masks, values, buckets, timesMs }) => {
    for (let index = 0; index < count; index++) {
      const slot = slots[index];
      const mask = masks[index];
      const period = buckets[index];
      if ((mask & 1) !== 0) {
        const value = values[index];
        const timeMs = timesMs[index];
        if (cohortPeriods[slot] < 0) {
          cohortSlots[cohortCount++] = slot;
          cohortPeriods[slot] = period;
          cohortTimesMs[slot] = timeMs;
          cohortValues[slot] = value;
        } else if (cohortPeriods[slot] === period) {
          // Rows of one period come in any order: keep the earliest, ties to the least value ("not set" first).
          if (timeMs < cohortTimesMs[slot] || (timeMs === cohortTimesMs[slot] && compareValues(valueTexts, value, cohortValues[slot], true) < 0)) {
            cohortTimesMs[slot] = timeMs;
            cohortValues[slot] = value;
          }
        }
      }
      if ((mask & 2) !== 0) {
        const cohortPeriod = cohortPeriods[slot];
        if (cohortPeriod >= 0 && cohortPeriod < period) returns[slot * words + (period >>> 5)] |= 1 << (period & 31);
      }
    }
    // A row that repeats the previous one's user, period, value and mask, no earlier, neither moves a cohort nor adds a return.
  }, "skip");

  const breakdown = plan.breakdownLimit !== undefined;
  const valueCount = valueTexts.length;
  const weights = new Float64Array(valueCount);
  const present = new Uint8Array(valueCount);
  if (breakdown) {
    for (let index = 0; index < cohortCount; index++) {
      const slot = cohortSlots[index];
      weights[cohortValues[slot]]++;
      present[cohortValues[slot]] = 1;
    }
  }
  const ranked = breakdown ? rankSeries(weights, present, valueTexts, plan.breakdownLimit!) : undefined;
  const groupCount = ranked === undefined ? 1 : ranked.groupCount;
  // Each group's weeks, flat (the JS arrays of arrays cost more per user than the scan).
  const weekStarts = weekStartsOf(periodCount);
  const groupCells = weekStarts[periodCount];
  const weeks = new Float64Array(groupCount * groupCells);
  const groupOfValue = ranked?.groupOfValue;
  for (let index = 0; index < cohortCount; index++) {
    const slot = cohortSlots[index];
    const period = cohortPeriods[slot];
    const allStart = weekStarts[period];
    const seriesStart = groupOfValue === undefined ? -1 : groupOfValue[cohortValues[slot]] * groupCells + allStart;
    weeks[allStart]++;
    if (seriesStart >= 0) weeks[seriesStart]++;
    for (let word = 0; word < words; word++) {
      let bits = returns[slot * words + word];
      while (bits !== 0) {
        const lowest = bits & -bits;
        const offset = word * 32 + 31 - Math.clz32(lowest) - period;
        weeks[allStart + offset]++;
        if (seriesStart >= 0) weeks[seriesStart + offset]++;
        bits ^= lowest;
      }
    }
  }
  return cohortsAnswer(weeks, weekStarts, ranked, valueTexts);
}

/** Period p's run of P - p counts starts at weekStarts[p] of a group's weeks. */
export function weekStartsOf(periodCount: number): Int32Array {
  const weekStarts = new Int32Array(periodCount + 1);
  for (let period = 0; period < periodCount; period++) weekStarts[period + 1] = weekStarts[period] + periodCount - period;
  return weekStarts;
}

/** The answer from each group's weeks, flat (group g's at g × weekStarts[P]; group 0 everyone, then the ranked series, then "other"). */
export function cohortsAnswer(weeks: Float64Array, weekStarts: Int32Array, ranked: SeriesGroups | undefined, valueTexts: readonly string[]): RetentionCohortsAnswer {
  const periodCount = weekStarts.length - 1;
  const groupCells = weekStarts[periodCount];
  const counts = (group: number): CohortCounts => {
    const groupWeeks = Array.from({ length: periodCount }, (_, period) => Array.from(weeks.subarray(group * groupCells + weekStarts[period], group * groupCells + weekStarts[period + 1])));
    return { totals: groupWeeks.map((periodWeeks) => periodWeeks[0]), weeks: groupWeeks };
  };
  if (ranked === undefined) return { all: counts(0), series: undefined, other: undefined };
  return {
    all: counts(0),
    series: ranked.listed.map((value, rank) => ({ value: valueOf(valueTexts, value), counts: counts(rank + 1) })),
    other: ranked.hasOther ? counts(ranked.otherGroup) : undefined,
  };
}
