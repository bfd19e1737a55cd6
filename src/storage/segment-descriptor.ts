/**
 * What a query task receives about one segment. Column bytes travel as
 * SharedArrayBuffer handles (shared, never copied); a sealed segment's layout
 * travels as a JSON string, which workers parse once and cache under the
 * segment's key, because a string clones as one memcpy.
 */
import type { ActivePropertyEntries } from "./active-properties.js";
export type SegmentDescriptor = SealedSegmentDescriptor | ActiveSegmentDescriptor;

/**
 * What a query task carries: a sealed segment already posted to the pool goes
 * as its key alone (src/query/segment-posting.ts), and the worker reads it from
 * its cache of views or answers that it lacks it. A bare string, because an
 * object per segment costs ~0.5 µs to clone and a string next to nothing.
 */
export type PostedSegment = SegmentDescriptor | SealedSegmentKey;

export type SealedSegmentKey = string;

export interface SealedSegmentDescriptor {
  kind: "sealed";
  key: string;
  dayStartMs: number;
  layoutJson: string;
  memory: SharedArrayBuffer;
}

export interface ActiveSegmentDescriptor {
  kind: "active";
  key: string;
  dayStartMs: number;
  rowCount: number;
  time: SharedArrayBuffer;
  user: SharedArrayBuffer;
  event: SharedArrayBuffer;
  /**
   * Only the property keys the query filters on, with the entries and texts
   * known when the query started: entryCount u32s of `rows` (ascending) from
   * byte `rowsOffset` and of `valueIds` from `valueIdsOffset`, and the first
   * `texts.count` texts of the key (SharedTexts).
   */
  properties: ActivePropertyEntries[];
}
