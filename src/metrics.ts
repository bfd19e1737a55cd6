/**
 * Eventide's Prometheus metrics (SPEC §8), one registry for the process. Every
 * layer counts into it with an increment per request or per chunk, never per
 * event; queue depths, segments and cache figures are read from their owners
 * only when scraped. It sits at the root so that storage and ingest can count
 * without importing http.
 */
import client from "prom-client";

export const registry = new client.Registry();

/** Request latencies from a 1 ms single event to a 30 s query. */
const requestSecondsBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** A WAL group from a page-cache write with fdatasync on NVMe (~0.1 ms) to a stalled disk. */
const fsyncSecondsBuckets = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5];

/**
 * Requests by route: counts by status and a latency histogram, kept as plain
 * numbers (a request costs a few increments; prom-client's labelled series
 * cost ~2.5 µs per request, measured, on the single-event path) and handed to
 * the registry when scraped. Routes and statuses are fixed sets, so is the map.
 */
class RouteSeries {
  readonly countsByStatus = new Map<string, number>();
  /** Per bucket, not cumulative; the last is +Inf. */
  readonly buckets = new Float64Array(requestSecondsBuckets.length + 1);
  secondsSum = 0;
  count = 0;
}
const requestSeries = new Map<string, RouteSeries>();

/** A metric the registry prints from `get()` (prom-client's own classes hash labels on every call). */
function registerScraped(name: string, help: string, type: "counter" | "histogram", values: () => Array<{ labels: Record<string, string | number>; value: number; metricName?: string }>): void {
  const metric = { name, help, type, aggregator: "sum", get: async () => ({ name, help, type, aggregator: "sum", values: values() }) };
  registry.registerMetric(metric as unknown as client.Metric);
}

registerScraped("eventide_http_requests_total", 'HTTP requests answered, by route (a fixed set; unknown paths are route="unknown") and status code', "counter", () =>
  [...requestSeries].flatMap(([route, series]) => [...series.countsByStatus].map(([status, value]) => ({ labels: { route, status }, value }))),
);

registerScraped("eventide_http_request_duration_seconds", "Time from a request's arrival to its answer, by route", "histogram", () =>
  [...requestSeries].flatMap(([route, series]) => {
    const name = "eventide_http_request_duration_seconds";
    let cumulative = 0;
    const values = requestSecondsBuckets.map((bound, index) => ({ metricName: `${name}_bucket`, labels: { le: bound, route }, value: (cumulative += series.buckets[index]) }));
    values.push({ metricName: `${name}_bucket`, labels: { le: "+Inf" as unknown as number, route }, value: series.count });
    values.push({ metricName: `${name}_sum`, labels: { route } as never, value: series.secondsSum });
    values.push({ metricName: `${name}_count`, labels: { route } as never, value: series.count });
    return values;
  }),
);

export const eventsAccepted = new client.Counter({
  name: "eventide_events_accepted_total",
  help: "Events acknowledged by the ingest endpoints (a repeated uuid counts: it is acknowledged)",
  registers: [registry],
});

export const eventsRefused = new client.Counter({
  name: "eventide_events_refused_total",
  help: "Events refused one by one inside a request that was read, by error code (a request refused whole counts only in eventide_http_requests_total)",
  labelNames: ["code"] as const,
  registers: [registry],
});

export const damagedSegmentReads = new client.Counter({
  name: "eventide_damaged_segment_reads_total",
  help: "Sealed segments that failed to load for a query, a merge or a deletion (a bad checksum, an unreadable file): the store keeps serving other days; stop it and run `eventide repair`",
  registers: [registry],
});

export const walGroupSeconds = new client.Histogram({
  name: "eventide_wal_fsync_duration_seconds",
  help: "Time to make one group commit of the write-ahead log durable (write and fdatasync)",
  buckets: fsyncSecondsBuckets,
  registers: [registry],
});

/** Which path answered a query in ClickHouse mode, so tests and operators see how many fall back to selecting rows. */
export const clickhouseQueries = new client.Counter({
  name: "eventide_clickhouse_queries_total",
  help: "Queries the ClickHouse store answered, by kind, funnel shape (order; steps distinct or repeated; exclusions none or some; empty for trends and retention) and path (sql: aggregated in ClickHouse; rows: rows selected and answered by the kernels)",
  labelNames: ["query", "order", "steps", "exclusions", "path"] as const,
  registers: [registry],
});

export const retentionCacheLookups = new client.Counter({
  name: "eventide_retention_cache_lookups_total",
  help: "Retention answers looked up in the 60 s cache, by result (hit or miss)",
  labelNames: ["result"] as const,
  registers: [registry],
});

/** Figures read from the running service when scraped; each returns undefined until the service is up. */
export interface GaugeSources {
  writeQueueBytes(): number | undefined;
  workerQueueTasks(): number | undefined;
  segments(): { count: number; bytes: number } | undefined;
  retentionCacheBytes(): number | undefined;
  uuids(): { bytes: number; windowSeconds: number | undefined } | undefined;
}

function gauge(name: string, help: string, read: () => number | undefined): void {
  new client.Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      const value = read();
      if (value !== undefined) this.set(value);
    },
  });
}

let sources: GaugeSources | undefined;


gauge("eventide_write_queue_bytes", "Bytes of records waiting for the write-ahead log", () => sources?.writeQueueBytes());
gauge("eventide_worker_queue_tasks", "Tasks waiting for a worker thread", () => sources?.workerQueueTasks());
gauge("eventide_segments", "Sealed segments in the store", () => sources?.segments()?.count);
gauge("eventide_segment_bytes", "Bytes of sealed segment columns on disk", () => sources?.segments()?.bytes);
gauge("eventide_retention_cache_bytes", "Bytes held by the retention answer cache", () => sources?.retentionCacheBytes());
gauge("eventide_uuid_bytes", "Bytes held by the uuid sets that recognise retries (at most EVENTIDE_UUID_MEMORY_BYTES_MAX, give or take a table's growth, and what commits still in flight hold)", () => sources?.uuids()?.bytes);
gauge(
  "eventide_uuid_window_seconds",
  "How far back a retried uuid is still recognised, in the workspace where that is shortest: the horizon (EVENTIDE_UUID_HORIZON_DAYS) or less once the sets reach their memory budget",
  () => sources?.uuids()?.windowSeconds,
);

/**
 * Called once the store and the pool exist; before that the gauges are absent
 * from a scrape. Also starts prom-client's process_… and nodejs_… metrics
 * (memory, CPU, event-loop lag, GC): here and not at import, since worker
 * threads import this module too and must not each watch their own loop.
 */
export function startServiceMetrics(value: GaugeSources): void {
  sources = value;
  client.collectDefaultMetrics({ register: registry });
}

/** Counts one answered request; `startedAtMs` from performance.now(). */
export function countRequest(route: string, status: string, startedAtMs: number): void {
  let series = requestSeries.get(route);
  if (series === undefined) requestSeries.set(route, (series = new RouteSeries()));
  series.countsByStatus.set(status, (series.countsByStatus.get(status) ?? 0) + 1);
  const seconds = (performance.now() - startedAtMs) / 1000;
  let bucket = 0;
  while (bucket < requestSecondsBuckets.length && seconds > requestSecondsBuckets[bucket]) bucket++;
  series.buckets[bucket]++;
  series.secondsSum += seconds;
  series.count++;
}
