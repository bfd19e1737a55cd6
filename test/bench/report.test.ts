/**
 * Report and chart generation from a run's results: every chart is a
 * well-formed SVG document with the elements a reader needs (one line per
 * series, one bar per value, titles on hover, axis labels, text escaped),
 * scenarios that did not run leave no empty chart behind, and the Markdown
 * report links every chart and carries the machine, the noise and the
 * warnings.
 */
import { describe, expect, it } from "vitest";
import { buildCharts, buildMarkdown, headlineRows, terminalSummary } from "../../bench/suite/report.js";
import { collectFigures } from "../../bench/suite/results.js";
import { barChart, escapeXml, lineChart, linearAxis, logAxis, niceStep, svgDocument } from "../../bench/suite/svg.js";
import { findAll, parseXml, sampleResults } from "./fixtures.js";

describe("the SVG primitives", () => {
  it("pick 1-2-5 steps and axes that cover the data", () => {
    expect(niceStep(100, 5)).toBe(20);
    expect(niceStep(7, 5)).toBe(2);
    expect(niceStep(0.9, 5)).toBe(0.2);
    const axis = linearAxis([3, 97]);
    expect(axis.min).toBe(0);
    expect(axis.max).toBeGreaterThanOrEqual(97);
    expect(axis.ticks[0]).toBe(0);
    expect(axis.ticks.at(-1)).toBe(axis.max);
    const log = logAxis([0.3, 250]);
    expect(log.min).toBe(0.1);
    expect(log.max).toBe(1000);
    expect(log.ticks).toContain(1);
    expect(log.ticks).toContain(100);
    expect(linearAxis([]).max).toBe(1);
    expect(logAxis([0, -1, Number.NaN]).min).toBeLessThanOrEqual(1);
  });

  it("escape every markup character", () => {
    expect(escapeXml(`a<b>&"c"'`)).toBe("a&lt;b&gt;&amp;&quot;c&quot;&apos;");
  });

  it("draw a line chart as one polyline per unbroken run of each series, gaps where a value is missing", () => {
    const svg = svgDocument(
      [
        lineChart({
          title: "Throughput <over> time & more",
          xLabel: "seconds",
          yLabel: "events/s",
          series: [
            { name: "A", points: [[1, 10], [2, 20], [3, Number.NaN], [4, 40], [5, 50]] },
            { name: "B & C", points: [[1, 5], [2, 6]], dashed: true },
          ],
        }),
      ],
      "chart",
    );
    const root = parseXml(svg);
    expect(root.name).toBe("svg");
    expect(root.attributes.xmlns).toBe("http://www.w3.org/2000/svg");
    expect(findAll(root, (element) => element.name === "polyline")).toHaveLength(3);
    expect(findAll(root, (element) => element.name === "polyline" && element.attributes["stroke-dasharray"] !== undefined)).toHaveLength(1);
    expect(findAll(root, (element) => element.name === "circle")).toHaveLength(6);
    const texts = findAll(root, (element) => element.name === "text").map((element) => element.text);
    expect(texts).toContain("Throughput &lt;over&gt; time &amp; more");
    expect(texts).toContain("B &amp; C");
    expect(texts).toContain("seconds");
    expect(texts).toContain("events/s");
  });

  it("draw grouped bars, one per finite value, with the value in a hover title; log scale skips values ≤ 0", () => {
    const part = barChart({
      title: "Latency",
      categories: ["one", "two", "three"],
      series: [
        { name: "p50", values: [1, 2, 0] },
        { name: "p99", values: [10, Number.NaN, 30] },
      ],
      valueLabel: "ms",
      scale: "log",
    });
    const root = parseXml(svgDocument([part], "bars"));
    const bars = findAll(root, (element) => element.name === "rect" && element.attributes.class === "bar");
    expect(bars).toHaveLength(4);
    for (const bar of bars) {
      expect(Number(bar.attributes.height)).toBeGreaterThan(0);
      expect(findAll(bar, (element) => element.name === "title")).toHaveLength(1);
    }
    const horizontal = parseXml(svgDocument([barChart({ title: "h", categories: ["a long category name"], series: [{ name: "x", values: [5] }], valueLabel: "ms", orientation: "horizontal" })], "h"));
    const bar = findAll(horizontal, (element) => element.attributes.class === "bar")[0];
    expect(Number(bar.attributes.width)).toBeGreaterThan(0);
  });

  it("stack panels into one document whose height is their sum", () => {
    const part = lineChart({ title: "t", xLabel: "x", yLabel: "y", series: [{ name: "s", points: [[0, 1]] }], height: 200 });
    const root = parseXml(svgDocument([part, part, part], "three"));
    expect(root.attributes.height).toBe("600");
    expect(findAll(root, (element) => element.name === "g" && (element.attributes.transform ?? "").startsWith("translate(0 "))).toHaveLength(3);
  });
});

describe("the charts of a run", () => {
  const results = sampleResults();
  const charts = buildCharts(results);
  const byFile = new Map(charts.map((chart) => [chart.file, chart]));

  it("cover throughput over time, latency percentiles per scenario, query latency per kind, ingest beside its ceiling and the soak", () => {
    expect([...byFile.keys()].sort()).toEqual(
      ["clickhouse.svg", "ingest-vs-ceiling.svg", "latency-percentiles.svg", "query-concurrency.svg", "query-latency.svg", "soak.svg", "throughput-over-time.svg"].sort(),
    );
  });

  it("are all well-formed SVG with a title", () => {
    for (const chart of charts) {
      const root = parseXml(chart.svg);
      expect(root.name, chart.file).toBe("svg");
      expect(root.children[0].name).toBe("title");
      expect(Number(root.attributes.width)).toBeGreaterThan(0);
      expect(Number(root.attributes.height)).toBeGreaterThan(0);
    }
  });

  it("put Eventide beside DuckDB per query kind, and beside the ceiling per connection count", () => {
    const query = parseXml(byFile.get("query-latency.svg")!.svg);
    const legend = findAll(query, (element) => element.attributes.class === "legend")[0];
    const names = findAll(legend, (element) => element.name === "text").map((element) => element.text);
    expect(names).toEqual(["DuckDB p50", "Eventide p99 under ingest", "Eventide p99", "Eventide p50"]);
    // 3 kinds × 4 series.
    expect(findAll(query, (element) => element.attributes.class === "bar")).toHaveLength(12);
    const ingest = parseXml(byFile.get("ingest-vs-ceiling.svg")!.svg);
    // Batch: 2 connection counts × 2 servers; single: 1 × 2.
    expect(findAll(ingest, (element) => element.attributes.class === "bar")).toHaveLength(6);
  });

  it("draw the soak as throughput, queries, latency and memory panels", () => {
    const soak = parseXml(byFile.get("soak.svg")!.svg);
    const titles = findAll(soak, (element) => element.name === "text" && element.attributes["font-weight"] === "600").map((element) => element.text);
    expect(titles).toEqual(["Soak: throughput over time", "Soak: queries per second", "Soak: latency over time", "Soak: server memory (RSS)"]);
  });

  it("leave out what did not run", () => {
    const ingestOnly = buildCharts(
      sampleResults((partial) => {
        partial.queries = [];
        partial.duckdb = null;
        partial.clickhouse = null;
        partial.mixed = null;
        partial.soak = null;
      }),
    );
    expect(ingestOnly.map((chart) => chart.file).sort()).toEqual(["ingest-vs-ceiling.svg", "latency-percentiles.svg", "throughput-over-time.svg"]);
    const nothing = buildCharts(
      sampleResults((partial) => {
        partial.ingest = [];
        partial.queries = [];
        partial.duckdb = null;
        partial.clickhouse = null;
        partial.mixed = null;
        partial.soak = null;
      }),
    );
    expect(nothing).toEqual([]);
  });
});

describe("the Markdown report", () => {
  const results = sampleResults();
  const charts = buildCharts(results);
  const markdown = buildMarkdown(results, charts);

  it("states the machine, the target, the dataset and the noise first", () => {
    const head = markdown.split("## Headline")[0];
    expect(head).toContain("Test CPU <fast>");
    expect(head).toContain("2 cores, 8 GiB, Node v20.0.0");
    expect(head).toContain("Eventide 0123456789ab");
    expect(head).toContain("1 M events, 100 k users, 90 days");
    expect(head).toMatch(/other processes used 12 % of a core/);
    expect(head).toContain("a <warning> & more");
  });

  it("links every chart it made", () => {
    for (const chart of charts) expect(markdown).toContain(`](charts/${chart.file})`);
  });

  it("has a section per scenario and a glossary", () => {
    for (const heading of ["## Headline", "## Ingest", "## Queries", "## ClickHouse store", "## Mixed", "## Soak", "## Server", "## What the figures mean"]) expect(markdown).toContain(heading);
    expect(markdown).toContain("DIFFER at $.cohorts[0].total");
    expect(markdown).toMatch(/\| batch ×1000 c=16 \| eventide \| 140 k \|/);
  });

  it("heads with the best ingest rate beside its ceiling and each query kind beside DuckDB", () => {
    const rows = headlineRows(results);
    expect(rows[0][0]).toBe("batch ingest, best (c=16)");
    expect(rows[0][3]).toContain("24 % of the uWS ceiling");
    const trend = rows.find((row) => row[0].startsWith("trend"))!;
    expect(trend[3]).toMatch(/DuckDB p50 9\.00 ms/);
    expect(terminalSummary(results)).toContain("batch ingest, best (c=16)");
  });
});

describe("the figures of a run", () => {
  it("have unique keys, finite values and a direction", () => {
    const figures = collectFigures(sampleResults());
    const keys = figures.map((figure) => figure.key);
    expect(new Set(keys).size).toBe(keys.length);
    for (const figure of figures) {
      expect(Number.isFinite(figure.value), figure.key).toBe(true);
      expect(["higher", "lower"]).toContain(figure.better);
    }
    expect(keys).toContain("ingest-batch/eventide/c16/events_per_s");
    expect(keys).toContain("ingest-batch/eventide/c16/share_of_ceiling");
    expect(keys).toContain("query/funnel-5/c1/p99_ms");
    expect(keys).toContain("query/trend/eventide_over_duckdb");
    expect(keys).toContain("mixed/retention/p99_ms");
    expect(keys).toContain("soak/rss_growth_mib_per_min");
    for (const key of ["clickhouse/ingest/events_per_s", "clickhouse/ingest/over_embedded", "clickhouse/forward/events_per_s", "clickhouse/visibility/p50_ms", "clickhouse/visibility/p95_ms", "clickhouse/retention/over_embedded"]) {
      expect(keys).toContain(key);
    }
  });

  it("name open-loop runs by their rate, so they never match a closed-loop run", () => {
    const figures = collectFigures(
      sampleResults((partial) => {
        partial.ingest[0] = { ...partial.ingest[0], mode: "open", targetEventsPerSecond: 50_000, targetRequestsPerSecond: 50 };
      }),
    );
    expect(figures.map((figure) => figure.key)).toContain("ingest-batch/eventide/c4/r50000/events_per_s");
  });
});

describe("the ClickHouse store in a run's outputs", () => {
  const results = sampleResults();
  const markdown = buildMarkdown(results, buildCharts(results));
  const section = markdown.split("## ClickHouse store")[1].split("\n## ")[0];

  it("puts its load, queryable rate and visibility delay beside the embedded store's", () => {
    expect(section).toContain("ClickHouse 18.16.1");
    expect(section).toMatch(/\| dataset load, events\/s acknowledged[^|]* \| 154 k \| 125 k \| 0\.81× \|/);
    expect(section).toMatch(/\| events\/s until every row is counted by queries \| as acknowledged \| 100 k \(2\.0 s after the last 200\) \|/);
    expect(section).toMatch(/visibility delay[^|]*\| p50 2\.00 ms · p95 5\.00 ms \| p50 1200 ms · p95 3000 ms \|/);
    expect(section).toContain("its Eventide used 140 % and ClickHouse 45 % of a core, other processes 12 %.");
  });

  it("tables each query kind on both stores with the ratio and whether the answers were identical", () => {
    expect(section).toMatch(/\| trend \(total, by day\) \| 60 \| 4\.00 \| 10\.0 \| 12\.0 \| 30\.0 \| 3\.00× \| 61 identical \|/);
    expect(section).toMatch(/\| funnel, 5 steps[^|]* \| 8 \| 80\.0 \| 200 \| 60\.0 \| 150 \| 0\.75× \|/);
    expect(section).toContain("1 of 21 DIFFER: $.cohorts[3].retained[2]: 7 ≠ 8");
    expect(section).toContain("](charts/clickhouse.svg)");
    const chart = parseXml(buildCharts(results).find((entry) => entry.file === "clickhouse.svg")!.svg);
    // 3 kinds × 2 stores.
    expect(findAll(chart, (element) => element.attributes.class === "bar")).toHaveLength(6);
  });

  it("heads the report and the terminal summary with the same figures", () => {
    const rows = headlineRows(results);
    const load = rows.find((row) => row[0] === "ClickHouse store: dataset load")!;
    expect(load.slice(1)).toEqual(["125 k events/s", "queryable at 100 k events/s · visible after p50 1200 ms, p95 3000 ms", "embedded 154 k events/s (0.81×)"]);
    const queries = rows.find((row) => row[0].startsWith("ClickHouse store: 3 query kinds"))!;
    expect(queries[1]).toBe("1 ANSWERS DIFFER");
    expect(queries[3]).toBe("0.75×–5.00× the embedded p50");
    const terminal = terminalSummary(results);
    expect(terminal).toContain("ClickHouse store (ClickHouse 18.16.1) beside the embedded store, same 1 M rows:");
    expect(terminal).toMatch(/trend \(total, by day\)\s+60\s+4\.00\s+10\.0\s+12\.0\s+30\.0\s+3\.00×\s+61 identical/);
  });

  it("says loudly, everywhere, that the scenario was skipped and why", () => {
    const skipped = sampleResults((partial) => {
      partial.clickhouse = { state: "skipped", reason: "no clickhouse-server binary in /usr/bin" };
    });
    expect(terminalSummary(skipped)).toMatch(/!{78}\n!! SKIPPED: the clickhouse scenario — no clickhouse-server binary in \/usr\/bin\n!{78}/);
    expect(headlineRows(skipped)).toContainEqual(["ClickHouse store", "SKIPPED", "no clickhouse-server binary in /usr/bin", "–"]);
    expect(buildMarkdown(skipped, [])).not.toContain("## ClickHouse store");
    expect(collectFigures(skipped).filter((figure) => figure.key.startsWith("clickhouse/"))).toEqual([]);
  });

  it("leaves it out of a results file written before the scenario existed", () => {
    const old = sampleResults((partial) => {
      delete partial.clickhouse;
    });
    expect(buildCharts(old).map((chart) => chart.file)).not.toContain("clickhouse.svg");
    expect(buildMarkdown(old, [])).not.toContain("## ClickHouse store");
    expect(terminalSummary(old)).not.toContain("ClickHouse");
  });
});
