/**
 * Calendar helpers and filter compilation under the kernels: real dates only,
 * ISO weeks across year boundaries, month and hour labels, the bucket and
 * period counts the schemas bound, and each filter op's answer for set and
 * not-set values.
 */
import { describe, expect, it } from "vitest";
import {
  dateToMs,
  dayMs,
  isCalendarDate,
  msToDate,
  retentionLayout,
  retentionPeriodCount,
  retentionPeriodLabels,
  trendBucketCount,
  trendBucketLabels,
  trendBucketOfDay,
  trendLayout,
  type GroupBy,
} from "../../src/query/buckets.js";
import { CompiledFilterCache, compileFilter, filterOps, filterPassesNotSet, substringFinder, type FilterPlan } from "../../src/query/filters.js";

describe("calendar dates", () => {
  it.each(["2024-02-29", "2000-02-29", "1970-01-01", "9999-12-31", "0001-01-01", "2023-12-31"])("accepts %s", (date) => {
    expect(isCalendarDate(date)).toBe(true);
    expect(msToDate(dateToMs(date))).toBe(date);
  });

  it.each(["2023-02-29", "1900-02-29", "2024-04-31", "2024-00-10", "2024-13-01", "2024-01-00", "2024-1-01", "24-01-01", " 2024-01-01", "2024-01-01T00:00:00Z", ""])(
    "refuses %j",
    (date) => expect(isCalendarDate(date)).toBe(false),
  );

  it("maps dates to UTC midnight, years before 100 included", () => {
    expect(dateToMs("2024-05-01")).toBe(Date.parse("2024-05-01T00:00:00Z"));
    expect(msToDate(dateToMs("0050-06-15"))).toBe("0050-06-15");
  });
});

describe("trend buckets", () => {
  const labels = (dateFrom: string, dateTo: string, groupBy: GroupBy) => trendBucketLabels(trendLayout(dateFrom, dateTo, groupBy));

  it("lists every day, both ends included", () => {
    expect(labels("2023-12-30", "2024-01-02", "day")).toEqual(["2023-12-30", "2023-12-31", "2024-01-01", "2024-01-02"]);
  });

  it("starts ISO weeks on Monday, across year boundaries", () => {
    // 2021-01-01 is a Friday of the ISO week starting Monday 2020-12-28.
    expect(labels("2021-01-01", "2021-01-11", "week")).toEqual(["2020-12-28", "2021-01-04", "2021-01-11"]);
    // 2024-12-30 (Monday) begins ISO week 1 of 2025.
    expect(labels("2024-12-29", "2025-01-05", "week")).toEqual(["2024-12-23", "2024-12-30"]);
    expect(labels("2024-01-01", "2024-01-01", "week")).toEqual(["2024-01-01"]);
    expect(labels("2024-01-07", "2024-01-08", "week")).toEqual(["2024-01-01", "2024-01-08"]);
  });

  it("labels months by their first day", () => {
    expect(labels("2023-11-15", "2024-02-01", "month")).toEqual(["2023-11-01", "2023-12-01", "2024-01-01", "2024-02-01"]);
  });

  it("labels hours with a space and zero minutes", () => {
    const hours = labels("2024-03-10", "2024-03-11", "hour");
    expect(hours).toHaveLength(48);
    expect(hours[0]).toBe("2024-03-10 00:00:00");
    expect(hours[13]).toBe("2024-03-10 13:00:00");
    expect(hours[47]).toBe("2024-03-11 23:00:00");
  });

  it("counts buckets without building them", () => {
    expect(trendBucketCount("2024-01-01", "2024-12-31", "day")).toBe(366);
    expect(trendBucketCount("2024-01-01", "2024-12-31", "hour")).toBe(366 * 24);
    expect(trendBucketCount("2024-01-01", "2024-12-31", "month")).toBe(12);
    expect(trendBucketCount("2024-01-01", "2024-12-31", "week")).toBe(53); // Mondays 2024-01-01 … 2024-12-30
    expect(trendBucketCount("0001-01-01", "9999-12-31", "month")).toBe(9999 * 12);
  });

  it("maps each day of the range to the bucket whose label holds it", () => {
    for (const groupBy of ["hour", "day", "week", "month"] as const) {
      const layout = trendLayout("2023-12-20", "2024-03-05", groupBy);
      const bucketLabels = trendBucketLabels(layout);
      for (let dayStartMs = layout.fromMs; dayStartMs < layout.toMsExclusive; dayStartMs += dayMs) {
        const bucket = trendBucketOfDay(layout, dayStartMs);
        const date = msToDate(dayStartMs);
        const label = bucketLabels[bucket];
        if (groupBy === "hour") expect(label).toBe(`${date} 00:00:00`);
        else if (groupBy === "day") expect(label).toBe(date);
        else if (groupBy === "month") expect(label).toBe(`${date.slice(0, 7)}-01`);
        else expect(dayStartMs - dateToMs(label)).toBeLessThan(7 * dayMs);
      }
    }
  });
});

describe("retention periods", () => {
  it("cuts the last period at the end of dateTo", () => {
    const layout = retentionLayout("2024-01-01", "2024-01-17", 7);
    expect(layout.periodCount).toBe(3);
    expect(retentionPeriodLabels(layout)).toEqual(["2024-01-01", "2024-01-08", "2024-01-15"]);
    expect(layout.toMsExclusive).toBe(Date.parse("2024-01-18T00:00:00Z"));
  });

  it("counts one period per started window", () => {
    expect(retentionPeriodCount("2024-01-01", "2024-01-14", 7)).toBe(2);
    expect(retentionPeriodCount("2024-01-01", "2024-01-15", 7)).toBe(3);
    expect(retentionPeriodCount("2024-01-01", "2024-01-01", 365)).toBe(1);
    expect(retentionPeriodCount("2024-01-01", "2024-12-31", 1)).toBe(366);
  });
});

describe("filters", () => {
  const texts = ["", "pro", "free", "10", "2.5", "-3", "1e+21", "true", '{"a":1}', "pro plan", "abc1"];
  const passing = (op: (typeof filterOps)[number], value: string | undefined) => {
    const compiled = compileFilter(texts, op, value);
    expect(compiled.passingCount).toBe(compiled.passes.reduce((sum, pass) => sum + pass, 0));
    return texts.filter((_, id) => compiled.passes[id] === 1).map((text, index) => (index === 0 && compiled.passes[0] === 1 ? "<not set>" : text));
  };

  it("answers for a not-set property as SPEC says", () => {
    expect(filterOps.filter(filterPassesNotSet)).toEqual(["neq", "not_contains", "is_not_set"]);
    for (const op of filterOps) expect(compileFilter(texts, op, "x").passes[0]).toBe(filterPassesNotSet(op) ? 1 : 0);
  });

  it("compares texts exactly and by substring", () => {
    expect(passing("eq", "pro")).toEqual(["pro"]);
    expect(passing("neq", "pro")).toEqual(["<not set>", "free", "10", "2.5", "-3", "1e+21", "true", '{"a":1}', "pro plan", "abc1"]);
    expect(passing("contains", "pro")).toEqual(["pro", "pro plan"]);
    expect(passing("contains", "")).toHaveLength(texts.length - 1);
    expect(passing("not_contains", "1")).toEqual(["<not set>", "pro", "free", "2.5", "-3", "true", "pro plan"]);
  });

  it("finds long patterns as String.prototype.includes does, in time linear in the text", () => {
    // Few letters, and surrogate halves, so that borders, near misses and repeats are common.
    let seed = 7;
    const random = () => ((seed = (Math.imul(seed, 1_103_515_245) + 12_345) >>> 0) / 2 ** 32);
    const units = ["a", "b", "\ud83d", "\ude00"];
    const textOf = (length: number) => Array.from({ length }, () => units[Math.floor(random() * (random() < 0.9 ? 2 : 4))]).join("");
    for (let round = 0; round < 3_000; round++) {
      const pattern = textOf(33 + Math.floor(random() * 40));
      // Texts holding the pattern, a prefix of it, or neither.
      const cut = Math.floor(random() * pattern.length);
      const text = textOf(Math.floor(random() * 40)) + (random() < 0.3 ? pattern : pattern.slice(0, cut) + textOf(3)) + textOf(Math.floor(random() * 40));
      expect(substringFinder(pattern)(text), JSON.stringify({ pattern, text })).toBe(text.includes(pattern));
    }
    // The shape that held a worker: a long periodic pattern over long periodic texts (V8's search took ~20 ms a text).
    const periodic = "aab" + "ab".repeat(3_000);
    const texts = ["", ...Array.from({ length: 300 }, (_, index) => "ab".repeat(30_000) + String(index))];
    expect(compileFilter(texts, "contains", periodic).passingCount).toBe(0);
    expect(compileFilter(texts, "not_contains", periodic).passingCount).toBe(texts.length);
  });

  it("compares numbers only when both sides are number texts", () => {
    expect(passing("gt", "2.5")).toEqual(["10", "1e+21"]);
    expect(passing("gte", "2.5")).toEqual(["10", "2.5", "1e+21"]);
    expect(passing("lt", "0")).toEqual(["-3"]);
    expect(passing("lte", "1e1")).toEqual(["10", "2.5", "-3"]);
    expect(passing("gt", "abc")).toEqual([]);
    expect(passing("lt", "")).toEqual([]);
  });

  it("tests presence", () => {
    expect(passing("is_set", undefined)).toHaveLength(texts.length - 1);
    expect(passing("is_not_set", undefined)).toEqual(["<not set>"]);
  });

  it("handles a dictionary with no entries", () => {
    expect(Array.from(compileFilter([], "neq", "x").passes)).toEqual([1]);
    expect(Array.from(compileFilter([], "eq", "x").passes)).toEqual([0]);
  });
});

describe("compiled filter cache", () => {
  const eq = (value: string): FilterPlan => ({ keyId: 0, op: "eq", value });

  it("reuses a pass table for the same dictionary, op and value, and compiles another for another dictionary", () => {
    const cache = new CompiledFilterCache(1024);
    const texts = ["", "a", "b"];
    const first = cache.compile(texts, eq("a"));
    expect(Array.from(first.passes)).toEqual([0, 1, 0]);
    // Another plan object of the same filter (each task brings its own) finds it too.
    expect(cache.compile(texts, eq("a"))).toBe(first);
    expect(cache.compile(texts, eq("b"))).not.toBe(first);
    expect(cache.compile(texts, { keyId: 0, op: "neq", value: "a" })).not.toBe(first);
    // The same texts in another dictionary (another column or segment): its own table, right for it.
    expect(Array.from(cache.compile(["", "b", "a"], eq("a")).passes)).toEqual([0, 0, 1]);
    expect(cache.compile(["", "a", "b"], eq("a"))).not.toBe(first);
  });

  it("forgets the least recently used tables beyond its byte bound", () => {
    // 5 bytes per table; past 14 bytes it frees down to 10.5.
    const cache = new CompiledFilterCache(14);
    const s1 = ["", "a", "b", "c", "d"];
    const s2 = [...s1];
    const s3 = [...s1];
    const first = cache.compile(s1, eq("a"));
    const second = cache.compile(s2, eq("a"));
    expect(cache.compile(s1, eq("a"))).toBe(first); // s1 is now the most recent
    cache.compile(s3, eq("a")); // 15 bytes: evicts s2, the least recent, and stops at 10
    expect(cache.compile(s1, eq("a"))).toBe(first);
    expect(cache.compile(s2, eq("a"))).not.toBe(second);
  });

  it("does not keep a table larger than its bound", () => {
    const cache = new CompiledFilterCache(3);
    const texts = ["", "a", "b", "c"];
    expect(cache.compile(texts, eq("a"))).not.toBe(cache.compile(texts, eq("a")));
  });
});
