/**
 * Micro-benchmark of event validation (src/ingest/event-validation.ts), the
 * worker-side half of ingest: request bytes in, a columnar chunk plus
 * per-event errors out. Run: `node dist/bench/ingest/event-validation.bench.js`.
 *
 * Estimate: a 1 000-event batch body is ~235 KB. JSON.parse runs at
 * ~250–300 MB/s on this kind of text → ~0.8 ms; the UTF-8 check is ~0.05 ms;
 * each event then costs ~1 µs (field checks, timestamp parse, uuid parse,
 * ~6 property texts interned into the chunk) → ~1 ms; finish() writes ~40 KB
 * of columns and strings → ~0.05 ms. About 2 ms per batch: ~500 k events/s
 * per worker core. Single events gathered 64 to a task: each body is ~280 B
 * parsed separately (~2 µs with the call overhead) plus ~1 µs of checks → ~0.2 ms
 * per 64 bodies, ~3 µs an event. A batch with every tenth event invalid costs
 * about the same (errors are built for at most 100 of them). The same batch
 * in msgpack (~195 KB) is read by its byte scanner at about the JSON
 * scanner's cost: lengths are in the headers, but every string is still
 * hashed and copied once; through msgpackr's objects it costs ~2–3× that.
 */
import { pack } from "msgpackr";
import { buildBatchBodies, buildSingleBodies } from "../fixtures/events.js";
import { runMicroBench } from "../runner/micro-bench.js";
import { validateBodies, type BodyInput } from "../../src/ingest/event-validation.js";

const endTimeMs = Date.UTC(2024, 4, 1);
const apiKey = "ek_bench_0000000000000000000000";
const batch = buildBatchBodies({ seed: 1, apiKey, bodyCount: 1, endTimeMs }).bodies[0];
const singles = buildSingleBodies({ seed: 2, apiKey, bodyCount: 64, endTimeMs }).bodies;

// The same batch with every tenth event missing its distinctId.
const parsed = JSON.parse(batch.toString("utf8")) as { apiKey: string; events: Record<string, unknown>[] };
parsed.events.forEach((event, index) => {
  if (index % 10 === 0) delete event.distinctId;
});
const batchWithErrors = Buffer.from(JSON.stringify(parsed), "utf8");

const input = (bytes: Buffer): BodyInput => ({ bytes, gzip: false, receivedAtMs: endTimeMs });
const batchInput = [input(batch)];
const msgpackBatchInput: BodyInput[] = [{ ...input(pack(JSON.parse(batch.toString("utf8")))), format: "msgpack" }];
const batchWithErrorsInput = [input(batchWithErrors)];
const singleInputs = singles.map(input);

// Sanity: the bodies validate as expected before anything is timed.
const check = validateBodies(batchInput, "batch").results[0];
if (check.kind !== "parsed" || check.acceptedCount !== 1000) throw new Error(`the batch did not validate: ${JSON.stringify(check).slice(0, 300)}`);

await runMicroBench(`event validation (${(batch.length / 1024).toFixed(0)} KiB batch of 1 000 events; 64 single bodies of ~${Math.round(singles.reduce((sum, body) => sum + body.length, 0) / singles.length)} B)`, [
  { name: "batch of 1 000 valid events", estimateMicroseconds: 2000, items: 1000, itemName: "event", run: () => validateBodies(batchInput, "batch") },
  { name: "the batch in msgpack", estimateMicroseconds: 2000, items: 1000, itemName: "event", run: () => validateBodies(msgpackBatchInput, "batch") },
  { name: "batch, every 10th event invalid", estimateMicroseconds: 2000, items: 1000, itemName: "event", run: () => validateBodies(batchWithErrorsInput, "batch") },
  { name: "64 single-event bodies in one task", estimateMicroseconds: 200, items: 64, itemName: "event", run: () => validateBodies(singleInputs, "single") },
]);
