/**
 * The property values of one active segment, every key at once: per key, the
 * rows that set it (ascending, since rows are appended in order) and their ids
 * into the key's own dictionary of texts, id 0 meaning unset.
 *
 * Keys live in slots of a few typed arrays, not in an object each. A batch may
 * bring a million keys never seen before, one entry each: an object, a Map, an
 * array and two buffer views per key held the main thread for over a second
 * plus as long again in garbage collection, and that while other requests
 * waited. Now a new key costs a probe in an integer hash table, a few typed
 * array writes and one string reference; a key grows a Map of its texts only
 * when a second distinct text arrives, and buffers of its own only past its
 * arena slot's 16 entries.
 *
 * Workers read a snapshot, as with SharedColumn: entries below the count they
 * were given are never rewritten, and growth copies into new buffers, leaving
 * the old ones intact for readers that hold them.
 */
import type { PropertyEntriesMessage } from "./property-transfer.js";
import { SharedColumn } from "./column-builder.js";
import { sharedBuffer } from "./shared-memory.js";

/** Entries a key keeps in its arena slot before it gets buffers of its own. */
const arenaEntriesPerSlot = 16;
/** u32 words of a slot: its rows, then its value ids. */
const arenaSlotWords = arenaEntriesPerSlot * 2;
/** Slots in an arena buffer: the first holds few, each next twice as many up to this. */
const arenaSlotsPerBufferMax = 1024;
/** Keys with at least this many entries travel to the sealing worker as shared handles, not copied. */
const sharedEntriesMin = 1 << 16;
/**
 * Slots moved into a growing table per call of slotFor: the move ends after a
 * quarter of the inserts that would make the new table half full.
 */
const slotsMovedPerCall = 8;
/** Longest pack() holds the main thread at a time, and the slots it packs between looks at the clock. */
const packSliceMs = 8;
const packClockSlots = 1024;
/** UTF-16 units of a joined part of texts (far below V8's longest string, 2²⁹ − 24, whatever a segment holds). */
const textPartLengthMax = 1 << 24;

/** One key's entries as they stand, for a reader in another thread (see ActiveSegmentDescriptor). */
export interface ActivePropertyEntries {
  keyId: number;
  entryCount: number;
  rows: SharedArrayBuffer;
  rowsOffset: number;
  valueIds: SharedArrayBuffer;
  valueIdsOffset: number;
  texts: SharedTexts;
}

/**
 * A key's texts in shared memory: the UTF-8 of text id i is
 * bytes[ends[i - 1], ends[i]) for 1 ≤ i < count (id 0, unset, is ""). Texts
 * are only appended, and growth copies into new buffers, so a reader given a
 * count reads texts that never change, and can keep what it decoded: a query
 * reads only the texts that arrived since its worker last looked, not all of
 * a busy day's prices copied and cloned per task.
 */
export interface SharedTexts {
  bytes: SharedArrayBuffer;
  ends: SharedArrayBuffer;
  count: number;
}

/** Appends texts [into.length, texts.count) to `into` (whose text 0 is ""). */
export function readSharedTexts(texts: SharedTexts, into: string[]): void {
  const ends = new Uint32Array(texts.ends, 0, texts.count);
  const bytes = Buffer.from(texts.bytes);
  for (let id = Math.max(1, into.length); id < texts.count; id++) into[id] = bytes.toString("utf8", ends[id - 1], ends[id]);
  if (into.length === 0) into[0] = "";
}

/** The texts of a descriptor whose reader needs none (a listing counts entries): no store is made for them. */
const noTexts: SharedTexts = { bytes: new SharedArrayBuffer(0), ends: new SharedArrayBuffer(4), count: 1 };

/** Texts (text 0 unused) in shared memory, as a query task receives them. */
export function sharedTexts(texts: readonly string[]): SharedTexts {
  return new SharedTextStore(texts).shared;
}

/** A key's texts as they are queried: kept in shared memory from the first query of the key on. */
class SharedTextStore {
  private readonly bytes = new SharedColumn(Uint8Array, 1, 256);
  private readonly ends = new SharedColumn(Uint32Array, 1, 64);
  /** `bytes` as a Buffer, to write into: one view per buffer, not one per text. */
  private writer = Buffer.from(this.bytes.buffer);
  private count = 1;

  constructor(texts: readonly string[]) {
    for (let id = 1; id < texts.length; id++) this.append(texts[id]);
  }

  append(text: string): void {
    const start = this.ends.values[this.count - 1];
    const byteLength = Buffer.byteLength(text, "utf8");
    this.bytes.ensureRows(start + byteLength);
    if (this.writer.buffer !== this.bytes.buffer) this.writer = Buffer.from(this.bytes.buffer);
    this.ends.ensureRows(this.count + 1);
    this.writer.write(text, start, "utf8");
    this.ends.values[this.count++] = start + byteLength;
  }

  get shared(): SharedTexts {
    return { bytes: this.bytes.buffer, ends: this.ends.buffer, count: this.count };
  }
}

/** A key's texts once it has two or more distinct ones: texts[id], and id by text. */
interface TextDictionary {
  texts: string[];
  ids: Map<string, number>;
}

interface OwnBuffers {
  rows: Uint32Array<SharedArrayBuffer>;
  valueIds: Uint32Array<SharedArrayBuffer>;
}

export class ActiveProperties {
  private slotCount = 0;
  private keyIdOf = new Uint32Array(16);
  private entryCountOf = new Uint32Array(16);
  private arenaBufferOf = new Uint32Array(16);
  private arenaWordOf = new Uint32Array(16);
  /** A slot's text with id 1; "" until its first entry. A dense array of references, not an object per key. */
  private readonly firstTextOf: string[] = [];
  private readonly dictionaryOf = new Map<number, TextDictionary>();
  /** By slot, the texts of the keys a query has read (SharedTextStore): most keys are never queried. */
  private readonly sharedTextsOf = new Map<number, SharedTextStore>();
  /**
   * A slot's own buffers once its entries outgrow the arena, else undefined.
   * Dense by slot like firstTextOf: append() reads it for every entry of a
   * large key, and a Map lookup there showed in profiles of batch ingest.
   */
  private readonly ownBuffersOf: Array<OwnBuffers | undefined> = [];
  private readonly arena: Uint32Array<SharedArrayBuffer>[] = [];
  private arenaSlotsFree = 0;
  /**
   * keyId → slot + 1 (0: empty), open addressing. The table grows by moving
   * its slots a few at a time, not at once: rehashing two million keys held
   * the main thread ~150 ms. While it grows, slots not moved yet are found in
   * the previous table.
   */
  private positions = new Int32Array(32);
  private positionBits = 5;
  private previousPositions: Int32Array | undefined;
  private previousPositionBits = 0;
  /** Slots [slotsMoved, slotsToMove) are still only in previousPositions. */
  private slotsMoved = 0;
  private slotsToMove = 0;

  get keyCount(): number {
    return this.slotCount;
  }

  /** The key's slot, or -1 when this segment has no value of it. */
  slotOf(keyId: number): number {
    const slot = this.lookUp(this.positions, this.positionBits, keyId);
    if (slot >= 0 || this.previousPositions === undefined) return slot;
    return this.lookUp(this.previousPositions, this.previousPositionBits, keyId);
  }

  /** The key's slot, made when it has none. */
  slotFor(keyId: number): number {
    if (this.previousPositions !== undefined) this.moveSlots(slotsMovedPerCall);
    const existing = this.slotOf(keyId);
    if (existing >= 0) return existing;
    const slot = this.slotCount++;
    if (slot === this.keyIdOf.length) this.growSlots();
    this.keyIdOf[slot] = keyId;
    this.takeArenaSlot(slot);
    this.firstTextOf.push("");
    this.ownBuffersOf.push(undefined);
    this.place(slot);
    if (this.slotCount * 2 > this.positions.length) this.growPositions();
    return slot;
  }

  /** Adds one entry (rows ascending). Returns 1 when the text is new to the key, else 0. */
  add(slot: number, row: number, text: string): number {
    const valueId = this.valueIdOf(slot, text);
    this.append(slot, row, valueId);
    return this.textWasNew;
  }

  /** 1 when the last valueIdOf gave its text a new id, else 0. */
  textWasNew = 0;

  /**
   * The id of `text` among the key's values, given one when it has none (see
   * textWasNew). The caller appends an entry with it before asking again, so
   * a key without entries has no text yet.
   */
  valueIdOf(slot: number, text: string): number {
    this.textWasNew = 0;
    if (this.entryCountOf[slot] === 0) {
      this.firstTextOf[slot] = text;
      this.textWasNew = 1;
      this.sharedTextsOf.get(slot)?.append(text);
      return 1;
    }
    if (text === this.firstTextOf[slot]) return 1;
    let dictionary = this.dictionaryOf.get(slot);
    if (dictionary === undefined) {
      const first = this.firstTextOf[slot];
      dictionary = { texts: ["", first], ids: new Map([[first, 1]]) };
      this.dictionaryOf.set(slot, dictionary);
    }
    const known = dictionary.ids.get(text);
    if (known !== undefined) return known;
    const valueId = dictionary.texts.length;
    dictionary.texts.push(text);
    dictionary.ids.set(text, valueId);
    this.textWasNew = 1;
    this.sharedTextsOf.get(slot)?.append(text);
    return valueId;
  }

  /** Appends an entry (rows ascending) whose value id valueIdOf gave. */
  append(slot: number, row: number, valueId: number): void {
    const entry = this.entryCountOf[slot];
    if (entry < arenaEntriesPerSlot) {
      const words = this.arena[this.arenaBufferOf[slot]];
      const word = this.arenaWordOf[slot];
      words[word + entry] = row;
      words[word + arenaEntriesPerSlot + entry] = valueId;
    } else {
      let own = this.ownBuffersOf[slot];
      if (own === undefined || entry === own.rows.length) own = this.growOwnBuffers(slot, own);
      own.rows[entry] = row;
      own.valueIds[entry] = valueId;
    }
    this.entryCountOf[slot] = entry + 1;
  }

  /**
   * A slot's entries and texts as they stand (the key may gain more). Without
   * `withTexts` the texts are left out (noTexts): a listing of every key needs
   * none, and a store of shared texts per key would outlive it.
   */
  entries(slot: number, withTexts = true): ActivePropertyEntries {
    const entryCount = this.entryCountOf[slot];
    let texts = noTexts;
    if (withTexts) {
      let store = this.sharedTextsOf.get(slot);
      if (store === undefined) this.sharedTextsOf.set(slot, (store = new SharedTextStore(this.texts(slot))));
      texts = store.shared;
    }
    const own = this.ownBuffersOf[slot];
    if (own !== undefined) {
      return { keyId: this.keyIdOf[slot], entryCount, rows: own.rows.buffer, rowsOffset: 0, valueIds: own.valueIds.buffer, valueIdsOffset: 0, texts };
    }
    const words = this.arena[this.arenaBufferOf[slot]];
    const byteOffset = this.arenaWordOf[slot] * Uint32Array.BYTES_PER_ELEMENT;
    const valueIdsOffset = byteOffset + arenaEntriesPerSlot * Uint32Array.BYTES_PER_ELEMENT;
    return { keyId: this.keyIdOf[slot], entryCount, rows: words.buffer, rowsOffset: byteOffset, valueIds: words.buffer, valueIdsOffset, texts };
  }

  /**
   * Every key's entries for the worker that seals them (the segment is frozen
   * by then). Small keys' entries are copied into one transferred buffer,
   * because posting a SharedArrayBuffer handle costs tens of microseconds; only
   * keys with many entries, whose handles are few, travel as shared buffers.
   * Texts travel joined into a few long strings with their ends beside them:
   * an array per key cost a structured clone of a million arrays, and even one
   * flat array of three million texts held postMessage for a quarter of a
   * second, where a long string clones as one copy. Built in slices of at most
   * `packSliceMs` with the event loop free in between (a million keys take
   * ~150 ms); the segment is frozen, so nothing changes meanwhile.
   */
  async pack(): Promise<PropertyEntriesMessage> {
    const keyCount = this.slotCount;
    let packedEntries = 0;
    let textTotal = 0;
    for (let slot = 0; slot < keyCount; slot++) {
      if (this.entryCountOf[slot] < sharedEntriesMin) packedEntries += this.entryCountOf[slot];
      textTotal += (this.dictionaryOf.get(slot)?.texts.length ?? 2) - 1;
    }
    const packed = new Uint32Array(packedEntries * 2);
    const message: PropertyEntriesMessage = {
      keyIds: this.keyIdOf.slice(0, keyCount),
      entryCounts: this.entryCountOf.slice(0, keyCount),
      textCounts: new Uint32Array(keyCount),
      textParts: [],
      partTextCounts: [],
      textEnds: new Uint32Array(textTotal),
      packed: packed.buffer,
      shared: [],
    };
    let partTexts: string[] = [];
    let partLength = 0;
    let textIndex = 0;
    const endPart = () => {
      if (partTexts.length === 0) return;
      message.textParts.push(partTexts.join(""));
      message.partTextCounts.push(partTexts.length);
      partTexts = [];
      partLength = 0;
    };
    const addText = (text: string) => {
      partTexts.push(text);
      partLength += text.length;
      message.textEnds[textIndex++] = partLength;
      if (partLength >= textPartLengthMax) endPart();
    };
    let cursor = 0;
    let sliceEndMs = performance.now() + packSliceMs;
    for (let slot = 0; slot < keyCount; slot++) {
      if ((slot & (packClockSlots - 1)) === 0 && performance.now() > sliceEndMs) {
        endPart();
        await new Promise<void>((resolve) => setImmediate(resolve));
        sliceEndMs = performance.now() + packSliceMs;
      }
      const entryCount = this.entryCountOf[slot];
      const dictionary = this.dictionaryOf.get(slot);
      if (dictionary === undefined) {
        message.textCounts[slot] = 1;
        addText(this.firstTextOf[slot]);
      } else {
        message.textCounts[slot] = dictionary.texts.length - 1;
        for (let id = 1; id < dictionary.texts.length; id++) addText(dictionary.texts[id]);
      }
      const own = this.ownBuffersOf[slot];
      if (own !== undefined && entryCount >= sharedEntriesMin) {
        message.shared.push({ slot, rows: own.rows.buffer, valueIds: own.valueIds.buffer });
        continue;
      }
      if (own !== undefined) {
        packed.set(own.rows.subarray(0, entryCount), cursor);
        packed.set(own.valueIds.subarray(0, entryCount), cursor + entryCount);
      } else {
        const words = this.arena[this.arenaBufferOf[slot]];
        const word = this.arenaWordOf[slot];
        packed.set(words.subarray(word, word + entryCount), cursor);
        packed.set(words.subarray(word + arenaEntriesPerSlot, word + arenaEntriesPerSlot + entryCount), cursor + entryCount);
      }
      cursor += entryCount * 2;
    }
    endPart();
    return message;
  }

  /** The key's texts by id (its dictionary's own array: read, never changed, by the caller). */
  private texts(slot: number): readonly string[] {
    const dictionary = this.dictionaryOf.get(slot);
    if (dictionary !== undefined) return dictionary.texts;
    return this.entryCountOf[slot] === 0 ? [""] : ["", this.firstTextOf[slot]];
  }

  private lookUp(positions: Int32Array, bits: number, keyId: number): number {
    const mask = positions.length - 1;
    for (let position = home(keyId, bits); ; position = (position + 1) & mask) {
      const stored = positions[position];
      if (stored === 0) return -1;
      if (this.keyIdOf[stored - 1] === keyId) return stored - 1;
    }
  }

  /** Puts a slot in the current table (its key is in neither table's moved part yet). */
  private place(slot: number): void {
    const positions = this.positions;
    const mask = positions.length - 1;
    let position = home(this.keyIdOf[slot], this.positionBits);
    while (positions[position] !== 0) position = (position + 1) & mask;
    positions[position] = slot + 1;
  }

  private growSlots(): void {
    const capacity = this.keyIdOf.length * 2;
    this.keyIdOf = grown(this.keyIdOf, capacity);
    this.entryCountOf = grown(this.entryCountOf, capacity);
    this.arenaBufferOf = grown(this.arenaBufferOf, capacity);
    this.arenaWordOf = grown(this.arenaWordOf, capacity);
  }

  /** A table twice as large; the slots so far move into it over the next calls of slotFor. */
  private growPositions(): void {
    if (this.previousPositions !== undefined) this.moveSlots(this.slotsToMove);
    this.previousPositions = this.positions;
    this.previousPositionBits = this.positionBits;
    this.positionBits++;
    this.positions = new Int32Array(1 << this.positionBits);
    this.slotsMoved = 0;
    this.slotsToMove = this.slotCount;
  }

  private moveSlots(count: number): void {
    const end = Math.min(this.slotsMoved + count, this.slotsToMove);
    for (let slot = this.slotsMoved; slot < end; slot++) this.place(slot);
    this.slotsMoved = end;
    if (end === this.slotsToMove) this.previousPositions = undefined;
  }

  private takeArenaSlot(slot: number): void {
    if (this.arenaSlotsFree === 0) {
      const last = this.arena.at(-1);
      const slots = last === undefined ? 8 : Math.min((last.length / arenaSlotWords) * 2, arenaSlotsPerBufferMax);
      this.arena.push(new Uint32Array(sharedBuffer(slots * arenaSlotWords * Uint32Array.BYTES_PER_ELEMENT)));
      this.arenaSlotsFree = slots;
    }
    const words = this.arena[this.arena.length - 1];
    this.arenaBufferOf[slot] = this.arena.length - 1;
    this.arenaWordOf[slot] = words.length - this.arenaSlotsFree * arenaSlotWords;
    this.arenaSlotsFree--;
  }

  /** New buffers twice as large (the arena slot's, the first time); the old ones stay intact for readers. */
  private growOwnBuffers(slot: number, own: OwnBuffers | undefined): OwnBuffers {
    const entryCount = this.entryCountOf[slot];
    const capacity = entryCount * 2;
    const rows = new Uint32Array(sharedBuffer(capacity * Uint32Array.BYTES_PER_ELEMENT));
    const valueIds = new Uint32Array(sharedBuffer(capacity * Uint32Array.BYTES_PER_ELEMENT));
    if (own !== undefined) {
      rows.set(own.rows);
      valueIds.set(own.valueIds);
    } else {
      const words = this.arena[this.arenaBufferOf[slot]];
      const word = this.arenaWordOf[slot];
      rows.set(words.subarray(word, word + entryCount));
      valueIds.set(words.subarray(word + arenaEntriesPerSlot, word + arenaEntriesPerSlot + entryCount));
    }
    const grownBuffers = { rows, valueIds };
    this.ownBuffersOf[slot] = grownBuffers;
    return grownBuffers;
  }
}

function home(keyId: number, bits: number): number {
  return Math.imul(keyId, 0x9e3779b1) >>> (32 - bits);
}

function grown(array: Uint32Array<ArrayBuffer>, capacity: number): Uint32Array<ArrayBuffer> {
  const larger = new Uint32Array(capacity);
  larger.set(array);
  return larger;
}

/** ValueIdCache.get's answer for a string not looked up in this run: value id 0 means unset, so no text has it. */
export const valueIdUnknown = 0;

/**
 * Value ids of a chunk's strings under one key of one segment, by chunk string
 * index, for the apply loop (apply.ts). Stamped, so forgetting every id when
 * the key or segment changes costs one increment rather than a fill.
 */
export class ValueIdCache {
  private ids = new Uint32Array(0);
  private stamps = new Uint32Array(0);
  private stamp = 1;

  /** Makes room for a chunk of `stringCount` strings and forgets every id. */
  reserve(stringCount: number): this {
    if (stringCount > this.ids.length) {
      const length = Math.max(stringCount, this.ids.length * 2);
      this.ids = new Uint32Array(length);
      this.stamps = new Uint32Array(length);
    }
    this.forget();
    return this;
  }

  forget(): void {
    if (++this.stamp === 0xffff_ffff) {
      this.stamps.fill(0);
      this.stamp = 1;
    }
  }

  get(stringIndex: number): number {
    return this.stamps[stringIndex] === this.stamp ? this.ids[stringIndex] : valueIdUnknown;
  }

  set(stringIndex: number, valueId: number): void {
    this.stamps[stringIndex] = this.stamp;
    this.ids[stringIndex] = valueId;
  }
}
