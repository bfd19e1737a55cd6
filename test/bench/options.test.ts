/**
 * The suite's command line: profiles set every default, each option
 * overrides one, and a malformed invocation fails at once with a message that
 * names the option — before a long run starts.
 */
import { describe, expect, it } from "vitest";
import { parseSuiteOptions, profiles, SuiteUsageError, type SuiteOptions } from "../../bench/suite/options.js";
import { plannedSteps } from "../../bench/suite/scenarios.js";
import { CacheExposure, queryVariants } from "../../bench/suite/queries.js";

const parse = (...argv: string[]) => parseSuiteOptions(argv) as SuiteOptions;

describe("suite options", () => {
  it("default to the quick profile against a server the suite starts", () => {
    const options = parse();
    expect(options.profile).toBe("quick");
    expect(options.external).toBeNull();
    expect(options.scenarios).toEqual(["ingest-batch", "ingest-single", "ceiling", "queries", "duckdb", "clickhouse", "mixed", "soak"]);
    expect(options.batchConnections).toEqual(profiles.quick.batchConnections);
    expect(options.ingestRates).toEqual([0]);
  });

  it("plan about two minutes for quick (under a minute more with the ClickHouse store), a 10-minute soak in full, seconds for smoke", () => {
    expect(plannedSteps(parse("--skip", "clickhouse")).seconds).toBeGreaterThan(60);
    expect(plannedSteps(parse("--skip", "clickhouse")).seconds).toBeLessThan(180);
    expect(plannedSteps(parse()).seconds - plannedSteps(parse("--skip", "clickhouse")).seconds).toBeLessThan(60);
    expect(parse("--profile", "full").soak.seconds).toBe(600);
    expect(plannedSteps(parse("--profile", "full")).seconds).toBeGreaterThan(15 * 60);
    expect(plannedSteps(parse("--profile", "smoke", "--skip", "clickhouse")).seconds).toBeLessThan(40);
    expect(plannedSteps(parse("--profile", "smoke")).seconds - plannedSteps(parse("--profile", "smoke", "--skip", "clickhouse")).seconds).toBeLessThan(20);
  });

  it("take lists, rates (max = closed loop) and scenario selections", () => {
    const options = parse("--connections", "1,4,64", "--ingest-rate", "max,50000", "--query-rate", "20", "--scenarios", "soak,queries", "--queries", "trend,retention", "--soak-seconds", "90");
    expect(options.batchConnections).toEqual([1, 4, 64]);
    expect(options.ingestRates).toEqual([0, 50_000]);
    expect(options.queryRates).toEqual([20]);
    // The suite's order, whatever order they were given in.
    expect(options.scenarios).toEqual(["queries", "soak"]);
    expect(options.queries).toEqual(["trend", "retention"]);
    expect(options.soak.seconds).toBe(90);
    expect(parse("--skip", "soak,ceiling").scenarios).toEqual(["ingest-batch", "ingest-single", "queries", "duckdb", "clickhouse", "mixed"]);
    expect(parse("--events", "2_000_000").dataset.events).toBe(2_000_000);
  });

  it("take the ClickHouse store's query time and visibility samples, and plan its steps", () => {
    const options = parse("--scenarios", "clickhouse", "--clickhouse-seconds", "4", "--visibility-samples", "25", "--queries", "trend,retention");
    expect(options.scenarios).toEqual(["clickhouse"]);
    expect(options.clickhouse).toEqual({ secondsPerQuery: 4, visibilitySamples: 25 });
    expect(parse("--profile", "smoke").clickhouse).toEqual(profiles.smoke.clickhouse);
    // The dataset's 3 steps and, for the scenario, 7 plus one per query kind.
    expect(plannedSteps({ ...options, restartAfterLoad: false }).steps).toBe(3 + 7 + 2);
    expect(plannedSteps(options).seconds).toBeGreaterThan(25 * (1 + 0.3) + 2 * 4);
    expect(() => parseSuiteOptions(["--visibility-samples", "2.5"])).toThrow(/--visibility-samples/);
    expect(() => parseSuiteOptions(["--clickhouse-seconds", "0"])).toThrow(/--clickhouse-seconds/);
    expect(() => parseSuiteOptions(["--scenarios", "clickhouse", "--queries", ""])).toThrow(/--queries is empty/);
  });

  it("take a running server only with all four of its URLs and credentials", () => {
    const options = parse("--query-url", "http://10.0.0.5:8080", "--ingest-url", "http://10.0.0.5:8081", "--api-key", "ek_x", "--token", "et_y", "--server-pid", "123");
    expect(options.external).toEqual({ queryUrl: "http://10.0.0.5:8080", ingestUrl: "http://10.0.0.5:8081", apiKey: "ek_x", token: "et_y" });
    expect(options.serverPid).toBe(123);
    expect(() => parse("--query-url", "http://10.0.0.5:8080")).toThrow(/needs all of/);
    expect(() => parse("--query-url", "https://x", "--ingest-url", "http://y", "--api-key", "k", "--token", "t")).toThrow(/only http/);
  });

  it("refuse what cannot be right, naming the option", () => {
    const refused = (argv: string[], pattern: RegExp) => {
      expect(() => parseSuiteOptions(argv)).toThrow(SuiteUsageError);
      expect(() => parseSuiteOptions(argv)).toThrow(pattern);
    };
    refused(["--profile", "huge"], /--profile/);
    refused(["--connections", "4,x"], /--connections/);
    refused(["--duration-seconds", "0"], /--duration-seconds/);
    refused(["--scenarios", "ingest,queries"], /unknown "ingest"/);
    refused(["--batch-events", "5000"], /at most 1000/);
    refused(["--load", "sometimes"], /--load/);
    refused(["--start-date", "2024-13-01"], /--start-date/);
    refused(["--bogus"], /bogus/);
    refused(["stray"], /unexpected argument/);
    refused(["--compare", "a.json", "b.json", "c.json"], /one or two files/);
  });

  it("read --compare with one file (run, then compare) or two (compare only)", () => {
    expect(parse("--compare", "old.json").compare).toEqual(["old.json"]);
    expect(parse("--compare", "old.json", "new.json").compare).toEqual(["old.json", "new.json"]);
    expect(parseSuiteOptions(["--help"])).toEqual({ help: true });
  });
});

describe("the retention questions", () => {
  it("are thousands of distinct requests, so the 60 s answer cache rarely serves them", () => {
    const variants = queryVariants("retention", { events: 1, users: 1, days: 90, seed: 1, startDate: "2024-01-01" });
    expect(new Set(variants.map((variant) => variant.body)).size).toBe(variants.length);
    expect(variants.length).toBeGreaterThanOrEqual(2000);
    for (const variant of variants.slice(0, 50)) {
      const body = JSON.parse(variant.body) as { dateFrom: string; dateTo: string; windowDays: number };
      const days = (Date.parse(body.dateTo) - Date.parse(body.dateFrom)) / 86_400_000 + 1;
      expect(Math.ceil(days / body.windowDays)).toBeGreaterThanOrEqual(13);
      expect(Math.ceil(days / body.windowDays)).toBeLessThanOrEqual(14);
    }
  });

  it("are estimated as cached when the same question comes back within 60 s", () => {
    const exposure = new CacheExposure(100);
    // 50 questions over 10 s: all new.
    expect(exposure.record(50, 0, 10_000)).toBe(0);
    // 100 more within the minute: the lap wraps after 50, so the last 50 repeat the first ones.
    expect(exposure.record(100, 10_000, 20_000)).toBeCloseTo(0.5, 9);
    // Two minutes later nothing is cached any more.
    expect(exposure.record(100, 200_000, 210_000)).toBe(0);
  });
});
