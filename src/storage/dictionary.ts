/**
 * Workspace dictionaries: event names, distinctIds (dense user ids, so roaring
 * bitmaps can hold users) and property keys, each text → u32 in first-seen
 * order. In memory: the texts' UTF-8 bytes and a hash table over those bytes
 * (ingest looks up a chunk's strings by their bytes, never decoding them), and
 * the texts as strings where answers name them (not distinctIds). On disk: an
 * append-only file of
 * checksummed blocks, appended at each checkpoint before any segment that uses
 * the new ids is published, so a sealed segment never refers to an id the
 * dictionary lost. Ids assigned after the last checkpoint are re-assigned
 * identically by WAL replay, because replay sees the texts in the same order.
 *
 * Block: u32 magic, u32 entry count, u32 byte length of the entries, u32 crc32;
 * then per entry u32 byte length + UTF-8 bytes.
 *
 * A block is written at the end of the valid prefix, which the dictionary
 * tracks, not appended at the end of the file: a block that failed half-way
 * (disk full) is overwritten by the next one instead of hiding it from `load`.
 */
import { closeSync, constants, existsSync, fsyncSync, ftruncateSync, openSync, readFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { dirname } from "node:path";
import { crc32 } from "node:zlib";
import { bytesEqual, hashBytes, utf8Scratch, writeUtf8Scratch } from "./chunk-codec.js";
import { StoreCorruptionError } from "./corruption.js";
import { injectFault, recordCreate, recordSync } from "./fault-injection.js";
import { fsyncDirectoryInPool, readRegularFile } from "./files.js";

const blockMagic = 0x31434944; // "DIC1"
const blockHeaderBytes = 16;
/** Entries per block written by one persist step: encoding 64 Ki distinctIds held the main thread 9–13 ms, so a quarter of that. */
export const persistBlockEntriesMax = 16_384;

const textDecoder = new TextDecoder();

export class Dictionary {
  /** Every text as a string, by id; empty unless the dictionary keeps them (see the constructor). */
  readonly texts: string[] = [];
  private count = 0;
  /** The UTF-8 of every text, one after another: text `id` is bytes[ends[id], ends[id + 1]). */
  private bytes = new Uint8Array(1024);
  private ends = new Uint32Array(65);
  private hashes = new Uint32Array(64);
  /**
   * Open addressing over the texts' bytes, load at most 1/2: id + 1, 0 for an
   * empty slot. A batch brings ~1 000 distinctIds: looked up in a Map of
   * strings, each had to be decoded, hashed by V8 and compared, ~17 % of the
   * main thread under batch load; here they are hashed and compared as the
   * chunk's bytes. The hash is keyed per process (chunk-codec's hashBytes), so
   * no set of texts can be built to collide. Doubling rehashes from `hashes`:
   * ~30 ms for two million keys, where one Map of them held the main thread
   * ~250 ms.
   */
  private slots = new Int32Array(128);
  /** Entries [0, persistedCount) are in the file. */
  persistedCount = 0;
  /** Byte length of the file's valid blocks: where the next block goes. */
  private persistedBytes = 0;
  /** Whether this process fsynced the directory since the file was created or first seen. */
  private nameDurable = false;

  /**
   * `keepTexts`: hold every text as a string too (event names and property
   * keys, which answers name). The distinctIds are kept as UTF-8 only: a
   * string each was millions of heap objects that every garbage collection of
   * the main thread walked and every young one copied, and only an export
   * reads them, through textOf.
   */
  constructor(private readonly keepTexts = true) {}

  get size(): number {
    return this.count;
  }

  /** Text `id`, decoded from its UTF-8 when the dictionary keeps no strings. */
  textOf(id: number): string {
    return this.keepTexts ? this.texts[id] : textDecoder.decode(this.bytes.subarray(this.ends[id], this.ends[id + 1]));
  }

  idOf(text: string): number | undefined {
    const length = writeUtf8Scratch(text);
    const bytes = utf8Scratch();
    const id = this.find(bytes, 0, length, hashBytes(bytes, 0, length));
    return id < 0 ? undefined : id;
  }

  /** Whether the UTF-8 text `source[start, end)` is in the dictionary. */
  containsUtf8(source: Uint8Array, start: number, end: number): boolean {
    return this.find(source, start, end, hashBytes(source, start, end)) >= 0;
  }

  intern(text: string): number {
    const length = writeUtf8Scratch(text);
    return this.internUtf8(utf8Scratch(), 0, length, text);
  }

  /** The id of the UTF-8 text `source[start, end)`, added when new (`text`: its string, when the caller has it). */
  internUtf8(source: Uint8Array, start: number, end: number, text?: string): number {
    const hash = hashBytes(source, start, end);
    const found = this.find(source, start, end, hash);
    if (found >= 0) return found;
    const id = this.count++;
    if (this.keepTexts) this.texts.push(text ?? textDecoder.decode(source.subarray(start, end)));
    const length = end - start;
    if (id + 1 === this.ends.length) {
      this.ends = grownTo(this.ends, this.ends.length * 2);
      this.hashes = grownTo(this.hashes, this.ends.length);
    }
    const offset = this.ends[id];
    if (offset + length > this.bytes.length) this.bytes = grownTo(this.bytes, Math.max(this.bytes.length * 2, offset + length));
    // A loop copies a short text faster than a subarray view and set() would.
    const bytes = this.bytes;
    if (length <= 64) for (let byte = 0; byte < length; byte++) bytes[offset + byte] = source[start + byte];
    else bytes.set(source.subarray(start, end), offset);
    this.ends[id + 1] = offset + length;
    this.hashes[id] = hash;
    if ((id + 1) * 2 > this.slots.length) this.rehash(this.slots.length * 2);
    else this.slots[this.freeSlot(hash)] = id + 1;
    return id;
  }

  private find(source: Uint8Array, start: number, end: number, hash: number): number {
    const { slots, ends, hashes, bytes } = this;
    const mask = slots.length - 1;
    const length = end - start;
    for (let slot = hash & mask; slots[slot] !== 0; slot = (slot + 1) & mask) {
      const id = slots[slot] - 1;
      const known = ends[id];
      if (hashes[id] === hash && ends[id + 1] - known === length && bytesEqual(bytes, known, source, start, length)) return id;
    }
    return -1;
  }

  private freeSlot(hash: number): number {
    const mask = this.slots.length - 1;
    let slot = hash & mask;
    while (this.slots[slot] !== 0) slot = (slot + 1) & mask;
    return slot;
  }

  /** A table of `capacity` slots holding every text: after the text just added, or when doubling. */
  private rehash(capacity: number): void {
    this.slots = new Int32Array(capacity);
    for (let id = 0; id < this.count; id++) this.slots[this.freeSlot(this.hashes[id])] = id + 1;
  }

  /**
   * Loads the valid blocks of a dictionary file, cutting a torn tail, and
   * fsyncs what it keeps: a killed process may have left its last block in the
   * page cache only, and the next checkpoint relies on every loaded id.
   *
   * `durableBytes` is what the last published checkpoint recorded as fsynced.
   * A bad block below it, or any bad block followed by a valid one (blocks are
   * written one at a time, each fsynced before the next), is corruption, not a
   * torn tail: cutting it would hand its ids to other texts, and every sealed
   * segment using them would answer for the wrong names. Then nothing is cut
   * and StoreCorruptionError is thrown.
   */
  static load(path: string, fsync = true, durableBytes = 0, keepTexts = true): Dictionary {
    const dictionary = new Dictionary(keepTexts);
    if (!existsSync(path)) {
      if (durableBytes > 0) throw new StoreCorruptionError(path, 0, `missing, though a checkpoint made ${durableBytes} bytes of it durable`);
      return dictionary;
    }
    const bytes = readRegularFile(path);
    const { blocks, damage } = scanDictionaryBlocks(bytes);
    const durable = durableDamage(bytes, durableBytes, damage);
    if (durable !== undefined) throw new StoreCorruptionError(path, durable.offset, durable.reason);
    for (const block of blocks) {
      let cursor = block.start + blockHeaderBytes;
      for (let index = 0; index < block.count; index++) {
        const textBytes = bytes.readUInt32LE(cursor);
        dictionary.internUtf8(bytes, cursor + 4, cursor + 4 + textBytes);
        cursor += 4 + textBytes;
      }
    }
    const offset = damage?.offset ?? bytes.length;
    if (offset < bytes.length || fsync) {
      const fd = openSync(path, "r+");
      try {
        ftruncateSync(fd, offset);
        fsyncSync(fd);
        recordSync(path, offset);
      } finally {
        closeSync(fd);
      }
    }
    dictionary.persistedCount = dictionary.size;
    dictionary.persistedBytes = offset;
    return dictionary;
  }

  /** Byte length of the file's valid blocks, all fsynced (when fsync is on): what a checkpoint records. */
  get durableBytes(): number {
    return this.persistedBytes;
  }

  /**
   * Appends entries [persistedCount, upTo) and fsyncs them, in blocks of at
   * most `persistBlockEntriesMax` entries, each fsynced before the next (so
   * no valid block ever follows a torn one). A checkpoint persists every
   * distinctId first seen since the last one: encoded and written in one go on
   * the main thread, that held every request up to 85 ms per checkpoint of a
   * 4 M-event load. Now each block's writes run in libuv's thread pool and the
   * main thread encodes one block at a time between them. The caller awaits
   * it before publishing anything that refers to the new ids; no two run at
   * once on one file (checkpoints are serial).
   */
  async persist(path: string, upTo: number, fsync: boolean): Promise<void> {
    while (this.persistedCount < upTo) await this.persistBlock(path, Math.min(upTo, this.persistedCount + persistBlockEntriesMax), fsync);
  }

  /** Entries [persistedCount, upTo) as one block. */
  private async persistBlock(path: string, upTo: number, fsync: boolean): Promise<void> {
    // Copied from the texts' UTF-8 kept for the hash table (what load reads back and hashes),
    // not encoded again from the strings.
    const { bytes, ends } = this;
    const from = this.persistedCount;
    const length = 4 * (upTo - from) + ends[upTo] - ends[from];
    const block = Buffer.allocUnsafe(blockHeaderBytes + length);
    let cursor = blockHeaderBytes;
    for (let id = from; id < upTo; id++) {
      const start = ends[id];
      const textBytes = ends[id + 1] - start;
      block.writeUInt32LE(textBytes, cursor);
      cursor += 4;
      if (textBytes <= 64) for (let byte = 0; byte < textBytes; byte++) block[cursor + byte] = bytes[start + byte];
      else block.set(bytes.subarray(start, start + textBytes), cursor);
      cursor += textBytes;
    }
    block.writeUInt32LE(blockMagic, 0);
    block.writeUInt32LE(upTo - from, 4);
    block.writeUInt32LE(length, 8);
    block.writeUInt32LE(crc32(block.subarray(blockHeaderBytes)), 12);
    injectFault("dictionary.write", path);
    const created = !existsSync(path);
    const start = this.persistedBytes;
    const end = start + block.length;
    // Not O_APPEND: the block goes at `persistedBytes`, over whatever a failed attempt left there.
    const file = await open(path, constants.O_RDWR | constants.O_CREAT, 0o644);
    try {
      if (created) recordCreate(path);
      await file.truncate(start);
      let written = 0;
      while (written < block.length) written += (await file.write(block, written, block.length - written, start + written)).bytesWritten;
      if (fsync) {
        await file.sync();
        injectFault("dictionary.fsync", path);
        recordSync(path, end);
      }
    } finally {
      await file.close();
    }
    // A segment published later refers to these ids: the file's name must survive a power loss as well.
    if (fsync && (created || !this.nameDurable)) {
      await fsyncDirectoryInPool(dirname(path));
      this.nameDurable = true;
    }
    this.persistedCount = upTo;
    this.persistedBytes = end;
  }
}

/** One valid block of a dictionary file. */
export interface DictionaryBlock {
  start: number;
  end: number;
  count: number;
}

/** The block at `offset` when whole, checksummed and well formed; undefined otherwise. */
function blockAt(bytes: Buffer, offset: number): DictionaryBlock | undefined {
  if (offset + blockHeaderBytes > bytes.length || bytes.readUInt32LE(offset) !== blockMagic) return undefined;
  const count = bytes.readUInt32LE(offset + 4);
  const end = offset + blockHeaderBytes + bytes.readUInt32LE(offset + 8);
  if (end > bytes.length) return undefined;
  if (crc32(bytes.subarray(offset + blockHeaderBytes, end)) !== bytes.readUInt32LE(offset + 12)) return undefined;
  // The entries must fill the block exactly: a count that disagrees would read texts out of thin air.
  let cursor = offset + blockHeaderBytes;
  for (let index = 0; index < count; index++) {
    if (cursor + 4 > end) return undefined;
    cursor += 4 + bytes.readUInt32LE(cursor);
  }
  return cursor === end ? { start: offset, end, count } : undefined;
}

const blockMagicBytes = Buffer.from([0x44, 0x49, 0x43, 0x31]);

/**
 * Whether the first block of the dictionary file at `path` is a whole DIC1
 * block once its magic is put back (its checksum holds, its entries fill it):
 * a magic that reads as a newer format there is a damaged byte, not a newer
 * Eventide's block. A newer block format must not pass this check.
 */
export function firstBlockIsCurrentFormat(path: string): boolean {
  const bytes = Buffer.from(readFileSync(path));
  if (bytes.length < blockHeaderBytes) return false;
  bytes.writeUInt32LE(blockMagic, 0);
  return blockAt(bytes, 0) !== undefined;
}

/**
 * The valid blocks before the first damaged byte, and the damage: where it
 * starts and where the next valid block after it starts, if any (blocks are
 * not aligned: every offset holding the magic is tried).
 */
/**
 * Damage in a dictionary file's bytes that a torn write cannot explain (Dictionary.load
 * says why), given the bytes the last checkpoint made durable: where and why, or
 * undefined when what is wrong, if anything, is a torn tail. Start-up, repair and
 * a backup's check judge a dictionary by this one rule.
 */
export function durableDamage(bytes: Buffer, durableBytes: number, damage = scanDictionaryBlocks(bytes).damage): { offset: number; reason: string } | undefined {
  if (damage !== undefined && (damage.nextBlock !== undefined || damage.offset < durableBytes)) {
    const reason = damage.nextBlock !== undefined ? `a damaged block followed by a valid one at byte ${damage.nextBlock}` : `a damaged block below the ${durableBytes} bytes a checkpoint made durable`;
    return { offset: damage.offset, reason };
  }
  if (bytes.length < durableBytes) return { offset: bytes.length, reason: `${bytes.length} bytes, though a checkpoint made ${durableBytes} durable` };
  return undefined;
}

export function scanDictionaryBlocks(bytes: Buffer): { blocks: DictionaryBlock[]; damage: { offset: number; nextBlock: number | undefined } | undefined } {
  const blocks: DictionaryBlock[] = [];
  let offset = 0;
  while (offset < bytes.length) {
    const block = blockAt(bytes, offset);
    if (block === undefined) break;
    blocks.push(block);
    offset = block.end;
  }
  if (offset === bytes.length) return { blocks, damage: undefined };
  let nextBlock: number | undefined;
  for (let at = bytes.indexOf(blockMagicBytes, offset + 1); at >= 0; at = bytes.indexOf(blockMagicBytes, at + 1)) {
    if (blockAt(bytes, at) !== undefined) {
      nextBlock = at;
      break;
    }
  }
  return { blocks, damage: { offset, nextBlock } };
}

function grownTo<T extends Uint8Array | Uint32Array>(array: T, length: number): T {
  const larger = new (array.constructor as new (length: number) => T)(length);
  larger.set(array);
  return larger;
}
