/**
 * Query benchmark (`npm run bench:query`): loads a seeded dataset
 * (bench/fixtures/dataset.ts) into a real Eventide process over HTTP and into
 * an in-process DuckDB table, then times the same trend, funnel and retention
 * questions on both, checks that every answer is identical (and, on small
 * datasets, identical to a plain reference implementation of SPEC §4), and
 * reports medians, p95s, the Eventide/DuckDB ratio and Eventide's memory.
 *
 * Estimate at 10 M events, 1 M users, 90 days (~5 M $pageviews, ~55 k per day):
 * - trend: a day's $pageviews are one run of a segment's event column; counting
 *   5 M rows at ~1 ns per row (one byte compare) is ~5 ms on one core, ~3 ms
 *   on two, plus ~0.2 ms of HTTP. Target ≤ 5 ms.
 * - filtered trend (country = US, ~34 %): one more byte load per row through a
 *   dictionary-compiled filter, ~2× the plain trend. Target ≤ 10 ms.
 * - unique trend: distinct users per day need a bitmap or hash set per bucket,
 *   ~5 M inserts at ~2 ns (bitmap) … 20 ns (hash): 10–100 ms. Target ≤ 10 ms.
 * - funnel, 5 steps, one-day window: every user's entries and later steps,
 *   ~6 M rows touched, grouped by user; at ~20 ns per row ~120 ms on one core.
 *   Target ≤ 150 ms. DuckDB's ASOF chain: ~1.7 s here (one join per step).
 * - retention, 13 weekly periods: per-user first cohort period plus a period
 *   bitmap per user, ~5 M rows at ~2 ns: ~10 ms. Target ≤ 10 ms; DuckDB ~0.4 s.
 * Loading: JSON bodies of ~190 B per event (~1.9 GB at 10 M); Eventide ingests
 * ~250–400 k events/s on 2 cores, so ~30–40 s at 10 M and ~2.5 min at 50 M.
 *
 * Retention answers may be cached for 60 s per identical request (SPEC §4),
 * so every retention run asks a different question of the same shape: 13
 * weekly periods from a dateFrom shifted by one day per run. DuckDB answers the
 * same list. Before any timing, the DuckDB SQL is checked against the SPEC §5
 * worked example, hand cases and random data (./self-check.ts).
 *
 * Every Eventide request goes over one keep-alive connection that sits idle
 * while DuckDB and the (synchronous) reference answer; the shared client
 * (../runner/http-client.ts) resends a query whose idle connection the server
 * had closed meanwhile, and the summary counts those resends.
 *
 * Eventide is restarted (SIGTERM, then start over the same data) between
 * loading and querying: shutdown seals every segment, so queries see the
 * steady state of a store whose history is sealed, not a checkpoint that
 * might fire in the middle of the timings; the RSS reported after queries is
 * then the query path's own.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import { generateDataset, type Dataset } from "../fixtures/dataset.js";
import { keepAliveAgent, post } from "../runner/http-client.js";
import { commandLine, machineInfo, serverCommitOf, processCpuMs, processMemoryBytes } from "../runner/machine.js";
import { writeDatedReport } from "../runner/report-file.js";
import { startEventide } from "../runner/server.js";
import { formatCount, formatMarkdownTable, formatMs, formatTextTable, median, percentileOfSorted, sortedCopy } from "../runner/stats.js";
import { loadDataset, type DatasetLoadReport } from "../suite/dataset-load.js";
import { DuckDbEngine } from "./duckdb-engine.js";
import { addDays, datasetEvents, firstDifference, referenceAnswer, type QueryAnswer, type QueryRequest } from "./query-request.js";
import { runRandomArrival } from "./random-arrival.js";
import { runSelfCheck } from "./self-check.js";

const repositoryRoot = resolve(import.meta.dirname, "..", "..", "..");

interface Options {
  eventCounts: number[];
  userCount: number;
  dayCount: number;
  seed: number;
  runs: number;
  warmup: number;
  inflight: number;
  startDate: string;
  ingestOrder: "shuffled-batches" | "time";
  out: string;
  restartBeforeQueries: boolean;
  referenceMaxEvents: number;
  only: string[];
  keepData: boolean;
  /** Another checkout whose built server is timed (`--server-root`); undefined: this one. */
  serverRoot: string | undefined;
  /** This machine's cores, for the notes; filled in once the machine is read. */
  cores: number;
}

function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      events: { type: "string", default: "10000000" },
      users: { type: "string", default: "1000000" },
      days: { type: "string", default: "90" },
      seed: { type: "string", default: "1" },
      runs: { type: "string", default: "10" },
      warmup: { type: "string", default: "2" },
      inflight: { type: "string", default: "4" },
      "start-date": { type: "string", default: "2024-01-01" },
      "ingest-order": { type: "string", default: "shuffled-batches" },
      out: { type: "string", default: "bench/results/query-latest.json" },
      "no-restart": { type: "boolean", default: false },
      "reference-max-events": { type: "string", default: "2000000" },
      only: { type: "string", default: "" },
      "keep-data": { type: "boolean", default: false },
      "server-root": { type: "string", default: "" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(
      "npm run bench:query -- [--events 10000000[,50000000…]] [--users 1000000] [--days 90] [--seed 1] [--runs 10] [--warmup 2]\n" +
        "  [--inflight 4] [--start-date 2024-01-01] [--ingest-order shuffled-batches|time] [--out bench/results/query-latest.json]\n" +
        "  [--no-restart] [--reference-max-events 2000000] [--only trend,funnel-5,…] [--keep-data] [--server-root DIR]\n" +
        "--events takes a comma-separated list: each size is a full run (fresh Eventide, fresh DuckDB table), and the\n" +
        "summary shows how each time grows with the event count.\n" +
        "--server-root starts the server built in another checkout (its dist/src/main.js), to time two commits with one harness.\n",
    );
    process.exit(0);
  }
  const integer = (name: string, raw: string, minimum: number): number => {
    const value = Number(raw.replaceAll("_", ""));
    if (!Number.isSafeInteger(value) || value < minimum) throw new Error(`--${name} must be an integer ≥ ${minimum}, got ${raw}`);
    return value;
  };
  const ingestOrder = values["ingest-order"];
  if (ingestOrder !== "shuffled-batches" && ingestOrder !== "time") throw new Error(`--ingest-order must be shuffled-batches or time, got ${ingestOrder}`);
  return {
    eventCounts: values.events.split(",").map((part) => integer("events", part.trim(), 1)),
    userCount: integer("users", values.users, 1),
    dayCount: integer("days", values.days, 1),
    seed: integer("seed", values.seed, 0),
    runs: integer("runs", values.runs, 1),
    warmup: integer("warmup", values.warmup, 0),
    inflight: integer("inflight", values.inflight, 1),
    startDate: values["start-date"],
    ingestOrder,
    out: resolve(values.out),
    restartBeforeQueries: !values["no-restart"],
    referenceMaxEvents: integer("reference-max-events", values["reference-max-events"], 0),
    only: values.only === "" ? [] : values.only.split(",").map((part) => part.trim()),
    keepData: values["keep-data"],
    serverRoot: values["server-root"] === "" ? undefined : resolve(values["server-root"]),
    cores: 0,
  };
}

// ---------------------------------------------------------------------------
// The questions.

interface QuerySpec {
  name: string;
  /** Target for Eventide's median at 10 M events, ms; undefined when none was set. */
  targetMs: number | undefined;
  /** The request of run `index` (warm-up runs first); only retention varies, to stay uncached. */
  request: (index: number) => QueryRequest;
  varies: boolean;
}

function querySpecs(dataset: Dataset): QuerySpec[] {
  const dateFrom = dataset.options.startDate;
  const dateTo = addDays(dateFrom, dataset.options.dayCount - 1);
  const constant = (name: string, targetMs: number | undefined, request: QueryRequest): QuerySpec => ({ name, targetMs, request: () => request, varies: false });
  const retention = (name: string, targetMs: number | undefined, cohortEvent: string, retentionEvent: string): QuerySpec => ({
    name,
    targetMs,
    // 13 weekly periods from a dateFrom one day later per run: same shape, never the same request.
    request: (index) => ({ kind: "retention", body: { cohortEvent, retentionEvent, dateFrom: addDays(dateFrom, index), dateTo: addDays(dateFrom, index + 13 * 7 - 1), windowDays: 7 } }),
    varies: true,
  });
  const trendBody = { event: "$pageview", dateFrom, dateTo, groupBy: "day" as const, filters: [], math: "total" as const };
  const funnel5 = ["$pageview", "signup", "activate", "add_to_cart", "purchase"];
  return [
    constant("trend", 5, { kind: "trend", body: trendBody }),
    constant("trend-filter-eq", 10, { kind: "trend", body: { ...trendBody, filters: [{ property: "country", op: "eq", value: "US" }] } }),
    constant("trend-unique", 10, { kind: "trend", body: { ...trendBody, math: "unique" } }),
    constant("trend-filter-number", undefined, { kind: "trend", body: { ...trendBody, event: "purchase", filters: [{ property: "price", op: "gte", value: "49" }] } }),
    constant("funnel-3", undefined, { kind: "funnel", body: { steps: funnel5.slice(0, 3), dateFrom, dateTo, conversionWindow: 86_400 } }),
    constant("funnel-5", 150, { kind: "funnel", body: { steps: funnel5, dateFrom, dateTo, conversionWindow: 86_400 } }),
    retention("retention", 10, "$pageview", "$pageview"),
    retention("retention-signup", undefined, "signup", "$pageview"),
  ];
}

// ---------------------------------------------------------------------------
// Statistics and formatting.

/** Nearest-rank p95: with 10 runs, the slowest. */
function p95(values: readonly number[]): number {
  return percentileOfSorted(sortedCopy(values), 95);
}

function say(text: string): void {
  process.stdout.write(`${text}\n`);
}

function sleep(milliseconds: number): Promise<void> {
  return new Promise((resolveSleep) => setTimeout(resolveSleep, milliseconds));
}

// ---------------------------------------------------------------------------
// One dataset size.

interface EngineTimes {
  runsMs: number[];
  medianMs: number;
  p95Ms: number;
}

interface QueryResult {
  name: string;
  kind: QueryRequest["kind"];
  firstRequest: QueryRequest;
  targetMs: number | undefined;
  eventide: EngineTimes | null;
  duckdb: EngineTimes;
  ratio: number;
  answersMatch: boolean;
  referenceChecked: boolean;
  eventideError?: string;
}

interface Mismatch {
  events: number;
  query: string;
  run: number;
  request: QueryRequest;
  between: string;
  difference: string;
  left: unknown;
  right: unknown;
}

interface SizeResult {
  events: number;
  users: number;
  days: number;
  activeUsers: number;
  eventCounts: Record<string, number>;
  generateMs: number;
  ingest: DatasetLoadReport;
  eventideStopMs: number | null;
  eventideRestartMs: number | null;
  duckdbLoad: { appendMs: number; sortMs: number };
  eventideMemoryMiB: { afterLoadRss: number; afterLoadPeak: number; afterQueriesRss: number; afterQueriesPeak: number };
  /** 1-minute load average before and after the timed queries: above the core count, others competed for the CPU. */
  loadAverage: { beforeQueries: number; afterQueries: number };
  queries: QueryResult[];
  /** Queries sent again because the server had closed their idle keep-alive connection. */
  resentAfterIdleClose: number;
}

const pathOfKind: Record<QueryRequest["kind"], string> = { trend: "trend", funnel: "funnel", retention: "retention" };

async function runSize(eventCount: number, options: Options, duckdb: DuckDbEngine, mismatches: Mismatch[]): Promise<SizeResult> {
  say(`\n=== ${formatCount(eventCount)} events, ${formatCount(options.userCount)} users, ${options.dayCount} days, seed ${options.seed}`);
  const generateStartMs = performance.now();
  const dataset = generateDataset({ eventCount, userCount: options.userCount, dayCount: options.dayCount, seed: options.seed, startDate: options.startDate, batchEvents: 1000, ingestOrder: options.ingestOrder });
  const generateMs = performance.now() - generateStartMs;
  const eventCounts: Record<string, number> = {};
  for (const name of dataset.dictionaries.event) eventCounts[name] = 0;
  const seenUsers = new Uint8Array(options.userCount);
  let activeUsers = 0;
  for (let row = 0; row < eventCount; row += 1) {
    eventCounts[dataset.dictionaries.event[dataset.columns.event[row]]] += 1;
    const user = dataset.columns.user[row];
    if (seenUsers[user] === 0) {
      seenUsers[user] = 1;
      activeUsers += 1;
    }
  }
  say(`dataset: generated in ${(generateMs / 1000).toFixed(1)} s; ${formatCount(activeUsers)} active users; ` + Object.entries(eventCounts).map(([name, count]) => `${name} ${formatCount(count)}`).join(", "));

  const eventide = await startEventide({ repositoryRoot, serverRoot: options.serverRoot, keepData: options.keepData });
  say(`eventide: pid ${eventide.pid}, query ${eventide.queryUrl}, ingest ${eventide.ingestUrl}, data ${eventide.dataDirectory}`);

  say(`loading Eventide: ${Math.ceil(eventCount / 1000)} batches of 1 000 events, ${options.inflight} in flight`);
  let lastReportMs = 0;
  const ingest = await loadDataset(eventide, dataset, {
    inflight: options.inflight,
    onProgress: ({ acknowledgedEvents, elapsedMs }) => {
      if (elapsedMs - lastReportMs < 10_000) return;
      lastReportMs = elapsedMs;
      say(`    … ${formatCount(acknowledgedEvents)} events acknowledged, ${formatCount((acknowledgedEvents / elapsedMs) * 1000)} events/s`);
    },
  });
  say(
    `  ${formatCount(ingest.events)} events in ${ingest.seconds.toFixed(1)} s (${formatCount(ingest.eventsPerSecond)} events/s, ${ingest.retries} retries after 503); ` +
      `client JSON building ${(ingest.serializeMs / 1000).toFixed(1)} s, ${(ingest.bodyBytes / ingest.events).toFixed(0)} B/event`,
  );
  const afterLoadRss = processMemoryBytes(eventide.pid!, "VmRSS") / 2 ** 20;
  const afterLoadPeak = processMemoryBytes(eventide.pid!, "VmHWM") / 2 ** 20;
  say(`  eventide RSS after load ${afterLoadRss.toFixed(0)} MiB (peak ${afterLoadPeak.toFixed(0)} MiB)`);

  let eventideStopMs: number | null = null;
  let eventideRestartMs: number | null = null;
  if (options.restartBeforeQueries) {
    // One restart, timed in two halves: the stop (which seals) and the start over the same data.
    const stopStartMs = performance.now();
    const code = await eventide.stop();
    eventideStopMs = performance.now() - stopStartMs;
    if (code !== 0) throw new Error(`eventide exited ${code} on SIGTERM; stderr:\n${eventide.stderrTail()}`);
    const restartStartMs = performance.now();
    await eventide.restart!();
    eventideRestartMs = performance.now() - restartStartMs;
    say(`  restarted Eventide (stop ${(eventideStopMs / 1000).toFixed(1)} s, start ${(eventideRestartMs / 1000).toFixed(1)} s): pid ${eventide.pid}`);
  }

  say("loading DuckDB …");
  const duckdbLoad = await duckdb.loadDataset("events", dataset);
  say(`  appended in ${(duckdbLoad.appendMs / 1000).toFixed(1)} s, decoded and sorted in ${(duckdbLoad.sortMs / 1000).toFixed(1)} s`);

  // Wait for the server to go quiet (segment loading, anything left from start-up).
  const settleStartMs = performance.now();
  for (let lastCpuMs = processCpuMs(eventide.pid!); performance.now() - settleStartMs < 120_000; ) {
    await sleep(1000);
    const cpuMs = processCpuMs(eventide.pid!);
    if (cpuMs - lastCpuMs < 50) break;
    lastCpuMs = cpuMs;
  }

  const reference = eventCount <= options.referenceMaxEvents ? datasetEvents(dataset) : null;
  const loadBeforeQueries = loadavg()[0];
  const specs = querySpecs(dataset).filter((spec) => options.only.length === 0 || options.only.includes(spec.name));
  const agent = keepAliveAgent(1);
  const authorization = { authorization: `Bearer ${eventide.token}` };
  let resentAfterIdleClose = 0;
  const results: QueryResult[] = [];
  const totalRuns = options.warmup + options.runs;
  say(`queries: ${options.warmup} warm-up + ${options.runs} timed runs each; DuckDB first (its answers are the yardstick), then Eventide`);
  for (const spec of specs) {
    const firstRequest = spec.request(0);
    const mismatchesBefore = mismatches.length;
    const record = (run: number, request: QueryRequest, between: string, left: unknown, right: unknown, difference: string) => {
      mismatches.push({ events: eventCount, query: spec.name, run, request, between, difference, left, right });
      if (mismatches.filter((mismatch) => mismatch.query === spec.name && mismatch.events === eventCount).length <= 2) {
        say(`  !!! ${spec.name} run ${run}: ${between} differ at ${difference}`);
        say(`      request   ${JSON.stringify(request)}`);
        say(`      ${between.split(" and ")[0].padEnd(9)} ${JSON.stringify(left)}`);
        say(`      ${between.split(" and ")[1].padEnd(9)} ${JSON.stringify(right)}`);
      }
    };

    // DuckDB runs first so that its answers are there to compare Eventide's with, run by run.
    const duckdbAnswers: QueryAnswer[] = [];
    const duckdbRunsMs: number[] = [];
    for (let run = 0; run < totalRuns; run += 1) {
      const { answer, elapsedMs } = await duckdb.answer("events", spec.request(run));
      if (spec.varies || run === 0) duckdbAnswers.push(answer);
      if (run >= options.warmup) duckdbRunsMs.push(elapsedMs);
    }
    const duckdbAnswerOf = (run: number) => (spec.varies ? duckdbAnswers[run] : duckdbAnswers[0]);

    let referenceChecked = false;
    if (reference !== null) {
      referenceChecked = true;
      for (let run = 0; run < (spec.varies ? totalRuns : 1); run += 1) {
        const request = spec.request(run);
        const expected = referenceAnswer(reference, request);
        const difference = firstDifference(duckdbAnswerOf(run), expected);
        if (difference !== undefined) record(run, request, "duckdb and reference", duckdbAnswerOf(run), expected, difference);
      }
    }

    const eventideRunsMs: number[] = [];
    let eventideError: string | undefined;
    for (let run = 0; run < totalRuns; run += 1) {
      const request = spec.request(run);
      const body = JSON.stringify(request.body);
      const startMs = performance.now();
      const answer = await post(agent, `${eventide.queryUrl}/api/v1/query/${pathOfKind[request.kind]}`, body, { headers: authorization, idempotent: true });
      const elapsedMs = performance.now() - startMs;
      if (answer.retriedAfterIdleReset) resentAfterIdleClose += 1;
      if (answer.status !== 200) {
        eventideError = `HTTP ${answer.status}: ${answer.text.slice(0, 500)}`;
        say(`  !!! ${spec.name}: Eventide answered ${eventideError}`);
        mismatches.push({ events: eventCount, query: spec.name, run, request, between: "eventide and duckdb", difference: eventideError, left: answer.text, right: duckdbAnswerOf(run) });
        break;
      }
      if (run >= options.warmup) eventideRunsMs.push(elapsedMs);
      let parsed: unknown;
      try {
        parsed = JSON.parse(answer.text);
      } catch {
        parsed = answer.text;
      }
      const difference = firstDifference(parsed, duckdbAnswerOf(run));
      if (difference !== undefined) record(run, request, "eventide and duckdb", parsed, duckdbAnswerOf(run), difference);
    }

    const eventideTimes = eventideRunsMs.length > 0 ? { runsMs: eventideRunsMs, medianMs: median(eventideRunsMs), p95Ms: p95(eventideRunsMs) } : null;
    const duckdbTimes = { runsMs: duckdbRunsMs, medianMs: median(duckdbRunsMs), p95Ms: p95(duckdbRunsMs) };
    const result: QueryResult = {
      name: spec.name,
      kind: firstRequest.kind,
      firstRequest,
      targetMs: spec.targetMs,
      eventide: eventideTimes,
      duckdb: duckdbTimes,
      ratio: eventideTimes === null ? Number.NaN : eventideTimes.medianMs / duckdbTimes.medianMs,
      answersMatch: mismatches.length === mismatchesBefore,
      referenceChecked,
      eventideError,
    };
    results.push(result);
    say(
      `  ${spec.name.padEnd(20)} eventide ${formatMs(eventideTimes?.medianMs ?? Number.NaN).padStart(7)} ms (p95 ${formatMs(eventideTimes?.p95Ms ?? Number.NaN).padStart(7)})   ` +
        `duckdb ${formatMs(duckdbTimes.medianMs).padStart(7)} ms (p95 ${formatMs(duckdbTimes.p95Ms).padStart(7)})   ` +
        `ratio ${Number.isFinite(result.ratio) ? result.ratio.toFixed(3) : "–"}   answers ${result.answersMatch ? (referenceChecked ? "identical (and = reference)" : "identical") : "DIFFER"}`,
    );
  }
  agent.destroy();

  const loadAfterQueries = loadavg()[0];
  say(`load average (1 min) ${loadBeforeQueries.toFixed(1)} before the queries, ${loadAfterQueries.toFixed(1)} after, on ${options.cores} cores`);
  if (resentAfterIdleClose > 0) say(`${resentAfterIdleClose} queries were sent again: the server had closed their idle keep-alive connection`);
  const afterQueriesRss = processMemoryBytes(eventide.pid!, "VmRSS") / 2 ** 20;
  const afterQueriesPeak = processMemoryBytes(eventide.pid!, "VmHWM") / 2 ** 20;
  say(`eventide RSS after queries ${afterQueriesRss.toFixed(0)} MiB (peak since ${options.restartBeforeQueries ? "restart" : "start"} ${afterQueriesPeak.toFixed(0)} MiB)`);
  const code = await eventide.stop();
  if (code !== 0) say(`  (eventide exited ${code} on SIGTERM)`);
  await duckdb.connection.run("DROP TABLE events");
  eventide.cleanup();
  if (options.keepData) say(`kept ${eventide.dataDirectory}`);

  return {
    events: eventCount,
    users: options.userCount,
    days: options.dayCount,
    activeUsers,
    eventCounts,
    generateMs,
    ingest,
    eventideStopMs,
    eventideRestartMs,
    duckdbLoad,
    eventideMemoryMiB: { afterLoadRss, afterLoadPeak, afterQueriesRss, afterQueriesPeak },
    loadAverage: { beforeQueries: loadBeforeQueries, afterQueries: loadAfterQueries },
    queries: results,
    resentAfterIdleClose,
  };
}

// ---------------------------------------------------------------------------

/** The latency table of one size: rows of text cells, for the terminal and the Markdown report alike. */
function latencyTable(size: SizeResult): { header: string[]; rows: string[][] } {
  return {
    header: ["query", "eventide ms", "p95", "duckdb ms", "p95", "eventide/duckdb", "target ms (10 M)", "answers"],
    rows: size.queries.map((query) => [
      query.name,
      formatMs(query.eventide?.medianMs ?? Number.NaN),
      formatMs(query.eventide?.p95Ms ?? Number.NaN),
      formatMs(query.duckdb.medianMs),
      formatMs(query.duckdb.p95Ms),
      Number.isFinite(query.ratio) ? query.ratio.toFixed(3) : "–",
      query.targetMs === undefined ? "–" : `${query.targetMs} ${query.eventide !== null && query.eventide.medianMs <= query.targetMs ? "met" : "NOT met"}`,
      query.answersMatch ? (query.referenceChecked ? "identical, = reference" : "identical") : "DIFFER",
    ]),
  };
}

function sizeCaption(size: SizeResult, options: Options): string {
  return `query latency at ${formatCount(size.events)} events (${formatCount(size.users)} users, ${size.days} days), median and p95 of ${options.runs} runs after ${options.warmup} warm-up`;
}

function sizeNotes(size: SizeResult): string {
  const memory = size.eventideMemoryMiB;
  return (
    `eventide RSS: after load ${memory.afterLoadRss.toFixed(0)} MiB (VmHWM ${memory.afterLoadPeak.toFixed(0)}), after queries ${memory.afterQueriesRss.toFixed(0)} MiB (VmHWM ${memory.afterQueriesPeak.toFixed(0)}); ` +
    `ingest ${formatCount(size.ingest.eventsPerSecond)} events/s; load average ${size.loadAverage.beforeQueries.toFixed(1)} → ${size.loadAverage.afterQueries.toFixed(1)}; ` +
    `${size.resentAfterIdleClose} queries resent after an idle-connection close`
  );
}

/** How each median grows with the event count, against the first size. */
function growthTable(sizes: readonly SizeResult[]): { header: string[]; rows: string[][] } {
  const base = sizes[0];
  return {
    header: ["query", ...sizes.slice(1).flatMap((size) => [`eventide ${formatCount(size.events)}`, `duckdb ${formatCount(size.events)}`])],
    rows: base.queries.map(({ name }) => [
      name,
      ...sizes.slice(1).flatMap((size) => {
        const query = size.queries.find((candidate) => candidate.name === name)!;
        const baseQuery = base.queries.find((candidate) => candidate.name === name)!;
        const eventideGrowth = query.eventide !== null && baseQuery.eventide !== null ? query.eventide.medianMs / baseQuery.eventide.medianMs : Number.NaN;
        return [Number.isFinite(eventideGrowth) ? `${eventideGrowth.toFixed(2)}×` : "–", `${(query.duckdb.medianMs / baseQuery.duckdb.medianMs).toFixed(2)}×`];
      }),
    ]),
  };
}

async function main(): Promise<void> {
  const options = parseOptions();
  const startedAt = new Date();
  // The figures belong to the server that ran: another checkout's with --server-root.
  const machine = machineInfo(options.serverRoot ?? repositoryRoot);
  options.cores = machine.cores;
  say(`machine: ${machine.cores} cores, ${machine.cpuModel}, ${machine.memoryGiB} GiB, Node ${machine.node}`);

  const duckdb = await DuckDbEngine.open(machine.cores);
  const version = String((await duckdb.connection.runAndReadAll("SELECT version()")).getRows()[0][0]);
  say(`duckdb ${version}, threads ${duckdb.threads}`);

  const selfCheck = await runSelfCheck(duckdb, options.seed);
  if (selfCheck.failures.length > 0) {
    for (const failure of selfCheck.failures) say(`self-check FAILED: ${failure}`);
    throw new Error(`the DuckDB SQL does not follow SPEC §4 on ${selfCheck.failures.length} of ${selfCheck.cases} self-check cases; fix it before timing`);
  }
  say(`self-check: DuckDB SQL = SPEC reference on ${selfCheck.cases} cases (§5 worked example, edge cases, random data)`);

  const mismatches: Mismatch[] = [];
  const sizes: SizeResult[] = [];
  for (const eventCount of options.eventCounts) sizes.push(await runSize(eventCount, options, duckdb, mismatches));
  duckdb.close();

  // Summary: one table per size, then growth across sizes; the same tables go into the dated report.
  const markdown: string[] = [`DuckDB ${version} (${duckdb.threads} threads) answers the same questions in process; answers are compared run by run.`, ""];
  for (const size of sizes) {
    const table = latencyTable(size);
    say(`\n${sizeCaption(size, options)}; ${machine.cores} cores, ${machine.cpuModel}`);
    say(formatTextTable(table.header, table.rows));
    say(sizeNotes(size));
    markdown.push(`## ${sizeCaption(size, options)}`, "", formatMarkdownTable(table.header, table.rows), "", sizeNotes(size), "");
  }
  if (sizes.length > 1) {
    const table = growthTable(sizes);
    const grew = `events grew ${sizes.slice(1).map((size) => `${(size.events / sizes[0].events).toFixed(1)}×`).join(", ")}`;
    say(`\ngrowth of the median with the event count (× the ${formatCount(sizes[0].events)}-event time)`);
    say(formatTextTable(table.header, table.rows));
    say(`(${grew})`);
    markdown.push(`## Growth of the median (× the ${formatCount(sizes[0].events)}-event time; ${grew})`, "", formatMarkdownTable(table.header, table.rows), "");
  }
  if (mismatches.length > 0) markdown.push(`**ANSWERS DIFFER:** ${mismatches.length} mismatching answers; see "mismatches" in the JSON results.`, "");

  const output = {
    benchmark: "query",
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    machine,
    duckdb: { version, threads: machine.cores },
    options: { ...options, out: undefined },
    selfCheckCases: selfCheck.cases,
    sizes,
    mismatches,
  };
  mkdirSync(dirname(options.out), { recursive: true });
  writeFileSync(options.out, `${JSON.stringify(output, null, 2)}\n`);
  const reportPath = writeDatedReport({ repositoryRoot, bench: "query", startedAt, machine, serverCommit: serverCommitOf(options.serverRoot, machine), command: commandLine("npm run bench:query --", options.serverRoot, machine), body: markdown.join("\n") });
  say(`\nwrote ${options.out} and ${reportPath}`);

  if (mismatches.length > 0) {
    say(`\nANSWERS DIFFER: ${mismatches.length} mismatching answers in ${new Set(mismatches.map((mismatch) => `${mismatch.events}/${mismatch.query}`)).size} queries (see above and "mismatches" in ${options.out})`);
    process.exitCode = 1;
  }
}

// `npm run bench:query -- random-arrival …` runs the random-arrival shape (./random-arrival.ts) instead.
(process.argv[2] === "random-arrival" ? runRandomArrival(process.argv.slice(3), repositoryRoot) : main()).catch((error: unknown) => {
  process.stderr.write(`bench:query failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
