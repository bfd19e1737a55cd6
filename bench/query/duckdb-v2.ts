/**
 * DuckDB's SQL for the SPEC §7 questions of the random-arrival bench: a trend
 * in a time zone with a breakdown, a trend of `sum`/`avg`/`min`/`max` over a
 * property, a `strict` funnel with exclusions and a breakdown, and a
 * retention in a time zone with a filtered cohort event and a breakdown. Each
 * is answered in Eventide's answer shape, so answers compare field by field.
 *
 * DuckDB gets its best shot here too: local time is one CASE over the zone's
 * offset pieces in the range (read from Intl once per request) instead of ICU
 * per row, breakdowns are GROUPING SETS in one scan, and the strict funnel
 * joins on equal (user, timestamp) only: under `strict` the next chosen event
 * lies at the same timestamp or at the user's next distinct timestamp (a
 * window `lead`), so no range join is needed except for an exclusion check.
 *
 * Only what the bench asks is supported (distinct step names, exclusion names
 * that are no step's, plain step names, UTC funnels); anything else throws.
 */
import type { DuckDBConnection, DuckDBValue } from "@duckdb/node-api";
import {
  LocalTime,
  addDays,
  resolveZone,
  type BreakdownValue,
  type Cohort,
  type EventReference,
  type FunnelAnswerV2,
  type FunnelQueryV2,
  type FunnelStep,
  type RetentionAnswerV2,
  type RetentionQueryV2,
  type TrendAnswerV2,
  type TrendPoint,
  type QueryV2,
  type TrendQueryV2,
} from "../../test/reference/reference-v2.js";
import { dayMs, parseDate, type Filter } from "../../test/reference/reference.js";
import { columnOf, filterSql } from "./duckdb-engine.js";

export type V2Request = QueryV2;
export type V2Answer = TrendAnswerV2 | FunnelAnswerV2 | RetentionAnswerV2;

function sqlString(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

/** `event = NAME AND filters…` of an event reference plus the query's top-level filters. */
function referenceSql(reference: EventReference, topFilters: readonly Filter[] = []): string {
  const name = typeof reference === "string" ? reference : reference.event;
  const filters = [...(typeof reference === "string" ? [] : (reference.filters ?? [])), ...topFilters];
  return [`event = ${sqlString(name)}`, ...filters.map(filterSql)].join(" AND ");
}

function referenceName(reference: EventReference): string {
  return typeof reference === "string" ? reference : reference.event;
}

/** The breakdown column as text (SPEC §7.3: numbers in String(n) form), NULL when not set. */
function breakdownSql(property: string): string {
  const mapped = columnOf(property);
  if (mapped === undefined) return "CAST(NULL AS VARCHAR)";
  if (!mapped.numeric) return mapped.column;
  throw new Error("duckdb v2: a breakdown over a numeric column is not supported");
}

/** Local day of `ts` counted from `dateFrom` (0 = dateFrom), as SQL over the zone's offset pieces. */
function localDaySql(local: LocalTime, dateFrom: string): string {
  const pieces = local.pieces;
  const offset =
    pieces.length === 1
      ? String(pieces[0].offsetMs)
      : `CASE ${pieces
          .slice(0, -1)
          .map((piece) => `WHEN ts < ${piece.endMs} THEN ${piece.offsetMs}`)
          .join(" ")} ELSE ${pieces[pieces.length - 1].offsetMs} END`;
  return `((ts + ${offset}) // ${dayMs} - ${parseDate(dateFrom) / dayMs})`;
}

function localRange(zone: string, dateFrom: string, dateTo: string): { local: LocalTime; startMs: number; endMs: number; dayCount: number } {
  const local = new LocalTime(zone, dateFrom, dateTo);
  return { local, startMs: local.dayStart(dateFrom), endMs: local.dayStart(addDays(dateTo, 1)), dayCount: (parseDate(dateTo) - parseDate(dateFrom)) / dayMs + 1 };
}

/** Ranking of SPEC §7.3: by weight descending, then value with null last, strings by UTF-16 code units. */
function rankValues(weights: Map<BreakdownValue, number>, limit: number): { listed: BreakdownValue[]; others: BreakdownValue[] } {
  const ranked = [...weights.entries()].sort(([leftValue, left], [rightValue, right]) => {
    if (left !== right) return right - left;
    if (leftValue === rightValue) return 0;
    if (leftValue === null) return 1;
    if (rightValue === null) return -1;
    return leftValue < rightValue ? -1 : 1;
  });
  return { listed: ranked.slice(0, limit).map(([value]) => value), others: ranked.slice(limit).map(([value]) => value) };
}

function valueOf(cell: DuckDBValue): BreakdownValue {
  return cell === null ? null : String(cell);
}

interface Timed<T> {
  answer: T;
  elapsedMs: number;
}

async function timedRows(connection: DuckDBConnection, sql: string): Promise<{ rows: DuckDBValue[][]; elapsedMs: number }> {
  const startMs = performance.now();
  const reader = await connection.runAndReadAll(sql);
  return { rows: reader.getRows(), elapsedMs: performance.now() - startMs };
}

// ---------------------------------------------------------------------------
// Trend

/** Buckets of a day or week trend: index SQL and labels. */
function trendBuckets(body: TrendQueryV2, local: LocalTime, dayCount: number): { indexSql: string; labels: string[] } {
  const day = localDaySql(local, body.dateFrom);
  const groupBy = body.groupBy ?? "day";
  if (groupBy === "day") return { indexSql: day, labels: Array.from({ length: dayCount }, (_, index) => addDays(body.dateFrom, index)) };
  if (groupBy === "week") {
    // Epoch day 0 was a Thursday: the Monday on or before day d is d − (d + 3) mod 7.
    const fromDay = parseDate(body.dateFrom) / dayMs;
    const firstMonday = fromDay - ((fromDay + 3) % 7);
    const lastDay = fromDay + dayCount - 1;
    const weekCount = Math.floor((lastDay - firstMonday) / 7) + 1;
    return {
      indexSql: `((${day} + ${fromDay - firstMonday}) // 7)`,
      labels: Array.from({ length: weekCount }, (_, index) => addDays(body.dateFrom, firstMonday - fromDay + index * 7)),
    };
  }
  throw new Error(`duckdb v2: groupBy ${groupBy} is not supported`);
}

export function trendV2Sql(table: string, body: TrendQueryV2): { sql: string; labels: string[] } {
  const zone = resolveZone(body.timezone ?? "UTC");
  const { local, startMs, endMs, dayCount } = localRange(zone, body.dateFrom, body.dateTo);
  const { indexSql, labels } = trendBuckets(body, local, dayCount);
  const math = body.math ?? "total";
  const numeric = body.mathProperty === undefined ? undefined : columnOf(body.mathProperty);
  if (body.mathProperty !== undefined && (numeric === undefined || !numeric.numeric)) throw new Error("duckdb v2: mathProperty must be a numeric column");
  const measure: Record<string, string> = { total: "count(*)", unique: "count(DISTINCT u)", sum: "coalesce(sum(m), 0)", avg: "avg(m)", min: "min(m)", max: "max(m)" };
  if (measure[math] === undefined) throw new Error(`duckdb v2: math ${math} is not supported`);
  // Property maths rank series by the number of events they count (SPEC §7.3).
  const rankMeasure = math === "unique" ? "count(DISTINCT u)" : "count(*)";
  const value = body.breakdown === undefined ? "CAST(NULL AS VARCHAR)" : breakdownSql(body.breakdown);
  const rows =
    `SELECT distinct_id AS u, ${value} AS v, ${indexSql} AS b${numeric === undefined ? "" : `, ${numeric.column} AS m`} FROM ${table} ` +
    `WHERE ts >= ${startMs} AND ts < ${endMs} AND ${referenceSql(body.event, body.filters ?? [])}`;
  const sql =
    `SELECT grouping(v) AS gv, grouping(b) AS gb, v, b, ${measure[math]} AS x, ${rankMeasure} AS r FROM (${rows}) ` +
    `${numeric === undefined ? "" : "WHERE m IS NOT NULL "}GROUP BY GROUPING SETS ((b), (v, b), (v))`;
  return { sql, labels };
}

export async function answerTrendV2(connection: DuckDBConnection, table: string, body: TrendQueryV2): Promise<Timed<TrendAnswerV2>> {
  const { sql, labels } = trendV2Sql(table, body);
  const { rows, elapsedMs } = await timedRows(connection, sql);
  const math = body.math ?? "total";
  const counting = math === "total" || math === "unique";
  const empty = (): (number | null)[] => labels.map(() => (counting || math === "sum" ? 0 : null));
  const points = (values: (number | null)[]): TrendPoint[] => labels.map((date, index) => (counting ? { date, count: values[index] as number } : { date, value: values[index] }));
  const total = empty();
  const series = new Map<BreakdownValue, (number | null)[]>();
  const weights = new Map<BreakdownValue, number>();
  for (const [groupedValue, groupedBucket, value, bucket, measure, rank] of rows) {
    const x = measure === null ? null : Number(measure);
    if (Number(groupedValue) === 1) total[Number(bucket)] = x;
    else if (Number(groupedBucket) === 1) weights.set(valueOf(value), Number(rank));
    else {
      const key = valueOf(value);
      if (!series.has(key)) series.set(key, empty());
      series.get(key)![Number(bucket)] = x;
    }
  }
  const answer: TrendAnswerV2 = { data: points(total) };
  if (body.breakdown !== undefined) {
    const { listed, others } = rankValues(weights, body.breakdownLimit ?? 25);
    if (others.length > 0) throw new Error("duckdb v2: a trend breakdown with values left out is not supported");
    answer.breakdown = listed.map((value) => ({ value, data: points(series.get(value) ?? empty()) }));
  }
  return { answer, elapsedMs };
}

// ---------------------------------------------------------------------------
// Funnel (strict or ordered, UTC)

export function funnelV2Sql(table: string, body: FunnelQueryV2): string {
  if ((body.timezone ?? "UTC") !== "UTC") throw new Error("duckdb v2: funnels in a time zone are not supported");
  if ((body.order ?? "ordered") !== "strict") throw new Error("duckdb v2: only strict funnels (ordered ones are in duckdb-engine.ts)");
  const steps = body.steps.map(referenceName);
  if (new Set(steps).size !== steps.length) throw new Error("duckdb v2: repeated step names are not supported");
  const exclusions = body.exclusions ?? [];
  for (const exclusion of exclusions) if (steps.includes(referenceName(exclusion.event))) throw new Error("duckdb v2: an exclusion named like a step is not supported");
  const top = body.filters ?? [];
  const fromMs = parseDate(body.dateFrom);
  const toMs = parseDate(body.dateTo) + dayMs;
  const windowMs = (body.conversionWindow ?? 86_400) * 1000;
  const value = body.breakdown === undefined ? "CAST(NULL AS VARCHAR)" : breakdownSql(body.breakdown);
  const rows = `(SELECT distinct_id AS u, ${value} AS v, * FROM ${table} WHERE ts >= ${fromMs} AND ts < ${toMs + windowMs})`;
  const fromStepAt = (step: number) => exclusions.flatMap((exclusion, index) => (exclusion.fromStep - 1 === step ? [index] : []));
  // Exclusions whose fromStep time a chain ending at step `step` carries (column ta<i>).
  const carriedAt = (step: number) => exclusions.flatMap((exclusion, index) => (exclusion.fromStep - 1 <= step ? [index] : []));
  const parts: string[] = [
    // Every distinct timestamp of a user and the next one: the only places a strict chain may step to.
    `nx AS (SELECT u, ts, lead(ts) OVER (PARTITION BY u ORDER BY ts) AS nts FROM (SELECT DISTINCT distinct_id AS u, ts FROM ${table} WHERE ts >= ${fromMs} AND ts < ${toMs + windowMs}))`,
    ...body.steps.slice(1).map((step, offset) => `s${offset + 1} AS (SELECT DISTINCT u, ts FROM ${rows} WHERE ${referenceSql(step, top)})`),
    ...exclusions.map((exclusion, index) => `x${index} AS (SELECT u, ts FROM ${rows} WHERE ${referenceSql(exclusion.event, top)})`),
    `c0 AS (SELECT DISTINCT u, ts AS t1, ts AS t${fromStepAt(0).map((index) => `, ts AS ta${index}`).join("")} FROM ${rows} WHERE ts < ${toMs} AND ${referenceSql(body.steps[0], top)})`,
    `entry AS (SELECT u, first(v ORDER BY ts ASC, v ASC NULLS FIRST) AS v FROM ${rows} WHERE ts < ${toMs} AND ${referenceSql(body.steps[0], top)} GROUP BY u)`,
  ];
  for (let step = 1; step < steps.length; step += 1) {
    const columns = `c.u, c.t1, s.ts AS t${carriedAt(step - 1).map((index) => `, c.ta${index}`).join("")}${fromStepAt(step).map((index) => `, s.ts AS ta${index}`).join("")}`;
    const select = (join: string) => `SELECT ${columns} FROM c${step - 1} c ${join} WHERE s.ts - c.t1 <= ${windowMs}`;
    const checks = exclusions
      .map((exclusion, index) => (exclusion.toStep - 1 === step ? ` AND NOT EXISTS (SELECT 1 FROM x${index} x WHERE x.u = n.u AND x.ts > n.ta${index} AND x.ts < n.t)` : ""))
      .join("");
    parts.push(
      `c${step} AS (SELECT DISTINCT * FROM (${select(`JOIN s${step} s ON s.u = c.u AND s.ts = c.t`)} UNION ALL ` +
        `${select(`JOIN nx ON nx.u = c.u AND nx.ts = c.t JOIN s${step} s ON s.u = c.u AND s.ts = nx.nts`)}) n WHERE true${checks})`,
    );
  }
  const depths = steps.map((_, step) => `SELECT DISTINCT u, ${step + 1} AS depth FROM c${step}`).join(" UNION ALL ");
  return `WITH ${parts.join(", ")}, d AS (SELECT u, max(depth) AS depth FROM (${depths}) GROUP BY u) SELECT entry.v, d.depth, count(*) FROM d JOIN entry USING (u) GROUP BY ALL`;
}

function funnelSteps(names: readonly string[], depthCounts: Map<number, number>): FunnelStep[] {
  const counts = names.map((_, step) => {
    let count = 0;
    for (const [depth, users] of depthCounts) if (depth >= step + 1) count += users;
    return count;
  });
  return names.map((event, step) => ({ event, count: counts[step], rate: step === 0 ? 1 : counts[0] === 0 ? 0 : counts[step] / counts[0] }));
}

export async function answerFunnelV2(connection: DuckDBConnection, table: string, body: FunnelQueryV2): Promise<Timed<FunnelAnswerV2>> {
  const { rows, elapsedMs } = await timedRows(connection, funnelV2Sql(table, body));
  const names = body.steps.map(referenceName);
  const all = new Map<number, number>();
  const byValue = new Map<BreakdownValue, Map<number, number>>();
  for (const [value, depth, users] of rows) {
    const key = valueOf(value);
    all.set(Number(depth), (all.get(Number(depth)) ?? 0) + Number(users));
    if (!byValue.has(key)) byValue.set(key, new Map());
    byValue.get(key)!.set(Number(depth), Number(users));
  }
  const answer: FunnelAnswerV2 = { steps: funnelSteps(names, all) };
  if (body.breakdown !== undefined) {
    const weights = new Map([...byValue].map(([value, depths]) => [value, [...depths.values()].reduce((sum, users) => sum + users, 0)]));
    const { listed, others } = rankValues(weights, body.breakdownLimit ?? 25);
    answer.breakdown = listed.map((value) => ({ value, steps: funnelSteps(names, byValue.get(value)!) }));
    if (others.length > 0) {
      const rest = new Map<number, number>();
      for (const value of others) for (const [depth, users] of byValue.get(value)!) rest.set(depth, (rest.get(depth) ?? 0) + users);
      answer.breakdownOther = { steps: funnelSteps(names, rest) };
    }
  }
  return { answer, elapsedMs };
}

// ---------------------------------------------------------------------------
// Retention

export function retentionV2Sql(table: string, body: RetentionQueryV2): string {
  const zone = resolveZone(body.timezone ?? "UTC");
  const { local, startMs, endMs } = localRange(zone, body.dateFrom, body.dateTo);
  const windowDays = body.windowDays ?? 7;
  const period = `(${localDaySql(local, body.dateFrom)} // ${windowDays})`;
  const top = body.filters ?? [];
  const value = body.breakdown === undefined ? "CAST(NULL AS VARCHAR)" : breakdownSql(body.breakdown);
  const inRange = `ts >= ${startMs} AND ts < ${endMs}`;
  return (
    `WITH c AS (SELECT distinct_id AS u, ${period.replaceAll("ts", "min(ts)")} AS p, first(${value} ORDER BY ts ASC, ${value} ASC NULLS FIRST) AS v FROM ${table} ` +
    `WHERE ${inRange} AND ${referenceSql(body.cohortEvent, top)} GROUP BY distinct_id), ` +
    `r AS (SELECT DISTINCT distinct_id AS u, ${period} AS q FROM ${table} WHERE ${inRange} AND ${referenceSql(body.retentionEvent, top)}) ` +
    `SELECT v, p, 0 AS k, count(*) AS n FROM c GROUP BY v, p ` +
    `UNION ALL SELECT c.v, c.p, r.q - c.p AS k, count(*) AS n FROM c JOIN r ON c.u = r.u AND r.q > c.p GROUP BY c.v, c.p, r.q`
  );
}

export async function answerRetentionV2(connection: DuckDBConnection, table: string, body: RetentionQueryV2): Promise<Timed<RetentionAnswerV2>> {
  const { rows, elapsedMs } = await timedRows(connection, retentionV2Sql(table, body));
  const windowDays = body.windowDays ?? 7;
  const dayCount = (parseDate(body.dateTo) - parseDate(body.dateFrom)) / dayMs + 1;
  const periodCount = Math.ceil(dayCount / windowDays);
  const emptyCohorts = (): Cohort[] =>
    Array.from({ length: periodCount }, (_, period) => ({ cohortDate: addDays(body.dateFrom, period * windowDays), total: 0, weeks: new Array<number>(periodCount - period).fill(0) }));
  const all = emptyCohorts();
  const byValue = new Map<BreakdownValue, Cohort[]>();
  const weights = new Map<BreakdownValue, number>();
  for (const [value, period, offset, users] of rows) {
    const key = valueOf(value);
    if (!byValue.has(key)) byValue.set(key, emptyCohorts());
    for (const cohorts of [all, byValue.get(key)!]) {
      const cohort = cohorts[Number(period)];
      cohort.weeks[Number(offset)] += Number(users);
      if (Number(offset) === 0) cohort.total += Number(users);
    }
    if (Number(offset) === 0) weights.set(key, (weights.get(key) ?? 0) + Number(users));
  }
  const answer: RetentionAnswerV2 = { cohorts: all };
  if (body.breakdown !== undefined) {
    const { listed, others } = rankValues(weights, body.breakdownLimit ?? 25);
    answer.breakdown = listed.map((value) => ({ value, cohorts: byValue.get(value)! }));
    if (others.length > 0) {
      const rest = emptyCohorts();
      for (const value of others)
        byValue.get(value)!.forEach((cohort, period) => {
          rest[period].total += cohort.total;
          cohort.weeks.forEach((users, offset) => (rest[period].weeks[offset] += users));
        });
      answer.breakdownOther = { cohorts: rest };
    }
  }
  return { answer, elapsedMs };
}

export async function answerV2(connection: DuckDBConnection, table: string, request: V2Request): Promise<Timed<V2Answer>> {
  switch (request.kind) {
    case "trend":
      return answerTrendV2(connection, table, request.body);
    case "funnel":
      return answerFunnelV2(connection, table, request.body);
    case "retention":
      return answerRetentionV2(connection, table, request.body);
  }
}
