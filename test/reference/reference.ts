/**
 * The naive reference implementation of SPEC §4 — trend, funnel and retention —
 * written straight from the contract with plain loops over an array of events.
 * It imports nothing from src/: conformance and differential tests compare the
 * real engine with it, so it trades every bit of speed for being easy to check
 * against the SPEC by reading. Invalid queries throw (the engine answers 400);
 * the reference only has to be right about valid ones.
 */

/** One stored event as a query sees it: distinctId already a string, properties as parsed JSON. */
export interface StoredEvent {
  event: string;
  distinctId: string;
  timestampMs: number;
  properties: Record<string, unknown> | undefined;
}

export const filterOperators = [
  "eq",
  "neq",
  "contains",
  "not_contains",
  "gt",
  "gte",
  "lt",
  "lte",
  "is_set",
  "is_not_set",
] as const;
export type FilterOperator = (typeof filterOperators)[number];

export interface Filter {
  property: string;
  op: FilterOperator;
  value?: string;
}

export const trendGroupings = ["hour", "day", "week", "month"] as const;
export type TrendGrouping = (typeof trendGroupings)[number];

export interface TrendQuery {
  event: string;
  dateFrom: string;
  dateTo: string;
  groupBy?: TrendGrouping;
  filters?: Filter[];
  math?: "total" | "unique";
}

export interface TrendAnswer {
  data: { date: string; count: number }[];
}

export interface FunnelQuery {
  steps: string[];
  dateFrom: string;
  dateTo: string;
  conversionWindow?: number;
}

export interface FunnelAnswer {
  steps: { event: string; count: number; rate: number }[];
}

export interface RetentionQuery {
  cohortEvent: string;
  retentionEvent: string;
  dateFrom: string;
  dateTo: string;
  windowDays?: number;
}

export interface RetentionAnswer {
  cohorts: { cohortDate: string; total: number; weeks: number[] }[];
}

export const dayMs = 86_400_000;
export const hourMs = 3_600_000;

// SPEC §4 and §6 defaults and bounds, repeated here on purpose: the reference
// must not share a constant with the code it checks.
const trendBucketsMax = 10_000;
const retentionPeriodsMax = 1_000;
const funnelStepsMax = 20;
const conversionWindowSecondsDefault = 86_400;
const conversionWindowSecondsMax = 31_536_000;
const windowDaysDefault = 7;
const windowDaysMax = 365;

const numericTextPattern = /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/;

// ---------------------------------------------------------------------------
// Dates

/** UTC midnight of a `YYYY-MM-DD` calendar date, in ms since the epoch; throws on anything else. */
export function parseDate(text: string, field = "date"): number {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text);
  if (match === null) throw new Error(`${field}: not a YYYY-MM-DD date: ${JSON.stringify(text)}`);
  const year = Number(match[1]);
  const month = Number(match[2]);
  const day = Number(match[3]);
  const date = new Date(Date.UTC(year, month - 1, day));
  // Date.UTC rolls 2024-02-30 over to March and maps years 0–99 to 19xx: both are refused.
  if (date.getUTCFullYear() !== year || date.getUTCMonth() !== month - 1 || date.getUTCDate() !== day) {
    throw new Error(`${field}: not a calendar date: ${JSON.stringify(text)}`);
  }
  return date.getTime();
}

/** `YYYY-MM-DD` of the UTC day holding `timeMs`. */
export function formatDay(timeMs: number): string {
  return new Date(timeMs).toISOString().slice(0, 10);
}

/** `YYYY-MM-DD HH:00:00` of the UTC hour holding `timeMs`. */
export function formatHour(timeMs: number): string {
  const iso = new Date(timeMs).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 13)}:00:00`;
}

/** `[dateFrom 00:00, dateTo + 1 day 00:00)` in ms (SPEC §1). */
export function dateRange(dateFrom: string, dateTo: string): { startMs: number; endMs: number } {
  const startMs = parseDate(dateFrom, "dateFrom");
  const toMs = parseDate(dateTo, "dateTo");
  if (startMs > toMs) throw new Error("dateFrom: after dateTo");
  return { startMs, endMs: toMs + dayMs };
}

/** The start of the bucket holding `timeMs`. */
export function bucketStart(timeMs: number, groupBy: TrendGrouping): number {
  switch (groupBy) {
    case "hour":
      return Math.floor(timeMs / hourMs) * hourMs;
    case "day":
      return Math.floor(timeMs / dayMs) * dayMs;
    case "week": {
      // 1970-01-01 was a Thursday, three days after the Monday that starts its ISO week.
      const dayIndex = Math.floor(timeMs / dayMs);
      const daysSinceMonday = (((dayIndex + 3) % 7) + 7) % 7;
      return (dayIndex - daysSinceMonday) * dayMs;
    }
    case "month": {
      const date = new Date(timeMs);
      return Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1);
    }
  }
}

function nextBucketStart(start: number, groupBy: TrendGrouping): number {
  switch (groupBy) {
    case "hour":
      return start + hourMs;
    case "day":
      return start + dayMs;
    case "week":
      return start + 7 * dayMs;
    case "month": {
      const date = new Date(start);
      return Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1);
    }
  }
}

function bucketLabel(start: number, groupBy: TrendGrouping): string {
  return groupBy === "hour" ? formatHour(start) : formatDay(start);
}

// ---------------------------------------------------------------------------
// Properties and filters

/** The own value of `key`, safe for keys such as `__proto__` or `constructor`. */
function ownProperty(properties: Record<string, unknown> | undefined, key: string): unknown {
  if (properties === undefined || properties === null || !Object.hasOwn(properties, key)) return undefined;
  return Object.getOwnPropertyDescriptor(properties, key)?.value;
}

/** A property's text (SPEC §4), or undefined when the property is not set (absent or null). */
export function propertyText(properties: Record<string, unknown> | undefined, key: string): string | undefined {
  const value = ownProperty(properties, key);
  if (value === undefined || value === null) return undefined;
  switch (typeof value) {
    case "string":
      return value;
    case "number":
      return String(value);
    case "boolean":
      return value ? "true" : "false";
    default:
      return JSON.stringify(value);
  }
}

/** The number a numeric comparison uses, or undefined when the property takes no part in one. */
function propertyNumber(properties: Record<string, unknown> | undefined, key: string): number | undefined {
  const value = ownProperty(properties, key);
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value === "string" && numericTextPattern.test(value)) return Number(value);
  return undefined;
}

function compareNumbers(op: "gt" | "gte" | "lt" | "lte", left: number, right: number): boolean {
  switch (op) {
    case "gt":
      return left > right;
    case "gte":
      return left >= right;
    case "lt":
      return left < right;
    case "lte":
      return left <= right;
  }
}

export function filterHolds(properties: Record<string, unknown> | undefined, filter: Filter): boolean {
  const text = propertyText(properties, filter.property);
  const value = filter.value;
  if (filter.op !== "is_set" && filter.op !== "is_not_set" && typeof value !== "string") {
    throw new Error(`filters: value required for op ${filter.op}`);
  }
  switch (filter.op) {
    case "eq":
      return text !== undefined && text === value;
    case "neq":
      return !(text !== undefined && text === value);
    case "contains":
      return text !== undefined && text.includes(value as string);
    case "not_contains":
      return !(text !== undefined && text.includes(value as string));
    case "gt":
    case "gte":
    case "lt":
    case "lte": {
      const left = propertyNumber(properties, filter.property);
      if (left === undefined || !numericTextPattern.test(value as string)) return false;
      return compareNumbers(filter.op, left, Number(value));
    }
    case "is_set":
      return text !== undefined;
    case "is_not_set":
      return text === undefined;
    default:
      throw new Error(`filters: unknown op ${JSON.stringify((filter as Filter).op)}`);
  }
}

// ---------------------------------------------------------------------------
// Trend

export function referenceTrend(events: readonly StoredEvent[], query: TrendQuery): TrendAnswer {
  const groupBy = query.groupBy ?? "day";
  const math = query.math ?? "total";
  const filters = query.filters ?? [];
  const { startMs, endMs } = dateRange(query.dateFrom, query.dateTo);

  // Every bucket from the one holding the first millisecond of the range to the
  // one holding its last, zeros included.
  const starts: number[] = [];
  const lastStart = bucketStart(endMs - 1, groupBy);
  for (let start = bucketStart(startMs, groupBy); start <= lastStart; start = nextBucketStart(start, groupBy)) {
    starts.push(start);
    if (starts.length > trendBucketsMax) throw new Error("groupBy: more than 10 000 buckets");
  }

  const totals = new Map<number, number>();
  const users = new Map<number, Set<string>>();
  for (const event of events) {
    if (event.event !== query.event) continue;
    if (event.timestampMs < startMs || event.timestampMs >= endMs) continue;
    let passes = true;
    for (const filter of filters) {
      if (!filterHolds(event.properties, filter)) passes = false;
    }
    if (!passes) continue;
    const start = bucketStart(event.timestampMs, groupBy);
    totals.set(start, (totals.get(start) ?? 0) + 1);
    let bucketUsers = users.get(start);
    if (bucketUsers === undefined) {
      bucketUsers = new Set();
      users.set(start, bucketUsers);
    }
    bucketUsers.add(event.distinctId);
  }

  const data: TrendAnswer["data"] = [];
  for (const start of starts) {
    const count = math === "unique" ? (users.get(start)?.size ?? 0) : (totals.get(start) ?? 0);
    data.push({ date: bucketLabel(start, groupBy), count });
  }
  return { data };
}

// ---------------------------------------------------------------------------
// Funnel

export function eventsByUser(events: readonly StoredEvent[]): Map<string, StoredEvent[]> {
  const byUser = new Map<string, StoredEvent[]>();
  for (const event of events) {
    let list = byUser.get(event.distinctId);
    if (list === undefined) {
      list = [];
      byUser.set(event.distinctId, list);
    }
    list.push(event);
  }
  return byUser;
}

/**
 * The deepest step (0 = never entered) one user reaches, by searching every
 * chain e1…ek of distinct events with non-decreasing timestamps, e1 in the range
 * and ek at most `windowMs` after e1. Nothing greedy: every candidate for every
 * step is tried, for every entry e1.
 *
 * Two exact reductions keep the search polynomial without assuming anything
 * about which choice is best:
 * - events with the same name and the same millisecond are interchangeable for
 *   a funnel, so a candidate is a (name, millisecond) slot with a multiplicity,
 *   and distinctness means "no slot used more often than it has events";
 * - from a chain whose last event is at time t, the rest of the search depends
 *   only on the next step, on t (later events must be at or after it, at most
 *   the deadline), and on the names already used at exactly t — used events
 *   before t can never be chosen again, and no used event lies after t. The
 *   search is memoised on that state.
 */
function deepestStep(
  userEvents: readonly StoredEvent[],
  steps: readonly string[],
  windowMs: number,
  startMs: number,
  endMs: number,
): number {
  const stepCount = steps.length;
  // multiplicity.get(name).get(timeMs): how many of the user's events share that name and millisecond.
  const multiplicity = new Map<string, Map<number, number>>();
  for (const event of userEvents) {
    let times = multiplicity.get(event.event);
    if (times === undefined) {
      times = new Map();
      multiplicity.set(event.event, times);
    }
    times.set(event.timestampMs, (times.get(event.timestampMs) ?? 0) + 1);
  }
  // slotTimes[j]: the distinct milliseconds of the user's events named steps[j], ascending.
  const slotTimes: number[][] = [];
  for (let step = 0; step < stepCount; step++) {
    const times = [...(multiplicity.get(steps[step])?.keys() ?? [])];
    times.sort((left, right) => left - right);
    slotTimes.push(times);
  }

  let deepest = 0;
  for (const firstTimeMs of slotTimes[0]) {
    if (firstTimeMs < startMs || firstTimeMs >= endMs) continue;
    const deadlineMs = firstTimeMs + windowMs;
    const memo = new Map<string, number>();

    // How many more steps, from `step` on, a chain ending at `lastTimeMs` can take;
    // `usedAtLastTime` holds the names of the chain's events at exactly lastTimeMs, sorted.
    const search = (step: number, lastTimeMs: number, usedAtLastTime: readonly string[]): number => {
      if (step === stepCount) return 0;
      const key = `${step}|${lastTimeMs}|${usedAtLastTime.join("\u0000")}`;
      const known = memo.get(key);
      if (known !== undefined) return known;
      const name = steps[step];
      let best = 0;
      for (const timeMs of slotTimes[step]) {
        if (timeMs < lastTimeMs || timeMs > deadlineMs) continue;
        let used: string[];
        if (timeMs === lastTimeMs) {
          let usedCount = 0;
          for (const usedName of usedAtLastTime) if (usedName === name) usedCount += 1;
          if (usedCount >= (multiplicity.get(name)?.get(timeMs) ?? 0)) continue;
          used = [...usedAtLastTime, name].sort();
        } else {
          used = [name];
        }
        const reached = 1 + search(step + 1, timeMs, used);
        if (reached > best) best = reached;
        if (best === stepCount - step) break;
      }
      memo.set(key, best);
      return best;
    };

    const depth = 1 + search(1, firstTimeMs, [steps[0]]);
    if (depth > deepest) deepest = depth;
    if (deepest === stepCount) break;
  }
  return deepest;
}

export function referenceFunnel(events: readonly StoredEvent[], query: FunnelQuery): FunnelAnswer {
  const steps = query.steps;
  if (!Array.isArray(steps) || steps.length < 1 || steps.length > funnelStepsMax) throw new Error("steps: 1–20 names");
  const windowSeconds = query.conversionWindow ?? conversionWindowSecondsDefault;
  if (!Number.isInteger(windowSeconds) || windowSeconds < 1 || windowSeconds > conversionWindowSecondsMax) {
    throw new Error("conversionWindow: integer 1–31 536 000");
  }
  const { startMs, endMs } = dateRange(query.dateFrom, query.dateTo);

  const counts: number[] = steps.map(() => 0);
  for (const userEvents of eventsByUser(events).values()) {
    const depth = deepestStep(userEvents, steps, windowSeconds * 1000, startMs, endMs);
    for (let step = 0; step < depth; step++) counts[step] += 1;
  }
  return {
    steps: steps.map((event, step) => ({
      event,
      count: counts[step],
      rate: step === 0 ? 1 : counts[0] === 0 ? 0 : counts[step] / counts[0],
    })),
  };
}

// ---------------------------------------------------------------------------
// Retention

export function referenceRetention(events: readonly StoredEvent[], query: RetentionQuery): RetentionAnswer {
  const windowDays = query.windowDays ?? windowDaysDefault;
  if (!Number.isInteger(windowDays) || windowDays < 1 || windowDays > windowDaysMax) {
    throw new Error("windowDays: integer 1–365");
  }
  const { startMs, endMs } = dateRange(query.dateFrom, query.dateTo);
  const periodMs = windowDays * dayMs;
  const dayCount = (endMs - startMs) / dayMs;
  const periodCount = Math.ceil(dayCount / windowDays);
  if (periodCount > retentionPeriodsMax) throw new Error("windowDays: more than 1 000 periods");
  // The last period is cut at the end of dateTo simply because no event past it is looked at.
  const periodOf = (timeMs: number): number => Math.floor((timeMs - startMs) / periodMs);

  const firstCohortTimeMs = new Map<string, number>();
  const retainedPeriods = new Map<string, Set<number>>();
  for (const event of events) {
    if (event.timestampMs < startMs || event.timestampMs >= endMs) continue;
    if (event.event === query.cohortEvent) {
      const known = firstCohortTimeMs.get(event.distinctId);
      if (known === undefined || event.timestampMs < known) firstCohortTimeMs.set(event.distinctId, event.timestampMs);
    }
    if (event.event === query.retentionEvent) {
      let periods = retainedPeriods.get(event.distinctId);
      if (periods === undefined) {
        periods = new Set();
        retainedPeriods.set(event.distinctId, periods);
      }
      periods.add(periodOf(event.timestampMs));
    }
  }

  const cohorts: RetentionAnswer["cohorts"] = [];
  for (let period = 0; period < periodCount; period++) {
    const members: string[] = [];
    for (const [user, timeMs] of firstCohortTimeMs) {
      if (periodOf(timeMs) === period) members.push(user);
    }
    const weeks = [members.length];
    for (let later = period + 1; later < periodCount; later++) {
      let retained = 0;
      for (const user of members) {
        if (retainedPeriods.get(user)?.has(later)) retained += 1;
      }
      weeks.push(retained);
    }
    cohorts.push({ cohortDate: formatDay(startMs + period * periodMs), total: members.length, weeks });
  }
  return { cohorts };
}
