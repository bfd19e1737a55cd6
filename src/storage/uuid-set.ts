/**
 * The set of uuids stored in one workspace (SPEC §2 idempotent retries).
 * Open addressing over Uint32Arrays, five words per uuid — the uuid and the
 * commit that claimed it — 20 bytes a slot instead of ~100 for a JS Set of
 * strings, and no garbage per insert. An all-zero uuid marks an empty slot;
 * the nil uuid (all zeros) is tracked apart.
 *
 * Uuids are chosen by clients, so their hash is keyed: HalfSipHash-1-3 (the
 * Linux kernel's hsiphash) under 64 random bits drawn per process and never
 * stored. A fixed hash let anyone holding an ingest key compute uuids that
 * all land in one slot, making each claim walk all the others (quadratic, on
 * the main thread); under a secret key a client cannot tell which uuids
 * collide. Nothing on disk depends on the key: start-up rebuilds the set from
 * the uuids in sealed segments and the WAL.
 *
 * The uuids are spread over 256 tables by the top bits of their hash, each
 * growing on its own: one table of 6 M uuids stopped the main thread for
 * ~0.5 s each time it doubled, every other client waiting; a table of 1/256
 * of them takes a few milliseconds. Tables fill to different loads before
 * they grow (50–75 %), or all 256 would double within the same few batches.
 *
 * The owner lets a retry that arrives while the original is still on its way
 * to disk wait for that commit before it is acknowledged (owner 0: durable).
 *
 * Uuids are kept for a horizon (limits.uuidHorizonDays), not forever: the set
 * holds two generations, the uuids received in the current period of that
 * many days and those of the period before; when a period ends the older
 * generation is dropped whole. A uuid is so remembered for at least the
 * horizon and at most twice it, and memory holds at most two periods of them.
 * A busy store fills memory long before a period ends, so the store also
 * rotates a set early (rotate) to keep all sets within a byte budget
 * (limits.uuidMemoryBytesMax): then the window is what that memory holds.
 */
import { randomBytes } from "node:crypto";
import { limits } from "../config/limits.js";

const slotWords = 5;
const shardBits = 8;
/** Slots of a table once it holds a uuid (a workspace without uuids holds no slots). */
const shardInitialCapacity = 16;
const dayMs = 86_400_000;

/** UuidSet.claim's answer when the uuid was new and is now held by the claiming commit (owners are commit ids ≥ 0). */
export const uuidClaimedNow = -1;

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

/** The per-process key of hashOf: random, never written anywhere. */
const keyBytes = randomBytes(8);
const key0 = keyBytes.readUInt32LE(0);
const key1 = keyBytes.readUInt32LE(4);
/** HalfSipHash's last block for a 16-byte message: the length in its top byte. */
const lengthBlock = 16 << 24;

/**
 * HalfSipHash-1-3 of 16 bytes (four little-endian words) under a 64-bit key:
 * one round per message block, three to finish. Exported for its test against
 * the reference vectors.
 */
export function halfSipHash13(key0: number, key1: number, a: number, b: number, c: number, d: number): number {
  let v0 = key0;
  let v1 = key1;
  let v2 = key0 ^ 0x6c796765;
  let v3 = key1 ^ 0x74656462;
  for (let block = 0; block < 8; block++) {
    // Blocks 0–4 carry the message (the four words, then its length); 5–7 finish.
    const message = block === 0 ? a : block === 1 ? b : block === 2 ? c : block === 3 ? d : block === 4 ? lengthBlock : 0;
    if (block === 5) v2 ^= 0xff;
    v3 ^= message;
    v0 = (v0 + v1) | 0;
    v1 = ((v1 << 5) | (v1 >>> 27)) ^ v0;
    v0 = (v0 << 16) | (v0 >>> 16);
    v2 = (v2 + v3) | 0;
    v3 = ((v3 << 8) | (v3 >>> 24)) ^ v2;
    v0 = (v0 + v3) | 0;
    v3 = ((v3 << 7) | (v3 >>> 25)) ^ v0;
    v2 = (v2 + v1) | 0;
    v1 = ((v1 << 13) | (v1 >>> 19)) ^ v2;
    v2 = (v2 << 16) | (v2 >>> 16);
    v0 ^= message;
  }
  return (v1 ^ v3) >>> 0;
}

/** A uuid's hash under the process key (~30 ns; the former unkeyed mix took ~5). */
function hashOf(a: number, b: number, c: number, d: number): number {
  return halfSipHash13(key0, key1, a, b, c, d);
}

/** One table: the uuids whose hash has its top bits. Slots are picked by the low bits. */
class UuidTable {
  slots = new Uint32Array(0);
  private capacity = 0;
  count = 0;

  /** `maxLoadPercent`: how full it gets before it doubles; `bytes`: its generation's count of slot bytes, which it keeps as it grows. */
  constructor(
    private readonly maxLoadPercent: number,
    private readonly bytes: { byteLength: number },
  ) {}

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
    for (;;) {
      const mask = this.capacity - 1;
      const slots = this.slots;
      let slot = hash & mask;
      for (; ; slot = (slot + 1) & mask) {
        const base = slot * slotWords;
        const s0 = slots[base], s1 = slots[base + 1], s2 = slots[base + 2], s3 = slots[base + 3];
        if (s0 === a && s1 === b && s2 === c && s3 === d) return slots[base + 4];
        if ((s0 | s1 | s2 | s3) === 0) break;
      }
      // A chain longer than the bound is rare luck under a secret key: the table doubles
      // (splitting its chains) rather than keep it — unless it is already half as full as it
      // may be, so chains made by a leaked key cannot double it without end.
      const probe = (slot - (hash & mask)) & mask;
      if (probe > limits.uuidProbeSlotsMax && this.count * 200 >= this.capacity * this.maxLoadPercent) {
        this.grow();
        continue;
      }
      const base = slot * slotWords;
      slots[base] = a;
      slots[base + 1] = b;
      slots[base + 2] = c;
      slots[base + 3] = d;
      slots[base + 4] = owner;
      this.count++;
      return -1;
    }
  }

  /** Index in `slots` of the first word of the uuid's home slot; -1 while the table holds no slots. */
  homeWord(hash: number): number {
    return this.capacity === 0 ? -1 : (hash & (this.capacity - 1)) * slotWords;
  }

  /** Longest distance of a uuid from its home slot: slots a lookup of it walks past. */
  maxProbeLength(): number {
    const mask = this.capacity - 1;
    const slots = this.slots;
    let longest = 0;
    for (let slot = 0; slot < this.capacity; slot++) {
      const base = slot * slotWords;
      const s0 = slots[base], s1 = slots[base + 1], s2 = slots[base + 2], s3 = slots[base + 3];
      if ((s0 | s1 | s2 | s3) === 0) continue;
      longest = Math.max(longest, (slot - hashOf(s0, s1, s2, s3)) & mask);
    }
    return longest;
  }

  /** Removes the uuid; false when it was not there. */
  delete(hash: number, a: number, b: number, c: number, d: number): boolean {
    let hole = this.find(hash, a, b, c, d);
    if (hole < 0) return false;
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
    return true;
  }

  private grow(): void {
    const old = this.slots;
    this.capacity = Math.max(shardInitialCapacity, this.capacity * 2);
    const mask = this.capacity - 1;
    const slots = (this.slots = new Uint32Array(this.capacity * slotWords));
    this.bytes.byteLength += slots.byteLength - old.byteLength;
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

/** One generation: the uuids received in one period, in 2^shardBits tables. Callers pass each uuid's words and hash. */
class UuidGeneration {
  /** Bytes of the tables' slots, kept by the tables as they grow. */
  byteLength = 0;
  readonly tables = Array.from({ length: 1 << shardBits }, (_, index) => new UuidTable(50 + Math.floor((25 * index) / ((1 << shardBits) - 1)), this));
  hasNil = false;
  nilOwner = 0;
  /** Uuids held, the nil uuid included. */
  count = 0;
  /** The latest commit that claimed a uuid here (0: none, or only durable adds). */
  lastOwner = 0;

  /** `sinceMs`: when it began taking uuids (the receipt time from which it remembers them). */
  constructor(public sinceMs: number) {}

  /** The owner of a uuid held here, or -1. */
  ownerOf(hash: number, a: number, b: number, c: number, d: number): number {
    if ((a | b | c | d) === 0) return this.hasNil ? this.nilOwner : -1;
    const table = this.tables[shardOf(hash)];
    const slot = table.find(hash, a, b, c, d);
    return slot < 0 ? -1 : table.slots[slot * slotWords + 4];
  }

  claim(hash: number, a: number, b: number, c: number, d: number, owner: number): number {
    if ((a | b | c | d) === 0) {
      if (this.hasNil) return this.nilOwner;
      this.hasNil = true;
      this.nilOwner = owner;
      this.count++;
      if (owner > this.lastOwner) this.lastOwner = owner;
      return -1;
    }
    const answer = this.tables[shardOf(hash)].claim(hash, a, b, c, d, owner);
    if (answer === -1) {
      this.count++;
      if (owner > this.lastOwner) this.lastOwner = owner;
    }
    return answer;
  }

  settle(hash: number, a: number, b: number, c: number, d: number): void {
    if ((a | b | c | d) === 0) {
      this.nilOwner = 0;
      return;
    }
    const table = this.tables[shardOf(hash)];
    const slot = table.find(hash, a, b, c, d);
    if (slot >= 0) table.slots[slot * slotWords + 4] = 0;
  }

  /** Removes the uuid if `owner` claimed it (another claim of it, made since, stays). */
  delete(hash: number, a: number, b: number, c: number, d: number, owner: number): void {
    if ((a | b | c | d) === 0) {
      if (!this.hasNil || this.nilOwner !== owner) return;
      this.count--;
      this.hasNil = false;
      return;
    }
    const table = this.tables[shardOf(hash)];
    const slot = table.find(hash, a, b, c, d);
    if (slot < 0 || table.slots[slot * slotWords + 4] !== owner) return;
    if (table.delete(hash, a, b, c, d)) this.count--;
  }

  maxProbeLength(): number {
    let longest = 0;
    for (const table of this.tables) longest = Math.max(longest, table.maxProbeLength());
    return longest;
  }
}

/** Which generation a time falls in, relative to the current period ("forgotten": older, beyond the horizon). */
type Generation = "current" | "previous" | "forgotten";

export class UuidSet {
  private current: UuidGeneration;
  private previous: UuidGeneration;
  /** The current period: days since the epoch divided by the horizon, rounded down. */
  private period: number;
  /** A period began while a commit in flight held the older generation: the newest has taken uuids of the new period since. */
  private stepDeferred = false;

  /**
   * `horizonDays`: how long a uuid is remembered at least; `nowMs`: the clock at
   * creation (later moves come through `advance`).
   */
  constructor(
    private readonly horizonDays = limits.uuidHorizonDays,
    nowMs = Date.now(),
  ) {
    this.period = this.periodOf(nowMs);
    this.current = new UuidGeneration(this.periodStartMs(this.period));
    this.previous = new UuidGeneration(this.periodStartMs(this.period - 1));
  }

  private periodOf(timeMs: number): number {
    return Math.floor(Math.floor(timeMs / dayMs) / this.horizonDays);
  }

  private periodStartMs(period: number): number {
    return period * this.horizonDays * dayMs;
  }

  /** A time later than the clock (a file's clock ahead of ours) counts as the current period. */
  private generationOf(timeMs: number): Generation {
    const age = this.period - Math.min(this.periodOf(timeMs), this.period);
    return age === 0 ? "current" : age === 1 ? "previous" : "forgotten";
  }

  /**
   * Moves the set's clock to `nowMs`: when a new period has begun, the older
   * generation is dropped (its tables freed) and a fresh one begins; two
   * periods or more on, both are. Never a generation that a commit still in
   * flight claimed into (`oldestInFlight`, as for rotate): then the step
   * waits for a later call, and the newest generation, which takes uuids
   * meanwhile, is kept as the older one when it comes. A clock that went back
   * changes nothing.
   */
  advance(nowMs: number, oldestInFlight = Infinity): void {
    const period = this.periodOf(nowMs);
    if (period <= this.period) return;
    if (this.previous.lastOwner >= oldestInFlight) {
      this.stepDeferred = true;
      return;
    }
    const keepCurrent = period === this.period + 1 || this.stepDeferred || this.current.lastOwner >= oldestInFlight;
    this.previous = keepCurrent ? this.current : new UuidGeneration(this.periodStartMs(period - 1));
    this.current = new UuidGeneration(this.periodStartMs(period));
    this.period = period;
    this.stepDeferred = false;
  }

  /**
   * Begins a new generation at `nowMs` before the period ends, to bound
   * memory: the older generation is dropped, and uuids received before the
   * current one began are forgotten. Refused (false) while a commit that
   * claimed a uuid there may still be in flight (`oldestInFlight`: the least
   * commit id not yet durable, Infinity when none), since a retry arriving
   * meanwhile must find its claim.
   */
  rotate(nowMs: number, oldestInFlight: number): boolean {
    if (this.previous.lastOwner >= oldestInFlight) return false;
    this.previous = this.current;
    this.current = new UuidGeneration(Math.max(nowMs, this.current.sinceMs));
    return true;
  }

  /** Drops the older generation alone (rotate's rule on commits in flight); false when refused. */
  dropPrevious(oldestInFlight: number): boolean {
    if (this.previous.lastOwner >= oldestInFlight) return false;
    this.previous = new UuidGeneration(this.current.sinceMs);
    return true;
  }

  /**
   * Start-up within the memory budget: the current generation holds the
   * uuids received since `currentSinceMs`, the older one since
   * `previousSinceMs` (each undefined: its period's start, as usual).
   */
  rememberOnlySince(currentSinceMs: number | undefined, previousSinceMs: number | undefined): void {
    if (currentSinceMs !== undefined) this.current.sinceMs = Math.max(this.current.sinceMs, currentSinceMs);
    if (previousSinceMs !== undefined) this.previous.sinceMs = Math.max(this.previous.sinceMs, Math.min(previousSinceMs, this.current.sinceMs));
  }

  /** Bytes of the current generation alone: what the next rotation keeps. */
  get currentByteLength(): number {
    return this.current.byteLength;
  }

  /** Bytes of the older generation: what the next rotation frees. */
  get previousByteLength(): number {
    return this.previous.byteLength;
  }

  /** Whether it ever took a uuid (its window then says something), even if all were forgotten since. */
  tookUuids = false;

  /** The receipt time from which uuids are remembered: the older generation's start. */
  get rememberedSinceMs(): number {
    return this.previous.sinceMs;
  }

  /** Whether uuids received (or written to disk) at `timeMs` belong to the current period's generation. */
  inCurrentPeriod(timeMs: number): boolean {
    return this.generationOf(timeMs) === "current";
  }

  /** Whether uuids received (or written to disk) at `timeMs` are still within the horizon. */
  remembers(timeMs: number): boolean {
    return this.generationOf(timeMs) !== "forgotten";
  }

  get size(): number {
    return this.current.count + this.previous.count;
  }

  /** Bytes held, for the memory figures. */
  get byteLength(): number {
    return this.current.byteLength + this.previous.byteLength;
  }

  /** Longest walk past other uuids that a lookup of a held uuid makes (the hash's quality, for tests). */
  maxProbeLength(): number {
    return Math.max(this.current.maxProbeLength(), this.previous.maxProbeLength());
  }

  /** True when the uuid at bytes[offset…offset+16) is present. */
  has(bytes: Uint8Array, offset = 0): boolean {
    const a = word(bytes, offset), b = word(bytes, offset + 4), c = word(bytes, offset + 8), d = word(bytes, offset + 12);
    const hash = hashOf(a, b, c, d);
    return this.current.ownerOf(hash, a, b, c, d) >= 0 || (this.previous.count > 0 && this.previous.ownerOf(hash, a, b, c, d) >= 0);
  }

  /** Per home slot read ahead: its table, and the index of its first word; the current generation's, then the previous one's. */
  private prefetchTable = new Uint8Array(2048);
  private prefetchWord = new Int32Array(2048);
  /** Per row of the batch read ahead, its uuid's hash (prefetchHomes' answer). */
  private prefetchHash = new Uint32Array(1024);
  /** Sum of the words read ahead: kept, so the compiler cannot drop the loads as unused. */
  prefetchSink = 0;

  /**
   * Reads the home slots of each uuid of a batch (rows with `present[row]`,
   * 16 bytes each in `bytes`) before they are claimed one by one. A claim's
   * cost is a cache and TLB miss in tables of a gigabyte; in the claim loop
   * each miss waits for the one before, since the next hash is computed
   * behind a branch on the loaded slot. Here the addresses are computed
   * first, then read in a loop of a few instructions, so the core has many
   * misses in flight at once; the claims then find their lines in the cache
   * (batches of fewer than prefetchRowsMin rows are left alone). Batches of
   * 1 000 events at 64 connections: 521–610 k events/s against 390–566 k
   * without it, ten alternated pairs, every one the same way. A claim looks
   * in both generations, so both are read ahead.
   *
   * Returns each row's hash (valid until the next call, undefined for the
   * batches left alone), for claimHashed: the hash is the costliest part of a
   * claim, and was computed both here and there.
   */
  prefetchHomes(bytes: Uint8Array, present: Uint8Array, rowCount: number): Uint32Array | undefined {
    if (rowCount < prefetchRowsMin) return undefined;
    if (this.prefetchWord.length < rowCount * 2) {
      this.prefetchTable = new Uint8Array(rowCount * 2);
      this.prefetchWord = new Int32Array(rowCount * 2);
    }
    if (this.prefetchHash.length < rowCount) this.prefetchHash = new Uint32Array(rowCount);
    const hashes = this.prefetchHash;
    const tableOfHome = this.prefetchTable;
    const wordOfHome = this.prefetchWord;
    const current = this.current.tables;
    const previous = this.previous.tables;
    const previousHeld = this.previous.count > 0;
    let currentCount = 0;
    let previousCount = 0;
    for (let row = 0; row < rowCount; row++) {
      if (present[row] === 0) continue;
      const offset = row * 16;
      const hash = hashOf(word(bytes, offset), word(bytes, offset + 4), word(bytes, offset + 8), word(bytes, offset + 12));
      hashes[row] = hash;
      const table = shardOf(hash);
      const home = current[table].homeWord(hash);
      if (home >= 0) {
        tableOfHome[currentCount] = table;
        wordOfHome[currentCount] = home;
        currentCount++;
      }
      const previousHome = previousHeld ? previous[table].homeWord(hash) : -1;
      if (previousHome >= 0) {
        tableOfHome[rowCount + previousCount] = table;
        wordOfHome[rowCount + previousCount] = previousHome;
        previousCount++;
      }
    }
    let sink = 0;
    for (let index = 0; index < currentCount; index++) sink += current[tableOfHome[index]].slots[wordOfHome[index]];
    for (let index = rowCount; index < rowCount + previousCount; index++) sink += previous[tableOfHome[index]].slots[wordOfHome[index]];
    this.prefetchSink = sink;
    return hashes;
  }

  /**
   * Adds the uuid as durable, received now or at `receivedAtMs` (start-up:
   * when the segment holding it was written); returns false when it was
   * already present, or was received beyond the horizon (then it is not added).
   * `older`: into the older generation even when received in the current
   * period (start-up, once the newest uuids fill half the memory budget).
   */
  add(bytes: Uint8Array, offset = 0, receivedAtMs?: number, older = false): boolean {
    const a = word(bytes, offset), b = word(bytes, offset + 4), c = word(bytes, offset + 8), d = word(bytes, offset + 12);
    const hash = hashOf(a, b, c, d);
    let generation = receivedAtMs === undefined ? "current" : this.generationOf(receivedAtMs);
    if (older && generation === "current") generation = "previous";
    this.tookUuids = true;
    switch (generation) {
      case "current":
        return this.previous.ownerOf(hash, a, b, c, d) < 0 && this.current.claim(hash, a, b, c, d, 0) === -1;
      case "previous":
        return this.current.ownerOf(hash, a, b, c, d) < 0 && this.previous.claim(hash, a, b, c, d, 0) === -1;
      case "forgotten":
        return false;
    }
  }

  /**
   * Claims the uuid for commit `owner`. Returns uuidClaimedNow (-1) when it was new (now claimed),
   * else the owner that claimed it first (0 once that commit is durable).
   */
  claim(bytes: Uint8Array, offset: number, owner: number): number {
    return this.claimHashed(bytes, offset, owner, hashOf(word(bytes, offset), word(bytes, offset + 4), word(bytes, offset + 8), word(bytes, offset + 12)));
  }

  /** claim, the uuid's hash already known (prefetchHomes). */
  claimHashed(bytes: Uint8Array, offset: number, owner: number, hash: number): number {
    const a = word(bytes, offset), b = word(bytes, offset + 4), c = word(bytes, offset + 8), d = word(bytes, offset + 12);
    this.tookUuids = true;
    if (this.previous.count > 0) {
      const earlier = this.previous.ownerOf(hash, a, b, c, d);
      if (earlier >= 0) return earlier;
    }
    return this.current.claim(hash, a, b, c, d, owner);
  }

  /** Marks the uuid durable (its commit's fdatasync succeeded). */
  settle(bytes: Uint8Array, offset = 0): void {
    const a = word(bytes, offset), b = word(bytes, offset + 4), c = word(bytes, offset + 8), d = word(bytes, offset + 12);
    const hash = hashOf(a, b, c, d);
    this.current.settle(hash, a, b, c, d);
    this.previous.settle(hash, a, b, c, d);
  }

  /** Removes a uuid that commit `owner` claimed and then failed to write (rare: disk errors); a generation may have begun since its claim. */
  delete(bytes: Uint8Array, offset: number, owner: number): void {
    const a = word(bytes, offset), b = word(bytes, offset + 4), c = word(bytes, offset + 8), d = word(bytes, offset + 12);
    const hash = hashOf(a, b, c, d);
    this.current.delete(hash, a, b, c, d, owner);
    this.previous.delete(hash, a, b, c, d, owner);
  }
}
