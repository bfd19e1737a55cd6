/**
 * The set of uuids stored in one workspace (SPEC §2 idempotent retries).
 * Open addressing over Uint32Arrays, five words per uuid — the uuid and the
 * commit that claimed it — 20 bytes a slot instead of ~100 for a JS Set of
 * strings, and no garbage per insert. An all-zero uuid marks an empty slot;
 * the nil uuid (all zeros) is tracked apart.
 *
 * The uuids are spread over 256 tables by the top bits of their hash, each
 * growing on its own: one table of 6 M uuids stopped the main thread for
 * ~0.5 s each time it doubled, every other client waiting; a table of 1/256
 * of them takes a few milliseconds. Tables fill to different loads before
 * they grow (50–75 %), or all 256 would double within the same few batches.
 *
 * The owner lets a retry that arrives while the original is still on its way
 * to disk wait for that commit before it is acknowledged (owner 0: durable).
 */
const slotWords = 5;
const shardBits = 8;
/** Slots of a table once it holds a uuid (a workspace without uuids holds no slots). */
const shardInitialCapacity = 16;

/**
 * Batches of fewer rows are claimed without reading ahead (prefetchHomes):
 * the tasks of gathered single events (~60 rows at 256 connections) lost 6
 * of 8 paired runs by 3–10 % with it, where a few claims gain little from
 * overlapping their misses.
 */
const prefetchRowsMin = 256;

/** The table (of 2^shardBits) that holds uuids with this hash. */
function shardOf(hash: number): number {
  return hash >>> (32 - shardBits);
}

/** Little-endian u32 at bytes[at…at+4): read inline, no tuple per lookup. */
function word(bytes: Uint8Array, at: number): number {
  return (bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16) | (bytes[at + 3] << 24)) >>> 0;
}

function hashOf(a: number, b: number, c: number, d: number): number {
  // murmur3 finalizer over a mix of all four words: v1/v7 uuids keep entropy in different words.
  let h = Math.imul(a ^ Math.imul(b, 0x9e3779b1) ^ Math.imul(c, 0x85ebca6b) ^ Math.imul(d, 0xc2b2ae35), 0x27d4eb2f);
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** One table: the uuids whose hash has its top bits. Slots are picked by the low bits. */
class UuidTable {
  slots = new Uint32Array(0);
  private capacity = 0;
  count = 0;

  /** `maxLoadPercent`: how full it gets before it doubles. */
  constructor(private readonly maxLoadPercent: number) {}

  /** Slot index of a uuid, or -1. */
  find(hash: number, a: number, b: number, c: number, d: number): number {
    if (this.capacity === 0) return -1;
    const mask = this.capacity - 1;
    const slots = this.slots;
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      const base = slot * slotWords;
      const s0 = slots[base], s1 = slots[base + 1], s2 = slots[base + 2], s3 = slots[base + 3];
      if ((s0 | s1 | s2 | s3) === 0) return -1;
      if (s0 === a && s1 === b && s2 === c && s3 === d) return slot;
    }
  }

  /** claim's answer: -1 when the uuid was new (now held for `owner`), else its owner. */
  claim(hash: number, a: number, b: number, c: number, d: number, owner: number): number {
    // Grown first, so the probe below both finds the uuid and, failing that,
    // stops at the empty slot it goes into: one walk of the chain, not two.
    if ((this.count + 1) * 100 > this.capacity * this.maxLoadPercent) this.grow();
    const mask = this.capacity - 1;
    const slots = this.slots;
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      const base = slot * slotWords;
      const s0 = slots[base], s1 = slots[base + 1], s2 = slots[base + 2], s3 = slots[base + 3];
      if (s0 === a && s1 === b && s2 === c && s3 === d) return slots[base + 4];
      if ((s0 | s1 | s2 | s3) === 0) {
        slots[base] = a;
        slots[base + 1] = b;
        slots[base + 2] = c;
        slots[base + 3] = d;
        slots[base + 4] = owner;
        this.count++;
        return -1;
      }
    }
  }

  /** Index in `slots` of the first word of the uuid's home slot; -1 while the table holds no slots. */
  homeWord(hash: number): number {
    return this.capacity === 0 ? -1 : (hash & (this.capacity - 1)) * slotWords;
  }

  delete(hash: number, a: number, b: number, c: number, d: number): void {
    let hole = this.find(hash, a, b, c, d);
    if (hole < 0) return;
    // Backward-shift deletion: later entries of the probe chain move into the
    // hole unless their home slot lies cyclically in (hole, probe], so no
    // lookup ever stops early at an empty slot.
    const mask = this.capacity - 1;
    const slots = this.slots;
    for (let probe = (hole + 1) & mask; ; probe = (probe + 1) & mask) {
      const base = probe * slotWords;
      const s0 = slots[base], s1 = slots[base + 1], s2 = slots[base + 2], s3 = slots[base + 3];
      if ((s0 | s1 | s2 | s3) === 0) break;
      const home = hashOf(s0, s1, s2, s3) & mask;
      const stays = hole <= probe ? hole < home && home <= probe : hole < home || home <= probe;
      if (stays) continue;
      slots.copyWithin(hole * slotWords, base, base + slotWords);
      hole = probe;
    }
    slots.fill(0, hole * slotWords, hole * slotWords + slotWords);
    this.count--;
  }

  private grow(): void {
    const old = this.slots;
    this.capacity = Math.max(shardInitialCapacity, this.capacity * 2);
    const mask = this.capacity - 1;
    const slots = (this.slots = new Uint32Array(this.capacity * slotWords));
    for (let from = 0; from < old.length; from += slotWords) {
      const s0 = old[from], s1 = old[from + 1], s2 = old[from + 2], s3 = old[from + 3];
      if ((s0 | s1 | s2 | s3) === 0) continue;
      // Known absent from the new table: the first empty slot of its chain.
      let slot = hashOf(s0, s1, s2, s3) & mask;
      while ((slots[slot * slotWords] | slots[slot * slotWords + 1] | slots[slot * slotWords + 2] | slots[slot * slotWords + 3]) !== 0) slot = (slot + 1) & mask;
      // Word by word: a subarray view per uuid made rehashing a table of millions allocate millions of views.
      const base = slot * slotWords;
      slots[base] = s0;
      slots[base + 1] = s1;
      slots[base + 2] = s2;
      slots[base + 3] = s3;
      slots[base + 4] = old[from + 4];
    }
  }
}

export class UuidSet {
  private readonly tables = Array.from({ length: 1 << shardBits }, (_, index) => new UuidTable(50 + Math.floor((25 * index) / ((1 << shardBits) - 1))));
  private hasNil = false;
  private nilOwner = 0;

  get size(): number {
    let count = this.hasNil ? 1 : 0;
    for (const table of this.tables) count += table.count;
    return count;
  }

  /** Bytes held, for the memory figures. */
  get byteLength(): number {
    let bytes = 0;
    for (const table of this.tables) bytes += table.slots.byteLength;
    return bytes;
  }

  private tableOf(hash: number): UuidTable {
    return this.tables[shardOf(hash)];
  }

  /** True when the uuid at bytes[offset…offset+16) is present. */
  has(bytes: Uint8Array, offset = 0): boolean {
    const a = word(bytes, offset), b = word(bytes, offset + 4), c = word(bytes, offset + 8), d = word(bytes, offset + 12);
    if ((a | b | c | d) === 0) return this.hasNil;
    const hash = hashOf(a, b, c, d);
    return this.tableOf(hash).find(hash, a, b, c, d) >= 0;
  }

  /** Per uuid of the batch being prefetched: its table, and the first word of its home slot. */
  private prefetchTable = new Uint8Array(1024);
  private prefetchWord = new Int32Array(1024);
  /** Sum of the words read ahead: kept, so the compiler cannot drop the loads as unused. */
  prefetchSink = 0;

  /**
   * Reads the home slot of each uuid of a batch (rows with `present[row]`,
   * 16 bytes each in `bytes`) before they are claimed one by one. A claim's
   * cost is a cache and TLB miss in tables of a gigabyte; in the claim loop
   * each miss waits for the one before, since the next hash is computed
   * behind a branch on the loaded slot. Here the addresses are computed
   * first, then read in a loop of a few instructions, so the core has many
   * misses in flight at once; the claims then find their lines in the cache
   * (batches of fewer than prefetchRowsMin rows are left alone). Batches of
   * 1 000 events at 64 connections: 521–610 k events/s against 390–566 k
   * without it, ten alternated pairs, every one the same way.
   */
  prefetchHomes(bytes: Uint8Array, present: Uint8Array, rowCount: number): void {
    if (rowCount < prefetchRowsMin) return;
    if (this.prefetchWord.length < rowCount) {
      this.prefetchTable = new Uint8Array(rowCount);
      this.prefetchWord = new Int32Array(rowCount);
    }
    const tableOfRow = this.prefetchTable;
    const wordOfRow = this.prefetchWord;
    let count = 0;
    for (let row = 0; row < rowCount; row++) {
      if (present[row] === 0) continue;
      const offset = row * 16;
      const hash = hashOf(word(bytes, offset), word(bytes, offset + 4), word(bytes, offset + 8), word(bytes, offset + 12));
      const table = shardOf(hash);
      const home = this.tables[table].homeWord(hash);
      if (home < 0) continue;
      tableOfRow[count] = table;
      wordOfRow[count] = home;
      count++;
    }
    const tables = this.tables;
    let sink = 0;
    for (let index = 0; index < count; index++) sink += tables[tableOfRow[index]].slots[wordOfRow[index]];
    this.prefetchSink = sink;
  }

  /** Adds the uuid as durable; returns false when it was already present. */
  add(bytes: Uint8Array, offset = 0): boolean {
    return this.claim(bytes, offset, 0) === -1;
  }

  /**
   * Claims the uuid for commit `owner`. Returns -1 when it was new (now claimed),
   * else the owner that claimed it first (0 once that commit is durable).
   */
  claim(bytes: Uint8Array, offset: number, owner: number): number {
    const a = word(bytes, offset), b = word(bytes, offset + 4), c = word(bytes, offset + 8), d = word(bytes, offset + 12);
    if ((a | b | c | d) === 0) {
      if (this.hasNil) return this.nilOwner;
      this.hasNil = true;
      this.nilOwner = owner;
      return -1;
    }
    const hash = hashOf(a, b, c, d);
    return this.tableOf(hash).claim(hash, a, b, c, d, owner);
  }

  /** Marks the uuid durable (its commit's fdatasync succeeded). */
  settle(bytes: Uint8Array, offset = 0): void {
    const a = word(bytes, offset), b = word(bytes, offset + 4), c = word(bytes, offset + 8), d = word(bytes, offset + 12);
    if ((a | b | c | d) === 0) {
      this.nilOwner = 0;
      return;
    }
    const hash = hashOf(a, b, c, d);
    const table = this.tableOf(hash);
    const slot = table.find(hash, a, b, c, d);
    if (slot >= 0) table.slots[slot * slotWords + 4] = 0;
  }

  /** Removes a uuid added by a write that then failed (rare: disk errors). */
  delete(bytes: Uint8Array, offset = 0): void {
    const a = word(bytes, offset), b = word(bytes, offset + 4), c = word(bytes, offset + 8), d = word(bytes, offset + 12);
    if ((a | b | c | d) === 0) {
      this.hasNil = false;
      return;
    }
    const hash = hashOf(a, b, c, d);
    this.tableOf(hash).delete(hash, a, b, c, d);
  }
}
