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

export const httpRequests = new client.Counter({
  name: "eventide_http_requests_total",
  help: "HTTP requests answered, by route (a fixed set; unknown paths are route=\"unknown\") and status code",
  labelNames: ["route", "status"] as const,
  registers: [registry],
});

export const httpRequestSeconds = new client.Histogram({
  name: "eventide_http_request_duration_seconds",
  help: "Time from a request's arrival to its answer, by route",
  labelNames: ["route"] as const,
  buckets: requestSecondsBuckets,
  registers: [registry],
});

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

export const walGroupSeconds = new client.Histogram({
  name: "eventide_wal_fsync_duration_seconds",
  help: "Time to make one group commit of the write-ahead log durable (write and fdatasync)",
  buckets: fsyncSecondsBuckets,
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

/** Labelled children by "route status": prom-client hashes a label object on every call, a child skips that. */
const requestSeries = new Map<string, { count: client.Counter.Internal; seconds: client.Histogram.Internal<"route"> }>();

/** Counts one answered request; `startedAtMs` from performance.now(). Routes and statuses are fixed sets, so is the map. */
export function countRequest(route: string, status: string, startedAtMs: number): void {
  const key = `${route} ${status}`;
  let series = requestSeries.get(key);
  if (series === undefined) requestSeries.set(key, (series = { count: httpRequests.labels(route, status), seconds: httpRequestSeconds.labels(route) }));
  series.count.inc();
  series.seconds.observe((performance.now() - startedAtMs) / 1000);
}
