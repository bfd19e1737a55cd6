/**
 * The bench suite's command line: a profile (smoke, quick, full) sets every
 * default, and each option overrides one of them. Parsing is pure (argv in,
 * options or a usage error out), so the CLI entry and `npm run bench` share it.
 *
 * Estimate: the profiles are sized by their sums — quick ≈ 2 min (1 M events
 * loaded in ~7 s; 12 query steps and 8 ingest steps of 3 s; mixed 10 s; soak
 * 20 s), full ≈ 25 min with a 10-minute soak, smoke ≈ 15 s for CI. The
 * ClickHouse store adds its start (~4 s), the load and forwarding (~12 s for
 * 1 M events), its query table (6 × 1.5 s) and ~1.2 s per visibility sample:
 * ~45 s to quick, ~15 s to smoke.
 */
import { parseArgs } from "node:util";

export const scenarioNames = ["ingest-batch", "ingest-single", "ceiling", "queries", "duckdb", "clickhouse", "mixed", "soak"] as const;
export type ScenarioName = (typeof scenarioNames)[number];

export const queryKinds = ["trend", "trend-unique", "trend-filtered", "funnel-3", "funnel-5", "retention"] as const;
export type QueryKind = (typeof queryKinds)[number];

export const profileNames = ["smoke", "quick", "full"] as const;
export type ProfileName = (typeof profileNames)[number];

export interface DatasetChoice {
  events: number;
  users: number;
  days: number;
  seed: number;
  startDate: string;
}

export interface SuiteOptions {
  profile: ProfileName;
  scenarios: ScenarioName[];
  queries: QueryKind[];
  /** A running Eventide to measure; null: start one on a fresh data directory. */
  external: { queryUrl: string; ingestUrl: string; apiKey: string; token: string } | null;
  serverPid: number | undefined;
  /** EVENTIDE_WORKERS of the self-started server; undefined: its default (the core count). */
  workers: number | undefined;
  durationSeconds: number;
  warmupSeconds: number;
  batchConnections: number[];
  singleConnections: number[];
  queryConcurrency: number[];
  /** Ingest rates in events per second; 0 is a closed loop at the maximum. */
  ingestRates: number[];
  /** Query rates in requests per second; 0 is a closed loop at the maximum. */
  queryRates: number[];
  batchEvents: number;
  dataset: DatasetChoice;
  load: "auto" | "always" | "never";
  /** Restart the self-started server after loading the dataset, so its rows are sealed before queries. */
  restartAfterLoad: boolean;
  mixed: { seconds: number; ingestRate: number | "auto"; batchEvents: number; concurrency: number; queryRate: number };
  soak: { seconds: number; ingestRate: number | "auto"; batchEvents: number; concurrency: number; queryRate: number; sampleSeconds: number };
  duckdbSecondsPerQuery: number;
  /** The ClickHouse store beside the embedded one: time per query kind (both stores together), single events timed to visibility. */
  clickhouse: { secondsPerQuery: number; visibilitySamples: number };
  drainSeconds: number;
  loadProcesses: number;
  /** Directory for results.json, report.md and charts; undefined: a fresh one chosen at run time. */
  out: string | undefined;
  /** Compare mode: [old] (run, then compare) or [old, new] (compare only, no run). */
  compare: string[];
  /** Changes smaller than this (percent) are called noise in compare mode. */
  compareThresholdPercent: number;
  keepData: boolean;
}

type ProfileDefaults = Omit<SuiteOptions, "profile" | "external" | "serverPid" | "workers" | "out" | "compare" | "keepData" | "compareThresholdPercent" | "load" | "restartAfterLoad">;

const allScenarios = [...scenarioNames];
const allQueries = [...queryKinds];

export const profiles: Record<ProfileName, ProfileDefaults> = {
  smoke: {
    scenarios: allScenarios,
    queries: ["trend", "funnel-3", "retention"],
    durationSeconds: 1,
    warmupSeconds: 0.25,
    batchConnections: [2],
    singleConnections: [4],
    queryConcurrency: [2],
    ingestRates: [0],
    queryRates: [0],
    batchEvents: 200,
    dataset: { events: 20_000, users: 2_000, days: 14, seed: 1, startDate: "2024-01-01" },
    mixed: { seconds: 1.5, ingestRate: 2_000, batchEvents: 100, concurrency: 1, queryRate: 0 },
    soak: { seconds: 2, ingestRate: 2_000, batchEvents: 100, concurrency: 1, queryRate: 0, sampleSeconds: 0.5 },
    duckdbSecondsPerQuery: 0.25,
    clickhouse: { secondsPerQuery: 0.25, visibilitySamples: 3 },
    drainSeconds: 2,
    loadProcesses: 1,
  },
  quick: {
    scenarios: allScenarios,
    queries: allQueries,
    durationSeconds: 2.5,
    warmupSeconds: 0.5,
    batchConnections: [4, 16],
    singleConnections: [16, 64],
    queryConcurrency: [1, 4],
    ingestRates: [0],
    queryRates: [0],
    batchEvents: 1000,
    dataset: { events: 1_000_000, users: 100_000, days: 90, seed: 1, startDate: "2024-01-01" },
    mixed: { seconds: 10, ingestRate: "auto", batchEvents: 100, concurrency: 2, queryRate: 0 },
    soak: { seconds: 20, ingestRate: "auto", batchEvents: 100, concurrency: 1, queryRate: 0, sampleSeconds: 1 },
    duckdbSecondsPerQuery: 1.5,
    clickhouse: { secondsPerQuery: 1.5, visibilitySamples: 10 },
    drainSeconds: 5,
    loadProcesses: 1,
  },
  full: {
    scenarios: allScenarios,
    queries: allQueries,
    durationSeconds: 10,
    warmupSeconds: 2,
    batchConnections: [1, 4, 16, 64],
    singleConnections: [1, 16, 64, 256],
    queryConcurrency: [1, 2, 4, 8, 16],
    ingestRates: [0],
    queryRates: [0],
    batchEvents: 1000,
    dataset: { events: 10_000_000, users: 1_000_000, days: 90, seed: 1, startDate: "2024-01-01" },
    mixed: { seconds: 60, ingestRate: "auto", batchEvents: 100, concurrency: 4, queryRate: 0 },
    soak: { seconds: 600, ingestRate: "auto", batchEvents: 100, concurrency: 1, queryRate: 0, sampleSeconds: 5 },
    duckdbSecondsPerQuery: 10,
    clickhouse: { secondsPerQuery: 10, visibilitySamples: 40 },
    drainSeconds: 10,
    loadProcesses: 1,
  },
};

export class SuiteUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SuiteUsageError";
  }
}

export const usageText = `npm run bench -- [options]

Runs the benchmark suite against an Eventide it starts on a fresh data directory,
or against a running one, and writes results.json, report.md and SVG charts.

Target
  --query-url URL --ingest-url URL --api-key KEY --token TOKEN
                          measure a running Eventide (all four together)
  --server-pid PID        its process id, when it runs on this machine (CPU, RSS)
  --workers N             EVENTIDE_WORKERS of the server the suite starts

What to run
  --profile smoke|quick|full   defaults for everything below (default quick: ~2 min, ~3 with
                          the ClickHouse store; full: ~25 min with a 10-minute soak; smoke: ~15 s)
  --scenarios LIST        of ${scenarioNames.join(", ")}
                          (ceiling and duckdb are the peers: a bare uWS JSON.parse server
                          beside ingest, DuckDB on the same data beside queries;
                          clickhouse is the ClickHouse store beside the embedded one, on
                          when a clickhouse-server binary is found, skipped loudly if not)
  --skip LIST             scenarios to leave out
  --queries LIST          of ${queryKinds.join(", ")}

Load
  --duration-seconds S    measured time of each step (after its warm-up)
  --warmup-seconds S      unmeasured time before each step
  --connections LIST      connections for ingest-batch (e.g. 1,4,16,64)
  --single-connections LIST   connections for ingest-single
  --concurrency LIST      connections for the query steps
  --ingest-rate LIST      events/s per ingest step, open loop; "max" = closed loop (default)
  --query-rate LIST       queries/s per query step, open loop; "max" = closed loop (default)
  --batch-events N        events per batch in ingest-batch (1–1000)
  --load-processes N      generator processes per step (more if the generator saturates)
  --drain-seconds S       open loop: how long to wait for late answers before counting timeouts

Dataset (queries, duckdb, clickhouse, mixed and soak query it)
  --events N --users N --days N --seed N --start-date YYYY-MM-DD
  --load auto|always|never    load the dataset into the target (auto: unless a count shows it is there)
  --no-restart            keep the self-started server running after the load (by default it is
                          restarted, which seals the loaded rows as a long-running server's checkpoint would)

Mixed and soak
  --mixed-seconds S  --mixed-ingest-rate EVENTS_PER_S|auto  --mixed-concurrency N  --mixed-query-rate Q|max
  --soak-seconds S   --soak-ingest-rate EVENTS_PER_S|auto   --soak-concurrency N   --sample-seconds S
  --duckdb-seconds S      time budget per query kind for the DuckDB peer

ClickHouse store (a private clickhouse-server and a second Eventide on it; the binary is
EVENTIDE_TEST_CLICKHOUSE_SERVER, else the first of /usr/bin, /usr/sbin, /usr/local/bin)
  --clickhouse-seconds S  time budget per query kind, both stores asked in turn
  --visibility-samples N  single events timed from their 200 until a trend query counts them

Results
  --out DIR               where to write (default bench/results/suite/<time> in the repo, else ./eventide-bench/<time>)
  --compare OLD.json [NEW.json]   after the run (or instead of it, given two files) print the change per figure
  --compare-threshold P   changes below P % are reported as noise (default 5)
  --keep-data             keep the self-started server's data directory
  --help
`;

function positive(name: string, raw: string, { integer = false, allowZero = false } = {}): number {
  const value = Number(raw.replaceAll("_", ""));
  const valid = Number.isFinite(value) && (allowZero ? value >= 0 : value > 0) && (!integer || Number.isSafeInteger(value));
  if (!valid) throw new SuiteUsageError(`--${name} must be a ${allowZero ? "non-negative" : "positive"} ${integer ? "integer" : "number"}, got ${JSON.stringify(raw)}`);
  return value;
}

function integerList(name: string, raw: string): number[] {
  const parts = raw.split(",").map((part) => part.trim()).filter((part) => part !== "");
  if (parts.length === 0) throw new SuiteUsageError(`--${name} needs at least one value`);
  return parts.map((part) => positive(name, part, { integer: true }));
}

/** "max" (closed loop) → 0; numbers are open-loop rates. */
function rateList(name: string, raw: string): number[] {
  const parts = raw.split(",").map((part) => part.trim()).filter((part) => part !== "");
  if (parts.length === 0) throw new SuiteUsageError(`--${name} needs at least one value`);
  return parts.map((part) => (part === "max" ? 0 : positive(name, part)));
}

function rateOrAuto(name: string, raw: string): number | "auto" {
  return raw === "auto" ? "auto" : positive(name, raw);
}

function nameList<T extends string>(name: string, raw: string, known: readonly T[]): T[] {
  const parts = raw.split(",").map((part) => part.trim()).filter((part) => part !== "");
  for (const part of parts) if (!(known as readonly string[]).includes(part)) throw new SuiteUsageError(`--${name}: unknown ${JSON.stringify(part)} (known: ${known.join(", ")})`);
  return parts as T[];
}

/** Parses argv into options; `{ help: true }` when help was asked for. Throws SuiteUsageError on a bad invocation. */
export function parseSuiteOptions(argv: readonly string[]): SuiteOptions | { help: true } {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      strict: true,
      options: {
        profile: { type: "string" },
        scenarios: { type: "string" },
        skip: { type: "string" },
        queries: { type: "string" },
        "query-url": { type: "string" },
        "ingest-url": { type: "string" },
        "api-key": { type: "string" },
        token: { type: "string" },
        "server-pid": { type: "string" },
        workers: { type: "string" },
        "duration-seconds": { type: "string" },
        "warmup-seconds": { type: "string" },
        connections: { type: "string" },
        "single-connections": { type: "string" },
        concurrency: { type: "string" },
        "ingest-rate": { type: "string" },
        "query-rate": { type: "string" },
        "batch-events": { type: "string" },
        "load-processes": { type: "string" },
        "drain-seconds": { type: "string" },
        events: { type: "string" },
        users: { type: "string" },
        days: { type: "string" },
        seed: { type: "string" },
        "start-date": { type: "string" },
        load: { type: "string" },
        "mixed-seconds": { type: "string" },
        "mixed-ingest-rate": { type: "string" },
        "mixed-concurrency": { type: "string" },
        "mixed-query-rate": { type: "string" },
        "soak-seconds": { type: "string" },
        "soak-ingest-rate": { type: "string" },
        "soak-concurrency": { type: "string" },
        "sample-seconds": { type: "string" },
        "duckdb-seconds": { type: "string" },
        "clickhouse-seconds": { type: "string" },
        "visibility-samples": { type: "string" },
        out: { type: "string" },
        compare: { type: "string" },
        "compare-threshold": { type: "string" },
        "keep-data": { type: "boolean" },
        "no-restart": { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    throw new SuiteUsageError((error as Error).message);
  }
  const { values, positionals } = parsed;
  if (values.help) return { help: true };

  const profile = (values.profile ?? "quick") as ProfileName;
  if (!profileNames.includes(profile)) throw new SuiteUsageError(`--profile must be one of ${profileNames.join(", ")}, got ${JSON.stringify(values.profile)}`);
  const defaults = profiles[profile];

  const compare = values.compare === undefined ? [] : [values.compare, ...positionals];
  if (compare.length > 2) throw new SuiteUsageError(`--compare takes one or two files, got ${compare.length}`);
  if (compare.length === 0 && positionals.length > 0) throw new SuiteUsageError(`unexpected argument ${JSON.stringify(positionals[0])}`);

  const externalParts = [values["query-url"], values["ingest-url"], values["api-key"], values.token];
  const givenParts = externalParts.filter((part) => part !== undefined).length;
  if (givenParts !== 0 && givenParts !== 4) throw new SuiteUsageError("a running Eventide needs all of --query-url, --ingest-url, --api-key and --token");
  const external =
    givenParts === 4 ? { queryUrl: values["query-url"]!, ingestUrl: values["ingest-url"]!, apiKey: values["api-key"]!, token: values.token! } : null;
  if (external !== null) {
    for (const url of [external.queryUrl, external.ingestUrl]) {
      let parsedUrl: URL;
      try {
        parsedUrl = new URL(url);
      } catch {
        throw new SuiteUsageError(`not a URL: ${JSON.stringify(url)}`);
      }
      if (parsedUrl.protocol !== "http:") throw new SuiteUsageError(`only http:// targets are supported (the generator speaks plain HTTP/1.1), got ${url}`);
    }
  }
  if (external !== null && values.workers !== undefined) throw new SuiteUsageError("--workers applies only to the server the suite starts");

  let scenarios = values.scenarios === undefined ? [...defaults.scenarios] : nameList("scenarios", values.scenarios, scenarioNames);
  if (values.skip !== undefined) {
    const skip = nameList("skip", values.skip, scenarioNames);
    scenarios = scenarios.filter((scenario) => !skip.includes(scenario));
  }
  // Keep the suite's own order whatever order they were given in.
  scenarios = scenarioNames.filter((scenario) => scenarios.includes(scenario));
  const queries = values.queries === undefined ? [...defaults.queries] : nameList("queries", values.queries, queryKinds);
  if (queries.length === 0 && scenarios.some((scenario) => scenario === "queries" || scenario === "duckdb" || scenario === "clickhouse" || scenario === "mixed")) {
    throw new SuiteUsageError("--queries is empty but a query scenario is selected");
  }

  const load = (values.load ?? "auto") as SuiteOptions["load"];
  if (!["auto", "always", "never"].includes(load)) throw new SuiteUsageError(`--load must be auto, always or never, got ${JSON.stringify(values.load)}`);
  const startDate = values["start-date"] ?? defaults.dataset.startDate;
  if (!/^\d{4}-\d{2}-\d{2}$/.test(startDate) || Number.isNaN(Date.parse(`${startDate}T00:00:00Z`))) throw new SuiteUsageError(`--start-date must be YYYY-MM-DD, got ${startDate}`);
  const batchEvents = values["batch-events"] === undefined ? defaults.batchEvents : positive("batch-events", values["batch-events"], { integer: true });
  if (batchEvents > 1000) throw new SuiteUsageError("--batch-events is at most 1000 (SPEC §6)");

  const pick = <T>(raw: string | undefined, fallback: T, parse: (text: string) => T): T => (raw === undefined ? fallback : parse(raw));
  const options: SuiteOptions = {
    profile,
    scenarios,
    queries,
    external,
    serverPid: pick(values["server-pid"], undefined as number | undefined, (text) => positive("server-pid", text, { integer: true })),
    workers: pick(values.workers, undefined as number | undefined, (text) => positive("workers", text, { integer: true })),
    durationSeconds: pick(values["duration-seconds"], defaults.durationSeconds, (text) => positive("duration-seconds", text)),
    warmupSeconds: pick(values["warmup-seconds"], defaults.warmupSeconds, (text) => positive("warmup-seconds", text, { allowZero: true })),
    batchConnections: pick(values.connections, defaults.batchConnections, (text) => integerList("connections", text)),
    singleConnections: pick(values["single-connections"], defaults.singleConnections, (text) => integerList("single-connections", text)),
    queryConcurrency: pick(values.concurrency, defaults.queryConcurrency, (text) => integerList("concurrency", text)),
    ingestRates: pick(values["ingest-rate"], defaults.ingestRates, (text) => rateList("ingest-rate", text)),
    queryRates: pick(values["query-rate"], defaults.queryRates, (text) => rateList("query-rate", text)),
    batchEvents,
    dataset: {
      events: pick(values.events, defaults.dataset.events, (text) => positive("events", text, { integer: true })),
      users: pick(values.users, defaults.dataset.users, (text) => positive("users", text, { integer: true })),
      days: pick(values.days, defaults.dataset.days, (text) => positive("days", text, { integer: true })),
      seed: pick(values.seed, defaults.dataset.seed, (text) => positive("seed", text, { integer: true, allowZero: true })),
      startDate,
    },
    load,
    restartAfterLoad: !(values["no-restart"] ?? false),
    mixed: {
      seconds: pick(values["mixed-seconds"], defaults.mixed.seconds, (text) => positive("mixed-seconds", text)),
      ingestRate: pick(values["mixed-ingest-rate"], defaults.mixed.ingestRate, (text) => rateOrAuto("mixed-ingest-rate", text)),
      batchEvents: defaults.mixed.batchEvents,
      concurrency: pick(values["mixed-concurrency"], defaults.mixed.concurrency, (text) => positive("mixed-concurrency", text, { integer: true })),
      queryRate: pick(values["mixed-query-rate"], defaults.mixed.queryRate, (text) => rateList("mixed-query-rate", text)[0]),
    },
    soak: {
      seconds: pick(values["soak-seconds"], defaults.soak.seconds, (text) => positive("soak-seconds", text)),
      ingestRate: pick(values["soak-ingest-rate"], defaults.soak.ingestRate, (text) => rateOrAuto("soak-ingest-rate", text)),
      batchEvents: defaults.soak.batchEvents,
      concurrency: pick(values["soak-concurrency"], defaults.soak.concurrency, (text) => positive("soak-concurrency", text, { integer: true })),
      queryRate: defaults.soak.queryRate,
      sampleSeconds: pick(values["sample-seconds"], defaults.soak.sampleSeconds, (text) => positive("sample-seconds", text)),
    },
    duckdbSecondsPerQuery: pick(values["duckdb-seconds"], defaults.duckdbSecondsPerQuery, (text) => positive("duckdb-seconds", text)),
    clickhouse: {
      secondsPerQuery: pick(values["clickhouse-seconds"], defaults.clickhouse.secondsPerQuery, (text) => positive("clickhouse-seconds", text)),
      visibilitySamples: pick(values["visibility-samples"], defaults.clickhouse.visibilitySamples, (text) => positive("visibility-samples", text, { integer: true })),
    },
    drainSeconds: pick(values["drain-seconds"], defaults.drainSeconds, (text) => positive("drain-seconds", text, { allowZero: true })),
    loadProcesses: pick(values["load-processes"], defaults.loadProcesses, (text) => positive("load-processes", text, { integer: true })),
    out: values.out,
    compare,
    compareThresholdPercent: pick(values["compare-threshold"], 5, (text) => positive("compare-threshold", text, { allowZero: true })),
    keepData: values["keep-data"] ?? false,
  };
  return options;
}
