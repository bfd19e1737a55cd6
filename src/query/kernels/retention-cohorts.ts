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

  // Per user: cohort period, value, and the later periods it returned in.
  const cohortUsers: Array<{ period: number; value: number; returned: number[] }> = [];
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
      const returned = new Set<number>();
      for (let index = start; index < end; index++) {
        const row = order[index];
        if ((masks[row] & 2) === 0 || timesMs[row] < firstMs || timesMs[row] >= endMs) continue;
        const later = boundaryIndex(plan.startsMs, timesMs[row]);
        if (later > period) returned.add(later);
      }
      cohortUsers.push({ period, value: values[cohortRow], returned: [...returned] });
    }
    start = end;
  }

  const count = (keep: (value: number) => boolean): CohortCounts => {
    const totals = new Array<number>(periodCount).fill(0);
    const weeks = totals.map((_, period) => new Array<number>(periodCount - period).fill(0));
    for (const { period, value, returned } of cohortUsers) {
      if (!keep(value)) continue;
      totals[period]++;
      weeks[period][0]++;
      for (const later of returned) weeks[period][later - period]++;
    }
    return { totals, weeks };
  };
  const all = count(() => true);
  if (plan.breakdownLimit === undefined) return { all, series: undefined, other: undefined };
  const valueCount = rows.valueTexts.length;
  const weights = new Float64Array(valueCount);
  const present = new Uint8Array(valueCount);
  for (const { value } of cohortUsers) {
    weights[value]++;
    present[value] = 1;
  }
  const ranked = rankSeries(weights, present, rows.valueTexts, plan.breakdownLimit);
  return {
    all,
    series: ranked.listed.map((listedValue) => ({ value: valueOf(rows.valueTexts, listedValue), counts: count((value) => value === listedValue) })),
    other: ranked.hasOther ? count((value) => ranked.groupOfValue[value] === ranked.otherGroup) : undefined,
  };
}
