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
import { rankSeries, valueOf } from "./series.js";

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
  runColumnScan(scan, (slot, mask, value, _number, period, timeMs) => {
    if ((mask & 1) !== 0) {
      if (cohortPeriods[slot] < 0) {
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
  });

  const breakdown = plan.breakdownLimit !== undefined;
  const valueCount = valueTexts.length;
  const weights = new Float64Array(valueCount);
  const present = new Uint8Array(valueCount);
  if (breakdown) {
    for (let slot = 0; slot < slots; slot++) {
      if (cohortPeriods[slot] < 0) continue;
      weights[cohortValues[slot]]++;
      present[cohortValues[slot]] = 1;
    }
  }
  const ranked = breakdown ? rankSeries(weights, present, valueTexts, plan.breakdownLimit!) : undefined;
  const groupCount = ranked === undefined ? 1 : ranked.groupCount;
  const groups = Array.from({ length: groupCount }, () => emptyCounts(periodCount));
  for (let slot = 0; slot < slots; slot++) {
    const period = cohortPeriods[slot];
    if (period < 0) continue;
    const all = groups[0];
    const series = ranked === undefined ? undefined : groups[ranked.groupOfValue[cohortValues[slot]]];
    all.totals[period]++;
    all.weeks[period][0]++;
    if (series !== undefined) {
      series.totals[period]++;
      series.weeks[period][0]++;
    }
    for (let word = 0; word < words; word++) {
      let bits = returns[slot * words + word];
      while (bits !== 0) {
        const lowest = bits & -bits;
        const returned = word * 32 + 31 - Math.clz32(lowest);
        all.weeks[period][returned - period]++;
        if (series !== undefined) series.weeks[period][returned - period]++;
        bits ^= lowest;
      }
    }
  }
  if (ranked === undefined) return { all: groups[0], series: undefined, other: undefined };
  return {
    all: groups[0],
    series: ranked.listed.map((value, rank) => ({ value: valueOf(valueTexts, value), counts: groups[rank + 1] })),
    other: ranked.hasOther ? groups[ranked.otherGroup] : undefined,
  };
}

function emptyCounts(periodCount: number): CohortCounts {
  const totals = new Array<number>(periodCount).fill(0);
  return { totals, weeks: totals.map((_, period) => new Array<number>(periodCount - period).fill(0)) };
}
