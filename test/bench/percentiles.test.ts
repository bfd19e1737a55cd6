/**
 * The suite's percentiles: exact nearest-rank percentiles of small samples
 * (the DuckDB peer's timings) and the load generator's log-linear histogram,
 * which must stay within its stated ~3 % of the exact value on any
 * distribution, and merge across generator processes without loss.
 */
import { describe, expect, it } from "vitest";
import { LatencyHistogram, mergeLoadReports, summarizeLatency, type LoadReport } from "../../bench/load/http-load.js";
import { formatCount, formatDuration, formatMs, median, percentileOfSorted, summarizeSample } from "../../bench/runner/stats.js";
import { Random } from "../helpers/random.js";

describe("nearest-rank percentiles of a sample", () => {
  it("take the smallest value with at least p % of the sample at or below it", () => {
    const sorted = [1, 2, 3, 4];
    expect(percentileOfSorted(sorted, 50)).toBe(2);
    expect(percentileOfSorted(sorted, 51)).toBe(3);
    expect(percentileOfSorted(sorted, 75)).toBe(3);
    expect(percentileOfSorted(sorted, 99)).toBe(4);
    expect(percentileOfSorted(sorted, 100)).toBe(4);
    expect(percentileOfSorted(sorted, 0)).toBe(1);
  });

  it("give the p99 of 100 values as the 99th and the p99.9 as the largest", () => {
    const sorted = Array.from({ length: 100 }, (_, index) => index + 1);
    expect(percentileOfSorted(sorted, 99)).toBe(99);
    expect(percentileOfSorted(sorted, 99.9)).toBe(100);
  });

  it("are NaN for an empty sample and refuse a percentile outside [0, 100]", () => {
    expect(percentileOfSorted([], 50)).toBeNaN();
    expect(() => percentileOfSorted([1], 101)).toThrow();
    expect(() => percentileOfSorted([1], -1)).toThrow();
  });

  it("summarize an unsorted sample, ignoring non-finite values", () => {
    const summary = summarizeSample([5, 1, Number.NaN, 3, 2, 4, Number.POSITIVE_INFINITY]);
    expect(summary).toMatchObject({ p50: 3, p90: 5, p99: 5, max: 5, mean: 3 });
    expect(summarizeSample([]).p50).toBeNaN();
    expect(median([4, 1, 3, 2])).toBe(2.5);
  });
});

describe("the log-linear latency histogram", () => {
  const exact = (values: number[], percentile: number) => percentileOfSorted([...values].sort((left, right) => left - right), percentile);

  for (const [name, draw] of [
    ["log-normal latencies around 2 ms", (random: Random) => Math.round(2000 * Math.exp(random.next() * 3 - 1.5))],
    ["uniform latencies up to 10 s", (random: Random) => 1 + Math.floor(random.next() * 10_000_000)],
    ["a bimodal mix of fast answers and 500 ms stalls", (random: Random) => (random.next() < 0.97 ? 100 + Math.floor(random.next() * 400) : 500_000 + Math.floor(random.next() * 50_000))],
  ] as const) {
    it(`stays within 3.2 % of the exact percentiles for ${name}`, () => {
      const random = new Random(1234);
      const histogram = new LatencyHistogram();
      const values: number[] = [];
      for (let index = 0; index < 20_000; index += 1) {
        const value = draw(random);
        values.push(value);
        histogram.record(value);
      }
      for (const percentile of [1, 10, 50, 90, 95, 99, 99.9, 100]) {
        const truth = exact(values, percentile);
        const estimate = histogram.percentileMicroseconds(percentile);
        expect(Math.abs(estimate - truth) / truth, `p${percentile}: ${estimate} vs ${truth}`).toBeLessThanOrEqual(0.032);
      }
      expect(histogram.maxMicroseconds).toBe(Math.max(...values));
      expect(histogram.sumMicroseconds).toBe(values.reduce((sum, value) => sum + value, 0));
    });
  }

  it("is exact below 32 µs and never reports a percentile above the maximum", () => {
    const histogram = new LatencyHistogram();
    for (const value of [3, 7, 7, 31]) histogram.record(value);
    expect(histogram.percentileMicroseconds(50)).toBe(7);
    expect(histogram.percentileMicroseconds(100)).toBe(31);
    const single = new LatencyHistogram();
    single.record(1_000_003);
    expect(single.percentileMicroseconds(99)).toBeLessThanOrEqual(1_000_003);
  });

  it("maps every value to a bucket whose middle is within 3.2 %, buckets rising with values", () => {
    let previous = -1;
    for (let value = 1; value < 2 ** 31; value = Math.ceil(value * 1.013) + 1) {
      const bucket = LatencyHistogram.bucketOf(value);
      expect(bucket).toBeGreaterThanOrEqual(previous);
      previous = bucket;
      expect(Math.abs(LatencyHistogram.valueOf(bucket) - value) / value).toBeLessThanOrEqual(0.032);
    }
  });

  it("merges through its sparse form as if every value had gone into one histogram", () => {
    const random = new Random(99);
    const parts = [new LatencyHistogram(), new LatencyHistogram(), new LatencyHistogram()];
    const whole = new LatencyHistogram();
    for (let index = 0; index < 5000; index += 1) {
      const value = 1 + Math.floor(random.next() * random.next() * 200_000);
      parts[index % 3].record(value);
      whole.record(value);
    }
    const merged = LatencyHistogram.fromSparse(parts[0].toJSON());
    for (const part of parts.slice(1)) merged.addSparse(part.sparse(), part.sumMicroseconds, part.maxMicroseconds);
    expect(Array.from(merged.counts)).toEqual(Array.from(whole.counts));
    expect(summarizeLatency(merged)).toEqual(summarizeLatency(whole));
  });

  it("merges generator reports: counts and rates add, percentiles come from the merged histogram", () => {
    const report = (values: number[], okEvents: number, cpuPercent: number): LoadReport => {
      const histogram = new LatencyHistogram();
      for (const value of values) histogram.record(value);
      const summary = summarizeLatency(histogram);
      return {
        url: "http://x",
        mode: "closed",
        targetRate: null,
        processes: 1,
        connections: 4,
        warmupSeconds: 1,
        durationSeconds: 2,
        requests: values.length,
        okResponses: values.length,
        okEvents,
        allOkEvents: okEvents,
        statusCounts: { "200": values.length },
        sampleBodies: {},
        socketErrors: 0,
        reconnects: 0,
        protocolErrors: 0,
        timedOut: 0,
        backlogMax: 0,
        requestsPerSecond: values.length / 2,
        eventsPerSecond: okEvents / 2,
        bytesSentPerSecond: 0,
        latencyMs: summary,
        serviceLatencyMs: summary,
        schedulerLagMs: summarizeLatency(new LatencyHistogram()),
        histogram: histogram.toJSON(),
        byTag: { "/ingest": { requests: values.length, okResponses: values.length, okEvents, requestsPerSecond: values.length / 2, latencyMs: summary, histogram: histogram.toJSON() } },
        cpu: { userMs: 1, systemMs: 1, percentOfOneCore: cpuPercent, perProcessPercent: [cpuPercent] },
        saturated: cpuPercent > 85,
      };
    };
    const merged = mergeLoadReports([report([1000, 2000, 3000], 300, 40), report([100_000], 100, 90)]);
    expect(merged.requests).toBe(4);
    expect(merged.eventsPerSecond).toBe(200);
    expect(merged.connections).toBe(8);
    expect(merged.latencyMs.max).toBe(100);
    expect(merged.latencyMs.p50).toBeCloseTo(2, 1);
    expect(merged.byTag["/ingest"].requests).toBe(4);
    expect(merged.cpu.perProcessPercent).toEqual([40, 90]);
    expect(merged.saturated).toBe(true);
  });
});

describe("figures as people read them", () => {
  it("format counts, milliseconds and durations", () => {
    expect(formatCount(1_234_567)).toBe("1.23 M");
    expect(formatCount(12_345)).toBe("12.3 k");
    expect(formatCount(999)).toBe("999");
    expect(formatCount(Number.NaN)).toBe("–");
    expect(formatMs(0.1234)).toBe("0.123");
    expect(formatMs(12.34)).toBe("12.3");
    expect(formatMs(1234.5)).toBe("1235");
    expect(formatDuration(75)).toBe("1:15");
    expect(formatDuration(3725)).toBe("1:02:05");
  });
});
