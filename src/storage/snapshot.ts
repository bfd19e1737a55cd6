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
export async function takeSnapshot(workspaces: Workspaces, cache: SegmentCache, workspaceId: string, fromMs: number, toMs: number, filterKeyIds: readonly number[]): Promise<Snapshot> {
  // A merge may retire a segment while this snapshot waits for it to load; then look again.
  for (let attempt = 0; ; attempt++) {
    const snapshot = await snapshotOnce(workspaces, cache, workspaceId, fromMs, toMs, filterKeyIds).catch((error: unknown) => {
      if (error instanceof RetiredSegmentError && attempt < limits.snapshotAttemptsMax) return undefined;
      throw error;
    });
    if (snapshot) return snapshot;
  }
}

async function snapshotOnce(workspaces: Workspaces, cache: SegmentCache, workspaceId: string, fromMs: number, toMs: number, filterKeyIds: readonly number[]): Promise<Snapshot> {
  const workspace = workspaces.byId.get(workspaceId);
  if (workspace === undefined) return { segments: [], rowCount: 0 };
  const segments = workspace.segmentsIn(fromMs, toMs);
  // Describe active segments now: rows acknowledged before this moment are counted.
  const descriptors = segments.map((segment) => (segment instanceof ActiveSegment ? segment.describe(filterKeyIds) : undefined));
  const loads: Promise<void>[] = [];
  for (const segment of segments) if (segment instanceof SealedSegment && !segment.memory) loads.push(cache.ensureLoaded(segment));
  const loaded = await Promise.allSettled(loads);
  const retired = segments.some((segment) => segment instanceof SealedSegment && segment.retired);
  if (retired) throw new RetiredSegmentError();
  for (const outcome of loaded) if (outcome.status === "rejected") throw outcome.reason;
  let rowCount = 0;
  for (const segment of segments) rowCount += segment instanceof ActiveSegment ? segment.rowCount : segment.layout.rowCount;
  return { segments: segments.map((segment, index) => descriptors[index] ?? (segment as SealedSegment).describe()), rowCount };
}
