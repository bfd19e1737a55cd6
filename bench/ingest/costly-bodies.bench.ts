/**
 * The costliest ingest bodies per byte (bench/fixtures/costly-bodies.ts), each
 * validated in this one thread as a worker would: through JSON.parse and
 * through the path ingest picks ("auto", the byte parser for these). Prints
 * the median of 3 runs of each, their ratio, and whether the two answers agree.
 * Then end to end: each body, and a valid batch of a million new property keys
 * (manyNewKeysBody), posted 3 times to a real server on a fresh data
 * directory while a probe requests a 404 every 5 ms — the probe's wait is how
 * long the main thread held other clients up. For each body: the median and
 * the worst answer (the per-body time the ingest fuzz suite prints but does
 * not assert), the worst against the same body validated in this thread
 * above (its peer in the same run), and the probe's waits.
 * Run: `npm run bench:costly` (about two minutes; JSON.parse takes seconds on some).
 *
 * Estimate: the byte parser reads 20 MiB in a few passes at ~5–10 ns a byte
 * (0.1–0.2 s) plus ~100 ns per member it groups by key, so 0.2–0.5 s each;
 * JSON.parse builds every array (~0.3 µs) and key (1–3 µs in objects of a
 * million), so 1–5 s on the key-heavy ones.
 */
import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { costlyBodies, manyNewKeysBody } from "../fixtures/costly-bodies.js";
import { keepAliveAgent, post } from "../runner/http-client.js";
import { startEventide } from "../runner/server.js";
import { ChunkBuilder } from "../../src/storage/chunk-codec.js";
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
/** The in-thread median of the path ingest picks, per body: the peer of the end-to-end answers below. */
const inThreadMs = new Map<string, number>();
for (const costly of costlyBodies) {
  const body = Buffer.from(costly.body("ek_bench", limits.batchBodyBytesMax), "utf8");
  const native = medianMs(body, "native");
  const auto = medianMs(body, "auto");
  inThreadMs.set(costly.name, auto.ms);
  const same = isDeepStrictEqual(native.result, auto.result);
  console.log(`${costly.name.padEnd(78)} ${native.ms.toFixed(0).padStart(8)} ms ${auto.ms.toFixed(0).padStart(5)} ms ${(native.ms / auto.ms).toFixed(1).padStart(5)}×  ${same ? "yes" : "NO"}`);
  if (!same) process.exitCode = 1;
}

/**
 * The bench's client: a keep-alive agent each for the probe and the bodies,
 * which drop sockets idle for half the server's idle timeout (bench/runner/http-client.ts):
 * building three bodies can take longer than that timeout on a loaded machine.
 */
const probeAgent = keepAliveAgent(1);
const bodyAgent = keepAliveAgent(1);
/** On a machine busy enough, one 20 MiB body takes minutes: the client waits rather than failing the run. */
const answerTimeoutMs = 600_000;

/** Requests a 404 every 5 ms until stopped (a missing route: safe to send twice); returns each wait in ms. */
function probe(url: string): { stop: () => Promise<number[]> } {
  const waits: number[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const startedMs = performance.now();
      await post(probeAgent, `${url}/not-a-route`, "", { idempotent: true });
      waits.push(performance.now() - startedMs);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return waits;
    },
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((left, right) => left - right);
  return sorted[Math.floor(sorted.length / 2)];
}

// dist/bench/ingest → the repository root, whose dist/src/main.js the suite's helper starts on a fresh data directory.
// The last body's keys are new on every run: the workspace's key cap is raised to hold them all, so it is timed, not refused.
const server = await startEventide({
  repositoryRoot: resolve(import.meta.dirname, "..", "..", ".."),
  workers: undefined,
  keepData: false,
  environment: { EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX: String(runs * 1_000_000) },
});
// The first request of this process sets up its HTTP client: not the server's doing.
await post(probeAgent, `${server.ingestUrl}/not-a-route`, "", { idempotent: true });
console.log(`\nend to end: each body posted ${runs} times to a fresh server (${availableParallelism()} cores); a probe requests a 404 every 5 ms meanwhile`);
console.log(`${"body".padEnd(78)} ${"answer p50".padStart(10)} ${"worst".padStart(8)} ${"worst/in-thread".padStart(15)} ${"probe p50".padStart(9)} ${"worst".padStart(7)}  answer`);
const endToEnd: Array<{ name: string; body: (run: number) => string; answer: unknown }> = [
  ...costlyBodies.map((costly) => ({ name: costly.name, body: () => costly.body(server.apiKey, limits.batchBodyBytesMax), answer: costly.answer })),
  { name: "1 000 events × 999 property keys never seen before (valid)", body: (run: number) => manyNewKeysBody(server.apiKey, run * 1_000_000), answer: { ok: true, accepted: 1000 } },
];
for (const { name, body, answer } of endToEnd) {
  const answeredMs: number[] = [];
  let right = true;
  // Built before the probe starts: building takes this process up to half a second, which the probe would count.
  const bodies = Array.from({ length: runs }, (_, run) => Buffer.from(body(run), "utf8"));
  // One turn of the event loop first, so a connection the server closed while the bodies were built is seen closed, not reused.
  await new Promise((resolve) => setTimeout(resolve, 0));
  const prober = probe(server.ingestUrl);
  for (const bytes of bodies) {
    const startedMs = performance.now();
    const response = await post(bodyAgent, `${server.ingestUrl}/ingest/batch`, bytes, { timeoutMs: answerTimeoutMs });
    const answered = JSON.parse(response.text) as unknown;
    answeredMs.push(performance.now() - startedMs);
    if (!isDeepStrictEqual(answered, answer)) right = false;
  }
  const waits = await prober.stop();
  const worstMs = Math.max(...answeredMs);
  const peerMs = inThreadMs.get(name);
  const ratio = peerMs === undefined ? "—" : `${(worstMs / peerMs).toFixed(1)}×`;
  console.log(
    `${name.padEnd(78)} ${median(answeredMs).toFixed(0).padStart(7)} ms ${worstMs.toFixed(0).padStart(5)} ms ${ratio.padStart(15)} ${median(waits).toFixed(1).padStart(6)} ms ${Math.max(...waits).toFixed(0).padStart(4)} ms  ${right ? "right" : "WRONG"}`,
  );
  if (!right) process.exitCode = 1;
}
probeAgent.destroy();
bodyAgent.destroy();
await server.stop();
server.cleanup();
