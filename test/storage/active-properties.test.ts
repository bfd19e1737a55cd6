/**
 * An active segment's property slots against a naive model (a Map per key of
 * rows and texts), on seeded random entries: key ids hashing into one another,
 * keys with one entry, with more than an arena slot holds, and one large
 * enough to travel to the sealing worker as shared buffers. Checked both as a
 * query reads them (entries of one key) and as the sealing worker receives
 * them (pack, structured clone, unpack).
 */
import { describe, expect, it } from "vitest";
import { ActiveProperties, readSharedTexts, type ActivePropertyEntries } from "../../src/storage/active-properties.js";
import { unpackPropertyEntries } from "../../src/storage/property-transfer.js";
import { Random } from "../helpers/random.js";

interface ModelKey {
  rows: number[];
  texts: string[];
}

/** Rows and texts of one key, read the way segment-views.ts reads a descriptor. */
function readEntries(entries: ActivePropertyEntries): ModelKey {
  const rows = new Uint32Array(entries.rows, entries.rowsOffset, entries.entryCount);
  const valueIds = new Uint32Array(entries.valueIds, entries.valueIdsOffset, entries.entryCount);
  const texts: string[] = [];
  readSharedTexts(entries.texts, texts);
  return { rows: [...rows], texts: [...valueIds].map((id) => texts[id]) };
}

function fill(random: Random, rowCount: number, keyIds: number[], textsPerKey: number, bigKey?: { keyId: number; every: number }) {
  const properties = new ActiveProperties();
  const model = new Map<number, ModelKey>();
  let newTexts = 0;
  const add = (keyId: number, row: number, text: string) => {
    let key = model.get(keyId);
    if (key === undefined) model.set(keyId, (key = { rows: [], texts: [] }));
    const isNew = !key.texts.includes(text);
    key.rows.push(row);
    key.texts.push(text);
    const added = properties.add(properties.slotFor(keyId), row, text);
    expect(added, `key ${keyId} row ${row} text ${JSON.stringify(text)}`).toBe(isNew ? 1 : 0);
    if (isNew) newTexts++;
  };
  for (let row = 0; row < rowCount; row++) {
    const setHere = random.integer(0, 4);
    const chosen = new Set<number>();
    for (let index = 0; index < setHere; index++) chosen.add(keyIds[random.integer(0, keyIds.length - 1)]);
    for (const keyId of chosen) add(keyId, row, random.chance(0.05) ? "" : `v${random.integer(0, textsPerKey - 1)}`);
    if (bigKey && row % bigKey.every === 0 && !chosen.has(bigKey.keyId)) add(bigKey.keyId, row, `b${row % 7}`);
  }
  return { properties, model, newTexts };
}

async function expectSame(properties: ActiveProperties, model: Map<number, ModelKey>): Promise<void> {
  expect(properties.keyCount).toBe(model.size);
  for (const [keyId, key] of model) {
    const slot = properties.slotOf(keyId);
    expect(slot, `key ${keyId}`).toBeGreaterThanOrEqual(0);
    expect(readEntries(properties.entries(slot)), `key ${keyId}`).toEqual(key);
  }
  // The sealing worker's view: through a structured clone, as postMessage sends it.
  const unpacked = unpackPropertyEntries(structuredClone(await properties.pack()));
  expect(unpacked.map((entries) => entries.keyId).sort((a, b) => a - b)).toEqual([...model.keys()].sort((a, b) => a - b));
  for (const entries of unpacked) {
    const key = model.get(entries.keyId)!;
    expect({ rows: [...entries.rows], texts: [...entries.valueIds].map((id) => entries.texts[id]) }, `packed key ${entries.keyId}`).toEqual(key);
    // A dictionary holds each text once, with "" (unset) at id 0.
    expect(entries.texts[0]).toBe("");
    expect(new Set(entries.texts.slice(1)).size).toBe(entries.texts.length - 1);
  }
}

describe("active segment properties", () => {
  it("match a naive model across seeds: few and many keys, few and many texts, keys past their arena slot", async () => {
    for (let seed = 1; seed <= 60; seed++) {
      const random = new Random(seed);
      const keyCount = random.chance(0.5) ? random.integer(1, 8) : random.integer(100, 3000);
      // Key ids spaced by powers of two collide in the hash's low bits; random ones do not.
      const spacing = random.chance(0.3) ? 1 << random.integer(4, 12) : 1;
      const keyIds = Array.from({ length: keyCount }, (_, index) => (spacing === 1 ? random.integer(0, 2 ** 32 - 1) : index * spacing));
      const { properties, model } = fill(random, random.integer(1, 2000), [...new Set(keyIds)], random.chance(0.5) ? 2 : 500);
      await expectSame(properties, model);
    }
  });

  it("send a key with 2^16 entries or more as shared buffers, the rest packed, all intact", async () => {
    const random = new Random(7);
    const { properties, model } = fill(random, 140_000, [3, 5, 8, 13], 40, { keyId: 21, every: 2 });
    expect(model.get(21)!.rows.length).toBeGreaterThanOrEqual(1 << 16);
    const message = await properties.pack();
    expect(message.shared.map((shared) => message.keyIds[shared.slot])).toEqual([21]);
    await expectSame(properties, model);
  });

  it("keep what a reader was given while entries are added after it", () => {
    const properties = new ActiveProperties();
    const slot = properties.slotFor(42);
    for (let row = 0; row < 10; row++) properties.add(slot, row, `t${row % 3}`);
    const snapshot = properties.entries(slot);
    const before = readEntries(snapshot);
    // Past the arena slot, then past several doublings of its own buffers.
    for (let row = 10; row < 5000; row++) properties.add(slot, row, `t${row % 11}`);
    expect(readEntries(snapshot)).toEqual(before);
    expect(readEntries(properties.entries(slot)).rows).toHaveLength(5000);
  });

  it("hand a listing every key's entries without texts, and no shared texts of its own per key", () => {
    const properties = new ActiveProperties();
    for (let keyId = 0; keyId < 1000; keyId++) for (let row = 0; row < 3; row++) properties.add(properties.slotFor(keyId), row, `k${keyId}v${row}`);
    const listed = Array.from({ length: 1000 }, (_, keyId) => properties.entries(properties.slotOf(keyId), false));
    expect(listed.every((entries) => entries.entryCount === 3 && entries.texts.count === 1)).toBe(true);
    expect(new Set(listed.map((entries) => entries.texts.bytes)).size).toBe(1);
    // A query of one key still reads all of its texts.
    expect(readEntries(properties.entries(properties.slotOf(7)))).toEqual({ rows: [0, 1, 2], texts: ["k7v0", "k7v1", "k7v2"] });
  });

  it("keep a queried key's texts in shared memory as new ones arrive, earlier readers' texts intact", () => {
    const random = new Random(11);
    const properties = new ActiveProperties();
    const slot = properties.slotFor(7);
    const model: string[] = [];
    const snapshots: Array<{ entries: ActivePropertyEntries; texts: string[] }> = [];
    for (let row = 0; row < 3000; row++) {
      // New texts often, some long and multi-byte, so the shared buffers grow many times under earlier readers.
      const text = random.chance(0.3) ? `t${random.integer(0, 40)}` : `${row}:${"é😀".repeat(random.integer(0, 60))}`;
      properties.add(slot, row, text);
      model.push(text);
      if (random.chance(0.02)) snapshots.push({ entries: properties.entries(slot), texts: [...model] });
    }
    snapshots.push({ entries: properties.entries(slot), texts: [...model] });
    for (const { entries, texts } of snapshots) expect(readEntries(entries).texts).toEqual(texts.slice(0, entries.entryCount));
    // A reader keeps what it decoded and reads only the texts that arrived since.
    const kept: string[] = [];
    for (const { entries } of snapshots) {
      readSharedTexts(entries.texts, kept);
      expect(kept).toHaveLength(entries.texts.count);
    }
    expect(new Set(kept.slice(1))).toEqual(new Set(model));
  });

  it("send texts longer in total than one joined part holds, each intact", async () => {
    const properties = new ActiveProperties();
    const model = new Map<number, ModelKey>();
    // 300 texts of ~60 000 UTF-16 units (an emoji is two) pass the 2²⁴-unit part bound once. Well-formed, as
    // ingest admits only those (a lone surrogate cannot be written as UTF-8, in the WAL or in shared texts).
    for (let row = 0; row < 300; row++) {
      const keyId = row % 3;
      const text = `${row}:${"😀".repeat(29_990)}`;
      properties.add(properties.slotFor(keyId), row, text);
      if (!model.has(keyId)) model.set(keyId, { rows: [], texts: [] });
      model.get(keyId)!.rows.push(row);
      model.get(keyId)!.texts.push(text);
    }
    const message = await properties.pack();
    expect(message.textParts.length).toBeGreaterThan(1);
    await expectSame(properties, model);
  });

  it("take a million keys of one entry each", async () => {
    const properties = new ActiveProperties();
    for (let keyId = 0; keyId < 1_000_000; keyId++) properties.add(properties.slotFor(keyId * 7), keyId, `value ${keyId}`);
    expect(properties.keyCount).toBe(1_000_000);
    for (const keyId of [0, 1, 65_535, 999_999]) expect(readEntries(properties.entries(properties.slotOf(keyId * 7)))).toEqual({ rows: [keyId], texts: [`value ${keyId}`] });
    expect(properties.slotOf(5)).toBe(-1);
    const unpacked = unpackPropertyEntries(await properties.pack());
    expect(unpacked).toHaveLength(1_000_000);
    expect(unpacked[123_456].texts).toEqual(["", "value 123456"]);
  });
});
