/**
 * Funnels (SPEC §4, §7.5) aggregated by ClickHouse, exact (not windowFunnel):
 * per user (GROUP BY user; over a Distributed table the shards' partial
 * arrays merge on the entry server) arrays of times, then per entry one
 * array element per formula below, unrolled over the steps (at most 20), so
 * 18.16's arrayMap / arrayFirstIndex / arrayExists suffice without a fold.
 * Then users are counted per (depth, breakdown candidates) and ranked here.
 *
 * Steps that name the same event must be the same reference (same filters):
 * they form one class, and classes share no event (different names), so
 * within a class events are interchangeable and only their times count.
 *
 * - ordered: from every entry (a step-1 event in the range) the chain takes,
 *   step after step, the first event of the step's class at or after the
 *   previous step's time and after the class's event the chain already used.
 *   With disjoint classes of interchangeable events this greedy chain reaches
 *   the least possible time at every step; e1 reaches step k exactly when its
 *   t_k - e1 is within the window.
 * - unordered: from every entry time T (an event of any step in the range),
 *   step s takes the r-th event at or after T of its class (r: how many
 *   steps of that class up to s), the least time a set can give it; k steps
 *   form a set whose earliest is T when steps 1…k all lie within the window
 *   and one of them lies at T. The user reaches k when some T does (the
 *   depth is the deepest such k, §7.5), and its time to convert to k is the
 *   least latest-minus-T over those T.
 * - strict, distinct classes: a first GROUP BY (user, time) makes the user's
 *   groups of equal timestamps (all its events, any name) with a mask of the
 *   steps present; step j+1 lies in the group of step j or the next one, so
 *   from an entry group the offsets step j may sit at are a bit set of at
 *   most 20 bits: chains_(j+1) = (chains_j | chains_j << 1) & present_(j+1),
 *   where present_(j+1) has bit o when the group o after the entry holds
 *   step j+1 within the window. The shortest time to convert is the lowest
 *   bit's group.
 *
 * Cost per user: ordered and unordered scan a class's times once per entry
 * (entries × events, as the ordered SQL always did); strict reads at most
 * steps² group masks per entry.
 *
 * Kept on the kernel path (funnel-chains.ts over selected rows), by
 * funnelSqlPlan returning undefined:
 *
 * | field                                | why                                                              |
 * |--------------------------------------|------------------------------------------------------------------|
 * | exclusions                           | a chain's validity links two steps' times: needs a search over    |
 * |                                      | the user's groups that 18.16's arrays cannot fold                 |
 * | one name in steps with other filters | events may match several steps: a matching per timestamp          |
 * | strict with a repeated step          | as above, inside a group of equal timestamps                      |
 * | ordered, more repeated steps than    | each repeated step reads two earlier steps' arrays, and 18.16     |
 * | clickhouseFunnelRepeatedStepsMax     | expands aliases: the query's text doubles per such step           |
 * | strict or unordered, more steps than | the text grows with the cube of the steps: ClickHouse analyses    |
 * | clickhouseFunnelSqlStepsMax          | it for seconds, and refuses a strict one of 20 as too big         |
 * | gt/gte/lt/lte, too many texts        | as trend-sql.ts                                                   |
 */
import { limits } from "../config/limits.js";
import { timesToConvert, type FunnelChainsAnswer, type StepCounts } from "../query/kernels/funnel-chains.js";
import { rankSeries, valueOf } from "../query/kernels/series.js";
import type { FunnelRequest } from "../query/schemas.js";
import { candidateValues, LeastValues, property, rangeConditions, referenceCondition } from "./sql-parts.js";
import type { ComparisonTexts } from "./sql-parts.js";

/** Past every time: a step with no event left takes it, and it is never within a window. */
const noTime = "toInt64(9000000000000000000)";

/** Which SQL answers a funnel, or why the kernel path does. */
export type FunnelRoute = { kind: "sql"; classOfStep: number[] } | { kind: "kernel"; reason: "exclusions" | "overlapping steps" | "too many repeated steps" | "too many steps" };

/**
 * Steps' classes (class i: the i-th distinct reference among the steps) and
 * whether SQL can answer the funnel's order, exclusions and steps (its
 * filters aside).
 */
export function funnelRoute(request: FunnelRequest): FunnelRoute {
  if (request.exclusions.length > 0) return { kind: "kernel", reason: "exclusions" };
  const classes: Array<{ event: string; filters: string }> = [];
  const classOfStep: number[] = [];
  for (const step of request.steps) {
    const filters = JSON.stringify(step.filters);
    let index = classes.findIndex((known) => known.event === step.event);
    if (index >= 0 && classes[index].filters !== filters) return { kind: "kernel", reason: "overlapping steps" };
    if (index < 0) index = classes.push({ event: step.event, filters }) - 1;
    classOfStep.push(index);
  }
  const repeatedSteps = request.steps.length - classes.length;
  if (request.order === "strict" && repeatedSteps > 0) return { kind: "kernel", reason: "overlapping steps" };
  if (request.order === "ordered" && repeatedSteps > limits.clickhouseFunnelRepeatedStepsMax) return { kind: "kernel", reason: "too many repeated steps" };
  if (request.order !== "ordered" && request.steps.length > limits.clickhouseFunnelSqlStepsMax) return { kind: "kernel", reason: "too many steps" };
  return { kind: "sql", classOfStep };
}

/** Whether the funnel's order, exclusions and steps allow the SQL (its filters aside). */
export function funnelTranslates(request: FunnelRequest): boolean {
  return funnelRoute(request).kind === "sql";
}

export function funnelSqlPlan(table: string, workspaceId: string, request: FunnelRequest, fromMs: number, toMsExclusive: number, comparisons: ComparisonTexts): string | undefined {
  const route = funnelRoute(request);
  if (route.kind === "kernel") return undefined;
  // One condition per class, in the order the classes first appear among the steps.
  const classes: string[] = [];
  for (let step = 0; step < request.steps.length; step++) {
    if (route.classOfStep[step] < classes.length) continue;
    const condition = referenceCondition(request.steps[step].event, [...request.steps[step].filters, ...request.filters], comparisons);
    if (condition === undefined) return undefined;
    classes.push(condition);
  }
  const shape: FunnelShape = {
    table,
    classes,
    classOfStep: route.classOfStep,
    windowMs: request.conversionWindow * 1000,
    toMsExclusive,
    range: rangeConditions(workspaceId, fromMs, Math.max(fromMs, toMsExclusive + request.conversionWindow * 1000)),
    breakdown: request.breakdown?.property,
    timeToConvert: request.timeToConvert,
  };
  switch (request.order) {
    case "ordered":
      return orderedSql(shape);
    case "unordered":
      return unorderedSql(shape);
    case "strict":
      return strictSql(shape);
  }
}

interface FunnelShape {
  table: string;
  /** Per class, its reference as one condition. */
  classes: string[];
  classOfStep: number[];
  windowMs: number;
  toMsExclusive: number;
  range: string[];
  breakdown: string | undefined;
  timeToConvert: boolean;
}

/** Per class, its sorted times, padded with as many noTimes as steps take from it (so every index a chain takes exists). */
function classTimes(shape: FunnelShape): string {
  return shape.classes
    .map((condition, index) => {
      const padding = Array.from({ length: shape.classOfStep.filter((owner) => owner === index).length }, () => noTime).join(", ");
      return `, arrayConcat(arraySort(groupArrayIf(time_ms, ${condition})), [${padding}]) AS class_${index}`;
    })
    .join("");
}

/** How many steps before `step` (0-based) take from its class: its event is the (that + 1)-th of the class it may use. */
function earlierOfClass(shape: FunnelShape, step: number): number {
  return shape.classOfStep.slice(0, step).filter((owner) => owner === shape.classOfStep[step]).length;
}

/** The last step before `step` of the same class, or undefined. */
function previousOfClass(shape: FunnelShape, step: number): number | undefined {
  for (let earlier = step - 1; earlier >= 0; earlier--) if (shape.classOfStep[earlier] === shape.classOfStep[step]) return earlier;
  return undefined;
}

/** The per-user SELECT's columns and the outer SELECT over (depth, candidates); `reached(k)` says a user reached step k itself. */
function countedPerCell(perUser: string, shape: FunnelShape, reached: (step: number) => string): string {
  const convertLists: string[] = [];
  if (shape.timeToConvert) for (let step = 2; step <= shape.classOfStep.length; step++) convertLists.push(`, groupArrayIf(convert_${step}, ${reached(step)})`);
  return `SELECT depth, candidates, count()${convertLists.join("")} FROM (${perUser}) GROUP BY depth, candidates`;
}

function orderedSql(shape: FunnelShape): string {
  const stepCount = shape.classOfStep.length;
  const windowMs = shape.windowMs;
  const entryClass = `class_${shape.classOfStep[0]}`;
  const entry = `${shape.classes[shape.classOfStep[0]]} AND time_ms < ${shape.toMsExclusive}`;
  const { perUser: entryValues, candidates } = candidateValues(shape.breakdown, entry, "first_ms");
  const repeated = stepCount - shape.classes.length;
  // index_k: per entry, the index in step k's class of the event the chain takes; times_k its time.
  const columns = [`arrayFilter(i -> ${entryClass}[i] < ${shape.toMsExclusive}, arrayEnumerate(${entryClass})) AS index_1`, `arrayMap(i -> ${entryClass}[i], index_1) AS times_1`];
  for (let step = 2; step <= stepCount; step++) {
    const own = `class_${shape.classOfStep[step - 1]}`;
    const after = `arrayFirstIndex(t -> t >= previous, ${own})`;
    const same = previousOfClass(shape, step - 1);
    // Distinct steps take times directly (a shorter SQL: 18.16 writes the chain of aliases out at every use).
    if (repeated === 0) {
      columns.push(`arrayMap(previous -> arrayFirst(t -> t >= previous, ${own}), times_${step - 1}) AS times_${step}`);
      continue;
    }
    columns.push(
      same === undefined
        ? `arrayMap(previous -> ${after}, times_${step - 1}) AS index_${step}`
        : `arrayMap((previous, used) -> greatest(used + 1, ${after}), times_${step - 1}, index_${same + 1}) AS index_${step}`,
      `arrayMap(i -> ${own}[i], index_${step}) AS times_${step}`,
    );
  }
  const parameters = ["e"];
  const reached = ["1"];
  for (let step = 2; step <= stepCount; step++) {
    parameters.push(`t${step}`);
    reached.push(`(t${step} - e <= ${windowMs})`);
  }
  const timeLists = parameters.map((_, index) => `times_${index + 1}`).join(", ");
  const depth = `arrayReduce('max', arrayMap((${parameters.join(", ")}) -> ${reached.join(" + ")}, ${timeLists}))`;
  // Time to convert to step k: the least t_k - e over the entries within the window (read only when depth >= k).
  const converts: string[] = [];
  if (shape.timeToConvert) {
    for (let step = 2; step <= stepCount; step++) {
      converts.push(`, arrayReduce('min', arrayFilter(span -> span <= ${windowMs}, arrayMap((e, t) -> t - e, times_1, times_${step}))) AS convert_${step}`);
    }
  }
  const where = [...shape.range, `(${shape.classes.join(" OR ")})`].join(" AND ");
  const perUser =
    `SELECT minIf(time_ms, ${entry}) AS first_ms${entryValues}${classTimes(shape)}, ${columns.join(", ")},` +
    ` ${depth} AS depth, ${candidates} AS candidates${converts.join("")} FROM ${shape.table} WHERE ${where} GROUP BY user HAVING countIf(${entry}) > 0`;
  return countedPerCell(perUser, shape, (step) => `depth >= ${step}`);
}

function unorderedSql(shape: FunnelShape): string {
  const stepCount = shape.classOfStep.length;
  const windowMs = shape.windowMs;
  const entry = `(${shape.classes.join(" OR ")}) AND time_ms < ${shape.toMsExclusive}`;
  const { perUser: entryValues, candidates } = candidateValues(shape.breakdown, entry, "first_ms");
  // entries: the distinct entry times T; first_c: per T the index of class c's first event at or after T.
  const columns = [`arraySort(groupUniqArrayIf(time_ms, ${entry})) AS entries`];
  for (let index = 0; index < shape.classes.length; index++) columns.push(`arrayMap(origin -> arrayFirstIndex(t -> t >= origin, class_${index}), entries) AS first_${index}`);
  const reaches: string[] = [];
  const converts: string[] = [];
  for (let step = 1; step <= stepCount; step++) {
    const owner = shape.classOfStep[step - 1];
    columns.push(`arrayMap(i -> class_${owner}[i + ${earlierOfClass(shape, step - 1)}], first_${owner}) AS times_${step}`);
    // inside_k: steps 1…k all within the window of T; at_k: one of them at T.
    columns.push(
      step === 1 ? `arrayMap((origin, t) -> t - origin <= ${windowMs}, entries, times_1) AS inside_1` : `arrayMap((origin, t, before) -> before AND t - origin <= ${windowMs}, entries, times_${step}, inside_${step - 1}) AS inside_${step}`,
      step === 1 ? `arrayMap((origin, t) -> t = origin, entries, times_1) AS at_1` : `arrayMap((origin, t, before) -> before OR t = origin, entries, times_${step}, at_${step - 1}) AS at_${step}`,
      `arrayExists((within, here) -> within AND here, inside_${step}, at_${step}) AS reach_${step}`,
    );
    if (!shape.timeToConvert || step === 1) continue;
    columns.push(step === 2 ? `arrayMap((a, b) -> greatest(a, b), times_1, times_2) AS latest_2` : `arrayMap((a, b) -> greatest(a, b), latest_${step - 1}, times_${step}) AS latest_${step}`);
    converts.push(`arrayReduce('min', arrayFilter((span, within, here) -> within AND here, arrayMap((latest, origin) -> latest - origin, latest_${step}, entries), inside_${step}, at_${step})) AS convert_${step}`);
  }
  for (let step = stepCount; step >= 1; step--) reaches.push(`reach_${step}, ${step}`);
  const depth = `multiIf(${reaches.join(", ")}, 0)`;
  const perUser =
    `SELECT minIf(time_ms, ${entry}) AS first_ms${entryValues}${classTimes(shape)}, ${columns.join(", ")}, ${depth} AS depth, ${candidates} AS candidates` +
    `${converts.map((convert) => `, ${convert}`).join("")} FROM ${shape.table} WHERE ${[...shape.range, `(${shape.classes.join(" OR ")})`].join(" AND ")} GROUP BY user HAVING countIf(${entry}) > 0`;
  return countedPerCell(perUser, shape, (step) => `reach_${step}`);
}

function strictSql(shape: FunnelShape): string {
  const stepCount = shape.classOfStep.length;
  const windowMs = shape.windowMs;
  // Distinct classes: class i is step i + 1, bit i of a group's mask.
  const bits = shape.classes.map((condition, index) => `if(${condition}, ${2 ** index}, 0)`).join(" + ");
  const entryRow = `${shape.classes[0]} AND time_ms < ${shape.toMsExclusive}`;
  let valuesHere = "";
  let entryValues = "";
  let candidates = "['0']";
  if (shape.breakdown !== undefined) {
    // The entry rows' values per group; the candidates are those of the user's first entry group.
    const { set, text } = property(shape.breakdown);
    valuesHere = `, groupArrayIf(concat(if(${set}, '1', '0'), ${text}), ${entryRow}) AS values_here`;
    entryValues = `, groupArrayIf(values_here, notEmpty(values_here)) AS value_lists, groupArrayIf(time_ms, notEmpty(values_here)) AS value_times`;
    candidates = `arrayDistinct(arrayFirst((list, listed_ms) -> listed_ms = first_ms, value_lists, value_times))`;
  }
  const groups = `SELECT user, time_ms, groupBitOr(toUInt32(${bits})) AS mask${valuesHere} FROM ${shape.table} WHERE ${shape.range.join(" AND ")} GROUP BY user, time_ms`;
  const entryGroup = `bitAnd(mask, 1) != 0 AND time_ms < ${shape.toMsExclusive}`;
  const columns = [
    `arraySort(groupArray((time_ms, mask))) AS groups`,
    `arrayMap(pair -> pair.1, groups) AS group_times`,
    `arrayMap(pair -> pair.2, groups) AS group_masks`,
    `arrayFilter(i -> bitAnd(group_masks[i], 1) != 0 AND group_times[i] < ${shape.toMsExclusive}, arrayEnumerate(group_times)) AS entry_groups`,
    `arrayMap(i -> toUInt32(1), entry_groups) AS chains_1`,
  ];
  const converts: string[] = [];
  for (let step = 2; step <= stepCount; step++) {
    // Bit o: the o-th group from the entry holds step `step` within the window (past the last group a mask reads 0).
    // Step `step` sits at most step - 1 groups after the entry.
    const present = Array.from({ length: step }, (_, offset) => `if(bitAnd(group_masks[i + ${offset}], ${2 ** (step - 1)}) != 0 AND group_times[i + ${offset}] - group_times[i] <= ${windowMs}, ${2 ** offset}, 0)`);
    columns.push(`arrayMap((before, i) -> bitAnd(bitOr(before, bitShiftLeft(before, 1)), toUInt32(${present.join(" + ")})), chains_${step - 1}, entry_groups) AS chains_${step}`);
    if (!shape.timeToConvert) continue;
    const lowest = `arrayFirst(shift -> bitAnd(chains, bitShiftLeft(toUInt32(1), shift)) != 0, range(${stepCount}))`;
    converts.push(
      `, arrayReduce('min', arrayFilter((span, chains) -> chains != 0, arrayMap((i, chains) -> group_times[i + ${lowest}] - group_times[i], entry_groups, chains_${step}), chains_${step})) AS convert_${step}`,
    );
  }
  const chainLists = Array.from({ length: stepCount - 1 }, (_, index) => `chains_${index + 2}`);
  const depth = stepCount === 1 ? "1" : `arrayReduce('max', arrayMap((${chainLists.map((_, index) => `c${index + 2}`).join(", ")}) -> 1 + ${chainLists.map((_, index) => `(c${index + 2} != 0)`).join(" + ")}, ${chainLists.join(", ")}))`;
  const perUser =
    `SELECT minIf(time_ms, ${entryGroup}) AS first_ms${entryValues}, ${columns.join(", ")}, ${depth} AS depth, ${candidates} AS candidates${converts.join("")}` +
    ` FROM (${groups}) GROUP BY user HAVING countIf(${entryGroup}) > 0`;
  return countedPerCell(perUser, shape, (step) => `depth >= ${step}`);
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
  for (const { depth, value, users } of cells) {
    // Unordered: a user with an entry may reach no step; it names a value but weighs nothing.
    if (depth >= 1) weights[value] += users;
    present[value] = 1;
  }
  const ranked = rankSeries(weights, present, values.texts, request.breakdown.limit);
  return {
    all,
    series: ranked.listed.map((listedValue) => ({ value: valueOf(values.texts, listedValue), steps: summarise((value) => value === listedValue) })),
    other: ranked.hasOther ? summarise((value) => ranked.groupOfValue[value] === ranked.otherGroup) : undefined,
  };
}
