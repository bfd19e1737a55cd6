/**
 * The shape of a suite run's results.json, and the flat list of figures that
 * compare mode matches between two runs. Every number the report or a chart
 * shows comes from here, so the JSON file alone reproduces both.
 *
 * Figure keys are stable strings built from what was measured
 * (`ingest-batch/eventide/c16/events_per_s`), so two runs with different
 * scenario selections still compare on what they share.
 *
 * Estimate: a quick run yields ~150 figures and a ~200 KB JSON file (the
 * per-second timelines dominate); collecting figures is a few loops.
 */
import type { MachineInfo } from "../runner/machine.js";
import type { QueryKind, SuiteOptions } from "./options.js";
import type { LatencySummary } from "../runner/stats.js";

export const resultsFormat = "eventide-bench-suite/1";

export interface StepCpu {
  /** All generator processes together, percent of one core. */
  generatorPercent: number;
  generatorPerProcessPercent: number[];
  /** True when a generator process neared a full core or fell behind its open-loop schedule. */
  generatorSaturated: boolean;
  /** NaN (null in JSON) when the server's pid is unknown. */
  serverPercent: number;
  driverPercent: number;
  /** The rest of the machine: other people's work, the kernel. High values mean a noisy figure. */
  othersPercent: number;
}

export interface TimelinePoint {
  /** End of the interval, seconds since the step's measurement window opened (negative in the warm-up). */
  seconds: number;
  requestsPerSecond: number;
  eventsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
}

export interface LoadRunBase {
  connections: number;
  mode: "closed" | "open";
  /** Open loop: requests per second asked for. */
  targetRequestsPerSecond: number | null;
  requestsPerSecond: number;
  /** From the intended send time in an open loop (coordinated omission corrected), from the send otherwise. */
  latencyMs: LatencySummary;
  /** From the actual send: the server's time alone. */
  serviceLatencyMs: LatencySummary;
  /** Open loop: how late the generator itself sent requests (its own lag, not the server's). */
  schedulerLagP99Ms: number;
  requests: number;
  /** Non-2xx answers, socket errors and timeouts. */
  errors: number;
  statusCounts: Record<string, number>;
  timedOut: number;
  cpu: StepCpu;
  timeline: TimelinePoint[];
}

export interface IngestRun extends LoadRunBase {
  scenario: "ingest-batch" | "ingest-single";
  server: "eventide" | "ceiling";
  eventsPerBody: number;
  /** Open loop: events per second asked for. */
  targetEventsPerSecond: number | null;
  eventsPerSecond: number;
}

export interface QueryRun extends LoadRunBase {
  query: QueryKind;
  /** Distinct request bodies cycled through (retention varies its question to dodge the 60 s cache). */
  distinctRequests: number;
  /** Estimated share of answers that may have come from the retention cache. */
  cachedShareEstimate: number;
}

export interface DuckdbRun {
  query: QueryKind;
  runs: number;
  latencyMs: LatencySummary;
  /** Whether Eventide's answer to the first variant equals DuckDB's (null when not checked). */
  answersMatch: boolean | null;
  difference?: string;
}

export interface DuckdbResult {
  version: string;
  threads: number;
  loadSeconds: number;
  runs: DuckdbRun[];
}

/** One query kind asked of both stores in turn, one at a time, the same requests in the same order. */
export interface ClickHouseQueryRun {
  query: QueryKind;
  /** Timed requests per store (after one warm-up each). */
  runs: number;
  embeddedMs: LatencySummary;
  clickhouseMs: LatencySummary;
  /** Answers compared (every timed pair, and the warm-ups); null when the embedded store holds other data. */
  answersCompared: number | null;
  answersDiffering: number;
  /** The first difference found, with the request it answered. */
  difference?: string;
  /** Estimated share of the embedded store's answers that may have come from the retention cache (ClickHouse's front end is fresh). */
  cachedShareEstimate: number;
}

/** What a store-side process used over a window: percent of one core. */
export interface StoreCpu {
  eventidePercent: number;
  clickhousePercent: number;
  /** The rest of the machine (other people's work): high values mean noisy figures. */
  othersPercent: number;
}

/** The clickhouse scenario: measured; skipped (no binary) or failed, with the reason shown loudly. */
export type ClickHouseResult =
  | { state: "skipped" | "failed"; reason: string }
  | {
      state: "measured";
      /** SELECT version() of the private server. */
      version: string;
      events: number;
      /** The same loader (1 000-event batches, 4 in flight) on the same rows; null when this run did not load the embedded store. */
      embeddedIngestEventsPerSecond: number | null;
      ingest: { seconds: number; eventsPerSecond: number; retries: number };
      /** From the load's first request until ClickHouse held every row. */
      forward: { seconds: number; eventsPerSecond: number; lagAfterLastAckSeconds: number };
      /** Over the load and the forwarding: the ClickHouse store's Eventide and the ClickHouse server. */
      cpu: StoreCpu;
      /** ms from a single event's 200 until a trend query counts it. */
      visibility: { samples: number; clickhouseMs: LatencySummary; embeddedMs: LatencySummary };
      queries: ClickHouseQueryRun[];
    };

export interface MixedQueryKind {
  query: QueryKind;
  requests: number;
  requestsPerSecond: number;
  latencyMs: LatencySummary;
  /** The same kind alone at the nearest concurrency of the queries scenario, for comparison. */
  idleLatencyMs: LatencySummary | null;
  idleConnections: number | null;
  /** Estimated share of answers that may have come from the retention cache. */
  cachedShareEstimate: number;
}

export interface MixedSample {
  seconds: number;
  ingestEventsPerSecond: number;
  ingestP99Ms: number;
  queriesPerSecond: number;
  queryP50Ms: number;
  queryP99Ms: number;
  /** Server resident memory at the end of the interval; NaN when unknown. */
  rssMiB: number;
  serverCpuPercent: number;
  othersCpuPercent: number;
  errors: number;
}

export interface MixedResult {
  seconds: number;
  ingest: {
    targetEventsPerSecond: number;
    eventsPerSecond: number;
    batchEvents: number;
    latencyMs: LatencySummary;
    serviceLatencyMs: LatencySummary;
    errors: number;
    timedOut: number;
  };
  queries: {
    connections: number;
    mode: "closed" | "open";
    requestsPerSecond: number;
    latencyMs: LatencySummary;
    errors: number;
    byKind: MixedQueryKind[];
  };
  cpu: StepCpu;
  samples: MixedSample[];
}

export interface SoakResult extends MixedResult {
  sampleSeconds: number;
  summary: {
    /** Means over the first and the last tenth of the run (at least one sample each). */
    ingestEventsPerSecondFirst: number;
    ingestEventsPerSecondLast: number;
    queryP99MsFirst: number;
    queryP99MsLast: number;
    rssMiBStart: number;
    rssMiBEnd: number;
    rssMiBPeak: number;
    /** Least-squares slope of RSS over the run. */
    rssGrowthMiBPerMinute: number;
  };
}

export interface Figure {
  key: string;
  label: string;
  value: number;
  unit: string;
  better: "higher" | "lower";
}

export interface SuiteResults {
  format: typeof resultsFormat;
  startedAt: string;
  finishedAt: string;
  wallSeconds: number;
  machine: MachineInfo;
  target: { kind: "self-started" | "external"; queryUrl: string; ingestUrl: string; serverPid: number | null; workers: number | null };
  /** The options of the run, credentials removed. */
  options: Omit<SuiteOptions, "external"> & { external: { queryUrl: string; ingestUrl: string } | null };
  dataset: {
    events: number;
    users: number;
    days: number;
    seed: number;
    startDate: string;
    /** loaded; already-there (auto found it); not-loaded (--load never, or auto found other data); not-needed. */
    action: "loaded" | "already-there" | "not-loaded" | "not-needed";
    loadSeconds: number | null;
    loadEventsPerSecond: number | null;
    loadRetries: number | null;
  };
  ingest: IngestRun[];
  queries: QueryRun[];
  duckdb: DuckdbResult | null;
  /** Absent in files written before the scenario existed. */
  clickhouse?: ClickHouseResult | null;
  mixed: MixedResult | null;
  soak: SoakResult | null;
  server: {
    rssMiBAtEnd: number;
    peakRssMiB: number;
    /** Self-started: bytes on disk after stop, over the events acknowledged. */
    diskBytes: number | null;
    acknowledgedEvents: number;
    diskBytesPerEvent: number | null;
    stopSeconds: number | null;
    stopExitCode: number | null;
  };
  noise: { othersCpuPercentMean: number; othersCpuPercentMax: number; loadAverageAtEnd: number[] };
  warnings: string[];
  figures: Figure[];
}

// ---------------------------------------------------------------------------
// Figures.

function runKey(connections: number, targetPerSecond: number | null): string {
  return `c${connections}${targetPerSecond === null ? "" : `/r${Math.round(targetPerSecond)}`}`;
}

function runLabel(connections: number, targetPerSecond: number | null, unit: string): string {
  return `${connections} conn${targetPerSecond === null ? "" : `, open loop ${Math.round(targetPerSecond)} ${unit}`}`;
}

/** Every figure of a run, flat. NaN values are left out (nothing to compare). */
export function collectFigures(results: Omit<SuiteResults, "figures">): Figure[] {
  const figures: Figure[] = [];
  const add = (key: string, label: string, value: number, unit: string, better: Figure["better"]) => {
    if (Number.isFinite(value)) figures.push({ key, label, value, unit, better });
  };
  for (const run of results.ingest) {
    const key = `${run.scenario}/${run.server}/${runKey(run.connections, run.targetEventsPerSecond)}`;
    const label = `${run.scenario} ${run.server} (${runLabel(run.connections, run.targetEventsPerSecond, "events/s")})`;
    add(`${key}/events_per_s`, `${label} events/s`, run.eventsPerSecond, "events/s", "higher");
    add(`${key}/p50_ms`, `${label} p50`, run.latencyMs.p50, "ms", "lower");
    add(`${key}/p99_ms`, `${label} p99`, run.latencyMs.p99, "ms", "lower");
    if (run.server === "eventide") {
      const peer = results.ingest.find(
        (other) => other.server === "ceiling" && other.scenario === run.scenario && other.connections === run.connections && other.targetEventsPerSecond === run.targetEventsPerSecond,
      );
      if (peer !== undefined) add(`${key}/share_of_ceiling`, `${label} share of the uWS ceiling`, (run.eventsPerSecond / peer.eventsPerSecond) * 100, "%", "higher");
    }
  }
  for (const run of results.queries) {
    const key = `query/${run.query}/${runKey(run.connections, run.targetRequestsPerSecond)}`;
    const label = `${run.query} (${runLabel(run.connections, run.targetRequestsPerSecond, "q/s")})`;
    add(`${key}/queries_per_s`, `${label} queries/s`, run.requestsPerSecond, "q/s", "higher");
    add(`${key}/p50_ms`, `${label} p50`, run.latencyMs.p50, "ms", "lower");
    add(`${key}/p95_ms`, `${label} p95`, run.latencyMs.p95, "ms", "lower");
    add(`${key}/p99_ms`, `${label} p99`, run.latencyMs.p99, "ms", "lower");
  }
  if (results.duckdb !== null) {
    for (const run of results.duckdb.runs) {
      add(`duckdb/${run.query}/p50_ms`, `DuckDB ${run.query} p50`, run.latencyMs.p50, "ms", "lower");
      const eventide = firstConcurrencyRun(results.queries, run.query);
      if (eventide !== undefined) add(`query/${run.query}/eventide_over_duckdb`, `${run.query} Eventide p50 ÷ DuckDB p50`, eventide.latencyMs.p50 / run.latencyMs.p50, "×", "lower");
    }
  }
  const clickhouse = results.clickhouse;
  if (clickhouse?.state === "measured") {
    add("clickhouse/ingest/events_per_s", "ClickHouse store: dataset load events/s acknowledged (4 batches in flight)", clickhouse.ingest.eventsPerSecond, "events/s", "higher");
    if (clickhouse.embeddedIngestEventsPerSecond !== null) {
      add("clickhouse/ingest/over_embedded", "ClickHouse store: load events/s ÷ the embedded store's", clickhouse.ingest.eventsPerSecond / clickhouse.embeddedIngestEventsPerSecond, "×", "higher");
    }
    add("clickhouse/forward/events_per_s", "ClickHouse store: events/s until ClickHouse held them all", clickhouse.forward.eventsPerSecond, "events/s", "higher");
    add("clickhouse/visibility/p50_ms", "ClickHouse store: visibility delay p50 (200 → counted)", clickhouse.visibility.clickhouseMs.p50, "ms", "lower");
    add("clickhouse/visibility/p95_ms", "ClickHouse store: visibility delay p95 (200 → counted)", clickhouse.visibility.clickhouseMs.p95, "ms", "lower");
    for (const run of clickhouse.queries) {
      add(`clickhouse/${run.query}/p50_ms`, `ClickHouse store: ${run.query} p50`, run.clickhouseMs.p50, "ms", "lower");
      add(`clickhouse/${run.query}/embedded_p50_ms`, `ClickHouse scenario: ${run.query} p50 on the embedded store (asked in turn)`, run.embeddedMs.p50, "ms", "lower");
      add(`clickhouse/${run.query}/over_embedded`, `${run.query} ClickHouse p50 ÷ embedded p50`, run.clickhouseMs.p50 / run.embeddedMs.p50, "×", "lower");
    }
  }
  for (const [name, mixed] of [["mixed", results.mixed], ["soak", results.soak]] as const) {
    if (mixed === null) continue;
    add(`${name}/ingest/events_per_s`, `${name}: ingest events/s (target ${Math.round(mixed.ingest.targetEventsPerSecond)})`, mixed.ingest.eventsPerSecond, "events/s", "higher");
    add(`${name}/ingest/p99_ms`, `${name}: ingest p99`, mixed.ingest.latencyMs.p99, "ms", "lower");
    add(`${name}/queries/queries_per_s`, `${name}: queries/s`, mixed.queries.requestsPerSecond, "q/s", "higher");
    add(`${name}/queries/p50_ms`, `${name}: query p50 (all kinds)`, mixed.queries.latencyMs.p50, "ms", "lower");
    add(`${name}/queries/p95_ms`, `${name}: query p95 (all kinds)`, mixed.queries.latencyMs.p95, "ms", "lower");
    add(`${name}/queries/p99_ms`, `${name}: query p99 (all kinds)`, mixed.queries.latencyMs.p99, "ms", "lower");
    if (name === "mixed") {
      for (const kind of mixed.queries.byKind) {
        add(`mixed/${kind.query}/p50_ms`, `mixed: ${kind.query} p50 under ingest`, kind.latencyMs.p50, "ms", "lower");
        add(`mixed/${kind.query}/p99_ms`, `mixed: ${kind.query} p99 under ingest`, kind.latencyMs.p99, "ms", "lower");
      }
    }
  }
  if (results.soak !== null) {
    const summary = results.soak.summary;
    add("soak/rss_end_mib", "soak: server RSS at the end", summary.rssMiBEnd, "MiB", "lower");
    add("soak/rss_growth_mib_per_min", "soak: server RSS growth", summary.rssGrowthMiBPerMinute, "MiB/min", "lower");
    add("soak/ingest_last_over_first", "soak: ingest rate, last tenth ÷ first tenth", summary.ingestEventsPerSecondLast / summary.ingestEventsPerSecondFirst, "×", "higher");
  }
  if (results.dataset.loadEventsPerSecond !== null) add("dataset/load_events_per_s", "dataset load events/s (4 batches in flight)", results.dataset.loadEventsPerSecond, "events/s", "higher");
  add("server/peak_rss_mib", "server peak RSS", results.server.peakRssMiB, "MiB", "lower");
  if (results.server.diskBytesPerEvent !== null) add("server/disk_bytes_per_event", "bytes on disk per stored event", results.server.diskBytesPerEvent, "B", "lower");
  return figures;
}

/** The query kind's run at the lowest concurrency (closed loop first): the latency one user sees. */
export function firstConcurrencyRun(runs: readonly QueryRun[], query: QueryKind): QueryRun | undefined {
  return runs
    .filter((run) => run.query === query)
    .sort((left, right) => Number(left.mode === "open") - Number(right.mode === "open") || left.connections - right.connections)[0];
}
