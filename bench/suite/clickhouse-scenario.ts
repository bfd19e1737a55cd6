/**
 * The clickhouse scenario: the ClickHouse store beside the embedded one on the
 * same rows, in one run. It starts a private `clickhouse-server`
 * (../runner/clickhouse-server.ts) and a second Eventide with
 * EVENTIDE_STORE=clickhouse://…, loads the suite's dataset into it with the
 * loader that loaded the embedded store (so the two load rates are one
 * yardstick), waits until ClickHouse holds every row (the forwarding rate),
 * asks both stores the suite's queries in turn — the same requests in the same
 * order, one at a time, every pair of answers compared — and times single
 * events from their 200 until a trend query counts them (the visibility
 * delay). Without a clickhouse-server binary the scenario is skipped, loudly.
 *
 * Estimate: the loader reaches ~150 k events/s against either store (the
 * ClickHouse store acknowledges from its own WAL, as the embedded one does);
 * ClickHouse takes a 200 000-row JSONEachRow INSERT at ~0.5–1 M rows/s, so
 * forwarding ends within a second or two of the last 200. A single event
 * becomes visible after EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS (1 s) plus up to
 * a quarter of it (the forwarder's tick) plus the INSERT: ~1.1–1.3 s, against
 * a few ms in the embedded store.
 */
import { existsSync } from "node:fs";
import type { Agent } from "node:http";
import { eventsTable } from "../../src/clickhouse/schema.js";
import { firstDifference } from "../query/query-request.js";
import { clickhouseBinary, startClickHouse, storeUrl, type ClickHouseHandle } from "../runner/clickhouse-server.js";
import { keepAliveAgent, post } from "../runner/http-client.js";
import { CpuMeter, othersPercent, processCpuMs } from "../runner/machine.js";
import { startEventide, type Target } from "../runner/server.js";
import { formatCount, formatMs, summarizeSample } from "../runner/stats.js";
import { loadDataset } from "./dataset-load.js";
import { loudNotice } from "./report.js";
import { CacheExposure, datasetRange, queryVariants } from "./queries.js";
import type { ClickHouseQueryRun, ClickHouseResult, StoreCpu } from "./results.js";
import { sleep, waitUntilIdle, warn, type SuiteContext } from "./scenarios.js";

/** The database the scenario's Eventide creates on its private server. */
const database = "eventide_bench";
/** A visibility probe that no trend query counts within this long is a failure, not a slow sample. */
const visibilityDeadlineMs = 60_000;
/** Forwarding that stores no further row for this long has stalled. */
const forwardStallMs = 60_000;

/** The binary to start, or why there is none (said loudly, then the suite goes on without the scenario). */
export function clickhouseAvailability(): { binary: string } | { reason: string } {
  const binary = clickhouseBinary();
  if (binary === undefined) {
    return { reason: "no clickhouse-server binary in /usr/bin, /usr/sbin or /usr/local/bin (apt-get install clickhouse-server, or name one in EVENTIDE_TEST_CLICKHOUSE_SERVER)" };
  }
  if (!existsSync(binary)) return { reason: `EVENTIDE_TEST_CLICKHOUSE_SERVER names ${binary}, which does not exist` };
  return { binary };
}

function cpuPercent(startMs: number, pids: { eventide: number | undefined; clickhouse: number | undefined }, start: { eventide: number; clickhouse: number }, others: number): StoreCpu {
  const elapsedMs = performance.now() - startMs;
  const used = (pid: number | undefined, before: number) => (pid === undefined ? Number.NaN : ((processCpuMs(pid) - before) / elapsedMs) * 100);
  return { eventidePercent: used(pids.eventide, start.eventide), clickhousePercent: used(pids.clickhouse, start.clickhouse), othersPercent: others };
}

/** The rest of the machine's share over a meter's window, kept for the run's noise figures. */
function recordOthers(context: SuiteContext, meter: CpuMeter): number {
  const others = othersPercent(meter.read(), 0);
  if (Number.isFinite(others)) context.othersSamples.push(others);
  return others;
}

/** Every process of the comparison: both Eventides and ClickHouse (the suite itself is counted by the meter). */
function ownPids(context: SuiteContext, target: Target, clickhouse: ClickHouseHandle): number[] {
  return [context.target.pid, target.pid, clickhouse.pid()].filter((pid): pid is number => pid !== undefined);
}

async function storedRows(clickhouse: ClickHouseHandle): Promise<number> {
  return Number((await clickhouse.sql(`SELECT count() FROM ${database}.${eventsTable} FORMAT TSV`)).trim());
}

/** Resolves once ClickHouse holds `expected` rows; throws when forwarding stalls. */
async function waitForForwarding(context: SuiteContext, clickhouse: ClickHouseHandle, expected: number): Promise<void> {
  let last = -1;
  let lastChangeMs = performance.now();
  for (;;) {
    const stored = await storedRows(clickhouse);
    if (stored >= expected) return;
    if (stored !== last) {
      last = stored;
      lastChangeMs = performance.now();
      context.progress.status(`${formatCount(stored)} of ${formatCount(expected)} events in ClickHouse`);
    } else if (performance.now() - lastChangeMs > forwardStallMs) {
      throw new Error(`forwarding stalled: ClickHouse held ${stored} of ${expected} events for ${forwardStallMs / 1000} s`);
    }
    await sleep(50);
  }
}

interface TimedAnswer {
  ms: number;
  answer: unknown;
}

async function ask(agent: Agent, target: Target, path: string, body: string): Promise<TimedAnswer> {
  const startMs = performance.now();
  const answer = await post(agent, `${target.queryUrl}${path}`, body, { headers: { authorization: `Bearer ${target.token}` }, idempotent: true });
  const ms = performance.now() - startMs;
  if (answer.status !== 200) throw new Error(`${target.queryUrl}${path} answered ${answer.status}: ${answer.text.slice(0, 300)} (request ${body})`);
  return { ms, answer: JSON.parse(answer.text) as unknown };
}

/** Every query kind of the suite, both stores in turn (which goes first alternates), until the kind's time budget is spent. */
async function runQueryTable(context: SuiteContext, clickhouseTarget: Target): Promise<ClickHouseQueryRun[]> {
  const { options } = context;
  const checkAnswers = context.datasetResult.action === "loaded" || context.datasetResult.action === "already-there";
  const agents = { embedded: keepAliveAgent(1), clickhouse: keepAliveAgent(1) };
  const runs: ClickHouseQueryRun[] = [];
  try {
    for (const kind of options.queries) {
      const variants = queryVariants(kind, options.dataset);
      // Retention walks on from where the queries scenario stopped, so the embedded store's 60 s cache is not asked the same questions again.
      if (kind === "retention" && context.retentionExposure === null) context.retentionExposure = new CacheExposure(variants.length);
      const exposure = kind === "retention" ? context.retentionExposure : null;
      const offset = exposure?.offset ?? 0;
      context.progress.startStep(`query ${kind} on both stores`, options.clickhouse.secondsPerQuery + 0.5);
      const embeddedMs: number[] = [];
      const clickhouseMs: number[] = [];
      let compared = 0;
      let differing = 0;
      let difference: string | undefined;
      const startMs = performance.now();
      const budgetEndMs = startMs + options.clickhouse.secondsPerQuery * 1000;
      let lastStatusMs = 0;
      // Round 0 is the warm-up: its times are not kept, its answers are compared.
      for (let round = 0; round === 0 || ((performance.now() < budgetEndMs || embeddedMs.length < 3) && embeddedMs.length < 10_000); round += 1) {
        const variant = variants[(offset + round) % variants.length];
        const embeddedFirst = round % 2 === 0;
        const first = await ask(embeddedFirst ? agents.embedded : agents.clickhouse, embeddedFirst ? context.target : clickhouseTarget, variant.path, variant.body);
        const second = await ask(embeddedFirst ? agents.clickhouse : agents.embedded, embeddedFirst ? clickhouseTarget : context.target, variant.path, variant.body);
        const [embedded, clickhouse] = embeddedFirst ? [first, second] : [second, first];
        if (round > 0) {
          embeddedMs.push(embedded.ms);
          clickhouseMs.push(clickhouse.ms);
        }
        if (checkAnswers) {
          compared += 1;
          const found = firstDifference(clickhouse.answer, embedded.answer);
          if (found !== undefined) {
            differing += 1;
            difference ??= `${found} (request ${variant.body})`;
          }
        }
        if (performance.now() - lastStatusMs > 1000) {
          lastStatusMs = performance.now();
          context.progress.status(`${embeddedMs.length} pairs · embedded ${formatMs(summarizeSample(embeddedMs).p50)} ms · ClickHouse ${formatMs(summarizeSample(clickhouseMs).p50)} ms`);
        }
      }
      const sent = embeddedMs.length + 1;
      const cachedShareEstimate = exposure === null ? 0 : exposure.record(sent, startMs, performance.now());
      const run: ClickHouseQueryRun = {
        query: kind,
        runs: embeddedMs.length,
        embeddedMs: summarizeSample(embeddedMs),
        clickhouseMs: summarizeSample(clickhouseMs),
        answersCompared: checkAnswers ? compared : null,
        answersDiffering: differing,
        cachedShareEstimate,
      };
      if (difference !== undefined) {
        run.difference = difference;
        warn(context, `${kind}: the ClickHouse store's answer differs from the embedded store's in ${differing} of ${compared} requests, first at ${difference}`);
      }
      runs.push(run);
      context.progress.endStep(
        `${run.runs} pairs, p50 embedded ${formatMs(run.embeddedMs.p50)} ms, ClickHouse ${formatMs(run.clickhouseMs.p50)} ms (${(run.clickhouseMs.p50 / run.embeddedMs.p50).toFixed(2)}×)` +
          (run.answersCompared === null ? "; answers not compared (the embedded store holds other data)" : differing === 0 ? `; ${compared} answers identical` : `; ${differing} of ${compared} ANSWERS DIFFER`) +
          (cachedShareEstimate > 0.01 ? ` (≈${(cachedShareEstimate * 100).toFixed(0)} % of the embedded answers may be cached)` : ""),
      );
    }
  } finally {
    agents.embedded.destroy();
    agents.clickhouse.destroy();
  }
  return runs;
}

/** ms from each probe's 200 until a trend query over its day counts it. */
async function visibilityDelays(target: Target, samples: number, day: string, eventPrefix: string): Promise<number[]> {
  const agent = keepAliveAgent(1);
  const delays: number[] = [];
  try {
    for (let sample = 0; sample < samples; sample += 1) {
      const event = `${eventPrefix}${sample}`;
      const ingest = await post(agent, `${target.ingestUrl}/ingest`, JSON.stringify({ apiKey: target.apiKey, event, distinctId: "bench-visibility", timestamp: `${day}T12:00:00.000Z` }));
      if (ingest.status !== 200) throw new Error(`a visibility probe was refused: HTTP ${ingest.status} ${ingest.text.slice(0, 200)}`);
      const acknowledgedMs = performance.now();
      const query = JSON.stringify({ event, dateFrom: day, dateTo: day });
      for (;;) {
        const { answer } = await ask(agent, target, "/api/v1/query/trend", query);
        if ((answer as { data: { count: number }[] }).data[0]?.count === 1) break;
        if (performance.now() - acknowledgedMs > visibilityDeadlineMs) throw new Error(`${target.queryUrl}: event ${event} was not counted ${visibilityDeadlineMs / 1000} s after its 200`);
        // The delay's resolution: a poll every 10 ms, each a query of one day.
        await sleep(10);
      }
      delays.push(performance.now() - acknowledgedMs);
    }
  } finally {
    agent.destroy();
  }
  return delays;
}

/** Runs the scenario; a failure (ClickHouse not starting, a refused request, stalled forwarding) is its result, said loudly, and the suite goes on. */
export async function runClickHouse(context: SuiteContext, binary: string): Promise<ClickHouseResult> {
  const { options, progress } = context;
  const dataset = context.dataset;
  if (dataset === null) throw new Error("the clickhouse scenario needs the dataset in memory: run it before the dataset is dropped");
  progress.log(`\nClickHouse store beside the embedded one (${binary}; the same ${formatCount(dataset.eventCount)} rows)`);
  let clickhouse: ClickHouseHandle | undefined;
  let target: Target | undefined;
  try {
    progress.startStep("start ClickHouse (a private clickhouse-server)", 3);
    clickhouse = await startClickHouse();
    const version = (await clickhouse.sql("SELECT version() FORMAT TSV")).trim();
    progress.endStep(`ClickHouse ${version}, pid ${clickhouse.pid()}, ${clickhouse.httpUrl}, data ${clickhouse.directory}`);

    progress.startStep("start Eventide on ClickHouse", 1);
    target = await startEventide({ repositoryRoot: context.repositoryRoot, workers: options.workers, keepData: options.keepData, environment: { EVENTIDE_STORE: storeUrl(clickhouse, database) } });
    progress.endStep(`pid ${target.pid}, query ${target.queryUrl}, ingest ${target.ingestUrl}, EVENTIDE_STORE=${storeUrl(clickhouse, database)}`);

    const pids = { eventide: target.pid, clickhouse: clickhouse.pid() };
    const cpuStart = { eventide: pids.eventide === undefined ? 0 : processCpuMs(pids.eventide), clickhouse: pids.clickhouse === undefined ? 0 : processCpuMs(pids.clickhouse) };
    const loadMeter = new CpuMeter(ownPids(context, target, clickhouse));
    progress.startStep("load dataset into Eventide on ClickHouse", dataset.eventCount / 150_000 + 1);
    const loadStartMs = performance.now();
    const load = await loadDataset(target, dataset, {
      inflight: 4,
      onProgress: (update) => progress.status(`${formatCount(update.acknowledgedEvents)} of ${formatCount(dataset.eventCount)} events · ${formatCount((update.acknowledgedEvents / update.elapsedMs) * 1000)} events/s`),
    });
    const lastAckMs = performance.now();
    const embedded = context.datasetResult.loadEventsPerSecond;
    progress.endStep(
      `${formatCount(load.events)} events in ${load.seconds.toFixed(1)} s (${formatCount(load.eventsPerSecond)} events/s acknowledged, ${load.retries} retries after 503)` +
        (embedded === null ? "" : `; the embedded store took ${formatCount(embedded)} events/s (${(load.eventsPerSecond / embedded).toFixed(2)}×)`),
    );

    progress.startStep("wait until ClickHouse holds every event", dataset.eventCount / 300_000 + 1);
    await waitForForwarding(context, clickhouse, load.events);
    const forwardedMs = performance.now();
    const cpu = cpuPercent(loadStartMs, pids, cpuStart, recordOthers(context, loadMeter));
    const forward = { seconds: (forwardedMs - loadStartMs) / 1000, eventsPerSecond: load.events / ((forwardedMs - loadStartMs) / 1000), lagAfterLastAckSeconds: (forwardedMs - lastAckMs) / 1000 };
    progress.endStep(
      `${formatCount(forward.eventsPerSecond)} events/s from the first request until ClickHouse held all ${formatCount(load.events)} (${forward.lagAfterLastAckSeconds.toFixed(1)} s after the last 200); ` +
        `CPU: Eventide ${cpu.eventidePercent.toFixed(0)} %, ClickHouse ${cpu.clickhousePercent.toFixed(0)} %, others ${cpu.othersPercent.toFixed(0)} %`,
    );
    // ClickHouse merges the freshly inserted parts in the background: time queries once it is done, as the embedded store's restart seals its rows first.
    await waitUntilIdle(context, [pids.eventide, pids.clickhouse].filter((pid): pid is number => pid !== undefined), "wait for ClickHouse to merge its parts");

    const queryMeter = new CpuMeter(ownPids(context, target, clickhouse));
    const queries = await runQueryTable(context, target);
    const queryOthers = recordOthers(context, queryMeter);
    progress.log(`  CPU while the queries ran: others ${queryOthers.toFixed(0)} % of a core`);

    const samples = options.clickhouse.visibilitySamples;
    progress.startStep(`visibility delay: ${samples} single events to each store`, samples * (1 + 0.3));
    const day = datasetRange(options.dataset).dateTo;
    // A name no query asks for and no earlier run used, so a probe changes no answer.
    const prefix = `bench_visibility_${Date.now().toString(36)}_`;
    const clickhouseDelays = await visibilityDelays(target, samples, day, `${prefix}clickhouse_`);
    const embeddedDelays = await visibilityDelays(context.target, samples, day, `${prefix}embedded_`);
    context.acknowledgedEvents += samples;
    const visibility = { samples, clickhouseMs: summarizeSample(clickhouseDelays), embeddedMs: summarizeSample(embeddedDelays) };
    progress.endStep(
      `ClickHouse store: median ${formatMs(visibility.clickhouseMs.p50)} ms, p95 ${formatMs(visibility.clickhouseMs.p95)} ms; ` +
        `embedded store: median ${formatMs(visibility.embeddedMs.p50)} ms, p95 ${formatMs(visibility.embeddedMs.p95)} ms (a trend query polled every 10 ms)`,
    );
    return {
      state: "measured",
      version,
      events: load.events,
      embeddedIngestEventsPerSecond: embedded,
      ingest: { seconds: load.seconds, eventsPerSecond: load.eventsPerSecond, retries: load.retries },
      forward,
      cpu,
      visibility,
      queries,
    };
  } catch (error) {
    const reason = `failed: ${(error as Error).message.split("\n")[0]}`;
    progress.log(loudNotice(`ClickHouse store ${reason}`));
    warn(context, `ClickHouse store ${reason}`);
    return { state: "failed", reason };
  } finally {
    progress.startStep("stop Eventide on ClickHouse, then ClickHouse", 2);
    const code = target === undefined ? null : await target.stop();
    if (code !== null && code !== 0) warn(context, `Eventide on ClickHouse exited ${code} on SIGTERM; stderr: ${target!.stderrTail().slice(-500)}`);
    target?.cleanup();
    await clickhouse?.stop();
    progress.endStep(code === null ? "done" : `Eventide exit ${code}`);
  }
}
