/**
 * Reads a workspace's events back out of a snapshot (snapshot.ts) of a data
 * directory, one segment or WAL file at a time, through the store's own
 * readers: sealed segments (segment-format.ts loadSegment), WAL files
 * (wal.ts readWalFile, which cuts nothing) and dictionaries. Memory holds the
 * dictionaries, one segment and one WAL file (bounded by the checkpoint
 * settings), never the whole store.
 *
 * The store keeps each property's text (SPEC §4), not its JSON type, so a
 * value comes back as the JSON value whose text it is: a number, boolean,
 * object or array when the text is exactly that value's printed form, else
 * the string. Re-ingested, every value gets the same text back.
 */
import { createHash } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";

import { decodeChunk } from "../storage/chunk-codec.js";
import { Dictionary } from "../storage/dictionary.js";
import { checkpointSequenceOf } from "./snapshot.js";
import { dictionaryPath, segmentDirectory, segmentNamePattern, walDirectory, workspaceDirectory } from "../storage/paths.js";
import { loadSegment, PropertyDirectory, readSegmentFile, readSegmentLayout } from "../storage/segment-reader.js";
import { readWalFile } from "../storage/wal.js";

export interface ExportedEvent {
  event: string;
  distinctId: string;
  timestamp: string;
  properties: Record<string, unknown>;
  uuid: string;
}

const dayMs = 86_400_000;

/** Rows of one segment turned into events per slice, so a slice's property objects are all that is built at once. */
const rowsPerSlice = 4096;

function uuidText(bytes: Uint8Array, offset: number): string {
  const hex = Buffer.from(bytes.buffer, bytes.byteOffset + offset, 16).toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * The uuid an event stored without one is exported with: a UUID version 8
 * (RFC 9562, "custom") hashed from where the row is stored, so one export file
 * imported twice stores each event once, while two identical events stay two.
 * A place changes when the store seals or merges the row: a later export may
 * give such a row another uuid (events sent with a uuid keep theirs).
 */
function derivedUuid(workspaceId: string, place: string, row: number): string {
  const bytes = createHash("sha256").update(`eventide-export\0${workspaceId}\0${place}\0${row}`).digest().subarray(0, 16);
  bytes[6] = (bytes[6] & 0x0f) | 0x80;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  return uuidText(bytes, 0);
}

/** The JSON value whose SPEC §4 text `text` is (see the module comment). */
export function propertyValueOfText(text: string): unknown {
  if (text === "true") return true;
  if (text === "false") return false;
  const first = text.charCodeAt(0);
  if (first === 0x2d || (first >= 0x30 && first <= 0x39)) {
    const number = Number(text);
    if (Number.isFinite(number) && String(number) === text) return number;
    return text;
  }
  if (first === 0x7b || first === 0x5b) {
    try {
      const value: unknown = JSON.parse(text);
      if (JSON.stringify(value) === text) return value;
    } catch {
      // Not JSON: a string that starts with a brace.
    }
  }
  return text;
}

/** Day directories of the workspace in [fromMs, toMs), ascending. */
function daysIn(snapshotDir: string, workspaceId: string, fromMs: number, toMs: number): string[] {
  const directory = workspaceDirectory(snapshotDir, workspaceId);
  if (!existsSync(directory)) return [];
  return readdirSync(directory)
    .filter((name) => /^\d{4}-\d{2}-\d{2}$/.test(name))
    .filter((day) => {
      const startMs = Date.parse(`${day}T00:00:00Z`);
      return startMs + dayMs > fromMs && startMs < toMs;
    })
    .sort();
}

/** A day's segments as recovery would adopt them: published, and not replaced by a merge. */
function segmentsOfDay(snapshotDir: string, workspaceId: string, day: string, checkpointSequence: number): string[] {
  const names = readdirSync(join(workspaceDirectory(snapshotDir, workspaceId), day)).filter((name) => {
    const match = segmentNamePattern.exec(name);
    return match !== null && Number(match[1]) <= checkpointSequence;
  });
  const replaced = new Set<string>();
  for (const name of names) for (const victim of readSegmentLayout(segmentDirectory(snapshotDir, workspaceId, day, name)).replaces ?? []) replaced.add(victim);
  return names.filter((name) => !replaced.has(name)).sort();
}

/** Every event of the workspace with a timestamp in [fromMs, toMs): sealed segments day by day, then the WAL's rows. */
export function* readWorkspaceEvents(snapshotDir: string, workspaceId: string, fromMs: number, toMs: number): Generator<ExportedEvent> {
  const events = Dictionary.load(dictionaryPath(snapshotDir, workspaceId, "events"), false);
  const users = Dictionary.load(dictionaryPath(snapshotDir, workspaceId, "users"), false);
  const keys = Dictionary.load(dictionaryPath(snapshotDir, workspaceId, "keys"), false);
  const checkpointSequence = checkpointSequenceOf(snapshotDir);

  for (const day of daysIn(snapshotDir, workspaceId, fromMs, toMs)) {
    for (const segmentName of segmentsOfDay(snapshotDir, workspaceId, day, checkpointSequence)) {
      yield* segmentEvents(segmentDirectory(snapshotDir, workspaceId, day, segmentName), `${day}/${segmentName}`);
    }
  }

  const wal = walDirectory(snapshotDir);
  const walNames = existsSync(wal) ? readdirSync(wal).filter((name) => /^\d{12}\.wal$/.test(name) && Number(name.slice(0, 12)) >= checkpointSequence).sort() : [];
  for (const walName of walNames) {
    const { records } = readWalFile(join(wal, walName));
    for (let recordIndex = 0; recordIndex < records.length; recordIndex++) {
      if (records[recordIndex].workspaceId !== workspaceId) continue;
      yield* chunkEvents(records[recordIndex].payload, `wal/${walName}/${recordIndex}`);
    }
  }

  function* segmentEvents(directory: string, place: string): Generator<ExportedEvent> {
    const { layout, memory } = loadSegment(directory);
    const rowCount = layout.rowCount;
    const time = new Uint32Array(memory, layout.time.offset, rowCount);
    const user = new Uint32Array(memory, layout.user.offset, rowCount);
    const eventStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
    const uuidOfRow = new Int32Array(rowCount).fill(-1);
    let uuids: Uint8Array = new Uint8Array(0);
    if (layout.uuidRows && layout.uuids) {
      const rows = readSegmentFile(directory, layout.uuidRows);
      const uuidRows = new Uint32Array(rows.buffer, rows.byteOffset, rows.byteLength / 4);
      uuids = readSegmentFile(directory, layout.uuids);
      for (let index = 0; index < uuidRows.length; index++) uuidOfRow[uuidRows[index]] = index;
    }
    const propertyDirectory = new PropertyDirectory(layout, memory);
    const stored = Array.from({ length: propertyDirectory.keyCount }, (_, index) => propertyDirectory.at(index));
    const texts = stored.map((property) => property.texts());
    const cursors = new Uint32Array(stored.length);
    let event = 0;
    for (let sliceStart = 0; sliceStart < rowCount; sliceStart += rowsPerSlice) {
      const sliceEnd = Math.min(rowCount, sliceStart + rowsPerSlice);
      const properties = Array.from({ length: sliceEnd - sliceStart }, () => ({}) as Record<string, unknown>);
      for (let keyIndex = 0; keyIndex < stored.length; keyIndex++) {
        const property = stored[keyIndex];
        const key = keys.texts[property.keyId];
        if (property.rows === undefined) {
          for (let row = sliceStart; row < sliceEnd; row++) {
            const valueId = property.values[row];
            if (valueId !== 0) properties[row - sliceStart][key] = propertyValueOfText(texts[keyIndex][valueId]);
          }
        } else {
          // Sparse rows ascend: each key's cursor moves forward slice by slice.
          let entry = cursors[keyIndex];
          while (entry < property.rows.length && property.rows[entry] < sliceEnd) {
            properties[property.rows[entry] - sliceStart][key] = propertyValueOfText(texts[keyIndex][property.values[entry]]);
            entry++;
          }
          cursors[keyIndex] = entry;
        }
      }
      for (let row = sliceStart; row < sliceEnd; row++) {
        while (eventStart[event + 1] <= row) event++;
        const timeMs = layout.dayStartMs + time[row];
        if (timeMs < fromMs || timeMs >= toMs) continue;
        yield {
          event: events.texts[event],
          distinctId: users.textOf(user[row]),
          timestamp: new Date(timeMs).toISOString(),
          properties: properties[row - sliceStart],
          uuid: uuidOfRow[row] >= 0 ? uuidText(uuids, uuidOfRow[row] * 16) : derivedUuid(workspaceId, place, row),
        };
      }
    }
  }

  function* chunkEvents(payload: Uint8Array, place: string): Generator<ExportedEvent> {
    const chunk = decodeChunk(payload);
    const properties = Array.from({ length: chunk.rowCount }, () => ({}) as Record<string, unknown>);
    for (let key = 0; key < chunk.keyStrings.length; key++) {
      const keyText = chunk.string(chunk.keyStrings[key]);
      for (let entry = chunk.entryStarts[key]; entry < chunk.entryStarts[key + 1]; entry++) {
        properties[chunk.entryRows[entry]][keyText] = propertyValueOfText(chunk.string(chunk.entryValues[entry]));
      }
    }
    for (let row = 0; row < chunk.rowCount; row++) {
      const timeMs = chunk.timeMs[row];
      if (timeMs < fromMs || timeMs >= toMs) continue;
      yield {
        event: chunk.string(chunk.eventNameString[row]),
        distinctId: chunk.string(chunk.distinctIdString[row]),
        timestamp: new Date(timeMs).toISOString(),
        properties: properties[row],
        uuid: chunk.uuidPresent?.[row] ? uuidText(chunk.uuidBytes!, row * 16) : derivedUuid(workspaceId, place, row),
      };
    }
  }
}
