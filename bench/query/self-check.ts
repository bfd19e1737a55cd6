/**
 * Checks the query benchmark's referees before anything is timed: the SPEC
 * §5 worked example and hand cases at the edges of SPEC §4 (ties, the exact
 * window boundary, steps after dateTo, entries before dateFrom, the deepest of
 * several entries, the last short retention period, filters on absent and
 * numeric properties) run through the plain reference and through DuckDB's
 * SQL; then seeded random data, with ties and window edges common, compares
 * the SQL with the test suite's reference (test/reference/reference.ts, whose
 * funnel searches every chain). If the SQL were wrong, every Eventide/DuckDB
 * mismatch would be noise.
 *
 * Estimate: ~90 small queries of a few hundred rows each, ~5 ms apiece in
 * DuckDB, plus the reference's funnel search over ~1 k events: well under 2 s.
 */
import type { DuckDbEngine } from "./duckdb-engine.js";
import { firstDifference, referenceAnswer, type FunnelAnswer, type QueryAnswer, type QueryRequest, type RetentionAnswer, type StoredEvent, type TrendAnswer } from "./query-request.js";
import { SeededRandom } from "../fixtures/events.js";

interface Case {
  name: string;
  events: StoredEvent[];
  request: QueryRequest;
  /** Stated by the SPEC or worked out by hand; undefined: only "SQL = reference" is checked. */
  expected?: QueryAnswer;
}

function event(distinctId: string, name: string, iso: string, properties: StoredEvent["properties"] = {}): StoredEvent {
  return { event: name, distinctId, timestampMs: Date.parse(iso), properties };
}

function funnelCounts(steps: string[], counts: number[]): FunnelAnswer {
  return { steps: steps.map((name, index) => ({ event: name, count: counts[index], rate: index === 0 ? 1 : counts[0] === 0 ? 0 : counts[index] / counts[0] })) };
}

function trendCounts(dates: string[], counts: number[]): TrendAnswer {
  return { data: dates.map((date, index) => ({ date, count: counts[index] })) };
}

const specExample: StoredEvent[] = [
  event("u1", "signup", "2024-01-01T10:00Z"),
  event("u1", "view", "2024-01-01T11:00Z"),
  event("u1", "purchase", "2024-01-03T09:00Z"),
  event("u2", "signup", "2024-01-02T08:00Z"),
  event("u2", "purchase", "2024-01-02T08:30Z"),
  event("u3", "view", "2024-01-09T00:00Z"),
  event("u3", "signup", "2024-01-09T01:00Z"),
  event("u1", "view", "2024-01-10T12:00Z"),
];

const handEvents: StoredEvent[] = [
  // Ties: view arrives first, all three at the same millisecond.
  event("tie", "view", "2024-01-05T12:00:00.000Z"),
  event("tie", "signup", "2024-01-05T12:00:00.000Z"),
  event("tie", "purchase", "2024-01-05T12:00:00.000Z"),
  // Window boundary for a 3 600 s window: +3 600 000 ms is inside, +3 600 001 ms is not.
  event("edge-in", "signup", "2024-01-06T00:00:00.000Z"),
  event("edge-in", "view", "2024-01-06T01:00:00.000Z"),
  event("edge-out", "signup", "2024-01-06T00:00:00.000Z"),
  event("edge-out", "view", "2024-01-06T01:00:00.001Z"),
  // A later step after dateTo (2024-01-31) but inside the window.
  event("late", "signup", "2024-01-31T23:30:00.000Z"),
  event("late", "view", "2024-02-01T00:10:00.000Z"),
  // An entry before dateFrom does not enter.
  event("early", "signup", "2023-12-31T23:59:59.999Z"),
  event("early", "view", "2024-01-01T00:00:00.000Z"),
  // Two entries: the first has no view within the window, the second does.
  event("twice", "signup", "2024-01-10T10:00:00.000Z"),
  event("twice", "signup", "2024-01-11T09:00:00.000Z"),
  event("twice", "view", "2024-01-11T10:30:00.000Z"),
  event("twice", "purchase", "2024-01-13T10:30:00.000Z"),
  // A step before the entry does not count.
  event("before", "view", "2024-01-12T09:00:00.000Z"),
  event("before", "signup", "2024-01-12T10:00:00.000Z"),
];

const filterEvents: StoredEvent[] = [
  event("p1", "pay", "2024-03-01T10:00Z", { country: "US", price: 19, plan: "pro" }),
  event("p1", "pay", "2024-03-01T11:00Z", { country: "DE", price: 49 }),
  event("p2", "pay", "2024-03-01T12:00Z", { price: 4.99, path: "/pricing" }),
  event("p3", "pay", "2024-03-02T10:00Z", { country: "US", path: "/docs/pricing" }),
  event("p3", "pay", "2024-03-02T10:30Z", { country: "USA", price: 299 }),
  event("p3", "view", "2024-03-02T10:40Z", { country: "US" }),
];

const retentionEvents: StoredEvent[] = [
  event("h", "signup", "2023-12-30T10:00Z"),
  event("h", "signup", "2024-01-09T10:00Z"),
  event("h", "view", "2024-01-10T10:00Z"),
  event("i", "signup", "2024-01-02T10:00Z"),
  event("i", "view", "2024-01-09T10:00Z"),
  event("i", "signup", "2024-01-08T10:00Z"),
  event("j", "signup", "2024-01-03T10:00Z"),
  event("j", "view", "2024-01-11T00:00Z"),
  event("k", "view", "2024-01-01T00:00Z"),
  event("k", "view", "2024-01-08T00:00Z"),
  event("k", "view", "2024-01-10T23:59:59.999Z"),
];

function handCases(): Case[] {
  const trend = (event: string, dateFrom: string, dateTo: string, filters: { property: string; op: string; value?: string }[] = [], math: "total" | "unique" = "total"): QueryRequest => ({
    kind: "trend",
    body: { event, dateFrom, dateTo, groupBy: "day", filters: filters as never, math },
  });
  const funnel = (steps: string[], dateFrom: string, dateTo: string, conversionWindow: number): QueryRequest => ({ kind: "funnel", body: { steps, dateFrom, dateTo, conversionWindow } });
  const retention = (cohortEvent: string, retentionEvent: string, dateFrom: string, dateTo: string, windowDays: number): QueryRequest => ({
    kind: "retention",
    body: { cohortEvent, retentionEvent, dateFrom, dateTo, windowDays },
  });
  const march = ["2024-03-01", "2024-03-02"];
  return [
    // SPEC §5, as stated there.
    { name: "§5 trend", events: specExample, request: trend("signup", "2024-01-01", "2024-01-03"), expected: trendCounts(["2024-01-01", "2024-01-02", "2024-01-03"], [1, 1, 0]) },
    { name: "§5 funnel 1 day", events: specExample, request: funnel(["signup", "view", "purchase"], "2024-01-01", "2024-01-31", 86_400), expected: funnelCounts(["signup", "view", "purchase"], [3, 1, 0]) },
    { name: "§5 funnel 3 days", events: specExample, request: funnel(["signup", "view", "purchase"], "2024-01-01", "2024-01-31", 259_200), expected: funnelCounts(["signup", "view", "purchase"], [3, 1, 1]) },
    { name: "§5 funnel 2 steps", events: specExample, request: funnel(["signup", "purchase"], "2024-01-01", "2024-01-31", 86_400), expected: funnelCounts(["signup", "purchase"], [3, 1]) },
    {
      name: "§5 retention",
      events: specExample,
      request: retention("signup", "view", "2024-01-01", "2024-01-14", 7),
      expected: { cohorts: [{ cohortDate: "2024-01-01", total: 2, weeks: [2, 1] }, { cohortDate: "2024-01-08", total: 1, weeks: [1] }] } satisfies RetentionAnswer,
    },
    // Funnel edges (users: tie, edge-in, edge-out, late, twice, before; early never enters).
    { name: "ties count as in order", events: handEvents.filter((e) => e.distinctId === "tie"), request: funnel(["signup", "view", "purchase"], "2024-01-01", "2024-01-31", 60), expected: funnelCounts(["signup", "view", "purchase"], [1, 1, 1]) },
    { name: "window boundary to the millisecond", events: handEvents.filter((e) => e.distinctId.startsWith("edge")), request: funnel(["signup", "view"], "2024-01-01", "2024-01-31", 3_600), expected: funnelCounts(["signup", "view"], [2, 1]) },
    { name: "later step after dateTo", events: handEvents.filter((e) => e.distinctId === "late"), request: funnel(["signup", "view"], "2024-01-01", "2024-01-31", 3_600), expected: funnelCounts(["signup", "view"], [1, 1]) },
    { name: "entry before dateFrom", events: handEvents.filter((e) => e.distinctId === "early"), request: funnel(["signup", "view"], "2024-01-01", "2024-01-31", 86_400), expected: funnelCounts(["signup", "view"], [0, 0]) },
    { name: "deepest of several entries", events: handEvents.filter((e) => e.distinctId === "twice"), request: funnel(["signup", "view", "purchase"], "2024-01-01", "2024-01-31", 86_400), expected: funnelCounts(["signup", "view", "purchase"], [1, 1, 0]) },
    { name: "step before the entry", events: handEvents.filter((e) => e.distinctId === "before"), request: funnel(["signup", "view"], "2024-01-01", "2024-01-31", 86_400), expected: funnelCounts(["signup", "view"], [1, 0]) },
    { name: "all hand funnel users", events: handEvents, request: funnel(["signup", "view", "purchase"], "2024-01-01", "2024-01-31", 86_400), expected: funnelCounts(["signup", "view", "purchase"], [6, 5, 1]) },
    { name: "one-step funnel", events: handEvents, request: funnel(["signup"], "2024-01-01", "2024-01-31", 86_400), expected: funnelCounts(["signup"], [6]) },
    { name: "unknown step name", events: handEvents, request: funnel(["signup", "nope"], "2024-01-01", "2024-01-31", 86_400), expected: funnelCounts(["signup", "nope"], [6, 0]) },
    // Retention edges: first cohort event in range, the short last period, events after dateTo.
    {
      name: "retention, first in range and short last period",
      events: retentionEvents,
      request: retention("signup", "view", "2024-01-01", "2024-01-10", 7),
      expected: { cohorts: [{ cohortDate: "2024-01-01", total: 2, weeks: [2, 1] }, { cohortDate: "2024-01-08", total: 1, weeks: [1] }] },
    },
    {
      name: "retention, same cohort and retention event",
      events: retentionEvents,
      request: retention("view", "view", "2024-01-01", "2024-01-10", 7),
      expected: { cohorts: [{ cohortDate: "2024-01-01", total: 1, weeks: [1, 1] }, { cohortDate: "2024-01-08", total: 2, weeks: [2] }] },
    },
    {
      name: "retention, one-day periods",
      events: retentionEvents,
      request: retention("signup", "view", "2024-01-01", "2024-01-04", 1),
      expected: {
        cohorts: [
          { cohortDate: "2024-01-01", total: 0, weeks: [0, 0, 0, 0] },
          { cohortDate: "2024-01-02", total: 1, weeks: [1, 0, 0] },
          { cohortDate: "2024-01-03", total: 1, weeks: [1, 0] },
          { cohortDate: "2024-01-04", total: 0, weeks: [0] },
        ],
      },
    },
    // Trend filters over absent, string and numeric properties.
    { name: "eq", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "country", op: "eq", value: "US" }]), expected: trendCounts(march, [1, 1]) },
    { name: "neq passes absent", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "country", op: "neq", value: "US" }]), expected: trendCounts(march, [2, 1]) },
    { name: "contains", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "country", op: "contains", value: "US" }]), expected: trendCounts(march, [1, 2]) },
    { name: "not_contains", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "path", op: "not_contains", value: "pricing" }]), expected: trendCounts(march, [2, 1]) },
    { name: "gte on a number", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "price", op: "gte", value: "19" }]), expected: trendCounts(march, [2, 1]) },
    { name: "gt with exponent", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "price", op: "gt", value: "1.9e1" }]), expected: trendCounts(march, [1, 1]) },
    { name: "lt rejects a non-numeric value", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "price", op: "lt", value: "abc" }]), expected: trendCounts(march, [0, 0]) },
    { name: "eq on a number's text", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "price", op: "eq", value: "4.99" }]), expected: trendCounts(march, [1, 0]) },
    { name: "eq on a non-canonical number text", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "price", op: "eq", value: "19.0" }]), expected: trendCounts(march, [0, 0]) },
    { name: "is_set", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "plan", op: "is_set" }]), expected: trendCounts(march, [1, 0]) },
    { name: "is_not_set", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "country", op: "is_not_set" }]), expected: trendCounts(march, [1, 0]) },
    { name: "unknown property", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "nope", op: "neq", value: "x" }]), expected: trendCounts(march, [3, 2]) },
    { name: "two filters", events: filterEvents, request: trend("pay", march[0], march[1], [{ property: "country", op: "is_set" }, { property: "price", op: "lte", value: "49" }]), expected: trendCounts(march, [2, 0]) },
    { name: "unique", events: filterEvents, request: trend("pay", march[0], march[1], [], "unique"), expected: trendCounts(march, [2, 1]) },
  ];
}

/** Random users over few names and few distinct times, so ties and window edges are common. */
function randomCases(seed: number, caseCount: number): Case[] {
  const random = new SeededRandom(seed);
  const names = ["a", "b", "c", "d", "e"];
  const baseMs = Date.parse("2024-02-01T00:00:00Z");
  const events: StoredEvent[] = [];
  for (let user = 0; user < 150; user += 1) {
    const count = random.nextInt(14);
    for (let index = 0; index < count; index += 1) {
      // Times on a 20-minute grid over 10 days, plus the odd millisecond either side.
      const jitter = [0, 0, 0, 1, -1][random.nextInt(5)];
      const timeMs = baseMs + random.nextInt(10 * 72) * 1_200_000 + jitter;
      events.push({ event: random.pick(names), distinctId: `r${user}`, timestampMs: timeMs, properties: { country: random.pick(["US", "DE", "FR"]) } });
    }
  }
  const cases: Case[] = [];
  const dates = ["2024-01-31", "2024-02-01", "2024-02-02", "2024-02-04", "2024-02-06", "2024-02-09", "2024-02-12"];
  for (let index = 0; index < caseCount; index += 1) {
    const from = random.nextInt(4);
    const dateFrom = dates[from];
    const dateTo = dates[from + 1 + random.nextInt(dates.length - from - 1)];
    const kind = index % 3;
    if (kind === 0) {
      const shuffled = [...names].sort(() => random.nextFloat() - 0.5);
      const steps = shuffled.slice(0, 2 + random.nextInt(4));
      const conversionWindow = random.pick([1_200, 3_600, 14_400, 86_400, 259_200]);
      cases.push({ name: `random funnel ${index}`, events, request: { kind: "funnel", body: { steps, dateFrom, dateTo, conversionWindow } } });
    } else if (kind === 1) {
      cases.push({
        name: `random retention ${index}`,
        events,
        request: { kind: "retention", body: { cohortEvent: random.pick(names), retentionEvent: random.pick(names), dateFrom, dateTo, windowDays: 1 + random.nextInt(4) } },
      });
    } else {
      cases.push({
        name: `random trend ${index}`,
        events,
        request: {
          kind: "trend",
          body: { event: random.pick(names), dateFrom, dateTo, groupBy: "day", filters: random.nextFloat() < 0.5 ? [{ property: "country", op: "eq", value: "US" }] : [], math: random.pick(["total", "unique"] as const) },
        },
      });
    }
  }
  return cases;
}

export interface SelfCheckReport {
  cases: number;
  failures: string[];
}

/** Runs every case through the reference and DuckDB; failures are described, not thrown. */
export async function runSelfCheck(duckdb: DuckDbEngine, seed: number): Promise<SelfCheckReport> {
  const failures: string[] = [];
  const cases = [...handCases(), ...randomCases(seed, 60)];
  let loaded: StoredEvent[] | undefined;
  for (const testCase of cases) {
    if (loaded !== testCase.events) {
      await duckdb.loadEvents("check_events", testCase.events);
      loaded = testCase.events;
    }
    const reference = referenceAnswer(testCase.events, testCase.request);
    const { answer } = await duckdb.answer("check_events", testCase.request);
    const describe = (what: string, left: unknown, right: unknown, difference: string) =>
      `${testCase.name}: ${what} differ at ${difference}\n    request ${JSON.stringify(testCase.request)}\n    ${JSON.stringify(left)}\n    ${JSON.stringify(right)}`;
    if (testCase.expected !== undefined) {
      const difference = firstDifference(reference, testCase.expected);
      if (difference !== undefined) failures.push(describe("reference and expected", reference, testCase.expected, difference));
    }
    const difference = firstDifference(answer, reference);
    if (difference !== undefined) failures.push(describe("DuckDB SQL and reference", answer, reference, difference));
  }
  return { cases: cases.length, failures };
}
