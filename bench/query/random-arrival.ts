/**
 * The random-arrival shape of `npm run bench:query -- random-arrival`: N
 * events (default 10 M) over 1 M users and 90 days, every row shuffled so each
 * event's day is drawn independently in arrival order (a backfill from many
 * sources: every day's active segment is written to at once), loaded over
 * `/ingest/batch` (1 000 per request, 4 connections). The same questions are
 * timed three times, 1 warm-up + 7 runs, medians:
 *   (a) right after the load (rows still in active segments, merges not run),
 *   (b) after merges settle (segment count and server CPU quiet),
 *   (c) while a second load (another seed, same users and days) runs at
 *       ~100 k events/s, open loop.
 * DuckDB (sorted by event, user, ts; 2 threads) answers the same questions on
 * the same rows in the same run; answers of (a) and (b) must equal DuckDB's
 * (in (c) the data moves under the queries, so only the time is kept). Four
 * SPEC §7 questions sit beside the six of issue 22's table, each against the
 * same question without the new fields.
 *
 * Also reported: the server's peak RSS during the load (VmHWM, the process
 * being fresh), the bytes on disk per event once merges settle, and the
 * server main thread's longest event-loop delay during the load, the merges
 * after it and the first seconds of the second load (not while queries are
 * timed: reading /metrics costs the main thread too).
 *
 * Estimate at 10 M: generation ~5 s, the load ~50 s at ~200 k events/s,
 * DuckDB's load and sort ~40 s, DuckDB's timings ~8 × (2 funnels × ~1.5 s +
 * the strict funnel ~3 s) ≈ 50 s, each Eventide phase ~10 × 8 × ≤ 0.3 s ≈ 20 s,
 * settling ≤ 2 min: ~5 minutes in all.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import { Agent, request as httpRequest } from "node:http";
import { BatchSerializer, generateDataset, type Dataset } from "../fixtures/dataset.js";
import { keepAliveAgent, post } from "../runner/http-client.js";
import { machineInfo, processCpuMs, processMemoryBytes } from "../runner/machine.js";
import { writeDatedReport } from "../runner/report-file.js";
import { startEventide, type Target } from "../runner/server.js";
import { formatCount, formatMarkdownTable, formatMs, formatTextTable, median } from "../runner/stats.js";
import { loadDataset } from "../suite/dataset-load.js";
import { DuckDbEngine } from "./duckdb-engine.js";
import { answerV2, type V2Request } from "./duckdb-v2.js";
import { addDays, datasetEvents, firstDifference, referenceAnswer, type QueryRequest, type StoredEvent } from "./query-request.js";
import { referenceAnswerV2 } from "../../test/reference/reference-v2.js";

interface Options {
  events: number;
  users: number;
  days: number;
  seed: number;
  runs: number;
  warmup: number;
  inflight: number;
  startDate: string;
  secondLoadRate: number;
  settleTimeoutSeconds: number;
  referenceMaxEvents: number;
  only: string[];
  keepData: boolean;
  cpuProfileDirectory: string | undefined;
  out: string;
  /** Rounds of the dashboard after (b); 0: none. */
  dashboardRounds: number;
}

function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      events: { type: "string", default: "10000000" },
      users: { type: "string", default: "1000000" },
      days: { type: "string", default: "90" },
      seed: { type: "string", default: "1" },
      runs: { type: "string", default: "7" },
      warmup: { type: "string", default: "1" },
      inflight: { type: "string", default: "4" },
      "start-date": { type: "string", default: "2024-01-01" },
      "second-load-rate": { type: "string", default: "100000" },
      "settle-timeout": { type: "string", default: "300" },
      "reference-max-events": { type: "string", default: "200000" },
      only: { type: "string", default: "" },
      "keep-data": { type: "boolean", default: false },
      "server-cpu-prof": { type: "string" },
      "dashboard-rounds": { type: "string", default: "5" },
      out: { type: "string", default: "bench/results/query-random-arrival-latest.json" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(
      "npm run bench:query -- random-arrival [--events 10000000] [--users 1000000] [--days 90] [--seed 1] [--runs 7] [--warmup 1]\n" +
        "  [--inflight 4] [--second-load-rate 100000] [--settle-timeout 300] [--reference-max-events 200000] [--only trend-unique,…]\n" +
        "  [--keep-data] [--server-cpu-prof DIRECTORY] [--dashboard-rounds 5] [--out bench/results/query-random-arrival-latest.json]\n",
    );
    process.exit(0);
  }
  const integer = (name: string, raw: string, minimum: number): number => {
    const value = Number(raw.replaceAll("_", ""));
    if (!Number.isSafeInteger(value) || value < minimum) throw new Error(`--${name} must be an integer ≥ ${minimum}, got ${raw}`);
    return value;
  };
  return {
    events: integer("events", values.events, 1),
    users: integer("users", values.users, 1),
    days: integer("days", values.days, 1),
    seed: integer("seed", values.seed, 0),
    runs: integer("runs", values.runs, 1),
    warmup: integer("warmup", values.warmup, 0),
    inflight: integer("inflight", values.inflight, 1),
    startDate: values["start-date"],
    secondLoadRate: integer("second-load-rate", values["second-load-rate"], 1000),
    settleTimeoutSeconds: integer("settle-timeout", values["settle-timeout"], 1),
    referenceMaxEvents: integer("reference-max-events", values["reference-max-events"], 0),
    only: values.only === "" ? [] : values.only.split(",").map((part) => part.trim()),
    keepData: values["keep-data"],
    cpuProfileDirectory: values["server-cpu-prof"] === undefined ? undefined : resolve(values["server-cpu-prof"]),
    out: resolve(values.out),
    dashboardRounds: integer("dashboard-rounds", values["dashboard-rounds"], 0),
  };
}

// ---------------------------------------------------------------------------
// The questions.

type Request = { kind: "v1"; request: QueryRequest } | { kind: "v2"; request: V2Request };

interface Spec {
  name: string;
  /** The question of run `index`; retention varies its dateFrom so its 60 s answer cache never answers. */
  request: (index: number) => Request;
  varies: boolean;
  /** The same question without the §7 fields (for §7 questions). */
  baseline?: string;
}

function specs(dataset: Dataset): Spec[] {
  const dateFrom = dataset.options.startDate;
  const dateTo = addDays(dateFrom, dataset.options.dayCount - 1);
  const trendBody = { event: "$pageview", dateFrom, dateTo, groupBy: "day" as const, filters: [], math: "total" as const };
  const funnel5 = ["$pageview", "signup", "activate", "add_to_cart", "purchase"];
  const v1 = (name: string, request: QueryRequest): Spec => ({ name, request: () => ({ kind: "v1", request }), varies: false });
  const retentionRange = (index: number) => ({ dateFrom: addDays(dateFrom, index), dateTo: addDays(dateFrom, index + 13 * 7 - 1), windowDays: 7 });
  return [
    v1("trend-filter-us", { kind: "trend", body: { ...trendBody, filters: [{ property: "country", op: "eq", value: "US" }] } }),
    v1("trend-unique", { kind: "trend", body: { ...trendBody, math: "unique" } }),
    v1("trend-total", { kind: "trend", body: trendBody }),
    v1("funnel-3", { kind: "funnel", body: { steps: funnel5.slice(0, 3), dateFrom, dateTo, conversionWindow: 86_400 } }),
    v1("funnel-5", { kind: "funnel", body: { steps: funnel5, dateFrom, dateTo, conversionWindow: 86_400 } }),
    {
      name: "retention-13w",
      request: (index) => ({ kind: "v1", request: { kind: "retention", body: { cohortEvent: "$pageview", retentionEvent: "$pageview", ...retentionRange(index) } } }),
      varies: true,
    },
    {
      name: "§7 trend tz",
      request: () => ({ kind: "v2", request: { kind: "trend", body: { event: "$pageview", dateFrom, dateTo, groupBy: "day", math: "unique", timezone: "America/New_York" } } }),
      varies: false,
      baseline: "trend-unique",
    },
    {
      name: "§7 trend tz+breakdown",
      request: () => ({
        kind: "v2",
        request: { kind: "trend", body: { event: "$pageview", dateFrom, dateTo, groupBy: "day", math: "unique", timezone: "America/New_York", breakdown: "country" } },
      }),
      varies: false,
      baseline: "trend-unique",
    },
    {
      name: "§7 trend sum price",
      request: () => ({ kind: "v2", request: { kind: "trend", body: { event: "add_to_cart", dateFrom, dateTo, groupBy: "week", math: "sum", mathProperty: "price" } } }),
      varies: false,
      baseline: "trend-total",
    },
    {
      name: "§7 funnel strict+excl+bd",
      request: () => ({
        kind: "v2",
        request: {
          kind: "funnel",
          body: { steps: funnel5, dateFrom, dateTo, conversionWindow: 86_400, order: "strict", exclusions: [{ event: "$pageleave", fromStep: 1, toStep: 3 }], breakdown: "plan" },
        },
      }),
      varies: false,
      baseline: "funnel-5",
    },
    {
      name: "§7 retention bd+tz",
      request: (index) => ({
        kind: "v2",
        request: {
          kind: "retention",
          body: {
            cohortEvent: { event: "$pageview", filters: [{ property: "browser", op: "eq", value: "Chrome" }] },
            retentionEvent: "$pageview",
            ...retentionRange(index),
            timezone: "America/New_York",
            breakdown: "country",
          },
        },
      }),
      varies: true,
      baseline: "retention-13w",
    },
  ];
}

/**
 * A dashboard on the settled data: widgets a product team keeps on one page
 * (trends by several properties and zones, a filtered breakdown, funnels of
 * each order, with an exclusion, times to convert, retentions), asked in
 * turn as a page refresh does. Each widget alone is a question the worker
 * caches may answer; in turn, they compete for those caches, a shape the
 * questions above, each asked eight times running, never show.
 */
interface Widget {
  name: string;
  /** Round r's question; retention moves its dateFrom so its 60 s answer cache never answers. */
  request: (round: number) => { kind: "trend" | "funnel" | "retention"; body: Record<string, unknown> };
  varies: boolean;
}

function dashboardWidgets(dataset: Dataset): Widget[] {
  const dateFrom = dataset.options.startDate;
  const dateTo = addDays(dateFrom, dataset.options.dayCount - 1);
  const range = { dateFrom, dateTo };
  const funnel5 = ["$pageview", "signup", "activate", "add_to_cart", "purchase"];
  const trend = (name: string, body: Record<string, unknown>): Widget => ({ name, request: () => ({ kind: "trend", body: { ...range, groupBy: "day", math: "unique", ...body } }), varies: false });
  const funnel = (name: string, body: Record<string, unknown>): Widget => ({ name, request: () => ({ kind: "funnel", body: { ...range, steps: funnel5, conversionWindow: 86_400, ...body } }), varies: false });
  const retention = (name: string, body: Record<string, unknown>): Widget => ({
    name,
    request: (round) => ({ kind: "retention", body: { dateFrom: addDays(dateFrom, round), dateTo: addDays(dateFrom, round + 13 * 7 - 1), windowDays: 7, retentionEvent: "$pageview", ...body } }),
    varies: true,
  });
  return [
    trend("page views, users by day", { event: "$pageview" }),
    trend("autocapture, users by day", { event: "$autocapture" }),
    trend("searches by day", { event: "search", math: "total" }),
    trend("page views by country", { event: "$pageview", breakdown: "country" }),
    trend("page views by browser, New York", { event: "$pageview", breakdown: "browser", timezone: "America/New_York" }),
    trend("page views by os, Kolkata", { event: "$pageview", breakdown: "$os", timezone: "Asia/Kolkata" }),
    trend("page views by path", { event: "$pageview", breakdown: "path" }),
    trend("signups by plan, by week", { event: "signup", breakdown: "plan", groupBy: "week" }),
    trend("autocapture by os, US only", { event: "$autocapture", breakdown: "$os", filters: [{ property: "country", op: "eq", value: "US" }] }),
    trend("page views per user", { event: "$pageview", math: "avg_per_user" }),
    trend("cart value by week", { event: "add_to_cart", math: "sum", mathProperty: "price", groupBy: "week" }),
    funnel("funnel, 3 steps by country", { steps: funnel5.slice(0, 3), breakdown: "country" }),
    funnel("funnel, 5 steps, an exclusion", { exclusions: [{ event: "$pageleave", fromStep: 1, toStep: 3 }] }),
    funnel("funnel, 5 steps unordered", { order: "unordered" }),
    funnel("funnel, 5 steps, time to convert", { timeToConvert: true }),
    retention("retention of signups by country, New York", { cohortEvent: "signup", breakdown: "country", timezone: "America/New_York" }),
    retention("retention, Chrome cohort", { cohortEvent: { event: "$pageview", filters: [{ property: "browser", op: "eq", value: "Chrome" }] } }),
  ];
}

function pathAndBody(request: Request): { path: string; body: string } {
  const inner = request.request;
  return { path: `/api/v1/query/${inner.kind}`, body: JSON.stringify(inner.body) };
}

async function duckdbAnswer(duckdb: DuckDbEngine, request: Request): Promise<{ answer: unknown; elapsedMs: number }> {
  return request.kind === "v1" ? duckdb.answer("events", request.request) : answerV2(duckdb.connection, "events", request.request);
}

function referenceOf(events: readonly StoredEvent[], request: Request): unknown {
  return request.kind === "v1" ? referenceAnswer(events, request.request) : referenceAnswerV2(events, request.request);
}

// ---------------------------------------------------------------------------

function say(text: string): void {
  process.stdout.write(`${text}\n`);
}

function sleep(milliseconds: number): Promise<void> {
  return new Promise((resolveSleep) => setTimeout(resolveSleep, milliseconds));
}

async function getText(url: string): Promise<string> {
  return new Promise((resolveText, reject) => {
    const request = httpRequest(url, { agent: new Agent({ keepAlive: false }) }, (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (text += chunk));
      response.on("end", () => resolveText(text));
    });
    request.on("error", reject);
    request.end();
  });
}

/**
 * The server's worst main-thread stalls: its event-loop delay, as prom-client
 * reports it (the largest delay since the last scrape), read once a second.
 * Every request waits out a stall, so these are the figures that matter for a
 * server that answers HTTP on one thread.
 */
class StallSampler {
  private readonly maxima = new Map<string, number>();
  private phase = "";
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly target: Target) {}

  /** From now on, maxima count towards `phase`; "" pauses (a scrape costs the server's main thread too, so none runs while queries are timed). */
  enter(phase: string): void {
    this.phase = phase;
    this.timer ??= setInterval(() => void this.sample(), 1000);
  }

  private async sample(): Promise<void> {
    const phase = this.phase;
    if (phase === "") return;
    const text = await getText(`${this.target.queryUrl}/metrics`).catch(() => "");
    const match = /^nodejs_eventloop_lag_max_seconds (\S+)/m.exec(text);
    if (match === null) return;
    this.maxima.set(phase, Math.max(this.maxima.get(phase) ?? 0, Number(match[1]) * 1000));
  }

  stop(): Record<string, number> {
    clearInterval(this.timer);
    return Object.fromEntries(this.maxima);
  }
}

async function segmentCount(target: Target): Promise<number> {
  const text = await getText(`${target.queryUrl}/metrics`);
  const match = /^eventide_segments (\d+)/m.exec(text);
  return match === null ? Number.NaN : Number(match[1]);
}

/**
 * Waits until the segment count has not changed for 10 s and the server used
 * under 15 % of a core meanwhile (a merge keeps a core busy; an idle server
 * under --cpu-prof still uses ~10 %).
 */
async function waitForMerges(target: Target, timeoutSeconds: number): Promise<{ seconds: number; segments: number; settled: boolean }> {
  const startMs = performance.now();
  let lastCount = await segmentCount(target);
  let lastCpuMs = processCpuMs(target.pid!);
  let quietSince = performance.now();
  while (performance.now() - startMs < timeoutSeconds * 1000) {
    await sleep(1000);
    const count = await segmentCount(target);
    const cpuMs = processCpuMs(target.pid!);
    if (count !== lastCount || cpuMs - lastCpuMs > 150) quietSince = performance.now();
    lastCount = count;
    lastCpuMs = cpuMs;
    if (performance.now() - quietSince >= 10_000) return { seconds: (performance.now() - startMs) / 1000, segments: count, settled: true };
  }
  return { seconds: (performance.now() - startMs) / 1000, segments: lastCount, settled: false };
}

/** Sends batches of `dataset` at `eventsPerSecond` (open loop over 4 connections) until stopped. */
function startPacedLoad(target: Target, dataset: Dataset, eventsPerSecond: number): { stop: () => Promise<{ events: number; seconds: number; late: number }> } {
  const serializer = new BatchSerializer(dataset);
  const batchEvents = dataset.options.batchEvents;
  const batchCount = Math.ceil(dataset.eventCount / batchEvents);
  const connections = 4;
  const agent = keepAliveAgent(connections);
  const intervalMs = (batchEvents / eventsPerSecond) * 1000;
  let stopped = false;
  let events = 0;
  let late = 0;
  const startMs = performance.now();
  const sender = async (lane: number) => {
    // Batch i is due at startMs + i × interval; lane l sends batches l, l + 4, …
    for (let batch = lane; !stopped && batch < batchCount; batch += connections) {
      const dueMs = startMs + batch * intervalMs;
      const waitMs = dueMs - performance.now();
      if (waitMs > 0) await sleep(waitMs);
      else late += 1;
      if (stopped) break;
      const start = batch * batchEvents;
      const end = Math.min(start + batchEvents, dataset.eventCount);
      const answer = await post(agent, `${target.ingestUrl}/ingest/batch`, Buffer.from(serializer.batchBody(target.apiKey, start, end), "utf8"));
      if (answer.status === 200) events += end - start;
    }
  };
  const lanes = Array.from({ length: connections }, (_, lane) => sender(lane));
  return {
    stop: async () => {
      stopped = true;
      await Promise.all(lanes);
      agent.destroy();
      return { events, seconds: (performance.now() - startMs) / 1000, late };
    },
  };
}

function directoryBytes(directory: string): number {
  return Number(execFileSync("du", ["-sb", directory], { encoding: "utf8" }).split(/\s/)[0]);
}

// ---------------------------------------------------------------------------

interface PhaseTimes {
  medianMs: number;
  runsMs: number[];
  /** Undefined when not compared (phase c). */
  answersEqual: boolean | undefined;
  error?: string;
}

interface Row {
  name: string;
  baseline?: string;
  duckdbMs: number;
  phases: Record<string, PhaseTimes>;
}

interface Phase {
  key: string;
  title: string;
  loadAverage: number;
}

export async function runRandomArrival(argv: string[], repositoryRoot: string): Promise<void> {
  const options = parseOptions(argv);
  const startedAt = new Date();
  const machine = machineInfo(repositoryRoot);
  say(`machine: ${machine.cores} cores, ${machine.cpuModel}, Node ${machine.node}; load average ${loadavg().map((value) => value.toFixed(2)).join(" ")}`);
  const duckdb = await DuckDbEngine.open(machine.cores);
  const duckdbVersion = String((await duckdb.connection.runAndReadAll("SELECT version()")).getRows()[0][0]);

  const generateStartMs = performance.now();
  const dataset = generateDataset({ eventCount: options.events, userCount: options.users, dayCount: options.days, seed: options.seed, startDate: options.startDate, batchEvents: 1000, ingestOrder: "random" });
  say(`dataset: ${formatCount(options.events)} events, ${formatCount(options.users)} users, ${options.days} days, random arrival; generated in ${((performance.now() - generateStartMs) / 1000).toFixed(1)} s`);
  const questions = specs(dataset).filter((spec) => options.only.length === 0 || options.only.includes(spec.name));
  const totalRuns = options.warmup + options.runs;

  const extraNodeFlags = options.cpuProfileDirectory === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${options.cpuProfileDirectory}`];
  if (options.cpuProfileDirectory !== undefined) mkdirSync(options.cpuProfileDirectory, { recursive: true });
  const eventide = await startEventide({ repositoryRoot, keepData: options.keepData, extraNodeFlags });
  say(`eventide: pid ${eventide.pid}, data ${eventide.dataDirectory}`);
  const loadAverageBeforeLoad = loadavg()[0];
  const stalls = new StallSampler(eventide);
  stalls.enter("load");
  let lastReportMs = 0;
  const ingest = await loadDataset(eventide, dataset, {
    inflight: options.inflight,
    onProgress: ({ acknowledgedEvents, elapsedMs }) => {
      if (elapsedMs - lastReportMs < 10_000) return;
      lastReportMs = elapsedMs;
      say(`    … ${formatCount(acknowledgedEvents)} events, ${formatCount((acknowledgedEvents / elapsedMs) * 1000)} events/s, RSS ${(processMemoryBytes(eventide.pid!, "VmRSS") / 2 ** 20).toFixed(0)} MiB`);
    },
  });
  const peakRssMiB = processMemoryBytes(eventide.pid!, "VmHWM") / 2 ** 20;
  stalls.enter("");
  say(`loaded ${formatCount(ingest.events)} events in ${ingest.seconds.toFixed(1)} s (${formatCount(ingest.eventsPerSecond)} events/s); peak RSS during the load ${peakRssMiB.toFixed(0)} MiB`);

  const agent = keepAliveAgent(1);
  const authorization = { authorization: `Bearer ${eventide.token}` };
  const eventideAnswers = new Map<string, unknown[]>();
  const rows = new Map<string, Row>(questions.map((spec) => [spec.name, { name: spec.name, baseline: spec.baseline, duckdbMs: Number.NaN, phases: {} }]));
  const phases: Phase[] = [];

  // A varying question asks each phase its own dates, so no phase answers from another's cache.
  const phaseOffset = (phase: string) => ["a", "b", "c"].indexOf(phase) * totalRuns;
  const timeEventide = async (phase: string, compare: ((spec: Spec, run: number, answer: unknown) => boolean) | undefined) => {
    for (const spec of questions) {
      const runsMs: number[] = [];
      const answers: unknown[] = [];
      let error: string | undefined;
      for (let run = 0; run < totalRuns; run += 1) {
        const { path, body } = pathAndBody(spec.request(phaseOffset(phase) + run));
        const startMs = performance.now();
        const answer = await post(agent, `${eventide.queryUrl}${path}`, body, { headers: authorization, idempotent: true });
        const elapsedMs = performance.now() - startMs;
        if (answer.status !== 200) {
          error = `HTTP ${answer.status}: ${answer.text.slice(0, 300)}`;
          break;
        }
        answers.push(JSON.parse(answer.text));
        if (run >= options.warmup) runsMs.push(elapsedMs);
      }
      let answersEqual: boolean | undefined;
      if (compare !== undefined) answersEqual = error === undefined && answers.every((answer, run) => compare(spec, run, answer));
      rows.get(spec.name)!.phases[phase] = { medianMs: runsMs.length > 0 ? median(runsMs) : Number.NaN, runsMs, answersEqual, error };
      if (phase === "a") eventideAnswers.set(spec.name, answers);
      say(`  (${phase}) ${spec.name.padEnd(26)} ${formatMs(runsMs.length > 0 ? median(runsMs) : Number.NaN).padStart(8)} ms${error === undefined ? "" : `  !!! ${error}`}`);
    }
  };

  // (a) At once, before DuckDB loads: rows are still in active segments and no merge has run.
  say("(a) right after the load");
  phases.push({ key: "a", title: "right after the load", loadAverage: loadavg()[0] });
  await timeEventide("a", undefined);
  // DuckDB's load and timings leave the server alone: its merges run meanwhile.
  stalls.enter("after the load");

  say("loading DuckDB …");
  const duckdbLoad = await duckdb.loadDataset("events", dataset);
  say(`  appended in ${(duckdbLoad.appendMs / 1000).toFixed(1)} s, sorted in ${(duckdbLoad.sortMs / 1000).toFixed(1)} s`);
  const reference = options.events <= options.referenceMaxEvents ? datasetEvents(dataset) : undefined;
  const duckdbAnswers = new Map<string, unknown[]>();
  const mismatches: string[] = [];
  const duckdbLoadAverage = loadavg()[0];
  for (const spec of questions) {
    const runsMs: number[] = [];
    const answers: unknown[] = [];
    // Timed over phase (a)'s questions; a varying question also answers phase (b)'s, untimed.
    for (let run = 0; run < (spec.varies ? 2 * totalRuns : totalRuns); run += 1) {
      const { answer, elapsedMs } = await duckdbAnswer(duckdb, spec.request(run));
      answers.push(answer);
      if (run >= options.warmup && run < totalRuns) runsMs.push(elapsedMs);
      if (reference !== undefined && (run === 0 || spec.varies)) {
        const difference = firstDifference(answer, referenceOf(reference, spec.request(run)));
        if (difference !== undefined) mismatches.push(`${spec.name} run ${run}: duckdb and reference differ at ${difference}`);
      }
    }
    duckdbAnswers.set(spec.name, answers);
    rows.get(spec.name)!.duckdbMs = median(runsMs);
    say(`  duckdb ${spec.name.padEnd(26)} ${formatMs(median(runsMs)).padStart(8)} ms`);
  }
  const compare = (phase: string) => (spec: Spec, run: number, answer: unknown) => {
    const answers = duckdbAnswers.get(spec.name)!;
    const difference = firstDifference(answer, answers[spec.varies ? phaseOffset(phase) + run : run]);
    if (difference !== undefined) mismatches.push(`(${phase}) ${spec.name} run ${run}: eventide and duckdb differ at ${difference}`);
    return difference === undefined;
  };
  // Phase (a)'s answers, kept from before DuckDB had any.
  for (const spec of questions) {
    const answers = eventideAnswers.get(spec.name)!;
    const phase = rows.get(spec.name)!.phases.a;
    phase.answersEqual = phase.error === undefined && answers.every((answer, run) => compare("a")(spec, run, answer));
  }

  say("waiting for merges to settle …");
  stalls.enter("settle");
  const settle = await waitForMerges(eventide, options.settleTimeoutSeconds);
  const diskBytes = directoryBytes(eventide.dataDirectory!);
  say(`  ${settle.settled ? "settled" : "NOT settled"} after ${settle.seconds.toFixed(0)} s: ${settle.segments} segments, ${(diskBytes / ingest.events).toFixed(1)} B on disk per event`);
  stalls.enter("");
  say("(b) after merges settle");
  phases.push({ key: "b", title: "after merges settle", loadAverage: loadavg()[0] });
  await timeEventide("b", compare("b"));

  // The dashboard, on the same settled data: every widget once per round, rounds one after another.
  const widgets = options.dashboardRounds > 0 ? dashboardWidgets(dataset) : [];
  const dashboard = widgets.map((widget) => ({ name: widget.name, varies: widget.varies, roundsMs: [] as number[], stable: true, error: undefined as string | undefined }));
  if (widgets.length > 0) say(`(b) dashboard: ${widgets.length} widgets in turn, ${options.dashboardRounds} rounds`);
  const firstAnswers: string[] = [];
  for (let round = 0; round < options.dashboardRounds; round += 1) {
    for (const [index, widget] of widgets.entries()) {
      const row = dashboard[index];
      if (row.error !== undefined) continue;
      const { kind, body } = widget.request(round);
      const startMs = performance.now();
      const answer = await post(agent, `${eventide.queryUrl}/api/v1/query/${kind}`, JSON.stringify(body), { headers: authorization, idempotent: true });
      row.roundsMs.push(performance.now() - startMs);
      if (answer.status !== 200) row.error = `HTTP ${answer.status}: ${answer.text.slice(0, 300)}`;
      // Settled data: a widget asked again answers the same.
      else if (round === 0) firstAnswers[index] = answer.text;
      else if (!widget.varies && answer.text !== firstAnswers[index]) row.stable = false;
    }
  }
  for (const row of dashboard) say(`  ${row.name.padEnd(44)} first ${formatMs(row.roundsMs[0] ?? Number.NaN).padStart(8)} ms, then ${formatMs(row.roundsMs.length > 1 ? median(row.roundsMs.slice(1)) : Number.NaN).padStart(8)} ms${row.error === undefined ? "" : `  !!! ${row.error}`}`);
  if (dashboard.some((row) => row.error !== undefined || !row.stable)) process.exitCode = 1;

  say(`(c) while a second load runs at ${formatCount(options.secondLoadRate)} events/s`);
  // Two minutes' worth: phase (c) takes well under that.
  const second = generateDataset({ eventCount: options.secondLoadRate * 120, userCount: options.users, dayCount: options.days, seed: options.seed + 1, startDate: options.startDate, batchEvents: 1000, ingestOrder: "random" });
  stalls.enter("second load");
  const paced = startPacedLoad(eventide, second, options.secondLoadRate);
  await sleep(3000);
  stalls.enter("");
  phases.push({ key: "c", title: `during a ${formatCount(options.secondLoadRate)} events/s load`, loadAverage: loadavg()[0] });
  await timeEventide("c", undefined);
  const secondLoad = await paced.stop();
  say(`  second load: ${formatCount(secondLoad.events)} events in ${secondLoad.seconds.toFixed(1)} s (${formatCount(secondLoad.events / secondLoad.seconds)} events/s, ${secondLoad.late} batches sent late)`);
  const finalRssMiB = processMemoryBytes(eventide.pid!, "VmHWM") / 2 ** 20;
  const stallMaximaMs = stalls.stop();
  agent.destroy();
  const code = await eventide.stop();
  if (code !== 0) say(`  (eventide exited ${code} on SIGTERM)`);
  eventide.cleanup();
  duckdb.close();

  // Report: speed-up = DuckDB's median ÷ Eventide's, per phase.
  const speedup = (row: Row, phase: string) => row.duckdbMs / (row.phases[phase]?.medianMs ?? Number.NaN);
  const header = ["query", "duckdb ms", ...phases.flatMap((phase) => [`(${phase.key}) ms`, `(${phase.key}) ×duckdb`]), "§7 ÷ base (b)", "answers (a, b)"];
  const tableRows = [...rows.values()].map((row) => {
    const baseline = row.baseline === undefined ? undefined : rows.get(row.baseline);
    const overBase = baseline === undefined ? "–" : `${(row.phases.b.medianMs / baseline.phases.b.medianMs).toFixed(2)}× ${row.baseline}`;
    const equal = ["a", "b"].map((phase) => (row.phases[phase].answersEqual ? "equal" : "DIFFER")).join(", ");
    return [row.name, formatMs(row.duckdbMs), ...phases.flatMap((phase) => [formatMs(row.phases[phase.key].medianMs), `${speedup(row, phase.key).toFixed(1)}×`]), overBase, equal];
  });
  const notes = [
    `Load average (1 min) on ${machine.cores} cores: before the load ${loadAverageBeforeLoad.toFixed(1)}, ${phases.map((phase) => `(${phase.key}) ${phase.loadAverage.toFixed(1)}`).join(", ")}, DuckDB's timings ${duckdbLoadAverage.toFixed(1)}.`,
    `Load: ${formatCount(ingest.events)} events over /ingest/batch (1 000 per request, ${options.inflight} connections) in ${ingest.seconds.toFixed(1)} s, ${formatCount(ingest.eventsPerSecond)} events/s.`,
    `Server peak RSS during the load: ${peakRssMiB.toFixed(0)} MiB (VmHWM; ${finalRssMiB.toFixed(0)} MiB by the end of the run).`,
    `Server main thread's longest event-loop delay (read from /metrics each second): ${Object.entries(stallMaximaMs)
      .map(([phase, ms]) => `${phase} ${ms.toFixed(1)} ms`)
      .join(", ")}. Every request in flight waits out such a stall.`,
    `Merges ${settle.settled ? "settled" : "had NOT settled"} ${settle.seconds.toFixed(0)} s after phase (a) and DuckDB's timings: ${settle.segments} sealed segments, ${(diskBytes / ingest.events).toFixed(1)} B on disk per event (${(diskBytes / 2 ** 20).toFixed(0)} MiB).`,
    `Second load in (c): ${formatCount(secondLoad.events / secondLoad.seconds)} events/s achieved (${secondLoad.late} of its batches went out late); its answers are not compared (the data moves under them).`,
    `DuckDB ${duckdbVersion}, ${duckdb.threads} threads, table sorted by (event, distinct_id, ts); its medians are of runs on a quiet server (between (a) and (b)). ${reference === undefined ? "" : "DuckDB's answers were also checked against the naive reference (test/reference)."}`,
  ];
  const caption = `Random arrival: ${formatCount(options.events)} events, ${formatCount(options.users)} users, ${options.days} days; median of ${options.runs} runs after ${options.warmup} warm-up; ×duckdb = DuckDB's time ÷ Eventide's (higher is faster)`;
  say(`\n${caption}`);
  say(formatTextTable(header, tableRows));
  for (const note of notes) say(note);
  if (mismatches.length > 0) {
    say(`\nANSWERS DIFFER (${mismatches.length}):`);
    for (const mismatch of mismatches.slice(0, 20)) say(`  ${mismatch}`);
    process.exitCode = 1;
  }
  const markdown = [`## ${caption}`, "", formatMarkdownTable(header, tableRows), "", ...notes.map((note) => `- ${note}`), ""];
  if (dashboard.length > 0) {
    const dashboardCaption = `Dashboard after (b): ${dashboard.length} widgets asked in turn, ${options.dashboardRounds} rounds, one connection; the first round, then the median of the others`;
    const dashboardHeader = ["widget", "first round ms", "later rounds ms", "answers"];
    const dashboardRows = dashboard.map((row) => [
      row.name,
      formatMs(row.roundsMs[0] ?? Number.NaN),
      formatMs(row.roundsMs.length > 1 ? median(row.roundsMs.slice(1)) : Number.NaN),
      row.error !== undefined ? `ERROR ${row.error}` : row.varies ? "dates move" : row.stable ? "same each round" : "CHANGED",
    ]);
    say(`\n${dashboardCaption}`);
    say(formatTextTable(dashboardHeader, dashboardRows));
    markdown.push(`## ${dashboardCaption}`, "", formatMarkdownTable(dashboardHeader, dashboardRows), "", "Retention widgets move their dates by a day each round (their answers are cached for 60 s); the others ask the same question every round, and its answer must not change.", "");
  }
  if (mismatches.length > 0) markdown.push(`**ANSWERS DIFFER:** ${mismatches.length}; first: ${mismatches.slice(0, 5).join("; ")}`, "");
  mkdirSync(dirname(options.out), { recursive: true });
  writeFileSync(options.out, `${JSON.stringify({ benchmark: "query-random-arrival", startedAt, machine, options, rows: [...rows.values()], dashboard, phases, peakRssMiB, stallMaximaMs, diskBytes, ingest, secondLoad, settle, mismatches }, null, 2)}\n`);
  const reportPath = writeDatedReport({
    repositoryRoot,
    bench: "query-random-arrival",
    startedAt,
    machine,
    command: `npm run bench:query -- random-arrival ${argv.join(" ")}`.trimEnd(),
    body: markdown.join("\n"),
  });
  say(`\nwrote ${options.out} and ${reportPath}`);
}
