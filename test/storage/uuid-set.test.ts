/**
 * The uuid set is what makes a retried batch count once (SPEC §2). It must
 * never forget a uuid it holds — across growth and deletions of others — and
 * must treat the nil uuid, which is also its empty-slot marker, like any other.
 */
import { describe, expect, it } from "vitest";
import { UuidSet } from "../../src/storage/uuid-set.js";
import { Random } from "../helpers/random.js";

function bytesOf(uuid: string): Uint8Array {
  return Buffer.from(uuid.replaceAll("-", ""), "hex");
}

const nil = "00000000-0000-0000-0000-000000000000";

describe("UuidSet", () => {
  it("adds a uuid once, then reports it present", () => {
    const set = new UuidSet();
    const uuid = bytesOf("0f8fad5b-d9cb-469f-a165-70867728950e");
    expect(set.has(uuid)).toBe(false);
    expect(set.add(uuid)).toBe(true);
    expect(set.add(uuid)).toBe(false);
    expect(set.has(uuid)).toBe(true);
    expect(set.size).toBe(1);
  });

  it("tracks the nil uuid apart from empty slots", () => {
    const set = new UuidSet();
    expect(set.has(bytesOf(nil))).toBe(false);
    expect(set.add(bytesOf(nil))).toBe(true);
    expect(set.add(bytesOf(nil))).toBe(false);
    expect(set.has(bytesOf(nil))).toBe(true);
    expect(set.size).toBe(1);
    set.delete(bytesOf(nil), 0, 0);
    expect(set.has(bytesOf(nil))).toBe(false);
    expect(set.size).toBe(0);
  });

  it("tells apart uuids that differ in a single word or a single bit", () => {
    const set = new UuidSet();
    const base = bytesOf("11111111-2222-3333-4444-555555555555");
    set.add(base);
    for (let byte = 0; byte < 16; byte++) {
      const other = base.slice();
      other[byte] ^= 0x01;
      expect(set.has(other), `byte ${byte}`).toBe(false);
    }
    // Uuids that are zero in three of four words are not empty slots.
    const sparse = new Uint8Array(16);
    sparse[15] = 1;
    expect(set.add(sparse)).toBe(true);
    expect(set.has(sparse)).toBe(true);
    expect(set.has(bytesOf(nil))).toBe(false);
  });

  it("reads uuids at an offset inside a larger buffer", () => {
    const random = new Random(41);
    const packed = new Uint8Array(16 * 10);
    for (let index = 0; index < 10; index++) packed.set(bytesOf(random.uuid()), index * 16);
    const set = new UuidSet();
    for (let offset = 0; offset < packed.length; offset += 32) set.add(packed, offset);
    for (let index = 0; index < 10; index++) expect(set.has(packed, index * 16)).toBe(index % 2 === 0);
  });

  it("keeps every uuid across growth far beyond its first capacity", () => {
    const random = new Random(42);
    const set = new UuidSet();
    const stored = Array.from({ length: 50_000 }, () => bytesOf(random.uuid()));
    const absent = Array.from({ length: 5_000 }, () => bytesOf(random.uuid()));
    const initialBytes = set.byteLength;
    // Counted, not asserted one by one: 50 000 expect() calls would dominate the run time.
    expect(stored.filter((uuid) => set.add(uuid)).length).toBe(stored.length);
    expect(set.byteLength).toBeGreaterThan(initialBytes);
    expect(set.size).toBe(stored.length);
    expect(stored.filter((uuid) => !set.has(uuid)).length).toBe(0);
    expect(stored.filter((uuid) => set.add(uuid)).length).toBe(0);
    expect(absent.filter((uuid) => set.has(uuid)).length).toBe(0);
  });

  it("answers claims, settles and deletes (its owner's claim alone) as a map of uuid to owner does, over random runs", () => {
    for (let seed = 1; seed <= 20; seed++) {
      const random = new Random(seed);
      const set = new UuidSet();
      const model = new Map<string, number>();
      // Few distinct uuids, many operations: the same uuid is claimed, settled and deleted again and again.
      const pool = Array.from({ length: 200 + random.integer(0, 2999) }, () => random.uuid());
      pool.push(nil);
      for (let step = 0; step < 20_000; step++) {
        const uuid = pool[random.integer(0, pool.length - 1)];
        const bytes = bytesOf(uuid);
        const action = random.integer(0, 9);
        if (action < 6) {
          const owner = random.integer(1, 1000);
          const expected = model.has(uuid) ? model.get(uuid)! : -1;
          if (expected === -1) model.set(uuid, owner);
          const answer = set.claim(bytes, 0, owner);
          if (answer !== expected) expect.fail(`seed ${seed} step ${step}: claim of ${uuid} answered ${answer}, expected ${expected}`);
        } else if (action < 8) {
          set.settle(bytes);
          if (model.has(uuid)) model.set(uuid, 0);
        } else {
          // A failed commit deletes the claims it made: another owner's claim of the uuid stays.
          const owner = model.has(uuid) && random.integer(0, 2) > 0 ? model.get(uuid)! : random.integer(0, 1000);
          set.delete(bytes, 0, owner);
          if (model.get(uuid) === owner) model.delete(uuid);
        }
      }
      expect(set.size, `seed ${seed}`).toBe(model.size);
      expect(pool.filter((uuid) => set.has(bytesOf(uuid)) !== model.has(uuid)).length, `seed ${seed}`).toBe(0);
    }
  });

  it("answers the same with the batch's home slots read ahead, whatever the batch holds", () => {
    const random = new Random(44);
    const set = new UuidSet();
    const model = new Set<string>();
    // Batches too small to read ahead, past the read-ahead's first scratch size (1 024 rows), rows without
    // a uuid, the nil uuid, repeats of stored uuids, and a first batch into tables that hold no slots yet.
    for (const rowCount of [700, 0, 1, 1024, 1025, 3000, 50, 256]) {
      const bytes = new Uint8Array(rowCount * 16);
      const present = new Uint8Array(rowCount);
      const uuids: string[] = [];
      const stored = [...model];
      for (let row = 0; row < rowCount; row++) {
        const uuid = random.chance(0.1) && stored.length > 0 ? stored[random.integer(0, stored.length - 1)] : random.chance(0.01) ? nil : random.uuid();
        uuids.push(uuid);
        bytes.set(bytesOf(uuid), row * 16);
        present[row] = random.chance(0.9) ? 1 : 0;
      }
      // Claimed as commits claim them: with the hashes read ahead, when there are some.
      const hashes = set.prefetchHomes(bytes, present, rowCount);
      let wrong = 0;
      for (let row = 0; row < rowCount; row++) {
        if (!present[row]) continue;
        const isNew = !model.has(uuids[row]);
        model.add(uuids[row]);
        const owner = hashes === undefined ? set.claim(bytes, row * 16, 1) : set.claimHashed(bytes, row * 16, 1, hashes[row]);
        if ((owner === -1) !== isNew) wrong++;
      }
      expect(wrong, `batch of ${rowCount}`).toBe(0);
      expect(set.size, `batch of ${rowCount}`).toBe(model.size);
    }
  });

  it("keeps the uuids it did not delete, and can take a deleted one back", () => {
    const random = new Random(43);
    const set = new UuidSet();
    const stored = Array.from({ length: 3_000 }, () => bytesOf(random.uuid()));
    for (const uuid of stored) set.add(uuid);
    const deleted = stored.filter((_, index) => index % 3 === 0);
    for (const uuid of deleted) set.delete(uuid, 0, 0);
    expect(set.size).toBe(stored.length - deleted.length);
    for (const [index, uuid] of stored.entries()) expect(set.has(uuid), `uuid ${index}`).toBe(index % 3 !== 0);
    for (const uuid of deleted) expect(set.add(uuid)).toBe(true);
    for (const uuid of stored) expect(set.has(uuid)).toBe(true);
    // Deleting a uuid that is not there changes nothing.
    set.delete(bytesOf(random.uuid()), 0, 0);
    expect(set.size).toBe(stored.length);
  });
});
