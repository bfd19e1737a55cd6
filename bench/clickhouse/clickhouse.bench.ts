/**
 * The ClickHouse store against the embedded store on the same data, in one
 * run (`npm run bench:clickhouse`): batch ingest events/s as acknowledged, the
 * time until ClickHouse holds them all (forwarded events/s), the visibility
 * delay of single events (200 → counted by a trend query), and a table of
 * query times. Each store gets its own Eventide process; ClickHouse runs as a
 * process of this bench with its own config and data directory. Medians; the
 * machine's core count and load are printed with the figures.
 */
import { availableParallelism, loadavg } from "node:os";
import { resolve } from "node:path";
import { startClickHouse, storeUrl } from "../../test/helpers/clickhouse.js";
import { type Target, startEventide } from "../runner/server.js";

type ServerHandle = Target;
const repositoryRoot = resolve(import.meta.dirname, "..", "..", "..");

const eventsTotal = Number(process.env.BENCH_EVENTS ?? 200_000);
const batchSize = 1000;
const batchesInFlight = 8;
const dayCount = 30;
const firstDayMs = Date.UTC(2024, 0, 1);
const visibilitySamples = 15;
const queryRepeats = 5;

function batchBody(apiKey: string, first: number): string {
  const events = Array.from({ length: batchSize }, (_, index) => {
    const seq = first + index;
    return {
      event: ["view", "click", "signup", "purchase"][seq % 4],
      distinctId: `u${(seq * 7919) % 5000}`,
      timestamp: new Date(firstDayMs + (seq % dayCount) * 86_400_000 + ((seq * 104_729) % 86_400_000)).toISOString(),
      properties: { plan: ["free", "pro", "team"][seq % 3], price: String(seq % 100), path: `/p/${seq % 50}` },
    };
  });
  return JSON.stringify({ apiKey, events });
}

async function post(url: string, body: string, token?: string): Promise<{ status: number; body: any }> {
  const response = await fetch(url, { method: "POST", body, headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
  return { status: response.status, body: await response.json() };
}

async function totalEvents(server: ServerHandle): Promise<number> {
  const response = await fetch(`${server.queryUrl}/api/v1/events`, { headers: { authorization: `Bearer ${server.token}` } });
  if (response.status !== 200) return -1;
  return ((await response.json()) as { data: { count: number }[] }).data.reduce((sum, entry) => sum + entry.count, 0);
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function ingest(server: ServerHandle): Promise<{ ackSeconds: number; visibleSeconds: number }> {
  const startMs = performance.now();
  let next = 0;
  const sender = async () => {
    while (next < eventsTotal) {
      const first = next;
      next += batchSize;
      const answer = await post(`${server.ingestUrl}/ingest/batch`, batchBody(server.apiKey, first));
      if (answer.status !== 200) throw new Error(`ingest answered ${answer.status} ${JSON.stringify(answer.body)}`);
    }
  };
  await Promise.all(Array.from({ length: batchesInFlight }, sender));
  const ackSeconds = (performance.now() - startMs) / 1000;
  while ((await totalEvents(server)) < eventsTotal) await new Promise((resolve) => setTimeout(resolve, 50));
  return { ackSeconds, visibleSeconds: (performance.now() - startMs) / 1000 };
}

/** ms from a single event's 200 to a trend query counting it. */
async function visibilityDelays(server: ServerHandle): Promise<number[]> {
  const delays: number[] = [];
  for (let sample = 0; sample < visibilitySamples; sample++) {
    const event = `probe${sample}`;
    const answer = await post(`${server.ingestUrl}/ingest`, JSON.stringify({ apiKey: server.apiKey, event, distinctId: "probe", timestamp: "2024-01-05T12:00:00Z" }));
    if (answer.status !== 200) throw new Error("probe refused");
    const ackMs = performance.now();
    for (;;) {
      const trend = await post(`${server.queryUrl}/api/v1/query/trend`, JSON.stringify({ event, dateFrom: "2024-01-05", dateTo: "2024-01-05" }), server.token);
      if (trend.body.data?.[0]?.count === 1) break;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    delays.push(performance.now() - ackMs);
  }
  return delays;
}

/**
 * A funnel and its twin with the same answer from the kernel path (rows
 * selected) in ClickHouse mode: an exclusion of an event never ingested, or,
 * for unordered (no exclusions), the last step given a filter every event passes
 * while an earlier step names the same event without it.
 */
function funnelTwins(name: string, body: { steps: string[]; order?: string; [field: string]: unknown }): Array<{ name: string; kind: string; body: object }> {
  const last = body.steps.length - 1;
  const twin =
    body.order === "unordered"
      ? { ...body, steps: body.steps.map((step, index) => (index === last ? { event: step, filters: [{ property: "never_set", op: "is_not_set" }] } : step)) }
      : { ...body, exclusions: [{ event: "never_ingested", fromStep: 1, toStep: 2 }] };
  return [
    { name, kind: "funnel", body },
    { name: `${name} (kernel twin)`, kind: "funnel", body: twin },
  ];
}

const queries: Array<{ name: string; kind: string; body: object }> = [
  { name: "trend total by day, 30 days", kind: "trend", body: { event: "view", dateFrom: "2024-01-01", dateTo: "2024-01-30" } },
  { name: "trend unique by hour, filter", kind: "trend", body: { event: "view", dateFrom: "2024-01-01", dateTo: "2024-01-07", groupBy: "hour", math: "unique", filters: [{ property: "plan", op: "eq", value: "pro" }] } },
  { name: "trend sum, breakdown, Berlin", kind: "trend", body: { event: "purchase", dateFrom: "2024-01-01", dateTo: "2024-01-30", math: "sum", mathProperty: "price", breakdown: "path", timezone: "Europe/Berlin" } },
  { name: "funnel 3 steps, 30 days", kind: "funnel", body: { steps: ["view", "click", "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-30" } },
  { name: "funnel strict + time to convert", kind: "funnel", body: { steps: ["view", "click"], dateFrom: "2024-01-01", dateTo: "2024-01-10", order: "strict", timeToConvert: true } },
  // Each SQL funnel beside its twin with an exclusion no event matches: the same answer from the kernel path (rows selected).
  ...funnelTwins("funnel strict, 4 steps + time to convert", { steps: ["view", "click", "signup", "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-30", order: "strict", timeToConvert: true }),
  ...funnelTwins("funnel unordered, repeated step, breakdown", { steps: ["view", "click", "view"], dateFrom: "2024-01-01", dateTo: "2024-01-30", order: "unordered", breakdown: "plan" }),
  ...funnelTwins("funnel ordered, repeated step + time to convert", { steps: ["view", "click", "view", "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-30", timeToConvert: true }),
  { name: "retention weekly, 30 days", kind: "retention", body: { cohortEvent: "signup", retentionEvent: "view", dateFrom: "2024-01-01", dateTo: "2024-01-30", windowDays: 7 } },
];

async function queryTimes(server: ServerHandle): Promise<Map<string, { ms: number; body: string }>> {
  const times = new Map<string, { ms: number; body: string }>();
  for (const query of queries) {
    const samples: number[] = [];
    let body = "";
    for (let repeat = 0; repeat < queryRepeats; repeat++) {
      const startMs = performance.now();
      const response = await fetch(`${server.queryUrl}/api/v1/query/${query.kind}`, { method: "POST", body: JSON.stringify(query.body), headers: { authorization: `Bearer ${server.token}` } });
      body = await response.text();
      samples.push(performance.now() - startMs);
    }
    times.set(query.name, { ms: median(samples), body });
  }
  return times;
}

async function main(): Promise<void> {
  const cores = availableParallelism();
  console.log(`ClickHouse store bench: ${eventsTotal} events in batches of ${batchSize}, ${batchesInFlight} in flight; ${cores} cores, load ${loadavg().map((value) => value.toFixed(1)).join(" ")}`);
  const clickhouse = await startClickHouse();
  const servers: ServerHandle[] = [];
  try {
    servers.push(await startEventide({ repositoryRoot, keepData: false }));
    // The bench runner passes this process's environment on: the store is chosen there.
    process.env.EVENTIDE_STORE = storeUrl(clickhouse, "bench");
    servers.push(await startEventide({ repositoryRoot, keepData: false }));
    delete process.env.EVENTIDE_STORE;
    const names = ["embedded", "clickhouse"];
    const results = [];
    for (const [index, server] of servers.entries()) {
      const ingested = await ingest(server);
      const delays = await visibilityDelays(server);
      const times = await queryTimes(server);
      results.push({ ingested, delays, times });
      console.log(
        `${names[index]}: ${Math.round(eventsTotal / ingested.ackSeconds)} events/s acknowledged, ${Math.round(eventsTotal / ingested.visibleSeconds)} events/s visible in queries; ` +
          `visibility delay median ${Math.round(median(delays))} ms (min ${Math.round(Math.min(...delays))}, max ${Math.round(Math.max(...delays))})`,
      );
    }
    console.log("\n| query | embedded ms | clickhouse ms | ratio | same answer |\n|---|---|---|---|---|");
    for (const query of queries) {
      const [embedded, clickhouseTime] = results.map((result) => result.times.get(query.name)!);
      console.log(`| ${query.name} | ${embedded.ms.toFixed(1)} | ${clickhouseTime.ms.toFixed(1)} | ${(clickhouseTime.ms / embedded.ms).toFixed(2)} | ${embedded.body === clickhouseTime.body ? "yes" : "NO"} |`);
    }
    console.log(`\nload after: ${loadavg().map((value) => value.toFixed(1)).join(" ")}`);
  } finally {
    for (const server of servers) {
      await server.stop();
      server.cleanup();
    }
    await clickhouse.stop();
  }
}

await main();
