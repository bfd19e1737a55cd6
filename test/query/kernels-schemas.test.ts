/**
 * Query request schemas (SPEC §4, §1, §6, §7): valid bodies come back with
 * defaults applied; unknown fields and every invalid field are refused with a
 * message that starts with the field's name.
 */
import { describe, expect, it } from "vitest";
import { limits } from "../../src/config/limits.js";
import { parseFunnelRequest, parseRetentionRequest, parseTrendRequest, type ParseResult } from "../../src/query/schemas.js";

const range = { dateFrom: "2024-01-01", dateTo: "2024-01-31" };

function messageOf<T>(result: ParseResult<T>): string {
  if (result.ok) throw new Error(`expected a refusal, got ${JSON.stringify(result.value)}`);
  return result.message;
}

describe("trend request", () => {
  const trendDefaults = { eventFilters: [], groupBy: "day", filters: [], math: "total", mathProperty: undefined, timezone: "UTC", breakdown: undefined };

  it("applies defaults", () => {
    expect(parseTrendRequest({ event: "signup", ...range })).toEqual({ ok: true, value: { event: "signup", ...range, ...trendDefaults } });
  });

  it("refuses an unknown field by name, at the top and inside filters and references", () => {
    expect(messageOf(parseTrendRequest({ event: "signup", ...range, extra: true }))).toBe("extra: unknown field");
    expect(messageOf(parseTrendRequest({ event: "signup", ...range, filters: [{ property: "p", op: "is_set", other: 1 }] }))).toBe("filters[0].other: unknown field");
    expect(messageOf(parseTrendRequest({ event: { event: "signup", filter: [] }, ...range }))).toBe("event.filter: unknown field");
  });

  it("takes an event reference, a zone by any alias or case, a breakdown and a property math", () => {
    const body = {
      event: { event: "buy", filters: [{ property: "plan", op: "eq", value: "pro" }] },
      ...range,
      timezone: "asia/calcutta",
      breakdown: "country",
      math: "sum",
      mathProperty: "price",
    };
    const parsed = parseTrendRequest(body);
    if (!parsed.ok) throw new Error(parsed.message);
    expect(parsed.value.eventFilters).toEqual([{ property: "plan", op: "eq", value: "pro" }]);
    expect(parsed.value.timezone).toBe(new Intl.DateTimeFormat("en-US", { timeZone: "Asia/Kolkata" }).resolvedOptions().timeZone);
    expect(parsed.value.breakdown).toEqual({ property: "country", limit: 25 });
    expect(parsed.value.mathProperty).toBe("price");
  });

  it("keeps every group, math and filter op", () => {
    const body = {
      event: "",
      ...range,
      groupBy: "week",
      math: "unique",
      filters: [
        { property: "plan", op: "eq", value: "pro" },
        { property: "n", op: "gte", value: "2.5" },
        { property: "x", op: "is_set" },
        { property: "y", op: "is_not_set", value: 12 },
        { property: "z", op: "not_contains", value: "" },
      ],
    };
    expect(parseTrendRequest(body)).toEqual({
      ok: true,
      value: {
        ...trendDefaults,
        event: "",
        ...range,
        groupBy: "week",
        math: "unique",
        filters: [
          { property: "plan", op: "eq", value: "pro" },
          { property: "n", op: "gte", value: "2.5" },
          { property: "x", op: "is_set", value: undefined },
          { property: "y", op: "is_not_set", value: undefined },
          { property: "z", op: "not_contains", value: "" },
        ],
      },
    });
  });

  it.each([
    [{ ...range }, "event: required"],
    [{ event: 3, ...range }, "event: "],
    [{ event: "e", dateTo: "2024-01-01" }, "dateFrom: required"],
    [{ event: "e", dateFrom: "2024-1-01", dateTo: "2024-01-01" }, "dateFrom: "],
    [{ event: "e", dateFrom: "2023-02-29", dateTo: "2024-01-01" }, "dateFrom: "],
    [{ event: "e", dateFrom: "2024-01-01", dateTo: "2024-13-01" }, "dateTo: "],
    [{ event: "e", dateFrom: "2024-01-01T00:00:00Z", dateTo: "2024-01-01" }, "dateFrom: "],
    [{ event: "e", dateFrom: "2024-01-02", dateTo: "2024-01-01" }, "dateTo: must not be before dateFrom"],
    [{ event: "e", ...range, groupBy: "year" }, "groupBy: "],
    [{ event: "e", ...range, groupBy: null }, "groupBy: "],
    [{ event: "e", ...range, math: "median" }, "math: "],
    [{ event: "e", ...range, math: "sum" }, "mathProperty: required"],
    [{ event: "e", ...range, math: "unique", mathProperty: "p" }, "mathProperty: "],
    [{ event: "e", ...range, mathProperty: "p" }, "mathProperty: "],
    [{ event: "e", ...range, timezone: "Mars/Olympus" }, "timezone: "],
    [{ event: "e", ...range, timezone: "+05:00" }, "timezone: "],
    [{ event: "e", ...range, timezone: 1 }, "timezone: "],
    [{ event: "e", ...range, breakdownLimit: 5 }, "breakdownLimit: "],
    [{ event: "e", ...range, breakdown: "p", breakdownLimit: 0 }, "breakdownLimit: "],
    [{ event: "e", ...range, breakdown: "p", breakdownLimit: 1001 }, "breakdownLimit: "],
    [{ event: { event: "e", filters: [{ property: "p", op: "like" }] }, ...range }, "event.filters[0].op: "],
    [{ event: { filters: [] }, ...range }, "event.event: required"],
    [{ event: "e", ...range, filters: "plan=pro" }, "filters: "],
    [{ event: "e", ...range, filters: [null] }, "filters[0]: "],
    [{ event: "e", ...range, filters: [{ op: "eq", value: "x" }] }, "filters[0].property: required"],
    [{ event: "e", ...range, filters: [{ property: "p", op: "like", value: "x" }] }, "filters[0].op: "],
    [{ event: "e", ...range, filters: [{ property: "p", op: "is_set" }, { property: "p", op: "eq" }] }, "filters[1].value: required"],
    [{ event: "e", ...range, filters: [{ property: "p", op: "gt", value: 5 }] }, "filters[0].value: expected a string"],
  ])("refuses %j with a message naming the field", (body, prefix) => {
    expect(messageOf(parseTrendRequest(body))).toMatch(new RegExp(`^${prefix.replace(/[[\]().]/g, "\\$&")}`));
  });

  it("refuses a body that is not an object", () => {
    expect(messageOf(parseTrendRequest([]))).toMatch(/^body: /);
    expect(messageOf(parseTrendRequest("x"))).toMatch(/^body: /);
  });

  it("allows exactly the bucket limit and refuses one more", () => {
    // 416 days × 24 hours = 9 984 buckets; 417 days = 10 008.
    expect(limits.trendBucketsMax).toBe(10_000);
    expect(parseTrendRequest({ event: "e", dateFrom: "2024-01-01", dateTo: "2025-02-19", groupBy: "hour" }).ok).toBe(true);
    expect(messageOf(parseTrendRequest({ event: "e", dateFrom: "2024-01-01", dateTo: "2025-02-20", groupBy: "hour" }))).toMatch(/^dateTo: .*10008 hour buckets/);
    // 10 000 days from 2000-01-01 end on 2027-05-18.
    expect(parseTrendRequest({ event: "e", dateFrom: "2000-01-01", dateTo: "2027-05-18" }).ok).toBe(true);
    expect(parseTrendRequest({ event: "e", dateFrom: "2000-01-01", dateTo: "2027-05-19" }).ok).toBe(false);
    expect(parseTrendRequest({ event: "e", dateFrom: "0001-01-01", dateTo: "9999-12-31", groupBy: "month" }).ok).toBe(false);
  });
});

describe("funnel request", () => {
  it("applies the default window and keeps repeated steps", () => {
    const steps = ["a", "b", "a"].map((event) => ({ event, filters: [] }));
    expect(parseFunnelRequest({ steps: ["a", "b", "a"], ...range })).toEqual({
      ok: true,
      value: { steps, ...range, conversionWindow: 86_400, filters: [], order: "ordered", exclusions: [], timeToConvert: false, timezone: "UTC", breakdown: undefined },
    });
  });

  it.each([
    [{ ...range }, "steps: required"],
    [{ steps: "a", ...range }, "steps: "],
    [{ steps: [], ...range }, "steps: "],
    [{ steps: Array.from({ length: 21 }, () => "a"), ...range }, "steps: "],
    [{ steps: ["a", 2], ...range }, "steps\\[1\\]: "],
    [{ steps: ["a"], dateFrom: "2024-02-30", dateTo: "2024-03-01" }, "dateFrom: "],
    [{ steps: ["a"], ...range, conversionWindow: 0 }, "conversionWindow: "],
    [{ steps: ["a"], ...range, conversionWindow: 31_536_001 }, "conversionWindow: "],
    [{ steps: ["a"], ...range, conversionWindow: 1.5 }, "conversionWindow: "],
    [{ steps: ["a"], ...range, conversionWindow: "60" }, "conversionWindow: "],
    [{ steps: ["a"], ...range, order: "random" }, "order: "],
    [{ steps: ["a", "b"], ...range, exclusions: [{ event: "x", fromStep: 1, toStep: 1 }] }, "exclusions\\[0\\].toStep: "],
    [{ steps: ["a", "b"], ...range, exclusions: [{ event: "x", fromStep: 0, toStep: 2 }] }, "exclusions\\[0\\].fromStep: "],
    [{ steps: ["a", "b"], ...range, exclusions: [{ event: "x", fromStep: 1, toStep: 3 }] }, "exclusions\\[0\\].toStep: "],
    [{ steps: ["a", "b"], ...range, exclusions: [{ event: "x", fromStep: 1 }] }, "exclusions\\[0\\].toStep: required"],
    [{ steps: ["a", "b"], ...range, order: "unordered", exclusions: [{ event: "x", fromStep: 1, toStep: 2 }] }, "exclusions: "],
    [{ steps: ["a", "b"], ...range, exclusions: Array.from({ length: 11 }, () => ({ event: "x", fromStep: 1, toStep: 2 })) }, "exclusions: "],
    [{ steps: ["a"], ...range, timeToConvert: "yes" }, "timeToConvert: "],
    [{ steps: [{ event: "a", filters: [] }, { event: "b", when: 1 }], ...range }, "steps\\[1\\].when: unknown field"],
  ])("refuses %j with a message naming the field", (body, prefix) => {
    expect(messageOf(parseFunnelRequest(body))).toMatch(new RegExp(`^${prefix}`));
  });

  it("accepts 20 steps and the window bounds", () => {
    expect(parseFunnelRequest({ steps: Array.from({ length: 20 }, () => "a"), ...range, conversionWindow: 1 }).ok).toBe(true);
    expect(parseFunnelRequest({ steps: ["a"], ...range, conversionWindow: 31_536_000 }).ok).toBe(true);
  });
});

describe("retention request", () => {
  it("applies the default window", () => {
    expect(parseRetentionRequest({ cohortEvent: "a", retentionEvent: "a", ...range })).toEqual({
      ok: true,
      value: { cohortEvent: { event: "a", filters: [] }, retentionEvent: { event: "a", filters: [] }, ...range, windowDays: 7, filters: [], timezone: "UTC", breakdown: undefined },
    });
  });

  it.each([
    [{ retentionEvent: "b", ...range }, "cohortEvent: required"],
    [{ cohortEvent: "a", ...range }, "retentionEvent: required"],
    [{ cohortEvent: "a", retentionEvent: ["b"], ...range }, "retentionEvent: "],
    [{ cohortEvent: "a", retentionEvent: "b", dateFrom: "2024-01-01" }, "dateTo: required"],
    [{ cohortEvent: "a", retentionEvent: "b", ...range, windowDays: 0 }, "windowDays: "],
    [{ cohortEvent: "a", retentionEvent: "b", ...range, windowDays: 366 }, "windowDays: "],
    [{ cohortEvent: "a", retentionEvent: "b", ...range, windowDays: 7.5 }, "windowDays: "],
    [{ cohortEvent: "a", retentionEvent: "b", dateFrom: "2024-01-31", dateTo: "2024-01-01" }, "dateTo: must not be before"],
  ])("refuses %j with a message naming the field", (body, prefix) => {
    expect(messageOf(parseRetentionRequest(body))).toMatch(new RegExp(`^${prefix}`));
  });

  it("allows exactly the period limit and refuses one more", () => {
    expect(limits.retentionPeriodsMax).toBe(1000);
    // 1 000 one-day periods from 2024-01-01 end on 2026-09-26.
    expect(parseRetentionRequest({ cohortEvent: "a", retentionEvent: "b", dateFrom: "2024-01-01", dateTo: "2026-09-26", windowDays: 1 }).ok).toBe(true);
    expect(messageOf(parseRetentionRequest({ cohortEvent: "a", retentionEvent: "b", dateFrom: "2024-01-01", dateTo: "2026-09-27", windowDays: 1 }))).toMatch(
      /^dateTo: .*1001 periods/,
    );
  });
});
