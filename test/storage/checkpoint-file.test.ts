/**
 * `_checkpoint.json` format 2 (sealed rows per workspace): read back as
 * written, damage in the rows caught by the checksum, a flipped format digit
 * read as damage rather than a newer version, and a format 1 reader (whose
 * checksum leaves the rows out) refusing it as a newer file, as it is.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { encodeCheckpointFile, readCheckpointFile } from "../../src/storage/checkpoint-file.js";
import { StoreCorruptionError } from "../../src/storage/corruption.js";
import { refuseNewerFormats } from "../../src/storage/format-versions.js";

const directories: string[] = [];
afterAll(() => {
  for (const directory of directories) rmSync(directory, { recursive: true, force: true });
});

function dataDirWith(text: string): string {
  const directory = mkdtempSync(join(tmpdir(), "eventide-checkpoint-file-"));
  directories.push(directory);
  writeFileSync(join(directory, "_checkpoint.json"), text);
  return directory;
}

const checkpoint = {
  walSequence: 42,
  dictionaryBytes: new Map<string, [number, number, number]>([["a1b2c3d4e5f60718", [100, 2000, 30]]]),
  sealedRows: new Map([
    ["a1b2c3d4e5f60718", 123_456],
    ["0000000000000001", 0],
  ]),
};

describe("_checkpoint.json with sealed rows", () => {
  it("reads back what was written, as format 2", () => {
    const text = encodeCheckpointFile(checkpoint);
    expect(JSON.parse(text).format).toBe(2);
    const read = readCheckpointFile(dataDirWith(text));
    expect(read.walSequence).toBe(42);
    expect(read.dictionaryBytes).toEqual(checkpoint.dictionaryBytes);
    expect(read.sealedRows).toEqual(checkpoint.sealedRows);
  });

  it("without rows it is format 1, read with none to check", () => {
    const text = encodeCheckpointFile({ ...checkpoint, sealedRows: undefined });
    expect(JSON.parse(text).format).toBe(1);
    expect(JSON.parse(text)).not.toHaveProperty("sealedRows");
    expect(readCheckpointFile(dataDirWith(text)).sealedRows).toBeUndefined();
  });

  it("a changed row count is a checksum mismatch, and so is a dropped rows field", () => {
    const text = encodeCheckpointFile(checkpoint);
    expect(() => readCheckpointFile(dataDirWith(text.replace("123456", "123457")))).toThrow(StoreCorruptionError);
    const parsed = JSON.parse(text);
    delete parsed.sealedRows;
    expect(() => readCheckpointFile(dataDirWith(JSON.stringify(parsed)))).toThrow(/checksum mismatch/);
  });

  it("a flipped bit in the format digit is damage (the file checks out), not a newer version", () => {
    const dataDir = dataDirWith(encodeCheckpointFile(checkpoint).replace('"format":2', '"format":6'));
    expect(() => refuseNewerFormats(dataDir)).not.toThrow();
    expect(readCheckpointFile(dataDir).sealedRows).toEqual(checkpoint.sealedRows);
  });

  it("does not check out under format 1's checksum, so a format 1 reader refuses it as newer", () => {
    const parsed = JSON.parse(encodeCheckpointFile(checkpoint));
    expect(crc32(JSON.stringify({ walSequence: parsed.walSequence, dictionaryBytes: parsed.dictionaryBytes }))).not.toBe(parsed.crc32);
    const newer = dataDirWith(JSON.stringify({ ...parsed, format: 3, crc32: parsed.crc32 + 1 }));
    expect(() => refuseNewerFormats(newer)).toThrow(/checkpoint format 3; this version reads up to 2/);
    expect(readFileSync(join(newer, "_checkpoint.json"), "utf8")).toContain('"format":3');
  });
});
