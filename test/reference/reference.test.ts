/**
 * The reference implementation checked by hand against SPEC §4 and §5. The
 * differential tests trust the reference, so every rule the engine could get
 * subtly wrong — filter texts, tie timestamps, repeated steps, window edges,
 * cohort membership, bucket edges — is pinned here on events small enough to
 * reason about.
 */
import { describe, expect, it } from "vitest";
import { storedEvent, workedExample } from "./worked-example.js";
import {
  type Filter,
  type StoredEvent,
  filterHolds,
  propertyText,
  referenceFunnel,
  referenceRetention,
  referenceTrend,
} from "./reference.js";
import { Random } from "../helpers/random.js";

const event = storedEvent;

const hourMs = 3_600_000;

function counts(answer: { steps: { count: number }[] }): number[] {
  return answer.steps.map((step) => step.count);
}


describe("the reference gives the answers of the SPEC §5 worked example", () => {
  it("counts signups per day, zeros included", () => {
    expect(referenceTrend(workedExample, { event: "signup", dateFrom: "2024-01-01", dateTo: "2024-01-03", groupBy: "day" })).toEqual({
      data: [
        { date: "2024-01-01", count: 1 },
        { date: "2024-01-02", count: 1 },
        { date: "2024-01-03", count: 0 },
      ],
    });
  });

  it("counts the signup → view → purchase funnel as [3, 1, 0] in one day and [3, 1, 1] in three", () => {
    const oneDay = referenceFunnel(workedExample, {
      steps: ["signup", "view", "purchase"],
      dateFrom: "2024-01-01",
      dateTo: "2024-01-31",
      conversionWindow: 86_400,
    });
    expect(oneDay).toEqual({
      steps: [
        { event: "signup", count: 3, rate: 1 },
        { event: "view", count: 1, rate: 1 / 3 },
        { event: "purchase", count: 0, rate: 0 },
      ],
    });
    const threeDays = referenceFunnel(workedExample, {
      steps: ["signup", "view", "purchase"],
      dateFrom: "2024-01-01",
      dateTo: "2024-01-31",
      conversionWindow: 259_200,
    });
    expect(counts(threeDays)).toEqual([3, 1, 1]);
  });

  it("counts the signup → purchase funnel as [3, 1], and the window defaults to one day", () => {
    const query = { steps: ["signup", "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-31" };
    expect(counts(referenceFunnel(workedExample, { ...query, conversionWindow: 86_400 }))).toEqual([3, 1]);
    expect(referenceFunnel(workedExample, query)).toEqual(referenceFunnel(workedExample, { ...query, conversionWindow: 86_400 }));
  });

  it("gives the signup → view retention of two weekly cohorts", () => {
    const query = { cohortEvent: "signup", retentionEvent: "view", dateFrom: "2024-01-01", dateTo: "2024-01-14" };
    const expected = {
      cohorts: [
        { cohortDate: "2024-01-01", total: 2, weeks: [2, 1] },
        { cohortDate: "2024-01-08", total: 1, weeks: [1] },
      ],
    };
    expect(referenceRetention(workedExample, { ...query, windowDays: 7 })).toEqual(expected);
    expect(referenceRetention(workedExample, query)).toEqual(expected);
  });
});

describe("the reference filters events as SPEC §4 says", () => {
  // Parsed from JSON so that `__proto__` is an own key, as it is for a stored event.
  const properties = JSON.parse(
    JSON.stringify({
      text: "Hello World",
      empty: "",
      tenText: "10",
      scientificText: "2.5e3",
      negativeZeroText: "-0",
      spacedText: " 5",
      plusText: "+5",
      dotText: ".5",
      hexText: "0x10",
      integer: 10,
      fraction: -2.5,
      large: 1e21,
      tiny: 2.5e-7,
      yes: true,
      no: false,
      nothing: null,
      object: { a: 1, b: [1, "x"] },
      array: [1, "two", null],
    }).replace("{", '{"__proto__":"prototype","constructor":7,'),
  ) as Record<string, unknown>;

  function holds(property: string, op: Filter["op"], value?: string): boolean {
    return filterHolds(properties, value === undefined ? { property, op } : { property, op, value });
  }

  it("reads own keys such as __proto__ and constructor, and nothing inherited", () => {
    expect(Object.hasOwn(properties, "__proto__")).toBe(true);
    expect(propertyText(properties, "__proto__")).toBe("prototype");
    expect(propertyText(properties, "constructor")).toBe("7");
    expect(propertyText(properties, "toString")).toBeUndefined();
    expect(propertyText(properties, "hasOwnProperty")).toBeUndefined();
    expect(propertyText(undefined, "text")).toBeUndefined();
    expect(holds("constructor", "gt", "6")).toBe(true);
    expect(holds("toString", "is_set")).toBe(false);
    expect(holds("__proto__", "eq", "prototype")).toBe(true);
  });

  it("gives each kind of value its text", () => {
    expect(propertyText(properties, "integer")).toBe("10");
    expect(propertyText(properties, "fraction")).toBe("-2.5");
    expect(propertyText(properties, "large")).toBe("1e+21");
    expect(propertyText(properties, "tiny")).toBe("2.5e-7");
    expect(propertyText(properties, "yes")).toBe("true");
    expect(propertyText(properties, "no")).toBe("false");
    expect(propertyText(properties, "object")).toBe('{"a":1,"b":[1,"x"]}');
    expect(propertyText(properties, "array")).toBe('[1,"two",null]');
    expect(propertyText(properties, "empty")).toBe("");
    expect(propertyText(properties, "nothing")).toBeUndefined();
    expect(propertyText(properties, "absent")).toBeUndefined();
  });

  it("eq compares texts exactly, and never holds for a property that is not set", () => {
    expect(holds("text", "eq", "Hello World")).toBe(true);
    expect(holds("text", "eq", "hello world")).toBe(false);
    expect(holds("integer", "eq", "10")).toBe(true);
    expect(holds("integer", "eq", "10.0")).toBe(false);
    expect(holds("scientificText", "eq", "2500")).toBe(false);
    expect(holds("large", "eq", "1e+21")).toBe(true);
    expect(holds("yes", "eq", "true")).toBe(true);
    expect(holds("object", "eq", '{"a":1,"b":[1,"x"]}')).toBe(true);
    expect(holds("array", "eq", '[1,"two",null]')).toBe(true);
    expect(holds("empty", "eq", "")).toBe(true);
    expect(holds("nothing", "eq", "null")).toBe(false);
    expect(holds("absent", "eq", "")).toBe(false);
  });

  it("neq is the negation of eq, so an event without the property passes", () => {
    expect(holds("text", "neq", "Hello World")).toBe(false);
    expect(holds("text", "neq", "other")).toBe(true);
    expect(holds("nothing", "neq", "null")).toBe(true);
    expect(holds("absent", "neq", "x")).toBe(true);
    expect(filterHolds(undefined, { property: "text", op: "neq", value: "x" })).toBe(true);
  });

  it("contains is case-sensitive, holds for the empty string on set properties, and looks into JSON texts", () => {
    expect(holds("text", "contains", "lo Wo")).toBe(true);
    expect(holds("text", "contains", "hello")).toBe(false);
    expect(holds("text", "contains", "")).toBe(true);
    expect(holds("empty", "contains", "")).toBe(true);
    expect(holds("object", "contains", '"b":[1')).toBe(true);
    expect(holds("fraction", "contains", "2.5")).toBe(true);
    expect(holds("no", "contains", "fal")).toBe(true);
    expect(holds("nothing", "contains", "")).toBe(false);
    expect(holds("absent", "contains", "")).toBe(false);
  });

  it("not_contains is the negation of contains", () => {
    expect(holds("text", "not_contains", "lo Wo")).toBe(false);
    expect(holds("text", "not_contains", "hello")).toBe(true);
    expect(holds("text", "not_contains", "")).toBe(false);
    expect(holds("nothing", "not_contains", "")).toBe(true);
    expect(holds("absent", "not_contains", "x")).toBe(true);
  });

  it("gt, gte, lt and lte compare numbers and numeric strings only", () => {
    expect(holds("integer", "gt", "9")).toBe(true);
    expect(holds("integer", "gt", "10")).toBe(false);
    expect(holds("integer", "gte", "10")).toBe(true);
    expect(holds("integer", "gte", "1e1")).toBe(true);
    expect(holds("integer", "lt", "10.5")).toBe(true);
    expect(holds("integer", "lte", "9.99")).toBe(false);
    expect(holds("fraction", "lt", "-2")).toBe(true);
    expect(holds("fraction", "gte", "-2.5")).toBe(true);
    expect(holds("large", "gt", "999999999999999999999")).toBe(false);
    expect(holds("large", "gte", "1E21")).toBe(true);
    expect(holds("tiny", "gt", "0")).toBe(true);
    // Numeric-looking strings compare as numbers, not as texts ("10" < "9" as texts).
    expect(holds("tenText", "gt", "9")).toBe(true);
    expect(holds("scientificText", "eq", "2.5e3")).toBe(true);
    expect(holds("scientificText", "gte", "2500")).toBe(true);
    expect(holds("scientificText", "lt", "2500")).toBe(false);
    expect(holds("negativeZeroText", "gte", "0")).toBe(true);
    expect(holds("negativeZeroText", "lte", "0")).toBe(true);
    expect(holds("negativeZeroText", "lt", "0")).toBe(false);
  });

  it("gt, gte, lt and lte never hold for other texts or values", () => {
    for (const op of ["gt", "gte", "lt", "lte"] as const) {
      // Strings outside ^-?\d+(\.\d+)?([eE][+-]?\d+)?$ take no part, even when Number() would parse them.
      for (const property of ["spacedText", "plusText", "dotText", "hexText", "text", "empty"]) {
        expect(holds(property, op, "0"), `${property} ${op} 0`).toBe(false);
        expect(holds(property, op, "-1e9"), `${property} ${op} -1e9`).toBe(false);
        expect(holds(property, op, "1e9"), `${property} ${op} 1e9`).toBe(false);
      }
      for (const property of ["yes", "no", "nothing", "absent", "object", "array"]) {
        expect(holds(property, op, "0"), `${property} ${op} 0`).toBe(false);
        expect(holds(property, op, "1"), `${property} ${op} 1`).toBe(false);
      }
      for (const value of ["", " 5", "+5", ".5", "5.", "abc", "0x10", "Infinity", "1e", "--1"]) {
        expect(holds("integer", op, value), `integer ${op} ${JSON.stringify(value)}`).toBe(false);
      }
    }
  });

  it("is_set and is_not_set tell set values from absent and null ones", () => {
    for (const property of ["text", "empty", "integer", "no", "object", "array", "__proto__"]) {
      expect(holds(property, "is_set"), property).toBe(true);
      expect(holds(property, "is_not_set"), property).toBe(false);
    }
    for (const property of ["nothing", "absent", "toString"]) {
      expect(holds(property, "is_set"), property).toBe(false);
      expect(holds(property, "is_not_set"), property).toBe(true);
    }
    // The value is ignored when given.
    expect(holds("text", "is_set", "anything")).toBe(true);
    expect(filterHolds(undefined, { property: "text", op: "is_not_set" })).toBe(true);
  });

  it("requires a value for the other ops and refuses unknown ones", () => {
    expect(() => filterHolds(properties, { property: "text", op: "eq" })).toThrow();
    expect(() => filterHolds(properties, { property: "text", op: "like" as Filter["op"], value: "x" })).toThrow();
  });

  it("applies every filter of a trend (AND)", () => {
    const events = [
      event("u1", "buy", "2024-03-01T10:00:00Z", { plan: "pro", price: 10 }),
      event("u2", "buy", "2024-03-01T11:00:00Z", { plan: "pro", price: "25" }),
      event("u3", "buy", "2024-03-01T12:00:00Z", { plan: "free", price: 30 }),
      event("u4", "buy", "2024-03-01T13:00:00Z", { plan: "pro" }),
      event("u5", "buy", "2024-03-01T14:00:00Z"),
    ];
    const answer = referenceTrend(events, {
      event: "buy",
      dateFrom: "2024-03-01",
      dateTo: "2024-03-01",
      filters: [
        { property: "plan", op: "eq", value: "pro" },
        { property: "price", op: "gte", value: "10" },
      ],
    });
    expect(answer).toEqual({ data: [{ date: "2024-03-01", count: 2 }] });
    const none = referenceTrend(events, {
      event: "buy",
      dateFrom: "2024-03-01",
      dateTo: "2024-03-01",
      filters: [{ property: "unknown", op: "eq", value: "" }],
    });
    expect(none.data[0].count).toBe(0);
    const all = referenceTrend(events, {
      event: "buy",
      dateFrom: "2024-03-01",
      dateTo: "2024-03-01",
      filters: [{ property: "unknown", op: "is_not_set" }],
    });
    expect(all.data[0].count).toBe(5);
  });
});

describe("the reference buckets trends as SPEC §4 says", () => {
  it("counts the range's first and last millisecond and nothing outside it", () => {
    const events = [
      event("u1", "a", "2024-01-31T23:59:59.999Z"),
      event("u1", "a", "2024-02-01T00:00:00.000Z"),
      event("u1", "a", "2024-02-02T23:59:59.999Z"),
      event("u1", "a", "2024-02-03T00:00:00.000Z"),
    ];
    expect(referenceTrend(events, { event: "a", dateFrom: "2024-02-01", dateTo: "2024-02-02" })).toEqual({
      data: [
        { date: "2024-02-01", count: 1 },
        { date: "2024-02-02", count: 1 },
      ],
    });
  });

  it("lists every hour of the range, labelled YYYY-MM-DD HH:00:00", () => {
    const events = [
      event("u1", "a", "2024-02-29T00:00:00Z"),
      event("u1", "a", "2024-02-29T05:59:59.999Z"),
      event("u2", "a", "2024-02-29T06:00:00Z"),
      event("u2", "a", "2024-02-29T23:30:00Z"),
    ];
    const answer = referenceTrend(events, { event: "a", dateFrom: "2024-02-29", dateTo: "2024-02-29", groupBy: "hour" });
    expect(answer.data).toHaveLength(24);
    expect(answer.data[0]).toEqual({ date: "2024-02-29 00:00:00", count: 1 });
    expect(answer.data[5]).toEqual({ date: "2024-02-29 05:00:00", count: 1 });
    expect(answer.data[6]).toEqual({ date: "2024-02-29 06:00:00", count: 1 });
    expect(answer.data[23]).toEqual({ date: "2024-02-29 23:00:00", count: 1 });
    expect(answer.data.reduce((sum, bucket) => sum + bucket.count, 0)).toBe(4);
  });

  it("starts week buckets on the ISO Monday before dateFrom but counts only events in range", () => {
    // 2024-01-03 is a Wednesday; its ISO week starts on Monday 2024-01-01.
    const events = [
      event("u1", "a", "2024-01-01T12:00:00Z"),
      event("u1", "a", "2024-01-02T23:59:59.999Z"),
      event("u1", "a", "2024-01-03T00:00:00Z"),
      event("u1", "a", "2024-01-07T23:59:59.999Z"),
      event("u1", "a", "2024-01-08T00:00:00Z"),
      event("u1", "a", "2024-01-09T00:00:00Z"),
      event("u1", "a", "2024-01-10T00:00:00Z"),
    ];
    expect(referenceTrend(events, { event: "a", dateFrom: "2024-01-03", dateTo: "2024-01-09", groupBy: "week" })).toEqual({
      data: [
        { date: "2024-01-01", count: 2 },
        { date: "2024-01-08", count: 2 },
      ],
    });
  });

  it("names a week across the new year by its Monday", () => {
    // ISO week 1 of 2025 starts on Monday 2024-12-30; 2023-01-01 is a Sunday of the week of Monday 2022-12-26.
    const events = [event("u1", "a", "2025-01-01T00:00:00Z"), event("u1", "a", "2023-01-01T00:00:00Z")];
    expect(referenceTrend(events, { event: "a", dateFrom: "2025-01-01", dateTo: "2025-01-01", groupBy: "week" }).data).toEqual([
      { date: "2024-12-30", count: 1 },
    ]);
    expect(referenceTrend(events, { event: "a", dateFrom: "2023-01-01", dateTo: "2023-01-02", groupBy: "week" }).data).toEqual([
      { date: "2022-12-26", count: 1 },
      { date: "2023-01-02", count: 0 },
    ]);
  });

  it("starts month buckets on the first of the month before dateFrom but counts only events in range", () => {
    const events = [
      event("u1", "a", "2024-01-10T00:00:00Z"),
      event("u1", "a", "2024-01-20T00:00:00Z"),
      event("u1", "a", "2024-02-29T23:59:59.999Z"),
      event("u1", "a", "2024-03-01T00:00:00Z"),
      event("u1", "a", "2024-03-05T00:00:00Z"),
    ];
    expect(referenceTrend(events, { event: "a", dateFrom: "2024-01-15", dateTo: "2024-03-04", groupBy: "month" })).toEqual({
      data: [
        { date: "2024-01-01", count: 1 },
        { date: "2024-02-01", count: 1 },
        { date: "2024-03-01", count: 1 },
      ],
    });
  });

  it("counts distinct users per bucket with math unique", () => {
    const events = [
      event("u1", "a", "2024-01-01T01:00:00Z"),
      event("u1", "a", "2024-01-01T02:00:00Z"),
      event("u2", "a", "2024-01-01T02:00:00Z"),
      event("u1", "a", "2024-01-02T02:00:00Z"),
      event("u1", "b", "2024-01-02T02:00:00Z"),
    ];
    const query = { event: "a", dateFrom: "2024-01-01", dateTo: "2024-01-02" };
    expect(referenceTrend(events, { ...query, math: "unique" }).data.map((bucket) => bucket.count)).toEqual([2, 1]);
    expect(referenceTrend(events, { ...query, math: "total" }).data.map((bucket) => bucket.count)).toEqual([3, 1]);
    expect(referenceTrend(events, { ...query, event: "never" }).data.map((bucket) => bucket.count)).toEqual([0, 0]);
  });

  it("refuses more than 10 000 buckets and dateFrom after dateTo", () => {
    expect(referenceTrend([], { event: "a", dateFrom: "2024-01-01", dateTo: "2051-05-18" }).data).toHaveLength(10_000);
    expect(() => referenceTrend([], { event: "a", dateFrom: "2024-01-01", dateTo: "2051-05-19" })).toThrow();
    // 417 days of hours are 10 008 buckets.
    expect(referenceTrend([], { event: "a", dateFrom: "2024-01-01", dateTo: "2025-02-19", groupBy: "hour" }).data).toHaveLength(9_984);
    expect(() => referenceTrend([], { event: "a", dateFrom: "2024-01-01", dateTo: "2025-02-20", groupBy: "hour" })).toThrow();
    expect(() => referenceTrend([], { event: "a", dateFrom: "2024-01-02", dateTo: "2024-01-01" })).toThrow();
    expect(() => referenceTrend([], { event: "a", dateFrom: "2024-02-30", dateTo: "2024-03-01" })).toThrow();
  });
});

describe("the reference runs funnels as SPEC §4 says", () => {
  const range = { dateFrom: "2024-01-01", dateTo: "2024-01-31" };

  it("takes events with equal timestamps as in order, whichever arrived first", () => {
    const events = [event("u1", "b", "2024-01-05T10:00:00Z"), event("u1", "a", "2024-01-05T10:00:00Z")];
    expect(counts(referenceFunnel(events, { steps: ["a", "b"], ...range }))).toEqual([1, 1]);
    expect(counts(referenceFunnel(events, { steps: ["b", "a"], ...range }))).toEqual([1, 1]);
  });

  it("needs distinct events for repeated step names", () => {
    const one = [event("u1", "a", "2024-01-05T10:00:00Z")];
    expect(counts(referenceFunnel(one, { steps: ["a", "a"], ...range }))).toEqual([1, 0]);
    const twoAtOnce = [event("u1", "a", "2024-01-05T10:00:00Z"), event("u1", "a", "2024-01-05T10:00:00Z")];
    expect(counts(referenceFunnel(twoAtOnce, { steps: ["a", "a"], ...range }))).toEqual([1, 1]);
    expect(counts(referenceFunnel(twoAtOnce, { steps: ["a", "a", "a"], ...range }))).toEqual([1, 1, 0]);
    const interleaved = [
      event("u1", "a", "2024-01-05T10:00:00Z"),
      event("u1", "b", "2024-01-05T10:00:00Z"),
      event("u1", "a", "2024-01-05T10:00:00Z"),
    ];
    expect(counts(referenceFunnel(interleaved, { steps: ["a", "b", "a", "b"], ...range }))).toEqual([1, 1, 1, 0]);
    // The second `a` may come before `b` in time only if it is not needed after it.
    const aab = [
      event("u1", "a", "2024-01-05T10:00:00Z"),
      event("u1", "a", "2024-01-05T11:00:00Z"),
      event("u1", "b", "2024-01-05T12:00:00Z"),
    ];
    expect(counts(referenceFunnel(aab, { steps: ["a", "b", "a"], ...range }))).toEqual([1, 1, 0]);
    expect(counts(referenceFunnel(aab, { steps: ["a", "a", "b"], ...range }))).toEqual([1, 1, 1]);
  });

  it("includes a step exactly the window after the first and excludes one a millisecond later", () => {
    const exactly = [event("u1", "a", "2024-01-05T10:00:00.000Z"), event("u1", "b", "2024-01-05T11:00:00.000Z")];
    const later = [event("u2", "a", "2024-01-05T10:00:00.000Z"), event("u2", "b", "2024-01-05T11:00:00.001Z")];
    expect(counts(referenceFunnel(exactly, { steps: ["a", "b"], ...range, conversionWindow: 3600 }))).toEqual([1, 1]);
    expect(counts(referenceFunnel(later, { steps: ["a", "b"], ...range, conversionWindow: 3600 }))).toEqual([1, 0]);
    expect(counts(referenceFunnel(later, { steps: ["a", "b"], ...range, conversionWindow: 3601 }))).toEqual([1, 1]);
    const oneSecond = [event("u1", "a", "2024-01-05T10:00:00.000Z"), event("u1", "b", "2024-01-05T10:00:01.000Z")];
    expect(counts(referenceFunnel(oneSecond, { steps: ["a", "b"], ...range, conversionWindow: 1 }))).toEqual([1, 1]);
  });

  it("measures the window from the first step, not from the previous one", () => {
    const events = [
      event("u1", "a", "2024-01-05T10:00:00Z"),
      event("u1", "b", "2024-01-05T10:40:00Z"),
      event("u1", "c", "2024-01-05T11:20:00Z"),
    ];
    expect(counts(referenceFunnel(events, { steps: ["a", "b", "c"], ...range, conversionWindow: 3600 }))).toEqual([1, 1, 0]);
  });

  it("counts later steps after dateTo inside the window, but enters only in range", () => {
    const events = [
      event("u1", "a", "2024-01-31T23:00:00Z"),
      event("u1", "b", "2024-02-01T01:00:00Z"),
      event("u2", "a", "2024-02-01T00:00:00Z"),
      event("u2", "b", "2024-02-01T00:00:01Z"),
      event("u3", "a", "2023-12-31T23:59:59.999Z"),
      event("u3", "b", "2024-01-01T00:00:00Z"),
    ];
    expect(referenceFunnel(events, { steps: ["a", "b"], ...range, conversionWindow: 86_400 })).toEqual({
      steps: [
        { event: "a", count: 1, rate: 1 },
        { event: "b", count: 1, rate: 1 },
      ],
    });
  });

  it("tries every entry of a user, not only the first", () => {
    const events = [
      event("u1", "a", "2024-01-02T10:00:00Z"),
      event("u1", "a", "2024-01-10T10:00:00Z"),
      event("u1", "b", "2024-01-10T11:00:00Z"),
      // u2's first entry is before the range: only the second one may count.
      event("u2", "a", "2023-12-31T23:00:00Z"),
      event("u2", "b", "2023-12-31T23:30:00Z"),
      event("u2", "a", "2024-01-20T10:00:00Z"),
    ];
    expect(counts(referenceFunnel(events, { steps: ["a", "b"], ...range, conversionWindow: 86_400 }))).toEqual([2, 1]);
  });

  it("counts each user once, at the deepest step any entry reaches", () => {
    const events = [
      event("u1", "a", "2024-01-02T10:00:00Z"),
      event("u1", "b", "2024-01-02T10:10:00Z"),
      event("u1", "a", "2024-01-03T10:00:00Z"),
      event("u1", "b", "2024-01-03T10:10:00Z"),
      event("u1", "c", "2024-01-03T10:20:00Z"),
      event("u2", "a", "2024-01-04T10:00:00Z"),
      event("u2", "a", "2024-01-04T10:00:00Z"),
    ];
    expect(referenceFunnel(events, { steps: ["a", "b", "c"], ...range })).toEqual({
      steps: [
        { event: "a", count: 2, rate: 1 },
        { event: "b", count: 1, rate: 0.5 },
        { event: "c", count: 1, rate: 0.5 },
      ],
    });
  });

  it("answers zeros with step 1 at rate 1 when nobody enters, and zeros for unknown steps", () => {
    const events = [event("u1", "a", "2024-01-05T10:00:00Z")];
    expect(referenceFunnel(events, { steps: ["never", "a"], ...range })).toEqual({
      steps: [
        { event: "never", count: 0, rate: 1 },
        { event: "a", count: 0, rate: 0 },
      ],
    });
    expect(referenceFunnel(events, { steps: ["a", "never", "a"], ...range })).toEqual({
      steps: [
        { event: "a", count: 1, rate: 1 },
        { event: "never", count: 0, rate: 0 },
        { event: "a", count: 0, rate: 0 },
      ],
    });
  });

  it("refuses step counts and windows outside the SPEC's bounds", () => {
    expect(() => referenceFunnel([], { steps: [], ...range })).toThrow();
    expect(() => referenceFunnel([], { steps: new Array(21).fill("a"), ...range })).toThrow();
    expect(() => referenceFunnel([], { steps: ["a"], ...range, conversionWindow: 0 })).toThrow();
    expect(() => referenceFunnel([], { steps: ["a"], ...range, conversionWindow: 31_536_001 })).toThrow();
    expect(() => referenceFunnel([], { steps: ["a"], ...range, conversionWindow: 1.5 })).toThrow();
  });

  it("agrees with an exhaustive enumeration of event tuples on tiny random users", () => {
    const seed = 20_240_501;
    const random = new Random(seed);
    const baseMs = Date.parse("2024-01-31T20:00:00Z");
    for (let round = 0; round < 300; round++) {
      const events: StoredEvent[] = [];
      const eventCount = random.integer(0, 7);
      for (let index = 0; index < eventCount; index++) {
        events.push({
          event: random.pick(["a", "b", "c"]),
          distinctId: "u",
          // Few distinct times, some on both sides of the range's end (2024-02-01 00:00).
          timestampMs: baseMs + random.integer(0, 6) * hourMs,
          properties: undefined,
        });
      }
      const steps = Array.from({ length: random.integer(1, 4) }, () => random.pick(["a", "b", "c"]));
      const windowSeconds = random.pick([1, 3600, 7200, 3 * 3600]);
      // Exhaustive: try every ordered tuple of distinct events for every prefix length.
      let deepest = 0;
      const extend = (chain: number[]): void => {
        if (chain.length > deepest) deepest = chain.length;
        if (chain.length === steps.length) return;
        for (let index = 0; index < events.length; index++) {
          if (chain.includes(index) || events[index].event !== steps[chain.length]) continue;
          const timeMs = events[index].timestampMs;
          if (chain.length === 0) {
            if (timeMs >= Date.parse("2024-02-01T00:00:00Z")) continue;
          } else {
            if (timeMs < events[chain[chain.length - 1]].timestampMs) continue;
            if (timeMs - events[chain[0]].timestampMs > windowSeconds * 1000) continue;
          }
          extend([...chain, index]);
        }
      };
      extend([]);
      const expected = steps.map((_, step) => (step < deepest ? 1 : 0));
      const answer = referenceFunnel(events, { steps, dateFrom: "2024-01-31", dateTo: "2024-01-31", conversionWindow: windowSeconds });
      expect(counts(answer), `seed ${seed} round ${round}: ${JSON.stringify({ steps, windowSeconds, events })}`).toEqual(expected);
    }
  });

  // An exponential search over candidates would not end here: the test's timeout catches it, no timed assertion.
  it("answers a user with many candidates for every step", () => {
    const events: StoredEvent[] = [];
    const startMs = Date.parse("2024-01-01T00:00:00Z");
    for (let index = 0; index < 3000; index++) {
      // Few distinct timestamps, so there are many ties, and a last step nobody reaches.
      events.push({
        event: ["a", "b", "c"][index % 3],
        distinctId: `u${Math.floor(index / 1000)}`,
        timestampMs: startMs + (index % 40) * 60_000,
        properties: undefined,
      });
    }
    const answer = referenceFunnel(events, { steps: ["a", "b", "a", "c", "b", "never"], ...range, conversionWindow: 86_400 });
    expect(counts(answer)).toEqual([3, 3, 3, 3, 3, 0]);
  });
});

describe("the reference computes retention as SPEC §4 says", () => {
  it("puts each user in the period of the first cohort event inside the range", () => {
    const events = [
      // u1's signup before the range does not count; its first one inside is in period 1.
      event("u1", "signup", "2023-12-31T12:00:00Z"),
      event("u1", "signup", "2024-01-04T12:00:00Z"),
      event("u1", "signup", "2024-01-03T12:00:00Z"),
      event("u2", "signup", "2024-01-01T00:00:00Z"),
      event("u2", "signup", "2024-01-03T00:00:00Z"),
      event("u1", "view", "2024-01-05T00:00:00Z"),
      event("u2", "view", "2024-01-05T00:00:00Z"),
      event("u2", "view", "2024-01-01T05:00:00Z"),
    ];
    expect(
      referenceRetention(events, { cohortEvent: "signup", retentionEvent: "view", dateFrom: "2024-01-01", dateTo: "2024-01-06", windowDays: 2 }),
    ).toEqual({
      cohorts: [
        { cohortDate: "2024-01-01", total: 1, weeks: [1, 0, 1] },
        { cohortDate: "2024-01-03", total: 1, weeks: [1, 1] },
        { cohortDate: "2024-01-05", total: 0, weeks: [0] },
      ],
    });
  });

  it("lists empty cohorts, and counts a retention event only in later periods", () => {
    const events = [
      event("u1", "a", "2024-01-08T00:00:00Z"),
      event("u1", "b", "2024-01-08T01:00:00Z"),
      event("u1", "b", "2024-01-01T01:00:00Z"),
    ];
    expect(
      referenceRetention(events, { cohortEvent: "a", retentionEvent: "b", dateFrom: "2024-01-01", dateTo: "2024-01-21" }),
    ).toEqual({
      cohorts: [
        { cohortDate: "2024-01-01", total: 0, weeks: [0, 0, 0] },
        { cohortDate: "2024-01-08", total: 1, weeks: [1, 0] },
        { cohortDate: "2024-01-15", total: 0, weeks: [0] },
      ],
    });
  });

  it("cuts the last period at the end of dateTo", () => {
    const events = [
      event("u1", "a", "2024-01-01T00:00:00Z"),
      event("u1", "a", "2024-01-10T23:59:59.999Z"),
      event("u2", "a", "2024-01-01T00:00:00Z"),
      event("u2", "a", "2024-01-11T00:00:00Z"),
      event("u3", "a", "2024-01-11T00:00:00Z"),
    ];
    expect(
      referenceRetention(events, { cohortEvent: "a", retentionEvent: "a", dateFrom: "2024-01-01", dateTo: "2024-01-10", windowDays: 7 }),
    ).toEqual({
      cohorts: [
        { cohortDate: "2024-01-01", total: 2, weeks: [2, 1] },
        { cohortDate: "2024-01-08", total: 0, weeks: [0] },
      ],
    });
  });

  it("uses one-day periods with the same cohort and retention event", () => {
    const events = [
      event("u1", "a", "2024-01-01T10:00:00Z"),
      event("u1", "a", "2024-01-01T11:00:00Z"),
      event("u1", "a", "2024-01-03T00:00:00Z"),
      event("u2", "a", "2024-01-02T00:00:00Z"),
    ];
    expect(
      referenceRetention(events, { cohortEvent: "a", retentionEvent: "a", dateFrom: "2024-01-01", dateTo: "2024-01-03", windowDays: 1 }),
    ).toEqual({
      cohorts: [
        { cohortDate: "2024-01-01", total: 1, weeks: [1, 0, 1] },
        { cohortDate: "2024-01-02", total: 1, weeks: [1, 0] },
        { cohortDate: "2024-01-03", total: 0, weeks: [0] },
      ],
    });
  });

  it("refuses more than 1 000 periods and windows outside 1–365 days", () => {
    const query = { cohortEvent: "a", retentionEvent: "a", dateFrom: "2024-01-01" };
    expect(referenceRetention([], { ...query, dateTo: "2026-09-26", windowDays: 1 }).cohorts).toHaveLength(1000);
    expect(() => referenceRetention([], { ...query, dateTo: "2026-09-27", windowDays: 1 })).toThrow();
    expect(() => referenceRetention([], { ...query, dateTo: "2024-01-02", windowDays: 0 })).toThrow();
    expect(() => referenceRetention([], { ...query, dateTo: "2024-01-02", windowDays: 366 })).toThrow();
  });
});
