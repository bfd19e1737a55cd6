/**
 * The set of uuids stored in one workspace (SPEC §2 idempotent retries).
 * Open addressing over a Uint32Array, five words per uuid — the uuid and the
 * commit that claimed it — 20 bytes a slot instead of ~100 for a JS Set of
 * strings, and no garbage per insert. An all-zero uuid marks an empty slot;
 * the nil uuid (all zeros) is tracked apart.
 *
 * The owner lets a retry that arrives while the original is still on its way
 * to disk wait for that commit before it is acknowledged (owner 0: durable).
 */
const slotWords = 5;

export class UuidSet {
  private slots = new Uint32Array(slotWords * 1024);
  private capacity = 1024;
  private count = 0;
  private hasNil = false;
  private nilOwner = 0;

  get size(): number {
    return this.count + (this.hasNil ? 1 : 0);
  }

  /** Bytes held, for the memory figures. */
  get byteLength(): number {
    return this.slots.byteLength;
  }

  private static hash(a: number, b: number, c: number, d: number): number {
    // murmur3 finalizer over a mix of all four words: v1/v7 uuids keep entropy in different words.
    let h = Math.imul(a ^ Math.imul(b, 0x9e3779b1) ^ Math.imul(c, 0x85ebca6b) ^ Math.imul(d, 0xc2b2ae35), 0x27d4eb2f);
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    return h >>> 0;
  }

  /** Little-endian u32 at bytes[at…at+4): read inline, no tuple per lookup. */
  private static word(bytes: Uint8Array, at: number): number {
    return (bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16) | (bytes[at + 3] << 24)) >>> 0;
  }

  /** True when the uuid at bytes[offset…offset+16) is present. */
  has(bytes: Uint8Array, offset = 0): boolean {
    const a = UuidSet.word(bytes, offset), b = UuidSet.word(bytes, offset + 4), c = UuidSet.word(bytes, offset + 8), d = UuidSet.word(bytes, offset + 12);
    if ((a | b | c | d) === 0) return this.hasNil;
    return this.find(a, b, c, d) >= 0;
  }

  /** Slot index of a uuid, or -1. */
  private find(a: number, b: number, c: number, d: number): number {
    const mask = this.capacity - 1;
    for (let slot = UuidSet.hash(a, b, c, d) & mask; ; slot = (slot + 1) & mask) {
      const base = slot * slotWords;
      const s0 = this.slots[base], s1 = this.slots[base + 1], s2 = this.slots[base + 2], s3 = this.slots[base + 3];
      if ((s0 | s1 | s2 | s3) === 0) return -1;
      if (s0 === a && s1 === b && s2 === c && s3 === d) return slot;
    }
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
    const a = UuidSet.word(bytes, offset), b = UuidSet.word(bytes, offset + 4), c = UuidSet.word(bytes, offset + 8), d = UuidSet.word(bytes, offset + 12);
    if ((a | b | c | d) === 0) {
      if (this.hasNil) return this.nilOwner;
      this.hasNil = true;
      this.nilOwner = owner;
      return -1;
    }
    // Grown first, so the probe below both finds the uuid and, failing that,
    // stops at the empty slot it goes into: one walk of the chain, not two.
    if ((this.count + 1) * 10 > this.capacity * 7) this.grow();
    const mask = this.capacity - 1;
    const slots = this.slots;
    for (let slot = UuidSet.hash(a, b, c, d) & mask; ; slot = (slot + 1) & mask) {
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

  /** Marks the uuid durable (its commit's fdatasync succeeded). */
  settle(bytes: Uint8Array, offset = 0): void {
    const a = UuidSet.word(bytes, offset), b = UuidSet.word(bytes, offset + 4), c = UuidSet.word(bytes, offset + 8), d = UuidSet.word(bytes, offset + 12);
    if ((a | b | c | d) === 0) {
      this.nilOwner = 0;
      return;
    }
    const slot = this.find(a, b, c, d);
    if (slot >= 0) this.slots[slot * slotWords + 4] = 0;
  }

  /** Removes a uuid added by a write that then failed (rare: disk errors). */
  delete(bytes: Uint8Array, offset = 0): void {
    const a = UuidSet.word(bytes, offset), b = UuidSet.word(bytes, offset + 4), c = UuidSet.word(bytes, offset + 8), d = UuidSet.word(bytes, offset + 12);
    if ((a | b | c | d) === 0) {
      this.hasNil = false;
      return;
    }
    let hole = this.find(a, b, c, d);
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
      const home = UuidSet.hash(s0, s1, s2, s3) & mask;
      const stays = hole <= probe ? hole < home && home <= probe : hole < home || home <= probe;
      if (stays) continue;
      slots.copyWithin(hole * slotWords, base, base + slotWords);
      hole = probe;
    }
    slots.fill(0, hole * slotWords, hole * slotWords + slotWords);
    this.count--;
  }

  /** Inserts a uuid known to be absent. */
  private insert(a: number, b: number, c: number, d: number, owner: number): void {
    const mask = this.capacity - 1;
    for (let slot = UuidSet.hash(a, b, c, d) & mask; ; slot = (slot + 1) & mask) {
      const base = slot * slotWords;
      if ((this.slots[base] | this.slots[base + 1] | this.slots[base + 2] | this.slots[base + 3]) === 0) {
        this.slots[base] = a;
        this.slots[base + 1] = b;
        this.slots[base + 2] = c;
        this.slots[base + 3] = d;
        this.slots[base + 4] = owner;
        this.count++;
        return;
      }
    }
  }

  private grow(): void {
    const old = this.slots;
    this.capacity *= 2;
    this.slots = new Uint32Array(this.capacity * slotWords);
    this.count = 0;
    for (let base = 0; base < old.length; base += slotWords) {
      const s0 = old[base], s1 = old[base + 1], s2 = old[base + 2], s3 = old[base + 3];
      if ((s0 | s1 | s2 | s3) !== 0) this.insert(s0, s1, s2, s3, old[base + 4]);
    }
  }
}
