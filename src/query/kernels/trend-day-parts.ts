/**
 * A SPEC §7 trend `total` or `unique` of one event, without filters,
 * breakdown or math property, in any time zone, by day, week or month: the
 * shape of a dashboard's "users per day" in the team's zone. A time zone cuts
 * each UTC day (a segment's day) into at most a few parts, each in one bucket
 * (column-scan.ts). A sealed segment holds the event's rows sorted by (user,
 * time), so the users with a row in one part, and how many rows it holds, are
 * read once per (segment, event, part) and kept for the next query; a whole
 * day is the segment's stored user bitmap and row run, as in UTC. A bucket's
 * users are the union of its parts' bitmaps, counted within the task's users
 * by CRoaring, as trend.ts does for UTC days; only an active segment's rows
 * are read on every query. Without this, a zone other than UTC read every row
 * of the range on every query (~40× the time of the same trend in UTC).
 */
import roaring from "roaring";
import { dayMs } from "../buckets.js";
import type { SegmentView } from "../segment-view.js";
import { dayParts } from "./column-scan.js";
import type { GatherPlan } from "./event-rows.js";
import { sealedShardRows, type RowRange } from "./rows.js";
import { ScratchUint32 } from "./scratch.js";
import type { TrendSeriesAnswer, TrendSeriesPlan } from "./trend-series.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;

/** A day cut into more parts (hourly buckets) is read by the row scan. */
const partsPerDayMax = 3;

/** Per worker thread: the kept parts' bitmaps, least recently used dropped first. */
const dayPartsBytesMax = 32 * 1024 * 1024;
/** A bitmap's bytes, roughly: two per member in array containers, plus its object. */
const bitmapBytesPerMember = 2;
const bitmapBytesFixed = 64;

/** The users with a row of the event in one part of a sealed day, and how many rows it holds. */
interface DayPartUsers {
  users: Bitmap;
  rows: number;
  bytes: number;
}

/** Keyed by segment key, event and part: a sealed segment's rows never change under its key. */
const keptParts = new Map<string, DayPartUsers>();
let keptBytes = 0;
const userScratch = new ScratchUint32();
const shardRows: RowRange = { start: 0, end: 0 };

/** Whether a trend of this shape answers here (for every segment whose days have at most three parts). */
export function trendDayPartsApplies(gather: GatherPlan, plan: TrendSeriesPlan): boolean {
  if (plan.math !== "total" && plan.math !== "unique") return false;
  if (plan.breakdownLimit !== undefined || gather.allEvents || gather.references.length !== 1 || gather.math.kind !== "none") return false;
  return gather.references[0].filters.length === 0;
}

/** Whether every segment's day is cut into few enough parts by the buckets [startsMs[b], startsMs[b + 1]). */
export function dayPartsFit(segments: ReadonlyArray<{ dayStartMs: number }>, startsMs: Float64Array): boolean {
  return segments.every((segment) => dayParts(startsMs, segment.dayStartMs).length <= partsPerDayMax);
}

/** The trend for users [userLo, userHi); undefined when the shape is not this one, or a day has too many parts. */
export function trendDayParts(segments: readonly SegmentView[], gather: GatherPlan, plan: TrendSeriesPlan, userLo: number, userHi: number): TrendSeriesAnswer | undefined {
  if (!trendDayPartsApplies(gather, plan)) return undefined;
  const bucketCount = plan.startsMs.length - 1;
  const planned: Array<{ segment: SegmentView; parts: ReturnType<typeof dayParts> }> = [];
  for (const segment of segments) {
    if (segment.rowCount === 0) continue;
    const parts = dayParts(plan.startsMs, segment.dayStartMs);
    if (parts.length > partsPerDayMax) return undefined;
    if (parts.length > 0) planned.push({ segment, parts });
  }
  const unique = plan.math === "unique";
  const rows = new Float64Array(bucketCount);
  const bitmaps: Bitmap[][] = Array.from({ length: bucketCount }, () => []);
  const scanned: Array<Bitmap | undefined> = new Array(bucketCount).fill(undefined);
  const eventId = gather.references[0].eventId;
  if (eventId !== undefined && userLo < userHi) {
    for (const { segment, parts } of planned) {
      if (segment.eventRowStart !== undefined) {
        sealedShardRows(segment.eventRowStart, segment.userIds, eventId, userLo, userHi, shardRows);
        if (shardRows.start === shardRows.end) continue;
        const runStart = segment.eventRowStart[eventId];
        const runEnd = segment.eventRowStart[eventId + 1];
        const wholeRun = shardRows.start === runStart && shardRows.end === runEnd;
        for (const { lowMs, highMs, bucket } of parts) {
          const wholeDay = lowMs === 0 && highMs === dayMs;
          const stored = wholeDay && unique ? segment.userBitmap(eventId) : undefined;
          if (wholeDay && (!unique || stored !== undefined)) {
            rows[bucket] += shardRows.end - shardRows.start;
            if (stored !== undefined) bitmaps[bucket].push(stored);
            continue;
          }
          const part = sealedPart(segment, eventId, lowMs, highMs);
          if (unique) bitmaps[bucket].push(part.users);
          else rows[bucket] += wholeRun ? part.rows : rowsInPart(segment.timeOffsetMs, shardRows.start, shardRows.end, lowMs, highMs);
        }
        continue;
      }
      const eventRows = segment.eventRows(eventId);
      if (eventRows === undefined || eventRows.length === 0) continue;
      for (const { lowMs, highMs, bucket } of parts) {
        const users = userScratch.get(eventRows.length);
        const count = activeRowsInPart(eventRows, segment.userIds, segment.timeOffsetMs, userLo, userHi, lowMs, highMs, users);
        if (count === 0) continue;
        rows[bucket] += count;
        if (!unique) continue;
        const into = (scanned[bucket] ??= new RoaringBitmap32());
        into.addMany(users.subarray(0, count));
      }
    }
  }
  const values: Array<number | null> = new Array(bucketCount);
  for (let bucket = 0; bucket < bucketCount; bucket++) {
    if (!unique) {
      values[bucket] = rows[bucket];
      continue;
    }
    const sets = bitmaps[bucket];
    const own = scanned[bucket];
    if (own !== undefined) sets.push(own);
    if (sets.length === 0) values[bucket] = 0;
    else if (sets.length === 1) values[bucket] = sets[0].rangeCardinality(userLo, userHi);
    else if (sets.length === 2 && userLo === 0 && sets[0].maximum() < userHi && sets[1].maximum() < userHi) {
      // A day's two parts, every member in range: |A ∪ B| = |A| + |B| - |A ∩ B|, without building the union.
      values[bucket] = sets[0].size + sets[1].size - sets[0].andCardinality(sets[1]);
    } else {
      const union = RoaringBitmap32.orMany(sets);
      values[bucket] = union.rangeCardinality(userLo, userHi);
      union.dispose();
    }
    own?.dispose();
  }
  return { values, series: undefined, other: undefined };
}

/** The event's users and rows in [lowMs, highMs) of a sealed day, over all its users; read once, then kept. */
function sealedPart(segment: SegmentView, eventId: number, lowMs: number, highMs: number): DayPartUsers {
  const key = `${segment.key}/${eventId}/${lowMs}/${highMs}`;
  const kept = keptParts.get(key);
  if (kept !== undefined) {
    // Most recently used last: eviction walks the map from its start.
    keptParts.delete(key);
    keptParts.set(key, kept);
    return kept;
  }
  const { userIds, timeOffsetMs } = segment;
  const start = segment.eventRowStart![eventId];
  const end = segment.eventRowStart![eventId + 1];
  const users = userScratch.get(end - start);
  // Rows are sorted by user: a user is listed at its first row in the part, so the list is ascending and has no repeats.
  let userCount = 0;
  let rows = 0;
  let lastUser = -1;
  for (let row = start; row < end; row++) {
    const offset = timeOffsetMs[row];
    if (offset < lowMs || offset >= highMs) continue;
    rows++;
    const user = userIds[row];
    if (user === lastUser) continue;
    users[userCount++] = user;
    lastUser = user;
  }
  const bitmap = new RoaringBitmap32();
  bitmap.addMany(users.subarray(0, userCount));
  const part: DayPartUsers = { users: bitmap, rows, bytes: bitmapBytesFixed + bitmapBytesPerMember * userCount };
  keptParts.set(key, part);
  keptBytes += part.bytes;
  // Not disposed when dropped: a query running now may still hold it; the collector frees it.
  for (const [oldKey, old] of keptParts) {
    if (keptBytes <= dayPartsBytesMax || oldKey === key) break;
    keptParts.delete(oldKey);
    keptBytes -= old.bytes;
  }
  return part;
}

/** Sealed rows [start, end) whose time offset lies in [lowMs, highMs). */
function rowsInPart(timeOffsetMs: Uint32Array, start: number, end: number, lowMs: number, highMs: number): number {
  let count = 0;
  for (let row = start; row < end; row++) {
    const offset = timeOffsetMs[row];
    count += offset >= lowMs && offset < highMs ? 1 : 0;
  }
  return count;
}

/** An active segment's event rows with a user in [userLo, userHi) and an offset in [lowMs, highMs): their users into `users`, in row order; returns how many. */
function activeRowsInPart(eventRows: Uint32Array, userIds: Uint32Array, timeOffsetMs: Uint32Array, userLo: number, userHi: number, lowMs: number, highMs: number, users: Uint32Array): number {
  let count = 0;
  for (let index = 0; index < eventRows.length; index++) {
    const row = eventRows[index];
    const user = userIds[row];
    const offset = timeOffsetMs[row];
    users[count] = user;
    count += user >= userLo && user < userHi && offset >= lowMs && offset < highMs ? 1 : 0;
  }
  return count;
}
