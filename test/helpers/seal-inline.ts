import { unpackPropertyEntries } from "../../src/storage/property-transfer.js";
import type { LoadSegmentResult } from "../../src/storage/segment-layout.js";
import { sealSegment } from "../../src/storage/segment-writer.js";
import type { ActiveSegment } from "../../src/storage/store.js";

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
