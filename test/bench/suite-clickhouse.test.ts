/**
 * The suite's clickhouse scenario, run for real in smoke mode: a private
 * clickhouse-server and a second Eventide on it, the suite's dataset loaded
 * into both stores, the load and forwarding rates, the visibility delay and
 * the query table with every pair of answers compared — written to
 * results.json, report.md and the terminal. Without a binary the scenario is
 * skipped, and says so loudly; that path is tested on every machine by
 * pointing EVENTIDE_TEST_CLICKHOUSE_SERVER at a file that does not exist.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ClickHouseResult, SuiteResults } from "../../bench/suite/results.js";
import { clickhouseBinary, skipNotice } from "../helpers/clickhouse.js";
import { repoRoot } from "../helpers/server.js";

const suiteMain = join(repoRoot, "dist", "bench", "suite", "main.js");
const binary = clickhouseBinary();
if (binary === undefined) console.warn(skipNotice("the bench suite's clickhouse scenario in smoke mode"));

function run(args: string[], environment: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolveRun) => {
    execFile(process.execPath, [suiteMain, ...args], { cwd: repoRoot, env: { ...process.env, ...environment }, timeout: 240_000, maxBuffer: 16 * 2 ** 20 }, (error, stdout, stderr) => {
      resolveRun({ code: error ? (typeof error.code === "number" ? error.code : null) : 0, stdout, stderr });
    });
  });
}

const smallDataset = ["--events", "5000", "--users", "500", "--days", "7", "--queries", "trend,funnel-3,retention"];

describe.skipIf(binary === undefined)("the clickhouse scenario in smoke mode", () => {
  const directory = mkdtempSync(join(tmpdir(), "eventide-suite-clickhouse-"));
  let output = { code: null as number | null, stdout: "", stderr: "" };
  let results: SuiteResults;
  let clickhouse: Extract<ClickHouseResult, { state: "measured" }>;

  beforeAll(async () => {
    output = await run(["--profile", "smoke", "--scenarios", "clickhouse", ...smallDataset, "--out", directory]);
    if (output.code === 0) {
      results = JSON.parse(readFileSync(join(directory, "results.json"), "utf8")) as SuiteResults;
      if (results.clickhouse?.state === "measured") clickhouse = results.clickhouse;
    }
  }, 240_000);

  afterAll(() => rmSync(directory, { recursive: true, force: true }));

  it("starts ClickHouse and a second Eventide on it, and loads the same dataset into both stores", () => {
    expect(output.code, `${output.stdout}\n${output.stderr}`).toBe(0);
    expect(results.clickhouse, `${output.stdout}\n${results.warnings.join("\n")}`).toMatchObject({ state: "measured", events: 5000 });
    expect(output.stdout).toContain("load dataset into Eventide: 5 k events");
    expect(output.stdout).toMatch(/start ClickHouse \(a private clickhouse-server\): ClickHouse \d+\./);
    expect(output.stdout).toContain("EVENTIDE_STORE=clickhouse://127.0.0.1:");
    expect(output.stdout).toContain("load dataset into Eventide on ClickHouse: 5 k events");
    expect(results.dataset.action).toBe("loaded");
    expect(clickhouse.embeddedIngestEventsPerSecond).toBe(results.dataset.loadEventsPerSecond);
  });

  it("measures the load acknowledged, the forwarding until ClickHouse holds every row, and the visibility delay of both stores", () => {
    expect(clickhouse.ingest.eventsPerSecond).toBeGreaterThan(0);
    expect(clickhouse.ingest.retries).toBe(0);
    // Forwarding ends after the last 200, so it cannot be faster than the load.
    expect(clickhouse.forward.seconds).toBeGreaterThanOrEqual(clickhouse.ingest.seconds);
    expect(clickhouse.forward.eventsPerSecond).toBeGreaterThan(0);
    expect(clickhouse.visibility.samples).toBe(3);
    expect(clickhouse.visibility.clickhouseMs.p95).toBeGreaterThanOrEqual(clickhouse.visibility.clickhouseMs.p50);
    expect(clickhouse.visibility.embeddedMs.p50).toBeGreaterThan(0);
    // The rest of the machine was measured too, so the run's noise figures cover this scenario.
    expect(Number.isFinite(clickhouse.cpu.othersPercent)).toBe(true);
    expect(Number.isFinite(results.noise.othersCpuPercentMean)).toBe(true);
  });

  it("asks both stores the same queries and finds every answer identical", () => {
    expect(clickhouse.queries.map((entry) => entry.query)).toEqual(["trend", "funnel-3", "retention"]);
    for (const entry of clickhouse.queries) {
      expect(entry.runs, entry.query).toBeGreaterThanOrEqual(3);
      expect(entry.answersCompared).toBe(entry.runs + 1);
      expect(entry.answersDiffering, entry.difference).toBe(0);
      expect(entry.clickhouseMs.p50).toBeGreaterThan(0);
      expect(entry.embeddedMs.p50).toBeGreaterThan(0);
    }
    // A busy machine may add the noise warning; nothing else may warn.
    expect(results.warnings.filter((warning) => !warning.startsWith("other processes used"))).toEqual([]);
  });

  it("writes its figures to results.json, report.md and the terminal, and --compare matches them", async () => {
    const keys = results.figures.map((figure) => figure.key);
    for (const key of ["clickhouse/ingest/events_per_s", "clickhouse/ingest/over_embedded", "clickhouse/forward/events_per_s", "clickhouse/visibility/p50_ms", "clickhouse/visibility/p95_ms", "clickhouse/funnel-3/over_embedded"]) {
      expect(keys).toContain(key);
    }
    const report = readFileSync(join(directory, "report.md"), "utf8");
    expect(report).toContain("## ClickHouse store");
    expect(report).toContain("](charts/clickhouse.svg)");
    expect(report).toMatch(/\| retention, 13–14 periods \| \d+ \|.*\| \d+ identical \|/);
    expect(output.stdout).toContain(`ClickHouse store (ClickHouse ${clickhouse.version}) beside the embedded store, same 5 k rows:`);
    const file = join(directory, "results.json");
    const compared = await run(["--compare", file, file]);
    expect(compared.code, compared.stderr).toBe(0);
    expect(compared.stdout).toContain(`${results.figures.length} figures compared: 0 better, 0 worse, ${results.figures.length} within ±5 % (noise)`);
  });
});

describe("the clickhouse scenario without a clickhouse-server binary", () => {
  const directory = mkdtempSync(join(tmpdir(), "eventide-suite-no-clickhouse-"));
  const missing = join(directory, "no-clickhouse-server-here");
  let output = { code: null as number | null, stdout: "", stderr: "" };
  let results: SuiteResults;

  beforeAll(async () => {
    output = await run(["--profile", "smoke", "--scenarios", "clickhouse", ...smallDataset, "--out", directory], { EVENTIDE_TEST_CLICKHOUSE_SERVER: missing });
    if (output.code === 0) results = JSON.parse(readFileSync(join(directory, "results.json"), "utf8")) as SuiteResults;
  }, 120_000);

  afterAll(() => rmSync(directory, { recursive: true, force: true }));

  it("is skipped with a loud notice at the start and in the summary, and the run still succeeds", () => {
    expect(output.code, `${output.stdout}\n${output.stderr}`).toBe(0);
    const notice = `!! SKIPPED: the clickhouse scenario — EVENTIDE_TEST_CLICKHOUSE_SERVER names ${missing}, which does not exist`;
    // The summary follows the last step, the server's stop.
    const stop = output.stdout.lastIndexOf("stop Eventide (SIGTERM)");
    const [start, summary] = [output.stdout.slice(0, stop), output.stdout.slice(stop)];
    expect(start).toContain(`${"!".repeat(78)}\n${notice}\n${"!".repeat(78)}`);
    expect(summary).toContain(notice);
    // Nothing else was asked for, so no dataset was generated or loaded.
    expect(output.stdout).not.toContain("load dataset");
  });

  it("records the skip, with its reason, in results.json and report.md", () => {
    expect(results.clickhouse).toEqual({ state: "skipped", reason: `EVENTIDE_TEST_CLICKHOUSE_SERVER names ${missing}, which does not exist` });
    expect(results.options.scenarios).toEqual([]);
    expect(results.figures.filter((figure) => figure.key.startsWith("clickhouse/"))).toEqual([]);
    const report = readFileSync(join(directory, "report.md"), "utf8");
    expect(report).toContain(`SKIPPED: the clickhouse scenario — EVENTIDE_TEST_CLICKHOUSE_SERVER names ${missing}`);
    expect(report).toMatch(/\| ClickHouse store \| SKIPPED \|/);
  });
});
