/**
 * Sealed segments: immutable column files for one workspace and UTC day,
 * published atomically (a tmp_ directory renamed into place). Rows are sorted
 * by (event id, user id, time), so an event's rows are one contiguous run — a
 * day's total is a subtraction — and each event carries a roaring bitmap of the
 * users it has, for funnels and retention.
 *
 *   _meta.json            layout, row count, per-file byte length and CRC32
 *   time.u32              ms since the UTC day start
 *   user.u32              dense user id
 *   event-start.u32       rows of event e are [start[e], start[e + 1])
 *   bitmaps.roaring       portable roaring bitmaps, one per event, concatenated
 *   bitmap-end.u32        byte end of each event's bitmap
 *   prop-<key>.u8|u16|u32 value id per row (0 = not set)
 *   prop-<key>.text-end.u32, prop-<key>.text.utf8   the value dictionary
 *   uuid-row.u32, uuid.b16   rows that carried a uuid, and their 16 bytes (dedupe only)
 *
 * In memory a segment is one SharedArrayBuffer holding every query column at
 * the offsets of its layout, so a query task passes one handle per segment.
 * Sealing and loading both run in the worker pool, off the main thread.
 */
import { strict as assert } from "node:assert";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { crc32 } from "node:zlib";
import roaring from "roaring";
import { injectFault } from "./fault-injection.js";
import { fsyncDirectory, makeDirectoryDurably, renameIntoPlace, writeFileDurably } from "./files.js";

const { RoaringBitmap32 } = roaring;

export const segmentFormatVersion = 1;

export interface ColumnSpan {
  file: string;
  /** Byte offset inside the segment's SharedArrayBuffer (query columns only). */
  offset: number;
  bytes: number;
  crc: number;
}

export interface PropertyLayout {
  keyId: number;
  /** Bytes per value id: 1, 2 or 4. */
  width: 1 | 2 | 4;
  /** Distinct texts, id 0 (not set) excluded. */
  valueCount: number;
  values: ColumnSpan;
  textEnds: ColumnSpan;
  texts: ColumnSpan;
}

export interface SegmentLayout {
  format: number;
  rowCount: number;
  dayStartMs: number;
  /** Number of event ids covered by eventStart (eventStart has eventCount + 1 entries). */
  eventCount: number;
  time: ColumnSpan;
  user: ColumnSpan;
  eventStart: ColumnSpan;
  bitmaps: ColumnSpan;
  bitmapEnds: ColumnSpan;
  properties: PropertyLayout[];
  /** Segments of the same day this one replaces (a merge); start-up deletes them if they remain. */
  replaces?: string[];
  /** Not loaded for queries: read at start-up to rebuild the uuid set. */
  uuidRows: ColumnSpan | undefined;
  uuids: ColumnSpan | undefined;
  /** SharedArrayBuffer size holding every query column. */
  memoryBytes: number;
}

export interface LoadSegmentResult {
  kind: "load-segment";
  layout: SegmentLayout;
  memory: SharedArrayBuffer;
}

export interface SealInput {
  directory: string;
  dayStartMs: number;
  rowCount: number;
  timeOffsetMs: Uint32Array;
  userIds: Uint32Array;
  eventIds: Uint32Array;
  uuidPresent: Uint8Array;
  uuidBytes: Uint8Array;
  properties: Array<{ keyId: number; valueIds: Uint32Array; texts: string[] }>;
  fsync: boolean;
  /** Names of the segments a merge replaces. */
  replaces?: string[];
}

function align8(value: number): number {
  return (value + 7) & ~7;
}

/** One stable counting pass: `target` gets `source` ordered by the digit (key >>> shift) & mask. */
function radixPass(source: Uint32Array, target: Uint32Array, key: Uint32Array, shift: number, bits: number, counts: Uint32Array): void {
  const mask = (1 << bits) - 1;
  const length = source.length;
  counts.fill(0, 0, mask + 1);
  for (let index = 0; index < length; index++) counts[(key[source[index]] >>> shift) & mask]++;
  let sum = 0;
  for (let digit = 0; digit <= mask; digit++) {
    const count = counts[digit];
    counts[digit] = sum;
    sum += count;
  }
  for (let index = 0; index < length; index++) {
    const row = source[index];
    target[counts[(key[row] >>> shift) & mask]++] = row;
  }
}

/** Sorts, encodes and publishes one segment; returns its in-memory form. */
export function sealSegment(input: SealInput): LoadSegmentResult {
  const { rowCount, timeOffsetMs, userIds, eventIds } = input;

  // Order rows by (event, user, time) with a stable LSD radix sort: counting
  // passes over time (27 bits: a day has 86.4 M ms), then user, then event.
  // Each pass is a linear scan, so sealing 2 M rows costs tens of ms where a
  // comparator sort cost seconds.
  let eventCount = 0;
  let maxUser = 0;
  for (let row = 0; row < rowCount; row++) {
    if (eventIds[row] + 1 > eventCount) eventCount = eventIds[row] + 1;
    if (userIds[row] > maxUser) maxUser = userIds[row];
  }
  let order = new Uint32Array(rowCount);
  for (let row = 0; row < rowCount; row++) order[row] = row;
  let scratch = new Uint32Array(rowCount);
  const counts = new Uint32Array(1 << 16);
  const passes: Array<[Uint32Array, number, number]> = [
    [timeOffsetMs, 0, 14],
    [timeOffsetMs, 14, 13],
    [userIds, 0, 16],
  ];
  if (maxUser >= 1 << 16) passes.push([userIds, 16, 16]);
  for (const [key, shift, bits] of passes) {
    radixPass(order, scratch, key, shift, bits, counts);
    [order, scratch] = [scratch, order];
  }
  const eventStart = new Uint32Array(eventCount + 1);
  for (let row = 0; row < rowCount; row++) eventStart[eventIds[row] + 1]++;
  for (let event = 0; event < eventCount; event++) eventStart[event + 1] += eventStart[event];
  const cursor = eventStart.slice(0, eventCount);
  for (let index = 0; index < rowCount; index++) {
    const row = order[index];
    scratch[cursor[eventIds[row]]++] = row;
  }
  order = scratch;

  const time = new Uint32Array(rowCount);
  const user = new Uint32Array(rowCount);
  for (let index = 0; index < rowCount; index++) {
    time[index] = timeOffsetMs[order[index]];
    user[index] = userIds[order[index]];
  }

  // Per-event user bitmaps, portable format.
  const bitmapParts: Uint8Array[] = [];
  const bitmapEnds = new Uint32Array(eventCount);
  let bitmapBytes = 0;
  for (let event = 0; event < eventCount; event++) {
    if (eventStart[event + 1] > eventStart[event]) {
      const bitmap = new RoaringBitmap32(user.subarray(eventStart[event], eventStart[event + 1]));
      bitmap.runOptimize();
      const serialized = bitmap.serialize(true);
      bitmapParts.push(serialized);
      bitmapBytes += serialized.length;
    }
    bitmapEnds[event] = bitmapBytes;
  }
  const bitmaps = Buffer.concat(bitmapParts, bitmapBytes);

  // Properties: permute, keep only the texts this segment uses, narrowest id width.
  const properties: Array<{ keyId: number; width: 1 | 2 | 4; values: Uint8Array | Uint16Array | Uint32Array; textEnds: Uint32Array; texts: Buffer }> = [];
  for (const property of input.properties) {
    const remap = new Uint32Array(property.texts.length);
    const usedTexts: string[] = [""];
    const permuted = new Uint32Array(rowCount);
    for (let index = 0; index < rowCount; index++) {
      const oldId = property.valueIds[order[index]];
      if (oldId === 0) continue;
      let newId = remap[oldId];
      if (newId === 0) {
        newId = usedTexts.length;
        usedTexts.push(property.texts[oldId]);
        remap[oldId] = newId;
      }
      permuted[index] = newId;
    }
    if (usedTexts.length === 1) continue;
    const width: 1 | 2 | 4 = usedTexts.length <= 0xff ? 1 : usedTexts.length <= 0xffff ? 2 : 4;
    // TypedArray.prototype.set narrows natively; TypedArray.from would walk an iterator.
    const values = width === 1 ? new Uint8Array(rowCount) : width === 2 ? new Uint16Array(rowCount) : permuted;
    if (values !== permuted) values.set(permuted);
    const encodedTexts = usedTexts.map((text) => Buffer.from(text, "utf8"));
    const textEnds = new Uint32Array(usedTexts.length);
    let end = 0;
    for (let id = 0; id < encodedTexts.length; id++) {
      end += encodedTexts[id].length;
      textEnds[id] = end;
    }
    properties.push({ keyId: property.keyId, width, values, textEnds, texts: Buffer.concat(encodedTexts, end) });
  }

  // uuids: only the rows that carried one (new row numbers), for dedupe rebuild.
  // Counted first, then filled: no list growing per row, no view per uuid.
  let uuidCount = 0;
  for (let index = 0; index < rowCount; index++) uuidCount += input.uuidPresent[order[index]];
  const uuidRows = new Uint32Array(uuidCount);
  const uuids = new Uint8Array(uuidCount * 16);
  const uuidSource = input.uuidBytes;
  for (let index = 0, cursor = 0; index < rowCount; index++) {
    const row = order[index];
    if (input.uuidPresent[row] === 0) continue;
    uuidRows[cursor] = index;
    for (let byte = 0; byte < 16; byte++) uuids[cursor * 16 + byte] = uuidSource[row * 16 + byte];
    cursor++;
  }

  // Lay the query columns out in one shared buffer.
  let memoryBytes = 0;
  const place = (file: string, bytes: Uint8Array): { span: ColumnSpan; bytes: Uint8Array } => {
    const span: ColumnSpan = { file, offset: memoryBytes, bytes: bytes.byteLength, crc: crc32(bytes) };
    memoryBytes = align8(memoryBytes + bytes.byteLength);
    return { span, bytes };
  };
  const asBytes = (array: ArrayBufferView) => new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
  const placed = [
    place("time.u32", asBytes(time)),
    place("user.u32", asBytes(user)),
    place("event-start.u32", asBytes(eventStart)),
    place("bitmaps.roaring", asBytes(bitmaps)),
    place("bitmap-end.u32", asBytes(bitmapEnds)),
  ];
  const propertyLayouts: PropertyLayout[] = [];
  for (const property of properties) {
    const valuesPlaced = place(`prop-${property.keyId}.u${property.width * 8}`, asBytes(property.values));
    const endsPlaced = place(`prop-${property.keyId}.text-end.u32`, asBytes(property.textEnds));
    const textsPlaced = place(`prop-${property.keyId}.text.utf8`, asBytes(property.texts));
    placed.push(valuesPlaced, endsPlaced, textsPlaced);
    propertyLayouts.push({
      keyId: property.keyId,
      width: property.width,
      valueCount: property.textEnds.length - 1,
      values: valuesPlaced.span,
      textEnds: endsPlaced.span,
      texts: textsPlaced.span,
    });
  }
  const memory = new SharedArrayBuffer(Math.max(8, memoryBytes));
  const memoryView = new Uint8Array(memory);
  for (const { span, bytes } of placed) memoryView.set(bytes, span.offset);

  const uuidRowsSpan: ColumnSpan | undefined = uuidRows.length ? { file: "uuid-row.u32", offset: -1, bytes: uuidRows.byteLength, crc: crc32(asBytes(uuidRows)) } : undefined;
  const uuidsSpan: ColumnSpan | undefined = uuidRows.length ? { file: "uuid.b16", offset: -1, bytes: uuids.byteLength, crc: crc32(uuids) } : undefined;

  const layout: SegmentLayout = {
    format: segmentFormatVersion,
    rowCount,
    dayStartMs: input.dayStartMs,
    eventCount,
    time: placed[0].span,
    user: placed[1].span,
    eventStart: placed[2].span,
    bitmaps: placed[3].span,
    bitmapEnds: placed[4].span,
    properties: propertyLayouts,
    uuidRows: uuidRowsSpan,
    uuids: uuidsSpan,
    memoryBytes: memory.byteLength,
    ...(input.replaces ? { replaces: input.replaces } : {}),
  };

  // Publish: every file into tmp_<name>, fsync each, then one rename makes the segment exist.
  const parent = dirname(input.directory);
  // Durably: the day directory's entry must survive a power loss once a checkpoint names its segments.
  makeDirectoryDurably(parent, input.fsync);
  const temporary = join(parent, `tmp_${input.directory.slice(parent.length + 1)}`);
  rmSync(temporary, { recursive: true, force: true });
  mkdirSync(temporary);
  injectFault("segment.write", temporary);
  for (const { span, bytes } of placed) writeFileDurably(join(temporary, span.file), bytes, input.fsync);
  if (uuidRowsSpan) {
    writeFileDurably(join(temporary, uuidRowsSpan.file), asBytes(uuidRows), input.fsync);
    writeFileDurably(join(temporary, uuidsSpan!.file), uuids, input.fsync);
  }
  writeFileDurably(join(temporary, "_meta.json"), JSON.stringify(layout), input.fsync);
  if (input.fsync) fsyncDirectory(temporary);
  injectFault("segment.rename", input.directory);
  renameIntoPlace(temporary, input.directory, input.fsync);
  return { kind: "load-segment", layout, memory };
}

export class SegmentCorruptError extends Error {}

export function readSegmentLayout(directory: string): SegmentLayout {
  const layout = JSON.parse(readFileSync(join(directory, "_meta.json"), "utf8")) as SegmentLayout;
  if (layout.format !== segmentFormatVersion) throw new SegmentCorruptError(`${directory}: unknown segment format ${layout.format}`);
  return layout;
}

function readSpan(directory: string, span: ColumnSpan, target: Uint8Array): void {
  const path = join(directory, span.file);
  const fd = openSync(path, "r");
  try {
    let read = 0;
    while (read < span.bytes) {
      const count = readSync(fd, target, read, span.bytes - read, read);
      if (count === 0) throw new SegmentCorruptError(`${path}: shorter than ${span.bytes} bytes`);
      read += count;
    }
  } finally {
    closeSync(fd);
  }
  if (crc32(target.subarray(0, span.bytes)) !== span.crc) throw new SegmentCorruptError(`${path}: checksum mismatch`);
}

/** Reads a sealed segment's query columns into one shared buffer, verifying every checksum. */
export function loadSegment(directory: string): LoadSegmentResult {
  const layout = readSegmentLayout(directory);
  const memory = new SharedArrayBuffer(layout.memoryBytes);
  const spans = [layout.time, layout.user, layout.eventStart, layout.bitmaps, layout.bitmapEnds];
  for (const property of layout.properties) spans.push(property.values, property.textEnds, property.texts);
  for (const span of spans) readSpan(directory, span, new Uint8Array(memory, span.offset, span.bytes));
  // Row counts are checked after reading as well as before writing (STYLE rule 2).
  assert.equal(layout.time.bytes, layout.rowCount * 4, `${directory}: time column disagrees with row count`);
  assert.equal(layout.user.bytes, layout.rowCount * 4, `${directory}: user column disagrees with row count`);
  const eventStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
  assert.equal(eventStart[layout.eventCount], layout.rowCount, `${directory}: event runs disagree with row count`);
  return { kind: "load-segment", layout, memory };
}

/** One file of a segment, checksum verified (files that are not query columns: uuids). */
export function readSegmentFile(directory: string, span: ColumnSpan): Uint8Array {
  const target = new Uint8Array(span.bytes);
  readSpan(directory, span, target);
  return target;
}

/** The 16-byte uuids a segment holds (start-up dedupe rebuild). */
export function readSegmentUuids(directory: string, layout: SegmentLayout): Uint8Array {
  if (!layout.uuids) return new Uint8Array(0);
  const target = new Uint8Array(layout.uuids.bytes);
  readSpan(directory, layout.uuids, target);
  return target;
}

export function segmentExists(directory: string): boolean {
  return existsSync(join(directory, "_meta.json"));
}

