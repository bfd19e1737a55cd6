/**
 * Reading sealed segments back (ClickHouse's part reader, Arrow's IPC reader):
 * a segment's query columns into one SharedArrayBuffer at the offsets of its
 * layout, so a query task passes one handle per segment; every file checked
 * against the CRC32 its layout records, a damaged one refused with
 * SegmentCorruptError rather than read as data. Loading runs in the worker
 * pool; start-up and repair verify every file, uuids included.
 */
import { strict as assert } from "node:assert";
import { closeSync, existsSync, readSync } from "node:fs";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import {
  decodeLayout,
  directoryFields,
  DirectoryField,
  findRecord,
  SegmentCorruptError,
  segmentFiles,
  segmentFormatOldestRead,
  segmentFormatVersion,
  valueIdArray,
  type ColumnSpan,
  type LoadSegmentResult,
  type SegmentLayout,
  type StoredProperty,
  type ValueIdArray,
} from "./segment-layout.js";
import { injectFault } from "./fault-injection.js";
import { openRegularFile, readRegularFile } from "./files.js";
import { NewerFormatError } from "./format-versions.js";
import { sharedBuffer } from "./shared-memory.js";
import { storedValueCountsFit } from "./value-counts-index.js";

/** The property directory of a loaded segment: lookup by key id is a binary search. */
export class PropertyDirectory {
  readonly keyCount: number;
  private readonly fields: Float64Array;

  constructor(
    private readonly layout: Pick<SegmentLayout, "rowCount" | "properties">,
    private readonly memory: SharedArrayBuffer,
  ) {
    const section = layout.properties;
    this.keyCount = section?.keyCount ?? 0;
    this.fields = section ? new Float64Array(memory, section.span.offset, this.keyCount * directoryFields) : new Float64Array(0);
  }

  find(keyId: number): StoredProperty | undefined {
    const index = findRecord(this.fields, directoryFields, this.keyCount, DirectoryField.KeyId, keyId);
    return index < 0 ? undefined : this.at(index);
  }

  at(index: number): StoredProperty {
    const base = index * directoryFields;
    const field = (name: DirectoryField) => this.fields[base + name];
    const memory = this.memory;
    const sparse = field(DirectoryField.Sparse) === 1;
    const width = field(DirectoryField.Width) as 1 | 2 | 4;
    const valueCount = field(DirectoryField.ValueCount);
    const entryCount = field(DirectoryField.EntryCount);
    const textEndsOffset = field(DirectoryField.TextEndsOffset);
    const textsOffset = field(DirectoryField.TextsOffset);
    const textsBytes = field(DirectoryField.TextsBytes);
    return {
      keyId: field(DirectoryField.KeyId),
      width,
      valueCount,
      entryCount,
      values: valueIdArray(memory, width, field(DirectoryField.ValuesOffset), sparse ? entryCount : this.layout.rowCount),
      rows: sparse ? new Uint32Array(memory, field(DirectoryField.RowsOffset), entryCount) : undefined,
      texts: () => {
        const ends = new Uint32Array(memory, textEndsOffset, valueCount + 1);
        // Buffer.from over shared memory copies nothing; toString decodes each text once.
        const bytes = Buffer.from(memory, textsOffset, textsBytes);
        const texts = new Array<string>(valueCount + 1);
        texts[0] = "";
        for (let id = 1; id <= valueCount; id++) texts[id] = bytes.toString("utf8", ends[id - 1], ends[id]);
        return texts;
      },
    };
  }
}

/** A dense value-id column of `rowCount` rows (0 = not set) for a stored key, built from the sparse form when needed. */
export function denseValueIds(property: StoredProperty, rowCount: number): ValueIdArray {
  if (property.rows === undefined) return property.values;
  const dense = property.width === 1 ? new Uint8Array(rowCount) : property.width === 2 ? new Uint16Array(rowCount) : new Uint32Array(rowCount);
  const { rows, values } = property;
  for (let entry = 0; entry < rows.length; entry++) dense[rows[entry]] = values[entry];
  return dense;
}

/** A segment's file that is not a regular file (files.ts, openRegularFile). */
function notRegularSegmentFile(path: string): SegmentCorruptError {
  return new SegmentCorruptError(`${path}: not a regular file`);
}

/** Opens a segment's file for reading; SegmentCorruptError when it is not a regular file. */
function openSegmentFile(path: string): number {
  const fd = openRegularFile(path);
  if (fd === undefined) throw notRegularSegmentFile(path);
  return fd;
}

export function readSegmentLayout(directory: string): SegmentLayout {
  const path = join(directory, segmentFiles.meta);
  const layout = decodeLayout(readRegularFile(path, notRegularSegmentFile).toString("utf8"), path);
  if (typeof layout?.format === "number" && layout.format > segmentFormatVersion) throw new NewerFormatError(path, "segment", layout.format, segmentFormatVersion);
  if (typeof layout?.format !== "number" || layout.format < segmentFormatOldestRead) throw new SegmentCorruptError(`${directory}: unknown segment format ${layout?.format}`);
  return layout;
}

/**
 * Reads every file of a sealed segment and checks it against its layout
 * (start-up and repair): throws SegmentCorruptError naming the first bad file.
 * The uuid files too: a damaged one would let a retried event be stored twice.
 */
export function verifySegment(directory: string, layout: SegmentLayout): void {
  const spans = [layout.time, layout.user, layout.eventStart, layout.bitmaps, layout.bitmapEnds, layout.properties?.span, layout.valueCounts?.span, layout.uuidRows, layout.uuids];
  let largest = 0;
  for (const span of spans) if (span) largest = Math.max(largest, span.bytes);
  const scratch = new Uint8Array(largest);
  for (const span of spans) if (span) readSpan(directory, span, scratch);
  if (layout.time.bytes !== layout.rowCount * 4 || layout.user.bytes !== layout.rowCount * 4 || layout.eventStart.bytes !== (layout.eventCount + 1) * 4) {
    throw new SegmentCorruptError(`${directory}: column sizes disagree with its row count`);
  }
}

function readSpan(directory: string, span: ColumnSpan, target: Uint8Array): void {
  const path = join(directory, span.file);
  if (!existsSync(path)) throw new SegmentCorruptError(`${path}: missing`);
  injectFault("segment.read", path);
  const fd = openSegmentFile(path);
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
  const memory = sharedBuffer(layout.memoryBytes);
  const spans = [layout.time, layout.user, layout.eventStart, layout.bitmaps, layout.bitmapEnds];
  if (layout.properties) spans.push(layout.properties.span);
  if (layout.valueCounts) spans.push(layout.valueCounts.span);
  for (const span of spans) readSpan(directory, span, new Uint8Array(memory, span.offset, span.bytes));
  // Row counts are checked after reading as well as before writing (STYLE rule 2).
  assert.equal(layout.time.bytes, layout.rowCount * 4, `${directory}: time column disagrees with row count`);
  assert.equal(layout.user.bytes, layout.rowCount * 4, `${directory}: user column disagrees with row count`);
  const eventStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
  assert.equal(eventStart[layout.eventCount], layout.rowCount, `${directory}: event runs disagree with row count`);
  assert(layout.valueCounts === undefined || storedValueCountsFit(layout.valueCounts.keys, layout.valueCounts.span), `${directory}: value counts lie outside their file`);
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
  return existsSync(join(directory, segmentFiles.meta));
}
