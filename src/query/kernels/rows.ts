/**
 * Row-finding helpers shared by the kernels: which segments a time range
 * touches, in day order, and which rows of a sealed segment belong to one
 * event and one shard of users. Sealed rows are sorted by (event, user, time),
 * so the latter is two binary searches instead of a scan.
 */
import type { SegmentView } from "../segment-view.js";
import { dayMs } from "../buckets.js";

/** A half-open row interval [start, end), reused across segments so that finding one allocates nothing. */
export interface RowRange {
  start: number;
  end: number;
}

/** First index in [start, end) whose user id is >= user; end when there is none. */
export function lowerBoundUser(userIds: Uint32Array, start: number, end: number, user: number): number {
  let low = start;
  let high = end;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (userIds[middle] < user) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** First index of ascending `values` that is >= target; values.length when there is none. */
export function lowerBound(values: Uint32Array, target: number): number {
  return lowerBoundUser(values, 0, values.length, target);
}

/** First index in [start, end) whose time is >= timeMs; end when there is none. */
export function lowerBoundTime(times: Float64Array, start: number, end: number, timeMs: number): number {
  let low = start;
  let high = end;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (times[middle] < timeMs) low = middle + 1;
    else high = middle;
  }
  return low;
}

/**
 * Rows of `eventId` with a user in [userLo, userHi) in a sealed segment
 * (one whose eventRowStart is set). Empty when the event has no rows.
 */
export function sealedShardRows(
  eventRowStart: Uint32Array,
  userIds: Uint32Array,
  eventId: number,
  userLo: number,
  userHi: number,
  range: RowRange,
): void {
  if (eventId + 1 >= eventRowStart.length) {
    range.start = 0;
    range.end = 0;
    return;
  }
  const eventStart = eventRowStart[eventId];
  const eventEnd = eventRowStart[eventId + 1];
  range.start = lowerBoundUser(userIds, eventStart, eventEnd, userLo);
  range.end = lowerBoundUser(userIds, range.start, eventEnd, userHi);
}

/** Rows of eventId in the sealed segments. */
export function sealedEventRowCount(segments: readonly SegmentView[], eventId: number): number {
  let rows = 0;
  for (const segment of segments) {
    const starts = segment.eventRowStart;
    if (starts !== undefined && eventId + 1 < starts.length) rows += starts[eventId + 1] - starts[eventId];
  }
  return rows;
}

/**
 * Indexes of the segments whose day overlaps [fromMs, toMsExclusive), ordered
 * by day. Kernels rely on the order: all segments of one day (or one week or
 * month bucket) are consecutive, and days come in ascending time.
 */
export function segmentsByDay(segments: readonly SegmentView[], fromMs: number, toMsExclusive: number): number[] {
  const indexes: number[] = [];
  for (let index = 0; index < segments.length; index++) {
    const segment = segments[index];
    if (segment.rowCount > 0 && segment.dayStartMs + dayMs > fromMs && segment.dayStartMs < toMsExclusive) indexes.push(index);
  }
  indexes.sort((left, right) => segments[left].dayStartMs - segments[right].dayStartMs);
  return indexes;
}

/** User ids of an active segment's rows `rows` (one event's, from eventRows) in [userLo, userHi), in row order (repeats kept); returns how many. */
export function selectActiveUsers(rows: Uint32Array, userIds: Uint32Array, userLo: number, userHi: number, users: Uint32Array): number {
  let userCount = 0;
  for (let index = 0; index < rows.length; index++) {
    const user = userIds[rows[index]];
    users[userCount] = user;
    userCount += user >= userLo && user < userHi ? 1 : 0;
  }
  return userCount;
}
