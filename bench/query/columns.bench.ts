/**
 * SPEC §7 kernels without threads on the synthetic store of kernels.bench.ts
 * (2 M rows, 30 sealed days, 100 k users): the gathered-rows path
 * (event-rows.ts + trend-series.ts / retention-cohorts.ts) against the column
 * fast paths (trend-columns.ts, retention-columns.ts, retention-day-parts.ts), and the §4 kernel of
 * the same question without the §7 fields, on all users and on half of them.
 * Run: `npx tsc -p tsconfig.json && node dist/bench/query/columns.bench.js [name filter]`.
 */
import { Bench } from "tinybench";
import { retentionLayout, trendLayout, zonedRetentionBoundaries, zonedTrendBoundaries } from "../../src/query/buckets.js";
import { gatherEventRows, type GatherPlan } from "../../src/query/kernels/event-rows.js";
import { retentionColumns } from "../../src/query/kernels/retention-columns.js";
import { retentionCohorts } from "../../src/query/kernels/retention-cohorts.js";
import { retentionDayParts } from "../../src/query/kernels/retention-day-parts.js";
import { retentionPartial } from "../../src/query/kernels/retention.js";
import { trendColumns } from "../../src/query/kernels/trend-columns.js";
import { trendSeries } from "../../src/query/kernels/trend-series.js";
import { trendPartial } from "../../src/query/kernels/trend.js";
import { zoneClock } from "../../src/query/time-zone.js";
import { syntheticSegments, userCount } from "./kernels.bench.js";

const { segments } = syntheticSegments();
const pageView = 0;
const addToCart = 3;
const keyCountry = 1;
const keyAmount = 2;
const firstDate = "2024-03-01";
const lastDate = "2024-03-30";
const zone = zoneClock("America/New_York");

const trendDays = zonedTrendBoundaries(firstDate, lastDate, "day", zone, 10_000)!.startsMs;
const trendWeeksUtc = zonedTrendBoundaries(firstDate, lastDate, "week", zoneClock("UTC"), 10_000)!.startsMs;
const retentionPeriods = zonedRetentionBoundaries(firstDate, "2024-03-26", 2, zone).startsMs;

function gather(startsMs: Float64Array, references: GatherPlan["references"], breakdown: boolean, math: boolean): GatherPlan {
  return {
    fromMs: startsMs[0],
    toMsExclusive: startsMs[startsMs.length - 1],
    references,
    allEvents: false,
    breakdown: breakdown ? { kind: "key", keyId: keyCountry } : { kind: "none" },
    math: math ? { kind: "key", keyId: keyAmount } : { kind: "none" },
  };
}

const uniqueBreakdown = gather(trendDays, [{ eventId: pageView, filters: [] }], true, false);
const uniquePlan = { startsMs: trendDays, math: "unique" as const, breakdownLimit: 25 };
const sumGather = gather(trendWeeksUtc, [{ eventId: addToCart, filters: [] }], false, true);
const sumPlan = { startsMs: trendWeeksUtc, math: "sum" as const, breakdownLimit: undefined };
const retentionGather = gather(
  retentionPeriods,
  [
    { eventId: pageView, filters: [{ keyId: 0, op: "eq", value: "pro" }] },
    { eventId: pageView, filters: [] },
  ],
  true,
  false,
);
const retentionPlan = { startsMs: retentionPeriods, breakdownLimit: 25 };

const scenarios: Array<[string, (userLo: number, userHi: number) => unknown]> = [
  ["§4 trend unique day", (lo, hi) => trendPartial(segments, { eventId: pageView, layout: trendLayout(firstDate, lastDate, "day"), filters: [], math: "unique" }, lo, hi)],
  ["§7 trend unique tz+bd rows", (lo, hi) => trendSeries(gatherEventRows(segments, uniqueBreakdown, lo, hi), uniquePlan)],
  ["§7 trend unique tz+bd columns", (lo, hi) => trendColumns(segments, uniqueBreakdown, uniquePlan, lo, hi)],
  ["§4 trend total week", (lo, hi) => trendPartial(segments, { eventId: addToCart, layout: trendLayout(firstDate, lastDate, "week"), filters: [], math: "total" }, lo, hi)],
  ["§7 trend sum week rows", (lo, hi) => trendSeries(gatherEventRows(segments, sumGather, lo, hi), sumPlan)],
  ["§7 trend sum week columns", (lo, hi) => trendColumns(segments, sumGather, sumPlan, lo, hi)],
  ["§4 retention", (lo, hi) => retentionPartial(segments, { cohortEventId: pageView, retentionEventId: pageView, ...retentionLayout(firstDate, "2024-03-26", 2) }, lo, hi)],
  ["§7 retention bd+tz rows", (lo, hi) => retentionCohorts(gatherEventRows(segments, retentionGather, lo, hi), retentionPlan)],
  ["§7 retention bd+tz columns", (lo, hi) => retentionColumns(segments, retentionGather, retentionPlan, lo, hi)],
  ["§7 retention bd+tz day parts", (lo, hi) => retentionDayParts(segments, retentionGather, retentionPlan, lo, hi)],
];

const only = process.argv[2];
const bench = new Bench({ time: 1500, warmupTime: 300 });
for (const [name, run] of scenarios) {
  if (only !== undefined && !name.includes(only)) continue;
  bench.add(`${name} (all users)`, () => run(0, userCount));
  bench.add(`${name} (half)`, () => run(0, userCount / 2));
}
await bench.run();
console.table(bench.table());
