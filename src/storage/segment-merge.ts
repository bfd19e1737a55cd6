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
import type { LoadSegmentResult } from "./segment-layout.js";
import { loadSegment, PropertyDirectory, readSegmentFile } from "./segment-reader.js";
import { sealSegment, type PropertyEntries } from "./segment-writer.js";

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
  // Merged property entries: parts in order, each part's entries ascending, so
  // every key's merged rows ascend. Sized by a first pass over the directories.
  const directories = parts.map(({ layout, memory }) => new PropertyDirectory(layout, memory));
  const entryCounts = new Map<number, number>();
  for (const directory of directories) {
    for (let index = 0; index < directory.keyCount; index++) {
      const property = directory.at(index);
      entryCounts.set(property.keyId, (entryCounts.get(property.keyId) ?? 0) + property.entryCount);
    }
  }
  const properties = new Map<number, PropertyEntries & { ids: Map<string, number>; fill: number }>();
  for (const [keyId, entryCount] of entryCounts) {
    properties.set(keyId, { keyId, rows: new Uint32Array(entryCount), valueIds: new Uint32Array(entryCount), texts: [""], ids: new Map(), fill: 0 });
  }

  let offset = 0;
  for (let part = 0; part < parts.length; part++) {
    const { layout, memory, uuidRows, uuids } = parts[part];
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
    const directory = directories[part];
    for (let index = 0; index < directory.keyCount; index++) {
      const property = directory.at(index);
      const merged = properties.get(property.keyId)!;
      // Dictionaries are per segment: map this segment's ids onto the merged dictionary.
      const texts = property.texts();
      const remap = new Uint32Array(property.valueCount + 1);
      for (let id = 1; id <= property.valueCount; id++) {
        let mergedId = merged.ids.get(texts[id]);
        if (mergedId === undefined) {
          mergedId = merged.texts.length;
          merged.texts.push(texts[id]);
          merged.ids.set(texts[id], mergedId);
        }
        remap[id] = mergedId;
      }
      const { values } = property;
      if (property.rows === undefined) {
        for (let row = 0; row < rows; row++) {
          if (values[row] === 0) continue;
          merged.rows[merged.fill] = offset + row;
          merged.valueIds[merged.fill++] = remap[values[row]];
        }
      } else {
        for (let entry = 0; entry < property.entryCount; entry++) {
          merged.rows[merged.fill] = offset + property.rows[entry];
          merged.valueIds[merged.fill++] = remap[values[entry]];
        }
      }
    }
    offset += rows;
  }
  for (const merged of properties.values()) assert.equal(merged.fill, merged.rows.length, `merged property ${merged.keyId} lost entries`);

  const result = sealSegment({
    directory: input.target,
    dayStartMs: input.dayStartMs,
    rowCount,
    timeOffsetMs,
    userIds,
    eventIds,
    uuidPresent,
    uuidBytes,
    properties: [...properties.values()].map(({ keyId, rows, valueIds, texts }) => ({ keyId, rows, valueIds, texts })),
    fsync: input.fsync,
    replaces: input.directories.map((directory) => basename(directory)),
  });
  assert.equal(result.layout.rowCount, rowCount, "merged segment lost rows");
  return result;
}
