/**
 * Sealing (ClickHouse's part writer, Arrow's IPC writer): an active segment's
 * rows put in sealed order (segment-sort.ts), encoded as the column files of
 * segment-layout.ts, and published atomically — every file written into a
 * tmp_ directory and fsynced, then one rename makes the segment exist. Each
 * event also gets a roaring bitmap of the users it has, for funnels and
 * retention. Returns the segment's in-memory form, so a seal needs no load;
 * sealing runs in the worker pool, off the main thread.
 */
import { strict as assert } from "node:assert";
import { mkdirSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { crc32 } from "node:zlib";
import roaring from "roaring";
import { injectFault } from "./fault-injection.js";
import { fsyncDirectory, makeDirectoryDurably, renameIntoPlace, writeFileDurably } from "./files.js";
import {
  align8,
  directoryFields,
  DirectoryField,
  encodeLayout,
  notInMemoryOffset,
  segmentFiles,
  segmentFormatVersion,
  valueIdArray,
  type ColumnSpan,
  type LoadSegmentResult,
  type PropertiesLayout,
  type SegmentLayout,
  type ValueCountsLayout,
  type ValueIdArray,
} from "./segment-layout.js";
import { inversePermutation, sortEntriesByRow, sortRows, type EntryColumns, type SealedOrder } from "./segment-sort.js";
import { sharedBuffer } from "./shared-memory.js";
import { denseValueIds, PropertyDirectory } from "./segment-reader.js";
import { planStoredValueCounts, writeStoredValueCounts } from "./value-counts-index.js";

const { RoaringBitmap32 } = roaring;

/**
 * One property key's values over a segment's rows before sealing, sparse:
 * `rows` ascending, `valueIds[i]` ≥ 1 indexes `texts` (texts[0] unused).
 */
export interface PropertyEntries {
  keyId: number;
  rows: Uint32Array;
  valueIds: Uint32Array;
  texts: string[];
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
  /** Any order; a key with no entries is left out of the segment. */
  properties: PropertyEntries[];
  fsync: boolean;
  /** Names of the segments a merge replaces. */
  replaces?: string[];
}


/** Per-event user bitmaps, portable format, one after the other; `ends[e]` is where event e's ends. */
function eventBitmaps(user: Uint32Array, { eventStart, eventCount }: SealedOrder): { bitmaps: Buffer; ends: Uint32Array } {
  const parts: Uint8Array[] = [];
  const ends = new Uint32Array(eventCount);
  let bytes = 0;
  for (let event = 0; event < eventCount; event++) {
    if (eventStart[event + 1] > eventStart[event]) {
      const bitmap = new RoaringBitmap32(user.subarray(eventStart[event], eventStart[event + 1]));
      bitmap.runOptimize();
      const serialized = bitmap.serialize(true);
      parts.push(serialized);
      bytes += serialized.length;
    }
    ends[event] = bytes;
  }
  return { bitmaps: Buffer.concat(parts, bytes), ends };
}

/**
 * The property keys of a segment in sealed order. Key k's entries are
 * [keyEntryStart[k], keyEntryStart[k+1]) of `rows` (ascending sealed rows) and
 * `values` (ids renumbered in first-use order from 1); usedOldId[keyTextStart[k] + id]
 * is the input id of new id `id`, and usedTextCount[k] how many texts it keeps.
 */
interface SealedProperties {
  keys: PropertyEntries[];
  /**
   * Per key: its new ids by sealed row (0: not set) when it was read by
   * gathering (`sealDenseKey`), else undefined and its entries are in `rows` and `values`.
   */
  denseIds: Array<Uint32Array | undefined>;
  keyEntryStart: Uint32Array;
  keyTextStart: Uint32Array;
  rows: Uint32Array;
  values: Uint32Array;
  usedOldId: Uint32Array;
  usedTextCount: Uint32Array;
}

/**
 * A key set on at least half the rows is read by gathering (sealDenseKey).
 * For the others, every entry is tagged with its sealed row (read key by key, rows ascending,
 * so the lookups walk forward), then all entries are put in sealed row order,
 * keys ascending within a row, by a stable LSD radix sort that moves the
 * three columns together: each pass reads them front to back. Read back in
 * that order, every key's entries come out with ascending rows, and its
 * dictionary is renumbered in first-use order keeping only the texts this
 * segment uses. Grouping the entries by source row and reading them back
 * through the sort's order instead jumped through memory at every row: ~0.4 s
 * of a 2 M-row seal. Linear in rows + entries whatever the number of keys, and
 * in flat arrays with an offset per key: a day can hold a million keys of one
 * entry each, and four arrays per key spent seconds of the sealing worker in
 * allocation and garbage collection.
 */
function sealProperties(properties: PropertyEntries[], sealedIndexOf: Uint32Array): SealedProperties {
  const rowCount = sealedIndexOf.length;
  const keys = properties.filter((property) => property.rows.length > 0).sort((left, right) => left.keyId - right.keyId);
  const keyCount = keys.length;
  // A key set on at least half the rows is stored dense whatever its width;
  // it is read by gathering instead of sorting its entries.
  const gathered = keys.map((key) => key.rows.length * 2 >= rowCount);
  const keyEntryStart = new Uint32Array(keyCount + 1);
  const keyTextStart = new Uint32Array(keyCount + 1);
  for (let keyIndex = 0; keyIndex < keyCount; keyIndex++) {
    keyEntryStart[keyIndex + 1] = keyEntryStart[keyIndex] + (gathered[keyIndex] ? 0 : keys[keyIndex].rows.length);
    keyTextStart[keyIndex + 1] = keyTextStart[keyIndex] + keys[keyIndex].texts.length;
  }
  const usedOldId = new Uint32Array(keyTextStart[keyCount]);
  const usedTextCount = new Uint32Array(keyCount);
  const denseIds = new Array<Uint32Array | undefined>(keyCount).fill(undefined);
  for (let keyIndex = 0; keyIndex < keyCount; keyIndex++) {
    if (!gathered[keyIndex]) continue;
    const textStart = keyTextStart[keyIndex];
    const used = usedOldId.subarray(textStart, keyTextStart[keyIndex + 1]);
    const ids = new Uint32Array(rowCount);
    usedTextCount[keyIndex] = sealDenseKey(keys[keyIndex], sealedIndexOf, ids, used);
    denseIds[keyIndex] = ids;
  }
  const { sorted: entries, spare } = sortEntriesByRow(tagEntries(keys, denseIds, keyEntryStart[keyCount], sealedIndexOf), rowCount);
  // The spare columns are free once sorted: they take the result.
  renumberValues(entries, keyEntryStart, keyTextStart, spare, usedOldId, usedTextCount);
  return { keys, denseIds, keyEntryStart, keyTextStart, rows: spare.row, values: spare.value, usedOldId, usedTextCount };
}

/**
 * One dense key in sealed order: its input ids scattered to their sealed rows
 * in `ids` (all 0, and rows without the key left so), then renumbered in place
 * in first-use order; usedOldId[new id] gets the input id. Returns the number
 * of texts used. The scatter reads the entries front to back; gathering the
 * ids through the sort's order instead missed the caches at every row, ~20 ns
 * a row and key of a 2 M-row seal.
 */
function sealDenseKey(key: PropertyEntries, sealedIndexOf: Uint32Array, ids: Uint32Array, usedOldId: Uint32Array): number {
  const { rows, valueIds } = key;
  for (let entry = 0; entry < rows.length; entry++) ids[sealedIndexOf[rows[entry]]] = valueIds[entry];
  const remap = new Uint32Array(key.texts.length);
  let usedCount = 0;
  for (let index = 0; index < ids.length; index++) {
    const oldId = ids[index];
    if (oldId === 0) continue;
    let newId = remap[oldId];
    if (newId === 0) {
      newId = remap[oldId] = ++usedCount;
      usedOldId[newId] = oldId;
    }
    ids[index] = newId;
  }
  return usedCount;
}


/** The entries of every key not gathered, one after the other, with their sealed rows. */
function tagEntries(keys: PropertyEntries[], denseIds: Array<Uint32Array | undefined>, entryTotal: number, sealedIndexOf: Uint32Array): EntryColumns {
  const entries: EntryColumns = { row: new Uint32Array(entryTotal), key: new Uint32Array(entryTotal), value: new Uint32Array(entryTotal) };
  for (let keyIndex = 0, slot = 0; keyIndex < keys.length; keyIndex++) {
    if (denseIds[keyIndex] !== undefined) continue;
    const { rows, valueIds } = keys[keyIndex];
    for (let entry = 0; entry < rows.length; entry++, slot++) {
      entries.row[slot] = sealedIndexOf[rows[entry]];
      entries.key[slot] = keyIndex;
      entries.value[slot] = valueIds[entry];
    }
  }
  return entries;
}

/**
 * Reads entries in sealed order into each key's place of `target` (rows and
 * new ids). remap[old id] is the new id (0: not used yet), from the key's text start.
 */
function renumberValues(
  entries: EntryColumns,
  keyEntryStart: Uint32Array,
  keyTextStart: Uint32Array,
  target: EntryColumns,
  usedOldId: Uint32Array,
  usedTextCount: Uint32Array,
): void {
  const keyCount = usedTextCount.length;
  const remap = new Uint32Array(keyTextStart[keyCount]);
  const keyFill = keyEntryStart.slice(0, keyCount);
  for (let slot = 0; slot < entries.row.length; slot++) {
    const keyIndex = entries.key[slot];
    const textStart = keyTextStart[keyIndex];
    const oldId = entries.value[slot];
    let newId = remap[textStart + oldId];
    if (newId === 0) {
      newId = ++usedTextCount[keyIndex];
      remap[textStart + oldId] = newId;
      usedOldId[textStart + newId] = oldId;
    }
    const cursor = keyFill[keyIndex]++;
    target.row[cursor] = entries.row[slot];
    target.value[cursor] = newId;
  }
}

/**
 * uuids: only the rows that carried one, in the order they arrived, each with
 * its sealed row (uuidRows), for dedupe rebuild and merges, which need the
 * uuids but not in any order. Copied front to back: read in sealed order, every
 * uuid was a cache miss (~0.1 µs a row of a 2 M-row seal).
 */
function sealUuids(sealedIndexOf: Uint32Array, uuidPresent: Uint8Array, uuidSource: Uint8Array): { uuidRows: Uint32Array; uuids: Uint8Array } {
  const rowCount = sealedIndexOf.length;
  let uuidCount = 0;
  for (let row = 0; row < rowCount; row++) uuidCount += uuidPresent[row];
  const uuidRows = new Uint32Array(uuidCount);
  const uuids = new Uint8Array(uuidCount * 16);
  // Four word copies per uuid where the source is word-aligned (always, from
  // the store), sixteen byte copies otherwise.
  const sourceWords = uuidSource.byteOffset % 4 === 0 ? new Uint32Array(uuidSource.buffer, uuidSource.byteOffset, uuidSource.length >>> 2) : undefined;
  const targetWords = new Uint32Array(uuids.buffer);
  for (let row = 0, cursor = 0; row < rowCount; row++) {
    if (uuidPresent[row] === 0) continue;
    uuidRows[cursor] = sealedIndexOf[row];
    if (sourceWords) {
      for (let word = 0; word < 4; word++) targetWords[cursor * 4 + word] = sourceWords[row * 4 + word];
    } else {
      for (let byte = 0; byte < 16; byte++) uuids[cursor * 16 + byte] = uuidSource[row * 16 + byte];
    }
    cursor++;
  }
  return { uuidRows, uuids };
}

/**
 * The property directory: per key its values, its rows (sparse keys), its
 * text ends and its texts, each 8-byte aligned from `start`. Returns the
 * directory and where the section ends.
 */
function layOutProperties(sealed: SealedProperties, rowCount: number, start: number): { directory: Float64Array; end: number } {
  const { keys, keyTextStart, usedOldId, usedTextCount } = sealed;
  const keyCount = keys.length;
  let end = align8(start + keyCount * directoryFields * Float64Array.BYTES_PER_ELEMENT);
  const directory = new Float64Array(keyCount * directoryFields);
  for (let keyIndex = 0; keyIndex < keyCount; keyIndex++) {
    const textCount = usedTextCount[keyIndex] + 1;
    const texts = keys[keyIndex].texts;
    const textStart = keyTextStart[keyIndex];
    const entryCount = keys[keyIndex].rows.length;
    const width: 1 | 2 | 4 = textCount <= 0xff ? 1 : textCount <= 0xffff ? 2 : 4;
    const sparse = entryCount * (4 + width) < rowCount * width;
    assert(!sparse || sealed.denseIds[keyIndex] === undefined, "a gathered key is stored dense");
    let textsBytes = 0;
    for (let id = 1; id < textCount; id++) textsBytes += Buffer.byteLength(texts[usedOldId[textStart + id]], "utf8");
    const base = keyIndex * directoryFields;
    directory[base + DirectoryField.KeyId] = keys[keyIndex].keyId;
    directory[base + DirectoryField.Sparse] = sparse ? 1 : 0;
    directory[base + DirectoryField.Width] = width;
    directory[base + DirectoryField.ValueCount] = textCount - 1;
    directory[base + DirectoryField.EntryCount] = entryCount;
    directory[base + DirectoryField.ValuesOffset] = end;
    end = align8(end + width * (sparse ? entryCount : rowCount));
    directory[base + DirectoryField.RowsOffset] = sparse ? end : notInMemoryOffset;
    if (sparse) end = align8(end + entryCount * Uint32Array.BYTES_PER_ELEMENT);
    directory[base + DirectoryField.TextEndsOffset] = end;
    end = align8(end + textCount * Uint32Array.BYTES_PER_ELEMENT);
    directory[base + DirectoryField.TextsOffset] = end;
    directory[base + DirectoryField.TextsBytes] = textsBytes;
    end = align8(end + textsBytes);
  }
  return { directory, end };
}

/** Writes every key's values, rows, text ends and texts where `directory` places them in `memory`. */
function writeProperties(sealed: SealedProperties, directory: Float64Array, memory: SharedArrayBuffer, rowCount: number): void {
  const { keys, keyEntryStart, keyTextStart, usedOldId } = sealed;
  const memoryText = Buffer.from(memory);
  for (let keyIndex = 0; keyIndex < keys.length; keyIndex++) {
    const base = keyIndex * directoryFields;
    const width = directory[base + DirectoryField.Width] as 1 | 2 | 4;
    const entryCount = directory[base + DirectoryField.EntryCount];
    const entryStart = keyEntryStart[keyIndex];
    const keyValues = sealed.values.subarray(entryStart, entryStart + entryCount);
    const keyRows = sealed.rows.subarray(entryStart, entryStart + entryCount);
    const denseIds = sealed.denseIds[keyIndex];
    if (denseIds !== undefined) {
      // TypedArray.prototype.set narrows natively.
      valueIdArray(memory, width, directory[base + DirectoryField.ValuesOffset], rowCount).set(denseIds);
    } else if (directory[base + DirectoryField.Sparse] === 1) {
      // TypedArray.prototype.set narrows natively.
      valueIdArray(memory, width, directory[base + DirectoryField.ValuesOffset], entryCount).set(keyValues);
      new Uint32Array(memory, directory[base + DirectoryField.RowsOffset], entryCount).set(keyRows);
    } else {
      scatterValues(valueIdArray(memory, width, directory[base + DirectoryField.ValuesOffset], rowCount), keyRows, keyValues);
    }
    const textCount = directory[base + DirectoryField.ValueCount] + 1;
    const textEnds = new Uint32Array(memory, directory[base + DirectoryField.TextEndsOffset], textCount);
    const texts = keys[keyIndex].texts;
    const textStart = keyTextStart[keyIndex];
    const textsOffset = directory[base + DirectoryField.TextsOffset];
    let end = 0;
    for (let id = 1; id < textCount; id++) {
      end += memoryText.write(texts[usedOldId[textStart + id]], textsOffset + end, "utf8");
      textEnds[id] = end;
    }
  }
}

/** A dense key's values: values[rows[entry]] = ids[entry]. */
function scatterValues(values: ValueIdArray, rows: Uint32Array, ids: Uint32Array): void {
  for (let entry = 0; entry < rows.length; entry++) values[rows[entry]] = ids[entry];
}

/**
 * Sorts, encodes and publishes one segment; returns its in-memory form. Each
 * step is a function of its own: a seal runs once a checkpoint, and V8
 * optimises a hot loop by compiling the function around it. Written as one
 * function of some twenty loops, it was compiled ~40 times in a 10 s ingest
 * run, ~37 ms of a helper thread each, and ran its other loops unoptimised.
 */
export function sealSegment(input: SealInput): LoadSegmentResult {
  const { rowCount } = input;
  // The columns may be longer than rowCount (an active segment's capacity).
  const timeOffsetMs = input.timeOffsetMs.subarray(0, rowCount);
  const userIds = input.userIds.subarray(0, rowCount);
  const eventIds = input.eventIds.subarray(0, rowCount);
  const sorted = sortRows(rowCount, timeOffsetMs, userIds, eventIds);
  const { time, user, eventStart, eventCount } = sorted;
  const { bitmaps, ends: bitmapEnds } = eventBitmaps(user, sorted);
  // Columns are put in sealed order by scattering each row to its place, reading
  // the row's values front to back, rather than gathering them through `order`:
  // a miss that stalls per row of every column, where stores miss without waiting.
  const sealedIndexOf = inversePermutation(sorted.order);
  const properties = sealProperties(input.properties, sealedIndexOf);
  const keyCount = properties.keys.length;
  const { uuidRows, uuids } = sealUuids(sealedIndexOf, input.uuidPresent, input.uuidBytes);

  // Lay the query columns out in one shared buffer: first where each part goes, then the bytes.
  let memoryBytes = 0;
  const place = (file: string, bytes: Uint8Array): { span: ColumnSpan; bytes: Uint8Array } => {
    const span: ColumnSpan = { file, offset: memoryBytes, bytes: bytes.byteLength, crc: crc32(bytes) };
    memoryBytes = align8(memoryBytes + bytes.byteLength);
    return { span, bytes };
  };
  const asBytes = (array: ArrayBufferView) => new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
  const placed = [
    place(segmentFiles.time, asBytes(time)),
    place(segmentFiles.user, asBytes(user)),
    place(segmentFiles.eventStart, asBytes(eventStart)),
    place(segmentFiles.bitmaps, asBytes(bitmaps)),
    place(segmentFiles.bitmapEnds, asBytes(bitmapEnds)),
  ];
  // The property section: the directory, then each key's parts (layOutProperties).
  const propertySectionStart = memoryBytes;
  const { directory, end } = layOutProperties(properties, rowCount, propertySectionStart);
  memoryBytes = end;
  // Then the value counts of the most used keys, read in place by every thread's queries.
  const countsStart = align8(memoryBytes);
  const countsPlan = planStoredValueCounts(directory, keyCount, rowCount, eventStart, countsStart);
  if (countsPlan.keys.length > 0) memoryBytes = countsPlan.end;
  const memory = sharedBuffer(Math.max(8, memoryBytes));
  const memoryView = new Uint8Array(memory);
  for (const { span, bytes } of placed) memoryView.set(bytes, span.offset);
  new Float64Array(memory, propertySectionStart, directory.length).set(directory);
  writeProperties(properties, directory, memory, rowCount);
  const propertySection = memoryView.subarray(propertySectionStart, end);
  const propertiesLayout: PropertiesLayout | undefined =
    keyCount === 0 ? undefined : { keyCount, span: { file: segmentFiles.properties, offset: propertySectionStart, bytes: propertySection.byteLength, crc: crc32(propertySection) } };
  let valueCountsLayout: ValueCountsLayout | undefined;
  const valueCounts = memoryView.subarray(countsStart, countsPlan.end);
  if (countsPlan.keys.length > 0) {
    const directoryView = new PropertyDirectory({ rowCount, properties: propertiesLayout }, memory);
    writeStoredValueCounts(countsPlan, memory, (index) => denseValueIds(directoryView.at(index), rowCount));
    valueCountsLayout = { span: { file: segmentFiles.valueCounts, offset: countsStart, bytes: valueCounts.byteLength, crc: crc32(valueCounts) }, keys: countsPlan.keys };
  }

  const uuidRowsSpan: ColumnSpan | undefined = uuidRows.length ? { file: segmentFiles.uuidRows, offset: notInMemoryOffset, bytes: uuidRows.byteLength, crc: crc32(asBytes(uuidRows)) } : undefined;
  const uuidsSpan: ColumnSpan | undefined = uuidRows.length ? { file: segmentFiles.uuids, offset: notInMemoryOffset, bytes: uuids.byteLength, crc: crc32(uuids) } : undefined;

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
    properties: propertiesLayout,
    ...(valueCountsLayout ? { valueCounts: valueCountsLayout } : {}),
    uuidRows: uuidRowsSpan,
    uuids: uuidsSpan,
    memoryBytes: memory.byteLength,
    ...(input.replaces ? { replaces: input.replaces } : {}),
    name: basename(input.directory),
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
  if (propertiesLayout) writeFileDurably(join(temporary, propertiesLayout.span.file), propertySection, input.fsync);
  if (valueCountsLayout) writeFileDurably(join(temporary, valueCountsLayout.span.file), valueCounts, input.fsync);
  if (uuidRowsSpan) {
    writeFileDurably(join(temporary, uuidRowsSpan.file), asBytes(uuidRows), input.fsync);
    writeFileDurably(join(temporary, uuidsSpan!.file), uuids, input.fsync);
  }
  writeFileDurably(join(temporary, segmentFiles.meta), encodeLayout(layout), input.fsync);
  if (input.fsync) fsyncDirectory(temporary);
  injectFault("segment.rename", input.directory);
  renameIntoPlace(temporary, input.directory, input.fsync);
  return { kind: "load-segment", layout, memory };
}
