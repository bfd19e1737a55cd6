/**
 * One short real run of the suite, as `npm run bench` runs it: a real
 * Eventide started by the suite on a fresh data directory, the real load
 * generator processes, a tiny dataset and sub-second steps. Then the files it
 * wrote are checked, and the suite's --compare compares the run with itself.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SuiteResults } from "../../bench/suite/results.js";
import { repoRoot } from "../helpers/server.js";
import { parseXml } from "./fixtures.js";

const suiteMain = join(repoRoot, "dist", "bench", "suite", "main.js");

function run(script: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolveRun) => {
    execFile(process.execPath, [script, ...args], { cwd: repoRoot, timeout: 90_000, maxBuffer: 16 * 2 ** 20 }, (error, stdout, stderr) => {
      resolveRun({ code: error ? (typeof error.code === "number" ? error.code : null) : 0, stdout, stderr });
    });
  });
}

describe("a short real run of the bench suite", () => {
  const directory = mkdtempSync(join(tmpdir(), "eventide-suite-run-"));
  let output = { code: null as number | null, stdout: "", stderr: "" };
  let results: SuiteResults;

  beforeAll(async () => {
    output = await run(suiteMain, [
      "--profile", "smoke",
      // Mixed and soak share their code path; the soak also samples over time, so it stands for both.
      "--scenarios", "ingest-batch,queries,soak",
      "--queries", "trend,retention",
      "--events", "5000", "--users", "500", "--days", "7",
      "--connections", "2",
      "--concurrency", "1",
      "--duration-seconds", "0.6",
      "--warmup-seconds", "0.2",
      "--soak-seconds", "1", "--soak-ingest-rate", "1000", "--sample-seconds", "0.5",
      "--out", directory,
    ]);
    if (output.code === 0) results = JSON.parse(readFileSync(join(directory, "results.json"), "utf8")) as SuiteResults;
  }, 90_000);

  afterAll(() => rmSync(directory, { recursive: true, force: true }));

  it("finishes and says what runs while it runs", () => {
    expect(output.code, `${output.stdout}\n${output.stderr}`).toBe(0);
    expect(output.stdout).toContain("start Eventide on a fresh data directory");
    expect(output.stdout).toMatch(/\[\d+\/\d+ \d+:\d\d of ~\d+:\d\d\] query trend c=1/);
    expect(output.stdout).toContain("load dataset into Eventide: 5 k events");
    expect(output.stdout).toContain("restart Eventide (SIGTERM seals the loaded rows)");
    expect(output.stdout).toContain(`wrote ${join(directory, "results.json")}`);
  });

  it("writes every figure with the machine and the commit", () => {
    expect(results.format).toBe("eventide-bench-suite/1");
    expect(results.machine.cores).toBeGreaterThan(0);
    expect(results.machine.node).toBe(process.version);
    expect(results.machine.cpuModel).not.toBe("");
    expect(results.target.kind).toBe("self-started");
    expect(results.dataset).toMatchObject({ events: 5000, action: "loaded" });
    expect(results.figures.length).toBeGreaterThan(10);
    expect(Number.isFinite(results.noise.othersCpuPercentMean)).toBe(true);
  });

  it("measured ingest and queries without errors", () => {
    const [batch] = results.ingest;
    expect(batch).toMatchObject({ scenario: "ingest-batch", server: "eventide", connections: 2, mode: "closed", errors: 0 });
    expect(batch.eventsPerSecond).toBeGreaterThan(0);
    expect(batch.latencyMs.p99).toBeGreaterThanOrEqual(batch.latencyMs.p50);
    expect(Number.isFinite(batch.cpu.serverPercent)).toBe(true);
    expect(results.queries.map((run) => run.query)).toEqual(["trend", "retention"]);
    for (const run of results.queries) {
      expect(run.errors).toBe(0);
      expect(run.requestsPerSecond).toBeGreaterThan(0);
    }
  });

  it("held an open-loop ingest rate while queries ran, and sampled the soak over time", () => {
    const soak = results.soak!;
    expect(soak.ingest.targetEventsPerSecond).toBe(1000);
    expect(soak.ingest.eventsPerSecond).toBeGreaterThan(0);
    expect(soak.ingest.errors).toBe(0);
    expect(soak.queries.byKind.map((kind) => kind.query)).toEqual(["trend", "retention"]);
    expect(soak.queries.byKind[0].requests).toBeGreaterThan(0);
    expect(soak.queries.byKind[0].idleLatencyMs).not.toBeNull();
    expect(results.mixed).toBeNull();
    expect(soak.samples.length).toBeGreaterThanOrEqual(1);
    expect(results.soak!.samples[0].rssMiB).toBeGreaterThan(10);
    expect(results.server.stopExitCode).toBe(0);
    expect(results.server.acknowledgedEvents).toBeGreaterThan(5000);
  });

  it("writes a report that links well-formed charts", () => {
    const report = readFileSync(join(directory, "report.md"), "utf8");
    expect(report).toContain("## Ingest");
    expect(report).toContain("## Soak");
    const charts = readdirSync(join(directory, "charts"));
    expect(charts).toContain("throughput-over-time.svg");
    expect(charts).toContain("latency-percentiles.svg");
    expect(charts).toContain("query-latency.svg");
    for (const chart of charts) {
      expect(report).toContain(`charts/${chart}`);
      expect(parseXml(readFileSync(join(directory, "charts", chart), "utf8")).name).toBe("svg");
    }
  });

  it("compares the run with itself through --compare, every figure unchanged", async () => {
    const file = join(directory, "results.json");
    const compared = await run(suiteMain, ["--compare", file, file]);
    expect(compared.code, compared.stderr).toBe(0);
    const figures = results.figures.length;
    expect(compared.stdout).toContain(`${figures} figures compared: 0 better, 0 worse, ${figures} within ±5 % (noise)`);
  });

  it("answers --help with its usage and a bad option with exit code 2", async () => {
    const help = await run(suiteMain, ["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("npm run bench -- [options]");
    expect(help.stdout).toContain("--ingest-rate");
    const bad = await run(suiteMain, ["--profile", "huge"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--profile/);
  });
});
