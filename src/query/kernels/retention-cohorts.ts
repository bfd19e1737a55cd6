/**
 * Retention of SPEC §7 (time zones, event filters, breakdowns) over gathered
 * event rows sorted by user and time: a user's cohort is the period of its
 * first cohort row (bit 0), its breakdown value that row's (ties in time: the
 * least value, "not set" first), and it returns in every later period where
 * it has a retention row (bit 1).
 */
import { boundaryIndex } from "../buckets.js";
import { compareValues, rowsByUserAndTime, type EventRows } from "./event-rows.js";
import { rankSeries, valueOf } from "./series.js";

export interface RetentionCohortsPlan {
  /** Period p is [startsMs[p], startsMs[p + 1]). */
  startsMs: Float64Array;
  breakdownLimit: number | undefined;
  /**
   * The local days' starts from startsMs[0] to the last period's end, for
   * kernels that read kept sets per part of a day (retention-day-parts.ts):
   * cut at every local midnight, a day's parts are the same whatever the
   * range's first day, so a range moved by a day reads the same kept parts.
   * Undefined: cut at the periods' starts.
   */
  dayStartsMs?: Float64Array;
}

export interface CohortCounts {
  totals: number[];
  /** weeks[p] has P - p entries, weeks[p][0] = totals[p]. */
  weeks: number[][];
}

export interface RetentionCohortsAnswer {
  all: CohortCounts;
  series: Array<{ value: string | null; counts: CohortCounts }> | undefined;
  other: CohortCounts | undefined;
}

export function retentionCohorts(rows: EventRows, plan: RetentionCohortsPlan): RetentionCohortsAnswer {
  const periodCount = plan.startsMs.length - 1;
  const firstMs = plan.startsMs[0];
  const endMs = plan.startsMs[periodCount];
  const order = rowsByUserAndTime(rows);
  const { users, timesMs, masks, values } = rows;

  // Per user: cohort period, value, and the later periods it returned in (flat: returns[returnStarts[u]…]).
  // At most one cohort user per row, one return per row: sized once, no growth.
  const cohortPeriods = new Int32Array(rows.count);
  const cohortValues = new Int32Array(rows.count);
  const returnStarts = new Int32Array(rows.count + 1);
  const returns = new Int32Array(rows.count);
  let cohortCount = 0;
  let returnCount = 0;
  for (let start = 0; start < order.length; ) {
    const user = users[order[start]];
    let end = start;
    while (end < order.length && users[order[end]] === user) end++;
    let cohortRow = -1;
    for (let index = start; index < end; index++) {
      const row = order[index];
      if ((masks[row] & 1) === 0 || timesMs[row] < firstMs || timesMs[row] >= endMs) continue;
      if (cohortRow < 0) cohortRow = row;
      else if (timesMs[row] === timesMs[cohortRow] && compareValues(rows.valueTexts, values[row], values[cohortRow], true) < 0) cohortRow = row;
      else if (timesMs[row] > timesMs[cohortRow]) break;
    }
    if (cohortRow >= 0) {
      const period = boundaryIndex(plan.startsMs, timesMs[cohortRow]);
      // Rows are in time order, so a user's return periods come nondecreasing: a repeat is the last one.
      let lastReturn = period;
      for (let index = start; index < end; index++) {
        const row = order[index];
        if ((masks[row] & 2) === 0 || timesMs[row] < plan.startsMs[lastReturn + 1] || timesMs[row] >= endMs) continue;
        lastReturn = boundaryIndex(plan.startsMs, timesMs[row]);
        returns[returnCount++] = lastReturn;
      }
      cohortPeriods[cohortCount] = period;
      cohortValues[cohortCount] = values[cohortRow];
      cohortCount++;
      returnStarts[cohortCount] = returnCount;
    }
    start = end;
  }

  const count = (members: ArrayLike<number>): CohortCounts => {
    const totals = new Array<number>(periodCount).fill(0);
    const weeks = totals.map((_, period) => new Array<number>(periodCount - period).fill(0));
    for (let index = 0; index < members.length; index++) {
      const member = members[index];
      const period = cohortPeriods[member];
      totals[period]++;
      weeks[period][0]++;
      for (let cursor = returnStarts[member]; cursor < returnStarts[member + 1]; cursor++) weeks[period][returns[cursor] - period]++;
    }
    return { totals, weeks };
  };
  const everyone = new Uint32Array(cohortCount);
  for (let member = 0; member < everyone.length; member++) everyone[member] = member;
  const all = count(everyone);
  if (plan.breakdownLimit === undefined) return { all, series: undefined, other: undefined };
  const valueCount = rows.valueTexts.length;
  const weights = new Float64Array(valueCount);
  const present = new Uint8Array(valueCount);
  for (let member = 0; member < cohortCount; member++) {
    const value = cohortValues[member];
    weights[value]++;
    present[value] = 1;
  }
  const ranked = rankSeries(weights, present, rows.valueTexts, plan.breakdownLimit);
  // Cohort users by group, so each series counts only its own.
  const members: number[][] = Array.from({ length: ranked.groupCount }, () => []);
  for (let member = 0; member < cohortCount; member++) members[ranked.groupOfValue[cohortValues[member]]].push(member);
  return {
    all,
    series: ranked.listed.map((listedValue, rank) => ({ value: valueOf(rows.valueTexts, listedValue), counts: count(members[rank + 1]) })),
    other: ranked.hasOther ? count(members[ranked.otherGroup]) : undefined,
  };
}
