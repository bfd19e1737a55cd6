/**
 * A SPEC §7 trend `total` or `unique` of one event, without filters or math
 * property, with or without a breakdown, in any time zone, by day, week or
 * month: the shape of a dashboard's "users per day" in the team's zone, or
 * "users per day by country". A time zone cuts
 * each UTC day (a segment's day) into at most a few parts, each in one bucket
 * (column-scan.ts). A sealed segment holds the event's rows sorted by (user,
 * time), so the users with a row in one part, and how many rows it holds, are
 * read once per (segment, event, part) and kept for the next query; a whole
 * day is the segment's stored user bitmap and row run, as in UTC. A bucket's
 * users are the union of its parts' bitmaps, counted within the task's users
 * by CRoaring, as trend.ts does for UTC days. An active segment's parts are
 * kept by the worker's index of it (active-index.ts) and extended by the rows
 * that arrived since, so fresh rows too are read once. Without this, a zone
 * other than UTC read every row of the range on every query.
 *
 * A breakdown keeps, per part, one bitmap and one row count per value of the
 * property (the segment's value ids, mapped to task-wide ids by text). A
 * value's weight (SPEC §7.3's rank) is the union of its bitmaps over the
 * range, or its rows; "other" unions the left-out values per bucket. Over
 * sealed parts only, `unique` counts (a bucket's, a value's cells and
 * weights) come instead from an index of previous parts (previous-parts.ts),
 * without unions.
 */
import { strict as assert } from "node:assert";
import roaring from "roaring";
import { dayMs } from "../buckets.js";
import type { PartValueUsers, SegmentView } from "../segment-view.js";
import { dayParts } from "./column-scan.js";
import type { GatherPlan } from "./event-rows.js";
import { askedAgain, buildPreviousParts, dropPreviousParts, keptPreviousParts, partKey, previousPartsCounts, refusedBefore, wholeKeyId, type PreviousParts, type UnitPart } from "./previous-parts.js";
import { sealedEventRowCount, sealedShardRows, type RowRange } from "./rows.js";
import { ScratchInt32, ScratchUint32 } from "./scratch.js";
import { rankSeries, valueOf } from "./series.js";
import type { BucketValues, TrendSeriesAnswer, TrendSeriesPlan } from "./trend-series.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;

/** A day cut into more parts (hourly buckets) is read by the row scan. */
const partsPerDayMax = 3;

/** Per worker thread: the kept parts' bitmaps, least recently used dropped first. */
let dayPartsBytesMax = 48 * 1024 * 1024;

/** Sets this thread's budget of kept parts (tests: a small one), and returns the one before. */
export function setDayPartsBudget(bytes: number): number {
  const before = dayPartsBytesMax;
  dayPartsBytesMax = bytes;
  return before;
}
/** A bitmap's bytes, roughly: two per member in array containers, plus its object. */
const bitmapBytesPerMember = 2;
const bitmapBytesFixed = 64;

/** The users with a row of the event in one part of a sealed day, and how many rows it holds. */
interface DayPartUsers {
  users: Bitmap;
  rows: number;
  bytes: number;
}

/** The users and rows of each value of one property in one part of a sealed day; index: the segment's value id (0: not set). */
interface DayPartValues {
  users: Array<Bitmap | undefined>;
  rows: Uint32Array;
  bytes: number;
}

/** Breakdown values one task may hold here; more go through the row scan. */
const breakdownValuesMax = 4096;
const noTexts: readonly string[] = [""];

/** Keyed by segment key, event, part (and property): a sealed segment's rows never change under its key. */
const keptParts = new Map<string, DayPartUsers | DayPartValues>();
let keptBytes = 0;
const userScratch = new ScratchUint32();
const memberScratch = new ScratchUint32();
const wordScratch = new ScratchInt32();
const partScratch = new ScratchInt32();
const shardRows: RowRange = { start: 0, end: 0 };

/** How many day parts this thread keeps (the tests read it to know what a query read). */
export function keptPartCount(): number {
  return keptParts.size;
}

/** Whether a trend of this shape answers here (for every segment whose days have at most three parts). */
export function trendDayPartsApplies(gather: GatherPlan, plan: TrendSeriesPlan): boolean {
  if (plan.math !== "total" && plan.math !== "unique") return false;
  if ((plan.breakdownLimit !== undefined) !== (gather.breakdown.kind === "key")) return false;
  if (gather.allEvents || gather.references.length !== 1 || gather.math.kind !== "none") return false;
  return gather.references[0].filters.length === 0;
}

/** An active segment's users and rows of the event in a part, per value id of keyId (all at id 0 when no row sets it). */
function keptActivePart(segment: SegmentView, eventId: number, keyId: number | undefined, lowMs: number, highMs: number): PartValueUsers | undefined {
  if (keyId !== undefined && segment.property(keyId) !== undefined) return segment.partValueUsers(eventId, keyId, lowMs, highMs);
  const whole = segment.partUsers(eventId, lowMs, highMs);
  return whole === undefined ? undefined : { users: [whole.users], rows: Uint32Array.of(whole.rows), userMax: whole.userMax };
}

/** Whether a day cut into this many parts by the buckets (column-scan.ts, dayParts) is read here. */
export function dayPartsFit(partCount: number): boolean {
  return partCount <= partsPerDayMax;
}

/** The trend for users [userLo, userHi); undefined when the shape is not this one, or a day has too many parts. */
export function trendDayParts(segments: readonly SegmentView[], gather: GatherPlan, plan: TrendSeriesPlan, userLo: number, userHi: number): TrendSeriesAnswer | undefined {
  if (!trendDayPartsApplies(gather, plan)) return undefined;
  const planned = plannedDays(segments, plan.startsMs);
  if (planned === undefined) return undefined;
  const eventId = gather.references[0].eventId;
  // A unique count over every user may come from an index of the range's sealed parts (previous-parts.ts).
  const units = plan.math === "unique" && eventId !== undefined && userLo === 0 ? rangeUnits(planned, eventId) : undefined;
  if (plan.breakdownLimit === undefined) return { values: wholeValues(planned, gather, plan, units, userLo, userHi), series: undefined, other: undefined };
  if (!mostlySealed(planned, eventId)) return undefined;
  const keyId = (gather.breakdown as { keyId: number | undefined }).keyId;
  const series = breakdownSeries(planned, gather, plan, keyId, units, userLo, userHi);
  if (series === undefined) return undefined;
  // The whole answer: the same trend without the breakdown, from the same kept parts.
  return { values: wholeValues(planned, gather, plan, units, userLo, userHi), series: series.series, other: series.other };
}

/** Each bucket's rows (`total`) or users (`unique`) of the event, without breakdown; `units`: the range's sealed parts, for an index. */
function wholeValues(planned: readonly PlannedDay[], gather: GatherPlan, plan: TrendSeriesPlan, units: readonly RangeUnit[] | undefined, userLo: number, userHi: number): BucketValues {
  const bucketCount = plan.startsMs.length - 1;
  const unique = plan.math === "unique";
  const eventId = gather.references[0].eventId;
  const indexed = units === undefined ? undefined : wholeFromPreviousParts(planned, units, eventId!, bucketCount, userHi);
  if (indexed !== undefined) return indexed;
  const { rows, bitmaps, scanned } = bucketSets(planned, eventId, bucketCount, unique, userLo, userHi);
  const values: Array<number | null> = new Array(bucketCount);
  for (let bucket = 0; bucket < bucketCount; bucket++) {
    if (!unique) {
      values[bucket] = rows[bucket];
      continue;
    }
    const sets = bitmaps[bucket];
    const own = scanned[bucket];
    if (own !== undefined) sets.push(own);
    values[bucket] = unionCount(sets, userLo, userHi);
    own?.dispose();
  }
  return values;
}

/**
 * Per bucket, the event's rows of users [userLo, userHi), and (`unique`) its
 * users: the stored or kept sets of sealed days, over all users, and one set
 * of the active rows' users in range, which the caller owns and disposes.
 */
function bucketSets(planned: readonly PlannedDay[], eventId: number | undefined, bucketCount: number, unique: boolean, userLo: number, userHi: number): { rows: Float64Array; bitmaps: Bitmap[][]; scanned: Array<Bitmap | undefined> } {
  const rows = new Float64Array(bucketCount);
  const bitmaps: Bitmap[][] = Array.from({ length: bucketCount }, () => []);
  const scanned: Array<Bitmap | undefined> = new Array(bucketCount).fill(undefined);
  if (eventId === undefined || userLo >= userHi) return { rows, bitmaps, scanned };
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
        const part = sealedPart(segment, eventId, lowMs, highMs, parts);
        if (unique) bitmaps[bucket].push(part.users);
        else rows[bucket] += wholeRun ? part.rows : rowsInPart(segment.timeOffsetMs, shardRows.start, shardRows.end, lowMs, highMs);
      }
      continue;
    }
    const eventRows = segment.eventRows(eventId);
    if (eventRows === undefined || eventRows.length === 0) continue;
    for (const { lowMs, highMs, bucket } of parts) {
      // Kept by the worker's index and extended by the rows since the last task: fresh rows are read once, not per query.
      // Its set may hold users out of range (counted in range by the caller); its rows, only when none is.
      const kept = segment.partUsers(eventId, lowMs, highMs);
      if (kept !== undefined && (unique || (userLo === 0 && kept.userMax < userHi))) {
        if (!unique) rows[bucket] += kept.rows;
        else if (kept.rows > 0) bitmaps[bucket].push(kept.users);
        continue;
      }
      const users = userScratch.get(eventRows.length);
      const count = activeRowsInPart(eventRows, segment.userIds, segment.timeOffsetMs, userLo, userHi, lowMs, highMs, users);
      if (count === 0) continue;
      rows[bucket] += count;
      if (!unique) continue;
      const into = (scanned[bucket] ??= new RoaringBitmap32());
      into.addMany(users.subarray(0, count));
    }
  }
  return { rows, bitmaps, scanned };
}

/**
 * Each bucket's users of the event (no filters) among [userLo, userHi), as
 * sets that may hold users out of that range too, for a kernel that counts
 * them against its own users (retention-day-parts.ts). `owned` sets are the
 * caller's to dispose. Undefined when a day has too many parts, or when the
 * event's rows in the buckets are mostly active: its sets would then be built
 * from rows on every query, and a one-pass scan of the rows is faster.
 */
export function sealedBucketUsers(
  segments: readonly SegmentView[],
  eventId: number | undefined,
  startsMs: Float64Array,
  userLo: number,
  userHi: number,
  merged?: MergedBuckets,
): Array<{ users: Bitmap; owned: boolean }> | undefined {
  const planned = plannedDays(segments, startsMs, merged);
  if (planned === undefined || !mostlySealed(planned, eventId)) return undefined;
  const bucketCount = merged?.count ?? startsMs.length - 1;
  const { bitmaps, scanned } = bucketSets(planned, eventId, bucketCount, true, userLo, userHi);
  return bitmaps.map((sets, bucket) => {
    const own = scanned[bucket];
    if (own !== undefined) sets.push(own);
    if (sets.length === 1) return { users: sets[0], owned: own !== undefined };
    const union = sets.length === 0 ? new RoaringBitmap32() : RoaringBitmap32.orMany(sets);
    own?.dispose();
    return { users: union, owned: true };
  });
}

/** A part of a sealed day in one bucket, with the event's users in it over all users: whole, or per value id of a property. */
export interface SealedUnit {
  segment: SegmentView;
  lowMs: number;
  highMs: number;
  bucket: number;
  /** Without values: the part's users. */
  users: Bitmap | undefined;
  /** With values: per segment value id of the property (0: not set), the users of rows holding it. */
  values: ReadonlyArray<Bitmap | undefined> | undefined;
}

/**
 * The sealed parts of the buckets holding rows of the event, in time order,
 * from the kept parts (read once, then kept, as for trends); with keyId,
 * per value of that property. Undefined when a day has too many parts, an
 * active segment holds rows of the event, or (with keyId) a segment's
 * property has more than valuesMax texts: a set per value and part would
 * then cost more than the rows it saves reading.
 */
export function sealedUnits(segments: readonly SegmentView[], eventId: number, keyId: number | undefined, valuesMax: number, startsMs: Float64Array, merged?: MergedBuckets): SealedUnit[] | undefined {
  const planned = plannedDays(segments, startsMs, merged);
  const units = planned === undefined ? undefined : rangeUnits(planned, eventId);
  if (units === undefined) return undefined;
  if (keyId !== undefined && units.some(({ segment }) => (segment.property(keyId)?.texts.length ?? 0) > valuesMax)) return undefined;
  return units.map(({ segment, lowMs, highMs, bucket, dayParts }) => {
    if (keyId !== undefined) return { segment, lowMs, highMs, bucket, users: undefined, values: sealedPartValues(segment, eventId, keyId, lowMs, highMs, dayParts).users };
    return { segment, lowMs, highMs, bucket, users: sealedPartUsers(segment, eventId, lowMs, highMs, dayParts), values: undefined };
  });
}

/** The event's users in a part of a sealed day: the segment's stored set for a whole day, else the kept part's. */
function sealedPartUsers(segment: SegmentView, eventId: number, lowMs: number, highMs: number, dayParts: readonly PartBounds[]): Bitmap {
  const stored = lowMs === 0 && highMs === dayMs ? segment.userBitmap(eventId) : undefined;
  return stored ?? sealedPart(segment, eventId, lowMs, highMs, dayParts).users;
}

/**
 * Whether the parts of the event that a query over these buckets keeps (its
 * users per part of a day not whole in a bucket; per value of each of
 * keyIds too, for every day) are estimated at most half the budget.
 * More would evict each other within one query, and every query would read
 * them all again; such a query is better answered another way (a day whole
 * in a bucket, its stored set; the rows).
 */
export function keptPartsFit(segments: readonly SegmentView[], eventId: number | undefined, keyIds: readonly number[], startsMs: Float64Array): boolean {
  if (eventId === undefined) return true;
  const planned = plannedDays(segments, startsMs);
  if (planned === undefined) return true;
  let bytes = 0;
  for (const { segment, parts } of planned) {
    const rowStart = segment.eventRowStart;
    if (rowStart === undefined || eventId + 1 >= rowStart.length) continue;
    const rows = rowStart[eventId + 1] - rowStart[eventId];
    if (rows === 0) continue;
    // A part's members are at most its rows: an upper bound, as the budget counts them.
    // Read per value, a day's whole sets are kept too.
    if (keyIds.length > 0 || parts.some(({ lowMs, highMs }) => lowMs !== 0 || highMs !== dayMs)) bytes += bitmapBytesPerMember * rows + bitmapBytesFixed * parts.length;
    for (const keyId of keyIds) bytes += bitmapBytesPerMember * rows + parts.length * (bitmapBytesFixed + Uint32Array.BYTES_PER_ELEMENT) * (segment.property(keyId)?.texts.length ?? 1);
  }
  return bytes <= dayPartsBytesMax / 2;
}

/**
 * Buckets cut finer than a query's, each a part of one of the query's
 * (`of[bucket]`, of `count`): parts follow the fine cut, sets and counts the
 * query's buckets.
 */
export interface MergedBuckets {
  of: Int32Array;
  count: number;
}

/** The segments with rows and each one's day parts in buckets (merged: the query's); undefined when a day has too many parts. */
function plannedDays(segments: readonly SegmentView[], startsMs: Float64Array, merged?: MergedBuckets): PlannedDay[] | undefined {
  const planned: PlannedDay[] = [];
  for (const segment of segments) {
    if (segment.rowCount === 0) continue;
    const parts = dayParts(startsMs, segment.dayStartMs);
    if (!dayPartsFit(parts.length)) return undefined;
    if (merged !== undefined) for (const part of parts) part.bucket = merged.of[part.bucket];
    if (parts.length > 0) planned.push({ segment, parts });
  }
  return planned;
}

type PlannedDay = { segment: SegmentView; parts: ReturnType<typeof dayParts> };

/** A part of a sealed day: [lowMs, highMs) of its time offsets. */
type PartBounds = { lowMs: number; highMs: number };
const wholeDay: readonly PartBounds[] = [{ lowMs: 0, highMs: dayMs }];

/**
 * Whether a breakdown reads few enough sets here: the event's sealed rows are
 * at least its active ones, and the days hold at most two segments each on
 * average. A breakdown collects an active row's user per value in plain
 * arrays, and unions one set per value per segment part; the row scan
 * (column-scan.ts) keeps per-user bit sets instead and splits over workers.
 * Right after a 10 M load, before merges had settled, this path took 1.5×
 * the scan's time.
 */
export function breakdownFromDayParts(segments: ReadonlyArray<{ dayStartMs: number }>, sealedRows: number, activeRows: number): boolean {
  const days = new Set(segments.map((segment) => segment.dayStartMs));
  return sealedRows >= activeRows && segments.length <= 2 * days.size;
}

function mostlySealed(planned: readonly PlannedDay[], eventId: number | undefined): boolean {
  return mostlySealedEvent(planned.map(({ segment }) => segment), eventId);
}

/** breakdownFromDayParts over the rows of the event in the segments that have rows in the buckets (false: a day has too many parts). */
function mostlySealedEvent(segments: readonly SegmentView[], eventId: number | undefined): boolean {
  if (eventId === undefined) return true;
  let active = 0;
  for (const segment of segments) if (segment.eventRowStart === undefined) active += segment.eventRows(eventId)?.length ?? 0;
  return breakdownFromDayParts(segments, sealedEventRowCount(segments, eventId), active);
}

/** How many users in [userLo, userHi) the sets hold together. */
function unionCount(sets: readonly Bitmap[], userLo: number, userHi: number): number {
  if (sets.length === 0) return 0;
  if (sets.length === 1) return sets[0].rangeCardinality(userLo, userHi);
  if (sets.length === 2 && userLo === 0 && sets[0].maximum() < userHi && sets[1].maximum() < userHi) {
    // A day's two parts, every member in range: |A ∪ B| = |A| + |B| - |A ∩ B|, without building the union.
    return sets[0].size + sets[1].size - sets[0].andCardinality(sets[1]);
  }
  const union = RoaringBitmap32.orMany(sets as Bitmap[]);
  const count = union.rangeCardinality(userLo, userHi);
  union.dispose();
  return count;
}

/**
 * How many users in [userLo, userHi) many sets hold together, marked in a bit
 * array: a value's rank unions a set per day of the range, each small and
 * spread over the id range, and CRoaring's union of them took longer.
 */
function unionCountMarked(sets: readonly Bitmap[], userLo: number, userHi: number): number {
  if (sets.length <= 2) return unionCount(sets, userLo, userHi);
  const wordCount = ((userHi - userLo) >>> 5) + 1;
  const words = wordScratch.get(wordCount).fill(0, 0, wordCount);
  let count = 0;
  for (const set of sets) {
    const members = set.toUint32Array(memberScratch.get(set.size));
    for (let index = 0; index < members.length; index++) {
      const slot = members[index] - userLo;
      if (slot < 0 || slot >= userHi - userLo) continue;
      const bit = 1 << (slot & 31);
      const word = words[slot >>> 5];
      count += (word & bit) === 0 ? 1 : 0;
      words[slot >>> 5] = word | bit;
    }
  }
  return count;
}

/** The series and "other" of a breakdown by keyId (undefined: no row sets it); undefined when the values are too many for this path. */
function breakdownSeries(
  planned: readonly PlannedDay[],
  gather: GatherPlan,
  plan: TrendSeriesPlan,
  keyId: number | undefined,
  units: readonly RangeUnit[] | undefined,
  userLo: number,
  userHi: number,
): Pick<TrendSeriesAnswer, "series" | "other"> | undefined {
  const bucketCount = plan.startsMs.length - 1;
  const unique = plan.math === "unique";
  const eventId = gather.references[0].eventId;
  const indexed = units === undefined ? undefined : seriesFromPreviousParts(planned, units, eventId!, keyId, plan, userHi);
  if (indexed !== undefined) return indexed;
  // Task-wide value ids: 0 is "not set", the others index valueTexts.
  const valueTexts: string[] = [""];
  const globalIdOfText = new Map<string, number>();
  /** [value][bucket]: the value's user sets of the bucket (unique) and its rows. */
  const cellSets: Bitmap[][][] = [];
  const cellRows: Float64Array[] = [];
  /** [value]: user sets whose union is the value's users over the range (unique's rank). */
  const weightSets: Bitmap[][] = [];
  const addValue = () => {
    cellRows.push(new Float64Array(bucketCount));
    cellSets.push(unique ? Array.from({ length: bucketCount }, () => []) : []);
    weightSets.push([]);
  };
  addValue();
  /** Users of active rows by cell (value × bucketCount + bucket). */
  const scannedCells = new Map<number, number[]>();
  /** A part's sets (unique) or rows per segment value id, into the bucket's cells and (`ranks`) the values' rank sets. */
  const addPart = (part: { users: ReadonlyArray<Bitmap | undefined>; rows: Uint32Array }, globalIds: Int32Array, bucket: number, ranks: boolean) => {
    for (let id = 0; id < part.rows.length; id++) {
      if (part.rows[id] === 0) continue;
      const global = globalIds[id];
      if (!unique) cellRows[global][bucket] += part.rows[id];
      else {
        cellSets[global][bucket].push(part.users[id]!);
        if (ranks) weightSets[global].push(part.users[id]!);
      }
    }
  };
  if (eventId !== undefined && userLo < userHi) {
    for (const { segment, parts } of planned) {
      const column = keyId === undefined ? undefined : segment.property(keyId);
      const texts = column?.texts ?? noTexts;
      const globalIds = new Int32Array(Math.max(1, texts.length));
      for (let id = 1; id < texts.length; id++) {
        let global = globalIdOfText.get(texts[id]);
        if (global === undefined) {
          global = valueTexts.length;
          valueTexts.push(texts[id]);
          globalIdOfText.set(texts[id], global);
          addValue();
        }
        globalIds[id] = global;
      }
      if (valueTexts.length > breakdownValuesMax) return undefined;
      const valueIds = column?.valueIds;
      if (segment.eventRowStart !== undefined) {
        sealedShardRows(segment.eventRowStart, segment.userIds, eventId, userLo, userHi, shardRows);
        if (shardRows.start === shardRows.end) continue;
        const wholeRun = shardRows.start === segment.eventRowStart[eventId] && shardRows.end === segment.eventRowStart[eventId + 1];
        // A day cut in parts but inside the range ranks by its whole-day sets: half as many to union. Only
        // once its parts are kept: a segment new to this worker (a merge's, right after a load) is read once.
        const rankByDay =
          unique &&
          parts.length > 1 &&
          segment.dayStartMs >= plan.startsMs[0] &&
          segment.dayStartMs + dayMs <= plan.startsMs[bucketCount] &&
          parts.every(({ lowMs, highMs }) => keptParts.has(partValuesKey(segment, eventId, keyId, lowMs, highMs)));
        if (rankByDay) {
          const day = sealedPartValues(segment, eventId, keyId, 0, dayMs, wholeDay);
          for (let id = 0; id < day.rows.length; id++) if (day.rows[id] > 0) weightSets[globalIds[id]].push(day.users[id]!);
        }
        for (const { lowMs, highMs, bucket } of parts) {
          if (!unique && !wholeRun) {
            // A shard's rows of the part, counted per value (its kept counts cover every user).
            const { timeOffsetMs } = segment;
            for (let row = shardRows.start; row < shardRows.end; row++) {
              const offset = timeOffsetMs[row];
              if (offset >= lowMs && offset < highMs) cellRows[globalIds[valueIds === undefined ? 0 : valueIds[row]]][bucket]++;
            }
            continue;
          }
          addPart(sealedPartValues(segment, eventId, keyId, lowMs, highMs, parts), globalIds, bucket, !rankByDay);
        }
        continue;
      }
      const eventRows = segment.eventRows(eventId);
      if (eventRows === undefined || eventRows.length === 0) continue;
      const { userIds, timeOffsetMs } = segment;
      for (const { lowMs, highMs, bucket } of parts) {
        // Kept by the worker's index per value and extended by the rows since the last task, as bucketSets' parts are.
        const kept = keptActivePart(segment, eventId, keyId, lowMs, highMs);
        if (kept !== undefined && (unique || (userLo === 0 && kept.userMax < userHi))) {
          addPart(kept, globalIds, bucket, true);
          continue;
        }
        for (let index = 0; index < eventRows.length; index++) {
          const row = eventRows[index];
          const user = userIds[row];
          const offset = timeOffsetMs[row];
          if (user < userLo || user >= userHi || offset < lowMs || offset >= highMs) continue;
          const global = globalIds[valueIds === undefined ? 0 : valueIds[row]];
          cellRows[global][bucket]++;
          if (!unique) continue;
          const cell = global * bucketCount + bucket;
          let users = scannedCells.get(cell);
          if (users === undefined) scannedCells.set(cell, (users = []));
          users.push(user);
        }
      }
    }
  }
  const owned: Bitmap[] = [];
  for (const [cell, users] of scannedCells) {
    const bitmap = new RoaringBitmap32(users);
    owned.push(bitmap);
    cellSets[Math.floor(cell / bucketCount)][cell % bucketCount].push(bitmap);
    weightSets[Math.floor(cell / bucketCount)].push(bitmap);
  }
  const valueCount = valueTexts.length;
  const weights = new Float64Array(valueCount);
  const present = new Uint8Array(valueCount);
  for (let value = 0; value < valueCount; value++) {
    weights[value] = unique ? unionCountMarked(weightSets[value], userLo, userHi) : cellRows[value].reduce((sum, rows) => sum + rows, 0);
    present[value] = weights[value] > 0 ? 1 : 0;
  }
  const cells = (values: readonly number[]): BucketValues => {
    const answer: BucketValues = new Array(bucketCount);
    for (let bucket = 0; bucket < bucketCount; bucket++) {
      let count = 0;
      if (unique) count = unionCount(values.flatMap((value) => cellSets[value][bucket]), userLo, userHi);
      else for (const value of values) count += cellRows[value][bucket];
      answer[bucket] = count;
    }
    return answer;
  };
  const ranked = rankSeries(weights, present, valueTexts, plan.breakdownLimit!);
  const series = ranked.listed.map((value) => ({ value: valueOf(valueTexts, value), values: cells([value]), weight: weights[value] }));
  let other: BucketValues | undefined;
  if (ranked.hasOther) {
    const left: number[] = [];
    for (let value = 0; value < valueCount; value++) if (present[value] === 1 && ranked.groupOfValue[value] === ranked.otherGroup) left.push(value);
    other = cells(left);
  }
  for (const bitmap of owned) bitmap.dispose();
  return { series, other };
}

/** A sealed part of the range, in time order, for previous-parts.ts. */
interface RangeUnit {
  segment: SegmentView;
  lowMs: number;
  highMs: number;
  bucket: number;
  key: string;
  /** All the parts of its day in the range, read together when not kept. */
  dayParts: readonly PartBounds[];
}

/** The range's sealed parts holding rows of the event, in time order; undefined when an active segment holds some. */
function rangeUnits(planned: readonly PlannedDay[], eventId: number): RangeUnit[] | undefined {
  const units: RangeUnit[] = [];
  for (const { segment, parts } of planned) {
    const rowStart = segment.eventRowStart;
    if (rowStart === undefined) {
      if ((segment.eventRows(eventId)?.length ?? 0) > 0) return undefined;
      continue;
    }
    if (eventId + 1 >= rowStart.length || rowStart[eventId] === rowStart[eventId + 1]) continue;
    for (const { lowMs, highMs, bucket } of parts) units.push({ segment, lowMs, highMs, bucket, key: partKey(segment.key, lowMs, highMs), dayParts: parts });
  }
  return units.sort((left, right) => left.segment.dayStartMs + left.lowMs - (right.segment.dayStartMs + right.lowMs) || (left.key < right.key ? -1 : left.key > right.key ? 1 : 0));
}

/**
 * The index of previous parts (previous-parts.ts) of these units by keyId,
 * kept or built (at once over settled days, else when they are asked again;
 * never when one was refused, or when `fits` says the values are too many),
 * and each bucket's run of its units; undefined when none answers over users
 * [0, userHi).
 */
function indexedSpans(
  planned: readonly PlannedDay[],
  units: readonly RangeUnit[],
  eventId: number,
  keyId: number | undefined,
  bucketCount: number,
  userHi: number,
  unitPart: (unit: RangeUnit) => UnitPart,
  fits: () => boolean,
): IndexedSpans | undefined {
  if (units.length === 0) return undefined;
  const keys = units.map((unit) => unit.key);
  let index = keptPreviousParts(eventId, keyId, keys);
  let spans = index === undefined ? undefined : unitSpans(index, units, bucketCount);
  if (index !== undefined && spans === undefined) {
    // It holds every part, but not as one run: a segment between them is gone. Built again below.
    dropPreviousParts(index);
    index = undefined;
  }
  if (index === undefined) {
    if (refusedBefore(eventId, keyId, keys) || !(oneSegmentADay(planned) || askedAgain(eventId, keyId, keys)) || !fits()) return undefined;
    index = buildPreviousParts(eventId, keyId, units.map(unitPart), breakdownValuesMax);
    spans = index === undefined ? undefined : unitSpans(index, units, bucketCount);
  }
  if (index === undefined || spans === undefined || index.userEnd > userHi) return undefined;
  previousPartsCounts.answered++;
  return { index, ...spans };
}

/** Each bucket's run of units in the index; undefined when the units are not consecutive there. */
function unitSpans(index: PreviousParts, units: readonly RangeUnit[], bucketCount: number): Pick<IndexedSpans, "first" | "last"> | undefined {
  const first = new Int32Array(bucketCount).fill(-1);
  const last = new Int32Array(bucketCount).fill(-1);
  let previous = -1;
  for (const unit of units) {
    const at = index.unitOfPart.get(unit.key)!;
    if (previous >= 0 && at !== previous + 1) return undefined;
    previous = at;
    if (first[unit.bucket] < 0) first[unit.bucket] = at;
    last[unit.bucket] = at;
  }
  return { first, last };
}

/**
 * Whether each day of the range is one segment: merges have settled, so the
 * parts will be asked again as they are, and an index is built at once.
 * While a day holds several (an active one too, which a checkpoint will seal
 * and a merge fold in), an index waits for the same parts to be asked twice.
 */
function oneSegmentADay(planned: readonly PlannedDay[]): boolean {
  const days = new Set<number>();
  for (const { segment } of planned) {
    if (days.has(segment.dayStartMs)) return false;
    days.add(segment.dayStartMs);
  }
  return true;
}

/** Whether the texts of keyId in the units' segments are at most breakdownValuesMax together, read before any part is. */
function valuesFit(units: readonly RangeUnit[], keyId: number | undefined): boolean {
  if (keyId === undefined) return true;
  const columns = new Set<readonly string[]>();
  let total = 0;
  for (const { segment } of units) {
    const texts = segment.property(keyId)?.texts;
    if (texts === undefined || columns.has(texts)) continue;
    if (texts.length > breakdownValuesMax) return false;
    columns.add(texts);
    total += texts.length;
  }
  if (total <= breakdownValuesMax) return true;
  const distinct = new Set<string>();
  for (const texts of columns) {
    for (const text of texts) distinct.add(text);
    if (distinct.size > breakdownValuesMax) return false;
  }
  return true;
}

interface IndexedSpans {
  index: PreviousParts;
  /** Per bucket, its units' run [first, last] in the index; first -1: none. */
  first: Int32Array;
  last: Int32Array;
}

/** Each bucket's users of the event from the index, when a bucket spans several parts (one part's set is counted as it is). */
function wholeFromPreviousParts(planned: readonly PlannedDay[], units: readonly RangeUnit[], eventId: number, bucketCount: number, userHi: number): BucketValues | undefined {
  if (units.length <= bucketCount) return undefined;
  const users = (unit: RangeUnit) => sealedPartUsers(unit.segment, eventId, unit.lowMs, unit.highMs, unit.dayParts);
  const spans = indexedSpans(planned, units, eventId, wholeKeyId, bucketCount, userHi, (unit) => ({ key: unit.key, users: [users(unit)], texts: noTexts }), () => true);
  if (spans === undefined) return undefined;
  const { index, first, last } = spans;
  const values: BucketValues = new Array(bucketCount);
  for (let bucket = 0; bucket < bucketCount; bucket++) values[bucket] = first[bucket] < 0 ? 0 : index.users(0, first[bucket], last[bucket]);
  return values;
}

/**
 * A unique trend's series and "other" from the index, over every user;
 * undefined when no index answers: active rows of the event in range, parts
 * asked for the first time, or parts the index holds in other cuts.
 */
function seriesFromPreviousParts(
  planned: readonly PlannedDay[],
  units: readonly RangeUnit[],
  eventId: number,
  keyId: number | undefined,
  plan: TrendSeriesPlan,
  userHi: number,
): Pick<TrendSeriesAnswer, "series" | "other"> | undefined {
  const bucketCount = plan.startsMs.length - 1;
  const partValues = (unit: RangeUnit) => sealedPartValues(unit.segment, eventId, keyId, unit.lowMs, unit.highMs, unit.dayParts);
  const textsOf = (unit: RangeUnit) => (keyId === undefined ? undefined : unit.segment.property(keyId)?.texts) ?? noTexts;
  const spans = indexedSpans(planned, units, eventId, keyId, bucketCount, userHi, (unit) => ({ key: unit.key, users: partValues(unit).users, texts: textsOf(unit) }), () => valuesFit(units, keyId));
  if (spans === undefined) return undefined;
  const { index, first, last } = spans;
  const valueCount = index.texts.length;
  const weights = new Float64Array(valueCount);
  const present = new Uint8Array(valueCount);
  // The range's units are one run of the index (indexedSpans): its first and last.
  index.addUsers(index.unitOfPart.get(units[0].key)!, index.unitOfPart.get(units[units.length - 1].key)!, weights, present);
  const ranked = rankSeries(weights, present, index.texts, plan.breakdownLimit!);
  const series = ranked.listed.map((value) => ({ value: valueOf(index.texts, value), values: new Array<number | null>(bucketCount).fill(0), weight: weights[value] }));
  const cells = new Float64Array(valueCount);
  for (let bucket = 0; bucket < bucketCount; bucket++) {
    if (first[bucket] < 0) continue;
    cells.fill(0);
    index.addUsers(first[bucket], last[bucket], cells);
    for (let rank = 0; rank < series.length; rank++) series[rank].values[bucket] = cells[ranked.listed[rank]];
  }
  if (!ranked.hasOther) return { series, other: undefined };
  // "Other" unions the left-out values' sets of each bucket: a user may hold several of them.
  const otherSets: Bitmap[][] = Array.from({ length: bucketCount }, () => []);
  for (const unit of units) {
    const { users } = partValues(unit);
    const texts = textsOf(unit);
    for (let id = 0; id < users.length; id++) {
      const set = users[id];
      if (set !== undefined && set.size > 0 && ranked.groupOfValue[id === 0 ? 0 : index.idOfText.get(texts[id])!] === ranked.otherGroup) otherSets[unit.bucket].push(set);
    }
  }
  return { series, other: otherSets.map((sets) => unionCount(sets, 0, userHi)) };
}

/** What `key` names when kept (then most recently used), else undefined. */
function keptEntry(key: string): DayPartUsers | DayPartValues | undefined {
  const kept = keptParts.get(key);
  if (kept === undefined) return undefined;
  // Most recently used last: eviction walks the map from its start.
  keptParts.delete(key);
  keptParts.set(key, kept);
  return kept;
}

/** What `key` names, kept; built and kept when missing, dropping the least recently used beyond the budget. */
function keep<T extends DayPartUsers | DayPartValues>(key: string, build: () => T): T {
  const kept = keptEntry(key);
  if (kept !== undefined) return kept as T;
  const built = build();
  keptParts.set(key, built);
  keptBytes += built.bytes;
  // Not disposed when dropped: a query running now may still hold it; the collector frees it.
  for (const [oldKey, old] of keptParts) {
    if (keptBytes <= dayPartsBytesMax || oldKey === key) break;
    keptParts.delete(oldKey);
    keptBytes -= old.bytes;
  }
  return built;
}

/**
 * The event's users and rows in [lowMs, highMs) of a sealed day, over all its
 * users; read once (with the day's other parts), then kept.
 */
function sealedPart(segment: SegmentView, eventId: number, lowMs: number, highMs: number, dayParts: readonly PartBounds[]): DayPartUsers {
  const kept = keptEntry(partUsersKey(segment, eventId, lowMs, highMs));
  return (kept as DayPartUsers | undefined) ?? readDayPart(segment, eventId, undefined, lowMs, highMs, dayParts, false).whole;
}

/** Per value of keyId, the event's users and rows in [lowMs, highMs) of a sealed day, over all its users; read once (with the day's other parts), then kept. */
function sealedPartValues(segment: SegmentView, eventId: number, keyId: number | undefined, lowMs: number, highMs: number, dayParts: readonly PartBounds[]): DayPartValues {
  const kept = keptEntry(partValuesKey(segment, eventId, keyId, lowMs, highMs));
  return (kept as DayPartValues | undefined) ?? readDayPart(segment, eventId, keyId, lowMs, highMs, dayParts, true).values!;
}

/** Reads the part [lowMs, highMs) with the rest of its day's parts, and answers its entries. */
function readDayPart(segment: SegmentView, eventId: number, keyId: number | undefined, lowMs: number, highMs: number, dayParts: readonly PartBounds[], withValues: boolean) {
  const at = dayParts.findIndex((part) => part.lowMs === lowMs && part.highMs === highMs);
  assert(at >= 0, "a part is read with its own day's parts");
  return readDayParts(segment, eventId, keyId, dayParts, withValues)[at];
}

function partUsersKey(segment: SegmentView, eventId: number, lowMs: number, highMs: number): string {
  return `${segment.key}/${eventId}/${lowMs}/${highMs}`;
}

function partValuesKey(segment: SegmentView, eventId: number, keyId: number | undefined, lowMs: number, highMs: number): string {
  return `${segment.key}/${eventId}/${lowMs}/${highMs}/${keyId}`;
}

/**
 * Reads disjoint parts of a sealed day in one pass over the event's rows
 * (a zone's day is two or three parts, each read apart took a pass each, and
 * the whole sets another) and keeps, per part, its users and rows over all
 * values and (withValues) per value of keyId; entries already kept stay.
 * Two passes: rows and distinct users per cell (part × value, and the part
 * whole), then each cell's users into its slice of one array. Rows are
 * sorted by user, so a cell's users come ascending, a repeat right after its
 * last one.
 */
function readDayParts(segment: SegmentView, eventId: number, keyId: number | undefined, parts: readonly PartBounds[], withValues: boolean): Array<{ whole: DayPartUsers; values: DayPartValues | undefined }> {
  const { userIds, timeOffsetMs } = segment;
  const column = withValues && keyId !== undefined ? segment.property(keyId) : undefined;
  const valueIds = column?.valueIds;
  const valueCount = withValues ? Math.max(1, (column?.texts ?? noTexts).length) : 0;
  const partCount = parts.length;
  // A part's cells: its values, then the part whole.
  const width = valueCount + 1;
  const cellCount = partCount * width;
  const lows = parts.map((part) => part.lowMs);
  const highs = parts.map((part) => part.highMs);
  const start = segment.eventRowStart![eventId];
  const end = segment.eventRowStart![eventId + 1];
  const rows = new Uint32Array(cellCount);
  const slices = new Uint32Array(cellCount + 1);
  const lastUser = new Int32Array(cellCount).fill(-1);
  // Each row's part (-1: none), found once for both passes.
  const partOfRow = partScratch.get(end - start);
  for (let row = start; row < end; row++) {
    const offset = timeOffsetMs[row];
    let part = 0;
    while (part < partCount && (offset < lows[part] || offset >= highs[part])) part++;
    partOfRow[row - start] = part === partCount ? -1 : part;
    if (part === partCount) continue;
    const user = userIds[row];
    const whole = part * width + valueCount;
    if (valueCount > 0) {
      const cell = part * width + (valueIds === undefined ? 0 : valueIds[row]);
      rows[cell]++;
      if (lastUser[cell] !== user) {
        lastUser[cell] = user;
        slices[cell + 1]++;
      }
    }
    rows[whole]++;
    if (lastUser[whole] !== user) {
      lastUser[whole] = user;
      slices[whole + 1]++;
    }
  }
  for (let cell = 0; cell < cellCount; cell++) slices[cell + 1] += slices[cell];
  const users = userScratch.get(slices[cellCount]);
  const next = slices.slice(0, cellCount);
  lastUser.fill(-1);
  for (let row = start; row < end; row++) {
    const part = partOfRow[row - start];
    if (part < 0) continue;
    const user = userIds[row];
    const whole = part * width + valueCount;
    if (lastUser[whole] !== user) users[next[whole]++] = lastUser[whole] = user;
    if (valueCount === 0) continue;
    const cell = part * width + (valueIds === undefined ? 0 : valueIds[row]);
    if (lastUser[cell] !== user) users[next[cell]++] = lastUser[cell] = user;
  }
  const cellUsers = (cell: number): Bitmap => {
    const bitmap = new RoaringBitmap32();
    bitmap.addMany(users.subarray(slices[cell], slices[cell + 1]));
    return bitmap;
  };
  return parts.map(({ lowMs, highMs }, part) => {
    const wholeCell = part * width + valueCount;
    const whole = keep(partUsersKey(segment, eventId, lowMs, highMs), () => ({
      users: cellUsers(wholeCell),
      rows: rows[wholeCell],
      bytes: bitmapBytesFixed + bitmapBytesPerMember * (slices[wholeCell + 1] - slices[wholeCell]),
    }));
    if (!withValues) return { whole, values: undefined };
    const values = keep(partValuesKey(segment, eventId, keyId, lowMs, highMs), () => {
      const first = part * width;
      const bitmaps: Array<Bitmap | undefined> = new Array(valueCount).fill(undefined);
      let bytes = valueCount * Uint32Array.BYTES_PER_ELEMENT + bitmapBytesPerMember * (slices[first + valueCount] - slices[first]);
      for (let value = 0; value < valueCount; value++) {
        if (slices[first + value + 1] === slices[first + value]) continue;
        bitmaps[value] = cellUsers(first + value);
        bytes += bitmapBytesFixed;
      }
      return { users: bitmaps, rows: rows.slice(first, first + valueCount), bytes };
    });
    return { whole, values };
  });
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
