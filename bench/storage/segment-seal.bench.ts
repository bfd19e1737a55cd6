/**
 * Micro-benchmark of sealing a segment (src/storage/segment-writer.ts): the
 * checkpoint step that sorts an active segment's rows by (event, user, time),
 * builds per-event user bitmaps and writes the column files. Run:
 * `node dist/bench/storage/segment-seal.bench.js` (fsync off: this times the
 * CPU work, not the disk).
 *
 * Estimate for 200 k rows (one busy day of one workspace), 10 events, 20 k
 * users, 2 properties: the LSD radix sort makes ~5 counting passes, each
 * moving four columns (~1.5 ns per row and column) → ~6 ms; scattering the
 * other columns to their sealed rows ~1 ms; 10 roaring bitmaps from sorted
 * runs ~1 ms; CRCs and writes of ~2.5 MB to the page cache ~2 ms. About 7 ms
 * a segment, ~30 M rows/s, and ten times that for a checkpoint's 2 M rows
 * (measured: ~4.5× these, the passes being bound by memory).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runMicroBench } from "../runner/micro-bench.js";
import { SeededRandom } from "../fixtures/events.js";
import { sealSegment, type SealInput } from "../../src/storage/segment-writer.js";

const plans = ["", "free", "pro", "team", "enterprise"];
const countries = ["", ...Array.from({ length: 20 }, (_, index) => `country-${index}`)];

/** The sparse form an active segment keeps: the rows that set the key, and their ids. */
function entries(keyId: number, denseIds: Uint32Array, texts: string[]): SealInput["properties"][number] {
  const rows: number[] = [];
  for (let row = 0; row < denseIds.length; row++) if (denseIds[row] !== 0) rows.push(row);
  return { keyId, rows: Uint32Array.from(rows), valueIds: Uint32Array.from(rows, (row) => denseIds[row]), texts };
}

/** An active segment's columns, built once: sealing only reads them. */
function activeSegment(rowCount: number, userCount: number): Omit<SealInput, "directory" | "fsync"> {
  const random = new SeededRandom(6);
  const timeOffsetMs = new Uint32Array(rowCount);
  const userIds = new Uint32Array(rowCount);
  const eventIds = new Uint32Array(rowCount);
  const uuidPresent = new Uint8Array(rowCount);
  const uuidBytes = new Uint8Array(rowCount * 16);
  const planIds = new Uint32Array(rowCount);
  const countryIds = new Uint32Array(rowCount);
  for (let row = 0; row < rowCount; row += 1) {
    // Rows arrive in time order, as an active segment fills.
    timeOffsetMs[row] = Math.floor((row / rowCount) * 86_400_000);
    userIds[row] = random.nextInt(userCount);
    eventIds[row] = Math.min(9, Math.floor(-Math.log(1 - random.nextFloat()) * 2));
    if (random.nextFloat() < 0.9) {
      uuidPresent[row] = 1;
      for (let byte = 0; byte < 16; byte += 1) uuidBytes[row * 16 + byte] = random.nextInt(256);
    }
    planIds[row] = 1 + random.nextInt(4);
    countryIds[row] = random.nextFloat() < 0.8 ? 1 + random.nextInt(20) : 0;
  }
  const properties = [entries(0, planIds, plans), entries(1, countryIds, countries)];
  return { dayStartMs: Date.UTC(2024, 4, 1), rowCount, timeOffsetMs, userIds, eventIds, uuidPresent, uuidBytes, properties };
}

const directory = mkdtempSync(join(tmpdir(), "eventide-bench-seal-"));
let sealed = 0;
function seal(segment: Omit<SealInput, "directory" | "fsync">): void {
  const segmentDirectory = join(directory, "2024-05-01", `segment-${sealed++}`);
  const result = sealSegment({ ...segment, directory: segmentDirectory, fsync: false });
  if (result.layout.rowCount !== segment.rowCount) throw new Error(`sealed ${result.layout.rowCount} rows`);
  // Keep the disk use flat: the segment is not needed once written.
  rmSync(segmentDirectory, { recursive: true, force: true });
}

try {
  const day = activeSegment(200_000, 20_000);
  // A checkpoint's worth (EVENTIDE_CHECKPOINT_ROWS_MAX): columns of megabytes, past the caches.
  const checkpoint = activeSegment(2_000_000, 200_000);
  await runMicroBench("segment seal (10 events, 2 properties, 90 % with uuid; fsync off)", [
    { name: "seal 200 k rows, 20 k users", estimateMicroseconds: 7000, items: 200_000, itemName: "row", run: () => seal(day) },
    { name: "seal 2 M rows, 200 k users", estimateMicroseconds: 70_000, items: 2_000_000, itemName: "row", run: () => seal(checkpoint) },
  ], { timeMs: 2000 });
} finally {
  rmSync(directory, { recursive: true, force: true });
}
