/**
 * A model of SPEC §1 and §4 for query bodies, written from the SPEC and
 * importing nothing from src/: is a trend, funnel or retention body valid, and
 * if not, which fields may the 400 name? Valid ones are then answered by the
 * naive reference (test/reference) and compared exactly.
 */
export type QueryKind = "trend" | "funnel" | "retention";

export type QueryExpectation = { valid: true; value: Record<string, unknown> } | { valid: false; status: 400; code: "invalid_json" | "invalid_request"; fields: string[] };

const filterOps = ["eq", "neq", "contains", "not_contains", "gt", "gte", "lt", "lte", "is_set", "is_not_set"];
const groupBys = ["hour", "day", "week", "month"];
const maths = ["total", "unique"];
const trendBucketsMax = 10_000;
const retentionPeriodsMax = 1000;
const funnelStepsMax = 20;
const conversionWindowMax = 31_536_000;
const windowDaysMax = 365;
const dayMs = 86_400_000;

/** Milliseconds of UTC midnight of a real `YYYY-MM-DD` date of the proleptic Gregorian calendar (years 0000–9999), else undefined. */
export function calendarDateMs(value: unknown): number | undefined {
  if (typeof value !== "string") return undefined;
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(value);
  if (match === null) return undefined;
  const [year, month, day] = match.slice(1).map(Number);
  if (month < 1 || month > 12 || day < 1) return undefined;
  const timeMs = new Date(0).setUTCFullYear(year, month - 1, day);
  const date = new Date(timeMs);
  return date.getUTCMonth() === month - 1 && date.getUTCDate() === day ? timeMs : undefined;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function own(record: Record<string, unknown>, key: string): unknown {
  return Object.prototype.hasOwnProperty.call(record, key) ? record[key] : undefined;
}

function isIntegerIn(value: unknown, minimum: number, maximum: number): boolean {
  return typeof value === "number" && Number.isInteger(value) && value >= minimum && value <= maximum;
}

/** Trend buckets from the one holding dateFrom to the one holding dateTo (SPEC §4). */
export function trendBucketCount(fromMs: number, toMs: number, groupBy: string): number {
  const days = (toMs - fromMs) / dayMs + 1;
  switch (groupBy) {
    case "hour":
      return days * 24;
    case "day":
      return days;
    case "week": {
      const monday = (timeMs: number) => timeMs - ((new Date(timeMs).getUTCDay() + 6) % 7) * dayMs;
      return (monday(toMs) - monday(fromMs)) / (7 * dayMs) + 1;
    }
    default: {
      const from = new Date(fromMs);
      const to = new Date(toMs);
      return to.getUTCFullYear() * 12 + to.getUTCMonth() - (from.getUTCFullYear() * 12 + from.getUTCMonth()) + 1;
    }
  }
}

/** The fields each query knows (SPEC §4 and §7); any other is refused by name (§7). */
const knownFields: Record<QueryKind, readonly string[]> = {
  trend: ["event", "dateFrom", "dateTo", "groupBy", "filters", "math", "mathProperty", "timezone", "breakdown", "breakdownLimit"],
  funnel: ["steps", "dateFrom", "dateTo", "conversionWindow", "filters", "order", "exclusions", "timeToConvert", "timezone", "breakdown", "breakdownLimit"],
  retention: ["cohortEvent", "retentionEvent", "dateFrom", "dateTo", "windowDays", "filters", "timezone", "breakdown", "breakdownLimit"],
};

/** The fields of a body: its own keys as JSON.parse made them. */
function unknownFieldsOf(kind: QueryKind, body: Record<string, unknown>): string[] {
  return Object.keys(body).filter((key) => !knownFields[kind].includes(key));
}

/** What SPEC §4 and §7 say of this parsed body (only §4 values are generated for known fields). */
export function expectQuery(kind: QueryKind, body: unknown): QueryExpectation {
  if (!isPlainObject(body)) return { valid: false, status: 400, code: "invalid_json", fields: [] };
  const fields: string[] = unknownFieldsOf(kind, body);
  const dateFrom = own(body, "dateFrom");
  const dateTo = own(body, "dateTo");
  const fromMs = calendarDateMs(dateFrom);
  const toMs = calendarDateMs(dateTo);
  if (fromMs === undefined) fields.push("dateFrom");
  if (toMs === undefined) fields.push("dateTo");
  const datesOrdered = fromMs !== undefined && toMs !== undefined && fromMs <= toMs;

  switch (kind) {
    case "trend": {
      if (typeof own(body, "event") !== "string") fields.push("event");
      const groupBy = own(body, "groupBy");
      if (groupBy !== undefined && !groupBys.includes(groupBy as string)) fields.push("groupBy");
      const math = own(body, "math");
      // SPEC §7.4: a property math without its mathProperty is a problem between fields, judged after the dates' order.
      const needsProperty = ["sum", "avg", "min", "max"].includes(math as string) && own(body, "mathProperty") === undefined;
      if (math !== undefined && !maths.includes(math as string) && !needsProperty) fields.push("math");
      const filters = own(body, "filters");
      if (filters !== undefined) {
        if (!Array.isArray(filters)) fields.push("filters");
        else if (!filters.every(isValidFilter)) fields.push("filters");
      }
      if (fields.length === 0 && !datesOrdered) fields.push("dateTo", "dateFrom");
      if (fields.length === 0 && needsProperty) fields.push("mathProperty", "math");
      if (fields.length === 0 && trendBucketCount(fromMs!, toMs!, (groupBy as string | undefined) ?? "day") > trendBucketsMax) fields.push("dateTo", "dateFrom", "groupBy");
      break;
    }
    case "funnel": {
      const steps = own(body, "steps");
      if (!Array.isArray(steps) || steps.length < 1 || steps.length > funnelStepsMax || !steps.every((step) => typeof step === "string")) fields.push("steps");
      const window = own(body, "conversionWindow");
      if (window !== undefined && !isIntegerIn(window, 1, conversionWindowMax)) fields.push("conversionWindow");
      if (fields.length === 0 && !datesOrdered) fields.push("dateTo", "dateFrom");
      break;
    }
    case "retention": {
      if (typeof own(body, "cohortEvent") !== "string") fields.push("cohortEvent");
      if (typeof own(body, "retentionEvent") !== "string") fields.push("retentionEvent");
      const windowDays = own(body, "windowDays");
      if (windowDays !== undefined && !isIntegerIn(windowDays, 1, windowDaysMax)) fields.push("windowDays");
      if (fields.length === 0 && !datesOrdered) fields.push("dateTo", "dateFrom");
      if (fields.length === 0) {
        const days = (toMs! - fromMs!) / dayMs + 1;
        if (Math.ceil(days / ((windowDays as number | undefined) ?? 7)) > retentionPeriodsMax) fields.push("dateTo", "dateFrom", "windowDays");
      }
      break;
    }
  }
  return fields.length === 0 ? { valid: true, value: body } : { valid: false, status: 400, code: "invalid_request", fields };
}

function isValidFilter(filter: unknown): boolean {
  if (!isPlainObject(filter)) return false;
  if (Object.keys(filter).some((key) => key !== "property" && key !== "op" && key !== "value")) return false;
  const op = own(filter, "op");
  if (typeof own(filter, "property") !== "string" || !filterOps.includes(op as string)) return false;
  return op === "is_set" || op === "is_not_set" || typeof own(filter, "value") === "string";
}
