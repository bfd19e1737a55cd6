/**
 * Puts the seeded query dataset (bench/fixtures/dataset.ts) into the target:
 * 1 000-event batches over keep-alive HTTP with a few in flight, retrying the
 * 503s a saturated server answers (SPEC §1); the rows carry no uuid, so a
 * batch is not idempotent and a reset connection fails the load. Before loading into a running
 * Eventide, one trend query tells whether the same dataset is already there
 * (so a second run against it does not double every count). Bodies are built
 * from prepared fragments, not through the Node client (src/client): the
 * client's per-event object, JSON and uuid would run on the cores the server
 * is measured on and lower the load figure by the client's cost, not the
 * server's (bench/clients/client-overhead.bench.ts measures that cost).
 *
 * Estimate: ~190 B of JSON per event, serialized at ~0.3 µs per event by
 * BatchSerializer; Eventide ingests ~150–400 k events/s on 2 cores, so 1 M
 * events load in ~3–7 s and 10 M in ~30–70 s. The driver's share (building
 * bodies) is ~10 % of that.
 */
import { Agent } from "node:http";
import { BatchSerializer, generateDataset, type Dataset } from "../fixtures/dataset.js";
import type { DatasetChoice } from "./options.js";
import { datasetRange } from "./queries.js";
import { keepAliveAgent, post } from "../runner/http-client.js";
import type { Target } from "../runner/server.js";

export function buildDataset(choice: DatasetChoice): Dataset {
  return generateDataset({ eventCount: choice.events, userCount: choice.users, dayCount: choice.days, seed: choice.seed, startDate: choice.startDate, batchEvents: 1000 });
}

/** $pageview rows of the dataset: what a total trend over its range must count once it is loaded. */
export function pageviewCount(dataset: Dataset): number {
  const code = dataset.dictionaries.event.indexOf("$pageview");
  let count = 0;
  const events = dataset.columns.event;
  for (let row = 0; row < dataset.eventCount; row += 1) if (events[row] === code) count += 1;
  return count;
}

/** The target's count of $pageview events over the dataset's range (a trend query). */
export async function countPageviews(target: Target, choice: DatasetChoice): Promise<number> {
  const agent = new Agent({ keepAlive: false });
  try {
    const { dateFrom, dateTo } = datasetRange(choice);
    const answer = await post(
      agent,
      `${target.queryUrl}/api/v1/query/trend`,
      JSON.stringify({ event: "$pageview", dateFrom, dateTo, groupBy: "month" }),
      { headers: { authorization: `Bearer ${target.token}` }, idempotent: true },
    );
    if (answer.status !== 200) throw new Error(`the trend query answered ${answer.status}: ${answer.text.slice(0, 300)}`);
    const parsed = JSON.parse(answer.text) as { data: { count: number }[] };
    return parsed.data.reduce((sum, bucket) => sum + bucket.count, 0);
  } finally {
    agent.destroy();
  }
}

export interface LoadProgressUpdate {
  acknowledgedEvents: number;
  elapsedMs: number;
}

export interface DatasetLoadReport {
  events: number;
  requests: number;
  retries: number;
  seconds: number;
  eventsPerSecond: number;
  bodyBytes: number;
  /** Client time spent building JSON bodies (overlaps with the server's work). */
  serializeMs: number;
}

/** Sends every row of the dataset in ingest order; throws when a batch is refused for anything but 503. */
export async function loadDataset(
  target: Pick<Target, "ingestUrl" | "apiKey">,
  dataset: Dataset,
  options: { inflight: number; onProgress: (update: LoadProgressUpdate) => void },
): Promise<DatasetLoadReport> {
  const serializer = new BatchSerializer(dataset);
  const batchEvents = dataset.options.batchEvents;
  const batchCount = Math.ceil(dataset.eventCount / batchEvents);
  const agent = keepAliveAgent(options.inflight);
  const url = `${target.ingestUrl}/ingest/batch`;
  let next = 0;
  let retries = 0;
  let acknowledged = 0;
  let bodyBytes = 0;
  let serializeMs = 0;
  const startMs = performance.now();
  let lastReportMs = startMs;
  const worker = async () => {
    for (;;) {
      const batch = next;
      next += 1;
      if (batch >= batchCount) return;
      const start = batch * batchEvents;
      const end = Math.min(start + batchEvents, dataset.eventCount);
      const serializeStartMs = performance.now();
      const body = Buffer.from(serializer.batchBody(target.apiKey, start, end), "utf8");
      serializeMs += performance.now() - serializeStartMs;
      bodyBytes += body.length;
      for (let attempt = 0; ; attempt += 1) {
        const answer = await post(agent, url, body);
        if (answer.status === 503 && attempt < 200) {
          retries += 1;
          const retryAfterSeconds = Number(answer.headers["retry-after"] ?? 1);
          await new Promise((resolveWait) => setTimeout(resolveWait, Math.min(1000, Math.max(50, retryAfterSeconds * 1000))));
          continue;
        }
        let accepted = -1;
        try {
          const parsed = JSON.parse(answer.text) as { accepted?: unknown; errors?: unknown };
          if (parsed.errors === undefined) accepted = Number(parsed.accepted);
        } catch {
          // Reported below.
        }
        if (answer.status !== 200 || accepted !== end - start) throw new Error(`loading the dataset: batch ${batch} answered ${answer.status}: ${answer.text.slice(0, 500)}`);
        acknowledged += accepted;
        break;
      }
      const nowMs = performance.now();
      if (nowMs - lastReportMs >= 500) {
        lastReportMs = nowMs;
        options.onProgress({ acknowledgedEvents: acknowledged, elapsedMs: nowMs - startMs });
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: options.inflight }, worker));
  } finally {
    agent.destroy();
  }
  const seconds = (performance.now() - startMs) / 1000;
  return { events: acknowledged, requests: batchCount, retries, seconds, eventsPerSecond: acknowledged / seconds, bodyBytes, serializeMs };
}
