/**
 * Compaction: merges the sealed segments of one (workspace, day) into one.
 * Every checkpoint seals a new segment for each day it touched, so without
 * merging a day collects one segment per checkpoint, and every query pays a
 * per-segment cost (descriptors to clone, bitmaps to OR, runs to walk) for
 * each of them. Runs in the worker pool.
 *
 * Crash safety: the merged segment names the segments it replaces in its
 * `_meta.json` and is published (renamed into place) before they are deleted;
 * start-up deletes any segment that a published segment replaces.
 */
import { strict as assert } from "node:assert";
import { basename } from "node:path";
import { loadSegment, readSegmentFile, sealSegment, type LoadSegmentResult } from "./segment-format.js";

export interface MergeInput {
  /** Sealed segment directories of one day, oldest first. */
  directories: string[];
  target: string;
  dayStartMs: number;
  fsync: boolean;
}

export function mergeSegments(input: MergeInput): LoadSegmentResult {
  const parts = input.directories.map((directory) => {
    const loaded = loadSegment(directory);
    const layout = loaded.layout;
    const uuidRows = layout.uuidRows ? new Uint32Array(readSegmentFile(directory, layout.uuidRows).slice().buffer) : new Uint32Array(0);
    const uuids = layout.uuids ? readSegmentFile(directory, layout.uuids) : new Uint8Array(0);
    return { ...loaded, uuidRows, uuids };
  });
  let rowCount = 0;
  for (const part of parts) rowCount += part.layout.rowCount;

  const timeOffsetMs = new Uint32Array(rowCount);
  const userIds = new Uint32Array(rowCount);
  const eventIds = new Uint32Array(rowCount);
  const uuidPresent = new Uint8Array(rowCount);
  const uuidBytes = new Uint8Array(rowCount * 16);
  const properties = new Map<number, { texts: string[]; ids: Map<string, number>; valueIds: Uint32Array }>();

  let offset = 0;
  for (const { layout, memory, uuidRows, uuids } of parts) {
    const rows = layout.rowCount;
    timeOffsetMs.set(new Uint32Array(memory, layout.time.offset, rows), offset);
    userIds.set(new Uint32Array(memory, layout.user.offset, rows), offset);
    const eventStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
    for (let event = 0; event < layout.eventCount; event++) eventIds.fill(event, offset + eventStart[event], offset + eventStart[event + 1]);
    for (let index = 0; index < uuidRows.length; index++) {
      const row = offset + uuidRows[index];
      uuidPresent[row] = 1;
      uuidBytes.set(uuids.subarray(index * 16, index * 16 + 16), row * 16);
    }
    for (const property of layout.properties) {
      let merged = properties.get(property.keyId);
      if (merged === undefined) {
        merged = { texts: [""], ids: new Map(), valueIds: new Uint32Array(rowCount) };
        properties.set(property.keyId, merged);
      }
      // Dictionaries are per segment: map this segment's ids onto the merged dictionary.
      const ends = new Uint32Array(memory, property.textEnds.offset, property.valueCount + 1);
      const bytes = Buffer.from(memory, property.texts.offset, property.texts.bytes);
      const remap = new Uint32Array(property.valueCount + 1);
      for (let id = 1; id <= property.valueCount; id++) {
        const text = bytes.toString("utf8", ends[id - 1], ends[id]);
        let mergedId = merged.ids.get(text);
        if (mergedId === undefined) {
          mergedId = merged.texts.length;
          merged.texts.push(text);
          merged.ids.set(text, mergedId);
        }
        remap[id] = mergedId;
      }
      const values =
        property.width === 1
          ? new Uint8Array(memory, property.values.offset, rows)
          : property.width === 2
            ? new Uint16Array(memory, property.values.offset, rows)
            : new Uint32Array(memory, property.values.offset, rows);
      const target = merged.valueIds;
      for (let row = 0; row < rows; row++) if (values[row] !== 0) target[offset + row] = remap[values[row]];
    }
    offset += rows;
  }

  const result = sealSegment({
    directory: input.target,
    dayStartMs: input.dayStartMs,
    rowCount,
    timeOffsetMs,
    userIds,
    eventIds,
    uuidPresent,
    uuidBytes,
    properties: [...properties].map(([keyId, merged]) => ({ keyId, valueIds: merged.valueIds, texts: merged.texts })),
    fsync: input.fsync,
    replaces: input.directories.map((directory) => basename(directory)),
  });
  assert.equal(result.layout.rowCount, rowCount, "merged segment lost rows");
  return result;
}
