/**
 * What the Node client (src/client/index.ts) costs per event over a bare
 * loop that sends the same batches: one process sends 200 000 events to a
 * server it starts (1 000 events a batch, gzip level 1, two requests in
 * flight), once through EventideClient.capture and once by building each
 * batch body itself and POSTing it with fetch, in rounds of alternating
 * order. Reported: events/s and the sending process's CPU per event, each
 * round and their medians. Run: `npm run build && node
 * dist/bench/clients/client-overhead.bench.js [events] [rounds]`.
 *
 * Estimate: the bare loop spends per event one JSON.stringify of a small
 * object (~1 µs) and its share of gzip level 1 (~100 B at ~100 MB/s, ~1 µs);
 * the client adds a uuid (~0.2 µs), a Buffer.byteLength, queue bookkeeping
 * and a delivery report entry, ~1–3 µs more. The server parses, validates and
 * commits at ~100–300 k events/s on two busy cores, so both loops should
 * reach about the same events/s (the server bounds them), and the client's
 * overhead shows in its CPU per event: ~2 µs bare, ~4–5 µs with the client.
 */
import { randomUUID } from "node:crypto";
import { gzip as gzipCallback, constants as zlibConstants } from "node:zlib";
import { promisify } from "node:util";
import { resolve } from "node:path";
import { EventideClient } from "../../src/client/index.js";
import { startEventide } from "../runner/server.js";

// Compiled to dist/bench/clients: the repository is three levels up.
const repositoryRoot = resolve(import.meta.dirname, "..", "..", "..");
const eventCount = Number(process.argv[2] ?? 200_000);
const batchEvents = 1000;
const inFlightMax = 2;
/** Rounds, each running both loops in alternating order, so that a server warming up or a neighbour's burst does not land on one side only; medians are quoted. */
const rounds = Number(process.argv[3] ?? 5);
const gzip = promisify(gzipCallback);

function eventFor(name: string, index: number) {
  return { event: name, distinctId: `user-${index % 5000}`, properties: { index, plan: index % 3 === 0 ? "pro" : "free", path: `/page/${index % 50}` } };
}

interface Measurement {
  eventsPerSecond: number;
  cpuMicrosecondsPerEvent: number;
}

async function measure(run: () => Promise<void>): Promise<Measurement> {
  const cpuBefore = process.cpuUsage();
  const startMs = performance.now();
  await run();
  const elapsedMs = performance.now() - startMs;
  const cpu = process.cpuUsage(cpuBefore);
  return { eventsPerSecond: (eventCount / elapsedMs) * 1000, cpuMicrosecondsPerEvent: (cpu.user + cpu.system) / eventCount };
}

function bareLoop(name: string): Promise<Measurement> {
  return measure(async () => {
    const endpoint = `${server.ingestUrl}/ingest/batch`;
    let next = 0;
    const sender = async () => {
      while (next < eventCount) {
        const first = next;
        const last = Math.min(eventCount, first + batchEvents);
        next = last;
        const events = [];
        for (let index = first; index < last; index++) {
          const event = eventFor(name, index);
          events.push({ ...event, timestamp: new Date().toISOString(), uuid: randomUUID() });
        }
        const body = await gzip(JSON.stringify({ apiKey: server.apiKey, events }), { level: zlibConstants.Z_BEST_SPEED });
        const response = await fetch(endpoint, { method: "POST", body, headers: { "content-type": "application/json", "content-encoding": "gzip" } });
        const answer = (await response.json()) as { accepted?: number };
        if (response.status !== 200 || answer.accepted !== last - first) throw new Error(`bare loop: ${response.status} ${JSON.stringify(answer)}`);
      }
    };
    await Promise.all(Array.from({ length: inFlightMax }, sender));
  });
}

async function clientLoop(name: string): Promise<Measurement> {
  let accepted = 0;
  const client = new EventideClient({ apiKey: server.apiKey, host: server.ingestUrl, batchEventsMax: batchEvents, requestsInFlightMax: inFlightMax });
  client.on("delivery", (report) => (accepted += report.accepted.length));
  const result = await measure(async () => {
    for (let index = 0; index < eventCount; index++) await client.capture(eventFor(name, index));
    await client.shutdown();
  });
  if (accepted !== eventCount) throw new Error(`client: ${accepted} of ${eventCount} accepted; ${JSON.stringify(client.stats())}`);
  return result;
}

const line = (label: string, value: Measurement) =>
  `${label.padEnd(22)} ${Math.round(value.eventsPerSecond).toLocaleString("en-US").padStart(9)} events/s  ${value.cpuMicrosecondsPerEvent.toFixed(2).padStart(6)} µs CPU/event`;

function median(values: number[]): number {
  const sorted = [...values].sort((left, right) => left - right);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

const medianOf = (measurements: Measurement[]): Measurement => ({
  eventsPerSecond: median(measurements.map((value) => value.eventsPerSecond)),
  cpuMicrosecondsPerEvent: median(measurements.map((value) => value.cpuMicrosecondsPerEvent)),
});

const server = await startEventide({ repositoryRoot, workers: 2, keepData: false });
try {
  console.log(`${eventCount} events, ${batchEvents} a batch, gzip level 1, ${inFlightMax} requests in flight, ${rounds} rounds`);
  const bare: Measurement[] = [];
  const withClient: Measurement[] = [];
  for (let round = 1; round <= rounds; round++) {
    const clientFirst = round % 2 === 0;
    if (clientFirst) withClient.push(await clientLoop(`client-${round}`));
    bare.push(await bareLoop(`bare-${round}`));
    if (!clientFirst) withClient.push(await clientLoop(`client-${round}`));
    console.log(line(`round ${round} bare fetch loop`, bare[round - 1]));
    console.log(line(`round ${round} EventideClient`, withClient[round - 1]));
  }
  const bareMedian = medianOf(bare);
  const clientMedian = medianOf(withClient);
  console.log(line("median bare fetch loop", bareMedian));
  console.log(line("median EventideClient", clientMedian));
  console.log(
    `client overhead (medians): ${(clientMedian.cpuMicrosecondsPerEvent - bareMedian.cpuMicrosecondsPerEvent).toFixed(2)} µs CPU/event, ` +
      `throughput ${((clientMedian.eventsPerSecond / bareMedian.eventsPerSecond) * 100).toFixed(0)}% of the bare loop`,
  );
} finally {
  await server.stop();
  server.cleanup();
}
