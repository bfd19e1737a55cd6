/**
 * The set of uuids stored in one workspace (SPEC §2 idempotent retries).
 * Open addressing over a Uint32Array, four words per uuid: 16 bytes a slot
 * instead of ~100 for a JS Set of strings, and no garbage per insert. An
 * all-zero slot marks empty; the nil uuid (all zeros) is tracked apart.
 */
export class UuidSet {
  private slots = new Uint32Array(4 * 1024);
  private capacity = 1024;
  private count = 0;
  private hasNil = false;

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

  private static words(bytes: Uint8Array, offset: number): [number, number, number, number] {
    const word = (at: number) => (bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16) | (bytes[at + 3] << 24)) >>> 0;
    return [word(offset), word(offset + 4), word(offset + 8), word(offset + 12)];
  }

  /** True when the uuid at bytes[offset…offset+16) is present. */
  has(bytes: Uint8Array, offset = 0): boolean {
    const [a, b, c, d] = UuidSet.words(bytes, offset);
    if ((a | b | c | d) === 0) return this.hasNil;
    const mask = this.capacity - 1;
    for (let slot = UuidSet.hash(a, b, c, d) & mask; ; slot = (slot + 1) & mask) {
      const base = slot * 4;
      const s0 = this.slots[base], s1 = this.slots[base + 1], s2 = this.slots[base + 2], s3 = this.slots[base + 3];
      if ((s0 | s1 | s2 | s3) === 0) return false;
      if (s0 === a && s1 === b && s2 === c && s3 === d) return true;
    }
  }

  /** Adds the uuid; returns false when it was already present. */
  add(bytes: Uint8Array, offset = 0): boolean {
    const [a, b, c, d] = UuidSet.words(bytes, offset);
    if ((a | b | c | d) === 0) {
      if (this.hasNil) return false;
      this.hasNil = true;
      return true;
    }
    if ((this.count + 1) * 10 > this.capacity * 7) this.grow();
    return this.insert(a, b, c, d);
  }

  /** Removes a uuid added by a write that then failed (rare: disk errors). */
  delete(bytes: Uint8Array, offset = 0): void {
    const [a, b, c, d] = UuidSet.words(bytes, offset);
    if ((a | b | c | d) === 0) {
      this.hasNil = false;
      return;
    }
    // Rebuild without it: deletion in linear probing must not break probe chains.
    const old = this.slots;
    this.slots = new Uint32Array(old.length);
    this.count = 0;
    for (let base = 0; base < old.length; base += 4) {
      const s0 = old[base], s1 = old[base + 1], s2 = old[base + 2], s3 = old[base + 3];
      if ((s0 | s1 | s2 | s3) === 0 || (s0 === a && s1 === b && s2 === c && s3 === d)) continue;
      this.insert(s0, s1, s2, s3);
    }
  }

  private insert(a: number, b: number, c: number, d: number): boolean {
    const mask = this.capacity - 1;
    for (let slot = UuidSet.hash(a, b, c, d) & mask; ; slot = (slot + 1) & mask) {
      const base = slot * 4;
      const s0 = this.slots[base], s1 = this.slots[base + 1], s2 = this.slots[base + 2], s3 = this.slots[base + 3];
      if ((s0 | s1 | s2 | s3) === 0) {
        this.slots[base] = a;
        this.slots[base + 1] = b;
        this.slots[base + 2] = c;
        this.slots[base + 3] = d;
        this.count++;
        return true;
      }
      if (s0 === a && s1 === b && s2 === c && s3 === d) return false;
    }
  }

  private grow(): void {
    const old = this.slots;
    this.capacity *= 2;
    this.slots = new Uint32Array(this.capacity * 4);
    this.count = 0;
    for (let base = 0; base < old.length; base += 4) {
      const s0 = old[base], s1 = old[base + 1], s2 = old[base + 2], s3 = old[base + 3];
      if ((s0 | s1 | s2 | s3) !== 0) this.insert(s0, s1, s2, s3);
    }
  }
}
