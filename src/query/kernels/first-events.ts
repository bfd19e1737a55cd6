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
 * Each shard user's first event: the bucket of its part (-1: none), and its
 * breakdown value (a task-wide id, 0 not set), or valueTexts.length for
 * users without one. From firstEventsFromParts, the arrays are the thread's
 * scratch, valid until its next call.
 */
export interface FirstEvents {
  valueTexts: string[];
  periods: Int32Array;
  values: Int32Array;
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
 * event lies in that part. Only those users' rows of that part are read, for
 * the breakdown value of their first one; without a breakdown, no row is. A
 * user's rows in a sealed segment are adjacent and in time order, so a
 * part's new users are found by one walk through its rows. Undefined when an
 * active segment holds rows of the event, the filters are more than one (a
 * set per value answers one), its property has many texts, or the parts
 * would not fit the kept parts' budget.
 */
export function firstEventsFromParts(segments: readonly SegmentView[], reference: ReferencePlan, breakdownRead: PropertyRead, cut: PartCut, userLo: number, userHi: number): FirstEvents | undefined {
  const parts = keptUnits(segments, reference, cut);
  if (parts === undefined) return undefined;
  const { eventId, units, filterOf } = parts;
  const valueTexts = [""];
  const globalId = valueInterner(valueTexts);
  // Each segment's breakdown reader, every text first, so that "none" (valueTexts.length) is known before any user is placed.
  const breakdown = breakdownRead.kind === "key" ? new Map<SegmentView, PropertyReader>() : undefined;
  if (breakdown !== undefined) for (const { segment } of units) if (!breakdown.has(segment)) breakdown.set(segment, propertyReader(segment, breakdownRead, globalId));
  const slots = userHi - userLo;
  const periods = periodScratch.get(slots).subarray(0, slots).fill(-1);
  const values = valueScratch.get(slots).subarray(0, slots).fill(valueTexts.length);
  const seen = new RoaringBitmap32();
  try {
    for (let first = 0; first < units.length; ) {
      // A day's parts of the same span in several segments are one part: a user first seen there may be in any of them.
      const end = spanEnd(units, first, units.length);
      const fresh = newUsersOf(units, first, end, filterOf, seen, userLo, userHi);
      if (fresh !== undefined) {
        const members = fresh.toUint32Array(memberScratch.get(fresh.size));
        fresh.dispose();
        const period = units[first].bucket;
        if (breakdown === undefined) {
          for (let index = 0; index < members.length; index++) {
            periods[members[index] - userLo] = period;
            values[members[index] - userLo] = 0;
          }
        } else {
          // Per member, not per slot: a part's members are spread over the shard, and its slots' entries over megabytes.
          const timesMs = memberTimes.get(members.length).fill(Infinity, 0, members.length);
          const memberValues = memberValueScratch.get(members.length);
          for (let at = first; at < end; at++) firstRows(units[at], eventId, filterOf(units[at].segment), breakdown.get(units[at].segment)!, members, userLo, userHi, timesMs, memberValues, valueTexts);
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
      first = end;
    }
  } finally {
    seen.dispose();
  }
  firstEventsFromPartsCounts.answered++;
  return { valueTexts, periods, values };
}

/** Per period, cohort users whose value was read from rows (ascending within each part read), and their values. */
export interface ResolvedValues {
  users: Uint32Array;
  values: Int32Array;
}

/** The cohort users whose breakdown value cohortSetsFromParts reads from rows, and how. */
export interface ValuesToResolve {
  users: Bitmap;
  breakdown: PropertyRead;
  globalId: (text: string) => number;
  valueTexts: readonly string[];
}

/**
 * Per period, the users whose first event of `reference` lies in it, as sets
 * (the caller's to dispose): the union of the period's parts' kept sets less
 * the users of earlier periods. No row is read and no user visited one by
 * one, but for the cohort users of `resolveOf()`: their first row's breakdown
 * value (firstEventsFromParts's rule) is read from the period's parts.
 * resolveOf is asked once the kept sets are known to answer (what it returns
 * may cost rows to build); undefined from it, or where firstEventsFromParts
 * is undefined, answers undefined.
 */
export function cohortSetsFromParts(
  segments: readonly SegmentView[],
  reference: ReferencePlan,
  cut: PartCut,
  periodCount: number,
  userLo: number,
  userHi: number,
  resolveOf?: () => ValuesToResolve | undefined,
): { cohorts: Array<Bitmap | undefined>; resolved: Array<ResolvedValues | undefined> } | undefined {
  const parts = keptUnits(segments, reference, cut);
  if (parts === undefined) return undefined;
  const resolve = resolveOf?.();
  if (resolveOf !== undefined && resolve === undefined) return undefined;
  const { eventId, units, filterOf } = parts;
  const cohorts = new Array<Bitmap | undefined>(periodCount).fill(undefined);
  const resolved = new Array<ResolvedValues | undefined>(periodCount).fill(undefined);
  const readers = new Map<SegmentView, PropertyReader>();
  const readerOf = (segment: SegmentView) => {
    let reader = readers.get(segment);
    if (reader === undefined) readers.set(segment, (reader = propertyReader(segment, resolve!.breakdown, resolve!.globalId)));
    return reader;
  };
  const seen = new RoaringBitmap32();
  try {
    for (let first = 0; first < units.length; ) {
      // Units are in time order, so a period's are one run.
      const period = units[first].bucket;
      let end = first + 1;
      while (end < units.length && units[end].bucket === period) end++;
      const fresh = newUsersOf(units, first, end, filterOf, seen, userLo, userHi);
      cohorts[period] = fresh;
      if (resolve !== undefined && fresh !== undefined) resolved[period] = resolveValues(units, first, end, filterOf, readerOf, RoaringBitmap32.and(fresh, resolve.users), eventId, userLo, userHi, resolve.valueTexts);
      first = end;
    }
  } catch (error) {
    for (const users of cohorts) users?.dispose();
    throw error;
  } finally {
    seen.dispose();
  }
  firstEventsFromPartsCounts.answered++;
  return { cohorts, resolved };
}

/**
 * The breakdown values of `picked` (disposed here), users whose first event
 * lies in units [first, end): the period's parts, in time order. Each user's
 * rows are read in its first part alone (parts of one span, in several
 * segments, together), as firstEventsFromParts does.
 */
function resolveValues(
  units: readonly SealedUnit[],
  first: number,
  end: number,
  filterOf: (segment: SegmentView) => SegmentReference | null,
  readerOf: (segment: SegmentView) => PropertyReader,
  picked: Bitmap,
  eventId: number,
  userLo: number,
  userHi: number,
  valueTexts: readonly string[],
): ResolvedValues | undefined {
  const found: ResolvedValues[] = [];
  try {
    for (let spanFirst = first; spanFirst < end && !picked.isEmpty; ) {
      const spanLast = spanEnd(units, spanFirst, end);
      const owned: Bitmap[] = [];
      try {
        const spanUsers = unitsUsers(units, spanFirst, spanLast, filterOf, owned);
        const hit = spanUsers === undefined ? undefined : track(RoaringBitmap32.and(picked, spanUsers), owned);
        if (hit !== undefined && !hit.isEmpty) {
          picked.andNotInPlace(hit);
          const users = hit.toUint32Array();
          const timesMs = new Float64Array(users.length).fill(Infinity);
          const values = new Int32Array(users.length);
          for (let at = spanFirst; at < spanLast; at++) firstRows(units[at], eventId, filterOf(units[at].segment), readerOf(units[at].segment), users, userLo, userHi, timesMs, values, valueTexts);
          assert(timesMs.every((timeMs) => timeMs !== Infinity), "a part's set and its rows hold the same users");
          found.push({ users, values });
        }
      } finally {
        for (const bitmap of owned) bitmap.dispose();
      }
      spanFirst = spanLast;
    }
    assert(picked.isEmpty, "every user of a period's set has a first part in it");
  } finally {
    picked.dispose();
  }
  if (found.length <= 1) return found[0];
  const count = found.reduce((sum, one) => sum + one.users.length, 0);
  const joined: ResolvedValues = { users: new Uint32Array(count), values: new Int32Array(count) };
  let at = 0;
  for (const one of found) {
    joined.users.set(one.users, at);
    joined.values.set(one.values, at);
    at += one.users.length;
  }
  return joined;
}

/**
 * The users of units [first, end) with a row that passes the filter, less
 * `seen`, within the shard [userLo, userHi): a new set, also added to `seen`;
 * undefined when no unit has such users.
 */
function newUsersOf(
  units: readonly SealedUnit[],
  first: number,
  end: number,
  filterOf: (segment: SegmentView) => SegmentReference | null,
  seen: Bitmap,
  userLo: number,
  userHi: number,
): Bitmap | undefined {
  const owned: Bitmap[] = [];
  try {
    const users = unitsUsers(units, first, end, filterOf, owned);
    if (users === undefined) return undefined;
    const fresh = RoaringBitmap32.andNot(users, seen);
    fresh.removeRange(0, userLo);
    fresh.removeRange(userHi, 4294967296);
    seen.orInPlace(fresh);
    return fresh;
  } finally {
    for (const bitmap of owned) bitmap.dispose();
  }
}

/** The end of the span starting at units[first] (before `end`): the units of the same start, a day's part in several segments. */
function spanEnd(units: readonly SealedUnit[], first: number, end: number): number {
  const startMs = units[first].segment.dayStartMs + units[first].lowMs;
  let last = first + 1;
  while (last < end && units[last].segment.dayStartMs + units[last].lowMs === startMs) last++;
  return last;
}

/** The users of units [first, end) with a row that passes the filter, over all users; undefined when none has such users. A set made here goes into `owned`. */
function unitsUsers(units: readonly SealedUnit[], first: number, end: number, filterOf: (segment: SegmentView) => SegmentReference | null, owned: Bitmap[]): Bitmap | undefined {
  const sets: Bitmap[] = [];
  for (let at = first; at < end; at++) unitSets(units[at], filterOf(units[at].segment), sets, owned);
  if (sets.length === 0) return undefined;
  return sets.length === 1 ? sets[0] : track(RoaringBitmap32.orMany(sets), owned);
}

/** The reference's sealed units over the cut and its filter per segment; undefined where the kept sets cannot answer (see firstEventsFromParts). */
function keptUnits(segments: readonly SegmentView[], reference: ReferencePlan, cut: PartCut): { eventId: number; units: SealedUnit[]; filterOf: (segment: SegmentView) => SegmentReference | null } | undefined {
  const eventId = reference.eventId;
  if (eventId === undefined || reference.filters.length > 1) return undefined;
  const keyId = reference.filters[0]?.keyId;
  if (!keptPartsFit(segments, eventId, keyId === undefined ? [] : [keyId], cut.startsMs)) return undefined;
  const units = sealedUnits(segments, eventId, keyId, filterValuesMax, cut.startsMs, cut.merged);
  if (units === undefined) return undefined;
  // The filter as each segment compiles it: no table (every row passes), one table, or null (no row passes).
  const filters = new Map<SegmentView, SegmentReference | null>();
  const filterOf = (segment: SegmentView) => {
    let compiled = filters.get(segment);
    if (compiled === undefined) filters.set(segment, (compiled = segmentReferences(segment, [reference]).get(eventId)?.[0] ?? null));
    return compiled;
  };
  return { eventId, units, filterOf };
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
