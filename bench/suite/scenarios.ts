/**
 * The scenarios of the bench suite, in the order a run takes them: load the
 * seeded dataset, queries alone at a sweep of concurrency, DuckDB on the same
 * rows, ingest (batches, then single events) at a sweep of connections with
 * the uWS ceiling run right after each Eventide step, the mixed load, the
 * soak. Every load step goes through `runLoadStep`: generator processes from
 * bench/load/http-load.ts, a CPU meter over the measured window, a per-second
 * timeline, live status on the terminal, and warnings when the generator —
 * not the server — may have set the pace.
 *
 * Estimate: the driver itself only reads one progress line per generator per
 * second during load steps (well under 1 % of a core); it works hard only
 * while generating the dataset (~0.4 µs per event) and while DuckDB runs.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Dataset } from "../fixtures/dataset.js";
import { buildBatchBodies, buildSingleBodies } from "../fixtures/events.js";
import { requestsFileText, saturationPercent, schedulerLagLimitMs, spawnLoad, type LoadProgress, type LoadReport, type RequestTemplate } from "../load/http-load.js";
import { firstDifference, type QueryAnswer } from "../query/query-request.js";
import { buildDataset, countPageviews, loadDataset, pageviewCount } from "./dataset-load.js";
import { keepAliveAgent, post } from "../runner/http-client.js";
import { CpuMeter, machineBusyCpuMs, othersPercent, processCpuMs, processMemoryBytes } from "../runner/machine.js";
import type { QueryKind, SuiteOptions } from "./options.js";
import type { Progress } from "./progress.js";
import { CacheExposure, queryVariants, type QueryVariant } from "./queries.js";
import type { ClickHouseResult, DuckdbResult, DuckdbRun, IngestRun, LoadRunBase, MixedQueryKind, MixedResult, MixedSample, QueryRun, SoakResult, StepCpu, SuiteResults, TimelinePoint } from "./results.js";
import { formatCount, formatMs, mean, summarizeHistogram, summarizeSample } from "../runner/stats.js";
import { startCeiling, type CeilingServer, type Target } from "../runner/server.js";
import { limits } from "../../src/config/limits.js";

export interface SuiteContext {
  options: SuiteOptions;
  repositoryRoot: string;
  /** Scratch directory for body and request files. */
  workDirectory: string;
  target: Target;
  progress: Progress;
  warnings: string[];
  /** Others' CPU (percent of one core) of every step, for the noise figures. */
  othersSamples: number[];
  uuidStamp: number;
  dataset: Dataset | null;
  datasetResult: SuiteResults["dataset"];
  ceiling: CeilingServer | null;
  retentionExposure: CacheExposure | null;
  /** Events the target acknowledged over the whole run (all steps, warm-ups included). */
  acknowledgedEvents: number;
  ingest: IngestRun[];
  queries: QueryRun[];
  duckdb: DuckdbResult | null;
  clickhouse: ClickHouseResult | null;
  mixed: MixedResult | null;
  soak: SoakResult | null;
}

export function sleep(milliseconds: number): Promise<void> {
  return new Promise((resolveSleep) => setTimeout(resolveSleep, milliseconds));
}

export function warn(context: SuiteContext, text: string): void {
  context.warnings.push(text);
  context.progress.log(`  ! ${text}`);
}

// ---------------------------------------------------------------------------
// One load step.

interface LoadStepSpec {
  label: string;
  url: string;
  bodiesFile?: string;
  requestsFile?: string;
  eventsPerBody?: number;
  connections: number;
  /** Requests per second (all processes); 0 for a closed loop. */
  rate: number;
  warmupSeconds: number;
  durationSeconds: number;
  serverPids: number[];
  restampUuids: boolean;
  requestOffset?: number;
  progressSeconds?: number;
  describe: (progress: LoadProgress) => string;
  onProgress?: (progress: LoadProgress) => void;
  /** When false the caller starts and ends the progress step (two generators in one step). */
  ownsProgressStep?: boolean;
}

interface LoadStepResult {
  report: LoadReport;
  cpu: StepCpu;
  timeline: TimelinePoint[];
  startedAtMs: number;
  endedAtMs: number;
}

export function timelinePoint(progress: LoadProgress, warmupSeconds: number): TimelinePoint {
  const seconds = progress.intervalMs / 1000;
  const latency = summarizeHistogram(progress.histogram);
  return {
    seconds: Math.round((progress.elapsedMs / 1000 - warmupSeconds) * 1000) / 1000,
    requestsPerSecond: progress.ok / seconds,
    eventsPerSecond: progress.okEvents / seconds,
    p50Ms: latency.p50,
    p99Ms: latency.p99,
    errors: progress.errors,
  };
}

function stepCpu(report: LoadReport, share: ReturnType<CpuMeter["read"]>): StepCpu {
  return {
    generatorPercent: report.cpu.percentOfOneCore,
    generatorPerProcessPercent: report.cpu.perProcessPercent,
    generatorSaturated: report.saturated,
    serverPercent: share.serverPercent,
    driverPercent: share.driverPercent,
    othersPercent: othersPercent(share, report.cpu.percentOfOneCore),
  };
}

/** Measures CPU over the window that opens `warmupSeconds` after the generators start. */
class WindowCpu {
  private meter: CpuMeter | null = null;
  private share: ReturnType<CpuMeter["read"]> | null = null;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(private readonly pids: readonly number[]) {}

  start(warmupSeconds: number, durationSeconds: number): void {
    this.timers.push(setTimeout(() => (this.meter = new CpuMeter(this.pids)), warmupSeconds * 1000));
    this.timers.push(setTimeout(() => (this.share = this.meter?.read() ?? null), (warmupSeconds + durationSeconds) * 1000));
  }

  read(): ReturnType<CpuMeter["read"]> {
    for (const timer of this.timers) clearTimeout(timer);
    return this.share ?? this.meter?.read() ?? { serverPercent: Number.NaN, driverPercent: Number.NaN, machinePercent: Number.NaN };
  }
}

async function runLoadStep(context: SuiteContext, spec: LoadStepSpec): Promise<LoadStepResult> {
  const ownsStep = spec.ownsProgressStep ?? true;
  if (ownsStep) context.progress.startStep(spec.label, spec.warmupSeconds + spec.durationSeconds);
  const timeline: TimelinePoint[] = [];
  const cpu = new WindowCpu(spec.serverPids);
  const uuidStamp = context.uuidStamp;
  context.uuidStamp = (context.uuidStamp + context.options.loadProcesses) & 0xffff;
  const startedAtMs = performance.now();
  const report = await spawnLoad({
    url: spec.url,
    bodiesFile: spec.bodiesFile,
    requestsFile: spec.requestsFile,
    eventsPerBody: spec.eventsPerBody,
    connections: spec.connections,
    processes: context.options.loadProcesses,
    warmupSeconds: spec.warmupSeconds,
    durationSeconds: spec.durationSeconds,
    restampUuids: spec.restampUuids,
    uuidStamp,
    rate: spec.rate > 0 ? spec.rate : undefined,
    drainSeconds: context.options.drainSeconds,
    requestOffset: spec.requestOffset,
    // Short steps get finer intervals, so their throughput-over-time chart has a shape.
    progressSeconds: spec.progressSeconds ?? (spec.durationSeconds <= 5 ? 0.5 : 1),
    onStart: () => cpu.start(spec.warmupSeconds, spec.durationSeconds),
    onProgress: (progress) => {
      timeline.push(timelinePoint(progress, spec.warmupSeconds));
      spec.onProgress?.(progress);
      if (ownsStep) context.progress.status(`${progress.measuring ? "" : "warm-up · "}${spec.describe(progress)}`);
    },
  });
  const endedAtMs = performance.now();
  const share = cpu.read();
  const result = { report, cpu: stepCpu(report, share), timeline, startedAtMs, endedAtMs };
  // A step shared by two generators (mixed, soak) is counted once, by its caller.
  if (ownsStep && Number.isFinite(result.cpu.othersPercent)) context.othersSamples.push(result.cpu.othersPercent);
  checkStep(context, spec.label, result);
  return result;
}

/** Warnings a reader must see next to the step's figures. */
function checkStep(context: SuiteContext, label: string, result: LoadStepResult): void {
  const { report, cpu } = result;
  if (cpu.generatorPerProcessPercent.some((percent) => percent > saturationPercent)) {
    const serverBusy = Number.isFinite(cpu.serverPercent) ? ` while the server used ${cpu.serverPercent.toFixed(0)} %` : "";
    warn(
      context,
      `${label}: the load generator used ${cpu.generatorPerProcessPercent.map((percent) => `${percent.toFixed(0)} %`).join(" + ")} of a core${serverBusy} — ` +
        `it, not the server, may have set the pace (over ${saturationPercent} %; try --load-processes ${context.options.loadProcesses + 1})`,
    );
  }
  if (report.mode === "open" && report.schedulerLagMs.p99 > schedulerLagLimitMs) {
    warn(
      context,
      `${label}: the load generator sent 1 % of its requests more than ${formatMs(report.schedulerLagMs.p99)} ms late with a connection free ` +
        `(its own CPU ${cpu.generatorPercent.toFixed(0)} %, others ${cpu.othersPercent.toFixed(0)} %): it was starved of CPU, and those latencies include its lag`,
    );
  }
  const errors = errorCount(report);
  if (errors > 0) {
    const statuses = Object.entries(report.statusCounts).filter(([status]) => !status.startsWith("2"));
    const sample = Object.entries(report.sampleBodies).find(([status]) => !status.startsWith("2"));
    const causes = [
      ...statuses.map(([status, count]) => `${count}× HTTP ${status}`),
      ...(report.socketErrors > 0 ? [`${report.socketErrors} socket errors`] : []),
      ...(report.protocolErrors > 0 ? [`${report.protocolErrors} unreadable answers`] : []),
      ...(report.timedOut > 0 ? [`${report.timedOut} unanswered within the drain time`] : []),
    ];
    warn(context, `${label}: ${errors} of ${report.requests} requests failed (${causes.join(", ")})` + (sample === undefined ? "" : `: ${sample[1].slice(0, 160)}`));
  }
  if (report.mode === "open" && report.targetRate !== null && report.requestsPerSecond < report.targetRate * 0.95) {
    warn(context, `${label}: the server answered ${formatCount(report.requestsPerSecond)} of the ${formatCount(report.targetRate)} requests/s asked for; latencies include the queue that built up`);
  }
}

function errorCount(report: LoadReport): number {
  return report.requests - report.okResponses + report.socketErrors + report.protocolErrors;
}

/** The figures every load step records, whatever it drove. */
function loadRunFigures(step: LoadStepResult, connections: number): LoadRunBase {
  const { report } = step;
  return {
    connections,
    mode: report.mode,
    targetRequestsPerSecond: report.targetRate,
    requestsPerSecond: report.requestsPerSecond,
    latencyMs: report.latencyMs,
    serviceLatencyMs: report.serviceLatencyMs,
    schedulerLagP99Ms: report.schedulerLagMs.p99,
    requests: report.requests,
    errors: errorCount(report),
    statusCounts: report.statusCounts,
    timedOut: report.timedOut,
    cpu: step.cpu,
    timeline: step.timeline,
  };
}

function cpuSummary(cpu: StepCpu): string {
  return `CPU: generator ${cpu.generatorPercent.toFixed(0)} %, server ${Number.isFinite(cpu.serverPercent) ? `${cpu.serverPercent.toFixed(0)} %` : "?"}, others ${cpu.othersPercent.toFixed(0)} %`;
}

// ---------------------------------------------------------------------------
// Dataset.

function datasetNeeded(options: SuiteOptions): boolean {
  return options.scenarios.some((scenario) => scenario === "queries" || scenario === "duckdb" || scenario === "clickhouse" || scenario === "mixed" || scenario === "soak");
}

export async function prepareDataset(context: SuiteContext): Promise<void> {
  const { options, target } = context;
  if (!datasetNeeded(options)) return;
  const choice = options.dataset;
  context.progress.startStep(`generate dataset (${formatCount(choice.events)} events)`, Math.max(1, choice.events / 2_500_000));
  const generateStartMs = performance.now();
  const dataset = buildDataset(choice);
  context.dataset = dataset;
  context.progress.endStep(`${formatCount(dataset.eventCount)} events, ${formatCount(choice.users)} users, ${choice.days} days in ${((performance.now() - generateStartMs) / 1000).toFixed(1)} s`);

  let load = options.load === "always";
  if (options.load === "auto") {
    if (target.kind === "self-started") load = true;
    else {
      const present = await countPageviews(target, choice);
      const expected = pageviewCount(dataset);
      if (present === 0) load = true;
      else if (present === expected) {
        context.datasetResult.action = "already-there";
        context.progress.log(`  dataset: the target already counts ${formatCount(present)} $pageviews in the range, as this dataset has: not loading it again`);
      } else {
        context.datasetResult.action = "not-loaded";
        warn(
          context,
          `the target counts ${formatCount(present)} $pageviews from ${choice.startDate} over ${choice.days} days where this dataset has ${formatCount(expected)}: ` +
            "it holds other data, so the dataset was not loaded (--load always to load it anyway); query figures are over whatever it holds, and answers are not checked against DuckDB",
        );
      }
    }
  }
  if (options.load === "never") context.datasetResult.action = "not-loaded";
  if (!load) return;

  context.progress.startStep(`load dataset into Eventide`, choice.events / 150_000 + 1);
  const report = await loadDataset(target, dataset, {
    inflight: 4,
    onProgress: (update) => context.progress.status(`${formatCount(update.acknowledgedEvents)} of ${formatCount(dataset.eventCount)} events · ${formatCount((update.acknowledgedEvents / update.elapsedMs) * 1000)} events/s`),
  });
  context.acknowledgedEvents += report.events;
  Object.assign(context.datasetResult, { action: "loaded", loadSeconds: report.seconds, loadEventsPerSecond: report.eventsPerSecond, loadRetries: report.retries });
  context.progress.endStep(`${formatCount(report.events)} events in ${report.seconds.toFixed(1)} s (${formatCount(report.eventsPerSecond)} events/s, ${report.retries} retries after 503)`);
  // Freshly loaded rows sit in active segments until a checkpoint seals them (2 M rows, or 60 s idle), and
  // queries over them take another path. A restart seals them now, so every query step — alone, mixed,
  // soak — sees the same settled store, the one a long-running server has.
  if (options.restartAfterLoad && target.restart !== undefined) {
    context.progress.startStep("restart Eventide (SIGTERM seals the loaded rows)", 3);
    const restartStartMs = performance.now();
    await target.restart();
    context.progress.endStep(`pid ${target.pid}, query ${target.queryUrl}, ingest ${target.ingestUrl} (${((performance.now() - restartStartMs) / 1000).toFixed(1)} s)`);
  } else if (target.kind === "external") {
    context.progress.log(
      "  note: the rows just loaded stay in the server's active segments until its next checkpoint (by default after 2 M rows or 60 s idle); queries before that take the unsealed path",
    );
  }
  await waitForQuietServer(context);
}

/** After a load the server may still be sealing segments: wait (up to 60 s) until it idles, so queries are timed on a settled store. */
async function waitForQuietServer(context: SuiteContext): Promise<void> {
  const pid = context.target.pid;
  if (pid === undefined) {
    await sleep(2000);
    return;
  }
  await waitUntilIdle(context, [pid], "wait for the server to settle");
}

/** A step that waits (up to 60 s) until the processes together use under a fifth of a core over half a second. */
export async function waitUntilIdle(context: SuiteContext, pids: readonly number[], label: string): Promise<void> {
  context.progress.startStep(label, 2);
  const startMs = performance.now();
  const cpuMs = () => pids.reduce((sum, pid) => sum + processCpuMs(pid), 0);
  let lastCpuMs = cpuMs();
  while (performance.now() - startMs < 60_000) {
    await sleep(500);
    const nowCpuMs = cpuMs();
    const busyPercent = ((nowCpuMs - lastCpuMs) / 500) * 100;
    lastCpuMs = nowCpuMs;
    if (!(busyPercent > 20)) break;
    context.progress.status(`still busy (${busyPercent.toFixed(0)} % CPU)`);
  }
  context.progress.endStep(`settled after ${((performance.now() - startMs) / 1000).toFixed(1)} s`);
}

// ---------------------------------------------------------------------------
// Queries alone.

function queryTemplates(context: SuiteContext, kind: QueryKind, variants: readonly QueryVariant[]): RequestTemplate[] {
  return variants.map((variant) => ({ tag: kind, path: variant.path, headers: { authorization: `Bearer ${context.target.token}` }, body: variant.body, eventsPerBody: 0 }));
}

function serverPids(context: SuiteContext): number[] {
  return context.target.pid === undefined ? [] : [context.target.pid];
}

export async function runQueries(context: SuiteContext): Promise<void> {
  const { options } = context;
  context.progress.log("\nqueries (each kind alone)");
  for (const kind of options.queries) {
    const variants = queryVariants(kind, options.dataset);
    const file = join(context.workDirectory, `queries-${kind}.ndjson`);
    writeFileSync(file, requestsFileText(queryTemplates(context, kind, variants)));
    if (kind === "retention" && context.retentionExposure === null) context.retentionExposure = new CacheExposure(variants.length);
    for (const connections of options.queryConcurrency) {
      for (const rate of options.queryRates) {
        const label = `query ${kind} c=${connections}${rate > 0 ? ` @${formatCount(rate)}/s` : ""}`;
        const exposure = kind === "retention" ? context.retentionExposure : null;
        const step = await runLoadStep(context, {
          label,
          url: context.target.queryUrl,
          requestsFile: file,
          connections,
          rate,
          warmupSeconds: options.warmupSeconds,
          durationSeconds: options.durationSeconds,
          serverPids: serverPids(context),
          restampUuids: false,
          requestOffset: exposure?.offset ?? 0,
          describe: (progress) => {
            const point = timelinePoint(progress, 0);
            return `${formatCount(point.requestsPerSecond)} queries/s · p50 ${formatMs(point.p50Ms)} ms · p99 ${formatMs(point.p99Ms)} ms`;
          },
        });
        const { report } = step;
        // Everything sent, warm-up included, went through the cache.
        const sent = Math.round(report.requests * ((options.warmupSeconds + options.durationSeconds) / options.durationSeconds));
        const cachedShareEstimate = exposure === null ? 0 : exposure.record(sent, step.startedAtMs, step.endedAtMs);
        const run: QueryRun = { query: kind, ...loadRunFigures(step, connections), distinctRequests: variants.length, cachedShareEstimate };
        context.queries.push(run);
        context.progress.endStep(
          `${formatCount(run.requestsPerSecond)} queries/s, p50 ${formatMs(run.latencyMs.p50)} ms, p95 ${formatMs(run.latencyMs.p95)} ms, p99 ${formatMs(run.latencyMs.p99)} ms` +
            (cachedShareEstimate > 0.01 ? ` (≈${(cachedShareEstimate * 100).toFixed(0)} % may be cached answers)` : "") +
            `; ${cpuSummary(run.cpu)}`,
        );
      }
    }
  }
}

// ---------------------------------------------------------------------------
// DuckDB beside the queries.

export async function runDuckdb(context: SuiteContext): Promise<void> {
  const { options } = context;
  const dataset = context.dataset;
  if (dataset === null) return;
  context.progress.log("\nDuckDB on the same rows (peer)");
  let engineModule: typeof import("../query/duckdb-engine.js");
  try {
    engineModule = await import("../query/duckdb-engine.js");
  } catch (error) {
    warn(context, `DuckDB peer skipped: ${(error as Error).message.split("\n")[0]} (@duckdb/node-api is a devDependency: npm install in the Eventide checkout)`);
    return;
  }
  const threads = Math.max(1, (await import("node:os")).availableParallelism());
  context.progress.startStep(`load ${formatCount(dataset.eventCount)} rows into DuckDB`, dataset.eventCount / 300_000 + 1);
  const engine = await engineModule.DuckDbEngine.open(threads);
  try {
    const version = String((await engine.connection.runAndReadAll("SELECT version()")).getRows()[0][0]);
    const loadStartMs = performance.now();
    await engine.loadDataset("events", dataset);
    const loadSeconds = (performance.now() - loadStartMs) / 1000;
    context.progress.endStep(`DuckDB ${version}, ${threads} threads, loaded and sorted in ${loadSeconds.toFixed(1)} s`);
    const checkAnswers = context.datasetResult.action === "loaded" || context.datasetResult.action === "already-there";
    const agent = keepAliveAgent(1);
    const runs: DuckdbRun[] = [];
    for (const kind of options.queries) {
      const variants = queryVariants(kind, options.dataset);
      context.progress.startStep(`duckdb ${kind}`, options.duckdbSecondsPerQuery + 0.5);
      // One warm-up run (it also gives the answer to check Eventide's against).
      const first = await engine.answer("events", variants[0].request);
      const timesMs: number[] = [];
      const budgetEndMs = performance.now() + options.duckdbSecondsPerQuery * 1000;
      let lastStatusMs = 0;
      for (let index = 1; (performance.now() < budgetEndMs || timesMs.length < 3) && timesMs.length < 10_000; index += 1) {
        const { elapsedMs } = await engine.answer("events", variants[index % variants.length].request);
        timesMs.push(elapsedMs);
        if (performance.now() - lastStatusMs > 1000) {
          lastStatusMs = performance.now();
          context.progress.status(`${timesMs.length} runs · median so far ${formatMs(summarizeSample(timesMs).p50)} ms`);
        }
      }
      const run: DuckdbRun = { query: kind, runs: timesMs.length, latencyMs: summarizeSample(timesMs), answersMatch: null };
      if (checkAnswers) {
        const answer = await post(agent, `${context.target.queryUrl}${variants[0].path}`, variants[0].body, { headers: { authorization: `Bearer ${context.target.token}` }, idempotent: true });
        let parsed: unknown = answer.text;
        try {
          parsed = JSON.parse(answer.text) as QueryAnswer;
        } catch {
          // Compared as text, which will differ.
        }
        const difference = answer.status === 200 ? firstDifference(parsed, first.answer) : `HTTP ${answer.status}`;
        run.answersMatch = difference === undefined;
        if (difference !== undefined) {
          run.difference = difference;
          warn(context, `${kind}: Eventide's answer differs from DuckDB's at ${difference} (request ${variants[0].body})`);
        }
      }
      runs.push(run);
      context.progress.endStep(
        `${run.runs} runs, p50 ${formatMs(run.latencyMs.p50)} ms, p95 ${formatMs(run.latencyMs.p95)} ms` +
          (run.answersMatch === null ? "" : run.answersMatch ? "; Eventide's answer identical" : "; ANSWERS DIFFER"),
      );
    }
    agent.destroy();
    context.duckdb = { version, threads, loadSeconds, runs };
  } finally {
    engine.close();
  }
}

// ---------------------------------------------------------------------------
// Ingest, with the ceiling right after each Eventide step.

interface BodyFiles {
  batch: { file: string; eventsPerBody: number };
  single: { file: string; eventsPerBody: number };
}

function writeBodyFiles(context: SuiteContext): BodyFiles {
  const { options, workDirectory, target } = context;
  // Timestamps end at the start of the current hour, so reruns within the hour send the same bytes.
  const endTimeMs = Math.floor(Date.now() / 3_600_000) * 3_600_000;
  const batch = buildBatchBodies({ seed: options.dataset.seed, apiKey: target.apiKey, bodyCount: 16, eventsPerBody: options.batchEvents, endTimeMs });
  const single = buildSingleBodies({ seed: options.dataset.seed + 1, apiKey: target.apiKey, bodyCount: 4096, endTimeMs });
  const write = (name: string, bodies: Buffer[]) => {
    const file = join(workDirectory, name);
    writeFileSync(file, Buffer.concat(bodies.flatMap((body) => [body, Buffer.from("\n")])));
    return file;
  };
  return { batch: { file: write("batch.ndjson", batch.bodies), eventsPerBody: batch.eventsPerBody }, single: { file: write("single.ndjson", single.bodies), eventsPerBody: 1 } };
}

export async function runIngest(context: SuiteContext): Promise<void> {
  const { options } = context;
  const eventideScenarios = (["ingest-batch", "ingest-single"] as const).filter((scenario) => options.scenarios.includes(scenario));
  const withCeiling = options.scenarios.includes("ceiling");
  // The ceiling alone (without Eventide's ingest steps) runs both sweeps.
  const sweeps = eventideScenarios.length > 0 ? eventideScenarios : withCeiling ? (["ingest-batch", "ingest-single"] as const) : [];
  if (sweeps.length === 0) return;
  const files = writeBodyFiles(context);
  try {
    for (const scenario of sweeps) {
      const shape = scenario === "ingest-batch" ? files.batch : files.single;
      const path = scenario === "ingest-batch" ? "/ingest/batch" : "/ingest";
      const connectionList = scenario === "ingest-batch" ? options.batchConnections : options.singleConnections;
      context.progress.log(`\n${scenario} (${scenario === "ingest-batch" ? `batches of ${shape.eventsPerBody} events` : "one event per request"})`);
      for (const connections of connectionList) {
        for (const eventRate of options.ingestRates) {
          const servers: IngestRun["server"][] = [];
          if (eventideScenarios.includes(scenario)) servers.push("eventide");
          if (withCeiling) servers.push("ceiling");
          for (const server of servers) {
            if (server === "ceiling" && context.ceiling === null) context.ceiling = await startCeiling(context.repositoryRoot);
            const baseUrl = server === "eventide" ? context.target.ingestUrl : context.ceiling!.url;
            const pids = server === "eventide" ? serverPids(context) : context.ceiling?.pid === undefined ? [] : [context.ceiling.pid];
            const label = `${scenario} ${server} c=${connections}${eventRate > 0 ? ` @${formatCount(eventRate)} events/s` : ""}`;
            const step = await runLoadStep(context, {
              label,
              url: `${baseUrl}${path}`,
              bodiesFile: shape.file,
              eventsPerBody: shape.eventsPerBody,
              connections,
              rate: eventRate > 0 ? eventRate / shape.eventsPerBody : 0,
              warmupSeconds: options.warmupSeconds,
              durationSeconds: options.durationSeconds,
              serverPids: pids,
              restampUuids: true,
              describe: (progress) => {
                const point = timelinePoint(progress, 0);
                return `${formatCount(point.eventsPerSecond)} events/s · p50 ${formatMs(point.p50Ms)} ms · p99 ${formatMs(point.p99Ms)} ms`;
              },
            });
            const { report } = step;
            if (server === "eventide") context.acknowledgedEvents += report.allOkEvents;
            const run: IngestRun = {
              scenario,
              server,
              eventsPerBody: shape.eventsPerBody,
              targetEventsPerSecond: eventRate > 0 ? eventRate : null,
              eventsPerSecond: report.eventsPerSecond,
              ...loadRunFigures(step, connections),
            };
            context.ingest.push(run);
            const peer = server === "ceiling" ? context.ingest.find((other) => other.server === "eventide" && other.scenario === scenario && other.connections === connections && other.targetEventsPerSecond === run.targetEventsPerSecond) : undefined;
            context.progress.endStep(
              `${formatCount(run.eventsPerSecond)} events/s, ${formatCount(run.requestsPerSecond)} req/s, p50 ${formatMs(run.latencyMs.p50)} ms, p99 ${formatMs(run.latencyMs.p99)} ms` +
                (peer === undefined ? "" : ` (Eventide reached ${((peer.eventsPerSecond / run.eventsPerSecond) * 100).toFixed(0)} % of this)`) +
                `; ${cpuSummary(run.cpu)}`,
            );
            await sleep(200);
          }
        }
      }
    }
  } finally {
    if (context.ceiling !== null) {
      await context.ceiling.stop();
      context.ceiling = null;
    }
  }
}

// ---------------------------------------------------------------------------
// Mixed and soak: queries while ingest holds a steady open-loop rate.

/** The ingest rate of "auto": 40 % of the best closed-loop batch rate measured, else a modest default. */
export function autoIngestRate(runs: readonly IngestRun[]): number {
  const best = runs.filter((run) => run.server === "eventide" && run.scenario === "ingest-batch" && run.mode === "closed").reduce((top, run) => Math.max(top, run.eventsPerSecond), 0);
  return best > 0 ? Math.max(1000, Math.round((best * 0.4) / 1000) * 1000) : 20_000;
}

/** Least-squares slope of y over x; NaN with fewer than two points. */
export function slope(points: readonly (readonly [number, number])[]): number {
  const usable = points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  if (usable.length < 2) return Number.NaN;
  const meanX = mean(usable.map(([x]) => x));
  const meanY = mean(usable.map(([, y]) => y));
  let numerator = 0;
  let denominator = 0;
  for (const [x, y] of usable) {
    numerator += (x - meanX) * (y - meanY);
    denominator += (x - meanX) ** 2;
  }
  return denominator === 0 ? Number.NaN : numerator / denominator;
}

interface MixedSpec {
  name: "mixed" | "soak";
  seconds: number;
  ingestRate: number;
  batchEvents: number;
  concurrency: number;
  queryRate: number;
  sampleSeconds: number;
}

async function runMixedLoad(context: SuiteContext, spec: MixedSpec): Promise<MixedResult> {
  const { options, target } = context;
  const endTimeMs = Math.floor(Date.now() / 3_600_000) * 3_600_000;
  const bodies = buildBatchBodies({ seed: options.dataset.seed + 7, apiKey: target.apiKey, bodyCount: 64, eventsPerBody: spec.batchEvents, endTimeMs });
  const bodiesFile = join(context.workDirectory, `${spec.name}-batch.ndjson`);
  writeFileSync(bodiesFile, Buffer.concat(bodies.bodies.flatMap((body) => [body, Buffer.from("\n")])));
  // Rounds of every kind in turn; retention walks its variants across rounds.
  const variantsByKind = options.queries.map((kind) => ({ kind, variants: queryVariants(kind, options.dataset) }));
  const rounds = Math.max(...variantsByKind.map((entry) => entry.variants.length));
  const templates: RequestTemplate[] = [];
  for (let round = 0; round < rounds; round += 1) {
    for (const { kind, variants } of variantsByKind) templates.push(...queryTemplates(context, kind, [variants[round % variants.length]]));
  }
  const requestsFile = join(context.workDirectory, `${spec.name}-queries.ndjson`);
  writeFileSync(requestsFile, requestsFileText(templates));

  const ingestRequestRate = spec.ingestRate / spec.batchEvents;
  // Like many independent clients: enough connections for half a second of requests at the rate,
  // so a slow answer delays the next ones only when the server, not the pool, is the limit.
  const ingestConnections = Math.min(256, Math.max(8, Math.ceil(ingestRequestRate * 0.5)));
  const warmupSeconds = options.warmupSeconds;
  context.progress.startStep(`${spec.name}: ingest @${formatCount(spec.ingestRate)} events/s + queries c=${spec.concurrency}`, warmupSeconds + spec.seconds + 0.5);

  // Samples pair the two generators' intervals by index, with RSS and CPU read when a pair completes.
  const pending = new Map<number, { ingest?: LoadProgress; queries?: LoadProgress }>();
  const samples: MixedSample[] = [];
  const pid = target.pid;
  let sampleMachineMs = machineBusyCpuMs();
  let sampleServerMs = pid === undefined ? Number.NaN : processCpuMs(pid);
  let sampleDriverUsage = process.cpuUsage();
  let sampleAtMs = performance.now();
  const pair = (which: "ingest" | "queries", progress: LoadProgress) => {
    const entry = pending.get(progress.index) ?? {};
    entry[which] = progress;
    if (entry.ingest === undefined || entry.queries === undefined) {
      pending.set(progress.index, entry);
      return;
    }
    pending.delete(progress.index);
    const nowMs = performance.now();
    const elapsedMs = nowMs - sampleAtMs;
    const machineMs = machineBusyCpuMs();
    const serverMs = pid === undefined ? Number.NaN : processCpuMs(pid);
    const driver = process.cpuUsage(sampleDriverUsage);
    const serverPercent = ((serverMs - sampleServerMs) / elapsedMs) * 100;
    const othersShare = othersPercent(
      { serverPercent, driverPercent: ((driver.user + driver.system) / 1000 / elapsedMs) * 100, machinePercent: ((machineMs - sampleMachineMs) / elapsedMs) * 100 },
      entry.ingest.cpuPercent + entry.queries.cpuPercent,
    );
    sampleMachineMs = machineMs;
    sampleServerMs = serverMs;
    sampleDriverUsage = process.cpuUsage();
    sampleAtMs = nowMs;
    const ingestPoint = timelinePoint(entry.ingest, warmupSeconds);
    const queryPoint = timelinePoint(entry.queries, warmupSeconds);
    if (ingestPoint.seconds <= 0) return;
    samples.push({
      seconds: ingestPoint.seconds,
      ingestEventsPerSecond: ingestPoint.eventsPerSecond,
      ingestP99Ms: ingestPoint.p99Ms,
      queriesPerSecond: queryPoint.requestsPerSecond,
      queryP50Ms: queryPoint.p50Ms,
      queryP99Ms: queryPoint.p99Ms,
      rssMiB: pid === undefined ? Number.NaN : processMemoryBytes(pid, "VmRSS") / 2 ** 20,
      serverCpuPercent: serverPercent,
      othersCpuPercent: othersShare,
      errors: entry.ingest.errors + entry.queries.errors,
    });
    context.progress.status(
      `ingest ${formatCount(ingestPoint.eventsPerSecond)} events/s (p99 ${formatMs(ingestPoint.p99Ms)} ms) · ${formatCount(queryPoint.requestsPerSecond)} queries/s (p99 ${formatMs(queryPoint.p99Ms)} ms)` +
        (Number.isFinite(samples.at(-1)!.rssMiB) ? ` · RSS ${samples.at(-1)!.rssMiB.toFixed(0)} MiB` : ""),
    );
  };

  const common = { warmupSeconds, durationSeconds: spec.seconds, serverPids: serverPids(context), progressSeconds: spec.sampleSeconds, ownsProgressStep: false, describe: () => "" };
  const [ingest, queries] = await Promise.all([
    runLoadStep(context, {
      ...common,
      label: `${spec.name} ingest`,
      url: `${target.ingestUrl}/ingest/batch`,
      bodiesFile,
      eventsPerBody: spec.batchEvents,
      connections: ingestConnections,
      rate: ingestRequestRate,
      restampUuids: true,
      onProgress: (progress) => pair("ingest", progress),
    }),
    runLoadStep(context, {
      ...common,
      label: `${spec.name} queries`,
      url: target.queryUrl,
      requestsFile,
      connections: spec.concurrency,
      rate: spec.queryRate,
      restampUuids: false,
      requestOffset: (context.retentionExposure?.offset ?? 0) * variantsByKind.length,
      onProgress: (progress) => pair("queries", progress),
    }),
  ]);
  context.acknowledgedEvents += ingest.report.allOkEvents;
  const retentionRequests = queries.report.byTag.retention?.requests ?? 0;
  const retentionCachedShare =
    context.retentionExposure === null || retentionRequests === 0
      ? 0
      : context.retentionExposure.record(Math.round(retentionRequests * ((warmupSeconds + spec.seconds) / spec.seconds)), queries.startedAtMs, queries.endedAtMs);

  const byKind: MixedQueryKind[] = options.queries.map((kind) => {
    const tag = queries.report.byTag[kind];
    const idle = context.queries
      .filter((run) => run.query === kind && run.mode === "closed")
      .sort((left, right) => Math.abs(left.connections - spec.concurrency) - Math.abs(right.connections - spec.concurrency))[0];
    return {
      query: kind,
      requests: tag?.requests ?? 0,
      requestsPerSecond: tag?.requestsPerSecond ?? 0,
      latencyMs: tag === undefined ? summarizeSample([]) : tag.latencyMs,
      idleLatencyMs: idle?.latencyMs ?? null,
      idleConnections: idle?.connections ?? null,
      cachedShareEstimate: kind === "retention" ? retentionCachedShare : 0,
    };
  });
  const cpu: StepCpu = {
    generatorPercent: ingest.cpu.generatorPercent + queries.cpu.generatorPercent,
    generatorPerProcessPercent: [...ingest.cpu.generatorPerProcessPercent, ...queries.cpu.generatorPerProcessPercent],
    generatorSaturated: ingest.cpu.generatorSaturated || queries.cpu.generatorSaturated,
    serverPercent: ingest.cpu.serverPercent,
    driverPercent: ingest.cpu.driverPercent,
    // Each meter saw the other generator as "others": take it out again.
    othersPercent: Math.max(0, ingest.cpu.othersPercent - queries.cpu.generatorPercent),
  };
  return {
    seconds: spec.seconds,
    ingest: {
      targetEventsPerSecond: spec.ingestRate,
      eventsPerSecond: ingest.report.eventsPerSecond,
      batchEvents: spec.batchEvents,
      latencyMs: ingest.report.latencyMs,
      serviceLatencyMs: ingest.report.serviceLatencyMs,
      errors: errorCount(ingest.report),
      timedOut: ingest.report.timedOut,
    },
    queries: {
      connections: spec.concurrency,
      mode: queries.report.mode,
      requestsPerSecond: queries.report.requestsPerSecond,
      latencyMs: queries.report.latencyMs,
      errors: errorCount(queries.report),
      byKind,
    },
    cpu,
    samples,
  };
}

function resolveRate(context: SuiteContext, rate: number | "auto"): number {
  return rate === "auto" ? autoIngestRate(context.ingest) : rate;
}

export async function runMixed(context: SuiteContext): Promise<void> {
  const { options } = context;
  context.progress.log("\nmixed (queries while ingest holds a steady rate)");
  const result = await runMixedLoad(context, {
    name: "mixed",
    seconds: options.mixed.seconds,
    ingestRate: resolveRate(context, options.mixed.ingestRate),
    batchEvents: options.mixed.batchEvents,
    concurrency: options.mixed.concurrency,
    queryRate: options.mixed.queryRate,
    sampleSeconds: 1,
  });
  context.mixed = result;
  if (Number.isFinite(result.cpu.othersPercent)) context.othersSamples.push(result.cpu.othersPercent);
  context.progress.endStep(
    `ingest ${formatCount(result.ingest.eventsPerSecond)} events/s (p99 ${formatMs(result.ingest.latencyMs.p99)} ms); queries ${formatCount(result.queries.requestsPerSecond)}/s, ` +
      `p50 ${formatMs(result.queries.latencyMs.p50)} ms, p95 ${formatMs(result.queries.latencyMs.p95)} ms, p99 ${formatMs(result.queries.latencyMs.p99)} ms`,
  );
}

export function soakSummary(samples: readonly MixedSample[]): SoakResult["summary"] {
  const tenth = Math.max(1, Math.floor(samples.length / 10));
  const first = samples.slice(0, tenth);
  const last = samples.slice(-tenth);
  const rss = samples.map((sample) => sample.rssMiB).filter((value) => Number.isFinite(value));
  return {
    ingestEventsPerSecondFirst: mean(first.map((sample) => sample.ingestEventsPerSecond)),
    ingestEventsPerSecondLast: mean(last.map((sample) => sample.ingestEventsPerSecond)),
    queryP99MsFirst: mean(first.map((sample) => sample.queryP99Ms)),
    queryP99MsLast: mean(last.map((sample) => sample.queryP99Ms)),
    rssMiBStart: rss.length > 0 ? rss[0] : Number.NaN,
    rssMiBEnd: rss.length > 0 ? rss[rss.length - 1] : Number.NaN,
    rssMiBPeak: rss.length > 0 ? Math.max(...rss) : Number.NaN,
    rssGrowthMiBPerMinute: slope(samples.map((sample) => [sample.seconds / 60, sample.rssMiB] as const)),
  };
}

export async function runSoak(context: SuiteContext): Promise<void> {
  const { options } = context;
  context.progress.log(`\nsoak (${options.soak.seconds} s)`);
  const result = await runMixedLoad(context, {
    name: "soak",
    seconds: options.soak.seconds,
    ingestRate: resolveRate(context, options.soak.ingestRate),
    batchEvents: options.soak.batchEvents,
    concurrency: options.soak.concurrency,
    queryRate: options.soak.queryRate,
    sampleSeconds: options.soak.sampleSeconds,
  });
  const summary = soakSummary(result.samples);
  context.soak = { ...result, sampleSeconds: options.soak.sampleSeconds, summary };
  if (Number.isFinite(result.cpu.othersPercent)) context.othersSamples.push(result.cpu.othersPercent);
  context.progress.endStep(
    `ingest ${formatCount(summary.ingestEventsPerSecondFirst)} → ${formatCount(summary.ingestEventsPerSecondLast)} events/s, query p99 ${formatMs(summary.queryP99MsFirst)} → ${formatMs(summary.queryP99MsLast)} ms` +
      (Number.isFinite(summary.rssMiBEnd) ? `, RSS ${summary.rssMiBStart.toFixed(0)} → ${summary.rssMiBEnd.toFixed(0)} MiB (${summary.rssGrowthMiBPerMinute.toFixed(1)} MiB/min)` : ""),
  );
}

// ---------------------------------------------------------------------------
// The plan, for the progress line's total.

export function plannedSteps(options: SuiteOptions): { steps: number; seconds: number } {
  const has = (name: (typeof options.scenarios)[number]) => options.scenarios.includes(name);
  const step = options.warmupSeconds + options.durationSeconds + 0.6;
  let steps = 0;
  let seconds = 2;
  if (datasetNeeded(options)) {
    steps += 3 + (options.restartAfterLoad && options.external === null ? 1 : 0);
    seconds += options.dataset.events / 2_500_000 + options.dataset.events / 150_000 + 3 + (options.restartAfterLoad ? 3 : 0);
  }
  if (has("queries")) {
    const count = options.queries.length * options.queryConcurrency.length * options.queryRates.length;
    steps += count;
    seconds += count * step;
  }
  if (has("duckdb")) {
    steps += 1 + options.queries.length;
    seconds += options.dataset.events / 300_000 + 1 + options.queries.length * (options.duckdbSecondsPerQuery + 0.5);
  }
  const servers = (has("ceiling") ? 1 : 0) + 1;
  for (const [scenario, connections] of [["ingest-batch", options.batchConnections], ["ingest-single", options.singleConnections]] as const) {
    if (!has(scenario) && !(has("ceiling") && !has("ingest-batch") && !has("ingest-single"))) continue;
    const count = connections.length * options.ingestRates.length * (has(scenario) ? servers : 1);
    steps += count;
    seconds += count * (step + 0.2);
  }
  if (has("clickhouse")) {
    // Start ClickHouse and its Eventide, load, wait for the forwarding, settle, one step per query kind, visibility, stop.
    const { events } = options.dataset;
    const visibilitySeconds = options.clickhouse.visibilitySamples * (limits.clickhouseForwardDelayMs / 1000 + 0.3);
    steps += 7 + options.queries.length;
    seconds += 3 + 1 + (events / 150_000 + 1) + (events / 300_000 + 1) + 2 + options.queries.length * (options.clickhouse.secondsPerQuery + 0.5) + visibilitySeconds + 2;
  }
  if (has("mixed")) {
    steps += 1;
    seconds += options.warmupSeconds + options.mixed.seconds + 1;
  }
  if (has("soak")) {
    steps += 1;
    seconds += options.warmupSeconds + options.soak.seconds + 1;
  }
  return { steps, seconds };
}
