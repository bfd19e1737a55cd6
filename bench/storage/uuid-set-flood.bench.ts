/**
 * A hash flood against the uuid set (src/storage/uuid-set.ts): batches of
 * 1 000 uuids that all share one hash under the set's former, unkeyed hash,
 * claimed into one set, against batches of random uuids. Run:
 * `node dist/bench/storage/uuid-set-flood.bench.js [total uuids, default 100000]`.
 * The target: a colliding batch within 2× of a random one, at every size.
 *
 * Estimate: under the keyed hash both kinds are random to the table. A claim
 * is a hash (~30 ns) and a probe into one of 256 tables; at 100 k uuids they
 * hold ~400 each, ~5 MB in all, in L2/L3, so ~50–100 ns a claim and
 * ~0.05–0.1 ms a batch, flat as the set grows. Under the unkeyed hash every
 * colliding uuid lands in one chain: the k-th batch walks k × 1 000 slots per
 * claim, 20 bytes each (~1 ns a slot streamed), so ~100 ms a batch at 100 k,
 * and each doubling of that table re-walks the chain for every uuid it holds
 * (n²/2 slots: seconds at 100 k).
 */
import { uuidsCollidingUnderUnkeyedHash } from "../fixtures/colliding-uuids.js";
import { SeededRandom } from "../fixtures/events.js";
import { UuidSet } from "../../src/storage/uuid-set.js";

const batchSize = 1000;
const argument = process.argv.slice(2).find((value) => !value.startsWith("--"));
const total = argument === undefined ? 100_000 : Number(argument);
if (!Number.isSafeInteger(total) || total < batchSize || total % batchSize !== 0) throw new Error(`total uuids must be a positive multiple of ${batchSize}, got ${argument}`);

function randomUuids(count: number, seed: number): Uint8Array {
  const random = new SeededRandom(seed);
  const bytes = new Uint8Array(count * 16);
  const words = new Uint32Array(bytes.buffer);
  for (let index = 0; index < words.length; index++) words[index] = random.nextUint32();
  return bytes;
}

interface FloodRun {
  /** Milliseconds of each batch's claims, in order. */
  batchMs: number[];
  totalMs: number;
}

function claimInBatches(uuids: Uint8Array, count: number): FloodRun {
  const set = new UuidSet();
  const batchMs: number[] = [];
  const started = performance.now();
  for (let first = 0; first < count; first += batchSize) {
    const batchStarted = performance.now();
    for (let index = first; index < first + batchSize; index++) set.claim(uuids, index * 16, 1);
    batchMs.push(performance.now() - batchStarted);
  }
  if (set.size !== count) throw new Error(`expected ${count} uuids in the set, found ${set.size}`);
  return { batchMs, totalMs: performance.now() - started };
}

function median(values: number[]): number {
  const sorted = values.slice().sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** Median batch over the tenth of the run that ends at `upTo` uuids, so one stall does not stand for the size. */
function batchAt(run: FloodRun, upTo: number): number {
  const end = upTo / batchSize;
  return median(run.batchMs.slice(Math.max(0, end - Math.max(1, Math.floor(end / 10))), end));
}

/** Runs of each kind, alternated, so load from other processes falls on both alike; each figure is the median run's. */
const repetitions = 5;
const randomUuidBytes = randomUuids(total, 11);
const collidingUuidBytes = uuidsCollidingUnderUnkeyedHash(total, 12);
// Warm-up: the claim path compiled before anything is timed.
claimInBatches(randomUuids(Math.min(total, 20_000), 13), Math.min(total, 20_000));
const randomRuns: FloodRun[] = [];
const collidingRuns: FloodRun[] = [];
for (let repetition = 0; repetition < repetitions; repetition++) {
  randomRuns.push(claimInBatches(randomUuidBytes, total));
  collidingRuns.push(claimInBatches(collidingUuidBytes, total));
}

const sizes = [0.1, 0.3, 0.5, 1].map((share) => Math.max(batchSize, Math.round((total * share) / batchSize) * batchSize));
const figures = (runs: FloodRun[]) => ({
  atSizes: sizes.map((size) => median(runs.map((run) => batchAt(run, size)))),
  slowestMs: median(runs.map((run) => Math.max(...run.batchMs))),
  totalMs: median(runs.map((run) => run.totalMs)),
});
const random = figures(randomRuns);
const colliding = figures(collidingRuns);
const format = (ms: number) => (ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(3));
const rows = [
  ["uuids in the set", ...sizes.map((size) => `${size / 1000} k`), "slowest batch", "all batches"],
  ["random: ms per batch", ...random.atSizes.map(format), format(random.slowestMs), format(random.totalMs)],
  ["colliding: ms per batch", ...colliding.atSizes.map(format), format(colliding.slowestMs), format(colliding.totalMs)],
  [
    "colliding ÷ random",
    ...sizes.map((_, index) => `${(colliding.atSizes[index] / random.atSizes[index]).toFixed(2)}×`),
    `${(colliding.slowestMs / random.slowestMs).toFixed(2)}×`,
    `${(colliding.totalMs / random.totalMs).toFixed(2)}×`,
  ],
];
const widths = rows[0].map((_, column) => Math.max(...rows.map((row) => row[column].length)));
process.stdout.write(
  `uuid set under a hash flood: batches of ${batchSize} uuids sharing one unkeyed hash, against random ones\n` +
    `(median of ${repetitions} alternated runs; per size, the median batch over the last tenth of the run up to it)\n`,
);
for (const row of rows) process.stdout.write(`${row.map((cell, column) => (column === 0 ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join("  ")}\n`);
