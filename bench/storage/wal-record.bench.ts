/**
 * Micro-benchmark of WAL records (src/storage/wal.ts): every accepted chunk is
 * framed and checksummed once on the way to disk, and checked again at
 * start-up replay. Run: `node dist/bench/storage/wal-record.bench.js`.
 *
 * Estimate: a 1 000-event chunk is ~100 KB. Encoding copies it once (~10 µs at
 * ~10 GB/s) and runs zlib's crc32 over it (~1–3 GB/s with its slicing tables:
 * ~40–100 µs) → ~60 µs a record, ~16 k records/s, so framing costs ~4 % of
 * the ~2 ms a worker spends validating the same 1 000 events. Replay reads a
 * 16 MB file (page cache: ~3 ms), checks each CRC again (~8 ms) and copies
 * each payload for alignment (~2 ms) → ~13 ms, ~1.2 GB/s.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildBatchBodies } from "../fixtures/events.js";
import { runMicroBench } from "../runner/micro-bench.js";
import { validateBodies } from "../../src/ingest/event-validation.js";
import { encodeRecord, readWalFile } from "../../src/storage/wal.js";

// A real chunk: 1 000 fixture events through validation.
const body = buildBatchBodies({ seed: 4, apiKey: "ek_bench", bodyCount: 1, endTimeMs: Date.UTC(2024, 4, 1) }).bodies[0];
const chunk = new Uint8Array(validateBodies([{ bytes: body, gzip: false, receivedAtMs: 0 }], "batch").chunks[0].chunk);
const workspaceId = "ws_0123456789abcdef0123";

const directory = mkdtempSync(join(tmpdir(), "eventide-bench-wal-"));
const walFile = join(directory, "wal-bench.log");
const recordCount = Math.ceil((16 * 2 ** 20) / chunk.byteLength);
const record = encodeRecord(workspaceId, chunk);
writeFileSync(walFile, Buffer.concat(Array.from({ length: recordCount }, () => record)));
const replayed = readWalFile(walFile);
if (replayed.records.length !== recordCount) throw new Error(`replay read ${replayed.records.length} of ${recordCount} records`);

try {
  await runMicroBench(`WAL records (${(chunk.byteLength / 1024).toFixed(0)} KiB chunk of 1 000 events; replay of ${recordCount} records, ${(replayed.fileBytes / 2 ** 20).toFixed(0)} MiB)`, [
    { name: "encode + crc32 one record", estimateMicroseconds: 60, items: chunk.byteLength, itemName: "byte", run: () => encodeRecord(workspaceId, chunk) },
    { name: "replay a 16 MiB WAL file", estimateMicroseconds: 13_000, items: replayed.fileBytes, itemName: "byte", run: () => readWalFile(walFile) },
  ]);
} finally {
  rmSync(directory, { recursive: true, force: true });
}
