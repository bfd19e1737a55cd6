/**
 * Every query kernel against a naive evaluation of SPEC §4 over the flat event
 * list, on seeded random data: sealed and active segments (several per day,
 * some sealed ones without bitmaps), random plans, and users split into 1–4
 * shards whose partials must each match and sum to the whole. The naive side
 * is plain loops over events (a brute-force search for funnels) and shares no
 * code with the kernels except the bucket layout under test.
 */
import { describe, expect, it } from "vitest";
import {
  dayMs,
  msToDate,
  retentionLayout,
  retentionPeriodLabels,
  trendBucketLabels,
  trendLayout,
  type GroupBy,
} from "../../src/query/buckets.js";
import { filterOps, type FilterOp, type FilterPlan } from "../../src/query/filters.js";
import { funnelPartial, mergeFunnelPartials } from "../../src/query/kernels/funnel.js";
import {
  mergeRetentionPartials,
  retentionPartial,
  retentionWeeksOffset,
  type RetentionPartial,
} from "../../src/query/kernels/retention.js";
import { mergeTrendPartials, trendPartial, type TrendMath } from "../../src/query/kernels/trend.js";
import type { SegmentView } from "../../src/query/segment-view.js";
import { activeSegment, sealedSegment, seededRandom, type SegmentInput, type ValueIdWidth } from "./kernels-fixtures.js";

// ---------------------------------------------------------------------------
// Random data

interface FlatEvent {
  user: number;
  eventId: number;
  timeMs: number;
  /** Text per property key id; undefined = not set. */
  properties: (string | undefined)[];
}

interface Dataset {
  seed: number;
  events: FlatEvent[];
  segments: SegmentView[];
  userBase: number;
  userCount: number;
  eventCount: number;
  firstDayMs: number;
  dayCount: number;
}

/** Texts as the store keeps them: strings, String(n) of numbers, booleans, JSON. */
const propertyTexts = ["a", "ab", "b", "", "1", "2.5", "-3", "10", "1e+21", "1e-7", "true", "false", '{"x":1}', "[1,2]", "007", "x y"];
/** Keys 0..2 appear in the data; key 3 is known to the workspace but set on no row. */
const dataKeyCount = 3;
const firstDays = ["2023-12-20", "2024-02-20", "2020-12-25", "2024-05-01", "1999-12-30"];

type Random = () => number;
const randomInteger = (random: Random, bound: number) => Math.floor(random() * bound);
const pick = <T>(random: Random, values: readonly T[]): T => values[randomInteger(random, values.length)];

function shuffle<T>(random: Random, values: T[]): T[] {
  for (let index = values.length - 1; index > 0; index--) {
    const other = randomInteger(random, index + 1);
    [values[index], values[other]] = [values[other], values[index]];
  }
  return values;
}

function segmentInput(random: Random, dayStartMs: number, events: readonly FlatEvent[]): SegmentInput {
  const properties = [];
  for (let keyId = 0; keyId < dataKeyCount; keyId++) {
    const distinct = shuffle(random, [...new Set(events.map((event) => event.properties[keyId]).filter((text) => text !== undefined))]) as string[];
    const idOf = new Map(distinct.map((text, index) => [text, index + 1]));
    properties.push({
      keyId,
      valueIds: Uint32Array.from(events, (event) => (event.properties[keyId] === undefined ? 0 : idOf.get(event.properties[keyId]!)!)),
      texts: ["", ...distinct],
    });
  }
  return {
    dayStartMs,
    eventIds: Uint32Array.from(events, (event) => event.eventId),
    userIds: Uint32Array.from(events, (event) => event.user),
    timeOffsetMs: Uint32Array.from(events, (event) => event.timeMs - dayStartMs),
    properties,
  };
}

function randomDataset(seed: number, rowCountMax: number): Dataset {
  const random = seededRandom(seed);
  // Dense datasets: a few users active within a few seconds of one or two days, so that 1-second
  // windows cut chains at the millisecond. Coarse time quanta make ties.
  const dense = random() < 0.25;
  const userBase = pick(random, [0, 0, 0, 1000, 70_000]);
  const userCount = 1 + randomInteger(random, dense ? 6 : 40);
  const eventCount = 1 + randomInteger(random, dense ? 3 : 5);
  const dayCount = 1 + (dense ? randomInteger(random, 2) : random() < 0.25 ? randomInteger(random, 100) : randomInteger(random, 20));
  const firstDayMs = Date.parse(`${pick(random, firstDays)}T00:00:00Z`);
  const quantumMs = dense ? pick(random, [1, 100, 250]) : pick(random, [1, 1000, 60_000, 3_600_000, 6 * 3_600_000]);
  const spanMs = dense ? pick(random, [3000, 10_000]) : dayMs;
  const rowCount = randomInteger(random, rowCountMax);
  const events: FlatEvent[] = [];
  for (let index = 0; index < rowCount; index++) {
    const day = randomInteger(random, dayCount);
    events.push({
      // Skewed: low user ids are busier, so some users have many events.
      user: userBase + Math.floor(random() * random() * userCount),
      eventId: randomInteger(random, eventCount),
      timeMs: firstDayMs + day * dayMs + randomInteger(random, Math.ceil(spanMs / quantumMs)) * quantumMs,
      properties: Array.from({ length: dataKeyCount }, () => (random() < 0.5 ? undefined : pick(random, propertyTexts))),
    });
  }

  // Each day's events, in arrival order, cut into 1–3 segments, each sealed or active.
  const segments: SegmentView[] = [];
  for (let day = 0; day < dayCount; day++) {
    const dayStartMs = firstDayMs + day * dayMs;
    const dayEvents = shuffle(
      random,
      events.filter((event) => event.timeMs >= dayStartMs && event.timeMs < dayStartMs + dayMs),
    );
    const partCount = 1 + randomInteger(random, 3);
    const cuts = [0, ...Array.from({ length: partCount - 1 }, () => randomInteger(random, dayEvents.length + 1)).sort((a, b) => a - b), dayEvents.length];
    for (let part = 0; part < partCount; part++) {
      const partEvents = dayEvents.slice(cuts[part], cuts[part + 1]);
      if (partEvents.length === 0) continue;
      const input = segmentInput(random, dayStartMs, partEvents);
      const width = pick<ValueIdWidth>(random, [8, 16, 32]);
      const key = `${seed}/${day}/${part}`;
      segments.push(
        random() < 0.65
          ? sealedSegment(key, input, { bitmaps: random() < 0.8, eventRowStartPadding: randomInteger(random, 3), valueIdWidth: width })
          : activeSegment(key, input, width, random),
      );
    }
  }
  shuffle(random, segments); // kernels must not rely on the caller's order
  return { seed, events, segments, userBase, userCount, eventCount, firstDayMs, dayCount };
}

/** 1–4 disjoint shards covering every user; the last one sometimes reaches the end of the id space. */
function randomShards(random: Random, dataset: Dataset): Array<[number, number]> {
  const shardCount = 1 + randomInteger(random, 4);
  const end = dataset.userBase + dataset.userCount;
  const cuts = Array.from({ length: shardCount - 1 }, () => dataset.userBase + randomInteger(random, dataset.userCount + 1)).sort((a, b) => a - b);
  const bounds = [random() < 0.5 ? 0 : dataset.userBase, ...cuts, random() < 0.3 ? 2 ** 32 : end + randomInteger(random, 3)];
  return Array.from({ length: shardCount }, (_, shard) => [bounds[shard], bounds[shard + 1]] as [number, number]);
}

/** Event ids for plans: mostly real ones, sometimes one with no rows, sometimes a name never ingested. */
function randomEventId(random: Random, dataset: Dataset): number | undefined {
  const draw = random();
  if (draw < 0.06) return undefined;
  if (draw < 0.1) return dataset.eventCount + randomInteger(random, 3);
  return randomInteger(random, dataset.eventCount);
}

/** A date range around the data, sometimes reaching before or after it. */
function randomDateRange(random: Random, dataset: Dataset, dayCountMax: number): { dateFrom: string; dateTo: string } {
  const fromDay = randomInteger(random, dataset.dayCount + 6) - 3;
  const length = randomInteger(random, Math.min(dayCountMax, dataset.dayCount + 6));
  return {
    dateFrom: msToDate(dataset.firstDayMs + fromDay * dayMs),
    dateTo: msToDate(dataset.firstDayMs + (fromDay + length) * dayMs),
  };
}

// ---------------------------------------------------------------------------
// Naive evaluation of SPEC §4

const naiveNumber = /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/;

function naiveFilterHolds(text: string | undefined, op: FilterOp, value: string | undefined): boolean {
  const set = text !== undefined;
  switch (op) {
    case "eq":
      return set && text === value;
    case "neq":
      return !(set && text === value);
    case "contains":
      return set && text.includes(value!);
    case "not_contains":
      return !(set && text.includes(value!));
    case "gt":
    case "gte":
    case "lt":
    case "lte": {
      if (!set || !naiveNumber.test(text) || !naiveNumber.test(value!)) return false;
      const left = Number(text);
      const right = Number(value);
      return op === "gt" ? left > right : op === "gte" ? left >= right : op === "lt" ? left < right : left <= right;
    }
    case "is_set":
      return set;
    case "is_not_set":
      return !set;
  }
}

function naiveBucketLabel(timeMs: number, groupBy: GroupBy): string {
  const iso = new Date(timeMs).toISOString();
  switch (groupBy) {
    case "hour":
      return `${iso.slice(0, 10)} ${iso.slice(11, 13)}:00:00`;
    case "day":
      return iso.slice(0, 10);
    case "week": {
      const weekday = (new Date(timeMs).getUTCDay() + 6) % 7;
      return new Date(timeMs - weekday * dayMs).toISOString().slice(0, 10);
    }
    case "month":
      return `${iso.slice(0, 7)}-01`;
  }
}

interface TrendCase {
  eventId: number | undefined;
  dateFrom: string;
  dateTo: string;
  groupBy: GroupBy;
  filters: FilterPlan[];
  math: TrendMath;
}

function naiveTrend(dataset: Dataset, trend: TrendCase, labels: readonly string[], userLo: number, userHi: number): number[] {
  const fromMs = Date.parse(`${trend.dateFrom}T00:00:00Z`);
  const toMs = Date.parse(`${trend.dateTo}T00:00:00Z`) + dayMs;
  const indexOf = new Map(labels.map((label, index) => [label, index]));
  const counts = labels.map(() => 0);
  const seen = new Set<string>();
  for (const event of dataset.events) {
    if (event.eventId !== trend.eventId || event.timeMs < fromMs || event.timeMs >= toMs) continue;
    if (event.user < userLo || event.user >= userHi) continue;
    const passes = trend.filters.every((filter) =>
      naiveFilterHolds(filter.keyId === undefined ? undefined : event.properties[filter.keyId], filter.op, filter.value),
    );
    if (!passes) continue;
    const label = naiveBucketLabel(event.timeMs, trend.groupBy);
    const index = indexOf.get(label);
    if (index === undefined) throw new Error(`no bucket ${label} for ${new Date(event.timeMs).toISOString()}`);
    if (trend.math === "unique") {
      const key = `${label}/${event.user}`;
      if (seen.has(key)) continue;
      seen.add(key);
    }
    counts[index]++;
  }
  return counts;
}

/** The deepest step any entry of one user reaches, by trying every chain of distinct events. */
function bruteForceFunnelDepth(events: readonly FlatEvent[], steps: readonly (number | undefined)[], fromMs: number, toMs: number, windowMs: number): number {
  const used = new Uint8Array(events.length);
  const extend = (step: number, previousMs: number, entryMs: number): number => {
    if (step === steps.length) return step;
    let deepest = step;
    for (let index = 0; index < events.length && deepest < steps.length; index++) {
      const event = events[index];
      if (used[index] || event.eventId !== steps[step] || event.timeMs < previousMs || event.timeMs - entryMs > windowMs) continue;
      used[index] = 1;
      deepest = Math.max(deepest, extend(step + 1, event.timeMs, entryMs));
      used[index] = 0;
    }
    return deepest;
  };
  let best = 0;
  for (let index = 0; index < events.length && best < steps.length; index++) {
    const entry = events[index];
    if (entry.eventId !== steps[0] || entry.timeMs < fromMs || entry.timeMs >= toMs) continue;
    used[index] = 1;
    best = Math.max(best, extend(1, entry.timeMs, entry.timeMs));
    used[index] = 0;
  }
  return best;
}

function naiveFunnel(dataset: Dataset, steps: readonly (number | undefined)[], fromMs: number, toMs: number, windowMs: number, userLo: number, userHi: number): number[] {
  const byUser = new Map<number, FlatEvent[]>();
  for (const event of dataset.events) {
    if (event.user < userLo || event.user >= userHi) continue;
    if (!byUser.has(event.user)) byUser.set(event.user, []);
    byUser.get(event.user)!.push(event);
  }
  const counts = steps.map(() => 0);
  for (const events of byUser.values()) {
    const depth = bruteForceFunnelDepth(events, steps, fromMs, toMs, windowMs);
    for (let step = 0; step < depth; step++) counts[step]++;
  }
  return counts;
}

function naiveRetention(
  dataset: Dataset,
  cohortEventId: number | undefined,
  retentionEventId: number | undefined,
  fromMs: number,
  toMs: number,
  periodMs: number,
  periodCount: number,
  userLo: number,
  userHi: number,
): { totals: number[]; weeks: number[][] } {
  const firstCohortMs = new Map<number, number>();
  const returned = new Set<string>();
  for (const event of dataset.events) {
    if (event.user < userLo || event.user >= userHi || event.timeMs < fromMs || event.timeMs >= toMs) continue;
    if (event.eventId === cohortEventId) firstCohortMs.set(event.user, Math.min(firstCohortMs.get(event.user) ?? Infinity, event.timeMs));
    if (event.eventId === retentionEventId) returned.add(`${event.user}/${Math.floor((event.timeMs - fromMs) / periodMs)}`);
  }
  const totals = Array.from({ length: periodCount }, () => 0);
  const weeks = Array.from({ length: periodCount }, (_, period) => Array.from({ length: periodCount - period }, () => 0));
  for (const [user, timeMs] of firstCohortMs) {
    const cohort = Math.floor((timeMs - fromMs) / periodMs);
    totals[cohort]++;
    weeks[cohort][0]++;
    for (let later = cohort + 1; later < periodCount; later++) if (returned.has(`${user}/${later}`)) weeks[cohort][later - cohort]++;
  }
  return { totals, weeks };
}

function unflattenWeeks(partial: RetentionPartial): number[][] {
  const periodCount = partial.totals.length;
  return Array.from({ length: periodCount }, (_, period) => {
    const offset = retentionWeeksOffset(periodCount, period);
    return Array.from(partial.weeks.subarray(offset, offset + periodCount - period));
  });
}

// ---------------------------------------------------------------------------
// Conformance

const datasetCount = 160;

describe("trend kernel", () => {
  it("matches the naive count for random plans, segments and shards", () => {
    let checked = 0;
    for (let seed = 1; seed <= datasetCount; seed++) {
      const dataset = randomDataset(seed, seed % 10 === 0 ? 1500 : 400);
      const random = seededRandom(seed * 7919);
      for (let planIndex = 0; planIndex < 5; planIndex++) {
        const groupBy = pick<GroupBy>(random, ["hour", "day", "day", "week", "month"]);
        const trend: TrendCase = {
          eventId: randomEventId(random, dataset),
          ...randomDateRange(random, dataset, groupBy === "hour" ? 20 : 200),
          groupBy,
          filters: Array.from({ length: pick(random, [0, 0, 1, 1, 2, 3]) }, () => {
            const op = pick(random, filterOps);
            const keyId = random() < 0.1 ? undefined : randomInteger(random, dataKeyCount + 1);
            const value = op === "is_set" || op === "is_not_set" ? undefined : pick(random, [...propertyTexts, "2", "0", "abc", "1e1", "-"]);
            return { keyId, op, value };
          }),
          math: pick<TrendMath>(random, ["total", "unique"]),
        };
        const layout = trendLayout(trend.dateFrom, trend.dateTo, trend.groupBy);
        const labels = trendBucketLabels(layout);
        const plan = { eventId: trend.eventId, layout, filters: trend.filters, math: trend.math };
        const partials = randomShards(random, dataset).map(([userLo, userHi]) => {
          const partial = trendPartial(dataset.segments, plan, userLo, userHi);
          const context = JSON.stringify({ seed, planIndex, trend, userLo, userHi });
          expect(Array.from(partial), context).toEqual(naiveTrend(dataset, trend, labels, userLo, userHi));
          return partial;
        });
        expect(Array.from(mergeTrendPartials(partials))).toEqual(naiveTrend(dataset, trend, labels, 0, 2 ** 32));
        checked++;
      }
    }
    expect(checked).toBe(datasetCount * 5);
  });
});

describe("trend kernel over sealed segments of many rows (value counts)", () => {
  // Long enough that a shard's rows span whole chunks of the value-count index (value-counts.ts).
  it("counts one-filter totals as the naive count does, for random filters and shards", () => {
    let checked = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const random = seededRandom(seed * 31_337);
      const firstDayMs = Date.parse("2024-03-01T00:00:00Z");
      const dayCount = 2;
      const userCount = 200 + randomInteger(random, 400);
      const events: FlatEvent[] = Array.from({ length: 30_000 + randomInteger(random, 30_000) }, () => ({
        user: Math.floor(random() * random() * userCount),
        eventId: random() < 0.8 ? 0 : 1,
        timeMs: firstDayMs + randomInteger(random, dayCount * dayMs),
        properties: Array.from({ length: dataKeyCount }, () => (random() < 0.3 ? undefined : pick(random, propertyTexts))),
      }));
      const segments = Array.from({ length: dayCount }, (_, day) => {
        const dayStartMs = firstDayMs + day * dayMs;
        const input = segmentInput(random, dayStartMs, events.filter((event) => event.timeMs >= dayStartMs && event.timeMs < dayStartMs + dayMs));
        return sealedSegment(`large/${seed}/${day}`, input, { bitmaps: true, eventRowStartPadding: 0, valueIdWidth: pick<ValueIdWidth>(random, [8, 16, 32]) });
      });
      const dataset: Dataset = { seed, events, segments, userBase: 0, userCount, eventCount: 2, firstDayMs, dayCount };
      for (let planIndex = 0; planIndex < 25; planIndex++) {
        const op = pick(random, filterOps);
        const value = op === "is_set" || op === "is_not_set" ? undefined : pick(random, [...propertyTexts, "2", "abc"]);
        const trend: TrendCase = { eventId: randomInteger(random, 2), dateFrom: "2024-03-01", dateTo: "2024-03-02", groupBy: pick<GroupBy>(random, ["day", "week"]), filters: [{ keyId: randomInteger(random, dataKeyCount), op, value }], math: "total" };
        const layout = trendLayout(trend.dateFrom, trend.dateTo, trend.groupBy);
        const labels = trendBucketLabels(layout);
        const plan = { eventId: trend.eventId, layout, filters: trend.filters, math: trend.math };
        for (const [userLo, userHi] of randomShards(random, dataset)) {
          expect(Array.from(trendPartial(segments, plan, userLo, userHi)), JSON.stringify({ seed, planIndex, trend, userLo, userHi })).toEqual(naiveTrend(dataset, trend, labels, userLo, userHi));
        }
        checked++;
      }
    }
    expect(checked).toBe(6 * 25);
  });
});

describe("funnel kernel", () => {
  it("matches a brute-force search for random steps, windows and shards", () => {
    for (let seed = 1; seed <= datasetCount; seed++) {
      const dataset = randomDataset(seed, 300);
      const random = seededRandom(seed * 104_729);
      for (let planIndex = 0; planIndex < 5; planIndex++) {
        const stepCount = 1 + randomInteger(random, 5);
        // Few distinct names, so that repeated steps are common.
        const names = Array.from({ length: 1 + randomInteger(random, 3) }, () => randomEventId(random, dataset));
        const stepEventIds = Array.from({ length: stepCount }, () => pick(random, names));
        const { dateFrom, dateTo } = randomDateRange(random, dataset, 30);
        const entryFromMs = Date.parse(`${dateFrom}T00:00:00Z`);
        const entryToMsExclusive = Date.parse(`${dateTo}T00:00:00Z`) + dayMs;
        const windowMs = pick(random, [1, 60, 3600, 6 * 3600, 86_400, 3 * 86_400, 1 + randomInteger(random, 10 * 86_400)]) * 1000;
        const plan = { stepEventIds, entryFromMs, entryToMsExclusive, windowMs };
        const partials = randomShards(random, dataset).map(([userLo, userHi]) => {
          const partial = funnelPartial(dataset.segments, plan, userLo, userHi);
          const context = JSON.stringify({ seed, planIndex, plan, userLo, userHi });
          expect(Array.from(partial), context).toEqual(naiveFunnel(dataset, stepEventIds, entryFromMs, entryToMsExclusive, windowMs, userLo, userHi));
          return partial;
        });
        expect(Array.from(mergeFunnelPartials(partials))).toEqual(
          naiveFunnel(dataset, stepEventIds, entryFromMs, entryToMsExclusive, windowMs, 0, 2 ** 32),
        );
      }
    }
  });

  it("finds the chain that a greedy walk from the first entry alone would miss", () => {
    // Entry at 0 can reach B at 10 but the window (5 s) closes first; the entry at 8 reaches B and C.
    const events: FlatEvent[] = [
      { user: 0, eventId: 0, timeMs: 0, properties: [] },
      { user: 0, eventId: 0, timeMs: 8000, properties: [] },
      { user: 0, eventId: 1, timeMs: 10_000, properties: [] },
      { user: 0, eventId: 2, timeMs: 12_000, properties: [] },
    ];
    const random = seededRandom(1);
    const segment = sealedSegment("s", segmentInput(random, 0, events), { bitmaps: true, eventRowStartPadding: 0, valueIdWidth: 8 });
    const plan = { stepEventIds: [0, 1, 2], entryFromMs: 0, entryToMsExclusive: dayMs, windowMs: 5000 };
    expect(Array.from(funnelPartial([segment], plan, 0, 1))).toEqual([1, 1, 1]);
  });
});

describe("time edges, to the millisecond", () => {
  const random = seededRandom(3);
  const segmentOf = (events: FlatEvent[], dayStartMs: number, sealed: boolean) => {
    const input = segmentInput(random, dayStartMs, events);
    return sealed ? sealedSegment("edge", input, { bitmaps: true, eventRowStartPadding: 0, valueIdWidth: 8 }) : activeSegment("edge", input, 8);
  };
  const event = (eventId: number, timeMs: number): FlatEvent => ({ user: 0, eventId, timeMs, properties: [] });

  it.each([true, false])("closes the funnel window after exactly conversionWindow seconds (sealed: %s)", (sealed) => {
    const plan = { stepEventIds: [0, 1], entryFromMs: 0, entryToMsExclusive: dayMs, windowMs: 1000 };
    expect(Array.from(funnelPartial([segmentOf([event(0, 5000), event(1, 6000)], 0, sealed)], plan, 0, 1))).toEqual([1, 1]);
    expect(Array.from(funnelPartial([segmentOf([event(0, 5000), event(1, 6001)], 0, sealed)], plan, 0, 1))).toEqual([1, 0]);
    // The entry one millisecond later still reaches it.
    expect(Array.from(funnelPartial([segmentOf([event(0, 5000), event(0, 5001), event(1, 6001)], 0, sealed)], plan, 0, 1))).toEqual([1, 1]);
  });

  it("takes entries up to the last millisecond of dateTo, and later steps after it", () => {
    const plan = { stepEventIds: [0, 1], entryFromMs: dayMs, entryToMsExclusive: 2 * dayMs, windowMs: 3_600_000 };
    const day1 = segmentOf([event(0, 2 * dayMs - 1)], dayMs, true);
    const day2 = segmentOf([event(1, 2 * dayMs + 3_599_999)], 2 * dayMs, false);
    expect(Array.from(funnelPartial([day2, day1], plan, 0, 1))).toEqual([1, 1]);
    const late = segmentOf([event(0, 2 * dayMs)], 2 * dayMs, true);
    const early = segmentOf([event(0, dayMs - 1)], 0, true);
    expect(Array.from(funnelPartial([late, early], plan, 0, 1))).toEqual([0, 0]);
  });

  it("counts a trend event at 23:59:59.999 of dateTo in the last hour", () => {
    const layout = trendLayout("1970-01-01", "1970-01-02", "hour");
    const segments = [segmentOf([event(0, 2 * dayMs - 1)], dayMs, true), segmentOf([event(0, 2 * dayMs)], 2 * dayMs, true)];
    const counts = trendPartial(segments, { eventId: 0, layout, filters: [], math: "unique" }, 0, 1);
    expect(counts[47]).toBe(1);
    expect(counts.reduce((sum, count) => sum + count, 0)).toBe(1);
  });
});

describe("retention kernel", () => {
  it("matches the naive cohorts for random periods and shards, by pair and by user", () => {
    for (let seed = 1; seed <= datasetCount; seed++) {
      const dataset = randomDataset(seed, seed % 10 === 0 ? 1500 : 400);
      const random = seededRandom(seed * 15_485_863);
      for (let planIndex = 0; planIndex < 5; planIndex++) {
        // Every fourth plan has one-day periods over a long range: more than 2 048 pairs, the per-user path.
        const manyPeriods = planIndex === 4;
        const windowDays = manyPeriods ? 1 : pick(random, [1, 2, 3, 7, 7, 30]);
        const fromDay = randomInteger(random, Math.max(1, dataset.dayCount)) - 2;
        const dayCount = manyPeriods ? 66 + randomInteger(random, 40) : 1 + randomInteger(random, dataset.dayCount + 4);
        const dateFrom = msToDate(dataset.firstDayMs + fromDay * dayMs);
        const dateTo = msToDate(dataset.firstDayMs + (fromDay + dayCount - 1) * dayMs);
        const layout = retentionLayout(dateFrom, dateTo, windowDays);
        const cohortEventId = randomEventId(random, dataset);
        const retentionEventId = random() < 0.3 ? cohortEventId : randomEventId(random, dataset);
        const plan = {
          cohortEventId,
          retentionEventId,
          fromMs: layout.fromMs,
          periodMs: layout.periodMs,
          periodCount: layout.periodCount,
          toMsExclusive: layout.toMsExclusive,
        };
        const naive = (userLo: number, userHi: number) =>
          naiveRetention(dataset, cohortEventId, retentionEventId, layout.fromMs, layout.toMsExclusive, layout.periodMs, layout.periodCount, userLo, userHi);
        const partials = randomShards(random, dataset).map(([userLo, userHi]) => {
          const partial = retentionPartial(dataset.segments, plan, userLo, userHi);
          const context = JSON.stringify({ seed, planIndex, plan, userLo, userHi });
          expect({ totals: Array.from(partial.totals), weeks: unflattenWeeks(partial) }, context).toEqual(naive(userLo, userHi));
          return partial;
        });
        const merged = mergeRetentionPartials(partials);
        expect({ totals: Array.from(merged.totals), weeks: unflattenWeeks(merged) }).toEqual(naive(0, 2 ** 32));
      }
    }
  });
});

describe("SPEC §5 worked example", () => {
  // u1 = 0, u2 = 1, u3 = 2; signup = 0, view = 1, purchase = 2.
  const at = (iso: string) => Date.parse(iso);
  const events: FlatEvent[] = [
    { user: 0, eventId: 0, timeMs: at("2024-01-01T10:00:00Z"), properties: [] },
    { user: 0, eventId: 1, timeMs: at("2024-01-01T11:00:00Z"), properties: [] },
    { user: 0, eventId: 2, timeMs: at("2024-01-03T09:00:00Z"), properties: [] },
    { user: 1, eventId: 0, timeMs: at("2024-01-02T08:00:00Z"), properties: [] },
    { user: 1, eventId: 2, timeMs: at("2024-01-02T08:30:00Z"), properties: [] },
    { user: 2, eventId: 1, timeMs: at("2024-01-09T00:00:00Z"), properties: [] },
    { user: 2, eventId: 0, timeMs: at("2024-01-09T01:00:00Z"), properties: [] },
    { user: 0, eventId: 1, timeMs: at("2024-01-10T12:00:00Z"), properties: [] },
  ];
  const random = seededRandom(5);
  const days = [...new Set(events.map((event) => Math.floor(event.timeMs / dayMs)))];
  const segments = days.map((day) =>
    sealedSegment(
      `day-${day}`,
      segmentInput(random, day * dayMs, events.filter((event) => Math.floor(event.timeMs / dayMs) === day)),
      { bitmaps: true, eventRowStartPadding: 0, valueIdWidth: 8 },
    ),
  );

  it("counts signups per day", () => {
    const layout = trendLayout("2024-01-01", "2024-01-03", "day");
    expect(trendBucketLabels(layout)).toEqual(["2024-01-01", "2024-01-02", "2024-01-03"]);
    expect(Array.from(trendPartial(segments, { eventId: 0, layout, filters: [], math: "total" }, 0, 3))).toEqual([1, 1, 0]);
  });

  it("counts the funnels with one-day and three-day windows", () => {
    const funnel = (stepEventIds: number[], windowSeconds: number) =>
      Array.from(
        funnelPartial(
          segments,
          { stepEventIds, entryFromMs: at("2024-01-01T00:00:00Z"), entryToMsExclusive: at("2024-02-01T00:00:00Z"), windowMs: windowSeconds * 1000 },
          0,
          3,
        ),
      );
    expect(funnel([0, 1, 2], 86_400)).toEqual([3, 1, 0]);
    expect(funnel([0, 1, 2], 259_200)).toEqual([3, 1, 1]);
    expect(funnel([0, 2], 86_400)).toEqual([3, 1]);
  });

  it("builds the weekly signup → view cohorts", () => {
    const layout = retentionLayout("2024-01-01", "2024-01-14", 7);
    expect(retentionPeriodLabels(layout)).toEqual(["2024-01-01", "2024-01-08"]);
    const partial = retentionPartial(
      segments,
      { cohortEventId: 0, retentionEventId: 1, fromMs: layout.fromMs, periodMs: layout.periodMs, periodCount: layout.periodCount, toMsExclusive: layout.toMsExclusive },
      0,
      3,
    );
    expect(Array.from(partial.totals)).toEqual([2, 1]);
    expect(unflattenWeeks(partial)).toEqual([[2, 1], [1]]);
  });
});
