/**
 * The costliest ingest bodies per byte (bench/fixtures/costly-bodies.ts), each
 * validated in this one thread as a worker would: through JSON.parse and
 * through the path ingest picks ("auto", the byte parser for these). Prints
 * the median of 3 runs of each, their ratio, and whether the two answers agree.
 * Run: `npm run bench:costly` (about a minute; JSON.parse takes seconds on some).
 *
 * Estimate: the byte parser reads 20 MiB in a few passes at ~5–10 ns a byte
 * (0.1–0.2 s) plus ~100 ns per member it groups by key, so 0.2–0.5 s each;
 * JSON.parse builds every array (~0.3 µs) and key (1–3 µs in objects of a
 * million), so 1–5 s on the key-heavy ones.
 */
import { availableParallelism } from "node:os";
import { isDeepStrictEqual } from "node:util";
import { costlyBodies } from "../fixtures/costly-bodies.js";
import { ChunkBuilder } from "../../src/ingest/chunk-codec.js";
import { type IngestParser, validateBody } from "../../src/ingest/event-validation.js";
import { limits } from "../../src/config/limits.js";

const runs = 3;

function validate(body: Buffer, parser: IngestParser): { ms: number; result: unknown } {
  const builder = new ChunkBuilder();
  const startedMs = performance.now();
  const result = validateBody(body, false, "batch", Date.UTC(2024, 4, 1), () => ({ builder, chunkIndex: 0 }), parser);
  return { ms: performance.now() - startedMs, result };
}

function medianMs(body: Buffer, parser: IngestParser): { ms: number; result: unknown } {
  const samples = Array.from({ length: runs }, () => validate(body, parser));
  samples.sort((left, right) => left.ms - right.ms);
  return samples[Math.floor(runs / 2)];
}

console.log(`costly ingest bodies, ${limits.batchBodyBytesMax} bytes each, validateBody on one thread (${availableParallelism()} cores), median of ${runs}`);
console.log(`${"body".padEnd(78)} ${"JSON.parse".padStart(10)} ${"auto".padStart(8)} ${"ratio".padStart(6)}  same answer`);
for (const costly of costlyBodies) {
  const body = Buffer.from(costly.body("ek_bench", limits.batchBodyBytesMax), "utf8");
  const native = medianMs(body, "native");
  const auto = medianMs(body, "auto");
  const same = isDeepStrictEqual(native.result, auto.result);
  console.log(`${costly.name.padEnd(78)} ${native.ms.toFixed(0).padStart(8)} ms ${auto.ms.toFixed(0).padStart(5)} ms ${(native.ms / auto.ms).toFixed(1).padStart(5)}×  ${same ? "yes" : "NO"}`);
  if (!same) process.exitCode = 1;
}
