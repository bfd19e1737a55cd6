/**
 * Trends (SPEC §4, §7) aggregated by ClickHouse: one GROUP BY over (group,
 * bucket) with count(), uniqExact(user) and the property maths, after one
 * GROUP BY over breakdown values when the query breaks down (the ranking of
 * §7.3 is done here, with the embedded store's rankSeries, and the listed
 * values go back into the second query as a literal). Buckets and filters as
 * sql-parts.ts says; min and max answer the text of the extreme row, parsed by JavaScript.
 *
 * What stays on the kernel path (the rows selected, the answer computed by
 * trend-series.ts), decided by trendSqlPlan returning undefined:
 *
 * | field                          | why                                                              |
 * |--------------------------------|------------------------------------------------------------------|
 * | gt/gte/lt/lte on a property    | its passing texts are a literal in the SQL (sql-parts.ts reads   |
 * | of too many numeric texts      | them; EVENTIDE_CLICKHOUSE_COMPARISON_TEXTS_MAX)                  |
 * | more slots than the limit      | a zone whose offsets are not whole minutes (LMT) or a long range |
 *
 * sum and avg use ClickHouse's parse of the text (SPEC §7.4 allows the last
 * bits); whether a text counts is the pattern of §4 and isFinite, as there.
 */
import { numericPattern } from "../query/filters.js";
import type { BucketValues, TrendSeriesAnswer } from "../query/kernels/trend-series.js";
import { rankSeries, valueOf } from "../query/kernels/series.js";
import type { TrendRequest } from "../query/schemas.js";
import { sqlString } from "./client.js";
import { bucketExpression, property, rangeConditions, referenceCondition } from "./sql-parts.js";
import type { ComparisonTexts } from "./sql-parts.js";

export interface TrendSqlPlan {
  /** Rows counted: workspace, range, event and filters. */
  where: string;
  bucket: string;
  bucketCount: number;
}

/** The SQL pieces of a trend, or undefined when some field stays on the kernel path. */
export function trendSqlPlan(table: string, workspaceId: string, request: TrendRequest, startsMs: Float64Array, comparisons: ComparisonTexts): TrendSqlPlan | undefined {
  const bucket = bucketExpression(startsMs);
  if (bucket === undefined) return undefined;
  const reference = referenceCondition(request.event, [...request.eventFilters, ...request.filters], comparisons);
  if (reference === undefined) return undefined;
  const conditions = [...rangeConditions(workspaceId, startsMs[0], startsMs[startsMs.length - 1]), reference];
  return { where: `FROM ${table} WHERE ${conditions.join(" AND ")}`, bucket, bucketCount: startsMs.length - 1 };
}

type Rows = (sql: string) => Promise<unknown[][]>;

/** The answer trend-series.ts gives, aggregated by ClickHouse. */
export async function trendBySql(rows: Rows, request: TrendRequest, plan: TrendSqlPlan): Promise<TrendSeriesAnswer> {
  const { bucketCount } = plan;
  // Groups: 0 the whole answer; with a breakdown 1…L the listed values in rank order, L + 1 the rest.
  let group = "0";
  let listed: Array<string | null> = [];
  /** What each listed value was ranked by, as the kernels report it. */
  let listedWeights: number[] = [];
  let hasOther = false;
  if (request.breakdown !== undefined) {
    const { set, text } = property(request.breakdown.property);
    const weight = request.math === "unique" ? "uniqExact(user)" : "count()";
    const ranking = await rows(`SELECT ${set}, ${text}, ${weight} ${plan.where} GROUP BY ${set}, ${text}`);
    // Value id 0 is "not set", as in event-rows.ts.
    const texts = [""];
    const weights = [0];
    const present = [0];
    for (const [isSet, valueText, valueWeight] of ranking as Array<[number, string, number]>) {
      if (Number(isSet) === 0) {
        weights[0] = Number(valueWeight);
        present[0] = 1;
      } else {
        texts.push(valueText);
        weights.push(Number(valueWeight));
        present.push(1);
      }
    }
    const ranked = rankSeries(Float64Array.from(weights), Uint8Array.from(present), texts, request.breakdown.limit);
    listed = ranked.listed.map((id) => valueOf(texts, id));
    listedWeights = ranked.listed.map((id) => weights[id]);
    hasOther = ranked.hasOther;
    const otherGroup = ranked.otherGroup;
    const setTexts: string[] = [];
    const setGroups: number[] = [];
    let notSetGroup = otherGroup;
    listed.forEach((value, rank) => {
      if (value === null) notSetGroup = rank + 1;
      else {
        setTexts.push(value);
        setGroups.push(rank + 1);
      }
    });
    const setGroup = setTexts.length === 0 ? `${otherGroup}` : `transform(${text}, [${setTexts.map(sqlString).join(",")}], [${setGroups.join(",")}], ${otherGroup})`;
    group = `arrayJoin([0, toUInt32(if(${set}, ${setGroup}, ${notSetGroup}))])`;
  }
  const groupCount = request.breakdown === undefined ? 1 : listed.length + 2;

  const measures = ["count()"];
  if (request.math === "unique" || request.math === "avg_per_user") measures.push("uniqExact(user)");
  if (request.mathProperty !== undefined) {
    const { set, text } = property(request.mathProperty);
    const number = `if(${set} AND match(${text}, ${sqlString(numericPattern.source)}), toFloat64OrZero(${text}), nan)`;
    measures.push(`sumIf(${number} AS number, isFinite(number))`, `countIf(isFinite(number))`, `argMinIf(${text}, number, isFinite(number))`, `argMaxIf(${text}, number, isFinite(number))`);
  }
  const answer = await rows(`SELECT ${group} AS g, ${plan.bucket} AS b, ${measures.join(", ")} ${plan.where} GROUP BY g, b`);

  const cells = groupCount * bucketCount;
  const results: BucketValues = new Array<number | null>(cells).fill(request.math === "avg" || request.math === "min" || request.math === "max" ? null : 0);
  for (const row of answer) {
    const cell = Number(row[0]) * bucketCount + Number(row[1]);
    const events = Number(row[2]);
    switch (request.math) {
      case "total":
        results[cell] = events;
        break;
      case "unique":
        results[cell] = Number(row[3]);
        break;
      case "avg_per_user":
        results[cell] = Number(row[3]) === 0 ? 0 : events / Number(row[3]);
        break;
      case "sum":
        results[cell] = Number(row[3]);
        break;
      case "avg":
        results[cell] = Number(row[4]) === 0 ? null : Number(row[3]) / Number(row[4]);
        break;
      case "min":
      case "max":
        results[cell] = Number(row[4]) === 0 ? null : Number(row[request.math === "min" ? 5 : 6]);
        break;
    }
  }
  const groupValues = (index: number) => results.slice(index * bucketCount, (index + 1) * bucketCount);
  return {
    values: groupValues(0),
    series: request.breakdown === undefined ? undefined : listed.map((value, rank) => ({ value, values: groupValues(rank + 1), weight: listedWeights[rank] })),
    other: hasOther ? groupValues(groupCount - 1) : undefined,
  };
}
