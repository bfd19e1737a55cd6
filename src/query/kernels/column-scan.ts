/**
 * The row scan of the SPEC §7 column fast paths (trend-columns.ts,
 * retention-columns.ts, retention-day-parts.ts): the referenced events' rows
 * of one user shard, read in place from sealed segments, in bucket order. A
 * time zone only moves bucket boundaries: segments are per UTC day, so a day
 * splits into a few parts at the local boundaries inside it, and each part
 * lies in one bucket. Parts are visited in time order (every segment of a
 * day for its first part, then for its second…), so each user's rows are
 * visited in bucket order, in any row order within a bucket (sealed or
 * active segments, several segments a day). A day held by one sealed segment
 * and one event is read in one pass: its rows are sorted by (user, time),
 * which keeps that order too. The kernels rely on that order alone.
 *
 * Users are visited in blocks of `blockUsers`: every day for the users of the
 * first block, then every day for the next block… A kernel keeps state per
 * user (marks, bit sets, a cohort), and a day's rows step through the whole
 * user range: read day after day over all users, each row touched that state
 * in another cache line, and the scan waited on memory. Within a block the
 * state stays in cache. Sealed rows of an event are
 * sorted by user, so a block's rows are a run found from the previous block's
 * end; an active segment's rows are copied out grouped by block once, when
 * the scan is planned (ActiveRows).
 *
 * Rows reach the kernel in batches, in visiting order: per row the user's
 * slot, its reference mask (bit i: reference i's event and filters hold),
 * its breakdown value as a task-wide id (0 "not set", else valueTexts[id]),
 * its math property as a number (NaN when it does not count), its bucket and
 * its time. A call per row passed the time as a heap number (a double past
 * 2^31), and a worker that runs several kernels does not inline a visitor
 * it has seen many of: the calls, their allocations and the collector took
 * more than the kernels' work.
 */
import { strict as assert } from "node:assert";
import { dayMs } from "../buckets.js";
import { numbersOf } from "../filters.js";
import type { PropertyColumn, SegmentView, ValueIdColumn } from "../segment-view.js";
import { maskOf, segmentReferences, type GatherPlan, type SegmentReference } from "./event-rows.js";
import { lowerBoundUser, sealedShardRows, segmentsByDay, type RowRange } from "./rows.js";

/** A day cut by more local boundaries than this (hourly buckets) would be read once per part: the gathered path is faster then. */
const partsPerDayMax = 4;

/** Users per block: a kernel's state of a block's users (~12–40 bytes each) stays within a core's cache. */
export const blockUsersDefault = 8192;

/** One part of a UTC day: offsets [lowMs, highMs) from the day's start, all in `bucket`. */
interface DayPart {
  lowMs: number;
  highMs: number;
  bucket: number;
}

/**
 * Offsets [lowMs, highMs) of a day, read in one pass: an offset lies in
 * bucket firstBucket + the number of edges at or before it (unused edges are
 * highMs). Counted without branches: a row's part is as good as random, and a
 * mispredicted branch per row cost more than the rest of the row.
 */
interface DaySpan {
  lowMs: number;
  highMs: number;
  firstBucket: number;
  edge1: number;
  edge2: number;
  edge3: number;
}

/** One referenced event of one segment: its rows of the shard's users, and its references. */
interface EventScan {
  eventId: number;
  /** Sealed: rows [start, end), sorted by user. */
  start: number;
  end: number;
  /** Active: the event's rows of the shard, copied out (ActiveRows). */
  active: ActiveRows | undefined;
  /** Bits of the references without a filter: they hold on every row. */
  constantMask: number;
  /** References with filters; the first one's single filter is read inline when it is the only one (`single`). */
  filtered: SegmentReference[];
  single: { bit: number; passes: Uint8Array; valueIds: ValueIdColumn } | undefined;
}

/**
 * An active segment's rows of one event with a user of the shard and some
 * reference holding, copied out grouped by user block (block k's are
 * [blockStarts[k], blockStarts[k + 1]), row order kept within a block), with
 * what the scan reads of each: read in place, a block's rows lie all over an
 * active segment's columns and each costs a few cache misses; the copy reads
 * the columns once, in row order.
 */
interface ActiveRows {
  blockStarts: Uint32Array;
  slots: Int32Array;
  offsets: Uint32Array;
  masks: Int32Array;
  values: Int32Array;
  /** The math property's number per row; undefined without one (NaN). */
  numbers: Float64Array | undefined;
}

interface SegmentScan {
  segment: SegmentView;
  events: EventScan[];
  valueIds: ValueIdColumn | undefined;
  /** Segment text id → task-wide value id. */
  globalIds: Int32Array;
  mathIds: ValueIdColumn | undefined;
  numbers: Float64Array;
}

export interface ColumnScan {
  /** `whole`: every part at once, when they follow each other bucket after bucket; `single`: each part alone. */
  days: Array<{ dayStartMs: number; whole: DaySpan | undefined; single: DaySpan[]; segments: SegmentScan[] }>;
  valueTexts: string[];
  userLo: number;
  userHi: number;
  blockUsers: number;
}

/** Rows per batch: the batch's columns (32 bytes a row) stay in cache beside the kernel's state. */
const batchRowsMax = 1024;

/** Visited rows, one entry per row in [0, count): see the file's comment. */
export interface RowBatch {
  count: number;
  readonly slots: Int32Array;
  readonly masks: Int32Array;
  readonly values: Int32Array;
  readonly buckets: Int32Array;
  readonly numbers: Float64Array;
  readonly timesMs: Float64Array;
}

export type BatchVisit = (batch: RowBatch) => void;

/**
 * `skip`: a row equal to the last visited one in user, bucket, value and
 * mask, and not earlier, is not visited (for kernels that count users or keep
 * a user's earliest row: sealed rows come sorted by user and time, so most
 * of a user's rows in a day repeat the one before). `visit`: every row.
 */
export type RowRepeats = "skip" | "visit";

/** The last row put into a batch, for `skip`: carried from one run of rows to the next. */
interface LastRow {
  slot: number;
  bucket: number;
  value: number;
  mask: number;
  timeMs: number;
}

const shardRows: RowRange = { start: 0, end: 0 };
const zeroIds = new Int32Array(1);
const noNumbers = new Float64Array([NaN]);

/** The scan of `gather` over buckets [startsMs[b], startsMs[b + 1]); undefined when a day has too many parts. */
export function planColumnScan(segments: readonly SegmentView[], gather: GatherPlan, startsMs: Float64Array, userLo: number, userHi: number, blockUsers = blockUsersDefault): ColumnScan | undefined {
  assert(Number.isSafeInteger(blockUsers) && blockUsers >= 1, "a user block holds at least one user");
  const order = segmentsByDay(segments, gather.fromMs, gather.toMsExclusive);
  const scan: ColumnScan = { days: [], valueTexts: [""], userLo, userHi, blockUsers };
  const globalIdOfText = new Map<string, number>();
  for (let index = 0; index < order.length; ) {
    const dayStartMs = segments[order[index]].dayStartMs;
    const parts = dayParts(startsMs, dayStartMs);
    if (parts.length > partsPerDayMax) return undefined;
    const scans: SegmentScan[] = [];
    for (; index < order.length && segments[order[index]].dayStartMs === dayStartMs; index++) {
      if (parts.length === 0) continue;
      const segmentScan = planSegment(segments[order[index]], gather, userLo, userHi, blockUsers, scan.valueTexts, globalIdOfText);
      if (segmentScan !== undefined) scans.push(segmentScan);
    }
    if (scans.length > 0) scan.days.push({ dayStartMs, whole: wholeSpan(parts), single: parts.map((part) => wholeSpan([part])!), segments: scans });
  }
  return scan;
}

/**
 * Visits every row of the scan: block after block of users, and within a
 * block day after day, bucket after bucket. With `settledAt`, a row of a user
 * whose entry there is a bucket before the row's (-1: none yet) is not
 * visited: a kernel that needs only each user's first bucket sets it as it goes.
 */
export function runColumnScan(scan: ColumnScan, visit: BatchVisit, repeats: RowRepeats, settledAt?: Int32Array): void {
  const { userLo, userHi, blockUsers } = scan;
  const batch: RowBatch = {
    count: 0,
    slots: new Int32Array(batchRowsMax),
    masks: new Int32Array(batchRowsMax),
    values: new Int32Array(batchRowsMax),
    buckets: new Int32Array(batchRowsMax),
    numbers: new Float64Array(batchRowsMax),
    timesMs: new Float64Array(batchRowsMax),
  };
  const last: LastRow = { slot: -1, bucket: -1, value: -1, mask: -1, timeMs: -Infinity };
  const skip = repeats === "skip";
  // Where each sealed event's rows of the next block start.
  const cursors: Int32Array[] = scan.days.map((day) => new Int32Array(day.segments.reduce((count, segment) => count + segment.events.length, 0)));
  for (let dayIndex = 0; dayIndex < scan.days.length; dayIndex++) {
    let index = 0;
    for (const segment of scan.days[dayIndex].segments) for (const event of segment.events) cursors[dayIndex][index++] = event.start;
  }
  const ends = new Int32Array(cursors.reduce((most, day) => Math.max(most, day.length), 0));
  for (let block = 0, blockLo = userLo; blockLo < userHi; block++, blockLo += blockUsers) {
    const blockHi = Math.min(userHi, blockLo + blockUsers);
    for (let dayIndex = 0; dayIndex < scan.days.length; dayIndex++) {
      const day = scan.days[dayIndex];
      const cursor = cursors[dayIndex];
      const only = day.segments[0];
      if (day.segments.length === 1 && only.segment.eventRowStart !== undefined && only.events.length === 1) {
        // One sealed segment, one event: each user's rows come in time order, so one pass keeps every user's buckets in order.
        const end = lowerBoundUser(only.segment.userIds, cursor[0], only.events[0].end, blockHi);
        if (day.whole !== undefined) scanRows(only, only.events[0], day.whole, cursor[0], end, userLo, skip, last, batch, visit, settledAt);
        // Parts apart: one pass each, in time order, so each user's buckets still come in order.
        else for (const span of day.single) scanRows(only, only.events[0], span, cursor[0], end, userLo, skip, last, batch, visit, settledAt);
        cursor[0] = end;
        continue;
      }
      let index = 0;
      for (const segment of day.segments) {
        for (const event of segment.events) {
          if (event.active === undefined) ends[index] = lowerBoundUser(segment.segment.userIds, cursor[index], event.end, blockHi);
          index++;
        }
      }
      for (const part of day.single) {
        index = 0;
        for (const segment of day.segments) {
          for (const event of segment.events) {
            const active = event.active;
            if (active === undefined) scanRows(segment, event, part, cursor[index], ends[index], userLo, skip, last, batch, visit, settledAt);
            else scanActiveRows(segment.segment.dayStartMs, active, part, active.blockStarts[block], active.blockStarts[block + 1], skip, last, batch, visit, settledAt);
            index++;
          }
        }
      }
      for (let event = 0; event < cursor.length; event++) cursor[event] = ends[event];
    }
  }
  if (batch.count > 0) visit(batch);
}

/** The parts as one span; undefined when they leave a gap or skip a bucket. */
function wholeSpan(parts: readonly DayPart[]): DaySpan | undefined {
  assert(parts.length >= 1 && parts.length <= partsPerDayMax, "a day is read in one to four parts");
  for (let part = 1; part < parts.length; part++) if (parts[part].lowMs !== parts[part - 1].highMs || parts[part].bucket !== parts[part - 1].bucket + 1) return undefined;
  const highMs = parts[parts.length - 1].highMs;
  const edge = (part: number) => (part < parts.length ? parts[part].lowMs : highMs);
  return { lowMs: parts[0].lowMs, highMs, firstBucket: parts[0].bucket, edge1: edge(1), edge2: edge(2), edge3: edge(3) };
}

/** The parts of the UTC day starting at dayStartMs that lie in a bucket, in time order. */
export function dayParts(startsMs: Float64Array, dayStartMs: number): DayPart[] {
  const bucketCount = startsMs.length - 1;
  const dayEndMs = dayStartMs + dayMs;
  const parts: DayPart[] = [];
  // The bucket holding dayStartMs: the last start at or before it (-1 before the first).
  let bucket = -1;
  while (bucket + 1 <= bucketCount && startsMs[bucket + 1] <= dayStartMs) bucket++;
  let lowMs = dayStartMs;
  while (lowMs < dayEndMs && bucket < bucketCount) {
    const highMs = Math.min(dayEndMs, startsMs[bucket + 1]);
    if (bucket >= 0 && highMs > lowMs) parts.push({ lowMs: lowMs - dayStartMs, highMs: highMs - dayStartMs, bucket });
    lowMs = Math.max(lowMs, highMs);
    bucket++;
  }
  return parts;
}

function planSegment(segment: SegmentView, gather: GatherPlan, userLo: number, userHi: number, blockUsers: number, valueTexts: string[], globalIdOfText: Map<string, number>): SegmentScan | undefined {
  const events: EventScan[] = [];
  for (const [eventId, references] of segmentReferences(segment, gather.references)) {
    let constantMask = 0;
    for (const reference of references) if (reference.passes.length === 0) constantMask |= 1 << reference.bit;
    const filtered = references.filter((reference) => reference.passes.length > 0);
    const only = filtered[0];
    const single = filtered.length === 1 && only.passes.length === 1 ? { bit: only.bit, passes: only.passes[0], valueIds: only.valueIds[0] } : undefined;
    const masks = { constantMask, filtered: single === undefined ? filtered : [], single };
    if (segment.eventRowStart !== undefined) {
      sealedShardRows(segment.eventRowStart, segment.userIds, eventId, userLo, userHi, shardRows);
      if (shardRows.start === shardRows.end) continue;
      events.push({ eventId, start: shardRows.start, end: shardRows.end, active: undefined, ...masks });
      continue;
    }
    // Copied out below, once the property readers are known.
    events.push({ eventId, start: 0, end: 0, active: undefined, ...masks });
  }
  if (events.length === 0) return undefined;
  let valueIds: ValueIdColumn | undefined;
  let globalIds = zeroIds;
  const breakdown = gather.breakdown.kind === "key" && gather.breakdown.keyId !== undefined ? segment.property(gather.breakdown.keyId) : undefined;
  if (breakdown !== undefined) {
    valueIds = breakdown.valueIds;
    globalIds = new Int32Array(Math.max(1, breakdown.texts.length));
    for (let id = 1; id < breakdown.texts.length; id++) {
      const text = breakdown.texts[id];
      let global = globalIdOfText.get(text);
      if (global === undefined) {
        global = valueTexts.length;
        valueTexts.push(text);
        globalIdOfText.set(text, global);
      }
      globalIds[id] = global;
    }
  }
  let mathIds: ValueIdColumn | undefined;
  let numbers: Float64Array = noNumbers;
  const math = gather.math.kind === "key" && gather.math.keyId !== undefined ? segment.property(gather.math.keyId) : undefined;
  if (math !== undefined) {
    mathIds = math.valueIds;
    numbers = numbersOf(math);
  }
  const scan: SegmentScan = { segment, events, valueIds, globalIds, mathIds, numbers };
  if (segment.eventRowStart === undefined) {
    for (const event of events) event.active = copyActiveRows(scan, event, userLo, userHi, blockUsers);
    scan.events = events.filter((event) => event.active!.slots.length > 0);
    if (scan.events.length === 0) return undefined;
  }
  return scan;
}


/** The event's rows of an active segment with a user in [userLo, userHi) and some reference holding, copied out by user block (ActiveRows). */
function copyActiveRows(scan: SegmentScan, event: EventScan, userLo: number, userHi: number, blockUsers: number): ActiveRows {
  const { segment, valueIds, globalIds, mathIds, numbers } = scan;
  const eventRows = segment.eventRows(event.eventId)!;
  const { userIds, timeOffsetMs } = segment;
  const { constantMask, filtered, single } = event;
  const blockStarts = new Uint32Array(Math.ceil((userHi - userLo) / blockUsers) + 1);
  // Pass 1: each kept row's mask (0: not kept), and how many rows each block keeps.
  const rowMasks = new Int32Array(eventRows.length);
  let count = 0;
  for (let index = 0; index < eventRows.length; index++) {
    const row = eventRows[index];
    const user = userIds[row];
    if (user < userLo || user >= userHi) continue;
    let mask = constantMask;
    if (single !== undefined) mask |= single.passes[single.valueIds[row]] << single.bit;
    else if (filtered.length > 0) mask |= maskOf(filtered, row);
    if (mask === 0) continue;
    rowMasks[index] = mask;
    blockStarts[Math.floor((user - userLo) / blockUsers) + 1]++;
    count++;
  }
  for (let block = 1; block < blockStarts.length; block++) blockStarts[block] += blockStarts[block - 1];
  const next = blockStarts.slice(0, blockStarts.length - 1);
  const copied: ActiveRows = {
    blockStarts,
    slots: new Int32Array(count),
    offsets: new Uint32Array(count),
    masks: new Int32Array(count),
    values: new Int32Array(count),
    numbers: mathIds === undefined ? undefined : new Float64Array(count),
  };
  for (let index = 0; index < eventRows.length; index++) {
    const mask = rowMasks[index];
    if (mask === 0) continue;
    const row = eventRows[index];
    const slot = userIds[row] - userLo;
    const at = next[Math.floor(slot / blockUsers)]++;
    copied.slots[at] = slot;
    copied.offsets[at] = timeOffsetMs[row];
    copied.masks[at] = mask;
    copied.values[at] = valueIds === undefined ? 0 : globalIds[valueIds[row]];
    if (copied.numbers !== undefined) copied.numbers[at] = numbers[mathIds![row]];
  }
  return copied;
}

/**
 * Copied active rows [from, to) whose time lies in `span`, into the batch: as
 * scanRows, from the copy.
 */
function scanActiveRows(
  dayStartMs: number,
  active: ActiveRows,
  span: DaySpan,
  from: number,
  to: number,
  skip: boolean,
  last: LastRow,
  batch: RowBatch,
  visit: BatchVisit,
  settledAt: Int32Array | undefined,
): void {
  const { slots: rowSlots, offsets, masks: rowMasks, values: rowValues, numbers: rowNumbersIn } = active;
  const { lowMs, highMs, firstBucket, edge1, edge2, edge3 } = span;
  const { slots, masks, values, buckets, timesMs } = batch;
  const rowNumbers = batch.numbers;
  let count = batch.count;
  let { slot: lastSlot, bucket: lastBucket, value: lastValue, mask: lastMask, timeMs: lastTimeMs } = last;
  for (let index = from; index < to; index++) {
    const offset = offsets[index];
    if (offset < lowMs || offset >= highMs) continue;
    const slot = rowSlots[index];
    const bucket = firstBucket + ((edge1 - 1 - offset) >>> 31) + ((edge2 - 1 - offset) >>> 31) + ((edge3 - 1 - offset) >>> 31);
    if (settledAt !== undefined && settledAt[slot] >>> 0 < bucket) continue;
    const mask = rowMasks[index];
    const value = rowValues[index];
    const timeMs = dayStartMs + offset;
    if (skip) {
      if (((slot ^ lastSlot) | (bucket ^ lastBucket) | (value ^ lastValue) | (mask ^ lastMask)) === 0 && timeMs >= lastTimeMs) continue;
      lastSlot = slot;
      lastBucket = bucket;
      lastValue = value;
      lastMask = mask;
      lastTimeMs = timeMs;
    }
    slots[count] = slot;
    masks[count] = mask;
    values[count] = value;
    buckets[count] = bucket;
    rowNumbers[count] = rowNumbersIn === undefined ? NaN : rowNumbersIn[index];
    timesMs[count] = timeMs;
    if (++count === batchRowsMax) {
      batch.count = count;
      visit(batch);
      count = 0;
    }
  }
  batch.count = count;
  last.slot = lastSlot;
  last.bucket = lastBucket;
  last.value = lastValue;
  last.mask = lastMask;
  last.timeMs = lastTimeMs;
}

/**
 * Sealed rows [from, to) of one event whose time lies in `span`, into the
 * batch. A day's only sealed segment and event is read with all its parts in
 * one span; other days one part at a time.
 */
function scanRows(
  scan: SegmentScan,
  event: EventScan,
  span: DaySpan,
  from: number,
  to: number,
  userLo: number,
  skip: boolean,
  last: LastRow,
  batch: RowBatch,
  visit: BatchVisit,
  settledAt: Int32Array | undefined,
): void {
  const { segment, valueIds, globalIds, mathIds, numbers } = scan;
  const { userIds, timeOffsetMs, dayStartMs } = segment;
  const { constantMask, filtered, single } = event;
  const singleBit = single?.bit ?? 0;
  const singlePasses = single?.passes;
  const singleIds = single?.valueIds;
  const checksFiltered = filtered.length > 0;
  const { lowMs, highMs, firstBucket, edge1, edge2, edge3 } = span;
  const { slots, masks, values, buckets, timesMs } = batch;
  const rowNumbers = batch.numbers;
  let count = batch.count;
  let { slot: lastSlot, bucket: lastBucket, value: lastValue, mask: lastMask, timeMs: lastTimeMs } = last;
  for (let row = from; row < to; row++) {
    const offset = timeOffsetMs[row];
    if (offset < lowMs || offset >= highMs) continue;
    let mask = constantMask;
    if (singleIds !== undefined) mask |= singlePasses![singleIds[row]] << singleBit;
    else if (checksFiltered) mask |= maskOf(filtered, row);
    if (mask === 0) continue;
    const slot = userIds[row] - userLo;
    // Offsets and edges are below 2^31: (edge - 1 - offset) is negative, its top bit set, exactly when offset >= edge.
    const bucket = firstBucket + ((edge1 - 1 - offset) >>> 31) + ((edge2 - 1 - offset) >>> 31) + ((edge3 - 1 - offset) >>> 31);
    // Unsigned: -1 (not settled) is never below a bucket.
    if (settledAt !== undefined && settledAt[slot] >>> 0 < bucket) continue;
    const value = valueIds === undefined ? 0 : globalIds[valueIds[row]];
    const timeMs = dayStartMs + offset;
    if (skip) {
      if (((slot ^ lastSlot) | (bucket ^ lastBucket) | (value ^ lastValue) | (mask ^ lastMask)) === 0 && timeMs >= lastTimeMs) continue;
      lastSlot = slot;
      lastBucket = bucket;
      lastValue = value;
      lastMask = mask;
      lastTimeMs = timeMs;
    }
    slots[count] = slot;
    masks[count] = mask;
    values[count] = value;
    buckets[count] = bucket;
    rowNumbers[count] = mathIds === undefined ? NaN : numbers[mathIds[row]];
    timesMs[count] = timeMs;
    if (++count === batchRowsMax) {
      batch.count = count;
      visit(batch);
      count = 0;
    }
  }
  batch.count = count;
  last.slot = lastSlot;
  last.bucket = lastBucket;
  last.value = lastValue;
  last.mask = lastMask;
  last.timeMs = lastTimeMs;
}
