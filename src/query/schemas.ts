/**
 * Query request bodies (SPEC §4, §1, §6) → validated, defaulted values. The
 * HTTP layer hands the parsed JSON body here and answers 400 invalid_request
 * with `message` when parsing fails; everything downstream (plans, kernels,
 * the retention cache key) sees only the `value`, defaults applied.
 *
 * Messages start with the offending field as a path ("filters[1].value: …"),
 * and only the first problem is reported, in field order, so a client fixes one
 * thing at a time. Unknown fields are dropped (zod objects strip by default).
 *
 * Event names: any string is accepted, the empty string included. Ingest only
 * stores names of 1–200 characters, so "" (or a 300-character name) is simply
 * a name never ingested and answers zero counts, as SPEC §1 asks of unknown
 * names; refusing it would make the same "no such event" answer depend on the
 * spelling of the name.
 */
import { z } from "zod";
import { limits } from "../config/limits.js";
import type { ServiceError } from "../http/errors.js";
import { parseBody } from "../ingest/event-validation.js";
import {
  groupByValues,
  isCalendarDate,
  retentionPeriodCount,
  trendBucketCount,
  type GroupBy,
} from "./buckets.js";
import { filterOpTakesValue, filterOps, type FilterOp } from "./filters.js";
import type { TrendMath } from "./kernels/trend.js";

const trendMathValues = ["total", "unique"] as const satisfies readonly TrendMath[];

export interface PropertyFilter {
  property: string;
  op: FilterOp;
  /** undefined only for is_set / is_not_set, whose value is ignored. */
  value: string | undefined;
}

export interface TrendRequest {
  event: string;
  dateFrom: string;
  dateTo: string;
  groupBy: GroupBy;
  filters: PropertyFilter[];
  math: TrendMath;
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

export type ParseResult<T> = { ok: true; value: T } | { ok: false; message: string };

export const defaultConversionWindowSeconds = 86_400;
export const defaultRetentionWindowDays = 7;

// ---------------------------------------------------------------------------
// Field schemas. Each carries its own message; "required" when the field is absent.

function messageOr(expected: string): (issue: { input?: unknown }) => string {
  return (issue) => (issue.input === undefined ? "required" : expected);
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
  .object(
    {
      property: z.string({ error: messageOr("expected a string (a property name)") }),
      op: z.enum(filterOps, { error: messageOr(`expected one of ${filterOps.join(", ")}`) }),
      value: z.unknown().optional(),
    },
    { error: "expected an object {property, op, value}" },
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

const stepsMessage = `expected an array of 1 to ${limits.funnelStepsMax} event names`;
const steps = z
  .array(eventName, { error: messageOr(stepsMessage) })
  .min(1, { error: stepsMessage })
  .max(limits.funnelStepsMax, { error: stepsMessage });

function boundedInteger(minimum: number, maximum: number, unit: string, fallback: number) {
  const message = `expected an integer number of ${unit} from ${minimum} to ${maximum}`;
  return z
    .number({ error: message })
    .int({ error: message })
    .min(minimum, { error: message })
    .max(maximum, { error: message })
    .default(fallback);
}

const trendSchema = z.object(
  {
    event: eventName,
    dateFrom: calendarDate,
    dateTo: calendarDate,
    groupBy,
    filters,
    math: trendMath,
  },
  { error: "expected a JSON object" },
);

const funnelSchema = z.object(
  {
    steps,
    dateFrom: calendarDate,
    dateTo: calendarDate,
    conversionWindow: boundedInteger(1, limits.funnelWindowSecondsMax, "seconds", defaultConversionWindowSeconds),
  },
  { error: "expected a JSON object" },
);

const retentionSchema = z.object(
  {
    cohortEvent: eventName,
    retentionEvent: eventName,
    dateFrom: calendarDate,
    dateTo: calendarDate,
    windowDays: boundedInteger(1, limits.retentionWindowDaysMax, "days", defaultRetentionWindowDays),
  },
  { error: "expected a JSON object" },
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

function firstIssue(error: z.ZodError): { ok: false; message: string } {
  const issue = error.issues[0];
  return { ok: false, message: `${fieldPath(issue.path)}: ${issue.message}` };
}

/** dateFrom <= dateTo; dates are already valid, so string order is date order. */
function dateOrderProblem(dateFrom: string, dateTo: string): { ok: false; message: string } | undefined {
  return dateFrom <= dateTo ? undefined : { ok: false, message: `dateTo: must not be before dateFrom (${dateFrom})` };
}

export function parseTrendRequest(body: unknown): ParseResult<TrendRequest> {
  const parsed = trendSchema.safeParse(body);
  if (!parsed.success) return firstIssue(parsed.error);
  const value = parsed.data;
  const orderProblem = dateOrderProblem(value.dateFrom, value.dateTo);
  if (orderProblem !== undefined) return orderProblem;
  const bucketCount = trendBucketCount(value.dateFrom, value.dateTo, value.groupBy);
  if (bucketCount > limits.trendBucketsMax) {
    return {
      ok: false,
      message: `dateTo: the range holds ${bucketCount} ${value.groupBy} buckets, more than the limit of ${limits.trendBucketsMax}`,
    };
  }
  return { ok: true, value };
}

export function parseFunnelRequest(body: unknown): ParseResult<FunnelRequest> {
  const parsed = funnelSchema.safeParse(body);
  if (!parsed.success) return firstIssue(parsed.error);
  const value = parsed.data;
  const orderProblem = dateOrderProblem(value.dateFrom, value.dateTo);
  if (orderProblem !== undefined) return orderProblem;
  return { ok: true, value };
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
  return { ok: true, value };
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
