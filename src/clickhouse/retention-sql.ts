/**
 * Retention (SPEC §4, §7) aggregated by ClickHouse: per user (GROUP BY user;
 * over a Distributed table the shards' partial groups merge on the entry
 * server, so the answer does not depend on how users are sharded) the first
 * cohort instant, the breakdown values of the cohort rows at that instant,
 * and the periods of the retention rows; then counted per (cohort period,
 * those values, later period). Buckets and filters as sql-parts.ts says.
 *
 * A user's value among several cohort rows at its first instant is the least
 * (§7.3, strings by UTF-16 code units, which UTF-8 byte order is not): so
 * ClickHouse hands back the distinct candidate values, few per group, and the
 * least is picked here. Ranking and Other are assembled here from the counts.
 *
 * Falls back to the kernel path (retention-cohorts.ts over selected rows),
 * by retentionSqlPlan returning undefined, as trend-sql.ts does: a filter
 * gt, gte, lt, lte on a property of too many numeric texts, or more bucket
 * slots than the limit.
 */
import type { CohortCounts, RetentionCohortsAnswer } from "../query/kernels/retention-cohorts.js";
import { rankSeries, valueOf } from "../query/kernels/series.js";
import type { RetentionRequest } from "../query/schemas.js";
import { bucketExpression, candidateValues, LeastValues, rangeConditions, referenceCondition } from "./sql-parts.js";
import type { ComparisonTexts } from "./sql-parts.js";

export interface RetentionSqlPlan {
  sql: string;
  periodCount: number;
}

export function retentionSqlPlan(table: string, workspaceId: string, request: RetentionRequest, startsMs: Float64Array, comparisons: ComparisonTexts): RetentionSqlPlan | undefined {
  const period = bucketExpression(startsMs, "first_ms");
  const later = bucketExpression(startsMs, "time_ms");
  if (period === undefined || later === undefined) return undefined;
  const cohort = referenceCondition(request.cohortEvent.event, [...request.cohortEvent.filters, ...request.filters], comparisons);
  const retention = referenceCondition(request.retentionEvent.event, [...request.retentionEvent.filters, ...request.filters], comparisons);
  if (cohort === undefined || retention === undefined) return undefined;
  const where = [...rangeConditions(workspaceId, startsMs[0], startsMs[startsMs.length - 1]), `(${cohort} OR ${retention})`].join(" AND ");
  // A value as one text: '0' not set, '1' + text set.
  const { perUser: cohortValues, candidates } = candidateValues(request.breakdown?.property, cohort, "first_ms");
  const perUser =
    `SELECT minIf(time_ms, ${cohort}) AS first_ms, groupUniqArrayIf(${later}, ${retention}) AS returns${cohortValues}` +
    ` FROM ${table} WHERE ${where} GROUP BY user HAVING countIf(${cohort}) > 0`;
  const sql =
    `SELECT period, candidates, later, count() FROM (SELECT ${period} AS period, ${candidates} AS candidates, returns FROM (${perUser}))` +
    ` ARRAY JOIN arrayConcat([period], arrayFilter(p -> p > period, returns)) AS later GROUP BY period, candidates, later`;
  return { sql, periodCount: startsMs.length - 1 };
}

type Rows = (sql: string) => Promise<unknown[][]>;

export async function retentionBySql(rows: Rows, request: RetentionRequest, plan: RetentionSqlPlan): Promise<RetentionCohortsAnswer> {
  const { periodCount } = plan;
  const answer = (await rows(plan.sql)) as Array<[number, string[], number, number]>;
  const values = new LeastValues();
  const cells = answer.map(([period, candidates, later, users]) => ({ period: Number(period), value: values.least(candidates), later: Number(later), users: Number(users) }));
  const texts = values.texts;
  const count = (keep: (value: number) => boolean): CohortCounts => {
    const totals = new Array<number>(periodCount).fill(0);
    const weeks = totals.map((_, period) => new Array<number>(periodCount - period).fill(0));
    for (const { period, value, later, users } of cells) {
      if (!keep(value)) continue;
      if (later === period) totals[period] += users;
      weeks[period][later - period] += users;
    }
    return { totals, weeks };
  };
  const all = count(() => true);
  if (request.breakdown === undefined) return { all, series: undefined, other: undefined };
  const weights = new Float64Array(texts.length);
  const present = new Uint8Array(texts.length);
  for (const { period, value, later, users } of cells) {
    if (later !== period) continue;
    weights[value] += users;
    present[value] = 1;
  }
  const ranked = rankSeries(weights, present, texts, request.breakdown.limit);
  return {
    all,
    series: ranked.listed.map((listedValue) => ({ value: valueOf(texts, listedValue), counts: count((value) => value === listedValue) })),
    other: ranked.hasOther ? count((value) => ranked.groupOfValue[value] === ranked.otherGroup) : undefined,
  };
}
