/**
 * Ingest benchmark (`npm run bench:ingest`): drives the HTTP → ingest →
 * storage path of a real Eventide process and, in the same run, a bare uWS
 * server that only JSON.parses (the ceiling), with the same closed-loop load
 * generator, and compares them connection count by connection count. Then it
 * stops Eventide with SIGTERM and weighs what the events cost on disk.
 *
 * Estimate: a 1 000-event batch body is ~235 KB; JSON.parse runs at ~300 MB/s
 * per core, so parsing alone allows ~1.3 k batches/s ≈ 1.3 M events/s per
 * core and the ceiling, which also copies and frames, lands at ~650 k events/s.
 * Eventide validates each event (~1 µs), encodes it into the WAL (~1 µs) and
 * fsyncs per group commit (~1–5 ms, shared by all batches in flight), so with
 * 2 cores (one of them taken by the load generator) expect ~250–400 k
 * events/s, 40–60 % of the ceiling. A single event costs the ceiling ~11 µs
 * (~89 k requests/s); Eventide adds validation and a group-commit wait, so
 * expect ~30–60 k requests/s with latency set by the fsync cadence (~1–5 ms).
 * On disk, columns with dictionary-coded strings and delta-coded timestamps
 * should hold an event in ~20–50 B against ~235 B of JSON: ≤ 25 %.
 *
 * Runs are interleaved (each repeat visits every scenario and both servers)
 * and the median of the repeats is reported, because this machine is noisy.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { buildBatchBodies, buildSingleBodies, type BodySet } from "../fixtures/events.js";
import { spawnLoad, type LoadReport } from "../load/http-load.js";
import { keepAliveAgent, post } from "../runner/http-client.js";
import { directoryBytes, machineBusyCpuMs, commandLine, machineInfo, serverCommitOf, processCpuMs, processMemoryBytes } from "../runner/machine.js";
import { writeDatedReport } from "../runner/report-file.js";
import { startCeiling, startEventide, type CeilingServer, type Target } from "../runner/server.js";
import { formatMarkdownTable, formatMs, formatTextTable, median } from "../runner/stats.js";

const repositoryRoot = resolve(import.meta.dirname, "..", "..", "..");

/** batch-msgpack: the batch bodies packed as msgpack; the ceiling (JSON.parse) takes no msgpack, so its peer is the ceiling's JSON batch row. */
type ScenarioName = "batch" | "batch-msgpack" | "single";
type TargetName = "eventide" | "ceiling";

interface Options {
  durationSeconds: number;
  warmupSeconds: number;
  repeats: number;
  connectionsBatch: number[];
  connectionsSingle: number[];
  connectionsMsgpack: number[];
  seed: number;
  out: string;
  loadProcesses: number;
  targets: TargetName[];
  batchBodyCount: number;
  singleBodyCount: number;
  settleMs: number;
  /** Before each run, wait up to this long for other processes to stop using more than a quarter of a core… */
  quietWaitMs: number;
  /** …and no more than this in all, so a busy machine does not stretch the benchmark without bound. */
  quietBudgetMs: number;
  keepData: boolean;
  /** Another checkout whose built server is timed (`--server-root`); undefined: this one. */
  serverRoot: string | undefined;
  /**
   * Nice value for both servers and the load generators. Below 0 (root only)
   * favours them over other work, but with Linux autogroups (on by default)
   * only over processes of the same session: other sessions keep their share.
   */
  nice: number;
  cpuProfileDirectory: string | undefined;
}

function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      "duration-seconds": { type: "string", default: "4" },
      "warmup-seconds": { type: "string", default: "1" },
      repeats: { type: "string", default: "3" },
      "connections-batch": { type: "string", default: "4,16,64" },
      "connections-single": { type: "string", default: "16,64,256" },
      "connections-msgpack": { type: "string", default: "64" },
      seed: { type: "string", default: "1" },
      out: { type: "string", default: "bench/results/ingest-latest.json" },
      "load-processes": { type: "string", default: "1" },
      targets: { type: "string", default: "eventide,ceiling" },
      "batch-bodies": { type: "string", default: "16" },
      "single-bodies": { type: "string", default: "4096" },
      "settle-ms": { type: "string", default: "300" },
      "quiet-wait-seconds": { type: "string", default: "3" },
      "quiet-budget-seconds": { type: "string", default: "45" },
      "keep-data": { type: "boolean", default: false },
      "server-root": { type: "string", default: "" },
      "server-cpu-prof": { type: "string" },
      nice: { type: "string", default: "0" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(
      "npm run bench:ingest -- [--duration-seconds 4] [--warmup-seconds 1] [--repeats 3] [--connections-batch 4,16,64]\n" +
        "  [--connections-single 16,64,256] [--connections-msgpack 64] [--seed 1] [--out bench/results/ingest-latest.json] [--load-processes 1]\n" +
        "  [--targets eventide,ceiling] [--batch-bodies 16] [--single-bodies 4096] [--settle-ms 300] [--quiet-wait-seconds 3] [--quiet-budget-seconds 45] [--nice=-10] [--keep-data] [--server-root DIR] [--server-cpu-prof DIRECTORY]\n" +
        "--server-root starts the server built in another checkout (its dist/src/main.js), to time two commits with one harness.\n",
    );
    process.exit(0);
  }
  const positive = (name: string, raw: string): number => {
    const value = Number(raw);
    if (!(value > 0) || !Number.isFinite(value)) throw new Error(`--${name} must be a positive number, got ${raw}`);
    return value;
  };
  const list = (name: string, raw: string): number[] => (raw === "" ? [] : raw.split(",").map((part) => Math.round(positive(name, part.trim()))));
  const targets = values.targets.split(",").map((part) => part.trim());
  for (const target of targets) if (target !== "eventide" && target !== "ceiling") throw new Error(`--targets: unknown target ${target}`);
  return {
    durationSeconds: positive("duration-seconds", values["duration-seconds"]),
    warmupSeconds: Number(values["warmup-seconds"]),
    repeats: Math.round(positive("repeats", values.repeats)),
    connectionsBatch: list("connections-batch", values["connections-batch"]),
    connectionsSingle: list("connections-single", values["connections-single"]),
    connectionsMsgpack: list("connections-msgpack", values["connections-msgpack"]),
    seed: Math.round(Number(values.seed)),
    out: resolve(values.out),
    loadProcesses: Math.round(positive("load-processes", values["load-processes"])),
    targets: targets as TargetName[],
    batchBodyCount: Math.round(positive("batch-bodies", values["batch-bodies"])),
    singleBodyCount: Math.round(positive("single-bodies", values["single-bodies"])),
    settleMs: Number(values["settle-ms"]),
    quietWaitMs: Number(values["quiet-wait-seconds"]) * 1000,
    quietBudgetMs: Number(values["quiet-budget-seconds"]) * 1000,
    keepData: values["keep-data"],
    serverRoot: values["server-root"] === "" ? undefined : resolve(values["server-root"]),
    nice: Math.round(Number(values.nice)),
    cpuProfileDirectory: values["server-cpu-prof"] === undefined ? undefined : resolve(values["server-cpu-prof"]),
  };
}

// ---------------------------------------------------------------------------
// The machine.

function sleep(milliseconds: number): Promise<void> {
  return new Promise((resolveSleep) => setTimeout(resolveSleep, milliseconds));
}

/**
 * Waits until the machine is quiet apart from our own servers (others' builds
 * and tests share this box), at most `maxMs`; returns how long it waited and
 * what the others used in the last sample, percent of one core.
 */
async function waitForQuiet(serverPids: readonly number[], maxMs: number): Promise<{ waitedMs: number; otherCpuPercent: number }> {
  const sampleMs = 250;
  const quietPercent = 25;
  const startMs = performance.now();
  for (;;) {
    const machineStart = machineBusyCpuMs();
    const serversStart = serverPids.reduce((sum, pid) => sum + processCpuMs(pid), 0);
    await sleep(sampleMs);
    const machineUsed = machineBusyCpuMs() - machineStart;
    const serversUsed = serverPids.reduce((sum, pid) => sum + processCpuMs(pid), 0) - serversStart;
    const otherCpuPercent = ((machineUsed - serversUsed) / sampleMs) * 100;
    const waitedMs = performance.now() - startMs;
    if (!(otherCpuPercent > quietPercent) || waitedMs >= maxMs) return { waitedMs, otherCpuPercent };
  }
}

// ---------------------------------------------------------------------------
// Runs.

interface RunResult {
  repeat: number;
  scenario: ScenarioName;
  target: TargetName;
  connections: number;
  report: LoadReport;
  /** Server CPU over the measurement window, percent of one core (all threads). */
  serverCpuPercent: number;
  /** CPU used by neither the server nor the load generator (other processes, the kernel's softirqs), percent of one core. */
  otherCpuPercent: number;
}

function formatRate(value: number): string {
  if (!Number.isFinite(value)) return "–";
  if (value >= 10_000) return `${(value / 1000).toFixed(0)} k`;
  if (value >= 1000) return `${(value / 1000).toFixed(1)} k`;
  return value.toFixed(0);
}

async function main(): Promise<void> {
  const options = parseOptions();
  const startedAt = new Date();
  // The figures belong to the server that ran: another checkout's with --server-root.
  const machine = machineInfo(options.serverRoot ?? repositoryRoot);
  process.stdout.write(`machine: ${machine.cores} cores, ${machine.cpuModel}, ${machine.memoryGiB} GiB, Node ${machine.node}\n`);
  const plannedRuns = options.repeats * ((options.connectionsBatch.length + options.connectionsSingle.length) * options.targets.length + options.connectionsMsgpack.length);
  const plannedSeconds = plannedRuns * (options.durationSeconds + options.warmupSeconds + 0.9 + options.settleMs / 1000) + options.quietBudgetMs / 1000;
  process.stdout.write(
    `plan: ${plannedRuns} runs of ${options.warmupSeconds}+${options.durationSeconds} s (${options.repeats} repeats), ~${Math.ceil(plannedSeconds / 60)} min; ` +
      `load generator: ${options.loadProcesses} process(es)${options.nice !== 0 ? `; nice ${options.nice}` : ""}\n`,
  );

  const workDirectory = mkdtempSync(join(tmpdir(), "eventide-bench-ingest-"));
  let eventide: Target | null = null;
  let eventideIngestUrl = "";
  let apiKey = "bench-ceiling-key-000000000000000";
  if (options.targets.includes("eventide")) {
    // A CPU profile of the server's threads is written when it stops (SIGTERM at the end of the run).
    const extraNodeFlags = options.cpuProfileDirectory === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${options.cpuProfileDirectory}`];
    if (options.cpuProfileDirectory !== undefined) mkdirSync(options.cpuProfileDirectory, { recursive: true });
    eventide = await startEventide({ repositoryRoot, serverRoot: options.serverRoot, keepData: options.keepData, nice: options.nice, extraNodeFlags });
    apiKey = eventide.apiKey;
    eventideIngestUrl = eventide.ingestUrl;
    process.stdout.write(`eventide: pid ${eventide.pid}, ingest ${eventideIngestUrl}, data ${eventide.dataDirectory}\n`);
  }
  let ceiling: CeilingServer | null = null;
  if (options.targets.includes("ceiling")) {
    ceiling = await startCeiling(repositoryRoot, options.nice);
    process.stdout.write(`ceiling: pid ${ceiling.pid}, ${ceiling.url}\n`);
  }

  // Bodies: built once from the seed, written to files the generator processes read.
  // Timestamps end at the start of the current hour so a rerun within the hour sends the same bytes.
  const endTimeMs = Math.floor(Date.now() / 3_600_000) * 3_600_000;
  const batchBodies = buildBatchBodies({ seed: options.seed, apiKey, bodyCount: options.batchBodyCount, endTimeMs });
  const bodySets: Record<ScenarioName, BodySet> = {
    batch: batchBodies,
    // The same JSON lines: the load generator packs them.
    "batch-msgpack": batchBodies,
    single: buildSingleBodies({ seed: options.seed + 1, apiKey, bodyCount: options.singleBodyCount, endTimeMs }),
  };
  const bodyFiles: Record<ScenarioName, string> = { batch: join(workDirectory, "batch.ndjson"), "batch-msgpack": join(workDirectory, "batch.ndjson"), single: join(workDirectory, "single.ndjson") };
  for (const scenario of ["batch", "single"] as const) {
    writeFileSync(bodyFiles[scenario], Buffer.concat(bodySets[scenario].bodies.flatMap((body) => [body, Buffer.from("\n")])));
  }
  const paths: Record<ScenarioName, string> = { batch: "/ingest/batch", "batch-msgpack": "/ingest/batch", single: "/ingest" };
  process.stdout.write(
    `bodies: ${bodySets.batch.bodies.length} batch bodies of ${bodySets.batch.eventsPerBody} events (${(bodySets.batch.bodies[0].length / 1024).toFixed(0)} KiB, ` +
      `${bodySets.batch.bytesPerEvent.toFixed(0)} B/event), ${bodySets.single.bodies.length} single bodies (${bodySets.single.bytesPerEvent.toFixed(0)} B)\n`,
  );

  // One request by hand first, so a broken server fails here with its answer rather than as a table of errors.
  const acknowledgedEvents: Record<ScenarioName, number> = { batch: 0, "batch-msgpack": 0, single: 0 };
  if (eventide !== null) {
    const agent = keepAliveAgent(1);
    const answer = await post(agent, `${eventideIngestUrl}/ingest/batch`, bodySets.batch.bodies[0]);
    agent.destroy();
    let accepted = -1;
    try {
      accepted = Number((JSON.parse(answer.text) as { accepted?: unknown }).accepted);
    } catch {
      // Reported below.
    }
    if (answer.status !== 200 || accepted !== bodySets.batch.eventsPerBody) {
      throw new Error(`eventide refused the first batch: ${answer.status} ${answer.text.slice(0, 500)}`);
    }
    acknowledgedEvents.batch += accepted;
  }

  const results: RunResult[] = [];
  let uuidStamp = 1;
  let quietWaitedMs = 0;
  const scenarios: { scenario: ScenarioName; connections: number }[] = [
    ...options.connectionsBatch.map((connections) => ({ scenario: "batch" as const, connections })),
    ...options.connectionsSingle.map((connections) => ({ scenario: "single" as const, connections })),
    ...options.connectionsMsgpack.map((connections) => ({ scenario: "batch-msgpack" as const, connections })),
  ];
  for (let repeat = 1; repeat <= options.repeats; repeat += 1) {
    for (const { scenario, connections } of scenarios) {
      // Alternate which server goes first, so a slow drift of the machine does not favour one.
      const order: TargetName[] = repeat % 2 === 1 ? ["eventide", "ceiling"] : ["ceiling", "eventide"];
      for (const target of order) {
        const server = target === "eventide" ? eventide : ceiling;
        if (server === null || (scenario === "batch-msgpack" && target === "ceiling")) continue;
        const baseUrl = target === "eventide" ? eventideIngestUrl : ceiling!.url;
        const pid = server.pid!;
        const quietWaitMs = Math.min(options.quietWaitMs, options.quietBudgetMs - quietWaitedMs);
        if (quietWaitMs > 0) {
          const serverPids = [eventide, ceiling].flatMap((other) => (other?.pid === undefined ? [] : [other.pid]));
          quietWaitedMs += (await waitForQuiet(serverPids, quietWaitMs)).waitedMs;
        }
        let cpuStartMs = Number.NaN;
        let cpuEndMs = Number.NaN;
        let machineStartMs = Number.NaN;
        let machineEndMs = Number.NaN;
        const timers: NodeJS.Timeout[] = [];
        const report = await spawnLoad({
          url: `${baseUrl}${paths[scenario]}`,
          bodiesFile: bodyFiles[scenario],
          eventsPerBody: bodySets[scenario].eventsPerBody,
          connections,
          processes: options.loadProcesses,
          warmupSeconds: options.warmupSeconds,
          durationSeconds: options.durationSeconds,
          restampUuids: true,
          msgpack: scenario === "batch-msgpack",
          uuidStamp,
          nice: options.nice,
          onStart: () => {
            timers.push(
              setTimeout(() => {
                cpuStartMs = processCpuMs(pid);
                machineStartMs = machineBusyCpuMs();
              }, options.warmupSeconds * 1000),
            );
            timers.push(
              setTimeout(() => {
                cpuEndMs = processCpuMs(pid);
                machineEndMs = machineBusyCpuMs();
              }, (options.warmupSeconds + options.durationSeconds) * 1000),
            );
          },
        });
        for (const timer of timers) clearTimeout(timer);
        uuidStamp += options.loadProcesses;
        if (!Number.isFinite(cpuEndMs)) {
          cpuEndMs = processCpuMs(pid);
          machineEndMs = machineBusyCpuMs();
        }
        const windowMs = options.durationSeconds * 1000;
        const serverCpuPercent = ((cpuEndMs - cpuStartMs) / windowMs) * 100;
        const otherCpuPercent = Math.max(0, ((machineEndMs - machineStartMs) / windowMs) * 100 - serverCpuPercent - report.cpu.percentOfOneCore);
        if (target === "eventide") {
          acknowledgedEvents[scenario] += report.allOkEvents;
          // The generator counts a 200 as all of its events; make sure the server agreed (one sampled answer per run).
          const sample = report.sampleBodies["200"];
          if (scenario !== "single" && sample !== undefined && !sample.includes(`"accepted":${bodySets.batch.eventsPerBody}`)) {
            process.stdout.write(`  warning: a batch answer did not accept every event: ${sample.slice(0, 300)}\n`);
          }
        }
        results.push({ repeat, scenario, target, connections, report, serverCpuPercent, otherCpuPercent });
        const errors = report.requests - report.okResponses + report.socketErrors;
        process.stdout.write(
          `  repeat ${repeat} ${scenario.padEnd(6)} ${target.padEnd(8)} c=${String(connections).padStart(3)}: ` +
            `${formatRate(report.eventsPerSecond)} events/s, ${formatRate(report.requestsPerSecond)} req/s, ` +
            `p50 ${formatMs(report.latencyMs.p50)} ms, p99 ${formatMs(report.latencyMs.p99)} ms, ` +
            `load ${report.cpu.percentOfOneCore.toFixed(0)} %, server ${serverCpuPercent.toFixed(0)} %, others ${otherCpuPercent.toFixed(0)} %` +
            (errors > 0 ? `, ${errors} errors ${JSON.stringify(report.statusCounts)} ${JSON.stringify(report.sampleBodies).slice(0, 300)}` : "") +
            "\n",
        );
        await sleep(options.settleMs);
      }
    }
  }

  // Stop Eventide gracefully and weigh the store.
  let storage: Record<string, unknown> | null = null;
  if (eventide !== null) {
    const pid = eventide.pid!;
    const peakRssMiB = processMemoryBytes(pid, "VmHWM") / 2 ** 20;
    const rssBeforeStopMiB = processMemoryBytes(pid, "VmRSS") / 2 ** 20;
    const stopStartMs = performance.now();
    // Null: the server did not exit on SIGTERM within the runner's grace period and was killed.
    const exitCode = await eventide.stop();
    const stopMs = performance.now() - stopStartMs;
    const disk = directoryBytes(eventide.dataDirectory!);
    const totalAcknowledged = acknowledgedEvents.batch + acknowledgedEvents["batch-msgpack"] + acknowledgedEvents.single;
    const jsonBytes = (acknowledgedEvents.batch + acknowledgedEvents["batch-msgpack"]) * bodySets.batch.bytesPerEvent + acknowledgedEvents.single * bodySets.single.bytesPerEvent;
    const jsonBytesPerEvent = totalAcknowledged > 0 ? jsonBytes / totalAcknowledged : Number.NaN;
    const diskBytesPerEvent = totalAcknowledged > 0 ? disk.apparentBytes / totalAcknowledged : Number.NaN;
    storage = {
      exitCode,
      stopTimedOut: exitCode === null,
      stopMs,
      peakRssMiB,
      rssBeforeStopMiB,
      acknowledgedEvents: { ...acknowledgedEvents, total: totalAcknowledged },
      diskBytes: disk.apparentBytes,
      diskAllocatedBytes: disk.allocatedBytes,
      diskFiles: disk.files,
      diskBytesPerEvent,
      jsonBytesPerEvent,
      jsonBytesPerEventByScenario: { batch: bodySets.batch.bytesPerEvent, single: bodySets.single.bytesPerEvent },
      diskToJsonRatio: diskBytesPerEvent / jsonBytesPerEvent,
      diskToJsonTarget: 0.25,
      stderrTail: eventide.stderrTail(),
    };
  }
  if (ceiling !== null) {
    await ceiling.stop();
  }

  // Medians per scenario, target and connection count.
  interface Row {
    scenario: ScenarioName;
    target: TargetName;
    connections: number;
    eventsPerSecond: number;
    eventsPerSecondMin: number;
    eventsPerSecondMax: number;
    requestsPerSecond: number;
    p50Ms: number;
    p99Ms: number;
    ratioToCeiling: number;
    loadCpuPercent: number;
    loadSaturatedRuns: number;
    serverCpuPercent: number;
    otherCpuPercent: number;
    errorResponses: number;
    statusCounts: Record<string, number>;
  }
  const rows: Row[] = [];
  for (const { scenario, connections } of scenarios) {
    for (const target of ["eventide", "ceiling"] as const) {
      const runs = results.filter((run) => run.scenario === scenario && run.target === target && run.connections === connections);
      if (runs.length === 0) continue;
      const statusCounts: Record<string, number> = {};
      for (const run of runs) for (const [status, count] of Object.entries(run.report.statusCounts)) statusCounts[status] = (statusCounts[status] ?? 0) + count;
      const eventsPerSecond = runs.map((run) => run.report.eventsPerSecond);
      rows.push({
        scenario,
        target,
        connections,
        eventsPerSecond: median(eventsPerSecond),
        eventsPerSecondMin: Math.min(...eventsPerSecond),
        eventsPerSecondMax: Math.max(...eventsPerSecond),
        requestsPerSecond: median(runs.map((run) => run.report.requestsPerSecond)),
        p50Ms: median(runs.map((run) => run.report.latencyMs.p50)),
        p99Ms: median(runs.map((run) => run.report.latencyMs.p99)),
        ratioToCeiling: Number.NaN,
        loadCpuPercent: median(runs.map((run) => run.report.cpu.percentOfOneCore)),
        loadSaturatedRuns: runs.filter((run) => run.report.saturated).length,
        serverCpuPercent: median(runs.map((run) => run.serverCpuPercent)),
        otherCpuPercent: median(runs.map((run) => run.otherCpuPercent)),
        errorResponses: runs.reduce((total, run) => total + run.report.requests - run.report.okResponses + run.report.socketErrors, 0),
        statusCounts,
      });
    }
  }
  for (const row of rows) {
    const peerScenario = row.scenario === "batch-msgpack" ? "batch" : row.scenario;
    const peer = rows.find((other) => other.target === "ceiling" && other.scenario === peerScenario && other.connections === row.connections);
    if (peer !== undefined) row.ratioToCeiling = row.eventsPerSecond / peer.eventsPerSecond;
  }

  // The summary, on the terminal and (the same lines) in the dated report.
  const caption = `ingest, median of ${options.repeats} × ${options.durationSeconds} s (after ${options.warmupSeconds} s warm-up)`;
  const header = ["scenario", "server", "conns", "events/s", "(min–max)", "req/s", "p50 ms", "p99 ms", "vs ceiling", "load CPU", "server CPU", "others", "errors"];
  const tableRows = rows.map((row) => [
    row.scenario,
    row.target,
    String(row.connections),
    formatRate(row.eventsPerSecond),
    `${formatRate(row.eventsPerSecondMin)}–${formatRate(row.eventsPerSecondMax)}`,
    formatRate(row.requestsPerSecond),
    formatMs(row.p50Ms),
    formatMs(row.p99Ms),
    Number.isFinite(row.ratioToCeiling) ? `${(row.ratioToCeiling * 100).toFixed(0)} %` : "–",
    `${row.loadCpuPercent.toFixed(0)} %${row.loadSaturatedRuns > 0 ? "*" : ""}`,
    `${row.serverCpuPercent.toFixed(0)} %`,
    `${row.otherCpuPercent.toFixed(0)} %`,
    String(row.errorResponses),
  ]);
  const notes: string[] = [
    `CPU is percent of one core (${machine.cores} cores = ${machine.cores * 100} %); server CPU counts all of its threads; ` +
      `"others" is what the rest of the machine used meanwhile (high values mean a noisy run).`,
  ];
  if (options.quietWaitMs > 0) notes.push(`Waited ${(quietWaitedMs / 1000).toFixed(1)} s in all (budget ${options.quietBudgetMs / 1000} s) for other processes to go quiet.`);
  notes.push(
    rows.some((row) => row.loadSaturatedRuns > 0)
      ? `* the load generator used > 85 % of a core in some repeat: on rows where the server's CPU is also below its cores' worth, the generator may have set the pace (try --load-processes 2).`
      : "The load generator stayed below 85 % of a core in every run.",
  );
  if (storage !== null) {
    const ratio = storage.diskToJsonRatio as number;
    notes.push(
      `Storage after SIGTERM (exit ${storage.exitCode ?? "killed after the grace period"}, ${(storage.stopMs as number).toFixed(0)} ms): ` +
        `${((storage.diskBytes as number) / 2 ** 20).toFixed(1)} MiB in ${storage.diskFiles} files for ${(storage.acknowledgedEvents as { total: number }).total} acknowledged events; ` +
        `disk bytes/event ${(storage.diskBytesPerEvent as number).toFixed(1)} B, JSON bytes/event sent ${(storage.jsonBytesPerEvent as number).toFixed(1)} B, ` +
        `ratio ${(ratio * 100).toFixed(1)} % (target ≤ 25 %: ${ratio <= 0.25 ? "met" : "NOT met"}); peak RSS (VmHWM before stop) ${(storage.peakRssMiB as number).toFixed(0)} MiB.`,
    );
  }
  process.stdout.write(`\n${caption}; ${machine.cores} cores, ${machine.cpuModel}\n${formatTextTable(header, tableRows, 2)}\n${notes.join("\n")}\n`);

  const output = {
    benchmark: "ingest",
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    machine,
    options: { ...options, out: undefined },
    bodies: {
      batch: { count: bodySets.batch.bodies.length, eventsPerBody: bodySets.batch.eventsPerBody, bytesPerEvent: bodySets.batch.bytesPerEvent },
      single: { count: bodySets.single.bodies.length, bytesPerEvent: bodySets.single.bytesPerEvent },
    },
    quietWaitedSeconds: quietWaitedMs / 1000,
    rows,
    storage,
    runs: results.map((run) => ({
      ...run.report,
      histogram: undefined,
      repeat: run.repeat,
      scenario: run.scenario,
      target: run.target,
      serverCpuPercent: run.serverCpuPercent,
      otherCpuPercent: run.otherCpuPercent,
    })),
  };
  const outDirectory = dirname(options.out);
  mkdirSync(outDirectory, { recursive: true });
  writeFileSync(options.out, `${JSON.stringify(output, null, 2)}\n`);
  const reportPath = writeDatedReport({
    repositoryRoot,
    bench: "ingest",
    startedAt,
    machine,
    serverCommit: serverCommitOf(options.serverRoot, machine),
    command: commandLine("npm run bench:ingest --", options.serverRoot, machine),
    body: [`## ${caption}`, "", formatMarkdownTable(header, tableRows, [false, false]), "", ...notes.flatMap((note) => [note, ""])].join("\n"),
  });
  process.stdout.write(`\nwrote ${options.out} and ${reportPath}\n`);

  eventide?.cleanup();
  if (!options.keepData) rmSync(workDirectory, { recursive: true, force: true });
  else process.stdout.write(`kept ${workDirectory} and ${eventide?.dataDirectory ?? "no data directory"}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`bench:ingest failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
