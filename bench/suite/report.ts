/**
 * Turns a run's results into what people read: SVG charts (throughput over
 * time, latency percentiles per scenario, query latency per kind beside
 * DuckDB, ingest beside the uWS ceiling, the soak's three panels), a Markdown
 * report that embeds them, and the short summary printed on the terminal.
 * Pure functions of SuiteResults, so a report can be rebuilt from any
 * results.json.
 *
 * Estimate: a handful of charts and tables, a few milliseconds.
 */
import { machineLine } from "../runner/machine.js";
import { queryLabels } from "./queries.js";
import { firstConcurrencyRun, type ClickHouseResult, type IngestRun, type MixedResult, type QueryRun, type StepCpu, type SuiteResults } from "./results.js";
import { formatBytes, formatCount, formatDuration, formatMarkdownTable, formatMs, formatPercent, formatTextTable, numberOrNaN } from "../runner/stats.js";
import { barChart, lineChart, svgDocument, type ChartPart, type LineSeries } from "./svg.js";

export interface Chart {
  /** File name inside the charts directory. */
  file: string;
  title: string;
  svg: string;
}

function ingestLabel(run: IngestRun): string {
  const kind = run.scenario === "ingest-batch" ? `batch ×${run.eventsPerBody}` : "single";
  return `${kind} c=${run.connections}${run.targetEventsPerSecond === null ? "" : ` @${formatCount(run.targetEventsPerSecond)}/s`}`;
}

function queryRunLabel(run: QueryRun): string {
  return `${run.query} c=${run.connections}${run.targetRequestsPerSecond === null ? "" : ` @${formatCount(run.targetRequestsPerSecond)}/s`}`;
}

const msFormat = (value: number) => `${formatMs(value)} ms`;

/** Every chart the results support (a scenario that did not run has none). */
export function buildCharts(results: SuiteResults): Chart[] {
  const charts: Chart[] = [];
  const eventide = results.ingest.filter((run) => run.server === "eventide");

  // Ingest beside its ceiling: one panel per scenario, bars per connection count.
  const ingestPanels: ChartPart[] = [];
  for (const scenario of ["ingest-batch", "ingest-single"] as const) {
    const runs = results.ingest.filter((run) => run.scenario === scenario);
    if (runs.length === 0) continue;
    const points = [...new Set(runs.map((run) => `${run.connections}|${run.targetEventsPerSecond ?? ""}`))];
    const pick = (server: IngestRun["server"]) =>
      points.map((point) => runs.find((run) => run.server === server && `${run.connections}|${run.targetEventsPerSecond ?? ""}` === point)?.eventsPerSecond ?? Number.NaN);
    const series = [{ name: "Eventide", values: pick("eventide") }];
    if (runs.some((run) => run.server === "ceiling")) series.push({ name: "uWS ceiling (JSON.parse only)", values: pick("ceiling") });
    ingestPanels.push(
      barChart({
        title: scenario === "ingest-batch" ? "Ingest, batches: events per second" : "Ingest, single events: events per second",
        subtitle: "higher is better · closed loop unless a rate is shown",
        categories: points.map((point) => {
          const [connections, rate] = point.split("|");
          return `c=${connections}${rate === "" ? "" : ` @${formatCount(Number(rate))}/s`}`;
        }),
        series,
        valueLabel: "events/s",
        valueFormat: (value) => `${formatCount(value)} events/s`,
      }),
    );
  }
  if (ingestPanels.length > 0) charts.push({ file: "ingest-vs-ceiling.svg", title: "Ingest beside the uWS ceiling", svg: svgDocument(ingestPanels, "Ingest beside the uWS ceiling") });

  // Throughput over time: every ingest run's per-second rate, plus the soak's.
  const timePanels: ChartPart[] = [];
  for (const scenario of ["ingest-batch", "ingest-single"] as const) {
    const runs = results.ingest.filter((run) => run.scenario === scenario && run.timeline.length > 0);
    if (runs.length === 0) continue;
    const series: LineSeries[] = runs.map((run) => ({
      name: `${run.server === "eventide" ? "Eventide" : "ceiling"} c=${run.connections}`,
      points: run.timeline.filter((point) => point.seconds > 0).map((point) => [point.seconds, point.eventsPerSecond] as const),
      dashed: run.server === "ceiling",
    }));
    timePanels.push(
      lineChart({
        title: `${scenario === "ingest-batch" ? "Batch" : "Single-event"} ingest throughput over time`,
        subtitle: "events acknowledged per second in each interval of the measured window (dashed: the uWS ceiling)",
        xLabel: "seconds into the measured window",
        yLabel: "events/s",
        series,
        valueFormat: (value) => `${formatCount(value)} events/s`,
      }),
    );
  }
  const timed = [results.mixed, results.soak].filter((result): result is MixedResult => result !== null && result.samples.length > 0);
  for (const result of timed) {
    const name = result === results.soak ? "Soak" : "Mixed";
    timePanels.push(
      lineChart({
        title: `${name}: ingest throughput over time`,
        subtitle: `open loop at ${formatCount(result.ingest.targetEventsPerSecond)} events/s in batches of ${result.ingest.batchEvents}, with queries running`,
        xLabel: "seconds",
        yLabel: "events/s",
        series: [{ name: "ingest events/s", points: result.samples.map((sample) => [sample.seconds, sample.ingestEventsPerSecond] as const) }],
        valueFormat: (value) => `${formatCount(value)} events/s`,
      }),
    );
  }
  if (timePanels.length > 0) charts.push({ file: "throughput-over-time.svg", title: "Throughput over time", svg: svgDocument(timePanels, "Throughput over time") });

  // Latency percentiles per scenario: ingest runs and query runs, log scale.
  const latencyPanels: ChartPart[] = [];
  const percentileSeries = (latencies: { p50: number; p95: number; p99: number; p999: number }[]) => [
    { name: "p50", values: latencies.map((latency) => latency.p50) },
    { name: "p95", values: latencies.map((latency) => latency.p95) },
    { name: "p99", values: latencies.map((latency) => latency.p99) },
    { name: "p99.9", values: latencies.map((latency) => latency.p999) },
  ];
  if (eventide.length > 0) {
    latencyPanels.push(
      barChart({
        title: "Eventide ingest latency percentiles",
        subtitle: "per request, ms, log scale · open-loop runs count from the intended send time",
        categories: eventide.map(ingestLabel),
        series: percentileSeries(eventide.map((run) => run.latencyMs)),
        valueLabel: "ms (log)",
        scale: "log",
        valueFormat: msFormat,
      }),
    );
  }
  if (results.queries.length > 0) {
    latencyPanels.push(
      barChart({
        title: "Eventide query latency percentiles",
        subtitle: "per query, ms, log scale",
        categories: results.queries.map(queryRunLabel),
        series: percentileSeries(results.queries.map((run) => run.latencyMs)),
        valueLabel: "ms (log)",
        scale: "log",
        valueFormat: msFormat,
      }),
    );
  }
  for (const result of timed) {
    const name = result === results.soak ? "soak" : "mixed";
    latencyPanels.push(
      barChart({
        title: `Under load (${name}): latency percentiles`,
        subtitle: `ingest open loop at ${formatCount(result.ingest.targetEventsPerSecond)} events/s while queries run`,
        categories: ["ingest", ...result.queries.byKind.map((kind) => kind.query)],
        series: percentileSeries([result.ingest.latencyMs, ...result.queries.byKind.map((kind) => kind.latencyMs)]),
        valueLabel: "ms (log)",
        scale: "log",
        valueFormat: msFormat,
      }),
    );
  }
  if (latencyPanels.length > 0) charts.push({ file: "latency-percentiles.svg", title: "Latency percentiles per scenario", svg: svgDocument(latencyPanels, "Latency percentiles per scenario") });

  // Query latency per kind: Eventide (one user), under ingest, and DuckDB on the same data.
  const kinds = [...new Set([...results.queries.map((run) => run.query), ...(results.duckdb?.runs ?? []).map((run) => run.query)])];
  if (kinds.length > 0) {
    const series = [];
    if (results.queries.length > 0) {
      series.push({ name: "Eventide p50", values: kinds.map((kind) => firstConcurrencyRun(results.queries, kind)?.latencyMs.p50 ?? Number.NaN) });
      series.push({ name: "Eventide p99", values: kinds.map((kind) => firstConcurrencyRun(results.queries, kind)?.latencyMs.p99 ?? Number.NaN) });
    }
    if (results.mixed !== null) {
      const mixed = results.mixed;
      series.push({ name: "Eventide p99 under ingest", values: kinds.map((kind) => mixed.queries.byKind.find((entry) => entry.query === kind)?.latencyMs.p99 ?? Number.NaN) });
    }
    if (results.duckdb !== null) {
      const duckdb = results.duckdb;
      series.push({ name: "DuckDB p50", values: kinds.map((kind) => duckdb.runs.find((run) => run.query === kind)?.latencyMs.p50 ?? Number.NaN) });
    }
    const lowest = Math.min(...results.queries.map((run) => run.connections));
    charts.push({
      file: "query-latency.svg",
      title: "Query latency per kind",
      svg: svgDocument(
        [
          barChart({
            title: "Query latency per kind",
            subtitle: `ms, log scale, lower is better · Eventide at ${Number.isFinite(lowest) ? lowest : 1} connection(s); DuckDB in-process, one query at a time, same rows`,
            categories: kinds.map((kind) => queryLabels[kind]),
            series,
            valueLabel: "ms (log)",
            scale: "log",
            orientation: "horizontal",
            valueFormat: msFormat,
          }),
        ],
        "Query latency per kind",
      ),
    });
  }

  // Query latency and throughput over concurrency, when more than one concurrency ran.
  const closedQueries = results.queries.filter((run) => run.mode === "closed");
  if (new Set(closedQueries.map((run) => run.connections)).size > 1) {
    const byKind = [...new Set(closedQueries.map((run) => run.query))];
    const seriesOf = (pick: (run: QueryRun) => number): LineSeries[] =>
      byKind.map((kind) => ({
        name: kind,
        points: closedQueries
          .filter((run) => run.query === kind)
          .sort((left, right) => left.connections - right.connections)
          .map((run) => [run.connections, pick(run)] as const),
      }));
    charts.push({
      file: "query-concurrency.svg",
      title: "Queries over concurrency",
      svg: svgDocument(
        [
          lineChart({ title: "Query throughput over concurrency", subtitle: "queries answered per second, closed loop", xLabel: "connections", yLabel: "queries/s", series: seriesOf((run) => run.requestsPerSecond), xScale: "log" }),
          lineChart({
            title: "Query p99 latency over concurrency",
            subtitle: "ms, log scale",
            xLabel: "connections",
            yLabel: "p99 ms (log)",
            series: seriesOf((run) => run.latencyMs.p99),
            xScale: "log",
            yScale: "log",
            valueFormat: msFormat,
          }),
        ],
        "Queries over concurrency",
      ),
    });
  }

  // The ClickHouse store beside the embedded one: the same requests, asked in turn.
  const clickhouse = measuredClickHouse(results);
  if (clickhouse !== null && clickhouse.queries.length > 0) {
    charts.push({
      file: "clickhouse.svg",
      title: "Query latency: ClickHouse store beside the embedded store",
      svg: svgDocument(
        [
          barChart({
            title: "Query latency: ClickHouse store beside the embedded store",
            subtitle: `p50, ms, log scale, lower is better · the same requests to both, one at a time, in turn · ClickHouse ${clickhouse.version} on this machine`,
            categories: clickhouse.queries.map((run) => queryLabels[run.query]),
            series: [
              { name: "embedded p50", values: clickhouse.queries.map((run) => run.embeddedMs.p50) },
              { name: "ClickHouse p50", values: clickhouse.queries.map((run) => run.clickhouseMs.p50) },
            ],
            valueLabel: "ms (log)",
            scale: "log",
            orientation: "horizontal",
            valueFormat: msFormat,
          }),
        ],
        "ClickHouse store beside the embedded store",
      ),
    });
  }

  // Soak: throughput, latency and memory over time.
  if (results.soak !== null && results.soak.samples.length > 0) {
    const samples = results.soak.samples;
    const panels = [
      lineChart({
        title: "Soak: throughput over time",
        subtitle: `ingest open loop at ${formatCount(results.soak.ingest.targetEventsPerSecond)} events/s; queries closed loop on ${results.soak.queries.connections} connection(s)`,
        xLabel: "seconds",
        yLabel: "events/s",
        series: [{ name: "ingest events/s", points: samples.map((sample) => [sample.seconds, sample.ingestEventsPerSecond] as const) }],
      }),
      lineChart({
        title: "Soak: queries per second",
        xLabel: "seconds",
        yLabel: "queries/s",
        series: [{ name: "queries/s", points: samples.map((sample) => [sample.seconds, sample.queriesPerSecond] as const), color: "#7c3aed" }],
      }),
      lineChart({
        title: "Soak: latency over time",
        subtitle: "per interval, ms, log scale",
        xLabel: "seconds",
        yLabel: "ms (log)",
        yScale: "log",
        valueFormat: msFormat,
        series: [
          { name: "query p50", points: samples.map((sample) => [sample.seconds, sample.queryP50Ms] as const) },
          { name: "query p99", points: samples.map((sample) => [sample.seconds, sample.queryP99Ms] as const) },
          { name: "ingest p99", points: samples.map((sample) => [sample.seconds, sample.ingestP99Ms] as const), dashed: true },
        ],
      }),
    ];
    if (samples.some((sample) => Number.isFinite(sample.rssMiB))) {
      panels.push(
        lineChart({
          title: "Soak: server memory (RSS)",
          xLabel: "seconds",
          yLabel: "MiB",
          series: [{ name: "RSS MiB", points: samples.map((sample) => [sample.seconds, sample.rssMiB] as const), color: "#16a34a" }],
          valueFormat: (value) => `${value.toFixed(0)} MiB`,
        }),
      );
    }
    charts.push({ file: "soak.svg", title: "Soak: throughput, latency and RSS over time", svg: svgDocument(panels, "Soak") });
  }
  return charts;
}

// ---------------------------------------------------------------------------
// Markdown.

type MeasuredClickHouse = Extract<ClickHouseResult, { state: "measured" }>;

/** The clickhouse scenario's figures when it ran (results files from before it existed have none). */
function measuredClickHouse(results: SuiteResults): MeasuredClickHouse | null {
  return results.clickhouse?.state === "measured" ? results.clickhouse : null;
}

function ratio(numerator: number, denominator: number): string {
  return `${(numerator / denominator).toFixed(2)}×`;
}

function answersCell(run: MeasuredClickHouse["queries"][number]): string {
  if (run.answersCompared === null) return "not compared";
  return run.answersDiffering === 0 ? `${run.answersCompared} identical` : `${run.answersDiffering} of ${run.answersCompared} DIFFER: ${run.difference ?? "?"}`;
}

function clickhouseQueryRows(clickhouse: MeasuredClickHouse): string[][] {
  return clickhouse.queries.map((run) => [
    queryLabels[run.query] + (run.cachedShareEstimate > 0.01 ? ` (≈${formatPercent(run.cachedShareEstimate * 100)} of embedded answers may be cached)` : ""),
    String(run.runs),
    formatMs(run.embeddedMs.p50),
    formatMs(run.embeddedMs.p95),
    formatMs(run.clickhouseMs.p50),
    formatMs(run.clickhouseMs.p95),
    ratio(run.clickhouseMs.p50, run.embeddedMs.p50),
    answersCell(run),
  ]);
}

const clickhouseQueryHeader = ["query", "pairs", "embedded p50 ms", "p95 ms", "ClickHouse p50 ms", "p95 ms", "ClickHouse ÷ embedded", "answers"];

function clickhouseStoreRows(clickhouse: MeasuredClickHouse): string[][] {
  const embeddedLoad = clickhouse.embeddedIngestEventsPerSecond;
  const visibility = clickhouse.visibility;
  return [
    [
      "dataset load, events/s acknowledged (1 000-event batches, 4 in flight)",
      embeddedLoad === null ? "–" : formatCount(embeddedLoad),
      formatCount(clickhouse.ingest.eventsPerSecond),
      embeddedLoad === null ? "–" : ratio(clickhouse.ingest.eventsPerSecond, embeddedLoad),
    ],
    ["events/s until every row is counted by queries", "as acknowledged", `${formatCount(clickhouse.forward.eventsPerSecond)} (${clickhouse.forward.lagAfterLastAckSeconds.toFixed(1)} s after the last 200)`, "–"],
    [
      `visibility delay, 200 → counted by a trend query (${visibility.samples} single events)`,
      `p50 ${formatMs(visibility.embeddedMs.p50)} ms · p95 ${formatMs(visibility.embeddedMs.p95)} ms`,
      `p50 ${formatMs(visibility.clickhouseMs.p50)} ms · p95 ${formatMs(visibility.clickhouseMs.p95)} ms`,
      "–",
    ],
  ];
}

/** "0.84×–3.10×" over the query kinds (one kind: its ratio). */
function ratioRange(clickhouse: MeasuredClickHouse): string {
  const ratios = clickhouse.queries.map((run) => run.clickhouseMs.p50 / run.embeddedMs.p50).filter((value) => Number.isFinite(value));
  if (ratios.length === 0) return "–";
  const [low, high] = [Math.min(...ratios), Math.max(...ratios)];
  return low === high ? `${low.toFixed(2)}×` : `${low.toFixed(2)}×–${high.toFixed(2)}×`;
}

function cpuCells(cpu: StepCpu): string[] {
  return [`${formatPercent(cpu.generatorPercent)}${cpu.generatorSaturated ? " ⚠" : ""}`, formatPercent(numberOrNaN(cpu.serverPercent)), formatPercent(cpu.othersPercent)];
}

function errorsCell(errors: number, statusCounts: Record<string, number>): string {
  if (errors === 0) return "0";
  const statuses = Object.entries(statusCounts)
    .filter(([status]) => !status.startsWith("2"))
    .map(([status, count]) => `${count}×${status}`)
    .join(" ");
  return statuses === "" ? String(errors) : `${errors} (${statuses})`;
}

/** The headline figures: one line per scenario that ran, the ones a reader looks for first. */
export function headlineRows(results: SuiteResults): string[][] {
  const rows: string[][] = [];
  for (const scenario of ["ingest-batch", "ingest-single"] as const) {
    const runs = results.ingest.filter((run) => run.scenario === scenario && run.server === "eventide");
    if (runs.length === 0) continue;
    const best = runs.reduce((left, right) => (right.eventsPerSecond > left.eventsPerSecond ? right : left));
    const ceiling = results.ingest.find((run) => run.server === "ceiling" && run.scenario === scenario && run.connections === best.connections && run.targetEventsPerSecond === best.targetEventsPerSecond);
    rows.push([
      `${scenario === "ingest-batch" ? "batch" : "single-event"} ingest, best (c=${best.connections})`,
      `${formatCount(best.eventsPerSecond)} events/s`,
      `p50 ${formatMs(best.latencyMs.p50)} ms · p99 ${formatMs(best.latencyMs.p99)} ms`,
      ceiling === undefined ? "–" : `${formatPercent((best.eventsPerSecond / ceiling.eventsPerSecond) * 100)} of the uWS ceiling (${formatCount(ceiling.eventsPerSecond)})`,
    ]);
  }
  const kinds = [...new Set(results.queries.map((run) => run.query))];
  for (const kind of kinds) {
    const run = firstConcurrencyRun(results.queries, kind)!;
    const duckdb = results.duckdb?.runs.find((entry) => entry.query === kind);
    rows.push([
      `${queryLabels[kind]} (c=${run.connections})`,
      `${formatCount(run.requestsPerSecond)} queries/s`,
      `p50 ${formatMs(run.latencyMs.p50)} ms · p99 ${formatMs(run.latencyMs.p99)} ms`,
      duckdb === undefined ? "–" : `DuckDB p50 ${formatMs(duckdb.latencyMs.p50)} ms (${(run.latencyMs.p50 / duckdb.latencyMs.p50).toFixed(2)}×)`,
    ]);
  }
  const clickhouse = measuredClickHouse(results);
  if (clickhouse !== null) {
    const embeddedLoad = clickhouse.embeddedIngestEventsPerSecond;
    rows.push([
      "ClickHouse store: dataset load",
      `${formatCount(clickhouse.ingest.eventsPerSecond)} events/s`,
      `queryable at ${formatCount(clickhouse.forward.eventsPerSecond)} events/s · visible after p50 ${formatMs(clickhouse.visibility.clickhouseMs.p50)} ms, p95 ${formatMs(clickhouse.visibility.clickhouseMs.p95)} ms`,
      embeddedLoad === null ? "–" : `embedded ${formatCount(embeddedLoad)} events/s (${ratio(clickhouse.ingest.eventsPerSecond, embeddedLoad)})`,
    ]);
    if (clickhouse.queries.length > 0) {
      const differing = clickhouse.queries.reduce((sum, run) => sum + run.answersDiffering, 0);
      const compared = clickhouse.queries.every((run) => run.answersCompared !== null);
      rows.push([
        `ClickHouse store: ${clickhouse.queries.length} query kinds, in turn with the embedded store`,
        compared ? (differing === 0 ? "answers identical" : `${differing} ANSWERS DIFFER`) : "answers not compared",
        clickhouse.queries.map((run) => `${run.query} ${formatMs(run.clickhouseMs.p50)}`).join(" · ") + " ms p50",
        `${ratioRange(clickhouse)} the embedded p50`,
      ]);
    }
  } else if (results.clickhouse !== undefined && results.clickhouse !== null && results.clickhouse.state !== "measured") {
    rows.push(["ClickHouse store", results.clickhouse.state.toUpperCase(), results.clickhouse.reason, "–"]);
  }
  if (results.mixed !== null) {
    const mixed = results.mixed;
    rows.push([
      `mixed: queries while ingesting ${formatCount(mixed.ingest.targetEventsPerSecond)} events/s`,
      `${formatCount(mixed.queries.requestsPerSecond)} queries/s`,
      `p50 ${formatMs(mixed.queries.latencyMs.p50)} · p95 ${formatMs(mixed.queries.latencyMs.p95)} · p99 ${formatMs(mixed.queries.latencyMs.p99)} ms`,
      `ingest held ${formatCount(mixed.ingest.eventsPerSecond)} events/s, p99 ${formatMs(mixed.ingest.latencyMs.p99)} ms`,
    ]);
  }
  if (results.soak !== null) {
    const soak = results.soak;
    rows.push([
      `soak, ${formatDuration(soak.seconds)}`,
      `${formatCount(soak.ingest.eventsPerSecond)} events/s, ${formatCount(soak.queries.requestsPerSecond)} queries/s`,
      `query p99 ${formatMs(soak.summary.queryP99MsFirst)} → ${formatMs(soak.summary.queryP99MsLast)} ms`,
      Number.isFinite(soak.summary.rssMiBEnd)
        ? `RSS ${soak.summary.rssMiBStart.toFixed(0)} → ${soak.summary.rssMiBEnd.toFixed(0)} MiB (${soak.summary.rssGrowthMiBPerMinute >= 0 ? "+" : ""}${soak.summary.rssGrowthMiBPerMinute.toFixed(1)} MiB/min)`
        : "RSS unknown (no server pid)",
    ]);
  }
  return rows;
}

export function buildMarkdown(results: SuiteResults, charts: readonly Chart[], chartDirectory = "charts"): string {
  const lines: string[] = [];
  const push = (...text: string[]) => lines.push(...text);
  const chartLink = (file: string) => {
    const chart = charts.find((candidate) => candidate.file === file);
    if (chart !== undefined) push("", `![${chart.title}](${chartDirectory}/${chart.file})`);
  };
  push(`# Eventide bench — ${results.startedAt.slice(0, 16).replace("T", " ")} UTC`, "");
  push(`- **Machine:** ${machineLine(results.machine)}`);
  push(
    `- **Target:** ${results.target.kind === "self-started" ? `started by the suite on a fresh data directory (workers: ${results.target.workers ?? "default = cores"})` : `running server at ${results.target.queryUrl} / ${results.target.ingestUrl}`}`,
  );
  push(`- **Profile:** ${results.options.profile}; ${formatDuration(results.wallSeconds)} in all; steps of ${results.options.warmupSeconds} s warm-up + ${results.options.durationSeconds} s measured`);
  const dataset = results.dataset;
  push(
    `- **Dataset:** ${formatCount(dataset.events)} events, ${formatCount(dataset.users)} users, ${dataset.days} days from ${dataset.startDate}, seed ${dataset.seed} — ${dataset.action}` +
      (dataset.loadSeconds === null ? "" : ` in ${dataset.loadSeconds.toFixed(1)} s (${formatCount(dataset.loadEventsPerSecond ?? Number.NaN)} events/s)`),
  );
  push(
    `- **Noise:** other processes used ${formatPercent(results.noise.othersCpuPercentMean)} of a core on average (max ${formatPercent(results.noise.othersCpuPercentMax)}) while steps ran; ` +
      `load average ${results.machine.loadAverageAtStart.join(" / ")} at start, ${results.noise.loadAverageAtEnd.join(" / ")} at the end`,
  );
  push("");
  if (results.warnings.length > 0) {
    push("> **Warnings**", ">");
    for (const warning of results.warnings) push(`> - ${warning}`);
    push("");
  }

  const headline = headlineRows(results);
  if (headline.length > 0) {
    push("## Headline", "");
    push(formatMarkdownTable(["what", "throughput", "latency", "beside its peer"], headline, [false, true, false, false]));
    push("");
  }

  if (results.ingest.length > 0) {
    push("## Ingest", "");
    push(
      "Closed loop: each connection sends its next request when the last one is answered, so events/s is the most the server did at that concurrency. " +
        "Open loop (a rate is shown): requests are due at fixed times and latency counts from when each was due. CPU columns are percent of one core.",
      "",
    );
    push(
      formatMarkdownTable(
        ["step", "server", "events/s", "req/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "errors", "generator CPU", "server CPU", "others"],
        results.ingest.map((run) => [
          ingestLabel(run),
          run.server,
          formatCount(run.eventsPerSecond),
          formatCount(run.requestsPerSecond),
          formatMs(run.latencyMs.p50),
          formatMs(run.latencyMs.p99),
          formatMs(run.latencyMs.p999),
          formatMs(run.latencyMs.max),
          errorsCell(run.errors, run.statusCounts),
          ...cpuCells(run.cpu),
        ]),
        [false, false],
      ),
    );
    chartLink("ingest-vs-ceiling.svg");
    chartLink("throughput-over-time.svg");
    push("");
  }

  if (results.queries.length > 0 || results.duckdb !== null) {
    push("## Queries", "");
    if (results.queries.length > 0) {
      push(
        formatMarkdownTable(
          ["query", "connections", "queries/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "errors", "generator CPU", "server CPU", "others"],
          results.queries.map((run) => [
            queryRunLabel(run) + (run.cachedShareEstimate > 0.01 ? ` (≈${formatPercent(run.cachedShareEstimate * 100)} may be cached)` : ""),
            String(run.connections),
            formatCount(run.requestsPerSecond),
            formatMs(run.latencyMs.p50),
            formatMs(run.latencyMs.p95),
            formatMs(run.latencyMs.p99),
            formatMs(run.latencyMs.max),
            errorsCell(run.errors, run.statusCounts),
            ...cpuCells(run.cpu),
          ]),
        ),
      );
      push("");
    }
    if (results.duckdb !== null) {
      const duckdb = results.duckdb;
      push(
        `DuckDB ${duckdb.version} in-process with ${duckdb.threads} threads on the same rows (loaded and sorted in ${duckdb.loadSeconds.toFixed(1)} s), one query at a time after a warm-up; ` +
          "\"answers\" says whether Eventide's answer to the same question was identical.",
        "",
      );
      push(
        formatMarkdownTable(
          ["query", "runs", "DuckDB p50 ms", "DuckDB p95 ms", "Eventide p50 ms", "Eventide ÷ DuckDB", "answers"],
          duckdb.runs.map((run) => {
            const eventide = firstConcurrencyRun(results.queries, run.query);
            return [
              queryLabels[run.query],
              String(run.runs),
              formatMs(run.latencyMs.p50),
              formatMs(run.latencyMs.p95),
              eventide === undefined ? "–" : formatMs(eventide.latencyMs.p50),
              eventide === undefined ? "–" : `${(eventide.latencyMs.p50 / run.latencyMs.p50).toFixed(2)}×`,
              run.answersMatch === null ? "not checked" : run.answersMatch ? "identical" : `DIFFER at ${run.difference ?? "?"}`,
            ];
          }),
          [false, true, true, true, true, true, false],
        ),
      );
      push("");
    }
    chartLink("query-latency.svg");
    chartLink("query-concurrency.svg");
    push("");
  }

  const clickhouse = measuredClickHouse(results);
  if (clickhouse !== null) {
    push("## ClickHouse store", "");
    push(
      `A private ClickHouse ${clickhouse.version} server and a second Eventide with \`EVENTIDE_STORE=clickhouse://…\`, on this machine beside the first. ` +
        `The dataset's ${formatCount(clickhouse.events)} rows were loaded into it with the loader that loaded the embedded store; ` +
        `"queryable" counts from the load's first request until ClickHouse held every row. ` +
        `Over the load and the forwarding its Eventide used ${formatPercent(clickhouse.cpu.eventidePercent)} and ClickHouse ${formatPercent(clickhouse.cpu.clickhousePercent)} of a core` +
        (clickhouse.cpu.othersPercent === undefined ? "." : `, other processes ${formatPercent(clickhouse.cpu.othersPercent)}.`),
      "",
    );
    push(formatMarkdownTable(["figure", "embedded store", "ClickHouse store", "ClickHouse ÷ embedded"], clickhouseStoreRows(clickhouse), [false, true, true, true]));
    push("");
    if (clickhouse.queries.length > 0) {
      push("Each query kind asked of both stores in turn, one request at a time, the same requests in the same order (which store goes first alternates); every pair of answers compared.", "");
      push(formatMarkdownTable(clickhouseQueryHeader, clickhouseQueryRows(clickhouse), [false, true, true, true, true, true, true, false]));
    }
    chartLink("clickhouse.svg");
    push("");
  }

  for (const [name, result] of [["Mixed", results.mixed], ["Soak", results.soak]] as const) {
    if (result === null) continue;
    push(`## ${name}`, "");
    push(
      `Ingest held an open-loop ${formatCount(result.ingest.targetEventsPerSecond)} events/s (batches of ${result.ingest.batchEvents}) for ${formatDuration(result.seconds)}: ` +
        `it achieved ${formatCount(result.ingest.eventsPerSecond)} events/s, p50 ${formatMs(result.ingest.latencyMs.p50)} ms, p99 ${formatMs(result.ingest.latencyMs.p99)} ms` +
        `${result.ingest.errors > 0 ? `, ${result.ingest.errors} errors` : ""}${result.ingest.timedOut > 0 ? `, ${result.ingest.timedOut} timed out` : ""}. ` +
        `Meanwhile ${result.queries.connections} connection(s) asked every query kind in turn (${result.queries.mode} loop): ` +
        `${formatCount(result.queries.requestsPerSecond)} queries/s, p50 ${formatMs(result.queries.latencyMs.p50)} ms, p95 ${formatMs(result.queries.latencyMs.p95)} ms, p99 ${formatMs(result.queries.latencyMs.p99)} ms.`,
      "",
    );
    push(
      formatMarkdownTable(
        ["query", "under load: p50 ms", "p95 ms", "p99 ms", "alone: p50 ms", "p99 ms", "p50 slowdown"],
        result.queries.byKind.map((kind) => [
          queryLabels[kind.query] + (kind.cachedShareEstimate > 0.01 ? ` (≈${formatPercent(kind.cachedShareEstimate * 100)} may be cached)` : ""),
          formatMs(kind.latencyMs.p50),
          formatMs(kind.latencyMs.p95),
          formatMs(kind.latencyMs.p99),
          kind.idleLatencyMs === null ? "–" : formatMs(kind.idleLatencyMs.p50),
          kind.idleLatencyMs === null ? "–" : formatMs(kind.idleLatencyMs.p99),
          kind.idleLatencyMs === null ? "–" : `${(kind.latencyMs.p50 / kind.idleLatencyMs.p50).toFixed(2)}×`,
        ]),
      ),
    );
    push("", `CPU: generators ${formatPercent(result.cpu.generatorPercent)}, server ${formatPercent(numberOrNaN(result.cpu.serverPercent))}, others ${formatPercent(result.cpu.othersPercent)} of one core.`);
    if (result === results.soak && results.soak !== null) {
      const summary = results.soak.summary;
      push(
        "",
        `Drift: ingest ${formatCount(summary.ingestEventsPerSecondFirst)} → ${formatCount(summary.ingestEventsPerSecondLast)} events/s and query p99 ` +
          `${formatMs(summary.queryP99MsFirst)} → ${formatMs(summary.queryP99MsLast)} ms from the first to the last tenth; server RSS ` +
          `${summary.rssMiBStart.toFixed(0)} → ${summary.rssMiBEnd.toFixed(0)} MiB (peak ${summary.rssMiBPeak.toFixed(0)}, slope ${summary.rssGrowthMiBPerMinute.toFixed(2)} MiB/min).`,
      );
      chartLink("soak.svg");
    }
    push("");
  }
  if (results.mixed !== null || results.soak !== null || results.ingest.length > 0 || results.queries.length > 0) chartLink("latency-percentiles.svg");

  push("", "## Server", "");
  const server = results.server;
  push(
    `- Peak RSS ${Number.isFinite(server.peakRssMiB) ? `${server.peakRssMiB.toFixed(0)} MiB` : "unknown"}; RSS at the end ${Number.isFinite(server.rssMiBAtEnd) ? `${server.rssMiBAtEnd.toFixed(0)} MiB` : "unknown"}.`,
  );
  if (server.diskBytes !== null) {
    push(`- ${formatBytes(server.diskBytes)} on disk for ${formatCount(server.acknowledgedEvents)} acknowledged events: ${server.diskBytesPerEvent?.toFixed(1) ?? "–"} B per event.`);
  }
  if (server.stopSeconds !== null) push(`- SIGTERM → exit ${server.stopExitCode ?? "?"} in ${server.stopSeconds.toFixed(1)} s.`);
  push("", "## What the figures mean", "", figureGlossary, "");
  return `${lines.join("\n")}\n`;
}

export const figureGlossary = [
  "- **events/s, req/s, queries/s** — answered with 2xx per second of the measured window (warm-up excluded). A batch's 200 counts all its events.",
  "- **p50 / p95 / p99 / p99.9 / max** — latency percentiles over every request of the window, from a log-linear histogram accurate to ~3 %. " +
    "Closed loop: from the moment the request was written. Open loop (a rate is given): from the moment it was *due*, so time spent waiting for a free connection while the server stalled counts (coordinated omission corrected); the service time from the actual send is in results.json.",
  "- **uWS ceiling** — a bare uWebSockets.js server that reads the body and JSON.parses it, nothing else: the most any Node ingest path can do on this machine. Eventide's share of it is what validation, the WAL and fsync cost.",
  "- **DuckDB** — the same seeded rows in an in-process DuckDB table sorted for the queries, asked the same questions one at a time; ratios above 1 mean Eventide is slower. Eventide's figure includes HTTP; DuckDB's does not.",
  "- **ClickHouse store** — a second Eventide whose store is a private ClickHouse server, loaded with the same rows by the same loader. Its 200 means the events are in its local outbox; they are forwarded to ClickHouse in large blocks, so the **visibility delay** (a single event's 200 until a trend query counts it) is about EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS plus the INSERT, against milliseconds in the embedded store. Ratios above 1 mean the ClickHouse store is slower.",
  "- **mixed** — query latency while ingest holds a steady open-loop rate, beside the same query alone; the slowdown is what ingest costs queries.",
  "- **soak** — the mixed load for longer, sampled per interval: a falling throughput, a climbing p99 or an RSS slope that does not flatten means something accumulates.",
  "- **generator CPU** — the load generator's own CPU (percent of one core). ⚠ means it neared a full core or fell behind its open-loop schedule: the generator, not the server, may have set the pace (try `--load-processes 2`).",
  "- **server CPU / others** — the server's threads, and everything else on the machine (other people's jobs): a high *others* means a noisy figure.",
].join("\n");

/** A notice that cannot be missed in a scrolling terminal. */
export function loudNotice(text: string): string {
  const rule = "!".repeat(78);
  return `${rule}\n!! ${text}\n${rule}`;
}

/** The short summary for the terminal at the end of a run. */
export function terminalSummary(results: SuiteResults): string {
  const rows = headlineRows(results);
  const parts = [`\n${machineLine(results.machine)}`];
  if (rows.length > 0) parts.push(formatTextTable(["what", "throughput", "latency", "beside its peer"], rows));
  const clickhouse = measuredClickHouse(results);
  if (clickhouse !== null) {
    const storeRows = clickhouseStoreRows(clickhouse);
    const queryRows = clickhouseQueryRows(clickhouse);
    parts.push(
      `ClickHouse store (ClickHouse ${clickhouse.version}) beside the embedded store, same ${formatCount(clickhouse.events)} rows:\n` +
        formatTextTable(["figure", "embedded store", "ClickHouse store", "ClickHouse ÷ embedded"], storeRows) +
        (queryRows.length === 0 ? "" : `\n\n${formatTextTable(clickhouseQueryHeader, queryRows)}`),
    );
  } else if (results.clickhouse !== undefined && results.clickhouse !== null && results.clickhouse.state !== "measured") {
    parts.push(loudNotice(`${results.clickhouse.state.toUpperCase()}: the clickhouse scenario — ${results.clickhouse.reason}`));
  }
  parts.push(`others used ${formatPercent(results.noise.othersCpuPercentMean)} of a core on average (max ${formatPercent(results.noise.othersCpuPercentMax)}) while steps ran`);
  if (results.warnings.length > 0) parts.push(`warnings:\n${results.warnings.map((warning) => `  - ${warning}`).join("\n")}`);
  return `${parts.join("\n\n")}\n`;
}
