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
import { afterAll, describe, expect, it } from "vitest";
import { dayMs, zonedDayStarts, zonedRetentionBoundaries, zonedTrendBoundaries, type GroupBy } from "../../src/query/buckets.js";
import type { FilterPlan } from "../../src/query/filters.js";
import { gatherEventRows, rowsByUserAndTime, type GatherPlan, type PropertyRead, type ReferencePlan } from "../../src/query/kernels/event-rows.js";
import { funnelChains } from "../../src/query/kernels/funnel-chains.js";
import { funnelRowsBody } from "../../src/query/query-service.js";
import type { FunnelRequest } from "../../src/query/schemas.js";
import { referenceFunnelV2, type FunnelQueryV2, type StoredEvent } from "../reference/reference-v2.js";
import { funnelColumns } from "../../src/query/kernels/funnel-columns.js";
import { retentionColumns } from "../../src/query/kernels/retention-columns.js";
import { retentionDayParts } from "../../src/query/kernels/retention-day-parts.js";
import { firstEventsFromPartsCounts } from "../../src/query/kernels/first-events.js";
import { valueOwnersCounts } from "../../src/query/kernels/value-owners.js";
import { retentionCohorts } from "../../src/query/kernels/retention-cohorts.js";
import { trendColumns, trendFromCountsOnly } from "../../src/query/kernels/trend-columns.js";
import { dayPartsFit, keptPartCount, setDayPartsBudget, trendDayParts } from "../../src/query/kernels/trend-day-parts.js";
import { dayParts } from "../../src/query/kernels/column-scan.js";
import { previousPartsCounts } from "../../src/query/kernels/previous-parts.js";
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

/**
 * `userStride` spreads user ids apart (id = n × stride) so that a shard spans many of a kernel's blocks of user ids.
 * `userValueShare`: the share of rows whose breakdown value (keyValue) is their user's own, as a country or a
 * browser is; the rest draw one at random, so a few users are seen with several values.
 */
function dataset(seed: number, activeShare = 0.3, userStride = 1, userValueShare = 0): Dataset {
  const random = seededRandom(seed);
  const firstDay = pick(random, firstDays);
  const firstDayMs = Date.parse(`${firstDay}T00:00:00Z`);
  const dayCount = 3 + integer(random, 8);
  const userCount = 20 + integer(random, 60);
  const userValues = userValueShare === 0 ? [] : Array.from({ length: userCount }, () => integer(random, valueTexts.length));
  const rowValue = userValueShare === 0 ? () => integer(random, valueTexts.length) : (user: number) => (random() < userValueShare ? userValues[user] : integer(random, valueTexts.length));
  const segments: SegmentView[] = [];
  for (let day = -1; day <= dayCount; day++) {
    const pieces = 1 + integer(random, 3);
    for (let piece = 0; piece < pieces; piece++) {
      const rowCount = integer(random, 120);
      const eventIds = Uint32Array.from({ length: rowCount }, () => integer(random, 3));
      const users = Uint32Array.from({ length: rowCount }, () => integer(random, userCount));
      const input: SegmentInput = {
        dayStartMs: firstDayMs + day * dayMs,
        eventIds,
        userIds: users.map((user) => user * userStride),
        // Whole hours and minutes often, so rows sit on local boundaries and share instants.
        timeOffsetMs: Uint32Array.from({ length: rowCount }, () => (random() < 0.5 ? integer(random, 96) * 900_000 : integer(random, dayMs))),
        properties: [
          { keyId: keyValue, valueIds: users.map(rowValue), texts: valueTexts },
          { keyId: keyNumber, valueIds: Uint32Array.from({ length: rowCount }, () => integer(random, numberTexts.length)), texts: numberTexts },
          { keyId: keyFilter, valueIds: Uint32Array.from({ length: rowCount }, () => integer(random, 3)), texts: ["", "x", "y"] },
        ],
      };
      // Kept parts are found by segment key: data drawn otherwise (another share of active segments, another id stride) needs keys of its own.
      const key = `s${seed}/${activeShare}/${userStride}/${userValueShare}/${day}/${piece}`;
      segments.push(random() < activeShare ? activeSegment(key, input, pick(random, [8, 16, 32] as const), random) : sealedSegment(key, input, { bitmaps: true, eventRowStartPadding: integer(random, 2), valueIdWidth: pick(random, [8, 16, 32] as const) }));
    }
  }
  return { segments, userCount: (userCount - 1) * userStride + 1, firstDay, dayCount };
}

function addDays(date: string, days: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + days * dayMs).toISOString().slice(0, 10);
}

/** A retention's gather over its periods: the cohort reference, then the returns'. */
function retentionGather(startsMs: Float64Array, cohort: ReferencePlan, returns: ReferencePlan, breakdown: PropertyRead): GatherPlan {
  return { fromMs: startsMs[0], toMsExclusive: startsMs[startsMs.length - 1], references: [cohort, returns], allEvents: false, breakdown, math: { kind: "none" } };
}

function randomFilters(random: Random): FilterPlan[] {
  return random() < 0.6 ? [] : [{ keyId: keyFilter, op: pick(random, ["eq", "neq"] as const), value: "x" }];
}

function randomBreakdown(random: Random): PropertyRead {
  return random() < 0.15 ? { kind: "key", keyId: undefined } : { kind: "key", keyId: random() < 0.15 ? 7 : keyValue };
}

/** A zone and a local date range starting up to a day before the data and reaching up to its end or past it. */
function randomRange(random: Random, data: Dataset): { zone: string; dateFrom: string; dateTo: string } {
  const zone = pick(random, zones);
  const dateFrom = addDays(data.firstDay, integer(random, 3) - 1);
  const dateTo = addDays(dateFrom, integer(random, data.dayCount + 1));
  return { zone, dateFrom, dateTo };
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
      const { zone, dateFrom, dateTo } = randomRange(random, data);
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

/** A sum, average, minimum or maximum of one event without filters or breakdown, in UTC with probability `utcShare`. */
function numericMathQuery(random: Random, data: Dataset, utcShare: number) {
  const groupBy = pick(random, ["day", "week", "month"] as GroupBy[]);
  const { zone, dateFrom, dateTo } = random() < utcShare ? { ...randomRange(random, data), zone: "UTC" } : randomRange(random, data);
  const startsMs = zonedTrendBoundaries(dateFrom, dateTo, groupBy, zoneClock(zone), 10_000)!.startsMs;
  const math = pick(random, ["sum", "avg", "min", "max"] as TrendMath[]);
  const gather: GatherPlan = {
    fromMs: startsMs[0],
    toMsExclusive: startsMs[startsMs.length - 1],
    references: [{ eventId: integer(random, 3), filters: [] }],
    allEvents: false,
    breakdown: { kind: "none" },
    math: { kind: "key", keyId: random() < 0.1 ? 7 : keyNumber },
  };
  return { groupBy, zone, dateFrom, dateTo, math, gather, plan: { startsMs, math, breakdownLimit: undefined } };
}

describe("a §7 sum, average or extreme from value counts answers as the gathered rows do", () => {
  it.each(seeds)("seed %i", (seed) => {
    const data = dataset(seed);
    const random = seededRandom(seed * 41);
    for (let query = 0; query < 10; query++) {
      // UTC half the time: every day whole in one bucket, sealed ones from their columns' counts, active ones from their index's.
      const { groupBy, zone, dateFrom, dateTo, math, gather, plan } = numericMathQuery(random, data, 0.5);
      // One task over every user half the time: active days count only then.
      const bounds = random() < 0.5 ? [0, data.userCount] : shardBounds(random, data.userCount);
      for (const [lo, hi] of pairs(bounds)) {
        const context = `seed ${seed} query ${query}: ${groupBy} in ${zone} ${dateFrom}…${dateTo}, ${math}, users [${lo}, ${hi})`;
        const fast = trendColumns(data.segments, gather, plan, lo, hi);
        expect(fast, context).toBeDefined();
        const rows = trendSeries(gatherEventRows(data.segments, gather, lo, hi), plan);
        expectTrendClose(fast!, rows, context);
        // Asked again: sealed days now answer from the totals kept per column and range.
        expectTrendClose(trendColumns(data.segments, gather, plan, lo, hi)!, rows, `${context}, asked again`);

      }
    }
  });
});

/**
 * Whether a breakdown is left to the row scan: over the segments (with rows)
 * whose day meets the buckets, the event's active rows outnumber its sealed
 * ones, or the days hold more than two segments each on average.
 */
function breakdownLeftToScan(segments: readonly SegmentView[], eventId: number, startsMs: Float64Array): boolean {
  let sealed = 0;
  let active = 0;
  const days = new Set<number>();
  let count = 0;
  for (const segment of segments) {
    if (segment.rowCount === 0 || startsMs[0] >= segment.dayStartMs + dayMs || startsMs[startsMs.length - 1] <= segment.dayStartMs) continue;
    days.add(segment.dayStartMs);
    count++;
    const starts = segment.eventRowStart;
    if (starts !== undefined) sealed += eventId + 1 < starts.length ? starts[eventId + 1] - starts[eventId] : 0;
    else active += segment.eventRows(eventId)?.length ?? 0;
  }
  return active > sealed || count > 2 * days.size;
}

let answeredWithBreakdown = 0;
let answeredByScan = 0;

describe("a §7 total or unique of one event in a zone, from kept day parts, answers as the gathered rows do", () => {
  afterAll(() => {
    // Both sides of the rule were exercised.
    expect(answeredWithBreakdown).toBeGreaterThan(50);
    expect(answeredByScan).toBeGreaterThan(5);
  });

  it.each(seeds)("seed %i", (seed) => {
    const data = dataset(seed);
    const random = seededRandom(seed * 43);
    for (let query = 0; query < 12; query++) {
      const groupBy = pick(random, ["day", "day", "week", "month", "hour"] as GroupBy[]);
      const { zone, dateFrom, dateTo } = randomRange(random, data);
      const startsMs = zonedTrendBoundaries(dateFrom, dateTo, groupBy, zoneClock(zone), 10_000)!.startsMs;
      const math = pick(random, ["total", "unique"] as TrendMath[]);
      const breakdown = random() < 0.5;
      const gather: GatherPlan = {
        fromMs: startsMs[0],
        toMsExclusive: startsMs[startsMs.length - 1],
        references: [{ eventId: random() < 0.05 ? undefined : integer(random, 3), filters: [] }],
        allEvents: false,
        breakdown: breakdown ? randomBreakdown(random) : { kind: "none" },
        math: { kind: "none" },
      };
      const plan = { startsMs, math, breakdownLimit: breakdown ? pick(random, [1, 2, 3, 25]) : undefined };
      // One task over every user half the time: sealed totals then come from the kept counts.
      const bounds = random() < 0.5 ? [0, data.userCount] : shardBounds(random, data.userCount);
      for (const [lo, hi] of pairs(bounds)) {
        const context = `seed ${seed} query ${query}: ${groupBy} in ${zone} ${dateFrom}…${dateTo}, ${math}, limit ${plan.breakdownLimit}, users [${lo}, ${hi})`;
        const fast = trendDayParts(data.segments, gather, plan, lo, hi);
        // A breakdown is left to the row scan over mostly active rows or many segments a day.
        const eventId = gather.references[0].eventId;
        const leftToScan = breakdown && eventId !== undefined && breakdownLeftToScan(data.segments, eventId, startsMs);
        expect(fast !== undefined, context).toBe(data.segments.every((segment) => dayPartsFit(dayParts(startsMs, segment.dayStartMs).length)) && !leftToScan);
        if (leftToScan) {
          answeredByScan++;
          continue;
        }
        if (breakdown && fast !== undefined) answeredWithBreakdown++;
        if (groupBy === "hour") {
          expect(fast, context).toBeUndefined();
          continue;
        }
        expect(fast, context).toBeDefined();
        const rows = trendSeries(gatherEventRows(data.segments, gather, lo, hi), plan);
        expectTrendClose(fast!, rows, context);
        // Asked again: sealed parts now answer from what was kept.
        expectTrendClose(trendDayParts(data.segments, gather, plan, lo, hi)!, rows, `${context}, asked again`);
      }
    }
  });

  it("answers undefined for any other shape", () => {
    const data = dataset(7_000);
    const startsMs = zonedTrendBoundaries(data.firstDay, addDays(data.firstDay, 2), "day", zoneClock("America/New_York"), 10_000)!.startsMs;
    const gather: GatherPlan = { fromMs: startsMs[0], toMsExclusive: startsMs[startsMs.length - 1], references: [{ eventId: 0, filters: [] }], allEvents: false, breakdown: { kind: "none" }, math: { kind: "none" } };
    const plan = { startsMs, math: "unique" as TrendMath, breakdownLimit: undefined };
    expect(trendDayParts(data.segments, gather, plan, 0, data.userCount)).toBeDefined();
    expect(trendDayParts(data.segments, { ...gather, references: [{ eventId: 0, filters: [{ keyId: keyFilter, op: "eq", value: "x" }] }] }, plan, 0, data.userCount)).toBeUndefined();
    expect(trendDayParts(data.segments, { ...gather, breakdown: { kind: "key", keyId: keyValue } }, { ...plan, breakdownLimit: 3 }, 0, data.userCount)).toBeDefined();
    expect(trendDayParts(data.segments, { ...gather, breakdown: { kind: "key", keyId: keyValue } }, plan, 0, data.userCount)).toBeUndefined();
    expect(trendDayParts(data.segments, gather, { ...plan, math: "avg_per_user" }, 0, data.userCount)).toBeUndefined();
    expect(trendDayParts(data.segments, { ...gather, math: { kind: "key", keyId: keyNumber } }, { ...plan, math: "sum" }, 0, data.userCount)).toBeUndefined();
    expect(trendDayParts(data.segments, { ...gather, allEvents: true }, plan, 0, data.userCount)).toBeUndefined();
  });
});

describe("a §7 unique trend from an index of previous parts (asked again, a narrower range, coarser buckets) answers as the gathered rows do", () => {
  const answeredBefore = previousPartsCounts.answered;
  afterAll(() => {
    // The index answered, with and without a breakdown.
    expect(previousPartsCounts.answered - answeredBefore).toBeGreaterThan(150);
  });

  // Seeds of their own: kept parts are keyed by segment key, and other tests build other rows under theirs.
  it.each(Array.from({ length: 40 }, (_, index) => 9_100 + index))("seed %i", (seed) => {
    const data = dataset(seed, 0);
    const random = seededRandom(seed * 59);
    for (let query = 0; query < 4; query++) {
      const { zone, dateFrom, dateTo } = randomRange(random, data);
      const breakdown = random() < 0.7;
      const eventId = integer(random, 3);
      const breakdownLimit = breakdown ? pick(random, [1, 2, 3, 25]) : undefined;
      const narrowFrom = addDays(dateFrom, integer(random, 2));
      const narrowTo = narrowFrom < dateTo ? addDays(dateTo, -integer(random, 2)) : dateTo;
      const asks: Array<[string, string, GroupBy]> = [
        [dateFrom, dateTo, "day"],
        [dateFrom, dateTo, "day"],
        [dateFrom, dateTo, "day"],
        [narrowFrom, narrowTo < narrowFrom ? narrowFrom : narrowTo, "day"],
        [dateFrom, dateTo, "week"],
        [dateFrom, dateTo, "week"],
        [dateFrom, dateTo, "month"],
        [dateFrom, dateTo, "month"],
      ];
      for (const [from, to, groupBy] of asks) {
        const startsMs = zonedTrendBoundaries(from, to, groupBy, zoneClock(zone), 10_000)!.startsMs;
        const gather: GatherPlan = {
          fromMs: startsMs[0],
          toMsExclusive: startsMs[startsMs.length - 1],
          references: [{ eventId, filters: [] }],
          allEvents: false,
          breakdown: breakdown ? randomBreakdown(random) : { kind: "none" },
          math: { kind: "none" },
        };
        const plan = { startsMs, math: "unique" as TrendMath, breakdownLimit };
        const context = `seed ${seed} query ${query}: ${groupBy} in ${zone} ${from}…${to}, limit ${breakdownLimit}`;
        const fast = trendDayParts(data.segments, gather, plan, 0, data.userCount);
        if (breakdown && breakdownLeftToScan(data.segments, eventId, startsMs)) {
          expect(fast, context).toBeUndefined();
          continue;
        }
        expect(fast, context).toBeDefined();
        expectTrendClose(fast!, trendSeries(gatherEventRows(data.segments, gather, 0, data.userCount), plan), context);
        if (groupBy !== "day" || from !== dateFrom) continue;
        // A segment gone from the middle (as a deletion rewrites one): the index's parts are no longer one run.
        const middle = data.segments.filter((segment) => segment.dayStartMs > startsMs[0] && segment.dayStartMs + dayMs < startsMs[startsMs.length - 1]);
        if (middle.length === 0) continue;
        const gone = middle[integer(random, middle.length)];
        const rest = data.segments.filter((segment) => segment !== gone);
        const without = trendDayParts(rest, gather, plan, 0, data.userCount);
        if (without !== undefined) expectTrendClose(without, trendSeries(gatherEventRows(rest, gather, 0, data.userCount), plan), `${context}, without ${gone.key}`);
      }
    }
  });
});

describe("an index of previous parts is not built for nothing", () => {
  const firstMs = Date.parse("2024-03-01T00:00:00Z");
  const startsMs = zonedTrendBoundaries("2024-03-01", "2024-03-05", "day", zoneClock("America/New_York"), 10_000)!.startsMs;
  const days = (texts: string[], key: string) =>
    Array.from({ length: 7 }, (_, day) => {
      const rowCount = 400;
      return sealedSegment(`${key}/${day}`, {
        dayStartMs: firstMs + (day - 1) * dayMs,
        eventIds: Uint32Array.from({ length: rowCount }, (_, row) => row % 2),
        userIds: Uint32Array.from({ length: rowCount }, (_, row) => (row * 7 + day) % 150),
        timeOffsetMs: Uint32Array.from({ length: rowCount }, (_, row) => (row * 3_600_017) % dayMs),
        properties: [{ keyId: keyValue, valueIds: Uint32Array.from({ length: rowCount }, (_, row) => 1 + ((row * 13 + day * 977) % (texts.length - 1))), texts }],
      }, { bitmaps: true, eventRowStartPadding: 0, valueIdWidth: 32 });
    });
  const ask = (segments: SegmentView[], eventId: number, breakdown: boolean) => {
    const gather: GatherPlan = { fromMs: startsMs[0], toMsExclusive: startsMs[startsMs.length - 1], references: [{ eventId, filters: [] }], allEvents: false, breakdown: breakdown ? { kind: "key", keyId: keyValue } : { kind: "none" }, math: { kind: "none" } };
    const plan = { startsMs, math: "unique" as TrendMath, breakdownLimit: breakdown ? 25 : undefined };
    return { fast: trendDayParts(segments, gather, plan, 0, 150), rows: () => trendSeries(gatherEventRows(segments, gather, 0, 150), plan) };
  };

  it("over a property of more texts than a breakdown takes here: the row scan answers, no parts are read", () => {
    const segments = days(["", ...Array.from({ length: 5_000 }, (_, text) => `t${text}`)], "wide");
    const built = previousPartsCounts.built;
    const parts = keptPartCount();
    for (let time = 0; time < 3; time++) expect(ask(segments, 0, true).fast).toBeUndefined();
    expect(previousPartsCounts.built).toBe(built);
    expect(keptPartCount()).toBe(parts);
  });

  it("over an event without rows in the range: answered, and no index", () => {
    const segments = days(["", "a", "b", "c"], "empty");
    const built = previousPartsCounts.built;
    for (let time = 0; time < 3; time++) {
      for (const breakdown of [false, true]) {
        const { fast, rows } = ask(segments, 2, breakdown);
        expectTrendClose(fast!, rows(), `event without rows, breakdown ${breakdown}`);
      }
    }
    expect(previousPartsCounts.built).toBe(built);
    // Over an event with rows, settled days: built at once.
    const { fast, rows } = ask(segments, 0, true);
    expectTrendClose(fast!, rows(), "event with rows");
    expect(previousPartsCounts.built).toBe(built + 2);
  });
});

describe("a dashboard's breakdowns by many properties keep their indexes", () => {
  // A dashboard refreshes a dozen trends, each by its own property: four kept indexes were rebuilt on every refresh.
  const propertyCount = 10;
  const firstMs = Date.parse("2024-05-01T00:00:00Z");
  const startsMs = zonedTrendBoundaries("2024-05-01", "2024-05-05", "day", zoneClock("Asia/Kolkata"), 10_000)!.startsMs;
  const texts = ["", "a", "b", "c", "d"];
  const segments = Array.from({ length: 7 }, (_, day) => {
    const rowCount = 300;
    return sealedSegment(`dashboard/${day}`, {
      dayStartMs: firstMs + (day - 1) * dayMs,
      eventIds: Uint32Array.from({ length: rowCount }, (_, row) => row % 2),
      userIds: Uint32Array.from({ length: rowCount }, (_, row) => (row * 11 + day) % 120),
      timeOffsetMs: Uint32Array.from({ length: rowCount }, (_, row) => (row * 3_600_017) % dayMs),
      properties: Array.from({ length: propertyCount }, (_, keyId) => ({ keyId, valueIds: Uint32Array.from({ length: rowCount }, (_, row) => (row * (keyId + 3) + day) % texts.length), texts })),
    }, { bitmaps: true, eventRowStartPadding: 0, valueIdWidth: 32 });
  });

  it("asked again in turn, every breakdown and event is answered by the index built the first time", () => {
    const ask = (eventId: number, keyId: number) => {
      const gather: GatherPlan = { fromMs: startsMs[0], toMsExclusive: startsMs[startsMs.length - 1], references: [{ eventId, filters: [] }], allEvents: false, breakdown: { kind: "key", keyId }, math: { kind: "none" } };
      const plan = { startsMs, math: "unique" as TrendMath, breakdownLimit: 3 };
      expectTrendClose(trendDayParts(segments, gather, plan, 0, 120)!, trendSeries(gatherEventRows(segments, gather, 0, 120), plan), `event ${eventId} by key ${keyId}`);
    };
    const built = previousPartsCounts.built;
    for (let round = 0; round < 3; round++) for (let keyId = 0; keyId < propertyCount; keyId++) for (const eventId of [0, 1]) ask(eventId, keyId);
    // Per event, one index per property and one of its users without breakdown (the ranks' whole).
    expect(previousPartsCounts.built - built).toBe(2 * (propertyCount + 1));
  });
});

describe("a §7 sum, average or extreme from value counts alone (the main thread's answer) is right, or declined", () => {
  it.each(seeds)("seed %i", (seed) => {
    // Every segment sealed: the only shape the query service asks this of.
    const data = dataset(seed, 0);
    const random = seededRandom(seed * 47);
    for (let query = 0; query < 6; query++) {
      const { groupBy, zone, dateFrom, dateTo, math, gather, plan } = numericMathQuery(random, data, 0.7);
      const utc = zone === "UTC";
      const context = `seed ${seed} query ${query}: ${groupBy} in ${zone} ${dateFrom}…${dateTo}, ${math}`;
      const rows = trendSeries(gatherEventRows(data.segments, gather, 0, data.userCount), plan);
      // Before any index of these columns exists it builds none, so it declines where a column has rows to count.
      const before = trendFromCountsOnly(data.segments, gather, plan, 0, data.userCount);
      if (before !== undefined) expectTrendClose(before, rows, `${context}, before any index`);
      trendColumns(data.segments, gather, plan, 0, data.userCount);
      const after = trendFromCountsOnly(data.segments, gather, plan, 0, data.userCount);
      // Whole UTC days, their indexes built: answered from them alone.
      if (utc) expect(after, context).toBeDefined();
      if (after !== undefined) expectTrendClose(after, rows, context);
    }
  });
});

describe("the §7 retention fast path answers as the gathered rows do", () => {
  it.each(seeds)("seed %i", (seed) => {
    const data = dataset(seed);
    const random = seededRandom(seed * 17);
    for (let query = 0; query < 10; query++) {
      const { zone, dateFrom, dateTo } = randomRange(random, data);
      const startsMs = zonedRetentionBoundaries(dateFrom, dateTo, pick(random, [1, 1, 2, 3]), zoneClock(zone)).startsMs;
      const breakdown = random() < 0.7;
      const cohortEvent = integer(random, 3);
      const gather = retentionGather(startsMs, { eventId: cohortEvent, filters: randomFilters(random) }, { eventId: random() < 0.4 ? cohortEvent : integer(random, 3), filters: randomFilters(random) }, breakdown ? randomBreakdown(random) : { kind: "none" });
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

describe("a §7 retention whose retention event has no filters, from kept day parts, answers as the gathered rows do", () => {
  let answered = 0;
  let leftToScan = 0;
  afterAll(() => {
    expect(answered).toBeGreaterThan(300);
    expect(leftToScan).toBeGreaterThan(20);
  });

  it.each(seeds)("seed %i", (seed) => {
    const data = dataset(seed);
    const random = seededRandom(seed * 19);
    for (let query = 0; query < 10; query++) {
      const { zone, dateFrom, dateTo } = randomRange(random, data);
      const startsMs = zonedRetentionBoundaries(dateFrom, dateTo, pick(random, [1, 1, 2, 3]), zoneClock(zone)).startsMs;
      const breakdown = random() < 0.7;
      const cohortEvent = random() < 0.05 ? undefined : integer(random, 3);
      const gather = retentionGather(startsMs, { eventId: cohortEvent, filters: randomFilters(random) }, { eventId: random() < 0.4 ? cohortEvent : random() < 0.05 ? undefined : integer(random, 3), filters: [] }, breakdown ? randomBreakdown(random) : { kind: "none" });
      // Days cut at every local midnight (as the service plans it), or at the periods' starts alone.
      const dayStartsMs = random() < 0.6 ? zonedDayStarts(dateFrom, dateTo, zoneClock(zone), 3_660) : undefined;
      const plan = { startsMs, breakdownLimit: breakdown ? pick(random, [1, 2, 3, 25]) : undefined, dayStartsMs };
      for (const [lo, hi] of pairs(random() < 0.3 ? [0, data.userCount] : shardBounds(random, data.userCount))) {
        const context = `seed ${seed} query ${query}: ${zone} ${dateFrom}…${dateTo}, limit ${plan.breakdownLimit}, ${dayStartsMs === undefined ? "periods" : "local days"}, users [${lo}, ${hi})`;
        const rows = retentionCohorts(gatherEventRows(data.segments, gather, lo, hi), plan);
        const fast = retentionDayParts(data.segments, gather, plan, lo, hi);
        // Left to the row scan over mostly active rows or many segments a day.
        const returnEvent = gather.references[1].eventId;
        if (returnEvent !== undefined && breakdownLeftToScan(data.segments, returnEvent, startsMs)) {
          expect(fast, context).toBeUndefined();
          leftToScan++;
          continue;
        }
        expect(fast, context).toBeDefined();
        expect(fast, context).toEqual(rows);
        // Asked again: sealed parts now come from what was kept.
        expect(retentionDayParts(data.segments, gather, plan, lo, hi), `${context}, asked again`).toEqual(rows);
        answered++;
      }
    }
  });

  it("answers undefined when the retention event has filters", () => {
    const data = dataset(7_001, 0);
    const startsMs = zonedRetentionBoundaries(data.firstDay, addDays(data.firstDay, 3), 1, zoneClock("America/New_York")).startsMs;
    const gather = retentionGather(startsMs, { eventId: 0, filters: [] }, { eventId: 1, filters: [{ keyId: keyFilter, op: "eq", value: "x" }] }, { kind: "none" });
    const plan = { startsMs, breakdownLimit: undefined };
    expect(retentionDayParts(data.segments, gather, plan, 0, data.userCount)).toBeUndefined();
    expect(retentionDayParts(data.segments, { ...gather, references: [gather.references[0], { eventId: 1, filters: [] }] }, plan, 0, data.userCount)).toBeDefined();
  });
});

describe("a §7 retention's cohorts from the kept parts' sets answer as the gathered rows do", () => {
  const answeredBefore = firstEventsFromPartsCounts.answered;
  afterAll(() => expect(firstEventsFromPartsCounts.answered - answeredBefore).toBeGreaterThan(300));

  // Sealed days of one to three segments (an active one now and then): the sets answer when no active segment holds cohort rows.
  it.each(seeds.map((seed) => seed + 9_500))("seed %i", (seed) => {
    const data = dataset(seed, seed % 4 === 0 ? 0.05 : 0);
    const random = seededRandom(seed * 23);
    for (let query = 0; query < 12; query++) {
      const { zone, dateFrom, dateTo } = randomRange(random, data);
      const startsMs = zonedRetentionBoundaries(dateFrom, dateTo, pick(random, [1, 1, 2, 3]), zoneClock(zone)).startsMs;
      const cohortEvent = integer(random, 3);
      const filters = random() < 0.1 ? [...randomFilters(random), { keyId: keyValue, op: "neq" as const, value: valueTexts[1] }] : randomFilters(random);
      const gather = retentionGather(startsMs, { eventId: cohortEvent, filters }, { eventId: random() < 0.5 ? cohortEvent : integer(random, 3), filters: [] }, random() < 0.8 ? randomBreakdown(random) : { kind: "none" });
      const dayStartsMs = random() < 0.6 ? zonedDayStarts(dateFrom, dateTo, zoneClock(zone), 3_660) : undefined;
      const plan = { startsMs, breakdownLimit: gather.breakdown.kind === "key" ? pick(random, [1, 2, 3, 25]) : undefined, dayStartsMs };
      for (const [lo, hi] of pairs(random() < 0.3 ? [0, data.userCount] : shardBounds(random, data.userCount))) {
        const context = `seed ${seed} query ${query}: ${zone} ${dateFrom}…${dateTo}, limit ${plan.breakdownLimit}, ${dayStartsMs === undefined ? "periods" : "local days"}, users [${lo}, ${hi})`;
        const rows = retentionCohorts(gatherEventRows(data.segments, gather, lo, hi), plan);
        const fast = retentionDayParts(data.segments, gather, plan, lo, hi);
        if (fast === undefined) continue;
        expect(fast, context).toEqual(rows);
        expect(retentionDayParts(data.segments, gather, plan, lo, hi), `${context}, asked again`).toEqual(rows);
      }
    }
  });
});

describe("a §7 retention's breakdown from the values' owners answers as the gathered rows do", () => {
  const answeredBefore = valueOwnersCounts.answered;
  afterAll(() => expect(valueOwnersCounts.answered - answeredBefore).toBeGreaterThan(300));

  // Each user's rows carry its own value but now and then; a seed's datasets of several shares share their
  // owners' sets (one workspace), so each query's sets also hold another dataset's segments: a superset.
  it.each(seeds.map((seed) => seed + 9_800))("seed %i", (seed) => {
    const random = seededRandom(seed * 29);
    for (const userValueShare of [1, 0.97, 0.85]) {
      const data = dataset(seed, seed % 4 === 0 ? 0.05 : 0, 1, userValueShare);
      for (let query = 0; query < 5; query++) {
        const { zone, dateFrom, dateTo } = randomRange(random, data);
        const startsMs = zonedRetentionBoundaries(dateFrom, dateTo, pick(random, [1, 1, 2, 3]), zoneClock(zone)).startsMs;
        const cohortEvent = integer(random, 3);
        const gather = retentionGather(startsMs, { eventId: cohortEvent, filters: randomFilters(random) }, { eventId: random() < 0.5 ? cohortEvent : integer(random, 3), filters: [] }, randomBreakdown(random));
        const dayStartsMs = random() < 0.6 ? zonedDayStarts(dateFrom, dateTo, zoneClock(zone), 3_660) : undefined;
        const plan = { startsMs, breakdownLimit: pick(random, [1, 2, 3, 25]), dayStartsMs };
        for (const [lo, hi] of pairs(random() < 0.3 ? [0, data.userCount] : shardBounds(random, data.userCount))) {
          const context = `seed ${seed} share ${userValueShare} query ${query}: ${zone} ${dateFrom}…${dateTo}, limit ${plan.breakdownLimit}, users [${lo}, ${hi})`;
          const rows = retentionCohorts(gatherEventRows(data.segments, gather, lo, hi), plan);
          const fast = retentionDayParts(data.segments, gather, plan, lo, hi);
          if (fast === undefined) continue;
          expect(fast, context).toEqual(rows);
        }
      }
    }
  });
});

describe("a §7 retention whose kept parts would not fit the budget", () => {
  // Such parts would evict each other within one query, and every query would read them all again.
  let refused = 0;
  afterAll(() => expect(refused).toBeGreaterThan(20));
  it.each(seeds.slice(0, 20).map((seed) => seed + 9_700))("reads rows instead, and answers the same (seed %i)", (seed) => {
    const data = dataset(seed, 0);
    const random = seededRandom(seed * 31);
    const before = setDayPartsBudget(64);
    try {
      for (let query = 0; query < 6; query++) {
        const { zone, dateFrom, dateTo } = randomRange(random, data);
        const startsMs = zonedRetentionBoundaries(dateFrom, dateTo, pick(random, [1, 2, 3]), zoneClock(zone)).startsMs;
        const cohortEvent = integer(random, 3);
        const gather = retentionGather(startsMs, { eventId: cohortEvent, filters: randomFilters(random) }, { eventId: cohortEvent, filters: [] }, randomBreakdown(random));
        const plan = { startsMs, breakdownLimit: 25, dayStartsMs: zonedDayStarts(dateFrom, dateTo, zoneClock(zone), 3_660) };
        const context = `seed ${seed} query ${query}: ${zone} ${dateFrom}…${dateTo}`;
        const answeredBefore = firstEventsFromPartsCounts.answered;
        const fast = retentionDayParts(data.segments, gather, plan, 0, data.userCount);
        if (fast !== undefined) expect(fast, context).toEqual(retentionCohorts(gatherEventRows(data.segments, gather, 0, data.userCount), plan));
        // A filtered cohort reads a set per value and part of every day: refused when the range holds its rows.
        const rows = gatherEventRows(data.segments, { ...gather, references: [{ eventId: cohortEvent, filters: [] }] }, 0, data.userCount).count;
        if (rows > 0 && gather.references[0].filters.length > 0) {
          expect(firstEventsFromPartsCounts.answered, context).toBe(answeredBefore);
          refused++;
        }
      }
    } finally {
      setDayPartsBudget(before);
    }
  });
});

describe("the §7 funnel fast path answers as the gathered rows do", () => {
  // The second 60 seeds hold sealed days only (an active segment now and then).
  it.each([...seeds, ...seeds.map((seed) => seed + 9_600)])("seed %i", (seed) => {
    // Every other seed, ids far apart: the path reads a shard's users in blocks of 8 192 ids, so a shard spans several.
    const data = dataset(seed, seed < 16_000 ? 0.3 : seed % 4 === 0 ? 0.05 : 0, seed % 2 === 0 ? 1 : 613);
    const random = seededRandom(seed * 13);
    for (let query = 0; query < 12; query++) {
      const { zone, dateFrom, dateTo } = randomRange(random, data);
      const { startsMs } = zonedTrendBoundaries(dateFrom, dateTo, "day", zoneClock(zone), 10_000)!;
      const entryFromMs = startsMs[0];
      const entryToMsExclusive = startsMs[startsMs.length - 1];
      const windowMs = pick(random, [1, 900, 3_600, 86_400, 3 * 86_400]) * 1000;
      const stepCount = 1 + integer(random, 5);
      const order = pick(random, ["ordered", "strict", "strict", "unordered"] as const);
      const exclusions =
        order === "unordered" || stepCount < 2 || random() < 0.4
          ? []
          : Array.from({ length: 1 + integer(random, 2) }, () => {
              const fromStep = 1 + integer(random, stepCount - 1);
              return { fromStep, toStep: fromStep + 1 + integer(random, stepCount - fromStep) };
            });
      const reference = () => ({ eventId: random() < 0.04 ? undefined : integer(random, 3), filters: randomFilters(random) });
      const breakdown = random() < 0.7;
      const gather: GatherPlan = {
        fromMs: entryFromMs,
        toMsExclusive: entryToMsExclusive + windowMs,
        references: [...Array.from({ length: stepCount }, reference), ...exclusions.map(reference)],
        allEvents: order === "strict",
        breakdown: breakdown ? randomBreakdown(random) : { kind: "none" },
        math: { kind: "none" },
      };
      const plan = { stepCount, exclusions, order, entryFromMs, entryToMsExclusive, windowMs, timeToConvert: random() < 0.5, breakdownLimit: breakdown ? pick(random, [1, 2, 3, 25]) : undefined };
      for (const [lo, hi] of pairs(shardBounds(random, data.userCount))) {
        const context = `seed ${seed} query ${query}: ${order} ${stepCount} steps, ${exclusions.length} exclusions, ${zone} ${dateFrom}…${dateTo}, window ${windowMs} ms, limit ${plan.breakdownLimit}, users [${lo}, ${hi})`;
        const fast = funnelColumns(data.segments, gather, plan, lo, hi);
        expect(fast, context).toBeDefined();
        expect(fast, context).toEqual(funnelChains(gatherEventRows(data.segments, gather, lo, hi), plan));
      }
    }
  });
});

/** Property names of the keys above, as the reference reads them off each event. */
const propertyNames = new Map([
  [keyValue, "v"],
  [keyNumber, "n"],
  [keyFilter, "f"],
]);

/** The dataset's rows as events of the naive reference: event `e<id>`, user `u<id>`, every set property as its text. */
function storedEvents(data: Dataset): StoredEvent[] {
  const events: StoredEvent[] = [];
  for (const segment of data.segments) {
    for (let row = 0; row < segment.rowCount; row++) {
      let eventId = segment.eventIds?.[row];
      if (eventId === undefined) for (eventId = 0; segment.eventRowStart![eventId + 1] <= row; eventId++);
      const properties: Record<string, unknown> = {};
      for (const [keyId, name] of propertyNames) {
        const column = segment.property(keyId);
        const id = column?.valueIds[row] ?? 0;
        if (id !== 0) properties[name] = column!.texts[id];
      }
      events.push({ event: `e${eventId}`, distinctId: `u${segment.userIds[row]}`, timestampMs: segment.dayStartMs + segment.timeOffsetMs[row], properties });
    }
  }
  return events;
}

describe("the §7 funnel fast path answers as the naive reference on the same events", () => {
  it.each(seeds.slice(0, 40))("seed %i", (seed) => {
    const data = dataset(seed);
    const events = storedEvents(data);
    const random = seededRandom(seed * 29);
    for (let query = 0; query < 10; query++) {
      const timezone = pick(random, zones);
      const dateFrom = addDays(data.firstDay, integer(random, 3) - 1);
      const dateTo = addDays(dateFrom, integer(random, data.dayCount + 1));
      const { startsMs } = zonedTrendBoundaries(dateFrom, dateTo, "day", zoneClock(timezone), 10_000)!;
      const conversionWindow = pick(random, [1, 900, 3_600, 86_400, 3 * 86_400]);
      const stepCount = 1 + integer(random, 5);
      const order = pick(random, ["ordered", "strict", "strict", "unordered"] as const);
      const reference = (): ReferencePlan => ({ eventId: random() < 0.04 ? undefined : integer(random, 3), filters: randomFilters(random) });
      const steps = Array.from({ length: stepCount }, reference);
      const exclusions =
        order === "unordered" || stepCount < 2 || random() < 0.4
          ? []
          : Array.from({ length: 1 + integer(random, 2) }, () => {
              const fromStep = 1 + integer(random, stepCount - 1);
              return { fromStep, toStep: fromStep + 1 + integer(random, stepCount - fromStep), reference: reference() };
            });
      const breakdown = random() < 0.7 ? randomBreakdown(random) : undefined;
      const breakdownLimit = breakdown === undefined ? undefined : pick(random, [1, 2, 3, 25]);
      const timeToConvert = random() < 0.5;
      const entryFromMs = startsMs[0];
      const entryToMsExclusive = startsMs[startsMs.length - 1];
      const gather: GatherPlan = {
        fromMs: entryFromMs,
        toMsExclusive: entryToMsExclusive + conversionWindow * 1000,
        references: [...steps, ...exclusions.map((exclusion) => exclusion.reference)],
        allEvents: order === "strict",
        breakdown: breakdown ?? { kind: "none" },
        math: { kind: "none" },
      };
      const plan = { stepCount, exclusions, order, entryFromMs, entryToMsExclusive, windowMs: conversionWindow * 1000, timeToConvert, breakdownLimit };
      const answer = funnelColumns(data.segments, gather, plan, 0, data.userCount);
      const eventReference = ({ eventId, filters }: ReferencePlan) => ({
        event: eventId === undefined ? "never" : `e${eventId}`,
        filters: filters.map((filter) => ({ property: propertyNames.get(filter.keyId!)!, op: filter.op, value: filter.value })),
      });
      const body: FunnelQueryV2 = {
        steps: steps.map(eventReference),
        dateFrom,
        dateTo,
        conversionWindow,
        timezone,
        order,
        exclusions: exclusions.map(({ fromStep, toStep, reference }) => ({ event: eventReference(reference), fromStep, toStep })),
        timeToConvert,
      };
      if (breakdown !== undefined) {
        body.breakdown = breakdown.kind === "key" && breakdown.keyId !== undefined ? (propertyNames.get(breakdown.keyId) ?? "w") : "nope";
        body.breakdownLimit = breakdownLimit;
      }
      const context = `seed ${seed} query ${query}: ${JSON.stringify(body)}`;
      expect(answer, context).toBeDefined();
      const request = { steps: body.steps } as unknown as FunnelRequest;
      expect(JSON.parse(funnelRowsBody(request, answer!)), context).toEqual(referenceFunnelV2(events, body));
    }
  });
});

describe("gathered rows are put in (user, time, row) order", () => {
  it.each([3, 40, 2_000])("whatever the disorder of a user's rows (runs of %i rows)", (runLength) => {
    const random = seededRandom(runLength);
    const count = runLength * 4;
    // Users interleaved; times mostly descending (past the insertion budget), with ties.
    const users = Uint32Array.from({ length: count }, (_, row) => row % 4);
    const timesMs = Float64Array.from({ length: count }, (_, row) => (random() < 0.8 ? count - row : integer(random, 4)));
    const rows = { count, users, timesMs, masks: new Uint32Array(count), values: new Int32Array(count), valueTexts: [""], numbers: new Float64Array(0) };
    const expected = Array.from({ length: count }, (_, row) => row).sort((left, right) => users[left] - users[right] || timesMs[left] - timesMs[right] || left - right);
    expect(Array.from(rowsByUserAndTime(rows))).toEqual(expected);
  });

  // A busy user's rows as gathered: a day at a time, each day one ascending run per event, runs interleaved in time, ties among them.
  it.each(seeds.slice(0, 40))("as a busy user's days of interleaved runs (seed %i)", (seed) => {
    const random = seededRandom(seed * 41);
    const userList: number[] = [];
    const timeList: number[] = [];
    for (let user = 0; user < 1 + integer(random, 4); user++) {
      for (let day = 0; day < 1 + integer(random, 6); day++) {
        for (let run = 0; run < 1 + integer(random, 12); run++) {
          let timeMs = day * 1_000 + integer(random, 200);
          for (let row = 0; row < integer(random, 60); row++) {
            userList.push(user);
            timeList.push(timeMs);
            timeMs += integer(random, 3) === 0 ? 0 : integer(random, 30);
          }
        }
      }
    }
    const count = userList.length;
    const rows = { count, users: Uint32Array.from(userList), timesMs: Float64Array.from(timeList), masks: new Uint32Array(count), values: new Int32Array(count), valueTexts: [""], numbers: new Float64Array(0) };
    const expected = Array.from({ length: count }, (_, row) => row).sort((left, right) => userList[left] - userList[right] || timeList[left] - timeList[right] || left - right);
    expect(Array.from(rowsByUserAndTime(rows))).toEqual(expected);
  });
});

function pairs(bounds: readonly number[]): Array<[number, number]> {
  return bounds.slice(1).map((hi, index) => [bounds[index], hi]);
}
