/**
 * Fixtures for the bench suite's own tests: a synthetic but complete
 * SuiteResults (every scenario present, figures collected the way a run
 * collects them), and a strict XML well-formedness check for the SVG charts —
 * no XML library, just the rules an SVG viewer enforces: one root, balanced
 * and properly nested tags, quoted attributes, no duplicate attributes, and
 * only the five predefined entities (or numeric ones).
 */
import { summarizeSample } from "../../bench/runner/stats.js";
import { collectFigures, resultsFormat, type ClickHouseResult, type IngestRun, type MixedResult, type QueryRun, type StepCpu, type SuiteResults, type TimelinePoint } from "../../bench/suite/results.js";
import { parseSuiteOptions, type SuiteOptions } from "../../bench/suite/options.js";

const cpu: StepCpu = { generatorPercent: 35, generatorPerProcessPercent: [35], generatorSaturated: false, serverPercent: 150, driverPercent: 1, othersPercent: 12 };

function latency(p50: number): ReturnType<typeof summarizeSample> {
  return { p50, p90: p50 * 2, p95: p50 * 2.5, p99: p50 * 4, p999: p50 * 6, max: p50 * 10, mean: p50 * 1.3 };
}

function timeline(rate: number, eventsPerRequest: number, seconds: number): TimelinePoint[] {
  return Array.from({ length: seconds * 2 }, (_, index) => ({
    seconds: (index + 1) / 2,
    requestsPerSecond: rate * (1 + 0.05 * Math.sin(index)),
    eventsPerSecond: rate * eventsPerRequest * (1 + 0.05 * Math.sin(index)),
    p50Ms: 2,
    p99Ms: 9,
    errors: 0,
  }));
}

function ingestRun(scenario: IngestRun["scenario"], server: IngestRun["server"], connections: number, eventsPerSecond: number): IngestRun {
  const eventsPerBody = scenario === "ingest-batch" ? 1000 : 1;
  return {
    scenario,
    server,
    connections,
    eventsPerBody,
    mode: "closed",
    targetEventsPerSecond: null,
    targetRequestsPerSecond: null,
    eventsPerSecond,
    requestsPerSecond: eventsPerSecond / eventsPerBody,
    latencyMs: latency(server === "ceiling" ? 1 : 5),
    serviceLatencyMs: latency(server === "ceiling" ? 1 : 5),
    schedulerLagP99Ms: Number.NaN,
    requests: 1000,
    errors: 0,
    statusCounts: { "200": 1000 },
    timedOut: 0,
    cpu,
    timeline: timeline(eventsPerSecond / eventsPerBody, eventsPerBody, 3),
  };
}

function queryRun(query: QueryRun["query"], connections: number, p50: number): QueryRun {
  return {
    query,
    connections,
    mode: "closed",
    targetRequestsPerSecond: null,
    requestsPerSecond: (1000 / p50) * connections * 0.8,
    latencyMs: latency(p50 * (1 + connections / 8)),
    serviceLatencyMs: latency(p50),
    schedulerLagP99Ms: Number.NaN,
    requests: 500,
    errors: 0,
    statusCounts: { "200": 500 },
    timedOut: 0,
    cpu,
    timeline: timeline(100, 0, 3),
    distinctRequests: query === "retention" ? 2800 : 1,
    cachedShareEstimate: 0,
  };
}

function mixed(seconds: number): MixedResult {
  return {
    seconds,
    ingest: { targetEventsPerSecond: 50_000, eventsPerSecond: 49_800, batchEvents: 100, latencyMs: latency(8), serviceLatencyMs: latency(6), errors: 0, timedOut: 0 },
    queries: {
      connections: 2,
      mode: "closed",
      requestsPerSecond: 120,
      latencyMs: latency(12),
      errors: 0,
      byKind: (["trend", "funnel-5", "retention"] as const).map((query, index) => ({
        query,
        requests: 400,
        requestsPerSecond: 40,
        latencyMs: latency(5 + index * 20),
        idleLatencyMs: latency(3 + index * 15),
        idleConnections: 1,
        cachedShareEstimate: 0,
      })),
    },
    cpu,
    samples: Array.from({ length: seconds }, (_, index) => ({
      seconds: index + 1,
      ingestEventsPerSecond: 50_000 - index * 10,
      ingestP99Ms: 20 + index,
      queriesPerSecond: 120,
      queryP50Ms: 12,
      queryP99Ms: 60 + index,
      rssMiB: 200 + index * 0.5,
      serverCpuPercent: 160,
      othersCpuPercent: 10,
      errors: 0,
    })),
  };
}

/** The clickhouse scenario as a run of three query kinds records it. */
export function clickhouseResult(): ClickHouseResult {
  return {
    state: "measured",
    version: "18.16.1",
    events: 1_000_000,
    embeddedIngestEventsPerSecond: 153_846,
    ingest: { seconds: 8, eventsPerSecond: 125_000, retries: 0 },
    forward: { seconds: 10, eventsPerSecond: 100_000, lagAfterLastAckSeconds: 2 },
    cpu: { eventidePercent: 140, clickhousePercent: 45, othersPercent: 12 },
    visibility: { samples: 10, clickhouseMs: latency(1200), embeddedMs: latency(2) },
    queries: [
      { query: "trend", runs: 60, embeddedMs: latency(4), clickhouseMs: latency(12), answersCompared: 61, answersDiffering: 0, cachedShareEstimate: 0 },
      { query: "funnel-5", runs: 8, embeddedMs: latency(80), clickhouseMs: latency(60), answersCompared: 9, answersDiffering: 0, cachedShareEstimate: 0 },
      {
        query: "retention",
        runs: 20,
        embeddedMs: latency(9),
        clickhouseMs: latency(45),
        answersCompared: 21,
        answersDiffering: 1,
        difference: "$.cohorts[3].retained[2]: 7 ≠ 8 (request {})",
        cachedShareEstimate: 0,
      },
    ],
  };
}

/** A complete results object; `tweak` edits it before figures are collected. */
export function sampleResults(tweak: (results: Omit<SuiteResults, "figures">) => void = () => undefined): SuiteResults {
  const options = parseSuiteOptions(["--profile", "quick"]) as SuiteOptions;
  const soakBase = mixed(30);
  const partial: Omit<SuiteResults, "figures"> = {
    format: resultsFormat,
    startedAt: "2026-01-02T03:04:05.000Z",
    finishedAt: "2026-01-02T03:06:05.000Z",
    wallSeconds: 120,
    machine: {
      cpuModel: "Test CPU <fast> & \"quoted\"",
      cores: 2,
      memoryGiB: 8,
      node: "v20.0.0",
      os: "Linux test",
      eventideCommit: "0123456789abcdef0123456789abcdef01234567",
      eventideDirty: false,
      eventideVersion: "0.1.0",
      loadAverageAtStart: [0.5, 0.4, 0.3],
    },
    target: { kind: "self-started", queryUrl: "http://127.0.0.1:1", ingestUrl: "http://127.0.0.1:2", serverPid: 42, workers: null },
    options: { ...options, external: null },
    dataset: { events: 1_000_000, users: 100_000, days: 90, seed: 1, startDate: "2024-01-01", action: "loaded", loadSeconds: 6.5, loadEventsPerSecond: 153_846, loadRetries: 0 },
    ingest: [
      ingestRun("ingest-batch", "eventide", 4, 120_000),
      ingestRun("ingest-batch", "ceiling", 4, 600_000),
      ingestRun("ingest-batch", "eventide", 16, 140_000),
      ingestRun("ingest-batch", "ceiling", 16, 580_000),
      ingestRun("ingest-single", "eventide", 16, 9_000),
      ingestRun("ingest-single", "ceiling", 16, 45_000),
    ],
    queries: [queryRun("trend", 1, 4), queryRun("trend", 4, 4), queryRun("funnel-5", 1, 80), queryRun("funnel-5", 4, 80), queryRun("retention", 1, 9), queryRun("retention", 4, 9)],
    duckdb: {
      version: "v1.5.6",
      threads: 2,
      loadSeconds: 3.2,
      runs: [
        { query: "trend", runs: 40, latencyMs: latency(9), answersMatch: true },
        { query: "funnel-5", runs: 5, latencyMs: latency(400), answersMatch: true },
        { query: "retention", runs: 12, latencyMs: latency(120), answersMatch: false, difference: "$.cohorts[0].total" },
      ],
    },
    clickhouse: clickhouseResult(),
    mixed: mixed(10),
    soak: {
      ...soakBase,
      sampleSeconds: 1,
      summary: {
        ingestEventsPerSecondFirst: 50_000,
        ingestEventsPerSecondLast: 49_700,
        queryP99MsFirst: 60,
        queryP99MsLast: 89,
        rssMiBStart: 200,
        rssMiBEnd: 214.5,
        rssMiBPeak: 214.5,
        rssGrowthMiBPerMinute: 30,
      },
    },
    server: { rssMiBAtEnd: 230, peakRssMiB: 260, diskBytes: 50_000_000, acknowledgedEvents: 2_000_000, diskBytesPerEvent: 25, stopSeconds: 0.8, stopExitCode: 0 },
    noise: { othersCpuPercentMean: 12, othersCpuPercentMax: 40, loadAverageAtEnd: [1.5, 1, 0.5] },
    warnings: ["ingest-batch eventide c=16: a <warning> & more"],
  };
  tweak(partial);
  return { ...partial, figures: collectFigures(partial) };
}

export interface XmlElement {
  name: string;
  attributes: Record<string, string>;
  children: XmlElement[];
  text: string;
}

/** Parses a document strictly; throws with the offset of the first violation. */
export function parseXml(source: string): XmlElement {
  let at = 0;
  const fail = (message: string): never => {
    throw new Error(`${message} at offset ${at}: ${JSON.stringify(source.slice(Math.max(0, at - 40), at + 40))}`);
  };
  const checkText = (text: string) => {
    if (text.includes("<")) fail("stray <");
    for (const match of text.matchAll(/&([^;\s]*);?/g)) {
      if (!match[0].endsWith(";") || !/^(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+)$/.test(match[1])) fail(`bad entity ${match[0]}`);
    }
  };
  const skipSpace = () => {
    while (at < source.length && /\s/.test(source[at])) at += 1;
  };
  const parseElement = (): XmlElement => {
    if (source[at] !== "<") fail("expected <");
    at += 1;
    const nameMatch = /^[A-Za-z_][\w.:-]*/.exec(source.slice(at));
    if (nameMatch === null) return fail("expected a tag name");
    const name = nameMatch[0];
    at += name.length;
    const attributes: Record<string, string> = {};
    for (;;) {
      skipSpace();
      if (source.startsWith("/>", at)) {
        at += 2;
        return { name, attributes, children: [], text: "" };
      }
      if (source[at] === ">") {
        at += 1;
        break;
      }
      const attribute = /^([A-Za-z_][\w.:-]*)="([^"<]*)"/.exec(source.slice(at));
      if (attribute === null) return fail(`bad attribute in <${name}>`);
      if (attribute[1] in attributes) fail(`duplicate attribute ${attribute[1]} in <${name}>`);
      checkText(attribute[2]);
      attributes[attribute[1]] = attribute[2];
      at += attribute[0].length;
    }
    const children: XmlElement[] = [];
    let text = "";
    for (;;) {
      const next = source.indexOf("<", at);
      if (next < 0) fail(`unclosed <${name}>`);
      const chunk = source.slice(at, next);
      checkText(chunk);
      text += chunk;
      at = next;
      if (source.startsWith("</", at)) {
        const close = new RegExp(`^</${name.replace(/[.]/g, "\\.")}\\s*>`).exec(source.slice(at));
        if (close === null) fail(`expected </${name}>`);
        at += close![0].length;
        return { name, attributes, children, text };
      }
      children.push(parseElement());
    }
  };
  skipSpace();
  const root = parseElement();
  skipSpace();
  if (at !== source.length) fail("content after the root element");
  return root;
}

export function findAll(element: XmlElement, predicate: (candidate: XmlElement) => boolean): XmlElement[] {
  const found: XmlElement[] = [];
  const visit = (node: XmlElement) => {
    if (predicate(node)) found.push(node);
    node.children.forEach(visit);
  };
  visit(element);
  return found;
}
