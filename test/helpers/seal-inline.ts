import { unpackPropertyEntries } from "../../src/storage/property-transfer.js";
import type { LoadSegmentResult } from "../../src/storage/segment-layout.js";
import { sealSegment } from "../../src/storage/segment-writer.js";
import { loadSegment } from "../../src/storage/segment-reader.js";
import { mergeSegments } from "../../src/storage/segment-merge.js";
import type { ActiveSegment, StoreTasks } from "../../src/storage/store.js";

/** Seals on the calling thread exactly as the pool's worker does (src/workers/worker.ts runSeal); for StoreTasks in tests. */
export async function sealInline(segment: ActiveSegment, directory: string): Promise<LoadSegmentResult> {
  const rows = segment.rowCount;
  return sealSegment({
    directory,
    dayStartMs: segment.dayStartMs,
    rowCount: rows,
    timeOffsetMs: new Uint32Array(segment.time.buffer, 0, rows),
    userIds: new Uint32Array(segment.user.buffer, 0, rows),
    eventIds: new Uint32Array(segment.event.buffer, 0, rows),
    uuidPresent: segment.uuids === undefined ? new Uint8Array(rows) : new Uint8Array(segment.uuids.present.buffer, 0, rows),
    uuidBytes: segment.uuids === undefined ? new Uint8Array(0) : new Uint8Array(segment.uuids.bytes.buffer, 0, rows * 16),
    properties: unpackPropertyEntries(await segment.properties.pack()),
    fsync: false,
  });
}

/** A store's background tasks run on the calling thread: seals as above, loads and merges as the pool's worker runs them. */
export const inlineTasks: StoreTasks = {
  seal: async (segment, directory) => sealInline(segment, directory),
  load: async (directory) => loadSegment(directory),
  merge: async (directories, target, dayStartMs) => mergeSegments({ directories, target, dayStartMs, fsync: false }),
};
