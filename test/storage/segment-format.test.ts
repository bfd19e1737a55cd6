/**
 * A sealed segment replaces its WAL rows for good: once a checkpoint deletes
 * the WAL file, the column files are the only copy. sealSegment → loadSegment
 * must give back every row — sorted by (event, user, time), with event runs,
 * per-event user bitmaps, property texts and uuids — and any damaged column
 * file must be refused with SegmentCorruptError rather than read as data.
 */
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import roaring from "roaring";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SegmentCorruptError, segmentFormatVersion, valueCountsFields, type SegmentLayout } from "../../src/storage/segment-layout.js";
import { buildValueCounts, segmentValueCountMarks, storedValueCountsAt } from "../../src/storage/value-counts-index.js";
import { denseValueIds, loadSegment, PropertyDirectory, readSegmentLayout, readSegmentUuids, segmentExists } from "../../src/storage/segment-reader.js";
import { sealSegment, type SealInput } from "../../src/storage/segment-writer.js";
import { Random } from "../helpers/random.js";

const { RoaringBitmap32 } = roaring;
const dayStartMs = Date.UTC(2024, 2, 1);

interface InputRow {
  event: number;
  user: number;
  time: number;
  uuid: string | undefined;
  /** keyId → text (absent = not set). */
  properties: Map<number, string>;
}

/** Builds a SealInput whose arrays are longer than rowCount, as an active segment's are. */
function sealInput(directory: string, rows: InputRow[], keyIds: number[]): SealInput {
  const capacity = rows.length + 37;
  const timeOffsetMs = new Uint32Array(capacity).fill(0xdead);
  const userIds = new Uint32Array(capacity).fill(0xbeef);
  const eventIds = new Uint32Array(capacity).fill(0xfeed);
  const uuidPresent = new Uint8Array(capacity).fill(1);
  const uuidBytes = new Uint8Array(capacity * 16).fill(0x5a);
  // Entry arrays longer than the entries, as an active segment's are: the extra slots hold garbage.
  const properties = keyIds.map((keyId) => ({ keyId, rows: [] as number[], valueIds: [] as number[], texts: [""] as string[], ids: new Map<string, number>() }));
  for (const [row, input] of rows.entries()) {
    timeOffsetMs[row] = input.time;
    userIds[row] = input.user;
    eventIds[row] = input.event;
    uuidPresent[row] = input.uuid === undefined ? 0 : 1;
    uuidBytes.fill(0, row * 16, row * 16 + 16);
    if (input.uuid !== undefined) uuidBytes.set(Buffer.from(input.uuid.replaceAll("-", ""), "hex"), row * 16);
    for (const property of properties) {
      const text = input.properties.get(property.keyId);
      if (text === undefined) continue;
      let id = property.ids.get(text);
      if (id === undefined) {
        id = property.texts.length;
        property.texts.push(text);
        property.ids.set(text, id);
      }
      property.rows.push(row);
      property.valueIds.push(id);
    }
  }
  // A text the segment's rows no longer use (it must not be written).
  for (const property of properties) property.texts.push("unused text");
  return {
    directory,
    dayStartMs,
    rowCount: rows.length,
    timeOffsetMs,
    userIds,
    eventIds,
    uuidPresent,
    uuidBytes,
    properties: properties.map(({ keyId, rows, valueIds, texts }) => ({
      keyId,
      rows: Uint32Array.from([...rows, 0xdead]).subarray(0, rows.length),
      valueIds: Uint32Array.from([...valueIds, 0x7777]).subarray(0, valueIds.length),
      texts,
    })),
    fsync: false,
  };
}

function randomRows(random: Random, count: number): InputRow[] {
  const rows: InputRow[] = [];
  for (let index = 0; index < count; index++) {
    // Event 3 never occurs: its run must be empty, and its bitmap too.
    let event = random.integer(0, 6);
    if (event === 3) event = 4;
    const properties = new Map<number, string>();
    if (random.chance(0.7)) properties.set(0, random.pick(["free", "pro", "über", "🚀", "a\u0000b"]));
    if (random.chance(0.4)) properties.set(5, `n-${random.integer(0, 400)}`);
    // Key 9 is never set: no file for it.
    rows.push({
      event,
      user: random.chance(0.05) ? random.integer(0, 3_000_000) : random.integer(0, 300),
      // Duplicate (event, user, time) triples happen: several events in one millisecond.
      time: random.chance(0.1) ? 0 : random.chance(0.05) ? 86_399_999 : random.integer(0, 86_399_999),
      uuid: random.chance(0.5) ? random.uuid() : undefined,
      properties,
    });
  }
  return rows;
}

/** Reads the segment's rows back from its shared buffer and uuid files, in stored order. */
function storedRows(directory: string, layout: SegmentLayout, memory: SharedArrayBuffer): InputRow[] {
  const time = new Uint32Array(memory, layout.time.offset, layout.rowCount);
  const user = new Uint32Array(memory, layout.user.offset, layout.rowCount);
  const eventStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
  const rows: InputRow[] = [];
  for (let event = 0; event < layout.eventCount; event++) {
    for (let row = eventStart[event]; row < eventStart[event + 1]; row++) {
      rows.push({ event, user: user[row], time: time[row], uuid: undefined, properties: new Map() });
    }
  }
  const properties = new PropertyDirectory(layout, memory);
  for (let index = 0; index < properties.keyCount; index++) {
    const property = properties.at(index);
    const values = denseValueIds(property, layout.rowCount);
    const texts = property.texts();
    for (let row = 0; row < layout.rowCount; row++) {
      const id = values[row];
      if (id !== 0) rows[row].properties.set(property.keyId, texts[id]);
    }
  }
  if (layout.uuidRows) {
    const uuidRows = new Uint32Array(readFileSync(join(directory, layout.uuidRows.file)).buffer.slice(0));
    const uuids = readSegmentUuids(directory, layout);
    for (let index = 0; index < uuidRows.length; index++) {
      const hex = Buffer.from(uuids.subarray(index * 16, index * 16 + 16)).toString("hex");
      rows[uuidRows[index]].uuid = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
    }
  }
  return rows;
}

function rowKey(row: InputRow): string {
  const properties = [...row.properties].sort(([a], [b]) => a - b);
  return JSON.stringify([row.event, row.user, row.time, row.uuid ?? null, properties]);
}

/**
 * The value counts a segment stores are those a query would build over the
 * same column (same marks, same counts), within the budget of a byte per row.
 */
function expectStoredValueCounts(layout: SegmentLayout, memory: SharedArrayBuffer, keysWithCounts: number): void {
  expect(layout.format).toBe(segmentFormatVersion);
  const keys = layout.valueCounts?.keys ?? [];
  expect(keys.length / valueCountsFields).toBe(keysWithCounts);
  expect(layout.valueCounts?.span.bytes ?? 0).toBeLessThanOrEqual(layout.rowCount);
  const eventStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
  const properties = new PropertyDirectory(layout, memory);
  for (let index = 0; index < keys.length / valueCountsFields; index++) {
    const stored = storedValueCountsAt(keys, index, memory);
    const property = properties.find(stored.keyId)!;
    expect(stored.valueCount).toBe(property.valueCount + 1);
    const built = buildValueCounts(denseValueIds(property, layout.rowCount), stored.valueCount, segmentValueCountMarks(layout.rowCount, stored.valueCount, eventStart));
    expect([...stored.marks]).toEqual([...built.marks]);
    expect([...stored.prefix]).toEqual([...built.prefix]);
  }
}

let root: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "eventide-segment-"));
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

describe("a sealed segment", () => {
  const random = new Random(31);
  const rows = randomRows(random, 5000);
  let directory: string;
  let sealed: ReturnType<typeof sealSegment>;

  beforeAll(() => {
    directory = join(root, "2024-03-01", "seg-000000000002-000001");
    sealed = sealSegment(sealInput(directory, rows, [0, 5, 9]));
  });

  it("is published under its name with no tmp_ directory left behind", () => {
    expect(segmentExists(directory)).toBe(true);
    expect(readdirSync(join(root, "2024-03-01"))).toEqual(["seg-000000000002-000001"]);
    expect(readdirSync(directory).sort()).toContain("_meta.json");
  });

  it("stores the value counts a query would build for its keys", () => {
    const loaded = loadSegment(directory);
    // Key 0 is set on 70 % of rows (dense), key 5 on 40 % with ~400 values; key 9 on none.
    expectStoredValueCounts(loaded.layout, loaded.memory, 2);
  });

  it("loads back into the same layout and the same bytes", () => {
    const loaded = loadSegment(directory);
    expect(loaded.layout).toEqual(sealed.layout);
    expect(readSegmentLayout(directory)).toEqual(sealed.layout);
    const sealedBytes = new Uint8Array(sealed.memory);
    const loadedBytes = new Uint8Array(loaded.memory);
    expect(loadedBytes.length).toBe(sealedBytes.length);
    // Column bytes (not the alignment padding, which a fresh buffer leaves zero either way) agree.
    expect(Buffer.from(loadedBytes).equals(Buffer.from(sealedBytes))).toBe(true);
  });

  it("holds every input row exactly once, sorted by (event, user, time)", () => {
    const loaded = loadSegment(directory);
    expect(loaded.layout.rowCount).toBe(rows.length);
    const stored = storedRows(directory, loaded.layout, loaded.memory);
    expect(stored.map(rowKey).sort()).toEqual(rows.map(rowKey).sort());
    for (let index = 1; index < stored.length; index++) {
      const a = stored[index - 1];
      const b = stored[index];
      const ordered = a.event < b.event || (a.event === b.event && (a.user < b.user || (a.user === b.user && a.time <= b.time)));
      expect(ordered, `rows ${index - 1} and ${index} out of order`).toBe(true);
    }
  });

  it("has one run per event id, empty for an event with no rows", () => {
    const loaded = loadSegment(directory);
    const eventStart = new Uint32Array(loaded.memory, loaded.layout.eventStart.offset, loaded.layout.eventCount + 1);
    expect(loaded.layout.eventCount).toBe(7);
    expect(eventStart[0]).toBe(0);
    expect(eventStart[7]).toBe(rows.length);
    for (let event = 0; event < 7; event++) {
      expect(eventStart[event + 1] - eventStart[event], `event ${event}`).toBe(rows.filter((row) => row.event === event).length);
    }
  });

  it("has, per event, a bitmap of exactly the users with that event", () => {
    const loaded = loadSegment(directory);
    const memory = Buffer.from(loaded.memory);
    const bitmapEnds = new Uint32Array(loaded.memory, loaded.layout.bitmapEnds.offset, loaded.layout.eventCount);
    let start = 0;
    for (let event = 0; event < loaded.layout.eventCount; event++) {
      const end = bitmapEnds[event];
      const expected = [...new Set(rows.filter((row) => row.event === event).map((row) => row.user))].sort((a, b) => a - b);
      if (expected.length === 0) {
        expect(end - start, `event ${event} has no users, so no bitmap bytes`).toBe(0);
      } else {
        const bytes = memory.subarray(loaded.layout.bitmaps.offset + start, loaded.layout.bitmaps.offset + end);
        const bitmap = RoaringBitmap32.deserialize(bytes, true);
        expect(bitmap.toArray(), `event ${event}`).toEqual(expected);
      }
      start = end;
    }
  });

  it("keeps only the property texts its rows use, writes no file for a key no row sets", () => {
    const properties = new PropertyDirectory(sealed.layout, sealed.memory);
    expect(Array.from({ length: properties.keyCount }, (_, index) => properties.at(index).keyId)).toEqual([0, 5]);
    const plan = properties.find(0)!;
    expect(plan.width).toBe(1);
    expect(plan.valueCount).toBe(new Set(rows.flatMap((row) => (row.properties.has(0) ? [row.properties.get(0)] : []))).size);
    expect(plan.texts()).not.toContain("unused text");
    expect(properties.find(5)!.texts()).not.toContain("unused text");
    expect(properties.find(9)).toBeUndefined();
  });

  it("lists every uuid it holds, for the dedupe set rebuilt at start-up", () => {
    const uuids = readSegmentUuids(directory, sealed.layout);
    const stored = new Set<string>();
    for (let offset = 0; offset < uuids.length; offset += 16) stored.add(Buffer.from(uuids.subarray(offset, offset + 16)).toString("hex"));
    const expected = new Set(rows.filter((row) => row.uuid !== undefined).map((row) => row.uuid!.replaceAll("-", "")));
    expect(uuids.length).toBe(expected.size * 16);
    expect(stored).toEqual(expected);
  });

  it("refuses any column file with a flipped byte or cut short", () => {
    // Row numbers of uuids are not read back by the store (only the uuid bytes are, and checked).
    const files = readdirSync(directory).filter((name) => name !== "_meta.json" && name !== "uuid-row.u32");
    expect(files.sort()).toEqual(["bitmap-end.u32", "bitmaps.roaring", "event-start.u32", "properties.bin", "time.u32", "user.u32", "uuid.b16", "value-counts.u32"]);
    for (const file of files) {
      for (const damage of ["flip", "truncate"] as const) {
        const copy = join(root, `damaged-${damage}-${file}`);
        cpSync(directory, copy, { recursive: true });
        const path = join(copy, file);
        const bytes = readFileSync(path);
        if (damage === "flip") {
          bytes[Math.floor(bytes.length / 2)] ^= 0x10;
          writeFileSync(path, bytes);
        } else {
          truncateSync(path, bytes.length - 1);
        }
        const layout = readSegmentLayout(copy);
        const read = () => (file === "uuid.b16" ? readSegmentUuids(copy, layout) : loadSegment(copy));
        expect(read, `${damage} ${file}`).toThrow(SegmentCorruptError);
        rmSync(copy, { recursive: true, force: true });
      }
    }
  });

  it("refuses a missing column file or an unknown format", () => {
    const copy = join(root, "damaged-missing");
    cpSync(directory, copy, { recursive: true });
    rmSync(join(copy, "user.u32"));
    expect(() => loadSegment(copy)).toThrow();
    const meta = JSON.parse(readFileSync(join(copy, "_meta.json"), "utf8"));
    writeFileSync(join(copy, "_meta.json"), JSON.stringify({ ...meta, format: 99 }));
    expect(() => readSegmentLayout(copy)).toThrow(SegmentCorruptError);
  });
});

describe("sealing", () => {
  it("uses 2- and 4-byte value ids when a key has more than 255 or 65 535 texts", () => {
    const rows: InputRow[] = [];
    for (let index = 0; index < 70_000; index++) {
      rows.push({ event: index % 2, user: index % 1000, time: index, uuid: undefined, properties: new Map([[1, `wide-${index}`], [2, `mid-${index % 300}`]]) });
    }
    const directory = join(root, "2024-03-01", "seg-000000000003-000001");
    const sealed = sealSegment(sealInput(directory, rows, [1, 2]));
    const properties = new PropertyDirectory(sealed.layout, sealed.memory);
    expect([properties.at(0), properties.at(1)].map((property) => [property.keyId, property.width])).toEqual([[1, 4], [2, 2]]);
    expect(sealed.layout.uuids).toBeUndefined();
    const loaded = loadSegment(directory);
    expect(storedRows(directory, loaded.layout, loaded.memory).map(rowKey).sort()).toEqual(rows.map(rowKey).sort());
  });

  it("keeps each of several keys set on most rows (read by gathering, not sorting) to its own rows and values", () => {
    const random = new Random(44);
    const rows: InputRow[] = [];
    for (let index = 0; index < 6_000; index++) {
      const properties = new Map<number, string>();
      // Keys 1–3 are set on more than half the rows, on different ones; key 4 on few.
      if (random.chance(0.9)) properties.set(1, random.pick(["a", "b", "c"]));
      if (random.chance(0.6)) properties.set(2, `v-${random.integer(0, 500)}`);
      if (index % 3 !== 0) properties.set(3, `w-${random.integer(0, 40)}`);
      if (random.chance(0.1)) properties.set(4, `x-${random.integer(0, 5)}`);
      rows.push({ event: random.integer(0, 4), user: random.integer(0, 900), time: random.integer(0, 86_399_999), uuid: undefined, properties });
    }
    const directory = join(root, "2024-03-05", "seg-000000000008-000001");
    sealSegment(sealInput(directory, rows, [1, 2, 3, 4]));
    const loaded = loadSegment(directory);
    expect(storedRows(directory, loaded.layout, loaded.memory).map(rowKey).sort()).toEqual(rows.map(rowKey).sort());
    // Key 4, on a tenth of the rows, is stored sparse; its counts are stored all the same.
    expectStoredValueCounts(loaded.layout, loaded.memory, 4);
    const properties = new PropertyDirectory(loaded.layout, loaded.memory);
    // Only the texts the rows use, numbered in the order sealed rows first use them.
    for (let index = 0; index < properties.keyCount; index++) {
      const property = properties.at(index);
      const values = denseValueIds(property, loaded.layout.rowCount);
      let highest = 0;
      for (const id of values) {
        expect(id).toBeLessThanOrEqual(highest + 1);
        if (id > highest) highest = id;
      }
      expect(highest).toBe(property.valueCount);
    }
  });

  it("stores a key set on few rows sparsely, and thousands of such keys in one file, in bytes proportional to the values", () => {
    const random = new Random(77);
    const rows: InputRow[] = [];
    const keyCount = 3_000;
    for (let index = 0; index < 20_000; index++) {
      const properties = new Map<number, string>([[0, random.pick(["a", "b"])]]);
      // Keys 1..keyCount: each on about three rows.
      if (index % 2 === 0) properties.set(1 + ((index >>> 1) % keyCount), `v-${random.integer(0, 5)}`);
      rows.push({ event: random.integer(0, 3), user: random.integer(0, 500), time: random.integer(0, 86_399_999), uuid: undefined, properties });
    }
    const directory = join(root, "2024-03-04", "seg-000000000006-000001");
    const sealed = sealSegment(sealInput(directory, rows, Array.from({ length: keyCount + 1 }, (_, keyId) => keyId)));
    const properties = new PropertyDirectory(sealed.layout, sealed.memory);
    expect(properties.keyCount).toBe(keyCount + 1);
    expect(properties.find(0)!.rows, "a key on every row is dense").toBeUndefined();
    const sparse = properties.find(17)!;
    expect(sparse.rows, "a key on a few rows is sparse").toBeDefined();
    expect(sparse.entryCount).toBe(rows.filter((row) => row.properties.has(17)).length);
    expect(Array.from(sparse.rows!)).toEqual([...sparse.rows!].sort((a, b) => a - b));
    // Dense would be 3 000 keys × 20 000 rows = 60 MB; sparse is a few hundred kB.
    expect(sealed.layout.memoryBytes).toBeLessThan(2_000_000);
    expect(readdirSync(directory).filter((name) => name.startsWith("prop")).length).toBe(1);
    const loaded = loadSegment(directory);
    expect(storedRows(directory, loaded.layout, loaded.memory).map(rowKey).sort()).toEqual(rows.map(rowKey).sort());
    expect(denseValueIds(new PropertyDirectory(loaded.layout, loaded.memory).find(17)!, rows.length).filter((id) => id !== 0).length).toBe(sparse.entryCount);
  });

  it("orders users beyond 2^26 by the exact comparator", () => {
    const rows: InputRow[] = [
      { event: 0, user: 2 ** 27 + 1, time: 5, uuid: undefined, properties: new Map() },
      { event: 0, user: 2 ** 27, time: 86_399_999, uuid: undefined, properties: new Map() },
      { event: 0, user: 2 ** 27, time: 1, uuid: undefined, properties: new Map() },
      { event: 0, user: 3, time: 9, uuid: undefined, properties: new Map() },
    ];
    const directory = join(root, "2024-03-02", "seg-000000000004-000001");
    sealSegment(sealInput(directory, rows, []));
    const loaded = loadSegment(directory);
    expect(storedRows(directory, loaded.layout, loaded.memory).map((row) => [row.user, row.time])).toEqual([
      [3, 9],
      [2 ** 27, 1],
      [2 ** 27, 86_399_999],
      [2 ** 27 + 1, 5],
    ]);
  });

  it("sorts by (event, user, time) when each key needs several radix digits, and keeps every row's uuid", () => {
    // Event ids past 2^11 and user ids past 2^22 take two and three digits; times of one
    // hour share their top digit, which is skipped rather than sorted.
    const random = new Random(77);
    const rows: InputRow[] = Array.from({ length: 3000 }, () => ({
      event: random.chance(0.5) ? random.integer(0, 5000) : random.integer(0, 3),
      user: random.chance(0.3) ? random.integer(0, 2 ** 32 - 1) : random.integer(0, 50),
      time: 3_600_000 + random.integer(0, 3_599_999),
      uuid: random.chance(0.7) ? random.uuid() : undefined,
      properties: new Map([[1, `t-${random.integer(0, 9)}`]]),
    }));
    const directory = join(root, "2024-03-06", "seg-000000000009-000001");
    sealSegment(sealInput(directory, rows, [1]));
    const loaded = loadSegment(directory);
    const stored = storedRows(directory, loaded.layout, loaded.memory);
    expect(stored.map(rowKey).sort()).toEqual(rows.map(rowKey).sort());
    const order = (row: InputRow) => [row.event, row.user, row.time];
    const expected = rows.map(order).sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
    expect(stored.map(order)).toEqual(expected);
  });

  it("replaces a tmp_ directory left by an earlier crash", () => {
    const day = join(root, "2024-03-03");
    const directory = join(day, "seg-000000000005-000001");
    const leftover = join(day, "tmp_seg-000000000005-000001");
    cpSync(join(root, "2024-03-01", "seg-000000000002-000001"), leftover, { recursive: true });
    sealSegment(sealInput(directory, [{ event: 0, user: 1, time: 1, uuid: undefined, properties: new Map() }], []));
    expect(existsSync(leftover)).toBe(false);
    expect(loadSegment(directory).layout.rowCount).toBe(1);
  });
});
