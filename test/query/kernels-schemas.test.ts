/**
 * Query request schemas (SPEC §4, §1, §6): valid bodies come back with
 * defaults applied and unknown fields dropped; every invalid field is refused
 * with a message that starts with the field's name.
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
  it("applies defaults and drops unknown fields", () => {
    expect(parseTrendRequest({ event: "signup", ...range, extra: true })).toEqual({
      ok: true,
      value: { event: "signup", ...range, groupBy: "day", filters: [], math: "total" },
    });
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
        { property: "z", op: "not_contains", value: "", ignored: 1 },
      ],
    };
    expect(parseTrendRequest(body)).toEqual({
      ok: true,
      value: {
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
    [{ event: "e", ...range, math: "sum" }, "math: "],
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
    expect(parseFunnelRequest({ steps: ["a", "b", "a"], ...range })).toEqual({
      ok: true,
      value: { steps: ["a", "b", "a"], ...range, conversionWindow: 86_400 },
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
      value: { cohortEvent: "a", retentionEvent: "a", ...range, windowDays: 7 },
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
