/**
 * The Eventide bench suite: `npm run bench` (node dist/bench/suite/main.js)
 * lands here; the shipped CLI does not depend on bench code. It starts Eventide on a fresh data directory (or takes a running one),
 * runs the selected scenarios (./scenarios.ts) with progress on the terminal,
 * and writes results.json (every figure, the machine, the options), report.md
 * and SVG charts (./report.ts); `--compare old.json` prints the change per
 * figure against an earlier run (./compare.ts).
 *
 * Run as a script it talks on stdout; `runBenchSuite` takes its output sink
 * as a parameter, so a caller that keeps stdout for itself can pass stderr.
 *
 * Estimate: see ./options.ts — quick ≈ 2 min (+ ~45 s for the ClickHouse store), full ≈ 25 min, smoke ≈ 15 s (+ ~15 s).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { Agent } from "node:http";
import { loadavg, tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { killLoadGenerators } from "../load/http-load.js";
import { compareResults, formatComparisonMarkdown, formatComparisonText, readResultsFile, ResultsFileError, type Comparison } from "./compare.js";
import { post } from "../runner/http-client.js";
import { directoryBytes, machineInfo, processMemoryBytes } from "../runner/machine.js";
import { parseSuiteOptions, SuiteUsageError, usageText, type SuiteOptions } from "./options.js";
import { Progress } from "./progress.js";
import { writeDatedReport } from "../runner/report-file.js";
import { buildCharts, buildMarkdown, loudNotice, terminalSummary } from "./report.js";
import { collectFigures, resultsFormat, type ClickHouseResult, type SuiteResults } from "./results.js";
import { plannedSteps, prepareDataset, runDuckdb, runIngest, runMixed, runQueries, runSoak, type SuiteContext } from "./scenarios.js";
import { clickhouseAvailability, runClickHouse } from "./clickhouse-scenario.js";
import { formatDuration, mean } from "../runner/stats.js";
import { externalTarget, killStartedServers, startEventide, type Target } from "../runner/server.js";

export { SuiteUsageError } from "./options.js";
export { ResultsFileError } from "./compare.js";

/** Where human-readable output goes: stdout for `npm run bench`, stderr under the CLI. */
export interface SuiteIo {
  write(text: string): void;
  isTTY: boolean;
  workingDirectory: string;
}

export interface ComparisonSummary {
  old: string;
  new: string;
  figures: number;
  better: number;
  worse: number;
  noise: number;
}

export type SuiteOutcome =
  | { usage: string }
  | { comparison: ComparisonSummary }
  | { results: string; report: string; charts: string[]; figures: number; warnings: number; comparison?: ComparisonSummary };

const repositoryRoot = resolve(import.meta.dirname, "..", "..", "..");

function summarize(comparison: Comparison, oldPath: string, newPath: string): ComparisonSummary {
  const count = (verdict: string) => comparison.changes.filter((change) => change.verdict === verdict).length;
  return { old: oldPath, new: newPath, figures: comparison.changes.length, better: count("better"), worse: count("worse"), noise: count("noise") };
}

function timeStamp(date: Date): string {
  return date.toISOString().slice(0, 19).replaceAll(":", "-");
}

function inRepository(io: SuiteIo): boolean {
  return resolve(io.workingDirectory) === repositoryRoot;
}

/** Inside the Eventide checkout: bench/results/suite/<time>; anywhere else: ./eventide-bench/<time>. */
function outputDirectory(options: SuiteOptions, io: SuiteIo, startedAt: Date): string {
  if (options.out !== undefined) return resolve(io.workingDirectory, options.out);
  return inRepository(io) ? join(repositoryRoot, "bench", "results", "suite", timeStamp(startedAt)) : join(resolve(io.workingDirectory), "eventide-bench", timeStamp(startedAt));
}

/** One empty batch and one trend query: wrong URLs or credentials fail here, in one clear line. */
async function preflight(target: Target): Promise<void> {
  const agent = new Agent({ keepAlive: false });
  try {
    const ingest = await post(agent, `${target.ingestUrl}/ingest/batch`, JSON.stringify({ apiKey: target.apiKey, events: [] }), { timeoutMs: 15_000 });
    if (ingest.status !== 200) throw new Error(`${target.ingestUrl}/ingest/batch refused an empty batch with this API key: HTTP ${ingest.status} ${ingest.text.slice(0, 200)}`);
    const query = await post(
      agent,
      `${target.queryUrl}/api/v1/query/trend`,
      JSON.stringify({ event: "$pageview", dateFrom: "2024-01-01", dateTo: "2024-01-01" }),
      { headers: { authorization: `Bearer ${target.token}` }, timeoutMs: 15_000, idempotent: true },
    );
    if (query.status !== 200) throw new Error(`${target.queryUrl}/api/v1/query/trend refused a trend query with this token: HTTP ${query.status} ${query.text.slice(0, 200)}`);
  } finally {
    agent.destroy();
  }
}

function writeDatedSuiteReport(results: SuiteResults, startedAt: Date, argv: readonly string[], scenarios: SuiteOptions["scenarios"]): string {
  // The shared header gives the title, the machine and the command: drop buildMarkdown's own title and machine line.
  const body = buildMarkdown(results, [])
    .replace(/^# .*\n+/, "")
    .replace(/^- \*\*Machine:\*\* .*\n/m, "");
  // npm run bench:clickhouse has a report of its own, so it does not replace the day's suite report.
  const bench = scenarios.length === 1 && scenarios[0] === "clickhouse" ? "clickhouse" : "suite";
  return writeDatedReport({ repositoryRoot, bench, startedAt, machine: results.machine, command: `npm run bench -- ${argv.join(" ")}`.trimEnd(), body });
}

function publicOptions(options: SuiteOptions): SuiteResults["options"] {
  return { ...options, external: options.external === null ? null : { queryUrl: options.external.queryUrl, ingestUrl: options.external.ingestUrl } };
}

/** Runs the suite (or prints usage, or compares two files) as argv asks. Throws SuiteUsageError on a bad invocation. */
export async function runBenchSuite(argv: readonly string[], io: SuiteIo): Promise<SuiteOutcome> {
  const parsed = parseSuiteOptions(argv);
  if ("help" in parsed) {
    io.write(usageText);
    return { usage: "npm run bench -- [options]; see --help" };
  }
  let options = parsed;
  if (options.compare.length === 2) {
    const [oldPath, newPath] = options.compare.map((path) => resolve(io.workingDirectory, path));
    const comparison = compareResults(readResultsFile(oldPath), readResultsFile(newPath), options.compareThresholdPercent);
    io.write(formatComparisonText(comparison));
    return { comparison: summarize(comparison, oldPath, newPath) };
  }
  // Read the old file before a long run, so a typo fails at once.
  const oldResults = options.compare.length === 1 ? readResultsFile(resolve(io.workingDirectory, options.compare[0])) : null;

  // Without a binary the ClickHouse scenario is left out of this run, and said so loudly at its start and in every output.
  const availability = options.scenarios.includes("clickhouse") ? clickhouseAvailability() : null;
  const clickhouseSkipped: ClickHouseResult | null = availability !== null && "reason" in availability ? { state: "skipped", reason: availability.reason } : null;
  if (clickhouseSkipped !== null) options = { ...options, scenarios: options.scenarios.filter((scenario) => scenario !== "clickhouse") };

  const startedAt = new Date();
  const machine = machineInfo(repositoryRoot);
  const outDirectory = outputDirectory(options, io, startedAt);
  mkdirSync(join(outDirectory, "charts"), { recursive: true });
  const workDirectory = mkdtempSync(join(tmpdir(), "eventide-bench-work-"));
  const plan = plannedSteps(options);
  // Starting and stopping the server are steps of their own when the suite owns it.
  const progress = new Progress(io, plan.steps + (options.external === null ? 2 : 0), plan.seconds);
  const commit = machine.eventideCommit === null ? `v${machine.eventideVersion}` : `${machine.eventideCommit.slice(0, 12)}${machine.eventideDirty ? "+" : ""}`;
  progress.log(
    `bench suite, profile ${options.profile}: ${options.scenarios.join(", ")} — planned ~${formatDuration(plan.seconds)}\n` +
      `machine: ${machine.cpuModel}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}, Eventide ${commit}; load average ${machine.loadAverageAtStart.join(" ")}`,
  );
  if (clickhouseSkipped !== null) progress.log(loudNotice(`SKIPPED: the clickhouse scenario — ${clickhouseSkipped.reason}`));

  const interrupt = () => {
    killLoadGenerators();
    killStartedServers();
    io.write("\ninterrupted: stopped the load generators and the server\n");
    process.exit(130);
  };
  process.once("SIGINT", interrupt);
  process.once("SIGTERM", interrupt);

  let target: Target | undefined;
  let context: SuiteContext | undefined;
  const serverSummary: SuiteResults["server"] = {
    rssMiBAtEnd: Number.NaN,
    peakRssMiB: Number.NaN,
    diskBytes: null,
    acknowledgedEvents: 0,
    diskBytesPerEvent: null,
    stopSeconds: null,
    stopExitCode: null,
  };
  try {
    if (options.external === null) {
      progress.startStep("start Eventide on a fresh data directory", 2);
      target = await startEventide({ repositoryRoot, workers: options.workers, keepData: options.keepData });
      progress.endStep(`pid ${target.pid}, query ${target.queryUrl}, ingest ${target.ingestUrl}, data ${target.dataDirectory}`);
    } else {
      target = externalTarget({ ...options.external, pid: options.serverPid });
      progress.log(`target: ${target.queryUrl} (queries), ${target.ingestUrl} (ingest)${target.pid === undefined ? "; no --server-pid: server CPU and RSS unknown" : `, pid ${target.pid}`}`);
    }
    await preflight(target);
    context = {
      options,
      repositoryRoot,
      workDirectory,
      target,
      progress,
      warnings: clickhouseSkipped === null ? [] : [`SKIPPED: the clickhouse scenario — ${clickhouseSkipped.reason}`],
      othersSamples: [],
      // An external server keeps the uuids of earlier runs: start the stamps somewhere new.
      uuidStamp: target.kind === "external" ? Math.floor(Math.random() * 0x10000) : 1,
      dataset: null,
      datasetResult: {
        events: options.dataset.events,
        users: options.dataset.users,
        days: options.dataset.days,
        seed: options.dataset.seed,
        startDate: options.dataset.startDate,
        action: "not-needed",
        loadSeconds: null,
        loadEventsPerSecond: null,
        loadRetries: null,
      },
      ceiling: null,
      retentionExposure: null,
      acknowledgedEvents: 0,
      ingest: [],
      queries: [],
      duckdb: null,
      clickhouse: clickhouseSkipped,
      mixed: null,
      soak: null,
    };
    const has = (name: (typeof options.scenarios)[number]) => options.scenarios.includes(name);
    await prepareDataset(context);
    if (has("queries")) await runQueries(context);
    if (has("duckdb")) await runDuckdb(context);
    if (has("clickhouse") && availability !== null && "binary" in availability) context.clickhouse = await runClickHouse(context, availability.binary);
    // The dataset rows are no longer needed: let them go before the long steps.
    context.dataset = null;
    if (has("ingest-batch") || has("ingest-single") || has("ceiling")) await runIngest(context);
    if (has("mixed")) await runMixed(context);
    if (has("soak")) await runSoak(context);

    if (target.pid !== undefined) {
      serverSummary.rssMiBAtEnd = processMemoryBytes(target.pid, "VmRSS") / 2 ** 20;
      serverSummary.peakRssMiB = processMemoryBytes(target.pid, "VmHWM") / 2 ** 20;
    }
    serverSummary.acknowledgedEvents = context.acknowledgedEvents;
    if (target.kind === "self-started") {
      progress.startStep("stop Eventide (SIGTERM)", 2);
      const stopStartMs = performance.now();
      serverSummary.stopExitCode = await target.stop();
      serverSummary.stopSeconds = (performance.now() - stopStartMs) / 1000;
      if (serverSummary.stopExitCode !== 0) context.warnings.push(`Eventide exited ${serverSummary.stopExitCode} on SIGTERM; stderr: ${target.stderrTail().slice(-500)}`);
      if (target.dataDirectory !== undefined) {
        serverSummary.diskBytes = directoryBytes(target.dataDirectory).apparentBytes;
        serverSummary.diskBytesPerEvent = context.acknowledgedEvents > 0 ? serverSummary.diskBytes / context.acknowledgedEvents : null;
      }
      progress.endStep(`exit ${serverSummary.stopExitCode} in ${serverSummary.stopSeconds.toFixed(1)} s`);
    }
  } finally {
    process.off("SIGINT", interrupt);
    process.off("SIGTERM", interrupt);
    killLoadGenerators();
    if (target !== undefined) {
      await target.stop();
      target.cleanup();
    }
    rmSync(workDirectory, { recursive: true, force: true });
    progress.finish();
  }

  const finishedAt = new Date();
  const othersMean = mean(context.othersSamples);
  if (othersMean > 50) {
    context.warnings.push(`other processes used ${othersMean.toFixed(0)} % of a core on average while steps ran (of ${machine.cores * 100} %): figures are noisy; compare runs on a quiet machine`);
  }
  const partial: Omit<SuiteResults, "figures"> = {
    format: resultsFormat,
    startedAt: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
    wallSeconds: (finishedAt.getTime() - startedAt.getTime()) / 1000,
    machine,
    target: {
      kind: target.kind,
      queryUrl: target.queryUrl,
      ingestUrl: target.ingestUrl,
      serverPid: target.pid ?? null,
      workers: target.kind === "self-started" ? (options.workers ?? null) : null,
    },
    options: publicOptions(options),
    dataset: context.datasetResult,
    ingest: context.ingest,
    queries: context.queries,
    duckdb: context.duckdb,
    clickhouse: context.clickhouse,
    mixed: context.mixed,
    soak: context.soak,
    server: serverSummary,
    noise: {
      othersCpuPercentMean: othersMean,
      othersCpuPercentMax: context.othersSamples.length === 0 ? Number.NaN : Math.max(...context.othersSamples),
      loadAverageAtEnd: loadavg().map((value) => Math.round(value * 100) / 100),
    },
    warnings: context.warnings,
  };
  const results: SuiteResults = { ...partial, figures: collectFigures(partial) };

  const resultsPath = join(outDirectory, "results.json");
  writeFileSync(resultsPath, `${JSON.stringify(results, null, 2)}\n`);
  const charts = buildCharts(results);
  const chartPaths = charts.map((chart) => {
    const path = join(outDirectory, "charts", chart.file);
    writeFileSync(path, chart.svg);
    return path;
  });
  const reportPath = join(outDirectory, "report.md");
  writeFileSync(reportPath, buildMarkdown(results, charts));
  // Run from the checkout without --out, it is also the day's committable report: text only, the charts stay with the results.
  const datedReport = inRepository(io) && options.out === undefined ? writeDatedSuiteReport(results, startedAt, argv, parsed.scenarios) : null;
  io.write(terminalSummary(results));

  let comparison: ComparisonSummary | undefined;
  if (oldResults !== null) {
    const compared = compareResults(oldResults, results, options.compareThresholdPercent);
    io.write(`\n${formatComparisonText(compared)}`);
    writeFileSync(join(outDirectory, "compare.md"), formatComparisonMarkdown(compared));
    comparison = summarize(compared, resolve(io.workingDirectory, options.compare[0]), resultsPath);
  }
  const shown = (path: string) => {
    const relativePath = relative(io.workingDirectory, path);
    return relativePath.startsWith("..") ? path : relativePath;
  };
  io.write(`\nwrote ${shown(resultsPath)}, ${shown(reportPath)}${datedReport === null ? "" : `, ${shown(datedReport)}`} and ${charts.length} charts in ${shown(join(outDirectory, "charts"))}\n`);
  return { results: resultsPath, report: reportPath, charts: chartPaths, figures: results.figures.length, warnings: results.warnings.length, comparison };
}

const isMain = process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href;
if (isMain) {
  runBenchSuite(process.argv.slice(2), { write: (text) => process.stdout.write(text), isTTY: process.stdout.isTTY === true, workingDirectory: process.cwd() }).then(
    () => process.exit(0),
    (error: unknown) => {
      if (error instanceof SuiteUsageError || error instanceof ResultsFileError) {
        process.stderr.write(`bench: ${error.message}${error instanceof SuiteUsageError ? " (--help for usage)" : ""}\n`);
        process.exit(2);
      }
      process.stderr.write(`bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
      process.exit(1);
    },
  );
}
