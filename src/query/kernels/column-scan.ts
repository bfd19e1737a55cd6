/**
 * The row scan of the SPEC §7 column fast paths (trend-columns.ts,
 * retention-columns.ts): the referenced events' rows of one user shard, read
 * in place from the segments, in bucket order. A time zone only moves bucket
 * boundaries: segments are per UTC day, so a day splits into a few parts at
 * the local boundaries inside it, and each part lies in one bucket. Parts are
 * visited in time order (every segment of a day for its first part, then for
 * its second…), so each user's rows are visited in bucket order, in any row
 * order within a bucket (sealed or active segments, several segments a day).
 * A day held by one sealed segment and one event is read in one pass: its
 * rows are sorted by (user, time), which keeps that order too. The kernels
 * rely on that order alone.
 *
 * A row reaches the visitor with its reference mask (bit i: reference i's
 * event and filters hold), its breakdown value as a task-wide id (0 "not
 * set", else valueTexts[id]) and its math property as a number (NaN when it
 * does not count).
 */
import { dayMs } from "../buckets.js";
import { numericPattern } from "../filters.js";
import type { SegmentView, ValueIdColumn } from "../segment-view.js";
import { maskOf, segmentReferences, type GatherPlan, type SegmentReference } from "./event-rows.js";
import { sealedShardRows, segmentsByDay, type RowRange } from "./rows.js";

/** A day cut by more local boundaries than this (hourly buckets) would be read once per part: the gathered path is faster then. */
const partsPerDayMax = 4;

/** One part of a UTC day: offsets [lowMs, highMs) from the day's start, all in `bucket`. */
interface DayPart {
  lowMs: number;
  highMs: number;
  bucket: number;
}

/** One referenced event of one segment: its rows (sealed: the shard's range; active: every row, checked) and references. */
interface EventScan {
  eventId: number;
  start: number;
  end: number;
  references: SegmentReference[];
  /** Whether some reference has a filter to check per row. */
  filtered: boolean;
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
  days: Array<{ dayStartMs: number; parts: DayPart[]; segments: SegmentScan[] }>;
  valueTexts: string[];
  userLo: number;
  userHi: number;
}

/** Row visitor: shard-relative user slot, reference mask, value id, number, bucket, time. */
export type RowVisit = (slot: number, mask: number, value: number, number: number, bucket: number, timeMs: number) => void;

const shardRows: RowRange = { start: 0, end: 0 };
const zeroIds = new Int32Array(1);
const noNumbers = new Float64Array([NaN]);

/** The scan of `gather` over buckets [startsMs[b], startsMs[b + 1]); undefined when a day has too many parts. */
export function planColumnScan(segments: readonly SegmentView[], gather: GatherPlan, startsMs: Float64Array, userLo: number, userHi: number): ColumnScan | undefined {
  const order = segmentsByDay(segments, gather.fromMs, gather.toMsExclusive);
  const scan: ColumnScan = { days: [], valueTexts: [""], userLo, userHi };
  const globalIdOfText = new Map<string, number>();
  for (let index = 0; index < order.length; ) {
    const dayStartMs = segments[order[index]].dayStartMs;
    const parts = dayParts(startsMs, dayStartMs);
    if (parts.length > partsPerDayMax) return undefined;
    const scans: SegmentScan[] = [];
    for (; index < order.length && segments[order[index]].dayStartMs === dayStartMs; index++) {
      if (parts.length === 0) continue;
      const segmentScan = planSegment(segments[order[index]], gather, userLo, userHi, scan.valueTexts, globalIdOfText);
      if (segmentScan !== undefined) scans.push(segmentScan);
    }
    if (scans.length > 0) scan.days.push({ dayStartMs, parts, segments: scans });
  }
  return scan;
}

/** Visits every row of the scan, bucket after bucket. */
export function runColumnScan(scan: ColumnScan, visit: RowVisit): void {
  for (const day of scan.days) {
    const only = day.segments[0];
    if (day.segments.length === 1 && only.segment.eventRowStart !== undefined && only.events.length === 1) {
      // One sealed segment, one event: each user's rows come in time order, so one pass keeps every user's buckets in order.
      scanSortedDay(only, day.parts, scan.userLo, visit);
      continue;
    }
    for (const part of day.parts) for (const segment of day.segments) scanPart(segment, part, scan.userLo, scan.userHi, visit);
  }
}

/** The parts of the UTC day starting at dayStartMs that lie in a bucket, in time order. */
function dayParts(startsMs: Float64Array, dayStartMs: number): DayPart[] {
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

function planSegment(segment: SegmentView, gather: GatherPlan, userLo: number, userHi: number, valueTexts: string[], globalIdOfText: Map<string, number>): SegmentScan | undefined {
  const events: EventScan[] = [];
  for (const [eventId, references] of segmentReferences(segment, gather.references)) {
    let start = 0;
    let end = segment.rowCount;
    if (segment.eventRowStart !== undefined) {
      sealedShardRows(segment.eventRowStart, segment.userIds, eventId, userLo, userHi, shardRows);
      ({ start, end } = shardRows);
      if (start === end) continue;
    }
    events.push({ eventId, start, end, references, filtered: references.some((reference) => reference.passes.length > 0) || references.length > 1 });
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
  let numbers = noNumbers;
  const math = gather.math.kind === "key" && gather.math.keyId !== undefined ? segment.property(gather.math.keyId) : undefined;
  if (math !== undefined) {
    mathIds = math.valueIds;
    numbers = new Float64Array(Math.max(1, math.texts.length)).fill(NaN);
    for (let id = 1; id < math.texts.length; id++) {
      const text = math.texts[id];
      // A string counts only when its value is finite: "1e400" does not (SPEC §7.4).
      if (numericPattern.test(text)) {
        const number = Number(text);
        if (Number.isFinite(number)) numbers[id] = number;
      }
    }
  }
  return { segment, events, valueIds, globalIds, mathIds, numbers };
}

function scanPart(scan: SegmentScan, part: DayPart, userLo: number, userHi: number, visit: RowVisit): void {
  const { segment, valueIds, globalIds, mathIds, numbers } = scan;
  const { userIds, timeOffsetMs, eventIds, dayStartMs } = segment;
  const { lowMs, highMs, bucket } = part;
  for (const event of scan.events) {
    const { eventId, references, filtered } = event;
    // One reference without filters: its mask is constant.
    const constantMask = filtered ? 0 : (1 << references[0].bit) >>> 0;
    for (let row = event.start; row < event.end; row++) {
      const offset = timeOffsetMs[row];
      if (offset < lowMs || offset >= highMs) continue;
      const user = userIds[row];
      if (eventIds !== undefined && (eventIds[row] !== eventId || user < userLo || user >= userHi)) continue;
      const mask = filtered ? maskOf(references, row) : constantMask;
      if (mask === 0) continue;
      visit(user - userLo, mask, valueIds === undefined ? 0 : globalIds[valueIds[row]], mathIds === undefined ? NaN : numbers[mathIds[row]], bucket, dayStartMs + offset);
    }
  }
}

function scanSortedDay(scan: SegmentScan, parts: readonly DayPart[], userLo: number, visit: RowVisit): void {
  const { segment, valueIds, globalIds, mathIds, numbers } = scan;
  const { userIds, timeOffsetMs, dayStartMs } = segment;
  const { start, end, references, filtered } = scan.events[0];
  const constantMask = filtered ? 0 : (1 << references[0].bit) >>> 0;
  const firstMs = parts[0].lowMs;
  const lastMs = parts[parts.length - 1].highMs;
  for (let row = start; row < end; row++) {
    const offset = timeOffsetMs[row];
    if (offset < firstMs || offset >= lastMs) continue;
    let part = 0;
    while (offset >= parts[part].highMs) part++;
    if (offset < parts[part].lowMs) continue;
    const mask = filtered ? maskOf(references, row) : constantMask;
    if (mask === 0) continue;
    visit(userIds[row] - userLo, mask, valueIds === undefined ? 0 : globalIds[valueIds[row]], mathIds === undefined ? NaN : numbers[mathIds[row]], parts[part].bucket, dayStartMs + offset);
  }
}
