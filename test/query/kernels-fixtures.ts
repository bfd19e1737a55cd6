/**
 * In-memory SegmentViews for kernel tests and benchmarks, built from plain
 * columns the way the store lays them out: sealed segments sorted by
 * (event, user, time) with eventRowStart and per-event user bitmaps, active
 * segments in arrival order with an event-id column. No files, no threads.
 */
import roaring from "roaring";
import type { PropertyColumn, SegmentView, ValueIdColumn } from "../../src/query/segment-view.js";
import { ActiveIndex } from "../../src/query/active-index.js";
import { activeView } from "../../src/query/segment-views.js";
import type { ActiveSegmentDescriptor } from "../../src/storage/segment-descriptor.js";
import { sharedTexts } from "../../src/storage/active-properties.js";

const { RoaringBitmap32 } = roaring;
type RoaringBitmap32 = InstanceType<typeof RoaringBitmap32>;

/** mulberry32: a small seeded PRNG, so that a failing case can be replayed from its seed. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let mixed = state;
    mixed = Math.imul(mixed ^ (mixed >>> 15), mixed | 1);
    mixed ^= mixed + Math.imul(mixed ^ (mixed >>> 7), mixed | 61);
    return ((mixed ^ (mixed >>> 14)) >>> 0) / 4_294_967_296;
  };
}

export interface PropertyInput {
  keyId: number;
  /** One per row; 0 = not set. */
  valueIds: Uint32Array;
  /** texts[id] for id >= 1; texts[0] unused. */
  texts: string[];
}

export interface SegmentInput {
  dayStartMs: number;
  eventIds: Uint32Array;
  userIds: Uint32Array;
  timeOffsetMs: Uint32Array;
  properties: PropertyInput[];
}

export type ValueIdWidth = 8 | 16 | 32;

export interface SealedOptions {
  /** Per-event user bitmaps; false models a sealed segment whose bitmaps are not available. */
  bitmaps: boolean;
  /** Extra trailing eventRowStart entries (event ids with no rows but inside the table). */
  eventRowStartPadding: number;
  valueIdWidth: ValueIdWidth;
}

function narrowValueIds(valueIds: Uint32Array, textCount: number, width: ValueIdWidth): ValueIdColumn {
  if (width === 8 && textCount <= 256) return Uint8Array.from(valueIds);
  if (width !== 32 && textCount <= 65_536) return Uint16Array.from(valueIds);
  return Uint32Array.from(valueIds);
}

function propertyColumns(properties: readonly PropertyInput[], order: Uint32Array | undefined, width: ValueIdWidth): Map<number, PropertyColumn> {
  const columns = new Map<number, PropertyColumn>();
  for (const property of properties) {
    const valueIds = order === undefined ? property.valueIds : property.valueIds.map((_, row) => property.valueIds[order[row]]);
    if (!valueIds.some((id) => id !== 0)) continue; // SegmentView: undefined when no row sets the key
    columns.set(property.keyId, { valueIds: narrowValueIds(valueIds, property.texts.length, width), texts: property.texts });
  }
  return columns;
}

export function sealedSegment(key: string, input: SegmentInput, options: SealedOptions): SegmentView {
  const rowCount = input.eventIds.length;
  const order = Uint32Array.from({ length: rowCount }, (_, row) => row);
  order.sort(
    (left, right) =>
      input.eventIds[left] - input.eventIds[right] ||
      input.userIds[left] - input.userIds[right] ||
      input.timeOffsetMs[left] - input.timeOffsetMs[right],
  );
  const eventIds = order.map((row) => input.eventIds[row]);
  const userIds = order.map((row) => input.userIds[row]);
  const timeOffsetMs = order.map((row) => input.timeOffsetMs[row]);
  let eventIdMax = -1;
  for (const eventId of eventIds) eventIdMax = Math.max(eventIdMax, eventId);
  const eventRowStart = new Uint32Array(eventIdMax + 2 + options.eventRowStartPadding);
  for (let eventId = 0, row = 0; eventId < eventRowStart.length; eventId++) {
    while (row < rowCount && eventIds[row] < eventId) row++;
    eventRowStart[eventId] = row;
  }
  const bitmaps = new Map<number, RoaringBitmap32>();
  if (options.bitmaps) {
    for (let eventId = 0; eventId <= eventIdMax; eventId++) {
      const users = userIds.subarray(eventRowStart[eventId], eventRowStart[eventId + 1]);
      if (users.length > 0) bitmaps.set(eventId, new RoaringBitmap32(users));
    }
  }
  const columns = propertyColumns(input.properties, order, options.valueIdWidth);
  return {
    key,
    dayStartMs: input.dayStartMs,
    rowCount,
    timeOffsetMs,
    userIds,
    eventRowStart,
    eventIds: undefined,
    eventRows: () => undefined,
    property: (keyId) => columns.get(keyId),
    rowsWithProperty: (keyId, start, end) => rowsSetting(columns.get(keyId), start, end),
    userBitmap: (eventId) => bitmaps.get(eventId),
    eventValueCounts: () => undefined,
    partUsers: () => undefined,
    partValueUsers: () => undefined,
  };
}

function rowsSetting(column: PropertyColumn | undefined, start: number, end: number): number {
  let count = 0;
  if (column !== undefined) for (let row = start; row < end; row++) if (column.valueIds[row] !== 0) count++;
  return count;
}

/**
 * An active segment as a worker reads it: the real view over shared columns,
 * with its index (active-index.ts). With `random`, the index may first have
 * been built from an earlier snapshot (a prefix of the rows, extended now) or
 * from a later one (rows and property values this snapshot must not see).
 * Active columns are always 32-bit, whatever `valueIdWidth` says.
 */
export function activeSegment(key: string, input: SegmentInput, _valueIdWidth: ValueIdWidth, random?: () => number): SegmentView {
  const rowCount = input.eventIds.length;
  const later = random !== undefined && rowCount > 0 && random() < 1 / 3 ? 1 + Math.floor(random() * 20) : 0;
  const total = rowCount + later;
  const shared = (values: (row: number) => number) => {
    const column = new Uint32Array(new SharedArrayBuffer(4 * Math.max(1, total)));
    for (let row = 0; row < total; row++) column[row] = values(row);
    return column;
  };
  const draw = (length: number) => Math.floor(random!() * length);
  const time = shared((row) => (row < rowCount ? input.timeOffsetMs[row] : draw(86_400_000)));
  const user = shared((row) => (row < rowCount ? input.userIds[row] : input.userIds[draw(rowCount)] + draw(2)));
  const event = shared((row) => (row < rowCount ? input.eventIds[row] : input.eventIds[draw(rowCount)]));
  const properties = input.properties.map((property) => {
    // Later rows may set the key to texts this snapshot does not know yet.
    const texts = [...property.texts];
    const laterTexts = later > 0 ? [...texts, "later-1", "later-2"] : texts;
    const rows: number[] = [];
    const valueIds: number[] = [];
    for (let row = 0; row < total; row++) {
      const valueId = row < rowCount ? property.valueIds[row] : random!() < 0.5 ? 0 : 1 + draw(laterTexts.length - 1);
      if (valueId === 0) continue;
      rows.push(row);
      valueIds.push(valueId);
    }
    return { keyId: property.keyId, texts: sharedTexts(laterTexts), textCount: texts.length, rows: shared((entry) => rows[entry] ?? 0), valueIds: shared((entry) => valueIds[entry] ?? 0), entryRows: rows };
  });
  const describe = (count: number): ActiveSegmentDescriptor => ({
    kind: "active",
    key,
    dayStartMs: input.dayStartMs,
    rowCount: count,
    time: time.buffer as SharedArrayBuffer,
    user: user.buffer as SharedArrayBuffer,
    event: event.buffer as SharedArrayBuffer,
    properties: properties
      .map((property) => ({
        keyId: property.keyId,
        entryCount: property.entryRows.filter((row) => row < count).length,
        rows: property.rows.buffer as SharedArrayBuffer,
        rowsOffset: 0,
        valueIds: property.valueIds.buffer as SharedArrayBuffer,
        valueIdsOffset: 0,
        texts: count > rowCount ? property.texts : { ...property.texts, count: property.textCount },
      }))
      .filter((property) => property.entryCount > 0),
  });
  const index = new ActiveIndex(key);
  const earlier = later > 0 ? total : random !== undefined && random() < 0.5 ? draw(rowCount + 1) : 0;
  if (earlier > 0) {
    // What a task over that snapshot would have asked.
    const view = activeView(describe(earlier), () => index);
    for (const eventId of new Set(event.subarray(0, earlier))) view.userBitmap(eventId);
    for (const property of input.properties) view.property(property.keyId);
    for (const eventId of new Set(event.subarray(0, earlier))) for (const property of input.properties) view.eventValueCounts(eventId, property.keyId, 2 ** 32);
  }
  return activeView(describe(rowCount), () => index);
}
