/**
 * Workspace dictionaries: event names, distinctIds (dense user ids, so roaring
 * bitmaps can hold users) and property keys, each text → u32 in first-seen
 * order. In memory: a Map and an array. On disk: an append-only file of
 * checksummed blocks, appended at each checkpoint before any segment that uses
 * the new ids is published, so a sealed segment never refers to an id the
 * dictionary lost. Ids assigned after the last checkpoint are re-assigned
 * identically by WAL replay, because replay sees the texts in the same order.
 *
 * Block: u32 magic, u32 entry count, u32 byte length of the entries, u32 crc32;
 * then per entry u32 byte length + UTF-8 bytes.
 */
import { closeSync, existsSync, fsyncSync, ftruncateSync, openSync, readFileSync, writeSync } from "node:fs";
import { crc32 } from "node:zlib";

const blockMagic = 0x31434944; // "DIC1"
const blockHeaderBytes = 16;

export class Dictionary {
  readonly texts: string[] = [];
  private readonly ids = new Map<string, number>();
  /** Entries [0, persistedCount) are in the file. */
  persistedCount = 0;

  get size(): number {
    return this.texts.length;
  }

  idOf(text: string): number | undefined {
    return this.ids.get(text);
  }

  intern(text: string): number {
    let id = this.ids.get(text);
    if (id === undefined) {
      id = this.texts.length;
      this.texts.push(text);
      this.ids.set(text, id);
    }
    return id;
  }

  /** Loads the valid blocks of a dictionary file, cutting a torn tail. */
  static load(path: string): Dictionary {
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
    if (offset < bytes.length) {
      const fd = openSync(path, "r+");
      try {
        ftruncateSync(fd, offset);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    }
    dictionary.persistedCount = dictionary.size;
    return dictionary;
  }

  /** Appends entries [persistedCount, upTo) as one block and fsyncs. */
  persist(path: string, upTo: number, fsync: boolean): void {
    if (upTo <= this.persistedCount) return;
    const encoded: Buffer[] = [];
    let length = 0;
    for (let id = this.persistedCount; id < upTo; id++) {
      const text = Buffer.from(this.texts[id], "utf8");
      const prefix = Buffer.alloc(4);
      prefix.writeUInt32LE(text.length);
      encoded.push(prefix, text);
      length += 4 + text.length;
    }
    const body = Buffer.concat(encoded, length);
    const header = Buffer.alloc(blockHeaderBytes);
    header.writeUInt32LE(blockMagic, 0);
    header.writeUInt32LE(upTo - this.persistedCount, 4);
    header.writeUInt32LE(length, 8);
    header.writeUInt32LE(crc32(body), 12);
    const fd = openSync(path, "a");
    try {
      writeSync(fd, header);
      writeSync(fd, body);
      if (fsync) fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    this.persistedCount = upTo;
  }
}
