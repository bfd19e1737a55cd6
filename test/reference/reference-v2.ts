/**
 * The naive reference implementation of SPEC §7 (version 2 of the query API):
 * time zones, event references with filters, breakdowns, trend maths over a
 * property, funnel orders, exclusions and time to convert, and the two listings
 * of what a workspace holds. Written from SPEC §1, §4 and §7 alone, with plain
 * loops over arrays of event objects; it imports nothing from src/. Local time
 * comes from the platform's Intl and nothing else. Invalid queries throw (the
 * engine answers 400); the reference only has to be right about valid ones.
 */
import { type Filter, type StoredEvent, dayMs, eventsByUser, filterHolds, parseDate, propertyText } from "./reference.js";

export type { Filter, StoredEvent };

// SPEC §4, §6 and §7 defaults and bounds, repeated on purpose: the reference shares no constant with the engine.
const trendBucketsMax = 10_000;
const retentionPeriodsMax = 1_000;
const funnelStepsMax = 20;
const exclusionsMax = 10;
const conversionWindowSecondsDefault = 86_400;
const conversionWindowSecondsMax = 31_536_000;
const windowDaysDefault = 7;
const windowDaysMax = 365;
const breakdownLimitDefault = 25;
const breakdownLimitMax = 1_000;
const numericTextPattern = /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/;

/** An event name, or a name with filters that only its events must pass (SPEC §7.2). */
export type EventReference = string | { event: string; filters?: Filter[] };

export type Grouping = "hour" | "day" | "week" | "month";
export type TrendMath = "total" | "unique" | "sum" | "avg" | "min" | "max" | "avg_per_user";
export type FunnelOrder = "ordered" | "strict" | "unordered";

export interface TrendQueryV2 {
  event: EventReference;
  dateFrom: string;
  dateTo: string;
  groupBy?: Grouping;
  filters?: Filter[];
  math?: TrendMath;
  mathProperty?: string;
  timezone?: string;
  breakdown?: string;
  breakdownLimit?: number;
}

export interface Exclusion {
  event: EventReference;
  fromStep: number;
  toStep: number;
}

export interface FunnelQueryV2 {
  steps: EventReference[];
  dateFrom: string;
  dateTo: string;
  conversionWindow?: number;
  filters?: Filter[];
  timezone?: string;
  breakdown?: string;
  breakdownLimit?: number;
  order?: FunnelOrder;
  exclusions?: Exclusion[];
  timeToConvert?: boolean;
}

export interface RetentionQueryV2 {
  cohortEvent: EventReference;
  retentionEvent: EventReference;
  dateFrom: string;
  dateTo: string;
  windowDays?: number;
  filters?: Filter[];
  timezone?: string;
  breakdown?: string;
  breakdownLimit?: number;
}

/** A breakdown value: the property's text, or null when it is not set. */
export type BreakdownValue = string | null;

export type TrendPoint = { date: string; count: number } | { date: string; value: number | null };
export interface TrendAnswerV2 {
  data: TrendPoint[];
  breakdown?: { value: BreakdownValue; data: TrendPoint[] }[];
  breakdownOther?: { data: TrendPoint[] };
}

export interface FunnelStep {
  event: string;
  count: number;
  rate: number;
  medianTimeToConvertMs?: number | null;
  avgTimeToConvertMs?: number | null;
}
export interface FunnelAnswerV2 {
  steps: FunnelStep[];
  breakdown?: { value: BreakdownValue; steps: FunnelStep[] }[];
  breakdownOther?: { steps: FunnelStep[] };
}

export interface Cohort {
  cohortDate: string;
  total: number;
  weeks: number[];
}
export interface RetentionAnswerV2 {
  cohorts: Cohort[];
  breakdown?: { value: BreakdownValue; cohorts: Cohort[] }[];
  breakdownOther?: { cohorts: Cohort[] };
}

// ---------------------------------------------------------------------------
// Time zones, from Intl alone

/** A zone as Intl resolves it (aliases and letter case included); throws on anything Intl refuses. */
export function resolveZone(name: unknown = "UTC"): string {
  if (typeof name !== "string") throw new Error("timezone: not a string");
  try {
    return new Intl.DateTimeFormat("en-US", { timeZone: name }).resolvedOptions().timeZone;
  } catch {
    throw new Error(`timezone: unknown zone ${JSON.stringify(name)}`);
  }
}

const formatters = new Map<string, Intl.DateTimeFormat>();

/**
 * The zone's offset at an instant, in ms (local wall clock minus UTC), read from
 * Intl's wall clock (`M/D/YYYY, HH:MM:SS` in en-US, parsed strictly). Intl shows
 * whole seconds, so the instant's milliseconds are set aside and added back.
 */
export function offsetAt(zone: string, timeMs: number): number {
  let formatter = formatters.get(zone);
  if (formatter === undefined) {
    formatter = new Intl.DateTimeFormat("en-US", {
      timeZone: zone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
    });
    formatters.set(zone, formatter);
  }
  const wholeSecondMs = Math.floor(timeMs / 1000) * 1000;
  const text = formatter.format(new Date(wholeSecondMs));
  const match = /^(\d{1,2})\/(\d{1,2})\/(\d{4}), (\d{2}):(\d{2}):(\d{2})$/.exec(text);
  // Only instants of years 1000–9999 have this form; a query never reaches outside 1970–9999 by more than a day.
  if (match === null) throw new Error(`offsetAt: unexpected wall clock ${JSON.stringify(text)} in ${zone}`);
  const [, month, day, year, hour, minute, second] = match.map(Number);
  return Date.UTC(year, month - 1, day, hour, minute, second) - wholeSecondMs;
}

/** One stretch of time with a constant offset: `[startMs, endMs)`. */
export interface OffsetPiece {
  startMs: number;
  endMs: number;
  offsetMs: number;
}

/**
 * The stretches of constant offset covering `[fromMs, toMs)`. Offsets are
 * sampled every `stepMs` and each change is pinned to its millisecond by
 * bisection, which assumes that the offset never changes and changes back
 * within one step (true of every zone for decades: transitions are months apart).
 */
const transitionScanStepMs = 6 * 3_600_000;
const pieceCache = new Map<string, OffsetPiece[]>();
export function offsetPieces(zone: string, fromMs: number, toMs: number, stepMs = transitionScanStepMs): OffsetPiece[] {
  const key = `${zone}|${fromMs}|${toMs}|${stepMs}`;
  const cached = pieceCache.get(key);
  if (cached !== undefined) return cached;
  const pieces: OffsetPiece[] = [];
  let startMs = fromMs;
  let offsetMs = offsetAt(zone, fromMs);
  let probeMs = fromMs;
  while (probeMs < toMs) {
    const nextProbeMs = Math.min(probeMs + stepMs, toMs);
    const nextOffsetMs = offsetAt(zone, nextProbeMs);
    if (nextOffsetMs !== offsetMs) {
      // The first instant in (probeMs, nextProbeMs] whose offset differs from offsetMs.
      let low = probeMs;
      let high = nextProbeMs;
      while (high - low > 1) {
        const middle = Math.floor((low + high) / 2);
        if (offsetAt(zone, middle) === offsetMs) low = middle;
        else high = middle;
      }
      pieces.push({ startMs, endMs: high, offsetMs });
      startMs = high;
      offsetMs = offsetAt(zone, high);
      probeMs = high;
      continue;
    }
    probeMs = nextProbeMs;
  }
  pieces.push({ startMs, endMs: toMs, offsetMs });
  if (pieceCache.size > 10_000) pieceCache.clear();
  pieceCache.set(key, pieces);
  return pieces;
}

/** `YYYY-MM-DD` of a wall-clock time written as if it were UTC ms. */
function wallDay(wallMs: number): string {
  return new Date(wallMs).toISOString().slice(0, 10);
}

function wallHour(wallMs: number): string {
  const iso = new Date(wallMs).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 13)}:00:00`;
}

/** The calendar date `days` after `date` (both `YYYY-MM-DD`). */
export function addDays(date: string, days: number): string {
  return wallDay(parseDate(date) + days * dayMs);
}

/**
 * Local time of a query: the pieces of constant offset around its range, from
 * which the local wall clock of any instant near the range is read.
 */
export class LocalTime {
  readonly zone: string;
  readonly pieces: OffsetPiece[];

  /** Covers every instant whose local date lies within `[firstDate - 2 days, lastDate + 2 days]`. */
  constructor(zone: string, firstDate: string, lastDate: string) {
    this.zone = zone;
    // Offsets lie within ±1 day, so two days of margin on each side hold every instant of these local dates.
    this.pieces = offsetPieces(zone, parseDate(firstDate) - 2 * dayMs, parseDate(lastDate) + 3 * dayMs);
  }

  pieceAt(timeMs: number): OffsetPiece {
    for (const piece of this.pieces) {
      if (piece.startMs <= timeMs && timeMs < piece.endMs) return piece;
    }
    throw new Error(`LocalTime: ${timeMs} outside the pieces built for it`);
  }

  /** The local wall clock of an instant, written as UTC ms. */
  wallMs(timeMs: number): number {
    return timeMs + this.pieceAt(timeMs).offsetMs;
  }

  localDate(timeMs: number): string {
    return wallDay(this.wallMs(timeMs));
  }

  /**
   * The first instant whose local date is `date` or later: the start of local
   * day `date` (SPEC §7.1), which for a date the zone skipped is the start of
   * the next day, so the skipped day is empty. In a piece with offset o the
   * local date is at least `date` from `midnight(date) − o` on.
   */
  dayStart(date: string): number {
    const midnightWallMs = parseDate(date);
    let first = Number.POSITIVE_INFINITY;
    for (const piece of this.pieces) {
      const candidate = Math.max(piece.startMs, midnightWallMs - piece.offsetMs);
      if (candidate < piece.endMs && candidate < first) first = candidate;
    }
    if (!Number.isFinite(first)) throw new Error(`LocalTime: no instant of ${date} within the pieces`);
    return first;
  }
}

// ---------------------------------------------------------------------------
// Events, references and values

export function filtersHold(event: StoredEvent, filters: readonly Filter[]): boolean {
  for (const filter of filters) {
    if (!filterHolds(event.properties, filter)) return false;
  }
  return true;
}

export function referenceName(reference: EventReference): string {
  return typeof reference === "string" ? reference : reference.event;
}

function validateFilters(filters: unknown, field: string): Filter[] {
  if (filters === undefined) return [];
  if (!Array.isArray(filters)) throw new Error(`${field}: not an array`);
  return filters as Filter[];
}

function validateReference(reference: unknown, field: string): void {
  if (typeof reference === "string") return;
  if (typeof reference !== "object" || reference === null || typeof (reference as { event?: unknown }).event !== "string") {
    throw new Error(`${field}: not an event reference`);
  }
  validateFilters((reference as { filters?: unknown }).filters, `${field}.filters`);
}

/** Whether an event is the referenced one: its name, its own filters and the query's top-level ones (SPEC §7.2). */
export function matches(event: StoredEvent, reference: EventReference, topFilters: readonly Filter[]): boolean {
  if (typeof reference === "string") return event.event === reference && filtersHold(event, topFilters);
  return event.event === reference.event && filtersHold(event, reference.filters ?? []) && filtersHold(event, topFilters);
}

export function breakdownValue(event: StoredEvent, property: string): BreakdownValue {
  return propertyText(event.properties, property) ?? null;
}

/** Value order for a user's value among equal timestamps: the least, `null` first, strings by UTF-16 code units. */
function compareValuesNullFirst(left: BreakdownValue, right: BreakdownValue): number {
  if (left === right) return 0;
  if (left === null) return -1;
  if (right === null) return 1;
  return left < right ? -1 : 1;
}

/** Value order for ties in rank: `null` last, strings by UTF-16 code units. */
function compareValuesNullLast(left: BreakdownValue, right: BreakdownValue): number {
  if (left === right) return 0;
  if (left === null) return 1;
  if (right === null) return -1;
  return left < right ? -1 : 1;
}

/**
 * The listed values, by rank descending then value (null last), at most `limit`
 * of them, and whether some value was left out.
 */
function rankValues(ranks: Map<BreakdownValue, number>, limit: number): { listed: BreakdownValue[]; leftOut: boolean } {
  const values = [...ranks.keys()];
  values.sort((left, right) => ranks.get(right)! - ranks.get(left)! || compareValuesNullLast(left, right));
  return { listed: values.slice(0, limit), leftOut: values.length > limit };
}

function validateBreakdown(query: { breakdown?: unknown; breakdownLimit?: unknown }): number {
  if (query.breakdown !== undefined && typeof query.breakdown !== "string") throw new Error("breakdown: not a string");
  if (query.breakdownLimit !== undefined) {
    if (query.breakdown === undefined) throw new Error("breakdownLimit: without breakdown");
    if (!Number.isInteger(query.breakdownLimit) || (query.breakdownLimit as number) < 1 || (query.breakdownLimit as number) > breakdownLimitMax) {
      throw new Error("breakdownLimit: integer 1–1 000");
    }
  }
  return (query.breakdownLimit as number | undefined) ?? breakdownLimitDefault;
}

/** The range of a query in a zone: `[start of local day dateFrom, start of local day dateTo + 1)`. */
function localRange(query: { dateFrom: string; dateTo: string; timezone?: string }): { local: LocalTime; startMs: number; endMs: number } {
  const fromDayMs = parseDate(query.dateFrom, "dateFrom");
  const toDayMs = parseDate(query.dateTo, "dateTo");
  if (fromDayMs > toDayMs) throw new Error("dateFrom: after dateTo");
  const local = new LocalTime(resolveZone(query.timezone), query.dateFrom, query.dateTo);
  return { local, startMs: local.dayStart(query.dateFrom), endMs: local.dayStart(addDays(query.dateTo, 1)) };
}

// ---------------------------------------------------------------------------
// Trend buckets

/** The buckets of a trend, in order: their labels, and which one holds an instant (undefined: none). */
export interface Buckets {
  labels: string[];
  indexOf: (timeMs: number) => number | undefined;
}

function mondayOf(date: string): string {
  // 1970-01-01 was a Thursday, three days after the Monday that starts its ISO week.
  const dayIndex = parseDate(date) / dayMs;
  const daysSinceMonday = (((dayIndex + 3) % 7) + 7) % 7;
  return addDays(date, -daysSinceMonday);
}

function monthOf(date: string): string {
  return `${date.slice(0, 7)}-01`;
}

/**
 * The hour buckets of `[startMs, endMs)`: maximal runs of instants with the
 * same local date and hour, a new run starting wherever the clocks go back.
 * The range is first cut at every offset change and every local hour
 * boundary; within one cut the label cannot change; neighbouring cuts merge
 * when their label is the same and the offset did not fall between them.
 */
export function hourRuns(local: LocalTime, startMs: number, endMs: number): { label: string; startMs: number; endMs: number }[] {
  const runs: { label: string; startMs: number; endMs: number; offsetMs: number }[] = [];
  for (const piece of local.pieces) {
    const fromMs = Math.max(piece.startMs, startMs);
    const toMs = Math.min(piece.endMs, endMs);
    let cutMs = fromMs;
    while (cutMs < toMs) {
      const wallMs = cutMs + piece.offsetMs;
      const nextHourWallMs = Math.floor(wallMs / 3_600_000) * 3_600_000 + 3_600_000;
      const cutEndMs = Math.min(nextHourWallMs - piece.offsetMs, toMs);
      const label = wallHour(wallMs);
      const last = runs[runs.length - 1];
      if (last !== undefined && last.endMs === cutMs && last.label === label && piece.offsetMs >= last.offsetMs) {
        last.endMs = cutEndMs;
        last.offsetMs = piece.offsetMs;
      } else {
        runs.push({ label, startMs: cutMs, endMs: cutEndMs, offsetMs: piece.offsetMs });
      }
      if (runs.length > trendBucketsMax) throw new Error("groupBy: more than 10 000 buckets");
      cutMs = cutEndMs;
    }
  }
  return runs.map(({ label, startMs: runStartMs, endMs: runEndMs }) => ({ label, startMs: runStartMs, endMs: runEndMs }));
}

/**
 * Every bucket from the one holding dateFrom to the one holding dateTo (SPEC
 * §4, §7.1). Day buckets are the local dates of the range that the zone did
 * not skip; week and month buckets every local week or month from dateFrom's
 * to dateTo's; an instant belongs to the bucket of its local date's day, week
 * or month, and hour buckets are the runs of `hourRuns`.
 */
export function trendBuckets(local: LocalTime, groupBy: Grouping, dateFrom: string, dateTo: string, startMs: number, endMs: number): Buckets {
  const labels: string[] = [];
  const push = (label: string): void => {
    labels.push(label);
    if (labels.length > trendBucketsMax) throw new Error("groupBy: more than 10 000 buckets");
  };
  if (groupBy === "hour") {
    const runs = hourRuns(local, startMs, endMs);
    for (const run of runs) push(run.label);
    // Runs are consecutive and ascending: bisect for the last one starting at or before the instant.
    const indexOf = (timeMs: number): number | undefined => {
      if (runs.length === 0 || timeMs < runs[0].startMs || timeMs >= runs[runs.length - 1].endMs) return undefined;
      let low = 0;
      let high = runs.length - 1;
      while (low < high) {
        const middle = Math.ceil((low + high) / 2);
        if (runs[middle].startMs <= timeMs) low = middle;
        else high = middle - 1;
      }
      return low;
    };
    return { labels, indexOf };
  }
  const labelOfDate = groupBy === "day" ? (date: string) => date : groupBy === "week" ? mondayOf : monthOf;
  switch (groupBy) {
    case "day":
      for (let date = dateFrom; date <= dateTo; date = addDays(date, 1)) {
        if (local.dayStart(date) !== local.dayStart(addDays(date, 1))) push(date); // a date the zone skipped has no bucket
      }
      break;
    case "week":
      for (let monday = mondayOf(dateFrom); monday <= mondayOf(dateTo); monday = addDays(monday, 7)) push(monday);
      break;
    case "month":
      for (let month = monthOf(dateFrom); month <= monthOf(dateTo); month = monthOf(addDays(month, 31))) push(month);
      break;
  }
  const indexOfLabel = new Map(labels.map((label, index) => [label, index]));
  return { labels, indexOf: (timeMs) => indexOfLabel.get(labelOfDate(local.localDate(timeMs))) };
}

// ---------------------------------------------------------------------------
// Trend

/** The number a math over a property uses (SPEC §7.4), or undefined when the event is skipped by it. */
export function mathNumber(event: StoredEvent, property: string): number | undefined {
  const properties = event.properties;
  if (properties === undefined || properties === null || !Object.hasOwn(properties, property)) return undefined;
  const value = Object.getOwnPropertyDescriptor(properties, property)?.value;
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value === "string" && numericTextPattern.test(value) && Number.isFinite(Number(value))) return Number(value);
  return undefined;
}

/** One bucket's entry from the events it holds. */
function trendPoint(date: string, events: readonly StoredEvent[], math: TrendMath, mathProperty: string | undefined): TrendPoint {
  switch (math) {
    case "total":
      return { date, count: events.length };
    case "unique":
      return { date, count: new Set(events.map((event) => event.distinctId)).size };
    case "avg_per_user": {
      const users = new Set(events.map((event) => event.distinctId)).size;
      return { date, value: users === 0 ? 0 : events.length / users };
    }
    case "sum":
    case "avg":
    case "min":
    case "max": {
      const numbers: number[] = [];
      for (const event of events) {
        const number = mathNumber(event, mathProperty!);
        if (number !== undefined) numbers.push(number);
      }
      let sum = 0;
      for (const number of numbers) sum += number;
      if (math === "sum") return { date, value: sum };
      if (numbers.length === 0) return { date, value: null };
      if (math === "avg") return { date, value: sum / numbers.length };
      return { date, value: math === "min" ? Math.min(...numbers) : Math.max(...numbers) };
    }
  }
}

export function referenceTrendV2(events: readonly StoredEvent[], query: TrendQueryV2): TrendAnswerV2 {
  const groupBy = query.groupBy ?? "day";
  const math = query.math ?? "total";
  if (!["total", "unique", "sum", "avg", "min", "max", "avg_per_user"].includes(math)) throw new Error("math: unknown");
  const propertyMath = math === "sum" || math === "avg" || math === "min" || math === "max";
  if (propertyMath && typeof query.mathProperty !== "string") throw new Error("mathProperty: required");
  if ((math === "total" || math === "unique") && query.mathProperty !== undefined) throw new Error("mathProperty: not with total or unique");
  validateReference(query.event, "event");
  const topFilters = validateFilters(query.filters, "filters");
  const limit = validateBreakdown(query);
  const { local, startMs, endMs } = localRange(query);
  const buckets = trendBuckets(local, groupBy, query.dateFrom, query.dateTo, startMs, endMs);

  const counted: StoredEvent[] = [];
  for (const event of events) {
    if (event.timestampMs < startMs || event.timestampMs >= endMs) continue;
    if (matches(event, query.event, topFilters)) counted.push(event);
  }

  // Each counted event's bucket, looked up once (none for the rare instant of a local date outside the
  // listed ones, such as a repeated hour before dateFrom's first midnight).
  const bucketOf = new Map<StoredEvent, number>();
  for (const event of counted) {
    const index = buckets.indexOf(event.timestampMs);
    if (index !== undefined) bucketOf.set(event, index);
  }
  const series = (members: readonly StoredEvent[]): TrendPoint[] => {
    const held: StoredEvent[][] = buckets.labels.map(() => []);
    for (const event of members) {
      const index = bucketOf.get(event);
      if (index !== undefined) held[index].push(event);
    }
    return buckets.labels.map((label, index) => trendPoint(label, held[index], math, query.mathProperty));
  };

  const answer: TrendAnswerV2 = { data: series(counted) };
  if (query.breakdown === undefined) return answer;

  const byValue = new Map<BreakdownValue, StoredEvent[]>();
  for (const event of counted) {
    const value = breakdownValue(event, query.breakdown);
    if (!byValue.has(value)) byValue.set(value, []);
    byValue.get(value)!.push(event);
  }
  const ranks = new Map<BreakdownValue, number>();
  for (const [value, members] of byValue) {
    ranks.set(value, math === "unique" ? new Set(members.map((event) => event.distinctId)).size : members.length);
  }
  const { listed, leftOut } = rankValues(ranks, limit);
  answer.breakdown = listed.map((value) => ({ value, data: series(byValue.get(value)!) }));
  if (leftOut) {
    const others = counted.filter((event) => !listed.includes(breakdownValue(event, query.breakdown!)));
    answer.breakdownOther = { data: series(others) };
  }
  return answer;
}

// ---------------------------------------------------------------------------
// Funnel

interface FunnelShape {
  steps: EventReference[];
  topFilters: Filter[];
  order: FunnelOrder;
  exclusions: Exclusion[];
  windowMs: number;
  startMs: number;
  endMs: number;
  /** Whether the shortest times to convert are wanted (the unordered search skips them otherwise). */
  timeToConvert: boolean;
}

/** What a funnel knows of one user: the deepest step and, per step reached by a chain, the shortest time to it. */
export interface UserFunnel {
  depth: number;
  /** shortestMs[k - 1]: the shortest ts(e_k) − ts(e_1) over the user's own chains reaching step k, or undefined. */
  shortestMs: (number | undefined)[];
}

/**
 * Ordered and strict funnels for one user, by a depth-first search over every
 * chain e1…ek (SPEC §4, §7.5): e1 matches step 1 and lies in the range, each
 * e_j matches step j, events are distinct, timestamps do not decrease, e_k is
 * within the window of e1; strict also wants no event of the user strictly
 * between consecutive ones; a chain that reaches an exclusion's toStep with a
 * matching event (not the chain's own) strictly between e_fromStep and e_toStep
 * is invalid, and so is every longer chain through it.
 *
 * The search is memoised on everything the rest of a chain can depend on: the
 * step, the last timestamp t, the chain's events at exactly t (later events are
 * at or after t, so earlier ones can never be chosen again), and for each
 * exclusion already entered but not yet closed, ts(e_fromStep) and the chain's
 * events after it (the only chain events an x between could be).
 */
function orderedUserFunnel(userEvents: readonly StoredEvent[], shape: FunnelShape): UserFunnel {
  const sorted = [...userEvents].sort((left, right) => left.timestampMs - right.timestampMs);
  const stepCount = shape.steps.length;
  const candidates: number[][] = shape.steps.map((step) =>
    sorted.flatMap((event, index) => (matches(event, step, shape.topFilters) ? [index] : [])),
  );
  const excluded: number[][] = shape.exclusions.map((exclusion) =>
    sorted.flatMap((event, index) => (matches(event, exclusion.event, shape.topFilters) ? [index] : [])),
  );
  const shortestMs: (number | undefined)[] = shape.steps.map(() => undefined);
  let depth = 0;

  for (const firstIndex of candidates[0]) {
    const firstTimeMs = sorted[firstIndex].timestampMs;
    if (firstTimeMs < shape.startMs || firstTimeMs >= shape.endMs) continue;
    const deadlineMs = firstTimeMs + shape.windowMs;
    const memo = new Map<string, (number | undefined)[]>();

    /** earliest[d]: the smallest timestamp of the chain's (length + d + 1)-th event over valid continuations. */
    const search = (chain: number[]): (number | undefined)[] => {
      const length = chain.length;
      const lastTimeMs = sorted[chain[length - 1]].timestampMs;
      const openExclusions = shape.exclusions.flatMap((exclusion, which) => {
        if (!(exclusion.fromStep <= length && length < exclusion.toStep)) return [];
        const fromTimeMs = sorted[chain[exclusion.fromStep - 1]].timestampMs;
        return [`${which}:${fromTimeMs}:${chain.filter((index) => sorted[index].timestampMs > fromTimeMs).join(",")}`];
      });
      const atLast = chain.filter((index) => sorted[index].timestampMs === lastTimeMs).sort((a, b) => a - b);
      const key = `${length}|${lastTimeMs}|${atLast.join(",")}|${openExclusions.join(";")}`;
      const known = memo.get(key);
      if (known !== undefined) return known;

      const earliest: (number | undefined)[] = [];
      if (length < stepCount) {
        for (const index of candidates[length]) {
          const timeMs = sorted[index].timestampMs;
          if (timeMs < lastTimeMs || timeMs > deadlineMs || chain.includes(index)) continue;
          if (shape.order === "strict" && sorted.some((other) => lastTimeMs < other.timestampMs && other.timestampMs < timeMs)) continue;
          const extended = [...chain, index];
          if (!exclusionsHold(extended)) continue;
          const rest = search(extended);
          const reached = [timeMs, ...rest];
          for (let step = 0; step < reached.length; step++) {
            const value = reached[step];
            if (value !== undefined && (earliest[step] === undefined || value < earliest[step]!)) earliest[step] = value;
          }
        }
      }
      memo.set(key, earliest);
      return earliest;
    };

    /** Exclusions closing at the chain's last step: no matching event outside the chain strictly between. */
    const exclusionsHold = (chain: number[]): boolean => {
      for (const [which, exclusion] of shape.exclusions.entries()) {
        if (exclusion.toStep !== chain.length) continue;
        const fromTimeMs = sorted[chain[exclusion.fromStep - 1]].timestampMs;
        const toTimeMs = sorted[chain[exclusion.toStep - 1]].timestampMs;
        for (const index of excluded[which]) {
          const timeMs = sorted[index].timestampMs;
          if (fromTimeMs < timeMs && timeMs < toTimeMs && !chain.includes(index)) return false;
        }
      }
      return true;
    };

    const rest = search([firstIndex]);
    const reached = [firstTimeMs, ...rest];
    for (let step = 0; step < reached.length; step++) {
      const value = reached[step];
      if (value === undefined) continue;
      depth = Math.max(depth, step + 1);
      const elapsedMs = value - firstTimeMs;
      if (shortestMs[step] === undefined || elapsedMs < shortestMs[step]!) shortestMs[step] = elapsedMs;
    }
  }
  return { depth, shortestMs };
}

/**
 * Whether distinct events can be given to each of `stepIndexes` (one event per
 * step, an event matching its step) from `pool`, with `forced` given to one of
 * them: bipartite matching by augmenting paths (Kuhn), exact for any pool.
 */
function canAssign(steps: readonly number[], pool: readonly number[], fits: (step: number, event: number) => boolean, forced: number): boolean {
  for (const [forcedSlot, forcedStep] of steps.entries()) {
    if (!fits(forcedStep, forced)) continue;
    const owner = new Map<number, number>(); // event → slot
    owner.set(forced, forcedSlot);
    let complete = true;
    for (let slot = 0; slot < steps.length && complete; slot++) {
      if (slot === forcedSlot) continue;
      const visited = new Set<number>();
      const augment = (current: number): boolean => {
        for (const event of pool) {
          if (event === forced || visited.has(event) || !fits(steps[current], event)) continue;
          visited.add(event);
          const holder = owner.get(event);
          if (holder === undefined || augment(holder)) {
            owner.set(event, current);
            return true;
          }
        }
        return false;
      };
      complete = augment(slot);
    }
    if (complete) return true;
  }
  return false;
}

/**
 * Unordered funnels for one user (SPEC §7.5): step k is reached by k distinct
 * events matching steps 1…k whose earliest lies in the range and which all lie
 * within the window of it. Every event in range is tried as that earliest one;
 * the others come from the events at or after it and inside its window. The
 * shortest time to k is found by bisection on the latest timestamp allowed,
 * since allowing later events only adds to the pool.
 */
function unorderedUserFunnel(userEvents: readonly StoredEvent[], shape: FunnelShape): UserFunnel {
  const sorted = [...userEvents].sort((left, right) => left.timestampMs - right.timestampMs);
  const fit: boolean[][] = shape.steps.map((step) => sorted.map((event) => matches(event, step, shape.topFilters)));
  const fits = (step: number, event: number): boolean => fit[step][event];
  const stepCount = shape.steps.length;
  const shortestMs: (number | undefined)[] = shape.steps.map(() => undefined);
  let depth = 0;
  for (const [anchor, anchorEvent] of sorted.entries()) {
    const anchorTimeMs = anchorEvent.timestampMs;
    if (anchorTimeMs < shape.startMs || anchorTimeMs >= shape.endMs) continue;
    if (!fit.some((row) => row[anchor])) continue;
    // The candidates: events at or after the anchor, inside its window, that match some step (no other can help).
    const windowPool = sorted.flatMap((event, index) =>
      event.timestampMs >= anchorTimeMs && event.timestampMs <= anchorTimeMs + shape.windowMs && fit.some((row) => row[index]) ? [index] : [],
    );
    const poolUntil = (latestMs: number): number[] => windowPool.filter((index) => sorted[index].timestampMs <= latestMs);
    for (let reach = 1; reach <= stepCount; reach++) {
      const stepIndexes = Array.from({ length: reach }, (_, step) => step);
      if (!canAssign(stepIndexes, windowPool, fits, anchor)) continue;
      depth = Math.max(depth, reach);
      if (!shape.timeToConvert) continue;
      // Only a shorter time than the best so far matters: skip the anchor unless one exists.
      const bestMs = shortestMs[reach - 1];
      if (bestMs !== undefined && (bestMs === 0 || !canAssign(stepIndexes, poolUntil(anchorTimeMs + bestMs - 1), fits, anchor))) continue;
      // Latest timestamps to try: the distinct ones of the candidates, ascending; the smallest that admits a set wins.
      const latestTimes = [...new Set(windowPool.map((index) => sorted[index].timestampMs))].sort((a, b) => a - b);
      let low = 0;
      let high = latestTimes.length - 1;
      while (low < high) {
        const middle = Math.floor((low + high) / 2);
        if (canAssign(stepIndexes, poolUntil(latestTimes[middle]), fits, anchor)) high = middle;
        else low = middle + 1;
      }
      shortestMs[reach - 1] = latestTimes[low] - anchorTimeMs;
    }
  }
  return { depth, shortestMs };
}

export function userFunnel(userEvents: readonly StoredEvent[], shape: FunnelShape): UserFunnel {
  return shape.order === "unordered" ? unorderedUserFunnel(userEvents, shape) : orderedUserFunnel(userEvents, shape);
}

function median(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

function funnelSteps(users: readonly UserFunnel[], shape: FunnelShape, timeToConvert: boolean): FunnelStep[] {
  const counts = shape.steps.map((_, step) => users.filter((user) => user.depth > step).length);
  return shape.steps.map((reference, step) => {
    const entry: FunnelStep = {
      event: referenceName(reference),
      count: counts[step],
      rate: step === 0 ? 1 : counts[0] === 0 ? 0 : counts[step] / counts[0],
    };
    if (timeToConvert && step > 0) {
      const times: number[] = [];
      for (const user of users) {
        const shortest = user.shortestMs[step];
        if (user.depth > step && shortest !== undefined) times.push(shortest);
      }
      let sum = 0;
      for (const time of times) sum += time;
      entry.medianTimeToConvertMs = median(times);
      entry.avgTimeToConvertMs = times.length === 0 ? null : sum / times.length;
    }
    return entry;
  });
}

export function referenceFunnelV2(events: readonly StoredEvent[], query: FunnelQueryV2): FunnelAnswerV2 {
  const steps = query.steps;
  if (!Array.isArray(steps) || steps.length < 1 || steps.length > funnelStepsMax) throw new Error("steps: 1–20 event references");
  steps.forEach((step, index) => validateReference(step, `steps[${index}]`));
  const windowSeconds = query.conversionWindow ?? conversionWindowSecondsDefault;
  if (!Number.isInteger(windowSeconds) || windowSeconds < 1 || windowSeconds > conversionWindowSecondsMax) {
    throw new Error("conversionWindow: integer 1–31 536 000");
  }
  const order = query.order ?? "ordered";
  if (!["ordered", "strict", "unordered"].includes(order)) throw new Error("order: unknown");
  const exclusions = query.exclusions ?? [];
  if (!Array.isArray(exclusions) || exclusions.length > exclusionsMax) throw new Error("exclusions: at most 10");
  for (const [index, exclusion] of exclusions.entries()) {
    validateReference(exclusion.event, `exclusions[${index}].event`);
    const { fromStep, toStep } = exclusion;
    if (!Number.isInteger(fromStep) || !Number.isInteger(toStep) || fromStep < 1 || fromStep >= toStep || toStep > steps.length) {
      throw new Error(`exclusions[${index}]: 1 ≤ fromStep < toStep ≤ steps`);
    }
  }
  if (order === "unordered" && exclusions.length > 0) throw new Error("exclusions: not with unordered");
  if (query.timeToConvert !== undefined && typeof query.timeToConvert !== "boolean") throw new Error("timeToConvert: not a boolean");
  const topFilters = validateFilters(query.filters, "filters");
  const limit = validateBreakdown(query);
  const { startMs, endMs } = localRange(query);
  const timeToConvert = query.timeToConvert === true;
  const shape: FunnelShape = { steps, topFilters, order, exclusions, windowMs: windowSeconds * 1000, startMs, endMs, timeToConvert };

  const users: { value: BreakdownValue | undefined; funnel: UserFunnel }[] = [];
  for (const userEvents of eventsByUser(events).values()) {
    const funnel = userFunnel(userEvents, shape);
    let value: BreakdownValue | undefined;
    if (query.breakdown !== undefined) {
      // The user's value: the earliest step-1 event in range (unordered: matching any step), least value among ties.
      let earliest: StoredEvent[] = [];
      for (const event of userEvents) {
        if (event.timestampMs < startMs || event.timestampMs >= endMs) continue;
        const entering = order === "unordered" ? steps.some((step) => matches(event, step, topFilters)) : matches(event, steps[0], topFilters);
        if (!entering) continue;
        if (earliest.length === 0 || event.timestampMs < earliest[0].timestampMs) earliest = [event];
        else if (event.timestampMs === earliest[0].timestampMs) earliest.push(event);
      }
      if (earliest.length > 0) {
        value = earliest.map((event) => breakdownValue(event, query.breakdown!)).sort(compareValuesNullFirst)[0];
      }
    }
    users.push({ value, funnel });
  }

  const answer: FunnelAnswerV2 = { steps: funnelSteps(users.map((user) => user.funnel), shape, timeToConvert) };
  if (query.breakdown === undefined) return answer;

  const byValue = new Map<BreakdownValue, UserFunnel[]>();
  for (const user of users) {
    if (user.value === undefined) continue; // no entering event in range: not counted in any series
    if (!byValue.has(user.value)) byValue.set(user.value, []);
    byValue.get(user.value)!.push(user.funnel);
  }
  const ranks = new Map<BreakdownValue, number>();
  for (const [value, members] of byValue) ranks.set(value, members.filter((member) => member.depth >= 1).length);
  const { listed, leftOut } = rankValues(ranks, limit);
  answer.breakdown = listed.map((value) => ({ value, steps: funnelSteps(byValue.get(value)!, shape, timeToConvert) }));
  if (leftOut) {
    const others: UserFunnel[] = [];
    for (const [value, members] of byValue) if (!listed.includes(value)) others.push(...members);
    answer.breakdownOther = { steps: funnelSteps(others, shape, timeToConvert) };
  }
  return answer;
}

// ---------------------------------------------------------------------------
// Retention

export function referenceRetentionV2(events: readonly StoredEvent[], query: RetentionQueryV2): RetentionAnswerV2 {
  const windowDays = query.windowDays ?? windowDaysDefault;
  if (!Number.isInteger(windowDays) || windowDays < 1 || windowDays > windowDaysMax) throw new Error("windowDays: integer 1–365");
  validateReference(query.cohortEvent, "cohortEvent");
  validateReference(query.retentionEvent, "retentionEvent");
  const topFilters = validateFilters(query.filters, "filters");
  const limit = validateBreakdown(query);
  const { local, startMs, endMs } = localRange(query);
  const dayCount = Math.round((parseDate(query.dateTo) - parseDate(query.dateFrom)) / dayMs) + 1;
  const periodCount = Math.ceil(dayCount / windowDays);
  if (periodCount > retentionPeriodsMax) throw new Error("windowDays: more than 1 000 periods");
  // Period p: [start of local day dateFrom + p·windowDays, start of local day dateFrom + (p+1)·windowDays), the last cut at the range's end.
  const periodStarts: number[] = [];
  for (let period = 0; period < periodCount; period++) periodStarts.push(local.dayStart(addDays(query.dateFrom, period * windowDays)));
  const periodOf = (timeMs: number): number => {
    let found = -1;
    for (let period = 0; period < periodCount; period++) if (periodStarts[period] <= timeMs) found = period;
    return found;
  };

  interface Member {
    period: number;
    value: BreakdownValue;
    retained: Set<number>;
  }
  const members: Member[] = [];
  for (const userEvents of eventsByUser(events).values()) {
    let first: StoredEvent[] = [];
    const retained = new Set<number>();
    for (const event of userEvents) {
      if (event.timestampMs < startMs || event.timestampMs >= endMs) continue;
      if (matches(event, query.cohortEvent, topFilters)) {
        if (first.length === 0 || event.timestampMs < first[0].timestampMs) first = [event];
        else if (event.timestampMs === first[0].timestampMs) first.push(event);
      }
      if (matches(event, query.retentionEvent, topFilters)) retained.add(periodOf(event.timestampMs));
    }
    if (first.length === 0) continue;
    const value = query.breakdown === undefined ? null : first.map((event) => breakdownValue(event, query.breakdown!)).sort(compareValuesNullFirst)[0];
    members.push({ period: periodOf(first[0].timestampMs), value, retained });
  }

  const cohortsOf = (group: readonly Member[]): Cohort[] => {
    const cohorts: Cohort[] = [];
    for (let period = 0; period < periodCount; period++) {
      const cohort = group.filter((member) => member.period === period);
      const weeks = [cohort.length];
      for (let later = period + 1; later < periodCount; later++) weeks.push(cohort.filter((member) => member.retained.has(later)).length);
      cohorts.push({ cohortDate: addDays(query.dateFrom, period * windowDays), total: cohort.length, weeks });
    }
    return cohorts;
  };

  const answer: RetentionAnswerV2 = { cohorts: cohortsOf(members) };
  if (query.breakdown === undefined) return answer;
  const ranks = new Map<BreakdownValue, number>();
  for (const member of members) ranks.set(member.value, (ranks.get(member.value) ?? 0) + 1);
  const { listed, leftOut } = rankValues(ranks, limit);
  answer.breakdown = listed.map((value) => ({ value, cohorts: cohortsOf(members.filter((member) => member.value === value)) }));
  if (leftOut) answer.breakdownOther = { cohorts: cohortsOf(members.filter((member) => !listed.includes(member.value))) };
  return answer;
}

// ---------------------------------------------------------------------------
// What the workspace holds (SPEC §7.6)

function countedList<K extends string>(counts: Map<string, number>, key: K): ({ count: number } & Record<K, string>)[] {
  const names = [...counts.keys()].sort((left, right) => counts.get(right)! - counts.get(left)! || (left < right ? -1 : left > right ? 1 : 0));
  return names.map((name) => ({ [key]: name, count: counts.get(name)! }) as { count: number } & Record<K, string>);
}

export function referenceEvents(events: readonly StoredEvent[]): { data: { event: string; count: number }[] } {
  const counts = new Map<string, number>();
  for (const event of events) counts.set(event.event, (counts.get(event.event) ?? 0) + 1);
  return { data: countedList(counts, "event") };
}

export function referenceProperties(events: readonly StoredEvent[], eventName?: string): { data: { property: string; count: number }[] } {
  const counts = new Map<string, number>();
  for (const event of events) {
    if (eventName !== undefined && event.event !== eventName) continue;
    if (event.properties === undefined || event.properties === null) continue;
    for (const key of Object.keys(event.properties)) {
      if (propertyText(event.properties, key) !== undefined) counts.set(key, (counts.get(key) ?? 0) + 1);
    }
  }
  return { data: countedList(counts, "property") };
}

/** One query of any kind, as the differential suite and the benches carry it. */
export type QueryV2 = { kind: "trend"; body: TrendQueryV2 } | { kind: "funnel"; body: FunnelQueryV2 } | { kind: "retention"; body: RetentionQueryV2 };

/** The reference's answer to a query of any kind. */
export function referenceAnswerV2(events: readonly StoredEvent[], query: QueryV2): TrendAnswerV2 | FunnelAnswerV2 | RetentionAnswerV2 {
  switch (query.kind) {
    case "trend":
      return referenceTrendV2(events, query.body);
    case "funnel":
      return referenceFunnelV2(events, query.body);
    case "retention":
      return referenceRetentionV2(events, query.body);
  }
}
