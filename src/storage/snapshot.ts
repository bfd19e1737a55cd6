/**
 * Snapshot: the store's read side for a query. It lists the segments of a
 * workspace over a time range, describes active ones at once (rows
 * acknowledged before this moment are counted), loads sealed ones through the
 * segment cache, and hands the descriptors to the query's workers.
 */
import { limits } from "../config/limits.js";
import type { SegmentCache } from "./segment-cache.js";
import type { SegmentDescriptor } from "./segment-descriptor.js";
import { ActiveSegment, RetiredSegmentError, SealedSegment } from "./segments.js";
import type { Workspaces } from "./workspace-store.js";

export interface Snapshot {
  segments: SegmentDescriptor[];
  rowCount: number;
}

/** Descriptors of every segment a query over [fromMs, toMs) must read, loading sealed ones as needed. */
export async function takeSnapshot(workspaces: Workspaces, cache: SegmentCache, workspaceId: string, fromMs: number, toMs: number, filterKeyIds: readonly number[], withTexts = true): Promise<Snapshot> {
  // A merge may retire a segment while this snapshot waits for it to load; then look again.
  for (let attempt = 0; ; attempt++) {
    const snapshot = await snapshotOnce(workspaces, cache, workspaceId, fromMs, toMs, filterKeyIds, withTexts).catch((error: unknown) => {
      if (error instanceof RetiredSegmentError && attempt < limits.snapshotAttemptsMax) return undefined;
      throw error;
    });
    if (snapshot) return snapshot;
  }
}

async function snapshotOnce(workspaces: Workspaces, cache: SegmentCache, workspaceId: string, fromMs: number, toMs: number, filterKeyIds: readonly number[], withTexts: boolean): Promise<Snapshot> {
  const workspace = workspaces.byId.get(workspaceId);
  if (workspace === undefined) return { segments: [], rowCount: 0 };
  const segments = workspace.segmentsIn(fromMs, toMs);
  // Active segments are described now: rows acknowledged before this moment are counted. A sealed one is
  // described as soon as its columns are in memory, because the cache may drop them again while this query
  // waits for others (one query can read more than the cache's budget); its descriptor keeps them for the query.
  const described = segments.map((segment): SegmentDescriptor | Promise<SegmentDescriptor> => {
    if (segment instanceof ActiveSegment) return segment.describe(filterKeyIds, withTexts);
    if (segment.memory) return segment.describe();
    return cache.ensureLoaded(segment).then((memory) => segment.describe(memory));
  });
  const settled = await Promise.allSettled(described);
  const retired = segments.some((segment) => segment instanceof SealedSegment && segment.retired);
  if (retired) throw new RetiredSegmentError();
  const descriptors: SegmentDescriptor[] = [];
  for (const outcome of settled) {
    if (outcome.status === "rejected") throw outcome.reason;
    descriptors.push(outcome.value);
  }
  let rowCount = 0;
  for (const segment of segments) rowCount += segment instanceof ActiveSegment ? segment.rowCount : segment.layout.rowCount;
  return { segments: descriptors, rowCount };
}
