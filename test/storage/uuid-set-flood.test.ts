/**
 * Uuids are chosen by clients, so the uuid set must not let a client choose
 * which of them collide (hash flooding): with the former unkeyed hash, 100 000
 * uuids made to share one hash all landed in one chain, and every claim walked
 * all the ones before it. Under the keyed hash they are as good as random.
 */
import { describe, expect, it } from "vitest";
import { uuidsCollidingUnderUnkeyedHash, unkeyedUuidHash } from "../../bench/fixtures/colliding-uuids.js";
import { limits } from "../../src/config/limits.js";
import { halfSipHash13, UuidSet } from "../../src/storage/uuid-set.js";

const floodCount = 100_000;

describe("the uuid set under a hash flood", () => {
  it("hashes uuids with HalfSipHash-1-3: the reference vector for 16 bytes", () => {
    // Linux's hsiphash test vectors (32-bit build, HalfSipHash-1-3): bytes 00…0f under the key 00…07.
    expect(halfSipHash13(0x03020100, 0x07060504, 0x03020100, 0x07060504, 0x0b0a0908, 0x0f0e0d0c)).toBe(0x8b31d501);
  });

  it("keeps every lookup's walk within the bound for 100 000 uuids that share one unkeyed hash", () => {
    const uuids = uuidsCollidingUnderUnkeyedHash(floodCount, 7);
    const words = new DataView(uuids.buffer);
    const unkeyedHashes = new Set<number>();
    for (let offset = 0; offset < uuids.length; offset += 16) {
      unkeyedHashes.add(unkeyedUuidHash(words.getUint32(offset, true), words.getUint32(offset + 4, true), words.getUint32(offset + 8, true), words.getUint32(offset + 12, true)));
    }
    // The flood is real: one hash for all of them under the former formula.
    expect(unkeyedHashes.size).toBe(1);

    const set = new UuidSet();
    let claimed = 0;
    for (let offset = 0; offset < uuids.length; offset += 16) if (set.claim(uuids, offset, 1) === -1) claimed++;
    expect(claimed).toBe(floodCount);
    expect(set.size).toBe(floodCount);
    expect(set.maxProbeLength()).toBeLessThanOrEqual(limits.uuidProbeSlotsMax);
    let found = 0;
    for (let offset = 0; offset < uuids.length; offset += 16) if (set.has(uuids, offset)) found++;
    expect(found).toBe(floodCount);
  });

  it("answers the flood's retries as repeats, and forgets none of them when others are deleted", () => {
    const uuids = uuidsCollidingUnderUnkeyedHash(20_000, 8);
    const set = new UuidSet();
    for (let offset = 0; offset < uuids.length; offset += 16) set.claim(uuids, offset, 1);
    let repeats = 0;
    for (let offset = 0; offset < uuids.length; offset += 16) if (set.claim(uuids, offset, 2) === 1) repeats++;
    expect(repeats).toBe(20_000);
    for (let offset = 0; offset < uuids.length; offset += 32) set.delete(uuids, offset, 1);
    let wrong = 0;
    for (let offset = 0; offset < uuids.length; offset += 16) if (set.has(uuids, offset) !== (offset % 32 !== 0)) wrong++;
    expect(wrong).toBe(0);
    expect(set.maxProbeLength()).toBeLessThanOrEqual(limits.uuidProbeSlotsMax);
  });
});
