/**
 * The chunk is what the WAL stores and what replay decodes, so a row that does
 * not survive ChunkBuilder → decodeChunk is an event lost at every restart.
 * These tests round-trip rows with awkward strings, uuids and sparse
 * properties, and check that filterChunk (uuid dedupe) keeps exactly the rows
 * it is told to, with their properties and uuids.
 */
import { describe, expect, it } from "vitest";
import { ChunkBuilder, ChunkFormatError, decodeChunk, filterChunk, type DecodedChunk } from "../../src/storage/chunk-codec.js";
import { Random } from "../helpers/random.js";

interface PlainRow {
  timeMs: number;
  event: string;
  distinctId: string;
  uuid: string | undefined;
  properties: Record<string, string>;
}

function uuidBytes(uuid: string): Uint8Array {
  return Buffer.from(uuid.replaceAll("-", ""), "hex");
}

function uuidText(bytes: Uint8Array): string {
  const hex = Buffer.from(bytes).toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function build(rows: PlainRow[]): ArrayBuffer {
  const builder = new ChunkBuilder();
  for (const row of rows) {
    const index = builder.addRow(row.timeMs, row.event, row.distinctId, row.uuid === undefined ? undefined : uuidBytes(row.uuid));
    for (const [key, text] of Object.entries(row.properties)) builder.addProperty(index, key, text);
  }
  return builder.finish();
}

/** Turns a decoded chunk back into plain rows (properties in key order, for comparison). */
function rowsOf(chunk: DecodedChunk): PlainRow[] {
  const rows: PlainRow[] = [];
  for (let row = 0; row < chunk.rowCount; row++) {
    rows.push({
      timeMs: chunk.timeMs[row],
      event: chunk.string(chunk.eventNameString[row]),
      distinctId: chunk.string(chunk.distinctIdString[row]),
      uuid: chunk.uuidPresent?.[row] ? uuidText(chunk.uuidBytes!.subarray(row * 16, row * 16 + 16)) : undefined,
      properties: {},
    });
  }
  for (let key = 0; key < chunk.keyStrings.length; key++) {
    const keyText = chunk.string(chunk.keyStrings[key]);
    for (let entry = chunk.entryStarts[key]; entry < chunk.entryStarts[key + 1]; entry++) {
      rows[chunk.entryRows[entry]].properties[keyText] = chunk.string(chunk.entryValues[entry]);
    }
  }
  return rows;
}

function sortedProperties(row: PlainRow): PlainRow {
  return { ...row, properties: Object.fromEntries(Object.entries(row.properties).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) };
}

const awkwardStrings = [
  "signup",
  "page view",
  "achat 🛒",
  "名前",
  "a\u0000b",
  "\u0000",
  "emoji 👩‍👩‍👧‍👦 family",
  "tab\tnew\nline",
  "quote \" backslash \\",
  "x".repeat(200),
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
  "__proto__",
  "constructor",
  "",
];

function randomRows(random: Random, count: number, uuidShare: number): PlainRow[] {
  const rows: PlainRow[] = [];
  for (let index = 0; index < count; index++) {
    const properties: Record<string, string> = {};
    if (random.chance(0.6)) properties.plan = random.pick(["free", "pro", "über", "🚀"]);
    if (random.chance(0.3)) properties["clé"] = String(random.integer(-5, 5000));
    if (random.chance(0.2)) properties[random.pick(awkwardStrings)] = random.pick(awkwardStrings);
    rows.push({
      // Millisecond times from 1970 to 9999, as the chunk carries f64.
      timeMs: random.chance(0.1) ? random.pick([0, 253_402_300_799_999, 1_709_251_200_000]) : random.integer(0, 253_402_300_799_999),
      event: random.pick(awkwardStrings.filter((text) => text.length > 0)),
      distinctId: random.chance(0.5) ? `user-${random.integer(0, 50)}` : random.pick(awkwardStrings.filter((text) => text.length > 0)),
      uuid: random.chance(uuidShare) ? random.uuid() : undefined,
      properties,
    });
  }
  return rows;
}

describe("a chunk round-trips through ChunkBuilder and decodeChunk", () => {
  it("keeps every row's time, event, distinctId, uuid and properties, including unicode, emoji and NUL strings", () => {
    const random = new Random(11);
    const rows = randomRows(random, 1000, 0.5);
    const decoded = decodeChunk(new Uint8Array(build(rows)));
    expect(decoded.rowCount).toBe(rows.length);
    expect(rowsOf(decoded).map(sortedProperties)).toEqual(rows.map(sortedProperties));
  });

  it("stores each distinct string once per chunk", () => {
    const rows: PlainRow[] = [];
    for (let index = 0; index < 300; index++) rows.push({ timeMs: index, event: "view", distinctId: "u1", uuid: undefined, properties: { plan: "pro" } });
    const decoded = decodeChunk(new Uint8Array(build(rows)));
    expect(Array.from({ length: decoded.stringCount }, (_, index) => decoded.string(index)).sort()).toEqual(["plan", "pro", "u1", "view"]);
  });

  it("has no uuid section when no row carries a uuid, and marks rows without one when some do", () => {
    const withoutUuids = decodeChunk(new Uint8Array(build(randomRows(new Random(2), 20, 0))));
    expect(withoutUuids.uuidPresent).toBeUndefined();
    expect(withoutUuids.uuidBytes).toBeUndefined();

    const rows = randomRows(new Random(3), 20, 0);
    rows[7].uuid = "00000000-0000-0000-0000-000000000000";
    rows[12].uuid = "ffffffff-ffff-ffff-ffff-ffffffffffff";
    const mixed = decodeChunk(new Uint8Array(build(rows)));
    expect([...mixed.uuidPresent!].map((flag, row) => (flag ? row : -1)).filter((row) => row >= 0)).toEqual([7, 12]);
    expect(rowsOf(mixed).map((row) => row.uuid)).toEqual(rows.map((row) => row.uuid));
  });

  it("encodes an empty chunk", () => {
    const decoded = decodeChunk(new Uint8Array(build([])));
    expect(decoded.rowCount).toBe(0);
    expect(decoded.stringCount).toBe(0);
    expect(decoded.keyStrings.length).toBe(0);
  });

  it("decodes from a view that is not 8-byte aligned (a WAL payload read from disk)", () => {
    const rows = randomRows(new Random(4), 50, 0.5);
    const encoded = new Uint8Array(build(rows));
    const misaligned = new Uint8Array(encoded.length + 3);
    misaligned.set(encoded, 3);
    expect(rowsOf(decodeChunk(misaligned.subarray(3))).map(sortedProperties)).toEqual(rows.map(sortedProperties));
  });

  it("refuses a chunk with a bad magic or cut short with ChunkFormatError", () => {
    const encoded = new Uint8Array(build(randomRows(new Random(5), 30, 0.5)));
    const badMagic = encoded.slice();
    badMagic[0] ^= 0xff;
    expect(() => decodeChunk(badMagic)).toThrow(ChunkFormatError);
    expect(() => decodeChunk(encoded.slice(0, 16))).toThrow(ChunkFormatError);
    expect(() => decodeChunk(encoded.slice(0, 64))).toThrow(ChunkFormatError);
  });
});

describe("filterChunk keeps exactly the rows it is told to", () => {
  it("keeps the chosen rows in order, with their properties and uuids", () => {
    const random = new Random(21);
    const rows = randomRows(random, 400, 0.7);
    const keep = new Uint8Array(rows.length);
    for (let row = 0; row < rows.length; row++) keep[row] = random.chance(0.5) ? 1 : 0;
    const filtered = decodeChunk(new Uint8Array(filterChunk(decodeChunk(new Uint8Array(build(rows))), keep)));
    const expected = rows.filter((_, row) => keep[row] === 1);
    expect(filtered.rowCount).toBe(expected.length);
    expect(rowsOf(filtered).map(sortedProperties)).toEqual(expected.map(sortedProperties));
  });

  it("keeps everything, or nothing", () => {
    const rows = randomRows(new Random(22), 64, 0.5);
    const chunk = decodeChunk(new Uint8Array(build(rows)));
    const all = decodeChunk(new Uint8Array(filterChunk(chunk, new Uint8Array(rows.length).fill(1))));
    expect(rowsOf(all).map(sortedProperties)).toEqual(rows.map(sortedProperties));
    const none = decodeChunk(new Uint8Array(filterChunk(chunk, new Uint8Array(rows.length))));
    expect(none.rowCount).toBe(0);
    expect(none.entryRows.length).toBe(0);
  });

  it("drops the uuid section when no kept row has a uuid", () => {
    const rows = randomRows(new Random(23), 10, 0);
    rows[4].uuid = new Random(1).uuid();
    const keep = new Uint8Array(rows.length).fill(1);
    keep[4] = 0;
    const filtered = decodeChunk(new Uint8Array(filterChunk(decodeChunk(new Uint8Array(build(rows))), keep)));
    expect(filtered.uuidPresent).toBeUndefined();
    expect(filtered.rowCount).toBe(9);
  });
});
