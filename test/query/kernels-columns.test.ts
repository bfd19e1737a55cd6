/**
 * The SPEC §7 column fast paths (trend-columns.ts, retention-columns.ts)
 * against the gathered-rows kernels they stand in for (trend-series.ts,
 * retention-cohorts.ts, themselves checked against the naive reference by
 * the HTTP differential suite), on seeded random data around clock changes:
 * sealed and active segments, several per day, zones with DST and odd
 * offsets, breakdown values of every kind with ties in rank, limits that
 * leave values out, every math, filters, and user shards. A case the fast
 * path does not cover (hourly buckets) must answer undefined.
 */
import { describe, expect, it } from "vitest";
import { dayMs, zonedRetentionBoundaries, zonedTrendBoundaries, type GroupBy } from "../../src/query/buckets.js";
import type { FilterPlan } from "../../src/query/filters.js";
import { gatherEventRows, type GatherPlan, type PropertyRead } from "../../src/query/kernels/event-rows.js";
import { retentionColumns } from "../../src/query/kernels/retention-columns.js";
import { retentionCohorts } from "../../src/query/kernels/retention-cohorts.js";
import { trendColumns } from "../../src/query/kernels/trend-columns.js";
import { trendSeries, type TrendSeriesAnswer } from "../../src/query/kernels/trend-series.js";
import type { TrendMath } from "../../src/query/schemas.js";
import type { SegmentView } from "../../src/query/segment-view.js";
import { zoneClock } from "../../src/query/time-zone.js";
import { activeSegment, sealedSegment, seededRandom, type SegmentInput } from "./kernels-fixtures.js";

type Random = () => number;
const integer = (random: Random, bound: number) => Math.floor(random() * bound);
const pick = <T>(random: Random, items: readonly T[]): T => items[integer(random, items.length)];

const zones = ["America/New_York", "Pacific/Chatham", "Asia/Kolkata", "Australia/Lord_Howe", "America/St_Johns", "UTC"];
/** First days of spans holding clock changes of the zones above. */
const firstDays = ["2024-03-07", "2024-04-04", "2024-09-26", "2024-10-31", "2024-11-01"];
/** Breakdown texts as the store keeps them: strings, numbers, booleans, objects; few of them, so ranks tie. */
const valueTexts = ["", "US", "FR", "1", "2.5", "true", "false", '{"a":1}', "[1]", "b", "B"];
const numberTexts = ["", "1", "2.5", "-3", "10", "abc", "1e400", "0"];
const keyValue = 0;
const keyNumber = 1;
const keyFilter = 2;
const mathsAll: TrendMath[] = ["total", "unique", "sum", "avg", "min", "max", "avg_per_user"];

interface Dataset {
  segments: SegmentView[];
  userCount: number;
  firstDay: string;
  dayCount: number;
}

function dataset(seed: number): Dataset {
  const random = seededRandom(seed);
  const firstDay = pick(random, firstDays);
  const firstDayMs = Date.parse(`${firstDay}T00:00:00Z`);
  const dayCount = 3 + integer(random, 8);
  const userCount = 20 + integer(random, 60);
  const segments: SegmentView[] = [];
  for (let day = -1; day <= dayCount; day++) {
    const pieces = 1 + integer(random, 3);
    for (let piece = 0; piece < pieces; piece++) {
      const rowCount = integer(random, 120);
      const input: SegmentInput = {
        dayStartMs: firstDayMs + day * dayMs,
        eventIds: Uint32Array.from({ length: rowCount }, () => integer(random, 3)),
        userIds: Uint32Array.from({ length: rowCount }, () => integer(random, userCount)),
        // Whole hours and minutes often, so rows sit on local boundaries and share instants.
        timeOffsetMs: Uint32Array.from({ length: rowCount }, () => (random() < 0.5 ? integer(random, 96) * 900_000 : integer(random, dayMs))),
        properties: [
          { keyId: keyValue, valueIds: Uint32Array.from({ length: rowCount }, () => integer(random, valueTexts.length)), texts: valueTexts },
          { keyId: keyNumber, valueIds: Uint32Array.from({ length: rowCount }, () => integer(random, numberTexts.length)), texts: numberTexts },
          { keyId: keyFilter, valueIds: Uint32Array.from({ length: rowCount }, () => integer(random, 3)), texts: ["", "x", "y"] },
        ],
      };
      const key = `s${seed}/${day}/${piece}`;
      segments.push(random() < 0.3 ? activeSegment(key, input, pick(random, [8, 16, 32] as const)) : sealedSegment(key, input, { bitmaps: true, eventRowStartPadding: integer(random, 2), valueIdWidth: pick(random, [8, 16, 32] as const) }));
    }
  }
  return { segments, userCount, firstDay, dayCount };
}

function addDays(date: string, days: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + days * dayMs).toISOString().slice(0, 10);
}

function randomFilters(random: Random): FilterPlan[] {
  return random() < 0.6 ? [] : [{ keyId: keyFilter, op: pick(random, ["eq", "neq"] as const), value: "x" }];
}

function randomBreakdown(random: Random): PropertyRead {
  return random() < 0.15 ? { kind: "key", keyId: undefined } : { kind: "key", keyId: random() < 0.15 ? 7 : keyValue };
}

function shardBounds(random: Random, userCount: number): number[] {
  const shardCount = 1 + integer(random, 3);
  return Array.from({ length: shardCount + 1 }, (_, shard) => Math.round((shard * userCount) / shardCount));
}

/** Sums and averages may differ in the last bits (rows added in another order). */
function expectTrendClose(actual: TrendSeriesAnswer, expected: TrendSeriesAnswer, context: string): void {
  const round = (values: ReadonlyArray<number | null>) => values.map((value) => (value === null ? null : Number(value.toPrecision(12))));
  const normal = (answer: TrendSeriesAnswer) => ({
    values: round(answer.values),
    series: answer.series?.map((one) => ({ value: one.value, values: round(one.values), weight: one.weight })),
    other: answer.other === undefined ? undefined : round(answer.other),
  });
  expect(normal(actual), context).toEqual(normal(expected));
}

const seeds = Array.from({ length: 60 }, (_, index) => 7_000 + index);
/** Users per block of the column scan: small ones, so a shard's users span many blocks (the default holds thousands). */
const blockSizes = [1, 2, 3, 7, 16, 10_000];

describe("the §7 trend fast path answers as the gathered rows do", () => {
  it.each(seeds)("seed %i", (seed) => {
    const data = dataset(seed);
    const random = seededRandom(seed * 31);
    for (let query = 0; query < 12; query++) {
      const groupBy = pick(random, ["day", "day", "week", "month", "hour"] as GroupBy[]);
      const zone = pick(random, zones);
      const dateFrom = addDays(data.firstDay, integer(random, 3) - 1);
      const dateTo = addDays(dateFrom, integer(random, data.dayCount + 1));
      const startsMs = zonedTrendBoundaries(dateFrom, dateTo, groupBy, zoneClock(zone), 10_000)!.startsMs;
      const math = pick(random, mathsAll);
      const breakdown = random() < 0.7;
      const gather: GatherPlan = {
        fromMs: startsMs[0],
        toMsExclusive: startsMs[startsMs.length - 1],
        references: [{ eventId: random() < 0.05 ? undefined : integer(random, 3), filters: randomFilters(random) }],
        allEvents: false,
        breakdown: breakdown ? randomBreakdown(random) : { kind: "none" },
        math: math === "total" || math === "unique" || math === "avg_per_user" ? { kind: "none" } : { kind: "key", keyId: random() < 0.1 ? keyValue : keyNumber },
      };
      const plan = { startsMs, math, breakdownLimit: breakdown ? pick(random, [1, 2, 3, 25]) : undefined };
      for (const [lo, hi] of pairs(shardBounds(random, data.userCount))) {
        const context = `seed ${seed} query ${query}: ${groupBy} in ${zone} ${dateFrom}…${dateTo}, ${math}, limit ${plan.breakdownLimit}, users [${lo}, ${hi})`;
        const blockUsers = pick(random, blockSizes);
        const fast = trendColumns(data.segments, gather, plan, lo, hi, blockUsers);
        if (groupBy === "hour") {
          expect(fast, context).toBeUndefined();
          continue;
        }
        expect(fast, context).toBeDefined();
        expectTrendClose(fast!, trendSeries(gatherEventRows(data.segments, gather, lo, hi), plan), context);
      }
    }
  });
});

describe("the §7 retention fast path answers as the gathered rows do", () => {
  it.each(seeds)("seed %i", (seed) => {
    const data = dataset(seed);
    const random = seededRandom(seed * 17);
    for (let query = 0; query < 10; query++) {
      const zone = pick(random, zones);
      const dateFrom = addDays(data.firstDay, integer(random, 3) - 1);
      const dateTo = addDays(dateFrom, integer(random, data.dayCount + 1));
      const startsMs = zonedRetentionBoundaries(dateFrom, dateTo, pick(random, [1, 1, 2, 3]), zoneClock(zone)).startsMs;
      const breakdown = random() < 0.7;
      const cohortEvent = integer(random, 3);
      const gather: GatherPlan = {
        fromMs: startsMs[0],
        toMsExclusive: startsMs[startsMs.length - 1],
        references: [
          { eventId: cohortEvent, filters: randomFilters(random) },
          { eventId: random() < 0.4 ? cohortEvent : integer(random, 3), filters: randomFilters(random) },
        ],
        allEvents: false,
        breakdown: breakdown ? randomBreakdown(random) : { kind: "none" },
        math: { kind: "none" },
      };
      const plan = { startsMs, breakdownLimit: breakdown ? pick(random, [1, 2, 3, 25]) : undefined };
      for (const [lo, hi] of pairs(shardBounds(random, data.userCount))) {
        const context = `seed ${seed} query ${query}: ${zone} ${dateFrom}…${dateTo}, limit ${plan.breakdownLimit}, users [${lo}, ${hi})`;
        const fast = retentionColumns(data.segments, gather, plan, lo, hi, pick(random, blockSizes));
        expect(fast, context).toBeDefined();
        expect(fast, context).toEqual(retentionCohorts(gatherEventRows(data.segments, gather, lo, hi), plan));
      }
    }
  });
});

function pairs(bounds: readonly number[]): Array<[number, number]> {
  return bounds.slice(1).map((hi, index) => [bounds[index], hi]);
}
