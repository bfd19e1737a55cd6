/**
 * The questions the suite asks, one list of request bodies per query kind,
 * over the seeded dataset's date range (bench/fixtures/dataset.ts): the same
 * bodies go to Eventide over HTTP and, as QueryRequests, to the DuckDB peer.
 *
 * Retention answers may be cached for 60 s per identical request (SPEC §4), so
 * the retention kind cycles through thousands of distinct questions of one
 * shape (13–14 periods of 5–9 days, eight event pairs, fourteen start days),
 * each step starting where the previous one stopped; `CacheExposure`
 * estimates how many answers could still have come from the cache, and the
 * report says so.
 *
 * Estimate: building ~2 800 small JSON bodies takes a few milliseconds.
 */
import { addDays, type QueryRequest } from "../query/query-request.js";
import type { DatasetChoice, QueryKind } from "./options.js";

export interface QueryVariant {
  /** Path on the query listener. */
  path: string;
  /** The JSON body sent to Eventide. */
  body: string;
  /** The same question for the DuckDB peer. */
  request: QueryRequest;
}

export const queryLabels: Record<QueryKind, string> = {
  trend: "trend (total, by day)",
  "trend-unique": "unique trend (users, by day)",
  "trend-filtered": "filtered trend (country = US)",
  "funnel-3": "funnel, 3 steps, 1-day window",
  "funnel-5": "funnel, 5 steps, 1-day window",
  retention: "retention, 13–14 periods",
};

const funnelSteps = ["$pageview", "signup", "activate", "add_to_cart", "purchase"];
const retentionPairs: readonly (readonly [string, string])[] = [
  ["$pageview", "$pageview"],
  ["signup", "$pageview"],
  ["signup", "login"],
  ["signup", "purchase"],
  ["activate", "feature_used"],
  ["$pageview", "search"],
  ["login", "login"],
  ["add_to_cart", "purchase"],
];
/** Period lengths for the retention variants: 13 periods of 5 to 9 days… */
const retentionWindows = [5, 6, 7, 8, 9];
const retentionPeriods = 13;
/** …and 0–4 more days, a short 14th period: a new question (the cache key holds dateTo) of the same cost. */
const retentionExtraDays = 5;

export function datasetRange(dataset: DatasetChoice): { dateFrom: string; dateTo: string } {
  return { dateFrom: dataset.startDate, dateTo: addDays(dataset.startDate, dataset.days - 1) };
}

/** Every variant of one kind; the non-retention kinds have one. */
export function queryVariants(kind: QueryKind, dataset: DatasetChoice): QueryVariant[] {
  const { dateFrom, dateTo } = datasetRange(dataset);
  const trend = (body: Extract<QueryRequest, { kind: "trend" }>["body"]): QueryVariant => ({
    path: "/api/v1/query/trend",
    body: JSON.stringify(body),
    request: { kind: "trend", body },
  });
  const funnel = (steps: string[]): QueryVariant => {
    const body = { steps, dateFrom, dateTo, conversionWindow: 86_400 };
    return { path: "/api/v1/query/funnel", body: JSON.stringify(body), request: { kind: "funnel", body } };
  };
  const trendBody = { event: "$pageview", dateFrom, dateTo, groupBy: "day" as const, filters: [], math: "total" as const };
  switch (kind) {
    case "trend":
      return [trend(trendBody)];
    case "trend-unique":
      return [trend({ ...trendBody, math: "unique" })];
    case "trend-filtered":
      return [trend({ ...trendBody, filters: [{ property: "country", op: "eq", value: "US" }] })];
    case "funnel-3":
      return [funnel(funnelSteps.slice(0, 3))];
    case "funnel-5":
      return [funnel(funnelSteps)];
    case "retention": {
      const variants: QueryVariant[] = [];
      // Start days within the first two weeks (or the data, if shorter); interleaved so consecutive requests differ in every field.
      const startDays = Math.max(1, Math.min(14, dataset.days));
      for (let extraDays = 0; extraDays < retentionExtraDays; extraDays += 1) {
        for (let shift = 0; shift < startDays; shift += 1) {
          for (const windowDays of retentionWindows) {
            for (const [cohortEvent, retentionEvent] of retentionPairs) {
              const start = addDays(dateFrom, shift);
              const body = { cohortEvent, retentionEvent, dateFrom: start, dateTo: addDays(start, windowDays * retentionPeriods - 1 + extraDays), windowDays };
              variants.push({ path: "/api/v1/query/retention", body: JSON.stringify(body), request: { kind: "retention", body } });
            }
          }
        }
      }
      return variants;
    }
  }
}

/**
 * Estimates which retention answers could have come from the 60 s cache: the
 * generator walks the variants in order from an offset, so a variant repeats
 * after one lap; requests are assumed evenly spread over each step.
 */
export class CacheExposure {
  private readonly lastAskedMs: Float64Array;
  /** Where the next step starts in the variant list. */
  offset = 0;

  constructor(
    readonly variantCount: number,
    readonly ttlMs = 60_000,
  ) {
    this.lastAskedMs = new Float64Array(variantCount).fill(Number.NEGATIVE_INFINITY);
  }

  /** Records a step of `requests` sent over [startMs, endMs) from the current offset; returns the share that may have been cached. */
  record(requests: number, startMs: number, endMs: number): number {
    if (requests <= 0) return 0;
    let cached = 0;
    const spacingMs = (endMs - startMs) / requests;
    for (let index = 0; index < requests; index += 1) {
      const variant = (this.offset + index) % this.variantCount;
      const atMs = startMs + index * spacingMs;
      if (atMs - this.lastAskedMs[variant] < this.ttlMs) cached += 1;
      this.lastAskedMs[variant] = atMs;
    }
    this.offset = (this.offset + requests) % this.variantCount;
    return cached / requests;
  }
}
