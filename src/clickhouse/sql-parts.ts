/**
 * Pieces of the SQL that aggregates queries in ClickHouse (trend-sql.ts,
 * retention-sql.ts), each exact to the embedded store's answer:
 *
 * - Buckets: the boundaries come from buckets.ts (the same local-time rules
 *   as the embedded store, DST included); ClickHouse never applies a zone.
 *   Every boundary is start + k·g for g the gcd of their distances, so a row's
 *   slot intDiv(time_ms - start, g) lies inside one bucket, and a literal
 *   array maps slots to buckets (plain intDiv when buckets are equal).
 * - Filters: eq, neq, contains, not_contains, is_set, is_not_set compare
 *   UTF-8 bytes, which is the comparison of the texts (position of '' is 1);
 *   gt, gte, lt, lte become IN over the texts that pass (comparisonTexts).
 * - Names and values are sqlString literals.
 */
import { limits } from "../config/limits.js";
import { compileFilter, numericPattern, type FilterOp } from "../query/filters.js";
import type { PropertyFilter } from "../query/schemas.js";
import { sqlString } from "./client.js";

/** How rows fall into buckets in SQL; undefined: too many slots. */
export function bucketExpression(startsMs: Float64Array, column = "time_ms"): string | undefined {
  const slots = bucketSlots(startsMs);
  if (slots === undefined) return undefined;
  const slot = `intDiv(${column} - ${startsMs[0]}, ${slots.stepMs})`;
  return slots.bucketOfSlot === undefined ? slot : `arrayElement([${slots.bucketOfSlot.join(",")}], ${slot} + 1)`;
}

/**
 * Slots of stepMs from startsMs[0], each inside one bucket: bucketOfSlot[s]
 * is the bucket of slot s (undefined: slot s is bucket s, every bucket one
 * slot long). undefined when more slots than the limit would be needed.
 */
export function bucketSlots(startsMs: Float64Array): { stepMs: number; bucketOfSlot: number[] | undefined } | undefined {
  const first = startsMs[0];
  const bucketCount = startsMs.length - 1;
  let stepMs = 0;
  for (let index = 1; index < startsMs.length; index++) stepMs = gcd(stepMs, startsMs[index] - first);
  // No instant in range: any slot will do, no row reaches it.
  if (stepMs === 0) return { stepMs: 1, bucketOfSlot: undefined };
  let uniform = true;
  for (let bucket = 0; bucket < bucketCount; bucket++) if (startsMs[bucket + 1] - startsMs[bucket] !== stepMs) uniform = false;
  if (uniform) return { stepMs, bucketOfSlot: undefined };
  if ((startsMs[bucketCount] - first) / stepMs > limits.clickhouseBucketSlotsMax) return undefined;
  const bucketOfSlot: number[] = [];
  for (let bucket = 0; bucket < bucketCount; bucket++) {
    for (let slot = 0; slot < (startsMs[bucket + 1] - startsMs[bucket]) / stepMs; slot++) bucketOfSlot.push(bucket);
  }
  return { stepMs, bucketOfSlot };
}

function gcd(left: number, right: number): number {
  while (right !== 0) [left, right] = [right, left % right];
  return left;
}

/** A property's presence and text as SQL (the text is '' when not set). */
export function property(name: string): { set: string; text: string } {
  const key = sqlString(name);
  return { set: `has(prop_keys, ${key})`, text: `prop_values[indexOf(prop_keys, ${key})]` };
}

/**
 * The texts that pass each comparison filter (gt, gte, lt, lte) of a query,
 * by filterKey: 18.16 parses a long decimal text up to an ulp off
 * JavaScript's Number, so the property's distinct numeric texts in the range
 * are read and compared here, as the embedded store compiles a dictionary.
 */
export type ComparisonTexts = ReadonlyMap<string, readonly string[]>;

export function filterKey(filter: PropertyFilter): string {
  return `${filter.property}\u0000${filter.op}\u0000${filter.value ?? ""}`;
}

export function isComparison(op: FilterOp): boolean {
  return op === "gt" || op === "gte" || op === "lt" || op === "lte";
}

/**
 * Reads the passing texts of every comparison among `filters`; undefined when
 * one property has more numeric texts in the range than the limit (the query
 * then takes the row path).
 */
export async function comparisonTexts(
  rows: (sql: string) => Promise<unknown[][]>,
  table: string,
  workspaceId: string,
  fromMs: number,
  toMsExclusive: number,
  filters: readonly PropertyFilter[],
): Promise<ComparisonTexts | undefined> {
  const passing = new Map<string, readonly string[]>();
  for (const filter of filters) {
    if (!isComparison(filter.op) || passing.has(filterKey(filter))) continue;
    const { set, text } = property(filter.property);
    const texts = (await rows(
      `SELECT DISTINCT ${text} FROM ${table} WHERE ${rangeConditions(workspaceId, fromMs, toMsExclusive).join(" AND ")} AND ${set} AND match(${text}, ${sqlString(numericPattern.source)}) LIMIT ${limits.clickhouseComparisonTextsMax + 1}`,
    )).map((row) => row[0] as string);
    if (texts.length > limits.clickhouseComparisonTextsMax) return undefined;
    const dictionary = ["", ...texts];
    const { passes } = compileFilter(dictionary, filter.op, filter.value);
    passing.set(filterKey(filter), texts.filter((_, index) => passes[index + 1] === 1));
  }
  return passing;
}

/** A filter as a SQL condition; undefined: a comparison whose passing texts were not read. */
export function filterCondition(filter: PropertyFilter, comparisons: ComparisonTexts): string | undefined {
  const { set, text } = property(filter.property);
  const value = sqlString(filter.value ?? "");
  const op: FilterOp = filter.op;
  switch (op) {
    case "eq":
      return `(${set} AND ${text} = ${value})`;
    case "neq":
      return `NOT (${set} AND ${text} = ${value})`;
    case "contains":
      return `(${set} AND position(${text}, ${value}) > 0)`;
    case "not_contains":
      return `NOT (${set} AND position(${text}, ${value}) > 0)`;
    case "is_set":
      return set;
    case "is_not_set":
      return `NOT ${set}`;
    case "gt":
    case "gte":
    case "lt":
    case "lte": {
      const texts = comparisons.get(filterKey(filter));
      if (texts === undefined) return undefined;
      return texts.length === 0 ? "0" : `(${set} AND ${text} IN (${texts.map(sqlString).join(",")}))`;
    }
  }
}

/** Rows of a workspace in [startsMs[0], startsMs[last]): the day partitions first, then the instants. */
export function rangeConditions(workspaceId: string, fromMs: number, toMsExclusive: number): string[] {
  return [
    `workspace = ${sqlString(workspaceId)}`,
    `day >= ${Math.floor(fromMs / 86_400_000)} AND day <= ${Math.floor((toMsExclusive - 1) / 86_400_000)}`,
    `time_ms >= ${fromMs} AND time_ms < ${toMsExclusive}`,
  ];
}

/** An event reference (name, then every filter) as one condition; undefined: a filter is not translated. */
export function referenceCondition(event: string, filters: readonly PropertyFilter[], comparisons: ComparisonTexts): string | undefined {
  const conditions = [`event = ${sqlString(event)}`];
  for (const filter of filters) {
    const condition = filterCondition(filter, comparisons);
    if (condition === undefined) return undefined;
    conditions.push(condition);
  }
  return `(${conditions.join(" AND ")})`;
}

/**
 * The breakdown values of a user's rows that match `condition` at the instant
 * `firstColumn` (aggregates of a GROUP BY user, named `candidates`): each as
 * one text, '0' not set, '1' + text set. Several when rows tie at that
 * instant; LeastValues picks the least as §7.3 orders them (UTF-16 code
 * units, which ClickHouse's byte order is not).
 */
export function candidateValues(breakdown: string | undefined, condition: string, firstColumn: string): { perUser: string; candidates: string } {
  if (breakdown === undefined) return { perUser: "", candidates: "['0']" };
  const { set, text } = property(breakdown);
  return {
    perUser: `, groupArrayIf(concat(if(${set}, '1', '0'), ${text}), ${condition}) AS candidate_values, groupArrayIf(time_ms, ${condition}) AS candidate_times`,
    candidates: `arrayDistinct(arrayFilter((value, time) -> time = ${firstColumn}, candidate_values, candidate_times))`,
  };
}

/** Value ids as the kernels number them (0: not set) for the candidates of candidateValues. */
export class LeastValues {
  readonly texts = [""];
  private readonly ids = new Map<string, number>();

  least(candidates: readonly string[]): number {
    let value = this.idOf(candidates[0]);
    for (const candidate of candidates.slice(1)) {
      const id = this.idOf(candidate);
      if (value !== 0 && (id === 0 || this.texts[id] < this.texts[value])) value = id;
    }
    return value;
  }

  private idOf(encoded: string): number {
    if (encoded[0] === "0") return 0;
    const text = encoded.slice(1);
    let id = this.ids.get(text);
    if (id === undefined) this.ids.set(text, (id = this.texts.push(text) - 1));
    return id;
  }
}
