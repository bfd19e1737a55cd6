// Over 500 lines: every query body's schema in one place, because the same schemas validate requests and describe them (/openapi.json).
/**
 * Query request bodies (SPEC §4, §1, §6) → validated, defaulted values. The
 * HTTP layer hands the parsed JSON body here and answers 400 invalid_request
 * with `message` when parsing fails; everything downstream (plans, kernels,
 * the retention cache key) sees only the `value`, defaults applied.
 *
 * Messages start with the offending field as a path ("filters[1].value: …"),
 * and only the first problem is reported, in field order, so a client fixes one
 * thing at a time. A field the endpoint does not know is refused by name (SPEC
 * §7: strict objects everywhere, filters and event references included).
 *
 * Event names: any string is accepted, the empty string included. Ingest only
 * stores names of 1–200 characters, so "" (or a 300-character name) is simply
 * a name never ingested and answers zero counts, as SPEC §1 asks of unknown
 * names; refusing it would make the same "no such event" answer depend on the
 * spelling of the name.
 */
import { z } from "zod";
import { limits } from "../config/limits.js";
import type { ServiceError } from "../errors.js";
import { parseBody } from "../json/body.js";
import {
  groupByValues,
  isCalendarDate,
  retentionPeriodCount,
  trendBucketCount,
  type GroupBy,
} from "./buckets.js";
import { filterOpTakesValue, filterOps, type FilterOp } from "./filters.js";
import { canonicalTimeZone, utcZone } from "./time-zone.js";

export type TrendMath = "total" | "unique" | "sum" | "avg" | "min" | "max" | "avg_per_user";
const trendMathValues = ["total", "unique", "sum", "avg", "min", "max", "avg_per_user"] as const satisfies readonly TrendMath[];
/** Maths over a numeric property: they need mathProperty. */
export const propertyMaths: readonly TrendMath[] = ["sum", "avg", "min", "max"];

export type FunnelOrder = "ordered" | "strict" | "unordered";
const funnelOrderValues = ["ordered", "strict", "unordered"] as const satisfies readonly FunnelOrder[];

/** An event name and the filters its events must pass (SPEC §7.2); a bare name has none. */
export interface EventReference {
  event: string;
  filters: PropertyFilter[];
}

export interface Breakdown {
  property: string;
  limit: number;
}

export interface FunnelExclusion {
  event: EventReference;
  /** 1-based step numbers, fromStep < toStep. */
  fromStep: number;
  toStep: number;
}

export interface PropertyFilter {
  property: string;
  op: FilterOp;
  /** undefined only for is_set / is_not_set, whose value is ignored. */
  value: string | undefined;
}

export interface TrendRequest {
  event: string;
  /** The event reference's own filters (§7.2); `filters` below are §4's. */
  eventFilters: PropertyFilter[];
  dateFrom: string;
  dateTo: string;
  groupBy: GroupBy;
  filters: PropertyFilter[];
  math: TrendMath;
  mathProperty: string | undefined;
  /** Canonical IANA name; "UTC" by default. */
  timezone: string;
  breakdown: Breakdown | undefined;
}

export interface FunnelRequest {
  steps: EventReference[];
  dateFrom: string;
  dateTo: string;
  /** Seconds. */
  conversionWindow: number;
  /** Top-level filters: they hold for every reference, exclusions included. */
  filters: PropertyFilter[];
  order: FunnelOrder;
  exclusions: FunnelExclusion[];
  timeToConvert: boolean;
  timezone: string;
  breakdown: Breakdown | undefined;
}

export interface RetentionRequest {
  cohortEvent: EventReference;
  retentionEvent: EventReference;
  dateFrom: string;
  dateTo: string;
  windowDays: number;
  filters: PropertyFilter[];
  timezone: string;
  breakdown: Breakdown | undefined;
}

export type ParseResult<T> = { ok: true; value: T } | { ok: false; message: string };

export const defaultConversionWindowSeconds = 86_400;
export const defaultRetentionWindowDays = 7;
export const defaultBreakdownLimit = 25;
export const breakdownLimitMax = 1000;
export const exclusionsMax = 10;

// ---------------------------------------------------------------------------
// Field schemas. Each carries its own message; "required" when the field is absent.

export function messageOr(expected: string): (issue: { input?: unknown }) => string {
  return (issue) => (issue.input === undefined ? "required" : expected);
}

/** A strict object's message: unknown fields are named by firstIssue, everything else is `expected`. */
function objectMessage(expected: string): (issue: { code?: string; input?: unknown }) => string {
  return (issue) => (issue.code === "unrecognized_keys" ? "unknown field" : issue.input === undefined ? "required" : expected);
}

const eventName = z.string({ error: messageOr("expected a string (an event name)") });

const calendarDateMessage = "expected a date YYYY-MM-DD (a real calendar date)";
const calendarDate = z
  .string({ error: messageOr(calendarDateMessage) })
  .refine(isCalendarDate, { error: calendarDateMessage });

const groupByMessage = `expected one of ${groupByValues.join(", ")}`;
const groupBy = z.enum(groupByValues, { error: groupByMessage }).default("day");

const mathMessage = `expected one of ${trendMathValues.join(", ")}`;
const trendMath = z.enum(trendMathValues, { error: mathMessage }).default("total");

const filter = z
  .strictObject(
    {
      property: z.string({ error: messageOr("expected a string (a property name)") }),
      op: z.enum(filterOps, { error: messageOr(`expected one of ${filterOps.join(", ")}`) }),
      value: z.unknown().optional(),
    },
    { error: objectMessage("expected an object {property, op, value}") },
  )
  .check((context) => {
    const { op, value } = context.value;
    if (filterOpTakesValue(op) && typeof value !== "string") {
      context.issues.push({
        code: "custom",
        input: value,
        path: ["value"],
        message: value === undefined ? `required for op ${op}` : "expected a string",
      });
    }
  })
  .transform(
    ({ property, op, value }): PropertyFilter => ({
      property,
      op,
      value: filterOpTakesValue(op) ? (value as string) : undefined,
    }),
  );

/**
 * A filter is compiled against every distinct text of its property, so a
 * query's filter work is (filters × distinct values): both the count and the
 * values' total length are bounded here, before any work starts; the pool's
 * task time limit bounds what the data itself makes of them.
 */
const filtersMessage = `expected an array of at most ${limits.queryFiltersMax} filters`;
const filters = z
  .array(filter, { error: filtersMessage })
  .max(limits.queryFiltersMax, { error: `${filtersMessage} (EVENTIDE_QUERY_FILTERS_MAX)` })
  .check((context) => {
    let characters = 0;
    for (const { value } of context.value) characters += value?.length ?? 0;
    if (characters > limits.queryFilterValueCharactersMax) {
      context.issues.push({
        code: "custom",
        input: context.value,
        message: `the filter values hold ${characters} characters, more than the limit of ${limits.queryFilterValueCharactersMax} (EVENTIDE_QUERY_FILTER_VALUE_CHARACTERS_MAX)`,
      });
    }
  })
  .default([]);

/**
 * An event reference (SPEC §7.2): a name, or {event, filters}. Normalised to
 * the object form; a bare name has no filters of its own.
 */
const eventReference = z
  .union(
    [
      eventName,
      z.strictObject({ event: eventName, filters }, { error: objectMessage("expected an object {event, filters}") }).describe("An event name with filters its events must pass."),
    ],
    { error: messageOr("expected an event name or an object {event, filters}") },
  )
  .transform((reference): EventReference => (typeof reference === "string" ? { event: reference, filters: [] } : reference))
  .describe("An event name, or {event, filters}: only events of that name passing those filters count.");

const stepsMessage = `expected an array of 1 to ${limits.funnelStepsMax} event references`;
const steps = z
  .array(eventReference, { error: messageOr(stepsMessage) })
  .min(1, { error: stepsMessage })
  .max(limits.funnelStepsMax, { error: stepsMessage })
  .describe("The funnel's steps, in order.");

function boundedInteger(minimum: number, maximum: number, unit: string, fallback: number) {
  const message = `expected an integer number of ${unit} from ${minimum} to ${maximum}`;
  return z
    .number({ error: message })
    .int({ error: message })
    .min(minimum, { error: message })
    .max(maximum, { error: message })
    .default(fallback);
}

const timezoneMessage = "expected an IANA time zone name (such as Europe/Berlin) or UTC";
const timezone = z
  .string({ error: timezoneMessage })
  .transform((name, context) => {
    const canonical = canonicalTimeZone(name);
    if (canonical === undefined) context.issues.push({ code: "custom", input: name, message: timezoneMessage });
    return canonical ?? utcZone;
  })
  .default(utcZone)
  .describe("Dates, buckets and periods are local to this zone (SPEC §7.1); aliases and any letter case are accepted.");

const breakdownProperty = z
  .string({ error: "expected a string (a property name)" })
  .optional()
  .describe("Split the answer by this property's value (SPEC §7.3).");
const breakdownLimit = z
  .number({ error: `expected an integer from 1 to ${breakdownLimitMax}` })
  .int({ error: `expected an integer from 1 to ${breakdownLimitMax}` })
  .min(1, { error: `expected an integer from 1 to ${breakdownLimitMax}` })
  .max(breakdownLimitMax, { error: `expected an integer from 1 to ${breakdownLimitMax}` })
  .optional()
  .describe(`How many breakdown values to list (default ${defaultBreakdownLimit}); the rest are summed in breakdownOther.`);

const breakdownFields = { timezone, breakdown: breakdownProperty, breakdownLimit };

const funnelOrder = z
  .enum(funnelOrderValues, { error: `expected one of ${funnelOrderValues.join(", ")}` })
  .default("ordered")
  .describe("ordered (default), strict (no other event between consecutive steps) or unordered.");

const stepNumber = z.number({ error: messageOr("expected an integer step number") }).int({ error: "expected an integer step number" });
const exclusion = z.strictObject(
  { event: eventReference, fromStep: stepNumber, toStep: stepNumber },
  { error: objectMessage("expected an object {event, fromStep, toStep}") },
);
const exclusions = z
  .array(exclusion, { error: `expected an array of at most ${exclusionsMax} exclusions` })
  .max(exclusionsMax, { error: `expected an array of at most ${exclusionsMax} exclusions` })
  .default([])
  .describe("A chain is not valid when the user did the event strictly between the chain's steps fromStep and toStep.");

const trendSchema = z.strictObject(
  {
    event: eventReference,
    dateFrom: calendarDate,
    dateTo: calendarDate,
    groupBy,
    filters,
    math: trendMath,
    mathProperty: z.string({ error: "expected a string (a property name)" }).optional().describe("The numeric property of sum, avg, min and max."),
    ...breakdownFields,
  },
  { error: objectMessage("expected a JSON object") },
);

const funnelSchema = z.strictObject(
  {
    steps,
    dateFrom: calendarDate,
    dateTo: calendarDate,
    conversionWindow: boundedInteger(1, limits.funnelWindowSecondsMax, "seconds", defaultConversionWindowSeconds),
    filters,
    order: funnelOrder,
    exclusions,
    timeToConvert: z.boolean({ error: "expected a boolean" }).default(false).describe("Add median and mean times to convert to every step from the second."),
    ...breakdownFields,
  },
  { error: objectMessage("expected a JSON object") },
);

const retentionSchema = z.strictObject(
  {
    cohortEvent: eventReference,
    retentionEvent: eventReference,
    dateFrom: calendarDate,
    dateTo: calendarDate,
    windowDays: boundedInteger(1, limits.retentionWindowDaysMax, "days", defaultRetentionWindowDays),
    filters,
    ...breakdownFields,
  },
  { error: objectMessage("expected a JSON object") },
);

// ---------------------------------------------------------------------------
// Parsers

/** "filters[1].value" from ["filters", 1, "value"]; "body" for the body itself. */
function fieldPath(path: readonly PropertyKey[]): string {
  let text = "";
  for (const part of path) {
    if (typeof part === "number") text += `[${part}]`;
    else text += text === "" ? String(part) : `.${String(part)}`;
  }
  return text === "" ? "body" : text;
}

type Issue = z.core.$ZodIssue;

/**
 * The issue to report. An unknown field is named as a path of its own. A
 * failed event reference reports the problem of the form it was written in
 * (an object's bad filter rather than "expected a string").
 */
function reportedIssue(issue: Issue, prefix: readonly PropertyKey[]): { path: PropertyKey[]; message: string } {
  const path = [...prefix, ...issue.path];
  if (issue.code === "unrecognized_keys") return { path: [...path, issue.keys[0]], message: "unknown field" };
  if (issue.code === "invalid_union") {
    for (const option of issue.errors) {
      const first = option[0];
      if (first !== undefined && !(first.code === "invalid_type" && first.path.length === 0)) return reportedIssue(first, path);
    }
  }
  return { path, message: issue.message };
}

export function firstIssue(error: z.ZodError): { ok: false; message: string } {
  const { path, message } = reportedIssue(error.issues[0], []);
  return { ok: false, message: `${fieldPath(path)}: ${message}` };
}

type Failure = { ok: false; message: string };

/** dateFrom <= dateTo; dates are already valid, so string order is date order. */
function dateOrderProblem(dateFrom: string, dateTo: string): Failure | undefined {
  return dateFrom <= dateTo ? undefined : { ok: false, message: `dateTo: must not be before dateFrom (${dateFrom})` };
}

function breakdownOf(property: string | undefined, limit: number | undefined): Breakdown | undefined | Failure {
  if (property === undefined) return limit === undefined ? undefined : { ok: false, message: "breakdownLimit: only allowed with breakdown" };
  return { property, limit: limit ?? defaultBreakdownLimit };
}

/** Series an answer may hold: the total, and with a breakdown its listed values and "other". */
function seriesCountOf(breakdown: Breakdown | undefined): number {
  return breakdown === undefined ? 1 : breakdown.limit + 2;
}

/** An answer over its size limit: named by breakdownLimit when there is one (the usual cause), else by the range. */
function answerTooLarge(breakdown: Breakdown | undefined, size: string, limit: number, coarser: string): Failure {
  const field = breakdown === undefined ? "dateTo" : "breakdownLimit";
  return { ok: false, message: `${field}: the answer could hold ${size}, more than the limit of ${limit}; ask for a lower breakdownLimit, ${coarser} or a shorter range` };
}

function isFailure(value: unknown): value is Failure {
  return typeof value === "object" && value !== null && "ok" in value;
}

export function parseTrendRequest(body: unknown): ParseResult<TrendRequest> {
  const parsed = trendSchema.safeParse(body);
  if (!parsed.success) return firstIssue(parsed.error);
  const value = parsed.data;
  const orderProblem = dateOrderProblem(value.dateFrom, value.dateTo);
  if (orderProblem !== undefined) return orderProblem;
  const needsProperty = propertyMaths.includes(value.math);
  if (needsProperty && value.mathProperty === undefined) return { ok: false, message: `mathProperty: required for math ${value.math}` };
  if ((value.math === "total" || value.math === "unique") && value.mathProperty !== undefined) {
    return { ok: false, message: `mathProperty: not allowed with math ${value.math}` };
  }
  const breakdown = breakdownOf(value.breakdown, value.breakdownLimit);
  if (isFailure(breakdown)) return breakdown;
  // Zones change only hour buckets' count (by a few per year); the exact count is checked where the buckets are built.
  const bucketCount = trendBucketCount(value.dateFrom, value.dateTo, value.groupBy);
  const slack = value.timezone === utcZone || value.groupBy !== "hour" ? 0 : bucketCount / 1000 + 4;
  if (bucketCount > limits.trendBucketsMax + slack) return tooManyBuckets(bucketCount, value.groupBy);
  const buckets = Math.ceil(bucketCount + slack);
  const points = buckets * seriesCountOf(breakdown);
  if (points > limits.trendPointsMax) {
    return answerTooLarge(breakdown, `${points} points (${buckets} ${value.groupBy} buckets × ${seriesCountOf(breakdown)} series)`, limits.trendPointsMax, "a coarser groupBy");
  }
  return {
    ok: true,
    value: {
      event: value.event.event,
      eventFilters: value.event.filters,
      dateFrom: value.dateFrom,
      dateTo: value.dateTo,
      groupBy: value.groupBy,
      filters: value.filters,
      math: value.math,
      mathProperty: needsProperty ? value.mathProperty : undefined,
      timezone: value.timezone,
      breakdown,
    },
  };
}

export function tooManyBuckets(bucketCount: number, groupBy: GroupBy): Failure {
  return { ok: false, message: `dateTo: the range holds ${bucketCount} ${groupBy} buckets, more than the limit of ${limits.trendBucketsMax}` };
}

export function parseFunnelRequest(body: unknown): ParseResult<FunnelRequest> {
  const parsed = funnelSchema.safeParse(body);
  if (!parsed.success) return firstIssue(parsed.error);
  const value = parsed.data;
  const orderProblem = dateOrderProblem(value.dateFrom, value.dateTo);
  if (orderProblem !== undefined) return orderProblem;
  for (let index = 0; index < value.exclusions.length; index++) {
    const { fromStep, toStep } = value.exclusions[index];
    if (fromStep < 1 || fromStep > value.steps.length) return { ok: false, message: `exclusions[${index}].fromStep: expected a step number from 1 to ${value.steps.length}` };
    if (toStep <= fromStep || toStep > value.steps.length) {
      return { ok: false, message: `exclusions[${index}].toStep: expected a step number after fromStep, at most ${value.steps.length}` };
    }
  }
  if (value.order === "unordered" && value.exclusions.length > 0) return { ok: false, message: "exclusions: not allowed with order unordered" };
  const breakdown = breakdownOf(value.breakdown, value.breakdownLimit);
  if (isFailure(breakdown)) return breakdown;
  return {
    ok: true,
    value: {
      steps: value.steps,
      dateFrom: value.dateFrom,
      dateTo: value.dateTo,
      conversionWindow: value.conversionWindow,
      filters: value.filters,
      order: value.order,
      exclusions: value.exclusions,
      timeToConvert: value.timeToConvert,
      timezone: value.timezone,
      breakdown,
    },
  };
}

export function parseRetentionRequest(body: unknown): ParseResult<RetentionRequest> {
  const parsed = retentionSchema.safeParse(body);
  if (!parsed.success) return firstIssue(parsed.error);
  const value = parsed.data;
  const orderProblem = dateOrderProblem(value.dateFrom, value.dateTo);
  if (orderProblem !== undefined) return orderProblem;
  const periodCount = retentionPeriodCount(value.dateFrom, value.dateTo, value.windowDays);
  if (periodCount > limits.retentionPeriodsMax) {
    return {
      ok: false,
      message: `dateTo: the range holds ${periodCount} periods of windowDays ${value.windowDays}, more than the limit of ${limits.retentionPeriodsMax}`,
    };
  }
  const breakdown = breakdownOf(value.breakdown, value.breakdownLimit);
  if (isFailure(breakdown)) return breakdown;
  const cells = ((periodCount * (periodCount + 1)) / 2) * seriesCountOf(breakdown);
  if (cells > limits.retentionCellsMax) {
    return answerTooLarge(breakdown, `${cells} counts (${periodCount} periods, ${seriesCountOf(breakdown)} series)`, limits.retentionCellsMax, "a larger windowDays");
  }
  return {
    ok: true,
    value: {
      cohortEvent: value.cohortEvent,
      retentionEvent: value.retentionEvent,
      dateFrom: value.dateFrom,
      dateTo: value.dateTo,
      windowDays: value.windowDays,
      filters: value.filters,
      timezone: value.timezone,
      breakdown,
    },
  };
}

/** True when the request uses nothing of SPEC §7, so the §4 kernels answer it. */
export function isVersion1Trend(request: TrendRequest): boolean {
  return request.eventFilters.length === 0 && request.timezone === utcZone && request.breakdown === undefined && (request.math === "total" || request.math === "unique");
}

/**
 * True when the §4 kernel answers the funnel: references by name alone,
 * ordered, nothing to add. A zone changes only the entry range's instants,
 * which that kernel takes as they are.
 */
export function isVersion1Funnel(request: FunnelRequest): boolean {
  return (
    request.steps.every((step) => step.filters.length === 0) &&
    request.filters.length === 0 &&
    request.order === "ordered" &&
    request.exclusions.length === 0 &&
    !request.timeToConvert &&
    request.breakdown === undefined
  );
}

export function isVersion1Retention(request: RetentionRequest): boolean {
  return (
    request.cohortEvent.filters.length === 0 &&
    request.retentionEvent.filters.length === 0 &&
    request.filters.length === 0 &&
    request.timezone === utcZone &&
    request.breakdown === undefined
  );
}

export type QueryKind = "trend" | "funnel" | "retention";

export type ParsedQuery = { kind: "trend"; request: TrendRequest } | { kind: "funnel"; request: FunnelRequest } | { kind: "retention"; request: RetentionRequest };

/** A query body's outcome: the validated request (small, whatever the body held) or the error to answer. */
export type QueryParseResult = { ok: true; query: ParsedQuery } | { ok: false; error: ServiceError };

/** JSON-parses and validates a query body; runs on the main thread for small bodies, in a worker for large ones. */
export function parseQueryBody(kind: QueryKind, bytes: Uint8Array): QueryParseResult {
  const parsed = parseBody(bytes, false, limits.queryBodyBytesMax);
  if (!("value" in parsed)) return { ok: false, error: parsed };
  const request = kind === "trend" ? parseTrendRequest(parsed.value) : kind === "funnel" ? parseFunnelRequest(parsed.value) : parseRetentionRequest(parsed.value);
  if (!request.ok) return { ok: false, error: { code: "invalid_request", message: request.message } };
  return { ok: true, query: { kind, request: request.value } as ParsedQuery };
}

/** The request schemas as they validate, for the OpenAPI document (generated from them, so new fields appear there). */
export const queryRequestSchemas = { trend: trendSchema, funnel: funnelSchema, retention: retentionSchema } as const;
