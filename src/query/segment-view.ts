/**
 * The read side of a segment, as query kernels see it: typed arrays and
 * dictionaries, nothing about files or threads. Sealed segments come from disk
 * (sorted by event, user, time, with per-event user bitmaps); active segments
 * come from the write path's column builders (arrival order, no bitmaps).
 * Both live in SharedArrayBuffers, so every worker reads the same bytes.
 */
import type { RoaringBitmap32 } from "roaring";

export type ValueIdColumn = Uint8Array | Uint16Array | Uint32Array;

export interface PropertyColumn {
  /** One value id per row; 0 means the property is not set (absent or null). */
  valueIds: ValueIdColumn;
  /** texts[id] is the property's text (SPEC §4) for id ≥ 1; texts[0] is unused. */
  texts: readonly string[];
  /**
   * Each text's number (NaN when it does not count), at least texts.length of
   * them, when whoever keeps the texts keeps these too (an active segment's
   * index: its texts only grow, and a task's copy is new each time).
   */
  numbers?: () => Float64Array;
}

export interface SegmentView {
  /** Unique and stable for sealed segments: workers cache decoded state under it. */
  key: string;
  /** UTC midnight of the segment's day, in ms since the epoch. Every row lies in [dayStartMs, dayStartMs + 86 400 000). */
  dayStartMs: number;
  rowCount: number;
  /** Milliseconds since dayStartMs, one per row. */
  timeOffsetMs: Uint32Array;
  /** Dense workspace-wide user id, one per row. */
  userIds: Uint32Array;
  /**
   * Sealed segments: rows are ordered by (eventId, userId, timeOffsetMs), and the
   * rows of event e are [eventRowStart[e], eventRowStart[e + 1]). Event ids at or
   * past eventRowStart.length - 1 have no rows. Undefined for active segments.
   */
  eventRowStart: Uint32Array | undefined;
  /** Active segments: the event id of each row, rows in arrival order. Undefined for sealed segments. */
  eventIds: Uint32Array | undefined;
  /** Active segments: the rows of eventId, ascending (from the worker's index, active-index.ts). Undefined for sealed segments. */
  eventRows(eventId: number): Uint32Array | undefined;
  /** The column of a workspace property key id, or undefined when no row of this segment sets it. */
  property(keyId: number): PropertyColumn | undefined;
  /** Rows in [start, end) on which keyId is set, read without building a dense column (workspace listings). */
  rowsWithProperty(keyId: number, start: number, end: number): number;
  /** The set of user ids having at least one row of the event (undefined: no row, or not available); the caller must not change or free it. */
  userBitmap(eventId: number): RoaringBitmap32 | undefined;
  /**
   * Active segments: how many of the event's rows hold each value id of keyId
   * (index: value id, 0 = not set), when every such row's user is below
   * userHi; undefined otherwise, or when not available (sealed segments: see
   * value-counts.ts). The caller must not change or keep it.
   */
  eventValueCounts(eventId: number, keyId: number, userHi: number): Uint32Array | undefined;
  /**
   * Active segments: the users with a row of the event whose time offset lies
   * in [lowMs, highMs), how many such rows, and the highest of their users (-1:
   * none), kept by the worker's index and extended by the rows that arrived
   * since; undefined when not available (sealed segments, an older snapshot).
   * The caller must not change or keep it.
   */
  partUsers(eventId: number, lowMs: number, highMs: number): PartUsers | undefined;
  /** As partUsers, per value id of keyId (0: not set): undefined as well when no row of the segment sets the key. */
  partValueUsers(eventId: number, keyId: number, lowMs: number, highMs: number): PartValueUsers | undefined;
}

export interface PartValueUsers {
  /** By value id; undefined where `rows` is 0. */
  users: ReadonlyArray<RoaringBitmap32 | undefined>;
  rows: Uint32Array;
  userMax: number;
}

export interface PartUsers {
  users: RoaringBitmap32;
  rows: number;
  userMax: number;
}
