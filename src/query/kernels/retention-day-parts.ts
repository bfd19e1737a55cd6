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
import { compareValues, valueInterner, type GatherPlan } from "./event-rows.js";
import type { RetentionCohortsAnswer, RetentionCohortsPlan } from "./retention-cohorts.js";
import { rankSeries } from "./series.js";
import { cohortsAnswer, weekStartsOf } from "./retention-columns.js";
import { cohortSetsFromParts, firstEventsFromParts, type FirstEvents, type PartCut, type ResolvedValues } from "./first-events.js";
import { valueOwners, valueOwnersCounts, type ValueOwners } from "./value-owners.js";
import { ScratchFloat64, ScratchInt32, ScratchUint32 } from "./scratch.js";
import { keptPartsFit, sealedBucketUsers } from "./trend-day-parts.js";
import type { SegmentView } from "../segment-view.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;
// A shard's arrays are megabytes: allocated per task, they brought a full collection every few queries.
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
  try {
    const periodCount = plan.startsMs.length - 1;
    if (gather.breakdown.kind === "none") {
      const sets = cohortSetsFromParts(segments, gather.references[0], cut, periodCount, userLo, userHi);
      if (sets !== undefined) return weeksOfSets(sets.cohorts, returning, periodCount);
    } else {
      // The owners' sets are asked for (and built, the first time) only where the kept parts answer.
      let owners: ValueOwners | undefined;
      // Values read from rows are interned into a copy: a segment's column holds every event's texts, which the owners' sets need not know.
      let valueTexts: string[] = [];
      const sets = cohortSetsFromParts(segments, gather.references[0], cut, periodCount, userLo, userHi, () => {
        owners = valueOwners(segments, gather.references[0].eventId, gather.breakdown);
        if (owners === undefined) return undefined;
        valueTexts = owners.texts.slice();
        return { users: owners.multi, breakdown: gather.breakdown, globalId: valueInterner(valueTexts), valueTexts };
      });
      if (sets !== undefined) return weeksOfOwnedValues(sets.cohorts, sets.resolved, owners!.single, valueTexts, returning, plan.breakdownLimit!);
    }
    const cohorts = firstEventsFromParts(segments, gather.references[0], gather.breakdown, cut, userLo, userHi) ?? cohortsFromRows(segments, gather, plan, userLo, userHi);
    if (cohorts === undefined) return undefined;
    const { valueTexts, periods: cohortPeriods, values: cohortValues } = cohorts;
    const slots = userHi - userLo;
    const noCohort = valueTexts.length;

    let ranked: ReturnType<typeof rankSeries> | undefined;
    if (plan.breakdownLimit !== undefined) {
      const weights = new Float64Array(noCohort + 1);
      for (let slot = 0; slot < slots; slot++) weights[cohortValues[slot]]++;
      const present = new Uint8Array(noCohort);
      for (let value = 0; value < noCohort; value++) present[value] = weights[value] > 0 ? 1 : 0;
      ranked = rankSeries(weights.subarray(0, noCohort), present, valueTexts, plan.breakdownLimit);
    }
    // Group 0 is everyone: with a breakdown, the sum of the other groups (each cohort user is in exactly one).
    const groupCount = ranked === undefined ? 1 : ranked.groupCount;
    const firstGroup = ranked === undefined ? 0 : 1;
    const groupOfValue = new Int32Array(noCohort + 1);
    if (ranked !== undefined) groupOfValue.set(ranked.groupOfValue);

    // Cohort users by cell ((1 + period) × groupCount + group; the cells of "period -1" hold the users without a
    // cohort), ascending within a cell: a counting sort over the slots in order. A user's value is read no more,
    // so its cell takes its place.
    const cells = cohortValues;
    const cellStarts = new Int32Array((periodCount + 1) * groupCount + 1);
    for (let slot = 0; slot < slots; slot++) {
      const cell = (cohortPeriods[slot] + 1) * groupCount + groupOfValue[cohortValues[slot]];
      cells[slot] = cell;
      cellStarts[cell + 1]++;
    }
    for (let cell = 0; cell < cellStarts.length - 1; cell++) cellStarts[cell + 1] += cellStarts[cell];
    const next = cellStarts.slice(0, cellStarts.length - 1);
    const users = cellUserScratch.get(slots);
    for (let slot = 0; slot < slots; slot++) users[next[cells[slot]]++] = userLo + slot;

    // Each group's weeks, flat.
    const weekStarts = weekStartsOf(periodCount);
    const groupCells = weekStarts[periodCount];
    const weeks = new Float64Array(groupCount * groupCells);
    for (let period = 0; period < periodCount; period++) {
      for (let group = firstGroup; group < groupCount; group++) {
        const cell = (period + 1) * groupCount + group;
        const size = cellStarts[cell + 1] - cellStarts[cell];
        if (size === 0) continue;
        const at = group * groupCells + weekStarts[period];
        weeks[at] = size;
        const cohort = new RoaringBitmap32(users.subarray(cellStarts[cell], cellStarts[cell + 1]));
        for (let later = period + 1; later < periodCount; later++) weeks[at + later - period] = cohort.andCardinality(returning[later].users);
        cohort.dispose();
      }
    }
    if (ranked !== undefined) for (let group = 1; group < groupCount; group++) for (let at = 0; at < groupCells; at++) weeks[at] += weeks[group * groupCells + at];

    return cohortsAnswer(weeks, weekStarts, ranked, valueTexts);
  } finally {
    for (const period of returning) if (period.owned) period.users.dispose();
  }
}

/** Without a breakdown, from per-period cohort sets (disposed here): each counted against each later period's users. */
function weeksOfSets(cohorts: Array<Bitmap | undefined>, returning: ReadonlyArray<{ users: Bitmap }>, periodCount: number): RetentionCohortsAnswer {
  const weekStarts = weekStartsOf(periodCount);
  const weeks = new Float64Array(weekStarts[periodCount]);
  try {
    for (let period = 0; period < periodCount; period++) {
      const cohort = cohorts[period];
      if (cohort === undefined || cohort.isEmpty) continue;
      weeks[weekStarts[period]] = cohort.size;
      for (let later = period + 1; later < periodCount; later++) weeks[weekStarts[period] + later - period] = cohort.andCardinality(returning[later].users);
    }
  } finally {
    for (const cohort of cohorts) cohort?.dispose();
  }
  return cohortsAnswer(weeks, weekStarts, undefined, [""]);
}

/**
 * With a breakdown, from per-period cohort sets (disposed here) and the
 * values' owners (value-owners.ts, `single`: per value id, the users seen
 * with that value alone): a cohort's users of one value are its users in
 * that set, and those whose value was read from rows (`resolved`, ids into
 * valueTexts). Each (period, group) of them is then counted against each
 * later period.
 */
function weeksOfOwnedValues(
  cohorts: Array<Bitmap | undefined>,
  resolved: ReadonlyArray<ResolvedValues | undefined>,
  single: ReadonlyArray<Bitmap | undefined>,
  valueTexts: readonly string[],
  returning: ReadonlyArray<{ users: Bitmap }>,
  breakdownLimit: number,
): RetentionCohortsAnswer {
  const periodCount = cohorts.length;
  // The values that may hold cohort users, compactly: valueTexts also holds every text of the columns rows were read from.
  const slotOfValue = new Int32Array(valueTexts.length).fill(-1);
  const valueOfSlot: number[] = [];
  const claim = (value: number) => {
    if (slotOfValue[value] < 0) {
      slotOfValue[value] = valueOfSlot.length;
      valueOfSlot.push(value);
    }
  };
  for (let value = 0; value < single.length; value++) if (single[value] !== undefined) claim(value);
  for (const read of resolved) if (read !== undefined) for (let index = 0; index < read.values.length; index++) claim(read.values[index]);
  const slotCount = valueOfSlot.length;
  const created: Bitmap[] = [];
  try {
    // cells[period × slotCount + slot]: the period's cohort users of that slot's value.
    const cells = new Array<Bitmap | undefined>(periodCount * slotCount).fill(undefined);
    const weights = new Float64Array(valueTexts.length);
    for (let period = 0; period < periodCount; period++) {
      const cohort = cohorts[period];
      if (cohort === undefined || cohort.isEmpty) continue;
      let placed = 0;
      for (let slot = 0; slot < slotCount; slot++) {
        const owned = single[valueOfSlot[slot]];
        if (owned === undefined) continue;
        const cell = RoaringBitmap32.and(cohort, owned);
        created.push(cell);
        if (cell.isEmpty) continue;
        cells[period * slotCount + slot] = cell;
        weights[valueOfSlot[slot]] += cell.size;
        placed += cell.size;
      }
      const read = resolved[period];
      if (read !== undefined) {
        // Grouped by value (a counting sort keeps each value's users ascending), then added a value at a time.
        const starts = new Int32Array(slotCount + 1);
        for (let index = 0; index < read.values.length; index++) starts[slotOfValue[read.values[index]] + 1]++;
        for (let slot = 0; slot < slotCount; slot++) starts[slot + 1] += starts[slot];
        const next = starts.slice(0, slotCount);
        const bySlot = new Uint32Array(read.users.length);
        for (let index = 0; index < read.users.length; index++) bySlot[next[slotOfValue[read.values[index]]]++] = read.users[index];
        for (let slot = 0; slot < slotCount; slot++) {
          if (starts[slot + 1] === starts[slot]) continue;
          const at = period * slotCount + slot;
          let cell = cells[at];
          if (cell === undefined) created.push((cells[at] = cell = new RoaringBitmap32()));
          cell.addMany(bySlot.subarray(starts[slot], starts[slot + 1]));
          weights[valueOfSlot[slot]] += starts[slot + 1] - starts[slot];
        }
        placed += read.users.length;
      }
      assert(placed === cohort.size, "every cohort user has one value");
    }
    const present = new Uint8Array(valueTexts.length);
    for (const value of valueOfSlot) present[value] = weights[value] > 0 ? 1 : 0;
    const ranked = rankSeries(weights, present, valueTexts, breakdownLimit);
    const slotsOf = Array.from({ length: ranked.groupCount }, () => [] as number[]);
    for (let slot = 0; slot < slotCount; slot++) if (present[valueOfSlot[slot]] === 1) slotsOf[ranked.groupOfValue[valueOfSlot[slot]]].push(slot);

    const weekStarts = weekStartsOf(periodCount);
    const groupCells = weekStarts[periodCount];
    const weeks = new Float64Array(ranked.groupCount * groupCells);
    for (let period = 0; period < periodCount; period++) {
      for (let group = 1; group < ranked.groupCount; group++) {
        const parts = slotsOf[group].map((slot) => cells[period * slotCount + slot]).filter((cell): cell is Bitmap => cell !== undefined);
        if (parts.length === 0) continue;
        const users = parts.length === 1 ? parts[0] : RoaringBitmap32.orMany(parts);
        if (parts.length > 1) created.push(users);
        const at = group * groupCells + weekStarts[period];
        weeks[at] = users.size;
        for (let later = period + 1; later < periodCount; later++) weeks[at + later - period] = users.andCardinality(returning[later].users);
      }
    }
    for (let group = 1; group < ranked.groupCount; group++) for (let at = 0; at < groupCells; at++) weeks[at] += weeks[group * groupCells + at];
    valueOwnersCounts.answered++;
    return cohortsAnswer(weeks, weekStarts, ranked, valueTexts);
  } finally {
    for (const bitmap of created) bitmap.dispose();
    for (const cohort of cohorts) cohort?.dispose();
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
function cohortsFromRows(segments: readonly SegmentView[], gather: GatherPlan, plan: RetentionCohortsPlan, userLo: number, userHi: number): FirstEvents | undefined {
  const scan = planColumnScan(segments, { ...gather, references: [gather.references[0]] }, plan.startsMs, userLo, userHi);
  if (scan === undefined) return undefined;
  const { valueTexts } = scan;
  const slots = userHi - userLo;
  const cohortPeriods = rowPeriodScratch.get(slots).subarray(0, slots).fill(-1);
  const cohortTimesMs = rowTimeScratch.get(slots);
  // Users without a cohort keep value `noCohort`, which the passes below count apart: they run without a branch per user.
  const noCohort = valueTexts.length;
  const cohortValues = rowValueScratch.get(slots).subarray(0, slots).fill(noCohort);
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
