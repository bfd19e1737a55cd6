/**
 * Retention kernel (SPEC §4): cohorts by period of first cohortEvent, and for
 * each cohort the users with a retentionEvent in each later period, for the
 * users of one shard [userLo, userHi). Workers run it per shard and sum the
 * partials, exact because shards hold disjoint users.
 *
 * Periods are whole days, so a day segment lies in exactly one period and the
 * per-event user bitmaps of sealed segments answer "who did E in period p"
 * exactly: the period's set is the OR of its days' bitmaps, cut to the shard's
 * user range. Segments without a bitmap (active ones, or sealed ones whose
 * bitmap is not available) add their rows' users instead. Then:
 *   cohort(p)   = did(cohortEvent, p) minus did(cohortEvent, any earlier period)
 *   weeks[p][k] = |cohort(p) ∩ did(retentionEvent, p + k)|
 * With few periods the intersections are counted by CRoaring directly
 * (P·(P-1)/2 calls); with many (up to 1 000 periods is 500 000 pairs) each
 * user's cohort is written to a per-user array once and every retention set
 * is walked once instead.
 */
import roaring from "roaring";
import type { SegmentView } from "../segment-view.js";
import { EpochMarks, ScratchUint32 } from "./scratch.js";
import { segmentsByDay, sealedShardRows, selectActiveUsers, type RowRange } from "./rows.js";
import { sumPartials } from "./partials.js";

const { RoaringBitmap32 } = roaring;
type RoaringBitmap32 = InstanceType<typeof RoaringBitmap32>;

export interface RetentionPlan {
  /** Workspace event ids; undefined for a name never ingested. */
  cohortEventId: number | undefined;
  retentionEventId: number | undefined;
  /** dateFrom 00:00 UTC. */
  fromMs: number;
  /** windowDays × 86 400 000. */
  periodMs: number;
  periodCount: number;
  /** dateTo + 1 day 00:00 UTC: the last period is cut here. */
  toMsExclusive: number;
}

export interface RetentionPartial {
  /** Users per cohort, one per period. */
  totals: Float64Array;
  /** Cohort p's weeks (P - p entries, weeks[0] = total) start at retentionWeeksOffset(P, p). */
  weeks: Float64Array;
}

/** Above this many (cohort, later period) pairs, intersections are counted per user instead of per pair. */
const bitmapPairsMax = 2048;
const userSpaceEnd = 2 ** 32;

/** Which cohort each user of the shard belongs to (mark - base), for the many-periods path. */
const userCohortMarks = new EpochMarks();
const userScratch = new ScratchUint32();
const shardRows: RowRange = { start: 0, end: 0 };

/** Where cohort `period`'s weeks start in the flattened array: P + (P - 1) + … over earlier cohorts. */
export function retentionWeeksOffset(periodCount: number, period: number): number {
  return period * periodCount - (period * (period - 1)) / 2;
}

/** True when every count comes from CRoaring pair intersections; otherwise each user's cohort is looked up per retention set (see countReturnsByUser). */
export function retentionCountsByPair(periodCount: number): boolean {
  return (periodCount * (periodCount - 1)) / 2 <= bitmapPairsMax;
}

export function retentionWeeksLength(periodCount: number): number {
  return (periodCount * (periodCount + 1)) / 2;
}

export function retentionPartial(
  segments: readonly SegmentView[],
  plan: RetentionPlan,
  userLo: number,
  userHi: number,
): RetentionPartial {
  const periodCount = plan.periodCount;
  const totals = new Float64Array(periodCount);
  const weeks = new Float64Array(retentionWeeksLength(periodCount));
  if (plan.cohortEventId === undefined || userLo >= userHi) return { totals, weeks };

  const created: RoaringBitmap32[] = [];
  try {
    const order = segmentsByDay(segments, plan.fromMs, plan.toMsExclusive);
    const didCohortEvent = periodUserSets(segments, order, plan.cohortEventId, plan, userLo, userHi, created);
    const didRetentionEvent =
      plan.retentionEventId === undefined
        ? new Array<RoaringBitmap32 | undefined>(periodCount)
        : plan.retentionEventId === plan.cohortEventId
          ? didCohortEvent
          : periodUserSets(segments, order, plan.retentionEventId, plan, userLo, userHi, created);

    // A user's cohort is the first period in which it did the cohort event.
    const cohorts = new Array<RoaringBitmap32 | undefined>(periodCount);
    const earlier = new RoaringBitmap32();
    created.push(earlier);
    for (let period = 0; period < periodCount; period++) {
      const did = didCohortEvent[period];
      if (did === undefined) continue;
      const cohort = RoaringBitmap32.andNot(did, earlier);
      created.push(cohort);
      earlier.orInPlace(did);
      cohorts[period] = cohort;
      totals[period] = cohort.size;
      weeks[retentionWeeksOffset(periodCount, period)] = cohort.size;
    }

    if (retentionCountsByPair(periodCount)) {
      countReturnsByPair(cohorts, didRetentionEvent, weeks);
    } else {
      countReturnsByUser(cohorts, didRetentionEvent, weeks, userLo);
    }
    return { totals, weeks };
  } finally {
    for (const bitmap of created) bitmap.dispose();
  }
}

/** Sum of the shards' partials. */
export function mergeRetentionPartials(partials: readonly RetentionPartial[]): RetentionPartial {
  return {
    totals: sumPartials(partials.map((partial) => partial.totals)),
    weeks: sumPartials(partials.map((partial) => partial.weeks)),
  };
}

/**
 * For each period, the shard's users having at least one row of eventId in it
 * (undefined when none could have: no segment of that period has the event).
 */
function periodUserSets(
  segments: readonly SegmentView[],
  order: readonly number[],
  eventId: number,
  plan: RetentionPlan,
  userLo: number,
  userHi: number,
  created: RoaringBitmap32[],
): (RoaringBitmap32 | undefined)[] {
  const periodCount = plan.periodCount;
  const dayBitmaps: RoaringBitmap32[][] = [];
  const scannedUsers = new Array<RoaringBitmap32 | undefined>(periodCount);
  for (let period = 0; period < periodCount; period++) dayBitmaps.push([]);

  for (const segmentIndex of order) {
    const segment = segments[segmentIndex];
    const period = Math.floor((segment.dayStartMs - plan.fromMs) / plan.periodMs);
    if (period < 0 || period >= periodCount) continue;
    const bitmap = segment.userBitmap(eventId);
    if (bitmap !== undefined) {
      dayBitmaps[period].push(bitmap);
      continue;
    }
    let users: Uint32Array;
    if (segment.eventRowStart !== undefined) {
      sealedShardRows(segment.eventRowStart, segment.userIds, eventId, userLo, userHi, shardRows);
      users = segment.userIds.subarray(shardRows.start, shardRows.end);
    } else {
      const rows = segment.eventRows(eventId)!;
      const scratch = userScratch.get(rows.length);
      users = scratch.subarray(0, selectActiveUsers(rows, segment.userIds, userLo, userHi, scratch));
    }
    if (users.length === 0) continue;
    let scanned = scannedUsers[period];
    if (scanned === undefined) {
      scanned = new RoaringBitmap32();
      created.push(scanned);
      scannedUsers[period] = scanned;
    }
    scanned.addMany(users);
  }

  const sets = new Array<RoaringBitmap32 | undefined>(periodCount);
  for (let period = 0; period < periodCount; period++) {
    const bitmaps = dayBitmaps[period];
    const scanned = scannedUsers[period];
    if (bitmaps.length === 0) {
      // Scanned users are already inside the shard.
      sets[period] = scanned;
      continue;
    }
    if (scanned !== undefined) bitmaps.push(scanned);
    const union = RoaringBitmap32.orMany(bitmaps);
    created.push(union);
    if (userLo > 0) union.removeRange(0, userLo);
    if (userHi < userSpaceEnd) union.removeRange(userHi, userSpaceEnd);
    sets[period] = union;
  }
  return sets;
}

/** weeks[p][k] = |cohort(p) ∩ did(p + k)|, one CRoaring intersection count per pair. */
function countReturnsByPair(
  cohorts: readonly (RoaringBitmap32 | undefined)[],
  didRetentionEvent: readonly (RoaringBitmap32 | undefined)[],
  weeks: Float64Array,
): void {
  const periodCount = cohorts.length;
  for (let period = 0; period < periodCount; period++) {
    const cohort = cohorts[period];
    if (cohort === undefined || cohort.isEmpty) continue;
    const offset = retentionWeeksOffset(periodCount, period);
    for (let later = period + 1; later < periodCount; later++) {
      const did = didRetentionEvent[later];
      if (did !== undefined) weeks[offset + later - period] = cohort.andCardinality(did);
    }
  }
}

/** Same counts, by writing each user's cohort once and walking every retention set once. */
function countReturnsByUser(
  cohorts: readonly (RoaringBitmap32 | undefined)[],
  didRetentionEvent: readonly (RoaringBitmap32 | undefined)[],
  weeks: Float64Array,
  userLo: number,
): void {
  const periodCount = cohorts.length;
  const base = userCohortMarks.claim(periodCount);
  let marks = userCohortMarks.values;
  for (let period = 0; period < periodCount; period++) {
    const cohort = cohorts[period];
    if (cohort === undefined || cohort.isEmpty) continue;
    const users = cohort.toUint32Array(userScratch.get(cohort.size));
    const mark = base + period;
    for (let index = 0; index < users.length; index++) {
      const slot = users[index] - userLo;
      if (slot >= marks.length) marks = userCohortMarks.grow(slot + 1);
      marks[slot] = mark;
    }
  }
  const cohortOffsets = new Float64Array(periodCount);
  for (let period = 0; period < periodCount; period++) cohortOffsets[period] = retentionWeeksOffset(periodCount, period);
  for (let later = 1; later < periodCount; later++) {
    const did = didRetentionEvent[later];
    if (did === undefined || did.isEmpty) continue;
    const users = did.toUint32Array(userScratch.get(did.size));
    for (let index = 0; index < users.length; index++) {
      const slot = users[index] - userLo;
      if (slot >= marks.length) continue;
      const cohort = marks[slot] - base;
      if (cohort >= 0 && cohort < later) weeks[cohortOffsets[cohort] + later - cohort]++;
    }
  }
}
