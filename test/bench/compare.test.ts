/**
 * Compare mode: the change of every figure two runs share, judged by the
 * direction that is better for that figure, with small changes called noise,
 * and figures only one run has listed apart.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { compareFigures, compareResults, formatComparisonMarkdown, formatComparisonText, readResultsFile, ResultsFileError } from "../../bench/suite/compare.js";
import type { Figure } from "../../bench/suite/results.js";
import { sampleResults } from "./fixtures.js";

const figure = (key: string, value: number, better: Figure["better"], unit = "ms"): Figure => ({ key, label: key, value, unit, better });

describe("comparing figures", () => {
  const old = [figure("rate", 100, "higher", "events/s"), figure("p99", 10, "lower"), figure("steady", 50, "lower"), figure("gone", 1, "lower"), figure("zero", 0, "lower")];
  const next = [figure("rate", 80, "higher", "events/s"), figure("p99", 8, "lower"), figure("steady", 51, "lower"), figure("new", 2, "higher"), figure("zero", 0, "lower")];
  const comparison = compareFigures(old, next, 5);
  const byKey = new Map(comparison.changes.map((change) => [change.key, change]));

  it("call a lower rate worse and a lower latency better", () => {
    expect(byKey.get("rate")).toMatchObject({ old: 100, new: 80, changePercent: -20, verdict: "worse" });
    expect(byKey.get("p99")).toMatchObject({ changePercent: -20, verdict: "better" });
  });

  it("call changes inside the threshold noise, and an unchanged zero too", () => {
    expect(byKey.get("steady")).toMatchObject({ verdict: "noise" });
    expect(byKey.get("steady")!.changePercent).toBeCloseTo(2, 9);
    expect(byKey.get("zero")!.verdict).toBe("noise");
    expect(byKey.get("zero")!.changePercent).toBeNaN();
  });

  it("list figures only one run has", () => {
    expect(comparison.onlyOld.map((entry) => entry.key)).toEqual(["gone"]);
    expect(comparison.onlyNew.map((entry) => entry.key)).toEqual(["new"]);
  });

  it("print one row per shared figure with its change and verdict", () => {
    const text = formatComparisonText(comparison);
    expect(text).toContain("4 figures compared: 1 better, 1 worse, 2 within ±5 % (noise)");
    expect(text).toMatch(/rate\s+100 events\/s\s+80 events\/s\s+-20\.0 %\s+WORSE/);
    expect(text).toMatch(/p99\s+10\.0 ms\s+8\.00 ms\s+-20\.0 %\s+better/);
    expect(text).toContain("only in the old run: gone");
    expect(text).toContain("only in the new run: new");
    const markdown = formatComparisonMarkdown(comparison);
    expect(markdown).toContain("| rate | 100 events/s | 80 events/s | -20.0 % | WORSE |");
  });
});

describe("comparing two results files", () => {
  const directory = mkdtempSync(join(tmpdir(), "eventide-compare-"));
  afterAll(() => rmSync(directory, { recursive: true, force: true }));

  it("matches every figure of two runs of the same scenarios", () => {
    const before = sampleResults();
    const after = sampleResults((partial) => {
      partial.ingest[2] = { ...partial.ingest[2], eventsPerSecond: 160_000 };
    });
    writeFileSync(join(directory, "before.json"), JSON.stringify(before));
    writeFileSync(join(directory, "after.json"), JSON.stringify(after));
    const comparison = compareResults(readResultsFile(join(directory, "before.json")), readResultsFile(join(directory, "after.json")), 5);
    expect(comparison.onlyOld).toEqual([]);
    expect(comparison.onlyNew).toEqual([]);
    expect(comparison.changes).toHaveLength(before.figures.length);
    const changed = comparison.changes.filter((change) => change.verdict !== "noise").map((change) => [change.key, change.verdict]);
    // The rate went up, and so did its share of the ceiling.
    expect(changed).toEqual([
      ["ingest-batch/eventide/c16/events_per_s", "better"],
      ["ingest-batch/eventide/c16/share_of_ceiling", "better"],
    ]);
    expect(comparison.oldLabel).toContain("2026-01-02 03:04 (01234567)");
  });

  it("compares the ClickHouse store's figures, and lists them apart against a run from before the scenario existed", () => {
    const before = sampleResults();
    const after = sampleResults((partial) => {
      const clickhouse = partial.clickhouse!;
      if (clickhouse.state !== "measured") throw new Error("the fixture measures ClickHouse");
      partial.clickhouse = { ...clickhouse, visibility: { ...clickhouse.visibility, clickhouseMs: { ...clickhouse.visibility.clickhouseMs, p50: 600 } } };
    });
    const comparison = compareResults(before, after, 5);
    const changed = comparison.changes.filter((change) => change.verdict !== "noise").map((change) => [change.key, change.verdict, change.changePercent]);
    expect(changed).toEqual([["clickhouse/visibility/p50_ms", "better", -50]]);
    expect(comparison.changes.map((change) => change.key)).toEqual(expect.arrayContaining(["clickhouse/ingest/over_embedded", "clickhouse/trend/over_embedded", "clickhouse/forward/events_per_s"]));
    expect(formatComparisonText(comparison)).toMatch(/ClickHouse store: visibility delay p50 \(200 → counted\)\s+1200 ms\s+600 ms\s+-50\.0 %\s+better/);

    const fromBefore = sampleResults((partial) => {
      delete partial.clickhouse;
    });
    writeFileSync(join(directory, "from-before.json"), JSON.stringify(fromBefore));
    const across = compareResults(readResultsFile(join(directory, "from-before.json")), after, 5);
    expect(across.onlyOld).toEqual([]);
    expect(across.onlyNew.map((figure) => figure.key).every((key) => key.startsWith("clickhouse/"))).toBe(true);
    expect(across.onlyNew).toHaveLength(after.figures.filter((figure) => figure.key.startsWith("clickhouse/")).length);
    expect(across.changes).toHaveLength(fromBefore.figures.length);
  });

  it("refuses a file that is not a results file, saying why", () => {
    writeFileSync(join(directory, "other.json"), JSON.stringify({ benchmark: "ingest" }));
    writeFileSync(join(directory, "broken.json"), "{");
    expect(() => readResultsFile(join(directory, "other.json"))).toThrow(ResultsFileError);
    expect(() => readResultsFile(join(directory, "other.json"))).toThrow(/not a bench suite results file/);
    expect(() => readResultsFile(join(directory, "broken.json"))).toThrow(/cannot read/);
    expect(() => readResultsFile(join(directory, "missing.json"))).toThrow(/cannot read/);
  });
});
