/**
 * The three queries of SPEC §4 written the slow, obvious way, over a plain
 * list of events, plus the request and answer shapes the query benchmark
 * sends and compares. Sits beside the benchmark as its referee: the DuckDB
 * SQL is checked against these functions (on the SPEC §5 example, on hand
 * cases at the edges, and on seeded random data) before any timing, so that
 * when Eventide and DuckDB disagree, the SQL is not the first suspect.
 *
 * Deliberately independent of src/: an engine bug must not be copied into the
 * referee.
 *
 * Estimate: none of this is timed. The exhaustive funnel search is exponential
 * in the number of steps and is only run on a few hundred events; the greedy
 * one costs O(entries × user events) and takes ~1 s at 1 M events.
 */

export const dayMs = 86_400_000;

export type FilterOp = "eq" | "neq" | "contains" | "not_contains" | "gt" | "gte" | "lt" | "lte" | "is_set" | "is_not_set";

export interface PropertyFilter {
  property: string;
  op: FilterOp;
  value?: string;
}

export interface TrendRequest {
  event: string;
  dateFrom: string;
  dateTo: string;
  groupBy: "day";
  filters: PropertyFilter[];
  math: "total" | "unique";
}

export interface FunnelRequest {
  steps: string[];
  dateFrom: string;
  dateTo: string;
  /** Seconds. */
  conversionWindow: number;
}

export interface RetentionRequest {
  cohortEvent: string;
  retentionEvent: string;
  dateFrom: string;
  dateTo: string;
  windowDays: number;
}

export type QueryRequest =
  | { kind: "trend"; body: TrendRequest }
  | { kind: "funnel"; body: FunnelRequest }
  | { kind: "retention"; body: RetentionRequest };

export interface TrendAnswer {
  data: { date: string; count: number }[];
}
export interface FunnelAnswer {
  steps: { event: string; count: number; rate: number }[];
}
export interface RetentionAnswer {
  cohorts: { cohortDate: string; total: number; weeks: number[] }[];
}
export type QueryAnswer = TrendAnswer | FunnelAnswer | RetentionAnswer;

export type PropertyValue = string | number | boolean | null | object;

export interface ReferenceEvent {
  event: string;
  distinctId: string;
  timeMs: number;
  properties: Record<string, PropertyValue>;
}

export function dateToMs(date: string): number {
  const timeMs = Date.parse(`${date}T00:00:00.000Z`);
  if (!/^\d{4}-\d{2}-\d{2}$/.test(date) || Number.isNaN(timeMs)) throw new Error(`not a date: ${date}`);
  return timeMs;
}

export function msToDate(timeMs: number): string {
  return new Date(timeMs).toISOString().slice(0, 10);
}

export function addDays(date: string, days: number): string {
  return msToDate(dateToMs(date) + days * dayMs);
}

/** [dateFrom 00:00, dateTo + 1 day 00:00) in ms (SPEC §1). */
export function rangeMs(dateFrom: string, dateTo: string): { fromMs: number; toMs: number } {
  return { fromMs: dateToMs(dateFrom), toMs: dateToMs(dateTo) + dayMs };
}

/** Funnel counts → the answer's steps, rates as SPEC §4 defines them. */
export function funnelAnswer(steps: readonly string[], counts: readonly number[]): FunnelAnswer {
  return {
    steps: steps.map((event, index) => ({
      event,
      count: counts[index],
      rate: index === 0 ? 1 : counts[0] === 0 ? 0 : counts[index] / counts[0],
    })),
  };
}

export function retentionPeriodCount(request: RetentionRequest): number {
  const days = (dateToMs(request.dateTo) - dateToMs(request.dateFrom)) / dayMs + 1;
  return Math.ceil(days / request.windowDays);
}

// ---------------------------------------------------------------------------
// Filters (SPEC §4 table).

export const numericPattern = /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/;

function propertyText(value: PropertyValue | undefined): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value);
}

function numericValue(value: PropertyValue | undefined): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value === "string" && numericPattern.test(value)) return Number(value);
  return undefined;
}

export function filterHolds(filter: PropertyFilter, properties: Record<string, PropertyValue>): boolean {
  const raw = Object.prototype.hasOwnProperty.call(properties, filter.property) ? properties[filter.property] : undefined;
  const text = propertyText(raw);
  const value = filter.value ?? "";
  switch (filter.op) {
    case "eq":
      return text !== undefined && text === value;
    case "neq":
      return !(text !== undefined && text === value);
    case "contains":
      return text !== undefined && text.includes(value);
    case "not_contains":
      return !(text !== undefined && text.includes(value));
    case "gt":
    case "gte":
    case "lt":
    case "lte": {
      const left = numericValue(raw);
      if (left === undefined || !numericPattern.test(value)) return false;
      const right = Number(value);
      if (filter.op === "gt") return left > right;
      if (filter.op === "gte") return left >= right;
      if (filter.op === "lt") return left < right;
      return left <= right;
    }
    case "is_set":
      return text !== undefined;
    case "is_not_set":
      return text === undefined;
  }
}

// ---------------------------------------------------------------------------
// Queries.

export function referenceTrend(events: readonly ReferenceEvent[], request: TrendRequest): TrendAnswer {
  if (request.groupBy !== "day") throw new Error("reference trend: only groupBy day");
  const { fromMs, toMs } = rangeMs(request.dateFrom, request.dateTo);
  const bucketCount = (toMs - fromMs) / dayMs;
  const totals = new Array<number>(bucketCount).fill(0);
  const users = Array.from({ length: bucketCount }, () => new Set<string>());
  for (const event of events) {
    if (event.event !== request.event || event.timeMs < fromMs || event.timeMs >= toMs) continue;
    if (!request.filters.every((filter) => filterHolds(filter, event.properties))) continue;
    const bucket = Math.floor((event.timeMs - fromMs) / dayMs);
    totals[bucket] += 1;
    users[bucket].add(event.distinctId);
  }
  return {
    data: totals.map((total, bucket) => ({
      date: msToDate(fromMs + bucket * dayMs),
      count: request.math === "unique" ? users[bucket].size : total,
    })),
  };
}

function eventsByUser(events: readonly ReferenceEvent[]): Map<string, ReferenceEvent[]> {
  const byUser = new Map<string, ReferenceEvent[]>();
  for (const event of events) {
    let list = byUser.get(event.distinctId);
    if (list === undefined) byUser.set(event.distinctId, (list = []));
    list.push(event);
  }
  for (const list of byUser.values()) list.sort((left, right) => left.timeMs - right.timeMs);
  return byUser;
}

/**
 * Funnel by exhaustive search: for every entry, try every assignment of
 * distinct events to the later steps with non-decreasing timestamps inside the
 * window, and keep the deepest. Exponential; for tiny inputs only, where it is
 * the definition itself rather than an algorithm that could be subtly wrong.
 */
export function referenceFunnelExhaustive(events: readonly ReferenceEvent[], request: FunnelRequest): FunnelAnswer {
  const { fromMs, toMs } = rangeMs(request.dateFrom, request.dateTo);
  const windowMs = request.conversionWindow * 1000;
  const counts = new Array<number>(request.steps.length).fill(0);
  for (const list of eventsByUser(events).values()) {
    let deepest = 0;
    const used = new Set<ReferenceEvent>();
    const search = (step: number, previousMs: number, entryMs: number): number => {
      if (step === request.steps.length) return step;
      let best = step;
      for (const candidate of list) {
        if (used.has(candidate) || candidate.event !== request.steps[step]) continue;
        if (candidate.timeMs < previousMs || candidate.timeMs - entryMs > windowMs) continue;
        used.add(candidate);
        best = Math.max(best, search(step + 1, candidate.timeMs, entryMs));
        used.delete(candidate);
        if (best === request.steps.length) break;
      }
      return best;
    };
    for (const entry of list) {
      if (entry.event !== request.steps[0] || entry.timeMs < fromMs || entry.timeMs >= toMs) continue;
      used.add(entry);
      deepest = Math.max(deepest, search(1, entry.timeMs, entry.timeMs));
      used.delete(entry);
      if (deepest === request.steps.length) break;
    }
    for (let step = 0; step < deepest; step += 1) counts[step] += 1;
  }
  return funnelAnswer(request.steps, counts);
}

/**
 * Funnel by greedy chaining: from each entry, take for each step the earliest
 * unused event of that name at or after the previous one. Earliest-first is
 * optimal for "non-decreasing and within a window from the entry" (an
 * exchange argument: a later choice never enables more), which the exhaustive
 * search confirms on random data in the self-check.
 */
export function referenceFunnelGreedy(events: readonly ReferenceEvent[], request: FunnelRequest): FunnelAnswer {
  const { fromMs, toMs } = rangeMs(request.dateFrom, request.dateTo);
  const windowMs = request.conversionWindow * 1000;
  const counts = new Array<number>(request.steps.length).fill(0);
  const stepCount = request.steps.length;
  for (const list of eventsByUser(events).values()) {
    let deepest = 0;
    const chosen: number[] = [];
    for (let entryIndex = 0; entryIndex < list.length && deepest < stepCount; entryIndex += 1) {
      const entry = list[entryIndex];
      if (entry.event !== request.steps[0] || entry.timeMs < fromMs || entry.timeMs >= toMs) continue;
      chosen.length = 0;
      chosen.push(entryIndex);
      let previousMs = entry.timeMs;
      let depth = 1;
      for (let step = 1; step < stepCount; step += 1) {
        let found = -1;
        // The list is sorted by time, so the first unused match at or after previousMs is the earliest;
        // events tied with previousMs may sit before the previous choice in the list, hence the search
        // starts at the first event of time previousMs, not after the previous choice.
        let low = 0;
        let high = list.length;
        while (low < high) {
          const middle = (low + high) >>> 1;
          if (list[middle].timeMs < previousMs) low = middle + 1;
          else high = middle;
        }
        for (let index = low; index < list.length; index += 1) {
          const candidate = list[index];
          if (candidate.timeMs - entry.timeMs > windowMs) break;
          if (candidate.event !== request.steps[step] || chosen.includes(index)) continue;
          found = index;
          break;
        }
        if (found < 0) break;
        chosen.push(found);
        previousMs = list[found].timeMs;
        depth += 1;
      }
      deepest = Math.max(deepest, depth);
    }
    for (let step = 0; step < deepest; step += 1) counts[step] += 1;
  }
  return funnelAnswer(request.steps, counts);
}

export function referenceRetention(events: readonly ReferenceEvent[], request: RetentionRequest): RetentionAnswer {
  const { fromMs, toMs } = rangeMs(request.dateFrom, request.dateTo);
  const periodMs = request.windowDays * dayMs;
  const periodCount = retentionPeriodCount(request);
  const firstCohortMs = new Map<string, number>();
  const returned = new Map<string, Set<number>>();
  for (const event of events) {
    if (event.timeMs < fromMs || event.timeMs >= toMs) continue;
    if (event.event === request.cohortEvent) {
      const previous = firstCohortMs.get(event.distinctId);
      if (previous === undefined || event.timeMs < previous) firstCohortMs.set(event.distinctId, event.timeMs);
    }
    if (event.event === request.retentionEvent) {
      let periods = returned.get(event.distinctId);
      if (periods === undefined) returned.set(event.distinctId, (periods = new Set()));
      periods.add(Math.floor((event.timeMs - fromMs) / periodMs));
    }
  }
  const cohorts = Array.from({ length: periodCount }, (_, period) => ({
    cohortDate: msToDate(fromMs + period * periodMs),
    total: 0,
    weeks: new Array<number>(periodCount - period).fill(0),
  }));
  for (const [user, firstMs] of firstCohortMs) {
    const period = Math.floor((firstMs - fromMs) / periodMs);
    const cohort = cohorts[period];
    cohort.total += 1;
    cohort.weeks[0] += 1;
    const periods = returned.get(user);
    if (periods === undefined) continue;
    for (let offset = 1; offset < cohort.weeks.length; offset += 1) if (periods.has(period + offset)) cohort.weeks[offset] += 1;
  }
  return { cohorts };
}

export function referenceAnswer(events: readonly ReferenceEvent[], request: QueryRequest): QueryAnswer {
  switch (request.kind) {
    case "trend":
      return referenceTrend(events, request.body);
    case "funnel":
      return referenceFunnelGreedy(events, request.body);
    case "retention":
      return referenceRetention(events, request.body);
  }
}

// ---------------------------------------------------------------------------
// Comparing answers.

/**
 * The first place where two answers differ, or undefined when they are the
 * same: integers must be equal, other numbers (funnel rates) equal to 1e-12
 * relative, since both sides compute count / first count in doubles.
 */
export function firstDifference(left: unknown, right: unknown, path = "$"): string | undefined {
  if (typeof left === "number" && typeof right === "number") {
    if (Number.isInteger(left) && Number.isInteger(right)) return left === right ? undefined : `${path}: ${left} ≠ ${right}`;
    return Math.abs(left - right) <= 1e-12 * Math.max(1, Math.abs(left), Math.abs(right)) ? undefined : `${path}: ${left} ≠ ${right}`;
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
