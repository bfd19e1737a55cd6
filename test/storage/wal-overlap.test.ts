/**
 * Two WAL groups can be on their way to disk at once (the second written while
 * the first one's fdatasync runs). A failed group must take every group written
 * after it down with it: the file is cut back to the failed group's start, so
 * nothing after it may be acknowledged, and nothing acknowledged may be cut.
 *
 * The faults come from the storage layer's own seam (EVENTIDE_FAULTS_FILE, read
 * when fault-injection.ts loads: this file imports the WAL only after setting it).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const scratch = mkdtempSync(join(tmpdir(), "eventide-wal-overlap-"));
const faultsFile = join(scratch, "faults.json");
process.env.EVENTIDE_FAULTS_FILE = faultsFile;

const { ChunkBuilder, decodeChunk } = await import("../../src/storage/chunk-codec.js");
const { walFilePath } = await import("../../src/storage/paths.js");
const { encodeRecord, readWalFile, WriteAheadLog } = await import("../../src/storage/wal.js");

function record(label: string): Buffer {
  const builder = new ChunkBuilder();
  builder.addRow(1_709_251_200_000, label, "user", undefined);
  return encodeRecord("aaaaaaaa11111111", new Uint8Array(builder.finish()));
}

/** What happened to each append: "durable" (onDurable ran, then it resolved) or the rejection's message. */
async function outcomes(appends: Array<Promise<void>>): Promise<string[]> {
  return Promise.all(appends.map((append) => append.then(() => "durable", (error: Error) => error.message)));
}

/** The label of each record in the WAL file, in file order (every test record is one row named by its label). */
function labelsOnDisk(dataDir: string, sequence: number): string[] {
  return readWalFile(walFilePath(dataDir, sequence)).records.map((walRecord) => {
    const chunk = decodeChunk(walRecord.payload);
    return chunk.string(chunk.eventNameString[0]);
  });
}

beforeAll(() => {
  writeFileSync(faultsFile, "{}");
});

afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
});

describe("the write-ahead log with two groups in flight", () => {
  it("starts no group behind a failed write, cuts it off, and stores what comes next", async () => {
    const dataDir = join(scratch, "write-fault");
    // The next WAL write fails (after its bytes reached the file, as a real failure may leave them).
    writeFileSync(faultsFile, JSON.stringify({ "wal.write": { errno: "EIO", count: 1 } }));
    const log = WriteAheadLog.open(dataDir, 1, true);
    const durable: string[] = [];
    // Same turn: "first" starts a group at once and its write fails; "second" and "third"
    // must wait for the cut rather than be written behind the failed bytes.
    const appends = (["first", "second", "third"] as const).map((label) => log.append(record(label), () => durable.push(label)));
    expect(await outcomes(appends)).toEqual([expect.stringMatching(/EIO/), "durable", "durable"]);
    writeFileSync(faultsFile, "{}");
    await log.append(record("fourth"), () => durable.push("fourth"));
    await log.close();
    expect(durable).toEqual(["second", "third", "fourth"]);
    expect(labelsOnDisk(dataDir, 1)).toEqual(["second", "third", "fourth"]);
  });

  it("refuses a group in flight behind one whose sync failed, and acknowledges the one before it", async () => {
    const dataDir = join(scratch, "sync-fault");
    const log = WriteAheadLog.open(dataDir, 1, true);
    const durable: string[] = [];
    await log.append(record("first"), () => durable.push("first"));
    // Armed now: "second" and "third" each start a group at once (two may be in flight), and the
    // next sync to finish fails, whichever group's it is.
    writeFileSync(faultsFile, JSON.stringify({ "wal.fsync": { errno: "EIO", count: 1 } }));
    const results = await outcomes([log.append(record("second"), () => durable.push("second")), log.append(record("third"), () => durable.push("third"))]);
    writeFileSync(faultsFile, "{}");
    // One of the two groups failed its sync; whichever it was, nothing after it counts, and nothing before it is lost.
    const failedAt = results.findIndex((result) => result !== "durable");
    expect(failedAt).toBeGreaterThanOrEqual(0);
    for (let index = failedAt; index < results.length; index++) expect(results[index]).toMatch(/EIO/);
    const kept = ["first", ...(["second", "third"].slice(0, failedAt))];
    expect(durable).toEqual(kept);
    await log.append(record("fourth"), () => durable.push("fourth"));
    await log.close();
    expect(labelsOnDisk(dataDir, 1)).toEqual([...kept, "fourth"]);
  });
});
