/**
 * The questions the query benches ask, as `{ kind, body }` pairs with every
 * optional field of SPEC §4 spelled out (DuckDB's SQL reads them directly),
 * answered for reference by the test suite's naive SPEC implementation
 * (test/reference/reference.ts) — one reference for tests and benches — and
 * compared field by field.
 *
 * Estimate: the reference is plain loops, ~0.1–1 µs per event per question:
 * at 1 M events ~0.1–1 s a question, which is why it checks only datasets up
 * to --reference-max-events; comparing answers is microseconds.
 */
import { distinctIdOf, type Dataset } from "../fixtures/dataset.js";
import {
  dateRange,
  dayMs,
  formatDay,
  parseDate,
  referenceFunnel,
  referenceRetention,
  referenceTrend,
  type Filter,
  type FunnelAnswer,
  type FunnelQuery,
  type RetentionAnswer,
  type RetentionQuery,
  type StoredEvent,
  type TrendAnswer,
  type TrendQuery,
} from "../../test/reference/reference.js";

export { dateRange, dayMs, formatDay };
export type { Filter, FunnelAnswer, RetentionAnswer, StoredEvent, TrendAnswer };

export type TrendRequest = TrendQuery & { groupBy: "day"; filters: Filter[]; math: "total" | "unique" };
export type FunnelRequest = FunnelQuery & { conversionWindow: number };
export type RetentionRequest = RetentionQuery & { windowDays: number };

export type QueryRequest = { kind: "trend"; body: TrendRequest } | { kind: "funnel"; body: FunnelRequest } | { kind: "retention"; body: RetentionRequest };
export type QueryAnswer = TrendAnswer | FunnelAnswer | RetentionAnswer;

export function addDays(date: string, days: number): string {
  return formatDay(parseDate(date) + days * dayMs);
}

/** Funnel counts → the answer's steps, rates as SPEC §4 defines them. */
export function funnelAnswer(steps: readonly string[], counts: readonly number[]): FunnelAnswer {
  return { steps: steps.map((event, index) => ({ event, count: counts[index], rate: index === 0 ? 1 : counts[0] === 0 ? 0 : counts[index] / counts[0] })) };
}

/** How many windowDays periods cover [dateFrom, dateTo], the last one possibly short. */
export function retentionPeriodCount(request: RetentionRequest): number {
  const { startMs, endMs } = dateRange(request.dateFrom, request.dateTo);
  return Math.ceil((endMs - startMs) / dayMs / request.windowDays);
}

/** The dataset's rows as the reference implementation reads them. */
export function datasetEvents(dataset: Dataset): StoredEvent[] {
  const { columns, dictionaries } = dataset;
  const events: StoredEvent[] = new Array(dataset.eventCount);
  for (let row = 0; row < dataset.eventCount; row += 1) {
    const properties: Record<string, unknown> = {
      country: dictionaries.country[columns.country[row]],
      browser: dictionaries.browser[columns.browser[row]],
      $os: dictionaries.os[columns.os[row]],
      path: dictionaries.path[columns.path[row]],
    };
    if (columns.plan[row] !== 0) properties.plan = dictionaries.plan[columns.plan[row] - 1];
    if (columns.price[row] !== 0) properties.price = dictionaries.price[columns.price[row] - 1];
    events[row] = { event: dictionaries.event[columns.event[row]], distinctId: distinctIdOf(dataset, columns.user[row]), timestampMs: columns.timeMs[row], properties };
  }
  return events;
}

export function referenceAnswer(events: readonly StoredEvent[], request: QueryRequest): QueryAnswer {
  switch (request.kind) {
    case "trend":
      return referenceTrend(events, request.body);
    case "funnel":
      return referenceFunnel(events, request.body);
    case "retention":
      return referenceRetention(events, request.body);
  }
}

// ---------------------------------------------------------------------------
// Comparing answers.

/**
 * The first place where two answers differ, or undefined when they are the
 * same: integers must be equal, other numbers (funnel rates, sums) equal to
 * 1e-9 relative.
 */
export function firstDifference(left: unknown, right: unknown, path = "$"): string | undefined {
  if (typeof left === "number" && typeof right === "number") {
    if (Number.isInteger(left) && Number.isInteger(right)) return left === right ? undefined : `${path}: ${left} ≠ ${right}`;
    // 1e-9 relative: SPEC §7.4 lets sums and averages differ in the last bits (summation order).
    return Math.abs(left - right) <= 1e-9 * Math.max(1, Math.abs(left), Math.abs(right)) ? undefined : `${path}: ${left} ≠ ${right}`;
  }
  if (Array.isArray(left) && Array.isArray(right)) {
    for (let index = 0; index < Math.min(left.length, right.length); index += 1) {
      const difference = firstDifference(left[index], right[index], `${path}[${index}]`);
      if (difference !== undefined) return difference;
    }
    return left.length === right.length ? undefined : `${path}: length ${left.length} ≠ ${right.length}`;
  }
  if (left !== null && right !== null && typeof left === "object" && typeof right === "object" && !Array.isArray(left) && !Array.isArray(right)) {
    const keys = new Set([...Object.keys(left), ...Object.keys(right)]);
    for (const key of keys) {
      const difference = firstDifference((left as Record<string, unknown>)[key], (right as Record<string, unknown>)[key], `${path}.${key}`);
      if (difference !== undefined) return difference;
    }
    return undefined;
  }
  return Object.is(left, right) ? undefined : `${path}: ${JSON.stringify(left)} ≠ ${JSON.stringify(right)}`;
}
