/**
 * The WAL is the only copy of an acknowledged event until a checkpoint seals
 * it. A record must round-trip byte for byte, and whatever a crash leaves after
 * the last complete record — a torn record, zeros, garbage — must be read as
 * the end of the log, never as data, and never hide the records before it.
 */
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ChunkBuilder, decodeChunk } from "../../src/storage/chunk-codec.js";
import { walFilePath } from "../../src/storage/paths.js";
import { encodeRecord, listWalSequences, readWalFile, scanWalFile, truncateWalFile, WriteAheadLog } from "../../src/storage/wal.js";
import { Random } from "../helpers/random.js";

let dataDir: string;

beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), "eventide-wal-"));
});

afterEach(() => {
  rmSync(dataDir, { recursive: true, force: true });
});

function chunkOf(rowCount: number, eventName: string): Uint8Array {
  const builder = new ChunkBuilder();
  for (let row = 0; row < rowCount; row++) {
    const index = builder.addRow(1_709_251_200_000 + row, eventName, `user-${row}`, undefined);
    builder.addProperty(index, "n", String(row));
  }
  return new Uint8Array(builder.finish());
}

const workspaceIds = ["aaaaaaaa11111111", "bbbbbbbb22222222", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"];

/** Writes `count` records to one file; returns their payloads, workspace ids and end offsets. */
function writeRecords(path: string, count: number): { payloads: Uint8Array[]; workspaces: string[]; ends: number[] } {
  const payloads: Uint8Array[] = [];
  const workspaces: string[] = [];
  const ends: number[] = [];
  let offset = 0;
  const buffers: Buffer[] = [];
  for (let index = 0; index < count; index++) {
    const payload = chunkOf(1 + index * 3, `event-${index} 🚀`);
    const workspaceId = workspaceIds[index % workspaceIds.length];
    const record = encodeRecord(workspaceId, payload);
    buffers.push(record);
    offset += record.length;
    payloads.push(payload);
    workspaces.push(workspaceId);
    ends.push(offset);
  }
  writeFileSync(path, Buffer.concat(buffers));
  return { payloads, workspaces, ends };
}

function expectPrefix(path: string, written: ReturnType<typeof writeRecords>, recordCount: number): void {
  const { records, validBytes } = readWalFile(path);
  expect(records.length).toBe(recordCount);
  expect(validBytes).toBe(recordCount === 0 ? 0 : written.ends[recordCount - 1]);
  for (let index = 0; index < recordCount; index++) {
    expect(records[index].workspaceId).toBe(written.workspaces[index]);
    expect(Buffer.from(records[index].payload).equals(Buffer.from(written.payloads[index]))).toBe(true);
  }
}

describe("WAL records", () => {
  it("round-trip workspace id and payload, 8-byte aligned and decodable", () => {
    const path = join(dataDir, "log.wal");
    const written = writeRecords(path, 6);
    for (const end of written.ends) expect(end % 8).toBe(0);
    expectPrefix(path, written, 6);
    const { records, fileBytes } = readWalFile(path);
    expect(fileBytes).toBe(written.ends[5]);
    for (const record of records) expect(record.payload.byteOffset % 8).toBe(0);
    expect(decodeChunk(records[2].payload).rowCount).toBe(7);
  });

  it("read an empty file as no records", () => {
    const path = join(dataDir, "empty.wal");
    writeFileSync(path, Buffer.alloc(0));
    expect(readWalFile(path)).toEqual({ records: [], validBytes: 0, fileBytes: 0 });
  });

  it("torn at any byte of the last record leave exactly the records before it", () => {
    const path = join(dataDir, "log.wal");
    const written = writeRecords(path, 4);
    const lastStart = written.ends[2];
    const lastEnd = written.ends[3];
    const full = readFileSync(path);
    for (let cut = lastStart; cut < lastEnd; cut++) {
      writeFileSync(path, full.subarray(0, cut));
      const { records, validBytes } = readWalFile(path);
      // A cut inside the last record's trailing padding leaves it whole: its CRC covers only the payload.
      const payloadEnd = lastEnd - ((8 - ((written.payloads[3].length) % 8)) % 8);
      const expected = cut >= payloadEnd ? 4 : 3;
      expect(records.length, `cut at ${cut}`).toBe(expected);
      expect(validBytes, `cut at ${cut}`).toBe(expected === 4 ? cut : lastStart);
    }
  });

  it.each([
    ["zeros", Buffer.alloc(8192)],
    ["garbage", Buffer.from("garbage after the log: no magic here, only noise 🙃")],
    ["random bytes", Buffer.from(Array.from({ length: 1000 }, (_, index) => (index * 37 + 11) & 0xff))],
  ])("followed by %s keep every record and no more", (_label, tail) => {
    const path = join(dataDir, "log.wal");
    const written = writeRecords(path, 5);
    appendFileSync(path, tail);
    expectPrefix(path, written, 5);
  });

  it("followed by a valid header whose payload never arrived keep every record", () => {
    const path = join(dataDir, "log.wal");
    const written = writeRecords(path, 3);
    const next = encodeRecord(workspaceIds[0], chunkOf(50, "torn"));
    appendFileSync(path, next.subarray(0, 40));
    expectPrefix(path, written, 3);
  });

  it("followed by a header claiming a huge payload or a huge workspace id keep every record", () => {
    const path = join(dataDir, "log.wal");
    const written = writeRecords(path, 3);
    const header = Buffer.alloc(64);
    header.writeUInt32LE(0x314c5745, 0);
    header.writeUInt32LE(0xffff_fff0, 4);
    header.writeUInt32LE(0, 8);
    header.writeUInt32LE(8, 12);
    appendFileSync(path, header);
    expectPrefix(path, written, 3);
    truncateSync(path, written.ends[2]);
    header.writeUInt32LE(16, 4);
    header.writeUInt32LE(0xffff_ffff, 12);
    appendFileSync(path, header);
    expectPrefix(path, written, 3);
  });

  it("with a flipped byte stop at the damaged record", () => {
    const path = join(dataDir, "log.wal");
    const written = writeRecords(path, 5);
    const bytes = readFileSync(path);
    bytes[written.ends[2] + 40] ^= 0x01;
    writeFileSync(path, bytes);
    expectPrefix(path, written, 3);
  });

  it("cut back with truncateWalFile read the same as before the tail was added", () => {
    const path = join(walFilePath(dataDir, 1));
    WriteAheadLog.open(dataDir, 1, false); // creates the directory and the file
    const written = writeRecords(path, 3);
    appendFileSync(path, Buffer.alloc(100, 0xab));
    const { validBytes } = readWalFile(path);
    truncateWalFile(path, validBytes);
    expect(statSync(path).size).toBe(written.ends[2]);
    expectPrefix(path, written, 3);
  });
});

/** Appends `count` records one at a time, each durable before the next: every record claims the ones before it. */
async function appendOneByOne(count: number): Promise<string> {
  const log = WriteAheadLog.open(dataDir, 1, true);
  for (let index = 0; index < count; index++) await log.append(encodeRecord(workspaceIds[index % 2], chunkOf(2 + index, `one-by-one-${index}`)), () => undefined);
  await log.close();
  return walFilePath(dataDir, 1);
}

describe("damage in a WAL file", () => {
  it("is corruption when a later record proves the damaged bytes were durable, and nothing is hidden: every intact record is found", async () => {
    const path = await appendOneByOne(5);
    const intact = scanWalFile(path);
    expect(intact.state).toEqual({ kind: "intact" });
    const second = intact.allRecords[1];
    // The claims: each record's group started once the records before it were synced.
    expect(intact.allRecords.map((record) => record.syncedBytes)).toEqual(intact.allRecords.map((record) => record.start));
    for (const [label, offset] of [["payload", second.end - 9], ["header", second.start + 9], ["magic", second.start]] as const) {
      const bytes = readFileSync(path);
      bytes[offset] ^= 0x10;
      const damagedPath = join(dataDir, `damaged-${label}.wal`);
      writeFileSync(damagedPath, bytes);
      const scan = scanWalFile(damagedPath);
      expect(scan.state, label).toMatchObject({ kind: "corrupt", offset: second.start, recordsAfter: 3 });
      expect(scan.records, label).toHaveLength(1);
      expect(scan.allRecords.map((record) => record.start), label).toEqual(intact.allRecords.filter((_, index) => index !== 1).map((record) => record.start));
      expect(scan.damaged, label).toEqual([{ start: second.start, end: second.end }]);
    }
  });

  it("is a torn tail when it hits the last record, or records no later one proves durable", async () => {
    const path = await appendOneByOne(4);
    const { allRecords } = scanWalFile(path);
    const bytes = readFileSync(path);
    bytes[allRecords[3].end - 9] ^= 0x01;
    writeFileSync(path, bytes);
    // A whole record whose payload is damaged: corruption only where a later file proves the file was rotated (recovery.ts).
    expect(scanWalFile(path).state).toEqual({ kind: "torn-tail", offset: allRecords[3].start, wholeRecord: true });
    // A power loss may keep a later page of the unsynced window and lose an earlier one:
    // records written in one group claim only what was synced before the group.
    const inFlight = Buffer.concat([bytes.subarray(0, allRecords[3].start), Buffer.alloc(200), encodeRecord(workspaceIds[0], chunkOf(3, "later page"), allRecords[3].start)]);
    writeFileSync(path, inFlight);
    expect(scanWalFile(path).state).toEqual({ kind: "torn-tail", offset: allRecords[3].start, wholeRecord: false });
    // Zeros past the last record (a file system's view past the synced length) are no record either.
    writeFileSync(path, Buffer.concat([bytes.subarray(0, allRecords[3].start), Buffer.alloc(4096)]));
    expect(scanWalFile(path).state).toEqual({ kind: "torn-tail", offset: allRecords[3].start, wholeRecord: false });
  });
});

describe("the write-ahead log", () => {
  it("writes concurrent appends in order, calling onDurable in order before each promise resolves", async () => {
    const log = WriteAheadLog.open(dataDir, 1, true);
    const random = new Random(7);
    const payloads = Array.from({ length: 200 }, (_, index) => chunkOf(random.integer(1, 40), `e${index}`));
    const durableOrder: number[] = [];
    const resolvedBeforeDurable: number[] = [];
    await Promise.all(
      payloads.map((payload, index) =>
        log.append(encodeRecord(workspaceIds[0], payload), () => durableOrder.push(index)).then(() => {
          if (!durableOrder.includes(index)) resolvedBeforeDurable.push(index);
        }),
      ),
    );
    await log.close();
    expect(resolvedBeforeDurable).toEqual([]);
    expect(durableOrder).toEqual(payloads.map((_, index) => index));
    const { records } = readWalFile(walFilePath(dataDir, 1));
    expect(records.map((record) => Buffer.from(record.payload).toString("hex"))).toEqual(payloads.map((payload) => Buffer.from(payload).toString("hex")));
  });

  it("keeps order when large groups (written through the O_DSYNC descriptor) and small ones mix, across a rotation", async () => {
    const log = WriteAheadLog.open(dataDir, 1, true);
    const random = new Random(11);
    // 3 000 rows encode to well over the 64 KiB from which a group goes to the thread pool.
    const large = chunkOf(3_000, "large");
    expect(large.length).toBeGreaterThan(64 * 1024);
    const wave = (count: number, label: string) => Array.from({ length: count }, (_, index) => (random.integer(0, 2) === 0 ? large : chunkOf(random.integer(1, 20), `${label}-${index}`)));
    const appendAll = async (payloads: Uint8Array[], durableOrder: Uint8Array[]) =>
      Promise.all(payloads.map((payload) => log.append(encodeRecord(workspaceIds[2], payload), () => durableOrder.push(payload))));
    const first = wave(40, "first");
    const firstOrder: Uint8Array[] = [];
    const firstDone = appendAll(first, firstOrder);
    const rotated = log.rotate(() => undefined, () => undefined);
    await firstDone;
    expect(await rotated).toBe(2);
    const second = wave(40, "second");
    const secondOrder: Uint8Array[] = [];
    await appendAll(second, secondOrder);
    await log.close();
    expect(firstOrder).toEqual(first);
    expect(secondOrder).toEqual(second);
    const hex = (payloads: Uint8Array[]) => payloads.map((payload) => Buffer.from(payload).toString("hex"));
    expect(hex(readWalFile(walFilePath(dataDir, 1)).records.map((record) => record.payload))).toEqual(hex(first));
    expect(hex(readWalFile(walFilePath(dataDir, 2)).records.map((record) => record.payload))).toEqual(hex(second));
  });

  it("rotates to a new file at a point where every earlier append is durable, and deletes old files on request, at once or in the pool", async () => {
    const log = WriteAheadLog.open(dataDir, 3, false);
    const before = Array.from({ length: 20 }, (_, index) => log.append(encodeRecord(workspaceIds[1], chunkOf(2, `before-${index}`)), () => undefined));
    let durableAtSwitch = 0;
    let settled = 0;
    for (const promise of before) void promise.then(() => settled++);
    const rotated = log.rotate(() => undefined, () => {
      durableAtSwitch = readWalFile(walFilePath(dataDir, 3)).records.length;
    });
    expect(await rotated).toBe(4);
    await Promise.all(before);
    expect(settled).toBe(20);
    expect(durableAtSwitch).toBe(20);
    await log.append(encodeRecord(workspaceIds[1], chunkOf(1, "after")), () => undefined);
    expect(listWalSequences(dataDir)).toEqual([3, 4]);
    expect(readWalFile(walFilePath(dataDir, 4)).records.length).toBe(1);
    log.deleteBefore(4);
    expect(listWalSequences(dataDir)).toEqual([4]);
    expect(existsSync(walFilePath(dataDir, 3))).toBe(false);
    // As a checkpoint deletes: in the pool, appends going on meanwhile.
    expect(await log.rotate(() => undefined, () => undefined)).toBe(5);
    const deleting = log.deleteBeforeInPool(5);
    await log.append(encodeRecord(workspaceIds[1], chunkOf(1, "during")), () => undefined);
    await deleting;
    expect(listWalSequences(dataDir)).toEqual([5]);
    expect(readWalFile(walFilePath(dataDir, 5)).records.length).toBe(1);
    await log.close();
  });

  it("reopened on an existing file appends after its records", async () => {
    const first = WriteAheadLog.open(dataDir, 1, false);
    await first.append(encodeRecord(workspaceIds[0], chunkOf(3, "one")), () => undefined);
    await first.close();
    const second = WriteAheadLog.open(dataDir, 1, false);
    expect(second.fileBytes).toBeGreaterThan(0);
    await second.append(encodeRecord(workspaceIds[0], chunkOf(4, "two")), () => undefined);
    await second.close();
    const { records, validBytes, fileBytes } = readWalFile(walFilePath(dataDir, 1));
    expect(records.map((record) => decodeChunk(record.payload).rowCount)).toEqual([3, 4]);
    expect(validBytes).toBe(fileBytes);
  });
});
