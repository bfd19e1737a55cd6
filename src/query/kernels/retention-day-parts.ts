/**
 * Retention of SPEC §7 whose retention event has no filters (the common
 * shape: "of the users who first did X, who came back at all"), in any time
 * zone, with or without cohort filters and a breakdown. The users who return
 * in a period are the event's users of that period: the union of the day
 * parts' user sets that trend-day-parts.ts keeps per worker, or the
 * segments' stored day sets. Over sealed rows, cohorts come from the same
 * kept sets (first-events.ts): a part's users less those of earlier parts
 * are the users whose first cohort event lies there, and only their rows of
 * that part are read, for the breakdown value. Otherwise only the cohort
 * event's rows are read, and only the rows its filters pass reach the
 * kernel: each user's first one gives its cohort period and breakdown
 * value, as in retention-columns.ts.
 * Then each (period, group) of cohort users is counted against each later
 * period's users by CRoaring. retention-columns.ts, which reads every row of
 * both events and keeps a bit set of returns per user, answers other shapes,
 * and this one over mostly active rows.
 */
import { strict as assert } from "node:assert";
import roaring from "roaring";
import { boundaryIndex } from "../buckets.js";
import { planColumnScan, runColumnScan } from "./column-scan.js";
import { compareValues, type GatherPlan } from "./event-rows.js";
import type { RetentionCohortsAnswer, RetentionCohortsPlan } from "./retention-cohorts.js";
import { rankSeries } from "./series.js";
import { cohortsAnswer, weekStartsOf } from "./retention-columns.js";
import { disposeCohorts, firstEventsFromParts, type Cohorts, type PartCut } from "./first-events.js";
import { ScratchFloat64, ScratchInt32, ScratchUint32 } from "./scratch.js";
import { keptPartsFit, sealedBucketUsers } from "./trend-day-parts.js";
import type { SegmentView } from "../segment-view.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;
// A shard's arrays are megabytes: allocated per task, they brought a full collection every few queries.
const cellScratch = new ScratchInt32();
const cellUserScratch = new ScratchUint32();
const rowPeriodScratch = new ScratchInt32();
const rowTimeScratch = new ScratchFloat64();
const rowValueScratch = new ScratchInt32();

/** Whether a retention of this shape is answered here (given days of at most three parts). */
export function retentionDayPartsApplies(gather: GatherPlan): boolean {
  return !gather.allEvents && gather.math.kind === "none" && gather.references.length === 2 && gather.references[1].filters.length === 0;
}

export function retentionDayParts(segments: readonly SegmentView[], gather: GatherPlan, plan: RetentionCohortsPlan, userLo: number, userHi: number): RetentionCohortsAnswer | undefined {
  if (!retentionDayPartsApplies(gather)) return undefined;
  // Over mostly active rows (right after a load), the returns' sets are built from rows on every query, and the
  // cohort event read twice when it is the retention event: retention-columns.ts's one pass is faster then.
  const cut = partCut(plan, segments, gather.references[1].eventId);
  const returning = sealedBucketUsers(segments, gather.references[1].eventId, cut.startsMs, userLo, userHi, cut.merged);
  if (returning === undefined) return undefined;
  const periodCount = plan.startsMs.length - 1;
  let cohorts: Cohorts | undefined;
  const cells: Array<Bitmap | undefined> = [];
  try {
    cohorts = firstEventsFromParts(segments, gather.references[0], gather.breakdown, cut, periodCount, userLo, userHi) ?? cohortsFromRows(segments, gather, plan, userLo, userHi);
    if (cohorts === undefined) return undefined;
    const { valueTexts } = cohorts;

    let ranked: ReturnType<typeof rankSeries> | undefined;
    if (plan.breakdownLimit !== undefined) {
      const weights = new Float64Array(valueTexts.length + 1);
      if (cohorts.sets !== undefined) for (const users of cohorts.sets) weights[0] += users?.size ?? 0;
      else for (let slot = 0; slot < cohorts.periods.length; slot++) if (cohorts.periods[slot] >= 0) weights[cohorts.values[slot]]++;
      const present = new Uint8Array(valueTexts.length);
      for (let value = 0; value < valueTexts.length; value++) present[value] = weights[value] > 0 ? 1 : 0;
      ranked = rankSeries(weights.subarray(0, valueTexts.length), present, valueTexts, plan.breakdownLimit);
    }
    // Group 0 is everyone: with a breakdown, the sum of the other groups (each cohort user is in exactly one).
    const groupCount = ranked === undefined ? 1 : ranked.groupCount;
    const firstGroup = ranked === undefined ? 0 : 1;

    // Cohort users by cell (period × groupCount + group).
    if (cohorts.sets !== undefined) {
      const group = ranked === undefined ? 0 : ranked.groupOfValue[0];
      for (let period = 0; period < periodCount; period++) cells[period * groupCount + group] = cohorts.sets[period];
    } else cellsOfSlots(cohorts.periods, cohorts.values, valueTexts.length, ranked?.groupOfValue, groupCount, periodCount, userLo, cells);

    // Each group's weeks, flat.
    const weekStarts = weekStartsOf(periodCount);
    const groupCells = weekStarts[periodCount];
    const weeks = new Float64Array(groupCount * groupCells);
    for (let period = 0; period < periodCount; period++) {
      for (let group = firstGroup; group < groupCount; group++) {
        const cohort = cells[period * groupCount + group];
        if (cohort === undefined) continue;
        const at = group * groupCells + weekStarts[period];
        weeks[at] = cohort.size;
        for (let later = period + 1; later < periodCount; later++) weeks[at + later - period] = cohort.andCardinality(returning[later].users);
      }
    }
    if (ranked !== undefined) for (let group = 1; group < groupCount; group++) for (let at = 0; at < groupCells; at++) weeks[at] += weeks[group * groupCells + at];

    return cohortsAnswer(weeks, weekStarts, ranked, valueTexts);
  } finally {
    if (cohorts?.sets !== undefined) disposeCohorts(cohorts);
    else for (const cohort of cells) cohort?.dispose();
    for (const period of returning) if (period.owned) period.users.dispose();
  }
}

/**
 * Each (period, group) cell's users from each slot's period (-1: none) and
 * value, into `cells` (period × groupCount + group): ascending within a
 * cell, by a counting sort over the slots in order. Slots without a cohort
 * count in the cells of "period -1", so the passes run without a branch per
 * slot.
 */
function cellsOfSlots(periods: Int32Array, values: Int32Array, valueCount: number, groupOfValue: Int32Array | undefined, groupCount: number, periodCount: number, userLo: number, cells: Array<Bitmap | undefined>): void {
  const slots = periods.length;
  const groups = new Int32Array(valueCount);
  if (groupOfValue !== undefined) groups.set(groupOfValue);
  const cellOfSlot = cellScratch.get(slots);
  const cellStarts = new Int32Array((periodCount + 1) * groupCount + 1);
  for (let slot = 0; slot < slots; slot++) {
    const cell = (periods[slot] + 1) * groupCount + groups[values[slot]];
    cellOfSlot[slot] = cell;
    cellStarts[cell + 1]++;
  }
  for (let cell = 0; cell < cellStarts.length - 1; cell++) cellStarts[cell + 1] += cellStarts[cell];
  const next = cellStarts.slice(0, cellStarts.length - 1);
  const users = cellUserScratch.get(slots);
  for (let slot = 0; slot < slots; slot++) users[next[cellOfSlot[slot]]++] = userLo + slot;
  for (let cell = groupCount; cell < cellStarts.length - 1; cell++) {
    if (cellStarts[cell + 1] > cellStarts[cell]) cells[cell - groupCount] = new RoaringBitmap32(users.subarray(cellStarts[cell], cellStarts[cell + 1]));
  }
}

/** Where days are cut into parts: at every local midnight when the plan lists them and their parts fit the kept parts' budget, each part in its period. */
function partCut(plan: RetentionCohortsPlan, segments: readonly SegmentView[], returnEventId: number | undefined): PartCut {
  const days = plan.dayStartsMs;
  // Cut at local midnights, every day of a long range is parts to keep: past the budget, days whole in a period keep their stored sets.
  if (days === undefined || !keptPartsFit(segments, returnEventId, [], days)) return { startsMs: plan.startsMs, merged: undefined };
  const periodCount = plan.startsMs.length - 1;
  assert(days[0] === plan.startsMs[0] && days[days.length - 1] === plan.startsMs[periodCount], "the local days span the periods");
  const of = new Int32Array(days.length - 1);
  for (let day = 0; day < of.length; day++) of[day] = boundaryIndex(plan.startsMs, days[day]);
  return { startsMs: days, merged: { of, count: periodCount } };
}

/** Cohorts from the cohort event's rows, read by the column scan (any mix of sealed and active segments). */
function cohortsFromRows(segments: readonly SegmentView[], gather: GatherPlan, plan: RetentionCohortsPlan, userLo: number, userHi: number): Cohorts | undefined {
  const scan = planColumnScan(segments, { ...gather, references: [gather.references[0]] }, plan.startsMs, userLo, userHi);
  if (scan === undefined) return undefined;
  const { valueTexts } = scan;
  const slots = userHi - userLo;
  const cohortPeriods = rowPeriodScratch.get(slots).subarray(0, slots).fill(-1);
  const cohortTimesMs = rowTimeScratch.get(slots);
  const cohortValues = rowValueScratch.get(slots).subarray(0, slots).fill(0);
  // Every visited row is a cohort row (the scan reads the cohort reference alone), each user's in period order.
  runColumnScan(scan, ({ count, slots, values, buckets, timesMs }) => {
    for (let index = 0; index < count; index++) {
      const slot = slots[index];
      const period = buckets[index];
      const known = cohortPeriods[slot];
      if (known < 0) {
        cohortPeriods[slot] = period;
        cohortTimesMs[slot] = timesMs[index];
        cohortValues[slot] = values[index];
      } else if (known === period) {
        // Rows of one period come in any order: keep the earliest, ties to the least value ("not set" first).
        const timeMs = timesMs[index];
        const value = values[index];
        if (timeMs < cohortTimesMs[slot] || (timeMs === cohortTimesMs[slot] && compareValues(valueTexts, value, cohortValues[slot], true) < 0)) {
          cohortTimesMs[slot] = timeMs;
          cohortValues[slot] = value;
        }
      }
    }
  }, "skip", cohortPeriods);
  return { valueTexts, periods: cohortPeriods, values: cohortValues };
}
