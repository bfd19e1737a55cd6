/**
 * Workspace dictionaries: event names, distinctIds (dense user ids, so roaring
 * bitmaps can hold users) and property keys, each text → u32 in first-seen
 * order. In memory: an array and Maps (idShards). On disk: an append-only file of
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
import { closeSync, constants, existsSync, fsyncSync, ftruncateSync, openSync, readFileSync, writeSync } from "node:fs";
import { dirname } from "node:path";
import { crc32 } from "node:zlib";
import { injectFault, recordCreate, recordSync } from "./fault-injection.js";
import { fsyncDirectory } from "./files.js";

const blockMagic = 0x31434944; // "DIC1"
const blockHeaderBytes = 16;

/**
 * Texts → ids live in this many Maps, picked by a cheap hash: a Map doubles by
 * rehashing every entry at once, and one Map of two million keys held the main
 * thread ~250 ms doing it (a batch can bring a million new property keys).
 */
const idShards = 16;

function shardOf(text: string): number {
  return (text.length * 31 + text.charCodeAt(text.length - 1)) & (idShards - 1);
}

export class Dictionary {
  readonly texts: string[] = [];
  private readonly ids = Array.from({ length: idShards }, () => new Map<string, number>());
  /** Entries [0, persistedCount) are in the file. */
  persistedCount = 0;
  /** Byte length of the file's valid blocks: where the next block goes. */
  private persistedBytes = 0;
  /** Whether this process fsynced the directory since the file was created or first seen. */
  private nameDurable = false;

  get size(): number {
    return this.texts.length;
  }

  idOf(text: string): number | undefined {
    return this.ids[shardOf(text)].get(text);
  }

  intern(text: string): number {
    const ids = this.ids[shardOf(text)];
    let id = ids.get(text);
    if (id === undefined) {
      id = this.texts.length;
      this.texts.push(text);
      ids.set(text, id);
    }
    return id;
  }

  /**
   * Loads the valid blocks of a dictionary file, cutting a torn tail, and
   * fsyncs what it keeps: a killed process may have left its last block in the
   * page cache only, and the next checkpoint relies on every loaded id.
   */
  static load(path: string, fsync = true): Dictionary {
    const dictionary = new Dictionary();
    if (!existsSync(path)) return dictionary;
    const bytes = readFileSync(path);
    let offset = 0;
    while (offset + blockHeaderBytes <= bytes.length) {
      if (bytes.readUInt32LE(offset) !== blockMagic) break;
      const count = bytes.readUInt32LE(offset + 4);
      const length = bytes.readUInt32LE(offset + 8);
      const end = offset + blockHeaderBytes + length;
      if (end > bytes.length) break;
      if (crc32(bytes.subarray(offset + blockHeaderBytes, end)) !== bytes.readUInt32LE(offset + 12)) break;
      let cursor = offset + blockHeaderBytes;
      for (let index = 0; index < count; index++) {
        const textBytes = bytes.readUInt32LE(cursor);
        dictionary.intern(bytes.toString("utf8", cursor + 4, cursor + 4 + textBytes));
        cursor += 4 + textBytes;
      }
      offset = end;
    }
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

  /** Appends entries [persistedCount, upTo) as one block and fsyncs. */
  persist(path: string, upTo: number, fsync: boolean): void {
    if (upTo <= this.persistedCount) return;
    // Sized first, then encoded in place: a checkpoint may persist a million new keys, and two
    // Buffers per text cost a quarter of a second of the main thread plus their collection.
    let length = 0;
    for (let id = this.persistedCount; id < upTo; id++) length += 4 + Buffer.byteLength(this.texts[id], "utf8");
    const block = Buffer.allocUnsafe(blockHeaderBytes + length);
    let cursor = blockHeaderBytes;
    for (let id = this.persistedCount; id < upTo; id++) {
      const textBytes = block.write(this.texts[id], cursor + 4, "utf8");
      block.writeUInt32LE(textBytes, cursor);
      cursor += 4 + textBytes;
    }
    block.writeUInt32LE(blockMagic, 0);
    block.writeUInt32LE(upTo - this.persistedCount, 4);
    block.writeUInt32LE(length, 8);
    block.writeUInt32LE(crc32(block.subarray(blockHeaderBytes)), 12);
    injectFault("dictionary.write", path);
    const created = !existsSync(path);
    // Not O_APPEND: the block goes at `persistedBytes`, over whatever a failed attempt left there.
    const fd = openSync(path, constants.O_RDWR | constants.O_CREAT, 0o644);
    const end = this.persistedBytes + block.length;
    try {
      if (created) recordCreate(path);
      ftruncateSync(fd, this.persistedBytes);
      let written = 0;
      while (written < block.length) written += writeSync(fd, block, written, block.length - written, this.persistedBytes + written);
      if (fsync) {
        fsyncSync(fd);
        injectFault("dictionary.fsync", path);
        recordSync(path, end);
      }
    } finally {
      closeSync(fd);
    }
    // A segment published later refers to these ids: the file's name must survive a power loss as well.
    if (fsync && (created || !this.nameDurable)) {
      fsyncDirectory(dirname(path));
      this.nameDurable = true;
    }
    this.persistedCount = upTo;
    this.persistedBytes = end;
  }
}
