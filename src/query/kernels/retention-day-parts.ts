/**
 * Retention of SPEC §7 whose retention event has no filters (the common
 * shape: "of the users who first did X, who came back at all"), in any time
 * zone, with or without cohort filters and a breakdown. The users who return
 * in a period are the event's users of that period: the union of the day
 * parts' user sets that trend-day-parts.ts keeps per worker, or the
 * segments' stored day sets. Over sealed rows, cohorts come from the same
 * kept sets (cohortsFromUnits): a part's users less those of earlier parts
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
import { compareValues, segmentReferences, valueInterner, type GatherPlan, type SegmentReference } from "./event-rows.js";
import type { RetentionCohortsAnswer, RetentionCohortsPlan } from "./retention-cohorts.js";
import { rankSeries } from "./series.js";
import { cohortsAnswer, weekStartsOf } from "./retention-columns.js";
import { ScratchFloat64, ScratchInt32, ScratchUint32 } from "./scratch.js";
import { lowerBoundUser, sealedShardRows, type RowRange } from "./rows.js";
import { sealedBucketUsers, sealedUnits, type MergedBuckets, type SealedUnit } from "./trend-day-parts.js";
import type { SegmentView, ValueIdColumn } from "../segment-view.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;

const shardRows: RowRange = { start: 0, end: 0 };
const memberScratch = new ScratchUint32();
const memberTimes = new ScratchFloat64();
const memberValueScratch = new ScratchInt32();

/** Whether a retention of this shape is answered here (given days of at most three parts). */
export function retentionDayPartsApplies(gather: GatherPlan): boolean {
  return !gather.allEvents && gather.math.kind === "none" && gather.references.length === 2 && gather.references[1].filters.length === 0;
}

export function retentionDayParts(segments: readonly SegmentView[], gather: GatherPlan, plan: RetentionCohortsPlan, userLo: number, userHi: number): RetentionCohortsAnswer | undefined {
  if (!retentionDayPartsApplies(gather)) return undefined;
  // Over mostly active rows (right after a load), the returns' sets are built from rows on every query, and the
  // cohort event read twice when it is the retention event: retention-columns.ts's one pass is faster then.
  const cut = partCut(plan);
  const returning = sealedBucketUsers(segments, gather.references[1].eventId, cut.startsMs, userLo, userHi, cut.merged);
  if (returning === undefined) return undefined;
  try {
    const periodCount = plan.startsMs.length - 1;
    const cohorts = cohortsFromUnits(segments, gather, cut, userLo, userHi) ?? cohortsFromRows(segments, gather, plan, userLo, userHi);
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
    const users = new Uint32Array(slots);
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

/**
 * Each shard user's cohort: its period (-1: none) and the breakdown value of
 * the row that placed it there (a task-wide id, 0 not set), or
 * valueTexts.length for users without a cohort.
 */
interface Cohorts {
  valueTexts: string[];
  periods: Int32Array;
  values: Int32Array;
}

/** Where days are cut into parts: at every local midnight when the plan lists them, each part in its period. */
interface PartCut {
  startsMs: Float64Array;
  merged: MergedBuckets | undefined;
}

function partCut(plan: RetentionCohortsPlan): PartCut {
  const days = plan.dayStartsMs;
  if (days === undefined) return { startsMs: plan.startsMs, merged: undefined };
  const periodCount = plan.startsMs.length - 1;
  assert(days[0] === plan.startsMs[0] && days[days.length - 1] === plan.startsMs[periodCount], "the local days span the periods");
  const of = new Int32Array(days.length - 1);
  for (let day = 0; day < of.length; day++) of[day] = boundaryIndex(plan.startsMs, days[day]);
  return { startsMs: days, merged: { of, count: periodCount } };
}

/** How often cohorts came from kept sets (the tests read it to know the path ran). */
export const cohortsFromPartsCounts = { answered: 0 };

/** A cohort filter reads a set per value of its property when a segment's property holds at most this many texts. */
const filterValuesMax = 256;

/**
 * Cohorts over sealed rows, from the kept parts' sets (trend-day-parts.ts)
 * instead of every cohort row: the cohort event's users of each part in time
 * order (with a filter, the union of the sets of the values it passes), less
 * the users seen in earlier parts, are the users whose first cohort event
 * lies in that part. Only those users' rows of that part are read, for the
 * breakdown value of their first one; without a breakdown, no row is. A
 * user's rows in a sealed segment are adjacent and in time order, so a
 * part's new users are found by one walk through its rows. Undefined when an
 * active segment holds cohort rows, the filters are more than one (a set per
 * value answers one), or its property has many texts.
 */
function cohortsFromUnits(segments: readonly SegmentView[], gather: GatherPlan, cut: PartCut, userLo: number, userHi: number): Cohorts | undefined {
  const reference = gather.references[0];
  const eventId = reference.eventId;
  if (eventId === undefined || reference.filters.length > 1) return undefined;
  const units = sealedUnits(segments, eventId, reference.filters[0]?.keyId, filterValuesMax, cut.startsMs, cut.merged);
  if (units === undefined) return undefined;
  const valueTexts = [""];
  const breakdown = gather.breakdown.kind === "key" ? breakdownReader(gather.breakdown.keyId, valueTexts) : undefined;
  // Every text first, so that "no cohort" (valueTexts.length) is known before any user is placed.
  if (breakdown !== undefined) for (const unit of units) breakdown.of(unit.segment);
  const slots = userHi - userLo;
  const periods = new Int32Array(slots).fill(-1);
  const values = new Int32Array(slots).fill(valueTexts.length);
  // The filter as each segment compiles it: no table (every row passes), one table, or null (no row passes).
  const filters = new Map<SegmentView, SegmentReference | null>();
  const filterOf = (segment: SegmentView) => {
    let compiled = filters.get(segment);
    if (compiled === undefined) filters.set(segment, (compiled = segmentReferences(segment, [reference]).get(eventId)?.[0] ?? null));
    return compiled;
  };
  const seen = new RoaringBitmap32();
  const sets: Bitmap[] = [];
  const owned: Bitmap[] = [];
  try {
    for (let first = 0; first < units.length; ) {
      // A day's parts of the same span in several segments are one part: a user first seen there may be in any of them.
      let end = first + 1;
      const startMs = units[first].segment.dayStartMs + units[first].lowMs;
      while (end < units.length && units[end].segment.dayStartMs + units[end].lowMs === startMs) end++;
      sets.length = 0;
      for (let at = first; at < end; at++) unitSets(units[at], filterOf(units[at].segment), sets, owned);
      const fresh = sets.length === 0 ? undefined : RoaringBitmap32.andNot(sets.length === 1 ? sets[0] : track(RoaringBitmap32.orMany(sets), owned), seen);
      if (fresh !== undefined) {
        fresh.removeRange(0, userLo);
        fresh.removeRange(userHi, 4294967296);
        seen.orInPlace(fresh);
        const members = fresh.toUint32Array(memberScratch.get(fresh.size));
        fresh.dispose();
        const period = units[first].bucket;
        if (breakdown === undefined) for (let index = 0; index < members.length; index++) periods[members[index] - userLo] = period;
        else {
          // Per member, not per slot: a part's members are spread over the shard, and its slots' entries over megabytes.
          const timesMs = memberTimes.get(members.length).fill(Infinity, 0, members.length);
          const memberValues = memberValueScratch.get(members.length);
          for (let at = first; at < end; at++) firstRows(units[at], eventId, filterOf(units[at].segment), breakdown, members, userLo, userHi, timesMs, memberValues, valueTexts);
          let unfound = 0;
          for (let index = 0; index < members.length; index++) {
            unfound += timesMs[index] === Infinity ? 1 : 0;
            const slot = members[index] - userLo;
            periods[slot] = period;
            values[slot] = memberValues[index];
          }
          assert(unfound === 0, "a part's set and its rows hold the same users");
        }
      }
      for (const bitmap of owned) bitmap.dispose();
      owned.length = 0;
      first = end;
    }
  } finally {
    seen.dispose();
    for (const bitmap of owned) bitmap.dispose();
  }
  cohortsFromPartsCounts.answered++;
  return { valueTexts, periods, values };
}

function track(bitmap: Bitmap, owned: Bitmap[]): Bitmap {
  owned.push(bitmap);
  return bitmap;
}

/** The unit's users whose rows pass the filter, into `sets` (a union, made here, into `owned` too). */
function unitSets(unit: SealedUnit, filter: SegmentReference | null, sets: Bitmap[], owned: Bitmap[]): void {
  if (filter === null) return;
  if (unit.values === undefined) {
    sets.push(unit.users!);
    return;
  }
  const passes = filter.passes.length === 0 ? undefined : filter.passes[0];
  const passing: Bitmap[] = [];
  for (let value = 0; value < unit.values.length; value++) {
    const users = unit.values[value];
    if (users !== undefined && (passes === undefined || passes[value] === 1)) passing.push(users);
  }
  if (passing.length === 1) sets.push(passing[0]);
  else if (passing.length > 1) sets.push(track(RoaringBitmap32.orMany(passing), owned));
}

/** The breakdown's per-segment reading: value ids, and task-wide ids of their texts (interned into valueTexts). */
interface BreakdownReader {
  of(segment: SegmentView): { valueIds: ValueIdColumn | undefined; globalIds: Int32Array };
}

function breakdownReader(keyId: number | undefined, valueTexts: string[]): BreakdownReader {
  const globalId = valueInterner(valueTexts);
  const bySegment = new Map<SegmentView, { valueIds: ValueIdColumn | undefined; globalIds: Int32Array }>();
  const none = { valueIds: undefined, globalIds: new Int32Array(1) };
  return {
    of(segment) {
      let reader = bySegment.get(segment);
      if (reader !== undefined) return reader;
      const column = keyId === undefined ? undefined : segment.property(keyId);
      if (column === undefined) reader = none;
      else {
        const globalIds = new Int32Array(Math.max(1, column.texts.length));
        for (let id = 1; id < column.texts.length; id++) globalIds[id] = globalId(column.texts[id]);
        reader = { valueIds: column.valueIds, globalIds };
      }
      bySegment.set(segment, reader);
      return reader;
    },
  };
}

/**
 * For each of `members` (ascending), its first row of the unit that passes
 * the filter, if earlier than timesMs[index] (ties to the least value, "not
 * set" first): its time and breakdown value, at the member's index. The unit's rows of the event
 * are sorted by user and time, so the members are found in one walk.
 */
function firstRows(
  unit: SealedUnit,
  eventId: number,
  filter: SegmentReference | null,
  breakdown: BreakdownReader,
  members: Uint32Array,
  userLo: number,
  userHi: number,
  timesMs: Float64Array,
  values: Int32Array,
  valueTexts: readonly string[],
): void {
  if (filter === null) return;
  const { segment, lowMs, highMs } = unit;
  const { userIds, timeOffsetMs, dayStartMs } = segment;
  const passes = filter.passes.length === 0 ? undefined : filter.passes[0];
  const filterIds = filter.passes.length === 0 ? undefined : filter.valueIds[0];
  const { valueIds, globalIds } = breakdown.of(segment);
  sealedShardRows(segment.eventRowStart!, userIds, eventId, userLo, userHi, shardRows);
  const end = shardRows.end;
  let row = shardRows.start;
  for (let index = 0; index < members.length && row < end; index++) {
    const user = members[index];
    row = seekUser(userIds, row, end, user);
    for (; row < end && userIds[row] === user; row++) {
      const offset = timeOffsetMs[row];
      if (offset < lowMs) continue;
      const timeMs = dayStartMs + offset;
      if (offset >= highMs || timeMs > timesMs[index]) break;
      if (passes !== undefined && passes[filterIds![row]] === 0) continue;
      const value = valueIds === undefined ? 0 : globalIds[valueIds[row]];
      if (timeMs < timesMs[index] || compareValues(valueTexts, value, values[index], true) < 0) {
        timesMs[index] = timeMs;
        values[index] = value;
      }
    }
  }
}

/**
 * The first row in [from, end) whose user is at least `user`: members are
 * found in row order, most a few rows on (a step at a time, in order in
 * memory, branches foreseen), the rest by galloping then bisecting.
 */
function seekUser(userIds: Uint32Array, from: number, end: number, user: number): number {
  const near = Math.min(end, from + 16);
  let row = from;
  while (row < near && userIds[row] < user) row++;
  if (row < near || row === end) return row;
  // userIds[low] < user throughout; the answer lies in (low, high].
  let low = row - 1;
  let step = 16;
  let high = low + step;
  while (high < end && userIds[high] < user) {
    low = high;
    step *= 2;
    high = low + step;
  }
  return lowerBoundUser(userIds, low + 1, Math.min(high, end), user);
}

/** Cohorts from the cohort event's rows, read by the column scan (any mix of sealed and active segments). */
function cohortsFromRows(segments: readonly SegmentView[], gather: GatherPlan, plan: RetentionCohortsPlan, userLo: number, userHi: number): Cohorts | undefined {
  const scan = planColumnScan(segments, { ...gather, references: [gather.references[0]] }, plan.startsMs, userLo, userHi);
  if (scan === undefined) return undefined;
  const { valueTexts } = scan;
  const slots = userHi - userLo;
  const cohortPeriods = new Int32Array(slots).fill(-1);
  const cohortTimesMs = new Float64Array(slots);
  // Users without a cohort keep value `noCohort`, which the passes below count apart: they run without a branch per user.
  const noCohort = valueTexts.length;
  const cohortValues = new Int32Array(slots).fill(noCohort);
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
