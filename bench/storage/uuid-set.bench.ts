/**
 * Micro-benchmark of the uuid set (src/storage/uuid-set.ts) that makes
 * retried events idempotent: every event with a uuid is claimed once on the
 * commit path. Run: `node dist/bench/storage/uuid-set.bench.js`.
 *
 * Estimate: a claim hashes four words (~5 ns) and probes an open-addressing
 * table of 20-byte slots. With 1 M uuids stored the table is 2 M slots × 20 B
 * = 40 MB, far beyond the caches, so a probe is one DRAM miss (~80–100 ns) and
 * a claim ~100 ns: 1 000 claims (one batch) ~100 µs, ~10 M uuids/s — small
 * next to the ~2 ms a batch costs to validate. A lookup of a present uuid
 * costs the same miss. Into a small set (10 k, 400 KB, in L2) a claim is
 * ~15 ns.
 */
import { runMicroBench } from "../runner/micro-bench.js";
import { SeededRandom } from "../fixtures/events.js";
import { UuidSet } from "../../src/storage/uuid-set.js";

const random = new SeededRandom(5);
function randomUuids(count: number): Uint8Array {
  const bytes = new Uint8Array(count * 16);
  const words = new Uint32Array(bytes.buffer);
  for (let index = 0; index < words.length; index += 1) words[index] = random.nextUint32();
  return bytes;
}

const storedCount = 1_000_000;
const batchSize = 1000;
const stored = randomUuids(storedCount);
const large = new UuidSet();
for (let index = 0; index < storedCount; index += 1) large.add(stored, index * 16);
const small = new UuidSet();
for (let index = 0; index < 10_000; index += 1) small.add(stored, index * 16);
// Fresh uuids per call would run out: claim a batch, then delete it again (delete is the rare path, but the same cost order).
const fresh = randomUuids(batchSize * 64);
let freshBatch = 0;

function claimAndRelease(set: UuidSet): void {
  const base = (freshBatch++ % 64) * batchSize * 16;
  for (let index = 0; index < batchSize; index += 1) set.claim(fresh, base + index * 16, 1);
  for (let index = 0; index < batchSize; index += 1) set.delete(fresh, base + index * 16, 1);
}

let lookupStart = 0;
function lookups(): number {
  let found = 0;
  const start = (lookupStart = (lookupStart + 7919) % (storedCount - batchSize));
  for (let index = 0; index < batchSize; index += 1) if (large.has(stored, (start + index) * 16)) found += 1;
  return found;
}

/**
 * What the micro-benchmark's means hide: a batch of claims that lands on a
 * table's growth rehashes that table. Claims 8 M new uuids in batches of
 * 1 000 into an empty set and reports the slowest batch (one table of all
 * uuids took ~0.5 s at 6 M).
 */
function slowestBatchWhileGrowing(total: number): { slowestMs: number; atSize: number; totalMs: number } {
  const set = new UuidSet();
  const batch = randomUuids(batchSize);
  const words = new Uint32Array(batch.buffer);
  let slowestMs = 0;
  let atSize = 0;
  const started = performance.now();
  for (let claimed = 0; claimed < total; claimed += batchSize) {
    // Each batch's uuids made new by one changed word: generating 8 M uuids up front would cost 128 MB.
    for (let index = 0; index < words.length; index += 4) words[index] = random.nextUint32();
    const batchStarted = performance.now();
    for (let index = 0; index < batchSize; index += 1) set.claim(batch, index * 16, 1);
    const elapsedMs = performance.now() - batchStarted;
    if (elapsedMs > slowestMs) {
      slowestMs = elapsedMs;
      atSize = set.size;
    }
  }
  return { slowestMs, atSize, totalMs: performance.now() - started };
}

const growth = slowestBatchWhileGrowing(8_000_000);
process.stdout.write(
  `uuid set growing to 8 M uuids in batches of ${batchSize}: slowest batch ${growth.slowestMs.toFixed(1)} ms (at ${(growth.atSize / 1e6).toFixed(2)} M), ${(growth.totalMs / 1000).toFixed(1)} s in all\n\n`,
);

await runMicroBench(`uuid set (${(large.byteLength / 2 ** 20).toFixed(0)} MiB table holding ${storedCount / 1e6} M uuids; batches of ${batchSize})`, [
  { name: "claim + release 1 000 new uuids (1 M stored)", estimateMicroseconds: 200, items: batchSize, itemName: "uuid", run: () => claimAndRelease(large) },
  { name: "look up 1 000 stored uuids (1 M stored)", estimateMicroseconds: 100, items: batchSize, itemName: "uuid", run: lookups },
  { name: "claim + release 1 000 new uuids (10 k stored)", estimateMicroseconds: 30, items: batchSize, itemName: "uuid", run: () => claimAndRelease(small) },
]);
