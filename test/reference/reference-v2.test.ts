/**
 * The SPEC §7 reference checked by hand: local days of 23 and 25 hours, hours
 * repeated or skipped, a half-hour zone, a date a zone skipped altogether,
 * breakdown ranks and ties, strict and unordered funnels, exclusions at equal
 * timestamps, times to convert and per-user averages, each on events small
 * enough to work out on paper. Then properties that must hold on any data.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { storedEvent, workedExample } from "./worked-example.js";
import type { StoredEvent } from "./reference.js";
import {
  type FunnelQueryV2,
  type TrendQueryV2,
  LocalTime,
  hourRuns,
  referenceEvents,
  referenceFunnelV2,
  referenceProperties,
  referenceRetentionV2,
  referenceTrendV2,
  resolveZone,
} from "./reference-v2.js";

const hourMs = 3_600_000;
const minuteMs = 60_000;

const event = storedEvent;

function counts(answer: { steps: { count: number }[] }): number[] {
  return answer.steps.map((step) => step.count);
}

function dataCounts(answer: { data: unknown[] }): number[] {
  return answer.data.map((point) => (point as { count: number }).count);
}

/** The local hours of one local day, as two-digit strings. */
function localHours(zone: string, date: string, nextDate: string): string[] {
  const local = new LocalTime(zone, date, date);
  return hourRuns(local, local.dayStart(date), local.dayStart(nextDate)).map((run) => run.label.slice(11, 13));
}

function localDayHours(zone: string, date: string, nextDate: string): number {
  const local = new LocalTime(zone, date, date);
  return (local.dayStart(nextDate) - local.dayStart(date)) / hourMs;
}


describe("the v2 reference answers the SPEC §5 worked example as §4 does", () => {
  it("trend, funnels and retention, also with timezone UTC and references as objects", () => {
    for (const timezone of [undefined, "UTC", "utc", "Etc/UTC"]) {
      const zone = timezone === undefined ? {} : { timezone };
      expect(referenceTrendV2(workedExample, { event: { event: "signup" }, dateFrom: "2024-01-01", dateTo: "2024-01-03", ...zone })).toEqual({
        data: [
          { date: "2024-01-01", count: 1 },
          { date: "2024-01-02", count: 1 },
          { date: "2024-01-03", count: 0 },
        ],
      });
      const funnel = { steps: ["signup", { event: "view" }, "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-31", ...zone };
      expect(counts(referenceFunnelV2(workedExample, { ...funnel, conversionWindow: 86_400 }))).toEqual([3, 1, 0]);
      expect(counts(referenceFunnelV2(workedExample, { ...funnel, conversionWindow: 259_200 }))).toEqual([3, 1, 1]);
      expect(counts(referenceFunnelV2(workedExample, { steps: ["signup", "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-31", ...zone }))).toEqual([3, 1]);
      expect(
        referenceRetentionV2(workedExample, { cohortEvent: "signup", retentionEvent: "view", dateFrom: "2024-01-01", dateTo: "2024-01-14", windowDays: 7, ...zone }),
      ).toEqual({
        cohorts: [
          { cohortDate: "2024-01-01", total: 2, weeks: [2, 1] },
          { cohortDate: "2024-01-08", total: 1, weeks: [1] },
        ],
      });
    }
  });
});

describe("local time in a zone", () => {
  it("repeats the hours 02 and 03 in Pacific/Chatham when the clocks go back at 03:45, in a day of 25 hours", () => {
    expect(localDayHours("Pacific/Chatham", "2024-04-07", "2024-04-08")).toBe(25);
    expect(localHours("Pacific/Chatham", "2024-04-07", "2024-04-08").slice(0, 8)).toEqual(["00", "01", "02", "03", "02", "03", "04", "05"]);
    // +13:45 until 14:00Z, then +12:45: the first 03 lasts 45 minutes and the second 02 only 15.
    const events = [
      event("u", "a", "2024-04-06T12:45:00Z"), // 02:30, first time
      event("u", "a", "2024-04-06T13:59:59.999Z"), // 03:44:59.999, first time
      event("u", "a", "2024-04-06T14:00:00Z"), // 02:45, second time
      event("u", "a", "2024-04-06T14:10:00Z"), // 02:55, second time
      event("u", "a", "2024-04-06T14:30:00Z"), // 03:15, second time
    ];
    const answer = referenceTrendV2(events, { event: "a", dateFrom: "2024-04-07", dateTo: "2024-04-07", groupBy: "hour", timezone: "Pacific/Chatham" });
    // 25 hours in 26 buckets: 00 01 02 03 02 03 04 … 23.
    expect(answer.data.length).toBe(26);
    expect(answer.data.slice(0, 7)).toEqual([
      { date: "2024-04-07 00:00:00", count: 0 },
      { date: "2024-04-07 01:00:00", count: 0 },
      { date: "2024-04-07 02:00:00", count: 1 },
      { date: "2024-04-07 03:00:00", count: 1 },
      { date: "2024-04-07 02:00:00", count: 2 },
      { date: "2024-04-07 03:00:00", count: 1 },
      { date: "2024-04-07 04:00:00", count: 0 },
    ]);
  });

  it("has no bucket for the hour Europe/Berlin skips, in a day of 23 hours, and 25 hours in October", () => {
    expect(localDayHours("Europe/Berlin", "2024-03-31", "2024-04-01")).toBe(23);
    expect(localHours("Europe/Berlin", "2024-03-31", "2024-04-01").slice(0, 4)).toEqual(["00", "01", "03", "04"]);
    expect(localDayHours("Europe/Berlin", "2024-10-27", "2024-10-28")).toBe(25);
    expect(localHours("Europe/Berlin", "2024-10-27", "2024-10-28").slice(0, 5)).toEqual(["00", "01", "02", "02", "03"]);
    const events = [
      event("u", "a", "2024-03-30T22:59:59.999Z"), // 23:59:59.999 on the 30th
      event("u", "a", "2024-03-30T23:00:00Z"), // 00:00 on the 31st
      event("u", "a", "2024-03-31T21:59:59.999Z"), // 23:59:59.999 on the 31st (CEST)
      event("u", "a", "2024-03-31T22:00:00Z"), // 00:00 on 1 April
    ];
    const answer = referenceTrendV2(events, { event: "a", dateFrom: "2024-03-30", dateTo: "2024-04-01", timezone: "Europe/Berlin" });
    expect(answer.data).toEqual([
      { date: "2024-03-30", count: 1 },
      { date: "2024-03-31", count: 2 },
      { date: "2024-04-01", count: 1 },
    ]);
    const inUtc = referenceTrendV2(events, { event: "a", dateFrom: "2024-03-30", dateTo: "2024-04-01" });
    expect(dataCounts(inUtc)).toEqual([2, 2, 0]);
  });

  it("cuts Asia/Kolkata's days and hours at half past UTC hours, and its alias answers the same", () => {
    const events = [
      event("u", "a", "2023-12-31T18:29:59.999Z"), // 23:59:59.999 on 31 December
      event("u", "a", "2023-12-31T18:30:00Z"), // 00:00 on 1 January
      event("u", "a", "2024-01-01T00:00:00Z"), // 05:30
      event("u", "a", "2024-01-01T18:29:59.999Z"), // 23:59:59.999 on 1 January
    ];
    for (const timezone of ["Asia/Kolkata", "Asia/Calcutta", "ASIA/KOLKATA"]) {
      expect(dataCounts(referenceTrendV2(events, { event: "a", dateFrom: "2024-01-01", dateTo: "2024-01-01", timezone }))).toEqual([3]);
      const hours = referenceTrendV2(events, { event: "a", dateFrom: "2024-01-01", dateTo: "2024-01-01", groupBy: "hour", timezone });
      expect(hours.data.length).toBe(24);
      expect(hours.data[0]).toEqual({ date: "2024-01-01 00:00:00", count: 1 });
      expect(hours.data[5]).toEqual({ date: "2024-01-01 05:00:00", count: 1 });
      expect(hours.data[23]).toEqual({ date: "2024-01-01 23:00:00", count: 1 });
    }
  });

  it("gives a date Pacific/Apia skipped no instant and no day bucket", () => {
    expect(localDayHours("Pacific/Apia", "2011-12-30", "2011-12-31")).toBe(0);
    const events = [event("u", "a", "2011-12-30T09:59:59.999Z"), event("u", "a", "2011-12-30T10:00:00Z")];
    expect(referenceTrendV2(events, { event: "a", dateFrom: "2011-12-29", dateTo: "2011-12-31", timezone: "Pacific/Apia" }).data).toEqual([
      { date: "2011-12-29", count: 1 },
      { date: "2011-12-31", count: 1 },
    ]);
    expect(referenceTrendV2(events, { event: "a", dateFrom: "2011-12-30", dateTo: "2011-12-30", timezone: "Pacific/Apia" }).data).toEqual([]);
    expect(counts(referenceFunnelV2(events, { steps: ["a"], dateFrom: "2011-12-30", dateTo: "2011-12-30", timezone: "Pacific/Apia" }))).toEqual([0]);
    // Retention periods are calendar days; the period of 30–31 December holds only the 31st.
    expect(
      referenceRetentionV2(events, { cohortEvent: "a", retentionEvent: "a", dateFrom: "2011-12-28", dateTo: "2011-12-31", windowDays: 2, timezone: "Pacific/Apia" }),
    ).toEqual({
      cohorts: [
        { cohortDate: "2011-12-28", total: 1, weeks: [1, 1] },
        { cohortDate: "2011-12-30", total: 0, weeks: [0] },
      ],
    });
  });

  it("refuses a zone Intl does not know", () => {
    expect(() => resolveZone("Mars/Olympus")).toThrow(/timezone/);
    expect(() => resolveZone("")).toThrow(/timezone/);
    expect(() => referenceTrendV2([], { event: "a", dateFrom: "2024-01-01", dateTo: "2024-01-01", timezone: "+01:00" })).toThrow(/timezone/);
  });
});

describe("breakdowns", () => {
  const events = [
    event("u1", "a", "2024-01-01T10:00:00Z", { p: "b" }),
    event("u2", "a", "2024-01-01T11:00:00Z", { p: "a" }),
    event("u3", "a", "2024-01-01T12:00:00Z", { p: null }),
    event("u4", "a", "2024-01-02T12:00:00Z"),
    event("u5", "a", "2024-01-02T12:00:00Z", { p: 1 }),
    event("u5", "a", "2024-01-02T13:00:00Z", { p: true }),
    event("u6", "a", "2024-01-02T14:00:00Z", { p: "B" }),
  ];
  const query: TrendQueryV2 = { event: "a", dateFrom: "2024-01-01", dateTo: "2024-01-02", breakdown: "p" };

  it("ranks by total, then by value with null last and strings by UTF-16 code units", () => {
    const answer = referenceTrendV2(events, query);
    expect(answer.data).toEqual([
      { date: "2024-01-01", count: 3 },
      { date: "2024-01-02", count: 4 },
    ]);
    expect(answer.breakdown!.map((series) => series.value)).toEqual([null, "1", "B", "a", "b", "true"]);
    expect(answer.breakdown![0].data).toEqual([
      { date: "2024-01-01", count: 1 },
      { date: "2024-01-02", count: 1 },
    ]);
    expect(answer.breakdownOther).toBeUndefined();
  });

  it("puts every value left out by breakdownLimit in breakdownOther", () => {
    const answer = referenceTrendV2(events, { ...query, breakdownLimit: 2 });
    expect(answer.breakdown!.map((series) => series.value)).toEqual([null, "1"]);
    expect(answer.breakdownOther).toEqual({
      data: [
        { date: "2024-01-01", count: 2 },
        { date: "2024-01-02", count: 2 },
      ],
    });
    expect(() => referenceTrendV2(events, { event: "a", dateFrom: "2024-01-01", dateTo: "2024-01-02", breakdownLimit: 2 })).toThrow(/breakdownLimit/);
  });

  it("gives a funnel user the least value among equal earliest step-1 events, null first", () => {
    const funnelEvents = [
      event("u1", "a", "2024-01-01T10:00:00Z", { p: "x" }),
      event("u1", "a", "2024-01-01T10:00:00Z"),
      event("u1", "b", "2024-01-01T11:00:00Z"),
      event("u2", "a", "2024-01-01T10:00:00Z", { p: "y" }),
      event("u2", "a", "2024-01-01T10:00:00Z", { p: "x" }),
      event("u3", "a", "2023-12-31T10:00:00Z", { p: "z" }), // before the range: u3's value comes from the next one
      event("u3", "a", "2024-01-02T10:00:00Z", { p: "y" }),
      event("u3", "b", "2024-01-02T10:00:00Z"),
    ];
    const answer = referenceFunnelV2(funnelEvents, { steps: ["a", "b"], dateFrom: "2024-01-01", dateTo: "2024-01-07", breakdown: "p" });
    expect(counts(answer)).toEqual([3, 2]);
    expect(answer.breakdown!.map((series) => [series.value, counts(series)])).toEqual([
      ["x", [1, 0]],
      ["y", [1, 1]],
      [null, [1, 1]],
    ]);
  });
});

describe("trend maths over a property", () => {
  const events = [
    event("u1", "a", "2024-01-01T10:00:00Z", { n: 5 }),
    event("u1", "a", "2024-01-01T11:00:00Z", { n: "2.5e1" }),
    event("u2", "a", "2024-01-01T12:00:00Z", { n: "1e400" }),
    event("u2", "a", "2024-01-01T13:00:00Z", { n: " 5" }),
    event("u2", "a", "2024-01-01T14:00:00Z", { n: true }),
    event("u3", "a", "2024-01-01T15:00:00Z", { n: -3 }),
  ];
  const query = { event: "a", dateFrom: "2024-01-01", dateTo: "2024-01-02" } as const;

  it("sums, averages and takes extremes of the numeric values only, with null where nothing counts", () => {
    const values = (math: TrendQueryV2["math"]): unknown[] =>
      referenceTrendV2(events, { ...query, math, mathProperty: "n" }).data.map((point) => (point as { value: unknown }).value);
    expect(values("sum")).toEqual([27, 0]);
    expect(values("avg")).toEqual([9, null]);
    expect(values("min")).toEqual([-3, null]);
    expect(values("max")).toEqual([25, null]);
    expect(() => referenceTrendV2(events, { ...query, math: "total", mathProperty: "n" })).toThrow(/mathProperty/);
    expect(() => referenceTrendV2(events, { ...query, math: "sum" })).toThrow(/mathProperty/);
  });

  it("divides events by distinct users for avg_per_user, 0 in an empty bucket", () => {
    expect(referenceTrendV2(events, { ...query, math: "avg_per_user" }).data).toEqual([
      { date: "2024-01-01", value: 2 },
      { date: "2024-01-02", value: 0 },
    ]);
    const three = referenceTrendV2(events.slice(0, 3), { ...query, math: "avg_per_user" });
    expect(three.data[0]).toEqual({ date: "2024-01-01", value: 1.5 });
  });

  it("ranks math series by their number of events, so a series may sum to 0", () => {
    const answer = referenceTrendV2(
      [...events, event("u9", "a", "2024-01-02T10:00:00Z", { n: "x", k: "only" }), event("u9", "a", "2024-01-02T11:00:00Z", { n: "y", k: "only" })],
      { ...query, math: "sum", mathProperty: "n", breakdown: "k" },
    );
    expect(answer.breakdown!.map((series) => [series.value, series.data.map((point) => (point as { value: unknown }).value)])).toEqual([
      [null, [27, 0]],
      ["only", [0, 0]],
    ]);
  });
});

describe("funnel orders, exclusions and times to convert", () => {
  const range = { dateFrom: "2024-01-01", dateTo: "2024-01-01" };

  it("strict: another event strictly between breaks the chain, one at an equal timestamp does not", () => {
    const between = [event("u", "a", "2024-01-01T10:00:00Z"), event("u", "x", "2024-01-01T10:30:00Z"), event("u", "b", "2024-01-01T11:00:00Z")];
    expect(counts(referenceFunnelV2(between, { steps: ["a", "b"], ...range }))).toEqual([1, 1]);
    expect(counts(referenceFunnelV2(between, { steps: ["a", "b"], ...range, order: "strict" }))).toEqual([1, 0]);
    const tied = [event("u", "a", "2024-01-01T10:00:00Z"), event("u", "x", "2024-01-01T10:00:00Z"), event("u", "b", "2024-01-01T11:00:00Z")];
    expect(counts(referenceFunnelV2(tied, { steps: ["a", "b"], ...range, order: "strict" }))).toEqual([1, 1]);
    // A later a, right before b, makes a strict chain.
    const retry = [...between, event("u", "a", "2024-01-01T10:45:00Z")];
    expect(counts(referenceFunnelV2(retry, { steps: ["a", "b"], ...range, order: "strict" }))).toEqual([1, 1]);
  });

  it("exclusions: strict on both sides, other than the chain's own events", () => {
    const steps = ["a", "b"];
    const exclusions = [{ event: "x", fromStep: 1, toStep: 2 }];
    const atStart = [event("u", "a", "2024-01-01T10:00:00Z"), event("u", "x", "2024-01-01T10:00:00Z"), event("u", "b", "2024-01-01T11:00:00Z")];
    expect(counts(referenceFunnelV2(atStart, { steps, ...range, exclusions }))).toEqual([1, 1]);
    const atEnd = [event("u", "a", "2024-01-01T10:00:00Z"), event("u", "x", "2024-01-01T11:00:00Z"), event("u", "b", "2024-01-01T11:00:00Z")];
    expect(counts(referenceFunnelV2(atEnd, { steps, ...range, exclusions }))).toEqual([1, 1]);
    const inside = [event("u", "a", "2024-01-01T10:00:00Z"), event("u", "x", "2024-01-01T10:00:00.001Z"), event("u", "b", "2024-01-01T11:00:00Z")];
    expect(counts(referenceFunnelV2(inside, { steps, ...range, exclusions }))).toEqual([1, 0]);
    // The chain's own x does not exclude it; another x between does.
    const own = [event("u", "a", "2024-01-01T10:00:00Z"), event("u", "x", "2024-01-01T10:30:00Z"), event("u", "b", "2024-01-01T11:00:00Z")];
    const withOwn = { steps: ["a", "x", "b"], ...range, exclusions: [{ event: "x", fromStep: 1, toStep: 3 }] };
    expect(counts(referenceFunnelV2(own, withOwn))).toEqual([1, 1, 1]);
    expect(counts(referenceFunnelV2([...own, event("u", "x", "2024-01-01T10:40:00Z")], withOwn))).toEqual([1, 1, 0]);
    // A later entry after the x makes a valid chain again.
    expect(counts(referenceFunnelV2([...inside, event("u", "a", "2024-01-01T10:30:00Z")], { steps, ...range, exclusions }))).toEqual([1, 1]);
    // An exclusion reference with filters: only matching events exclude.
    const filtered = [{ event: { event: "x", filters: [{ property: "k", op: "eq" as const, value: "yes" }] }, fromStep: 1, toStep: 2 }];
    expect(counts(referenceFunnelV2(inside, { steps, ...range, exclusions: filtered }))).toEqual([1, 1]);
    expect(() => referenceFunnelV2(inside, { steps, ...range, exclusions, order: "unordered" })).toThrow(/unordered/);
  });

  it("unordered: any order, the earliest in range, the rest within the window of it", () => {
    const reversed = [event("u", "b", "2024-01-01T10:00:00Z"), event("u", "a", "2024-01-01T11:00:00Z")];
    expect(counts(referenceFunnelV2(reversed, { steps: ["a", "b"], ...range }))).toEqual([1, 0]);
    expect(counts(referenceFunnelV2(reversed, { steps: ["a", "b"], ...range, order: "unordered" }))).toEqual([1, 1]);
    // c in range, a and b the next day: only the set of three has its earliest in range.
    const late = [event("u", "c", "2024-01-01T23:00:00Z"), event("u", "a", "2024-01-02T01:00:00Z"), event("u", "b", "2024-01-02T02:00:00Z")];
    const answer = referenceFunnelV2(late, { steps: ["a", "b", "c"], ...range, order: "unordered", timeToConvert: true });
    expect(answer.steps).toEqual([
      { event: "a", count: 1, rate: 1 },
      { event: "b", count: 1, rate: 1, medianTimeToConvertMs: null, avgTimeToConvertMs: null },
      { event: "c", count: 1, rate: 1, medianTimeToConvertMs: 3 * hourMs, avgTimeToConvertMs: 3 * hourMs },
    ]);
    // A repeated step needs two distinct events.
    expect(counts(referenceFunnelV2([event("u", "a", "2024-01-01T10:00:00Z")], { steps: ["a", "a"], ...range, order: "unordered" }))).toEqual([1, 0]);
  });

  it("medians of an even count are the mean of the two middle users' shortest times", () => {
    const events: StoredEvent[] = [];
    for (const [user, minutes] of [["u1", 1], ["u2", 2], ["u3", 3], ["u4", 10]] as const) {
      events.push(event(user, "a", "2024-01-01T10:00:00Z"));
      events.push(event(user, "b", new Date(Date.parse("2024-01-01T10:00:00Z") + minutes * minuteMs).toISOString()));
      events.push(event(user, "b", new Date(Date.parse("2024-01-01T10:00:00Z") + (minutes + 30) * minuteMs).toISOString()));
    }
    const answer = referenceFunnelV2(events, { steps: ["a", "b"], ...range, timeToConvert: true });
    expect(answer.steps[1]).toEqual({ event: "b", count: 4, rate: 1, medianTimeToConvertMs: 2.5 * minuteMs, avgTimeToConvertMs: 4 * minuteMs });
    expect(answer.steps[0]).toEqual({ event: "a", count: 4, rate: 1 });
  });
});

describe("what the workspace holds", () => {
  it("lists event names and property keys by count, then name; null values are not set", () => {
    const events = [
      event("u", "b", "2024-01-01T10:00:00Z", { k: 1, z: null }),
      event("u", "a", "2024-01-01T10:00:00Z", { k: "x", j: {} }),
      event("u", "b", "2024-01-01T10:00:00Z"),
    ];
    expect(referenceEvents(events)).toEqual({ data: [{ event: "b", count: 2 }, { event: "a", count: 1 }] });
    expect(referenceProperties(events)).toEqual({ data: [{ property: "k", count: 2 }, { property: "j", count: 1 }] });
    expect(referenceProperties(events, "b")).toEqual({ data: [{ property: "k", count: 1 }] });
  });
});

// ---------------------------------------------------------------------------
// Properties

const names = ["a", "b", "c"];
const zones = ["UTC", "Pacific/Chatham", "Europe/Berlin", "America/St_Johns"];
const eventArbitrary = fc.record({
  event: fc.constantFrom(...names),
  distinctId: fc.constantFrom("u1", "u2", "u3", "u4"),
  // Three days around Berlin's switch back, on a coarse grid so timestamps collide.
  timestampMs: fc.integer({ min: 0, max: 3 * 96 }).map((quarter) => Date.parse("2024-10-26T00:00:00Z") + quarter * 15 * minuteMs),
  properties: fc.option(fc.record({ p: fc.constantFrom<unknown>("x", "y", 1, true, null, { a: 1 }) }, { requiredKeys: [] }), { nil: undefined }),
});
const eventsArbitrary = fc.array(eventArbitrary, { maxLength: 40 });
const funnelArbitrary = fc.record({
  steps: fc.array(fc.constantFrom(...names), { minLength: 1, maxLength: 4 }),
  conversionWindow: fc.constantFrom(900, 3600, 86_400),
  timezone: fc.constantFrom(...zones),
  dateTo: fc.constantFrom("2024-10-26", "2024-10-27"),
});

function funnelQuery(shape: { steps: string[]; conversionWindow: number; timezone: string; dateTo: string }): FunnelQueryV2 {
  return { ...shape, dateFrom: "2024-10-26" };
}

describe("properties of the reference on any small data", () => {
  it("a breakdown's series and breakdownOther add up to the total for math total", () => {
    fc.assert(
      fc.property(eventsArbitrary, fc.constantFrom(...zones), fc.constantFrom("hour", "day") as fc.Arbitrary<"hour" | "day">, fc.integer({ min: 1, max: 4 }), (events, timezone, groupBy, breakdownLimit) => {
        const answer = referenceTrendV2(events, { event: "a", dateFrom: "2024-10-26", dateTo: "2024-10-27", timezone, groupBy, breakdown: "p", breakdownLimit });
        const sums = dataCounts(answer).map(() => 0);
        for (const series of [...answer.breakdown!, ...(answer.breakdownOther === undefined ? [] : [answer.breakdownOther])]) {
          dataCounts(series).forEach((count, index) => (sums[index] += count));
        }
        expect(sums).toEqual(dataCounts(answer));
      }),
      { numRuns: 200 },
    );
  });

  it("unordered reaches at least as deep as ordered, strict never deeper, and counts never grow along the steps", () => {
    fc.assert(
      fc.property(eventsArbitrary, funnelArbitrary, (events, shape) => {
        const ordered = counts(referenceFunnelV2(events, funnelQuery(shape)));
        const strict = counts(referenceFunnelV2(events, { ...funnelQuery(shape), order: "strict" }));
        const unordered = counts(referenceFunnelV2(events, { ...funnelQuery(shape), order: "unordered" }));
        ordered.forEach((count, step) => {
          expect(strict[step]).toBeLessThanOrEqual(count);
          expect(unordered[step]).toBeGreaterThanOrEqual(count);
          if (step > 0) expect(count).toBeLessThanOrEqual(ordered[step - 1]);
        });
      }),
      { numRuns: 200 },
    );
  });

  it("an exclusion never makes a count grow", () => {
    fc.assert(
      fc.property(eventsArbitrary, funnelArbitrary, fc.constantFrom(...names), fc.boolean(), (events, shape, excludedName, strict) => {
        fc.pre(shape.steps.length >= 2);
        const base = { ...funnelQuery(shape), order: strict ? ("strict" as const) : ("ordered" as const) };
        const without = counts(referenceFunnelV2(events, base));
        const withExclusion = counts(referenceFunnelV2(events, { ...base, exclusions: [{ event: excludedName, fromStep: 1, toStep: shape.steps.length }] }));
        withExclusion.forEach((count, step) => expect(count).toBeLessThanOrEqual(without[step]));
      }),
      { numRuns: 200 },
    );
  });
});
