/**
 * SPEC §4 request validation and §6 query limits through the real query API:
 * every refused field answers 400 invalid_request with a message naming the
 * field, every limit holds at exactly its value and refuses one past it, and
 * names never ingested answer zeros rather than errors.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";
import { addDays, expectError, expectOk, ingestBatch, send, sendJson } from "../helpers/http.js";

let server: ServerHandle;

beforeAll(async () => {
  server = await startServer();
  // One event of each name used below, so "known event" paths are exercised too.
  const answer = await ingestBatch(server, server.apiKey, [
    { event: "signup", distinctId: "a", timestamp: "2024-01-01T10:00:00Z", properties: { plan: "pro", seats: 5 } },
    { event: "purchase", distinctId: "a", timestamp: "2024-01-02T10:00:00Z" },
  ]);
  expect(answer.status).toBe(200);
});

afterAll(async () => {
  await server?.stop();
  if (server) removeDataDir(server.dataDir);
});

type Kind = "trend" | "funnel" | "retention";

function query(kind: Kind, body: unknown) {
  return sendJson(`${server.queryUrl}/api/v1/query/${kind}`, body, { token: server.token });
}

const valid: Record<Kind, Record<string, unknown>> = {
  trend: { event: "signup", dateFrom: "2024-01-01", dateTo: "2024-01-03" },
  funnel: { steps: ["signup", "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-03" },
  retention: { cohortEvent: "signup", retentionEvent: "purchase", dateFrom: "2024-01-01", dateTo: "2024-01-03" },
};
const kinds = Object.keys(valid) as Kind[];

function without(kind: Kind, field: string): Record<string, unknown> {
  const body = { ...valid[kind] };
  delete body[field];
  return body;
}

describe.each(kinds)("%s", (kind) => {
  it("answers a valid request with 200", async () => {
    expectOk(await query(kind, valid[kind]));
  });

  it("refuses an unknown field, naming it (SPEC §7)", async () => {
    expectError(await query(kind, { ...valid[kind], unknownField: [1, 2] }), 400, "invalid_request", "unknownField");
  });

  it.each(["dateFrom", "dateTo"])("refuses a missing %s, naming it", async (field) => {
    expectError(await query(kind, without(kind, field)), 400, "invalid_request", field);
  });

  it.each([
    ["month 13", "2024-13-01"],
    ["February 30", "2024-02-30"],
    ["February 29 of a common year", "2023-02-29"],
    ["day 0", "2024-01-00"],
    ["a word", "yesterday"],
    ["no zero padding", "2024-1-5"],
    ["a date-time", "2024-01-01T00:00:00Z"],
    ["empty", ""],
    ["a number", 20240101],
    ["null", null],
  ])("refuses a date that is %s (%j), naming the field", async (_, date) => {
    expectError(await query(kind, { ...valid[kind], dateFrom: date }), 400, "invalid_request", "dateFrom");
    expectError(await query(kind, { ...valid[kind], dateFrom: "2023-01-01", dateTo: date }), 400, "invalid_request", "dateTo");
  });

  it("accepts February 29 of a leap year", async () => {
    expectOk(await query(kind, { ...valid[kind], dateFrom: "2024-02-29", dateTo: "2024-02-29" }));
  });

  it("refuses dateFrom after dateTo, naming a date field, and accepts them equal", async () => {
    expectError(await query(kind, { ...valid[kind], dateFrom: "2024-01-04", dateTo: "2024-01-03" }), 400, "invalid_request", /dateFrom|dateTo/);
    expectOk(await query(kind, { ...valid[kind], dateFrom: "2024-01-03", dateTo: "2024-01-03" }));
  });

  it.each([
    ["an array", "[]"],
    ["a string", '"trend"'],
    ["null", "null"],
    ["empty", ""],
    ["not JSON", "{event: signup}"],
  ])("refuses a body that is %s with 400 invalid_json", async (_, body) => {
    expectError(await send(`${server.queryUrl}/api/v1/query/${kind}`, { body, token: server.token }), 400, "invalid_json");
  });
});

describe("trend", () => {
  it.each([
    ["missing", undefined],
    ["a number", 5],
    ["null", null],
    ["an array", ["signup"]],
  ])("refuses an event that is %s, naming event", async (_, event) => {
    expectError(await query("trend", { ...valid.trend, event }), 400, "invalid_request", "event");
  });

  it.each(["hour", "day", "week", "month"])("accepts groupBy %s", async (groupBy) => {
    expectOk(await query("trend", { ...valid.trend, groupBy }));
  });

  it.each([["year"], ["Day"], [""], [1], [null]])("refuses groupBy %j, naming groupBy", async (groupBy) => {
    expectError(await query("trend", { ...valid.trend, groupBy }), 400, "invalid_request", "groupBy");
  });

  it.each(["total", "unique"])("accepts math %s", async (math) => {
    expectOk(await query("trend", { ...valid.trend, math }));
  });

  it.each([["sum"], ["count"], ["Total"], [""], [0], [null]])("refuses math %j, naming math", async (math) => {
    expectError(await query("trend", { ...valid.trend, math }), 400, "invalid_request", "math");
  });

  it("defaults to day buckets and total counts", async () => {
    const explicit = expectOk(await query("trend", { ...valid.trend, groupBy: "day", math: "total" }));
    expect(expectOk(await query("trend", valid.trend))).toEqual(explicit);
    expect(explicit.data.map((bucket: { date: string }) => bucket.date)).toEqual(["2024-01-01", "2024-01-02", "2024-01-03"]);
  });

  describe("filters", () => {
    const ops = ["eq", "neq", "contains", "not_contains", "gt", "gte", "lt", "lte"];

    it.each(ops)("accepts op %s with a string value", async (op) => {
      expectOk(await query("trend", { ...valid.trend, filters: [{ property: "seats", op, value: "5" }] }));
    });

    it.each(["is_set", "is_not_set"])("accepts op %s without a value", async (op) => {
      expectOk(await query("trend", { ...valid.trend, filters: [{ property: "plan", op }] }));
    });

    it("accepts a numeric comparison with a value that is not a number, answering zeros", async () => {
      const body = expectOk(await query("trend", { ...valid.trend, filters: [{ property: "seats", op: "gt", value: "many" }] }));
      expect(body.data.map((bucket: { count: number }) => bucket.count)).toEqual([0, 0, 0]);
    });

    it.each(["like", "EQ", "equals", "", "in"])("refuses the unknown op %j, naming op", async (op) => {
      expectError(await query("trend", { ...valid.trend, filters: [{ property: "plan", op, value: "pro" }] }), 400, "invalid_request", "op");
    });

    it("refuses a filter without an op, naming op", async () => {
      expectError(await query("trend", { ...valid.trend, filters: [{ property: "plan", value: "pro" }] }), 400, "invalid_request", "op");
    });

    it.each(ops)("refuses op %s without a value, naming value", async (op) => {
      expectError(await query("trend", { ...valid.trend, filters: [{ property: "plan", op }] }), 400, "invalid_request", "value");
    });

    it.each([
      ["a number", 5],
      ["a boolean", true],
      ["null", null],
      ["an array", ["pro"]],
      ["an object", { text: "pro" }],
    ])("refuses a value that is %s, naming value", async (_, value) => {
      expectError(await query("trend", { ...valid.trend, filters: [{ property: "seats", op: "eq", value }] }), 400, "invalid_request", "value");
    });

    it("refuses an invalid filter after a valid one, naming value", async () => {
      const filters = [
        { property: "plan", op: "eq", value: "pro" },
        { property: "seats", op: "gte", value: 5 },
      ];
      expectError(await query("trend", { ...valid.trend, filters }), 400, "invalid_request", "value");
    });

    it.each([
      ["missing", undefined],
      ["a number", 1],
    ])("refuses a property that is %s, naming property", async (_, property) => {
      expectError(await query("trend", { ...valid.trend, filters: [{ property, op: "eq", value: "pro" }] }), 400, "invalid_request", "property");
    });

    it.each([
      ["an object", { property: "plan", op: "eq", value: "pro" }],
      ["a string", "plan=pro"],
      ["an array of strings", ["plan"]],
    ])("refuses filters that are %s, naming filters", async (_, filters) => {
      expectError(await query("trend", { ...valid.trend, filters }), 400, "invalid_request", "filters");
    });

    it("applies a valid filter", async () => {
      const matching = expectOk(await query("trend", { ...valid.trend, filters: [{ property: "plan", op: "eq", value: "pro" }] }));
      const other = expectOk(await query("trend", { ...valid.trend, filters: [{ property: "plan", op: "eq", value: "free" }] }));
      expect(matching.data[0].count).toBe(1);
      expect(other.data[0].count).toBe(0);
    });
  });

  describe("buckets (at most 10 000)", () => {
    it("answers exactly 10 000 day buckets", async () => {
      const dateFrom = "2000-01-01";
      const dateTo = addDays(dateFrom, 9_999);
      const body = expectOk(await query("trend", { event: "signup", dateFrom, dateTo }));
      expect(body.data).toHaveLength(10_000);
      expect(body.data[0].date).toBe(dateFrom);
      expect(body.data[9_999].date).toBe(dateTo);
      expect(body.data.reduce((sum: number, bucket: { count: number }) => sum + bucket.count, 0)).toBe(1);
    });

    it("refuses 10 001 day buckets, naming a date field", async () => {
      const dateFrom = "2000-01-01";
      expectError(await query("trend", { event: "signup", dateFrom, dateTo: addDays(dateFrom, 10_000) }), 400, "invalid_request", /dateFrom|dateTo/);
    });

    it("counts hour buckets against the same limit: 416 days (9 984) pass, 417 days (10 008) do not", async () => {
      const dateFrom = "2023-06-01";
      const answer = expectOk(await query("trend", { event: "signup", dateFrom, dateTo: addDays(dateFrom, 415), groupBy: "hour" }));
      expect(answer.data).toHaveLength(416 * 24);
      expectError(await query("trend", { event: "signup", dateFrom, dateTo: addDays(dateFrom, 416), groupBy: "hour" }), 400, "invalid_request", /dateFrom|dateTo/);
    });

    it("counts month buckets against the same limit: 10 000 months pass, 10 001 do not", async () => {
      // 1970-01 … 2803-04 is 10 000 months.
      expect(expectOk(await query("trend", { event: "signup", dateFrom: "1970-01-01", dateTo: "2803-04-30", groupBy: "month" })).data).toHaveLength(10_000);
      expectError(await query("trend", { event: "signup", dateFrom: "1970-01-01", dateTo: "2803-05-01", groupBy: "month" }), 400, "invalid_request", /dateFrom|dateTo/);
    });
  });

  describe("points (buckets × series, at most 100 000)", () => {
    // A breakdown's series are breakdownLimit values, "other" and the total: hourly over 30 days is 720 buckets.
    const hourly = { event: "signup", dateFrom: "2024-01-01", dateTo: "2024-01-30", groupBy: "hour", breakdown: "plan" };

    it("answers 720 hourly buckets × 138 series (99 360 points), and refuses 139 series, naming breakdownLimit", async () => {
      const body = expectOk(await query("trend", { ...hourly, breakdownLimit: 136 }));
      expect(body.data).toHaveLength(720);
      expect(body.breakdown).toEqual([{ value: "pro", data: expect.any(Array) }]);
      const refused = await query("trend", { ...hourly, breakdownLimit: 137 });
      expectError(refused, 400, "invalid_request", "breakdownLimit");
      expect(refused.body.error.message).toContain("100000");
    });

    it("never refuses a trend without breakdown: 10 000 buckets are 10 000 points", async () => {
      expect(expectOk(await query("trend", { event: "signup", dateFrom: "2000-01-01", dateTo: addDays("2000-01-01", 9_999) })).data).toHaveLength(10_000);
    });
  });

  it("answers zeros for an event never ingested, in every bucket", async () => {
    const body = expectOk(await query("trend", { ...valid.trend, event: "never-ingested" }));
    expect(body).toEqual({
      data: [
        { date: "2024-01-01", count: 0 },
        { date: "2024-01-02", count: 0 },
        { date: "2024-01-03", count: 0 },
      ],
    });
  });

  it("answers zeros for a filter on a property never ingested, and counts the event for is_not_set", async () => {
    const eq = expectOk(await query("trend", { ...valid.trend, filters: [{ property: "never-set", op: "eq", value: "x" }] }));
    expect(eq.data.map((bucket: { count: number }) => bucket.count)).toEqual([0, 0, 0]);
    const unset = expectOk(await query("trend", { ...valid.trend, filters: [{ property: "never-set", op: "is_not_set" }] }));
    expect(unset.data.map((bucket: { count: number }) => bucket.count)).toEqual([1, 0, 0]);
  });
});

describe("funnel", () => {
  const names = (count: number) => Array.from({ length: count }, (_, index) => (index % 2 === 0 ? "signup" : "purchase"));

  it.each([
    ["missing", undefined],
    ["empty", []],
    ["21 names", names(21)],
    ["a string", "signup"],
    ["not all strings", ["signup", 5]],
    ["null", null],
  ])("refuses steps that are %s, naming steps", async (_, steps) => {
    expectError(await query("funnel", { ...valid.funnel, steps }), 400, "invalid_request", "steps");
  });

  it("answers 1 step and exactly 20 steps, repeats allowed", async () => {
    expect(expectOk(await query("funnel", { ...valid.funnel, steps: ["signup"] })).steps).toEqual([{ event: "signup", count: 1, rate: 1 }]);
    const twenty = expectOk(await query("funnel", { ...valid.funnel, steps: names(20) }));
    expect(twenty.steps).toHaveLength(20);
    expect(twenty.steps.map((step: { event: string }) => step.event)).toEqual(names(20));
  });

  it.each([1, 3600, 31_536_000])("accepts conversionWindow %d", async (conversionWindow) => {
    expectOk(await query("funnel", { ...valid.funnel, conversionWindow }));
  });

  it.each([
    ["0", 0],
    ["31 536 001", 31_536_001],
    ["negative", -1],
    ["fractional", 1.5],
    ["a string", "3600"],
    ["null", null],
    ["a boolean", true],
  ])("refuses a conversionWindow that is %s, naming conversionWindow", async (_, conversionWindow) => {
    expectError(await query("funnel", { ...valid.funnel, conversionWindow }), 400, "invalid_request", "conversionWindow");
  });

  it("defaults conversionWindow to 86 400 s", async () => {
    expect(expectOk(await query("funnel", valid.funnel))).toEqual(expectOk(await query("funnel", { ...valid.funnel, conversionWindow: 86_400 })));
    // purchase is 24 h after signup: inside 86 400 s, outside 86 399 s.
    expect(expectOk(await query("funnel", valid.funnel)).steps.map((step: { count: number }) => step.count)).toEqual([1, 1]);
    expect(expectOk(await query("funnel", { ...valid.funnel, conversionWindow: 86_399 })).steps.map((step: { count: number }) => step.count)).toEqual([1, 0]);
  });

  it("answers zero counts, rate 1 for step 1 and 0 for the rest, when the first step was never ingested", async () => {
    const body = expectOk(await query("funnel", { ...valid.funnel, steps: ["never-ingested", "purchase"] }));
    expect(body).toEqual({
      steps: [
        { event: "never-ingested", count: 0, rate: 1 },
        { event: "purchase", count: 0, rate: 0 },
      ],
    });
  });

  it("answers zero for a later step never ingested", async () => {
    const body = expectOk(await query("funnel", { ...valid.funnel, steps: ["signup", "never-ingested"] }));
    expect(body.steps).toEqual([
      { event: "signup", count: 1, rate: 1 },
      { event: "never-ingested", count: 0, rate: 0 },
    ]);
  });
});

describe("retention", () => {
  it.each(["cohortEvent", "retentionEvent"])("refuses a missing or non-string %s, naming it", async (field) => {
    expectError(await query("retention", without("retention", field)), 400, "invalid_request", field);
    expectError(await query("retention", { ...valid.retention, [field]: 1 }), 400, "invalid_request", field);
  });

  it.each([1, 7, 365])("accepts windowDays %d", async (windowDays) => {
    expectOk(await query("retention", { ...valid.retention, windowDays }));
  });

  it.each([
    ["0", 0],
    ["366", 366],
    ["negative", -7],
    ["fractional", 1.5],
    ["a string", "7"],
    ["null", null],
  ])("refuses windowDays that is %s, naming windowDays", async (_, windowDays) => {
    expectError(await query("retention", { ...valid.retention, windowDays }), 400, "invalid_request", "windowDays");
  });

  it("defaults windowDays to 7", async () => {
    const body = { ...valid.retention, dateTo: "2024-01-20" };
    const defaulted = expectOk(await query("retention", body));
    expect(defaulted).toEqual(expectOk(await query("retention", { ...body, windowDays: 7 })));
    expect(defaulted.cohorts.map((cohort: { cohortDate: string }) => cohort.cohortDate)).toEqual(["2024-01-01", "2024-01-08", "2024-01-15"]);
  });

  it("answers exactly 1 000 periods, and refuses 1 001 naming a date field or windowDays", async () => {
    const dateFrom = "2020-01-01";
    const body = expectOk(await query("retention", { ...valid.retention, dateFrom, dateTo: addDays(dateFrom, 999), windowDays: 1 }));
    expect(body.cohorts).toHaveLength(1000);
    expect(body.cohorts[0].weeks).toHaveLength(1000);
    expect(body.cohorts[999].weeks).toHaveLength(1);
    const answer = await query("retention", { ...valid.retention, dateFrom, dateTo: addDays(dateFrom, 1000), windowDays: 1 });
    expectError(answer, 400, "invalid_request", /dateFrom|dateTo|windowDays/);
  });

  it("counts a cut last period: 7 000 days in 7-day periods are 1 000, one more day makes 1 001", async () => {
    const dateFrom = "2000-01-01";
    expect(expectOk(await query("retention", { ...valid.retention, dateFrom, dateTo: addDays(dateFrom, 6_999), windowDays: 7 })).cohorts).toHaveLength(1000);
    expectError(await query("retention", { ...valid.retention, dateFrom, dateTo: addDays(dateFrom, 7_000), windowDays: 7 }), 400, "invalid_request", /dateFrom|dateTo|windowDays/);
  });

  it("counts the cells of an answer (each series' triangle of counts): at most 2 000 000, 1 000 periods without breakdown pass", async () => {
    // 1 000 one-day periods hold 500 500 counts a series; with a breakdown the series are breakdownLimit + 2.
    const dateFrom = "2023-06-01";
    const body = { ...valid.retention, dateFrom, dateTo: addDays(dateFrom, 999), windowDays: 1, breakdown: "plan" };
    const answer = expectOk(await query("retention", { ...body, breakdownLimit: 1 }));
    expect(answer.cohorts).toHaveLength(1000);
    expect(answer.breakdown.map((series: { value: unknown }) => series.value)).toEqual(["pro"]);
    const refused = await query("retention", { ...body, breakdownLimit: 2 });
    expectError(refused, 400, "invalid_request", "breakdownLimit");
    expect(refused.body.error.message).toContain("2000000");
  });

  it("answers empty cohorts for a cohort event never ingested", async () => {
    const body = expectOk(await query("retention", { ...valid.retention, cohortEvent: "never-ingested", windowDays: 1 }));
    expect(body).toEqual({
      cohorts: [
        { cohortDate: "2024-01-01", total: 0, weeks: [0, 0, 0] },
        { cohortDate: "2024-01-02", total: 0, weeks: [0, 0] },
        { cohortDate: "2024-01-03", total: 0, weeks: [0] },
      ],
    });
  });

  it("answers zero returns for a retention event never ingested", async () => {
    const body = expectOk(await query("retention", { ...valid.retention, retentionEvent: "never-ingested", windowDays: 1 }));
    expect(body.cohorts[0]).toEqual({ cohortDate: "2024-01-01", total: 1, weeks: [1, 0, 0] });
  });
});
