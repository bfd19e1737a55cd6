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
  /** Users whose rows are left out (a user deletion rewrites the segments holding their rows). */
  dropUserIds?: readonly number[];
}

/** A row of a dropped user in a part's row map. */
const rowDropped = -1;

export function mergeSegments(input: MergeInput): LoadSegmentResult {
  const parts = input.directories.map((directory) => {
    const loaded = loadSegment(directory);
    const layout = loaded.layout;
    const uuidRows = layout.uuidRows ? new Uint32Array(readSegmentFile(directory, layout.uuidRows).slice().buffer) : new Uint32Array(0);
    const uuids = layout.uuids ? readSegmentFile(directory, layout.uuids) : new Uint8Array(0);
    return { ...loaded, uuidRows, uuids };
  });
  const dropped = new Set(input.dropUserIds ?? []);
  // Per part, the merged row of each of its rows (rowDropped for rows of a dropped user).
  const rowMaps = parts.map(({ layout, memory }) => {
    const users = new Uint32Array(memory, layout.user.offset, layout.rowCount);
    const map = new Int32Array(layout.rowCount);
    return { users, map };
  });
  let rowCount = 0;
  for (const { users, map } of rowMaps) {
    for (let row = 0; row < users.length; row++) map[row] = dropped.size > 0 && dropped.has(users[row]) ? rowDropped : rowCount++;
  }

  const timeOffsetMs = new Uint32Array(rowCount);
  const userIds = new Uint32Array(rowCount);
  const eventIds = new Uint32Array(rowCount);
  const uuidPresent = new Uint8Array(rowCount);
  const uuidBytes = new Uint8Array(rowCount * 16);
  // Merged property entries: parts in order, each part's entries ascending, so
  // every key's merged rows ascend. Sized by a first pass over the directories
  // (an upper bound when rows are dropped; cut to what was filled).
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

  for (let part = 0; part < parts.length; part++) {
    const { layout, memory, uuidRows, uuids } = parts[part];
    const { users, map } = rowMaps[part];
    const rows = layout.rowCount;
    const time = new Uint32Array(memory, layout.time.offset, rows);
    const eventStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
    for (let event = 0; event < layout.eventCount; event++) {
      for (let row = eventStart[event]; row < eventStart[event + 1]; row++) {
        const target = map[row];
        if (target === rowDropped) continue;
        timeOffsetMs[target] = time[row];
        userIds[target] = users[row];
        eventIds[target] = event;
      }
    }
    for (let index = 0; index < uuidRows.length; index++) {
      const target = map[uuidRows[index]];
      if (target === rowDropped) continue;
      uuidPresent[target] = 1;
      uuidBytes.set(uuids.subarray(index * 16, index * 16 + 16), target * 16);
    }
    const directory = directories[part];
    for (let index = 0; index < directory.keyCount; index++) {
      const property = directory.at(index);
      const merged = properties.get(property.keyId)!;
      // Dictionaries are per segment: map this segment's ids onto the merged dictionary, a text
      // only when a kept row uses it (a dropped user's values must not survive in the dictionary).
      const texts = property.texts();
      const remap = new Uint32Array(property.valueCount + 1);
      const add = (row: number, id: number) => {
        const target = map[row];
        if (target === rowDropped) return;
        let mergedId = remap[id];
        if (mergedId === 0) {
          mergedId = merged.ids.get(texts[id]) ?? merged.texts.length;
          if (mergedId === merged.texts.length) {
            merged.texts.push(texts[id]);
            merged.ids.set(texts[id], mergedId);
          }
          remap[id] = mergedId;
        }
        merged.rows[merged.fill] = target;
        merged.valueIds[merged.fill++] = mergedId;
      };
      const { values } = property;
      if (property.rows === undefined) {
        for (let row = 0; row < rows; row++) if (values[row] !== 0) add(row, values[row]);
      } else {
        for (let entry = 0; entry < property.entryCount; entry++) add(property.rows[entry], values[entry]);
      }
    }
  }
  if (dropped.size === 0) for (const merged of properties.values()) assert.equal(merged.fill, merged.rows.length, `merged property ${merged.keyId} lost entries`);

  const result = sealSegment({
    directory: input.target,
    dayStartMs: input.dayStartMs,
    rowCount,
    timeOffsetMs,
    userIds,
    eventIds,
    uuidPresent,
    uuidBytes,
    properties: [...properties.values()]
      .filter(({ fill }) => fill > 0)
      .map(({ keyId, rows, valueIds, texts, fill }) => ({ keyId, rows: rows.subarray(0, fill), valueIds: valueIds.subarray(0, fill), texts })),
    fsync: input.fsync,
    replaces: input.directories.map((directory) => basename(directory)),
  });
  assert.equal(result.layout.rowCount, rowCount, "merged segment lost rows");
  return result;
}
