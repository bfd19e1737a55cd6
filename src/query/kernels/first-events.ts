/**
 * Each user's first event of one reference, in time order over parts of
 * sealed days, and the breakdown value of that event (SPEC §7.3: ties in time
 * to the least value, "not set" first): a retention's cohort. Answered from
 * the sets of users per part that trend-day-parts.ts keeps per worker,
 * reading only the rows of each user's first part.
 */
import { strict as assert } from "node:assert";
import roaring from "roaring";
import { compareValues, propertyReader, segmentReferences, valueInterner, type PropertyRead, type PropertyReader, type ReferencePlan, type SegmentReference } from "./event-rows.js";
import { lowerBoundUser, sealedShardRows, type RowRange } from "./rows.js";
import { ScratchFloat64, ScratchInt32, ScratchUint32 } from "./scratch.js";
import { keptPartsFit, sealedUnits, type MergedBuckets, type SealedUnit } from "./trend-day-parts.js";
import type { SegmentView } from "../segment-view.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;

const shardRows: RowRange = { start: 0, end: 0 };
const memberScratch = new ScratchUint32();
const memberTimes = new ScratchFloat64();
const memberValueScratch = new ScratchInt32();
// A shard's arrays are megabytes: allocated per task, they brought a full collection every few queries.
const periodScratch = new ScratchInt32();
const valueScratch = new ScratchInt32();

/**
 * A retention's cohorts, one of two forms. Per shard user (slot): the period
 * of its first event of the reference (-1: none), and that event's breakdown
 * value (a task-wide id, 0 not set; 0 without a period). Or, read from kept
 * sets without a breakdown, per period the set of users whose first event
 * lies in it (the caller's to dispose: disposeCohorts), every one holding
 * value 0. From firstEventsFromParts, the arrays are the thread's scratch,
 * valid until its next call.
 */
export type Cohorts = { valueTexts: string[]; periods: Int32Array; values: Int32Array; sets?: undefined } | { valueTexts: string[]; sets: Array<Bitmap | undefined> };

export function disposeCohorts(cohorts: Cohorts): void {
  if (cohorts.sets !== undefined) for (const users of cohorts.sets) users?.dispose();
}

/** Where days are cut into parts (startsMs), each part in a bucket of its own or, merged, of the query's. */
export interface PartCut {
  startsMs: Float64Array;
  merged: MergedBuckets | undefined;
}

/** How often first events came from kept sets (the tests read it to know the path ran). */
export const firstEventsFromPartsCounts = { answered: 0 };

/** A reference's filter reads a set per value of its property when a segment's property holds at most this many texts. */
const filterValuesMax = 256;

/**
 * Each shard user's first event of `reference` over sealed rows (a
 * retention's cohort), from the kept parts' sets
 * (trend-day-parts.ts) instead of every row: the event's users of each part
 * in time order (with a filter, the union of the sets of the values it
 * passes), less the users seen in earlier parts, are the users whose first
 * event lies in that part. Without a breakdown no row is read, and a
 * period's parts are one union. With one, only the new users' rows of the
 * part are read, for the breakdown value of their first one. A user's rows
 * in a sealed segment are adjacent and in time order, so a part's new users
 * are found by one walk through its rows. Undefined when an active segment
 * holds rows of the event, the filters are more than one (a set per value
 * answers one), its property has many texts, or the parts would not fit
 * the kept parts' budget.
 */
export function firstEventsFromParts(segments: readonly SegmentView[], reference: ReferencePlan, breakdownRead: PropertyRead, cut: PartCut, periodCount: number, userLo: number, userHi: number): Cohorts | undefined {
  const eventId = reference.eventId;
  if (eventId === undefined || reference.filters.length > 1) return undefined;
  const filterKey = reference.filters[0]?.keyId;
  const filterKeys = filterKey === undefined ? [] : [filterKey];
  if (!keptPartsFit(segments, eventId, filterKeys, cut.startsMs)) return undefined;
  const units = sealedUnits(segments, eventId, filterKey, filterValuesMax, cut.startsMs, cut.merged);
  if (units === undefined) return undefined;
  // A breakdown key never ingested holds "not set" on every row: no breakdown to read.
  const breakdownKey = breakdownRead.kind === "key" ? breakdownRead.keyId : undefined;
  const valueTexts = [""];
  const globalId = valueInterner(valueTexts);
  const readers = new Map<SegmentView, PropertyReader>();
  const readerOf = (segment: SegmentView) => {
    let reader = readers.get(segment);
    if (reader === undefined) readers.set(segment, (reader = propertyReader(segment, breakdownRead, globalId)));
    return reader;
  };
  const sets: Array<Bitmap | undefined> = new Array(periodCount).fill(undefined);
  // The filter as each segment compiles it: no table (every row passes), one table, or null (no row passes).
  const filters = new Map<SegmentView, SegmentReference | null>();
  const filterOf = (segment: SegmentView) => {
    let compiled = filters.get(segment);
    if (compiled === undefined) filters.set(segment, (compiled = segmentReferences(segment, [reference]).get(eventId)?.[0] ?? null));
    return compiled;
  };
  const slots = userHi - userLo;
  const slotPeriods = breakdownKey === undefined ? undefined : periodScratch.get(slots).subarray(0, slots).fill(-1);
  const slotValues = breakdownKey === undefined ? undefined : valueScratch.get(slots).subarray(0, slots).fill(0);
  const seen = new RoaringBitmap32();
  const partSets: Bitmap[] = [];
  const owned: Bitmap[] = [];
  try {
    for (let first = 0; first < units.length; ) {
      const period = units[first].bucket;
      // Without a breakdown only a user's period matters: a period's users less those of earlier ones, its parts' sets in one union.
      // With one, a day's parts of the same span in several segments are one part (a user first seen there may be in any of
      // them), and a part's new users have their rows of that part read.
      let end = first + 1;
      const startMs = units[first].segment.dayStartMs + units[first].lowMs;
      if (breakdownKey === undefined) while (end < units.length && units[end].bucket === period) end++;
      else while (end < units.length && units[end].segment.dayStartMs + units[end].lowMs === startMs) end++;
      partSets.length = 0;
      for (let at = first; at < end; at++) unitSets(units[at], filterOf(units[at].segment), partSets, owned);
      const fresh = partSets.length === 0 ? undefined : RoaringBitmap32.andNot(partSets.length === 1 ? partSets[0] : track(RoaringBitmap32.orMany(partSets), owned), seen);
      if (fresh !== undefined) {
        fresh.removeRange(0, userLo);
        fresh.removeRange(userHi, 4294967296);
        seen.orInPlace(fresh);
        // Units are in time order, so a period's are one run: one set each.
        if (slotPeriods === undefined) {
          assert(sets[period] === undefined, "a period's units are one run");
          sets[period] = fresh;
        }
        else {
          firstValuesFromRows(units, first, end, eventId, filterOf, readerOf, fresh, userLo, userHi, valueTexts, slotPeriods, slotValues!);
          fresh.dispose();
        }
      }
      for (const bitmap of owned) bitmap.dispose();
      owned.length = 0;
      first = end;
    }
  } catch (error) {
    disposeCohorts({ valueTexts, sets });
    throw error;
  } finally {
    seen.dispose();
    for (const bitmap of owned) bitmap.dispose();
  }
  firstEventsFromPartsCounts.answered++;
  return slotPeriods === undefined ? { valueTexts, sets } : { valueTexts, periods: slotPeriods, values: slotValues! };
}

/** Each of `members`' period and the breakdown value of its first row of units [first, end) that passes the filter, at its slot. */
function firstValuesFromRows(
  units: readonly SealedUnit[],
  first: number,
  end: number,
  eventId: number,
  filterOf: (segment: SegmentView) => SegmentReference | null,
  readerOf: (segment: SegmentView) => PropertyReader,
  members: Bitmap,
  userLo: number,
  userHi: number,
  valueTexts: readonly string[],
  periods: Int32Array,
  values: Int32Array,
): void {
  const list = members.toUint32Array(memberScratch.get(members.size));
  // Per member, not per slot: a part's members are spread over the shard, and its slots' entries over megabytes.
  const timesMs = memberTimes.get(list.length).fill(Infinity, 0, list.length);
  const memberValues = memberValueScratch.get(list.length);
  for (let at = first; at < end; at++) firstRows(units[at], eventId, filterOf(units[at].segment), readerOf(units[at].segment), list, userLo, userHi, timesMs, memberValues, valueTexts);
  const period = units[first].bucket;
  let unfound = 0;
  for (let index = 0; index < list.length; index++) {
    unfound += timesMs[index] === Infinity ? 1 : 0;
    const slot = list[index] - userLo;
    periods[slot] = period;
    values[slot] = memberValues[index];
  }
  assert(unfound === 0, "a part's set and its rows hold the same users");
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

/**
 * For each of `members` (ascending), its first row of the unit that passes
 * the filter, if earlier than timesMs[index] (ties to the least value, "not
 * set" first): its time and breakdown value, at the member's index. The
 * unit's rows of the event are sorted by user and time, so the members are
 * found in one walk.
 */
function firstRows(
  unit: SealedUnit,
  eventId: number,
  filter: SegmentReference | null,
  breakdown: PropertyReader,
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
  const { valueIds, globalIds } = breakdown;
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
