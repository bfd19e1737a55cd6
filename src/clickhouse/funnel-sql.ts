/**
 * Ordered funnels (SPEC §4, §7) aggregated by ClickHouse, exact (not
 * windowFunnel): per user (GROUP BY user; over a Distributed table the
 * shards' partial arrays merge on the entry server) the sorted times of each
 * step's events; from every entry e1 (a step-1 event in the range) the chain
 * takes, step after step, the first time at or after the previous one. When
 * the steps name distinct events no event matches two steps, so this greedy
 * chain reaches the least possible time at every step and e1 reaches step k
 * exactly when its t_k - e1 is within the window; the user's depth is the
 * deepest over its entries, and its time to convert to step k the least
 * t_k - e1 over the entries that reach k. Then users are counted per (depth, breakdown
 * candidates) and ranked here.
 *
 * Kept on the kernel path (funnel-chains.ts over selected rows), by
 * funnelSqlPlan returning undefined:
 *
 * | field                              | why                                                           |
 * |------------------------------------|---------------------------------------------------------------|
 * | order strict, unordered            | not translated                                                |
 * | exclusions                         | not translated                                                |
 * | a step name repeated               | steps may share events: the greedy chain is no longer exact   |
 * | gt/gte/lt/lte, too many texts      | as trend-sql.ts                                               |
 */
import { timesToConvert, type FunnelChainsAnswer, type StepCounts } from "../query/kernels/funnel-chains.js";
import { rankSeries, valueOf } from "../query/kernels/series.js";
import type { FunnelRequest } from "../query/schemas.js";
import { candidateValues, LeastValues, rangeConditions, referenceCondition } from "./sql-parts.js";
import type { ComparisonTexts } from "./sql-parts.js";

/** Past every time: a step with no event left takes it, and it is never within a window. */
const noTime = "toInt64(9000000000000000000)";

/** Whether the funnel's order, exclusions and steps allow the SQL (its filters aside). */
export function funnelTranslates(request: FunnelRequest): boolean {
  const names = request.steps.map((step) => step.event);
  return request.order === "ordered" && request.exclusions.length === 0 && new Set(names).size === names.length;
}

export function funnelSqlPlan(table: string, workspaceId: string, request: FunnelRequest, fromMs: number, toMsExclusive: number, comparisons: ComparisonTexts): string | undefined {
  if (!funnelTranslates(request)) return undefined;
  const steps: string[] = [];
  for (const step of request.steps) {
    const condition = referenceCondition(step.event, [...step.filters, ...request.filters], comparisons);
    if (condition === undefined) return undefined;
    steps.push(condition);
  }
  const windowMs = request.conversionWindow * 1000;
  const entry = `${steps[0]} AND time_ms < ${toMsExclusive}`;
  const { perUser: entryValues, candidates } = candidateValues(request.breakdown?.property, entry, "first_ms");
  const stepTimes = steps.slice(1).map((condition, index) => `, arrayPushBack(arraySort(groupArrayIf(time_ms, ${condition})), ${noTime}) AS step_${index + 2}`);
  const where = [...rangeConditions(workspaceId, fromMs, Math.max(fromMs, toMsExclusive + windowMs)), `(${steps.join(" OR ")})`].join(" AND ");
  // From each entry: times_1 the entries, times_k[i] the first time of step k at or after times_(k-1)[i], reached
  // while times_k[i] - entry is within the window. All in the per-user SELECT: 18.16 loses a subquery's column that
  // only a lambda in a lambda reads.
  const times = ["entries AS times_1"];
  const parameters = ["e"];
  const reached = ["1"];
  for (let step = 2; step <= steps.length; step++) {
    times.push(`arrayMap(previous -> arrayFirst(t -> t >= previous, step_${step}), times_${step - 1}) AS times_${step}`);
    parameters.push(`t${step}`);
    reached.push(`(t${step} - e <= ${windowMs})`);
  }
  const depth = `arrayReduce('max', arrayMap((${parameters.join(", ")}) -> ${reached.join(" + ")}, ${times.map((_, index) => `times_${index + 1}`).join(", ")}))`;
  // Time to convert to step k: the least t_k - e over the entries within the window (read only when depth >= k).
  const converts: string[] = [];
  const convertLists: string[] = [];
  if (request.timeToConvert) {
    for (let step = 2; step <= steps.length; step++) {
      converts.push(`, arrayReduce('min', arrayFilter(span -> span <= ${windowMs}, arrayMap((e, t) -> t - e, times_1, times_${step}))) AS convert_${step}`);
      convertLists.push(`, groupArrayIf(convert_${step}, depth >= ${step})`);
    }
  }
  const perUser =
    `SELECT minIf(time_ms, ${entry}) AS first_ms, groupArrayIf(time_ms, ${entry}) AS entries${stepTimes.join("")}${entryValues}, ${times.join(", ")},` +
    ` ${depth} AS depth, ${candidates} AS candidates${converts.join("")} FROM ${table} WHERE ${where} GROUP BY user HAVING countIf(${entry}) > 0`;
  return `SELECT depth, candidates, count()${convertLists.join("")} FROM (${perUser}) GROUP BY depth, candidates`;
}

type Rows = (sql: string) => Promise<unknown[][]>;

export async function funnelBySql(rows: Rows, request: FunnelRequest, sql: string): Promise<FunnelChainsAnswer> {
  const stepCount = request.steps.length;
  const values = new LeastValues();
  // Per cell: its users' times to convert to step k (index k - 1) from the second step, when asked.
  const cells = ((await rows(sql)) as unknown[][]).map(([depth, candidates, users, ...converts]) => ({
    depth: Number(depth),
    value: values.least(candidates as string[]),
    users: Number(users),
    converts: [[], ...converts] as number[][],
  }));
  const summarise = (keep: (value: number) => boolean): StepCounts => {
    const counts = new Array<number>(stepCount).fill(0);
    const times: number[][] = Array.from({ length: stepCount }, () => []);
    for (const { depth, value, users, converts } of cells) {
      if (!keep(value)) continue;
      for (let step = 0; step < depth; step++) counts[step] += users;
      for (let step = 1; step < converts.length; step++) for (const time of converts[step]) times[step].push(Number(time));
    }
    if (!request.timeToConvert) return { counts, medians: undefined, averages: undefined };
    return { counts, ...timesToConvert(times) };
  };
  const all = summarise(() => true);
  if (request.breakdown === undefined) return { all, series: undefined, other: undefined };
  const weights = new Float64Array(values.texts.length);
  const present = new Uint8Array(values.texts.length);
  for (const { value, users } of cells) {
    weights[value] += users;
    present[value] = 1;
  }
  const ranked = rankSeries(weights, present, values.texts, request.breakdown.limit);
  return {
    all,
    series: ranked.listed.map((listedValue) => ({ value: valueOf(values.texts, listedValue), steps: summarise((value) => value === listedValue) })),
    other: ranked.hasOther ? summarise((value) => ranked.groupOfValue[value] === ranked.otherGroup) : undefined,
  };
}
