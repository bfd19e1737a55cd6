/**
 * Dictionary files are append-only blocks; a crash can leave a torn block at
 * the end. Loading must keep every complete block, cut the rest off the file
 * (so the next append is readable), and leave ids exactly as they were.
 */
import { appendFileSync, mkdtempSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { StoreCorruptionError } from "../../src/storage/corruption.js";
import { Dictionary, persistBlockEntriesMax, scanDictionaryBlocks } from "../../src/storage/dictionary.js";

const blockHeaderBytes = 16;

let directory: string;
let path: string;

beforeEach(() => {
  directory = mkdtempSync(join(tmpdir(), "eventide-dictionary-"));
  path = join(directory, "_events.dict");
});

afterEach(() => {
  rmSync(directory, { recursive: true, force: true });
});

const firstTexts = ["signup", "achat 🛒", "名前", "a\u0000b", "", "x".repeat(200)];
const secondTexts = ["page view", "👩‍👩‍👧‍👦", "__proto__"];

/** Writes two blocks; returns the byte length after the first. */
async function writeTwoBlocks(): Promise<number> {
  const dictionary = new Dictionary();
  for (const text of firstTexts) dictionary.intern(text);
  await dictionary.persist(path, dictionary.size, false);
  const firstBlockEnd = statSync(path).size;
  for (const text of secondTexts) dictionary.intern(text);
  await dictionary.persist(path, dictionary.size, false);
  return firstBlockEnd;
}

describe("a dictionary file", () => {
  it("loads empty when the file does not exist", () => {
    const dictionary = Dictionary.load(path);
    expect(dictionary.size).toBe(0);
    expect(dictionary.persistedCount).toBe(0);
  });

  it("round-trips texts and ids over several blocks", async () => {
    await writeTwoBlocks();
    const loaded = Dictionary.load(path);
    expect(loaded.texts).toEqual([...firstTexts, ...secondTexts]);
    expect(loaded.persistedCount).toBe(firstTexts.length + secondTexts.length);
    for (const [id, text] of loaded.texts.entries()) expect(loaded.idOf(text)).toBe(id);
  });

  it("persists more entries than a block holds as several blocks, each checksummed, with every id kept", async () => {
    const dictionary = new Dictionary();
    const count = 2 * persistBlockEntriesMax + 17;
    // Short, long (past the 64-byte copy loop) and multi-byte texts.
    const textOf = (id: number) => (id % 1000 === 7 ? `long-${"é".repeat(60)}-${id}` : `user-${id}-名`);
    for (let id = 0; id < count; id++) dictionary.intern(textOf(id));
    await dictionary.persist(path, count - 5, false);
    expect(dictionary.persistedCount).toBe(count - 5);
    const { blocks, damage } = scanDictionaryBlocks(readFileSync(path));
    expect(damage).toBeUndefined();
    expect(blocks.map((block) => block.count)).toEqual([persistBlockEntriesMax, persistBlockEntriesMax, 12]);
    const loaded = Dictionary.load(path);
    expect(loaded.size).toBe(count - 5);
    for (let id = 0; id < count - 5; id += 997) expect(loaded.idOf(textOf(id))).toBe(id);
    expect(loaded.texts[count - 6]).toBe(textOf(count - 6));
  });

  it("persists only entries below upTo, and nothing twice", async () => {
    const dictionary = new Dictionary();
    for (const text of firstTexts) dictionary.intern(text);
    await dictionary.persist(path, 2, false);
    await dictionary.persist(path, 2, false);
    await dictionary.persist(path, 1, false);
    expect(Dictionary.load(path).texts).toEqual(firstTexts.slice(0, 2));
    await dictionary.persist(path, firstTexts.length, false);
    expect(Dictionary.load(path).texts).toEqual(firstTexts);
  });

  it.each([
    ["inside the second block's header", (end: number) => end + 7],
    ["right after the second block's header", (end: number) => end + blockHeaderBytes],
    ["inside the second block's entries", (end: number) => end + blockHeaderBytes + 9],
    ["one byte before the end", (_end: number, size: number) => size - 1],
  ])("cuts a block torn %s and keeps the blocks before it", async (_label, cutAt) => {
    const firstBlockEnd = await writeTwoBlocks();
    truncateSync(path, cutAt(firstBlockEnd, statSync(path).size));
    const loaded = Dictionary.load(path);
    expect(loaded.texts).toEqual(firstTexts);
    expect(statSync(path).size).toBe(firstBlockEnd);
  });

  it.each([
    ["garbage", () => Buffer.from("this is not a dictionary block, just noise 0123456789")],
    ["zeros", () => Buffer.alloc(4096)],
    ["a block header promising more bytes than follow", () => {
      const header = Buffer.alloc(blockHeaderBytes + 5);
      header.writeUInt32LE(0x31434944, 0);
      header.writeUInt32LE(3, 4);
      header.writeUInt32LE(1000, 8);
      return header;
    }],
  ])("cuts %s appended after the last block", async (_label, tail) => {
    await writeTwoBlocks();
    const sizeBefore = statSync(path).size;
    appendFileSync(path, tail());
    const loaded = Dictionary.load(path);
    expect(loaded.texts).toEqual([...firstTexts, ...secondTexts]);
    expect(statSync(path).size).toBe(sizeBefore);
  });

  it("drops a last block whose checksum does not match", async () => {
    const firstBlockEnd = await writeTwoBlocks();
    const bytes = readFileSync(path);
    bytes[bytes.length - 2] ^= 0x40;
    writeFileSync(path, bytes);
    expect(Dictionary.load(path).texts).toEqual(firstTexts);
    expect(statSync(path).size).toBe(firstBlockEnd);
  });

  it("appends readable blocks after a torn tail was cut, with the same ids as before", async () => {
    const firstBlockEnd = await writeTwoBlocks();
    truncateSync(path, firstBlockEnd + 20);
    const recovered = Dictionary.load(path);
    // The texts of the lost block come back (as WAL replay would re-intern them) with the ids they had.
    for (const text of secondTexts) recovered.intern(text);
    recovered.intern("new after recovery");
    await recovered.persist(path, recovered.size, false);
    const reloaded = Dictionary.load(path);
    expect(reloaded.texts).toEqual([...firstTexts, ...secondTexts, "new after recovery"]);
  });
});

describe("a damaged dictionary block", () => {
  it("followed by a valid block is corruption: nothing is cut and no id is handed to another text", async () => {
    await writeTwoBlocks();
    const bytes = readFileSync(path);
    bytes[blockHeaderBytes + 4 + 1] ^= 0x02; // a letter of "signup"
    writeFileSync(path, bytes);
    expect(() => Dictionary.load(path)).toThrow(StoreCorruptionError);
    expect(() => Dictionary.load(path)).toThrow(`corruption in ${path} at byte 0`);
    expect(statSync(path).size).toBe(bytes.length);
  });

  it("below the bytes a checkpoint made durable is corruption, even as the last block", async () => {
    const firstBlockEnd = await writeTwoBlocks();
    const bytes = readFileSync(path);
    bytes[bytes.length - 2] ^= 0x40;
    writeFileSync(path, bytes);
    expect(() => Dictionary.load(path, false, bytes.length)).toThrow(`corruption in ${path} at byte ${firstBlockEnd}`);
    // Past the durable length it is a block a checkpoint never published: a torn tail, cut.
    expect(Dictionary.load(path, false, firstBlockEnd).texts).toEqual(firstTexts);
    expect(statSync(path).size).toBe(firstBlockEnd);
  });

  it("or a file shorter than its durable length, or missing, is corruption", async () => {
    const firstBlockEnd = await writeTwoBlocks();
    const size = statSync(path).size;
    truncateSync(path, firstBlockEnd);
    expect(() => Dictionary.load(path, false, size)).toThrow(StoreCorruptionError);
    rmSync(path);
    expect(() => Dictionary.load(path, false, size)).toThrow(`corruption in ${path}`);
    expect(Dictionary.load(path, false, 0).size).toBe(0);
  });
});

describe("a dictionary that keeps no strings (distinctIds)", () => {
  it("gives the same ids, texts and file as one that keeps them", async () => {
    const texts = [...firstTexts, ...secondTexts, "x".repeat(100), "user-42"];
    const kept = new Dictionary();
    const bare = new Dictionary(false);
    for (const text of texts) {
      const bytes = Buffer.from(text, "utf8");
      expect(bare.internUtf8(bytes, 0, bytes.length)).toBe(kept.intern(text));
    }
    expect(bare.size).toBe(texts.length);
    expect(bare.texts).toEqual([]);
    for (const [id, text] of texts.entries()) {
      expect(bare.textOf(id)).toBe(text);
      expect(bare.idOf(text)).toBe(id);
    }
    await bare.persist(path, bare.size, false);
    const fromBare = readFileSync(path);
    rmSync(path);
    await kept.persist(path, kept.size, false);
    expect(readFileSync(path).equals(fromBare)).toBe(true);
    const loaded = Dictionary.load(path, false, 0, false);
    expect(loaded.size).toBe(texts.length);
    expect(Array.from({ length: texts.length }, (_, id) => loaded.textOf(id))).toEqual(texts);
  });
});

describe("a dictionary in memory", () => {
  it("gives a text the same id by its string or by its UTF-8 bytes, through many doublings of its table", () => {
    const dictionary = new Dictionary();
    const texts = [...firstTexts, ...secondTexts, "a", "ab", "abc", "ba"];
    for (let index = 0; index < 40_000; index++) texts.push(index % 3 === 0 ? `user_${index}` : index % 3 === 1 ? `é${index}🚀` : `${index}`);
    // Bytes inside a larger buffer, as a chunk holds them.
    const encoded = texts.map((text) => Buffer.from(`<<${text}>>`, "utf8"));
    const ids = texts.map((text, index) => (index % 2 === 0 ? dictionary.intern(text) : dictionary.internUtf8(encoded[index], 2, encoded[index].length - 2)));
    expect(ids).toEqual(texts.map((_, index) => index));
    expect(dictionary.texts).toEqual(texts);
    for (let index = 0; index < texts.length; index++) {
      expect(dictionary.idOf(texts[index])).toBe(index);
      expect(dictionary.internUtf8(encoded[index], 2, encoded[index].length - 2)).toBe(index);
    }
    expect(dictionary.size).toBe(texts.length);
    for (const absent of ["user_1", "abcd", "b", "x".repeat(199), "é1🚀 "]) expect(dictionary.idOf(absent)).toBeUndefined();
  });
});
