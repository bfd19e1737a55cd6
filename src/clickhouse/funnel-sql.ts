/**
 * Funnels (SPEC §4, §7.5) aggregated by ClickHouse, exact (not windowFunnel):
 * per user (GROUP BY user; over a Distributed table the shards' partial
 * arrays merge on the entry server) arrays of times, then per entry one
 * array element per formula below, unrolled over the steps (at most 20), one
 * SELECT level per step (Levels), so 18.16's arrays suffice without a fold.
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
 *   t_k - e1 is within the window. Exclusions: orderedSql.
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
 *   bit's group. Exclusions: a bit set per level of open ranges (strictWalks).
 *
 * Cost per user: "the first event at or after" for all entries at once is
 * one sort of the entries among the class's events (nextElements), so
 * ordered and unordered cost (entries + events) · log per step; strict reads
 * steps² aligned group masks per group.
 *
 * Kept on the kernel path (funnel-chains.ts over selected rows), by
 * funnelSqlPlan returning undefined:
 *
 * | field                                | why                                                              |
 * |--------------------------------------|------------------------------------------------------------------|
 * | exclusions naming the event of a     | the chain may take such an event as that step, and then it does  |
 * | step strictly inside their range,    | not count: the chain's step is pinned to an excluded event's      |
 * | or with repeated steps               | time, and the least-chain tables (exclusionChains) and the group  |
 * |                                      | walks (strictWalks) know no such choice                           |
 * | one name in steps with other filters | events may match several steps: a matching per timestamp          |
 * | strict with a repeated step          | as above, inside a group of equal timestamps                      |
 * | ordered, more repeated steps than    | past them the SQL is slower than selecting the rows (two sorts   |
 * | clickhouseFunnelRepeatedStepsMax;    | per repeated step; strict reads steps² shifted group arrays)     |
 * | strict or unordered, more steps than |                                                                  |
 * | clickhouseFunnelSqlStepsMax          |                                                                  |
 * | more SELECT levels than              | ClickHouse refuses subqueries nested past max_subquery_depth     |
 * | clickhouseFunnelSqlLevelsMax         |                                                                  |
 * | gt/gte/lt/lte, too many texts        | as trend-sql.ts                                                   |
 */
import { strict as assert } from "node:assert";
import { limits } from "../config/limits.js";
import { timesToConvert, type FunnelChainsAnswer, type StepCounts } from "../query/kernels/funnel-chains.js";
import { rankSeries, valueOf } from "../query/kernels/series.js";
import type { EventReference, FunnelRequest } from "../query/schemas.js";
import { candidateValues, LeastValues, property, rangeConditions, referenceCondition } from "./sql-parts.js";
import type { ComparisonTexts } from "./sql-parts.js";

/** Past every time: a step with no event left takes it, and it is never within a window. */
const noTime = "toInt64(9000000000000000000)";

/** An exclusion's steps (1-based, as in the request) and its references' condition (several exclusions of one range: OR). */
interface Segment {
  fromStep: number;
  toStep: number;
  references: EventReference[];
}

/** Which SQL answers a funnel, or why the kernel path does. */
export type FunnelRoute =
  | { kind: "sql"; classOfStep: number[]; segments: Segment[] }
  | { kind: "kernel"; reason: "exclusions" | "overlapping steps" | "too many repeated steps" | "too many steps" };

/**
 * Steps' classes (class i: the i-th distinct reference among the steps) and
 * whether SQL can answer the funnel's order, exclusions and steps (its
 * filters aside).
 */
export function funnelRoute(request: FunnelRequest): FunnelRoute {
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
  const segments = exclusionSegments(request, repeatedSteps);
  if (segments === undefined) return { kind: "kernel", reason: "exclusions" };
  return { kind: "sql", classOfStep, segments };
}

/**
 * Exclusions the SQL answers exactly: ordered or strict, distinct steps, no
 * excluded name among the steps strictly inside its range (so no event that
 * counts against a chain is ever one of its own: steps up to a lie at or
 * before e_a, steps from b at or after e_b), any ranges (equal ones are one
 * segment, their references OR-ed). Sorted by range; undefined: the row path.
 */
function exclusionSegments(request: FunnelRequest, repeatedSteps: number): Segment[] | undefined {
  if (request.exclusions.length === 0) return [];
  if (request.order === "unordered" || repeatedSteps > 0) return undefined;
  const segments: Segment[] = [];
  for (const exclusion of request.exclusions) {
    // Steps a + 1…b - 1 are the only chain events strictly between e_a and e_b.
    if (request.steps.slice(exclusion.fromStep, exclusion.toStep - 1).some((step) => step.event === exclusion.event.event)) return undefined;
    const same = segments.find((segment) => segment.fromStep === exclusion.fromStep && segment.toStep === exclusion.toStep);
    if (same !== undefined) same.references.push(exclusion.event);
    else segments.push({ fromStep: exclusion.fromStep, toStep: exclusion.toStep, references: [exclusion.event] });
  }
  return segments.sort((left, right) => left.fromStep - right.fromStep);
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
  const excluded: ExcludedRange[] = [];
  for (const segment of route.segments) {
    const conditions = segment.references.map((reference) => referenceCondition(reference.event, [...reference.filters, ...request.filters], comparisons));
    if (conditions.some((condition) => condition === undefined)) return undefined;
    excluded.push({ fromStep: segment.fromStep, toStep: segment.toStep, condition: `(${conditions.join(" OR ")})` });
  }
  const shape: FunnelShape = {
    table,
    classes,
    classOfStep: route.classOfStep,
    excluded,
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

interface ExcludedRange {
  fromStep: number;
  toStep: number;
  condition: string;
}

interface FunnelShape {
  table: string;
  /** Per class, its reference as one condition. */
  classes: string[];
  classOfStep: number[];
  excluded: ExcludedRange[];
  windowMs: number;
  toMsExclusive: number;
  range: string[];
  breakdown: string | undefined;
  timeToConvert: boolean;
}

/**
 * A SELECT built level by level: each level reads the one below by column
 * name. 18.16 writes an alias's expression out at every use, so a chain of
 * aliases in one SELECT grows its text exponentially; a level's columns are
 * computed once. Each level passes on only the columns later levels read
 * (a level selecting everything below copies every array column through every
 * level), and computes only the columns read.
 */
class Levels {
  private readonly levels: Array<Array<{ name: string; expression: string }>> = [];
  /** The level of each column computed so far (the base's: -1). */
  private readonly levelOf = new Map<string, number>();

  constructor(private readonly base: string) {
    for (const match of base.matchAll(/ AS ([A-Za-z_][A-Za-z0-9_]*)/g)) this.levelOf.set(match[1], -1);
  }

  /**
   * Columns as `expression AS name`, each on the level just above the columns
   * it reads: independent searches share levels, so the nesting (ClickHouse's
   * max_subquery_depth, 100) grows with the longest chain of reads only.
   */
  add(columns: string[]): void {
    for (const column of columns) {
      const split = column.lastIndexOf(" AS ");
      const name = column.slice(split + 4);
      const expression = column.slice(0, split);
      assert(!this.levelOf.has(name), `funnel SQL column ${name} defined twice`);
      let level = 0;
      for (const read of identifiers(expression)) level = Math.max(level, (this.levelOf.get(read) ?? -1) + 1);
      while (this.levels.length <= level) this.levels.push([]);
      this.levels[level].push({ name, expression });
      this.levelOf.set(name, level);
    }
  }

  /** How many SELECT levels deep the columns go. */
  get depth(): number {
    return this.levels.length;
  }

  /** The SELECT whose columns include every name `reader` reads. */
  select(reader: string): string {
    const known = new Set([...this.base.matchAll(/ AS ([A-Za-z_][A-Za-z0-9_]*)/g)].map((match) => match[1]));
    for (const level of this.levels) for (const column of level) known.add(column.name);
    const read = (expression: string) => [...identifiers(expression)].filter((name) => known.has(name));
    let needed = new Set(read(reader));
    const kept: Array<{ passed: string[]; computed: Array<{ name: string; expression: string }> }> = [];
    for (let index = this.levels.length - 1; index >= 0; index--) {
      const level = this.levels[index];
      const defined = new Set(level.map((column) => column.name));
      // A column read by another of its level is computed too (its alias is written out there).
      const wanted = new Set([...needed].filter((name) => defined.has(name)));
      for (let grown = true; grown; ) {
        grown = false;
        for (const column of level) {
          if (!wanted.has(column.name)) continue;
          for (const name of read(column.expression)) if (defined.has(name) && !wanted.has(name)) grown = wanted.add(name) !== undefined;
        }
      }
      const computed = level.filter((column) => wanted.has(column.name));
      const below = new Set([...needed].filter((name) => !defined.has(name)));
      const passed = [...below];
      for (const column of computed) for (const name of read(column.expression)) if (!defined.has(name)) below.add(name);
      kept.unshift({ passed, computed });
      needed = below;
    }
    let sql = this.base;
    for (const { passed, computed } of kept) {
      const columns = [...passed, ...computed.map((column) => `${column.expression} AS ${column.name}`)];
      sql = `SELECT ${columns.join(", ")} FROM (${sql})`;
    }
    return sql;
  }
}

/** The words of an expression outside its string literals (functions and lambda parameters too: only defined names are kept). */
function identifiers(expression: string): Set<string> {
  return new Set(expression.replace(/'(?:[^'\\]|\\.)*'/g, "").match(/[A-Za-z_][A-Za-z0-9_]*/g) ?? []);
}

/** Per element i: value[i] - value[i + 1], the last minus noTime (suffix sums telescope to value[j] - noTime). */
function increments(values: string): string {
  return `arrayMap((here, after) -> here - after, ${values}, arrayPopFront(arrayPushBack(${values}, ${noTime})))`;
}

/** Queries at noTime are clamped here, so twice a time fits in Int64. */
const latestQuery = "toInt64(4000000000000000000)";

/**
 * For every query q (a time), the first element j of the ascending `sorted`
 * at or after it: `${name}_index` (j; past the end, length + 1) and, per
 * value array aligned with `sorted`, `${name}_${v}` (values[v][j]; past the
 * end, noTime), aligned with the queries.
 *
 * One sort of the queries among the elements, no lambda over a captured
 * array: 18.16 copies a captured array for every element it maps, so a search
 * per query inside arrayMap costs queries × elements copies. Keys are 2t + 1
 * for an element and 2q for a query (a query sorts before an element of its
 * time; ties among elements or among queries change no sum below). The index
 * is the count of elements before the query plus one; a value is noTime plus
 * the suffix sum of its increments from the query on. `ascending`: the
 * queries are in order already, so the sorted queries are in their order;
 * otherwise each query's place sorts the answers back.
 */
function nextElements(levels: Levels, name: string, sorted: string, queries: string, values: string[], ascending: "ascending" | "any order"): void {
  const keys = `arrayConcat(arrayMap(t -> toInt64(t) * 2 + 1, ${sorted}), arrayMap(q -> least(toInt64(q), ${latestQuery}) * 2, ${queries}))`;
  const queryZeros = `arrayMap(q -> toInt64(0), ${queries})`;
  const sortedColumns = [`arraySort(${keys}) AS ${name}_keys`, ...values.map((value, index) => `arraySort((d, k) -> k, arrayConcat(${increments(value)}, ${queryZeros}), ${keys}) AS ${name}_increments${index}`)];
  if (ascending === "any order") {
    sortedColumns.push(`arraySort((p, k) -> k, arrayConcat(arrayMap(t -> toInt64(0), ${sorted}), arrayMap(p -> toInt64(p), arrayEnumerate(${queries}))), ${keys}) AS ${name}_places`);
  }
  levels.add(sortedColumns);
  const asked = (column: string) => `arrayFilter((x, k) -> bitAnd(k, 1) = 0, ${column}, ${name}_keys)`;
  const inQueryOrder = (column: string) => (ascending === "ascending" ? asked(column) : `arraySort((x, p) -> p, ${asked(column)}, ${asked(`${name}_places`)})`);
  levels.add([
    `${inQueryOrder(`arrayMap(below -> below + 1, arrayCumSum(arrayMap(k -> bitAnd(k, 1), ${name}_keys)))`)} AS ${name}_index`,
    ...values.map((_, index) => `${inQueryOrder(`arrayMap(suffix -> ${noTime} + suffix, arrayReverse(arrayCumSum(arrayReverse(${name}_increments${index}))))`)} AS ${name}_${index}`),
  ]);
}

/** `array` from index offset + 1 on, padded with `filler` to its own length. */
function shifted(array: string, offset: number, filler: string): string {
  return `arraySlice(arrayConcat(${array}, arrayMap(i -> ${filler}, range(${offset}))), ${offset + 1}, length(${array}))`;
}

/** Per class, its sorted times. */
function classTimes(shape: FunnelShape, prefix = "class"): string {
  return shape.classes.map((condition, index) => `, arraySort(groupArrayIf(time_ms, ${condition})) AS ${prefix}_${index}`).join("");
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

/** Rows any step (or exclusion) reads: the range, and the names first so the primary key narrows the read. */
function readRows(shape: FunnelShape, conditions: string[]): string {
  return [...shape.range, `(${conditions.join(" OR ")})`].join(" AND ");
}

/**
 * The outer SELECT over (depth, candidates) of the per-user levels;
 * `reached(k)` says a user reached step k itself. `atDepthOne`: a SELECT of
 * (depth, candidates, convert_2…) for users the levels leave out.
 */
function countedPerCell(perUser: Levels, shape: FunnelShape, reached: (step: number) => string, atDepthOne?: string): string | undefined {
  if (perUser.depth > limits.clickhouseFunnelSqlLevelsMax) return undefined;
  const convertLists: string[] = [];
  const converts: string[] = [];
  if (shape.timeToConvert) {
    for (let step = 2; step <= shape.classOfStep.length; step++) {
      convertLists.push(`, groupArrayIf(convert_${step}, ${reached(step)})`);
      converts.push(`, convert_${step}`);
    }
  }
  const outer = `SELECT depth, candidates, count()${convertLists.join("")} FROM (%s) GROUP BY depth, candidates`;
  if (atDepthOne === undefined) return outer.replace("%s", perUser.select(outer));
  const columns = `toUInt32(depth) AS depth, candidates${converts.join("")}`;
  return outer.replace("%s", `SELECT ${columns} FROM (${perUser.select(`${outer} ${columns}`)}) UNION ALL SELECT ${columns} FROM (${atDepthOne})`);
}

/**
 * Ordered: per entry the greedy chain (times_k), each step one nextElements
 * over its class. Exclusions (see exclusionSegments) make chain_k, the
 * earliest step-k time over the chains valid for every range ending by k
 * (exclusionChains).
 */
function orderedSql(shape: FunnelShape): string | undefined {
  const stepCount = shape.classOfStep.length;
  const windowMs = shape.windowMs;
  const entry = `${shape.classes[shape.classOfStep[0]]} AND time_ms < ${shape.toMsExclusive}`;
  const { perUser: entryValues, candidates } = candidateValues(shape.breakdown, entry, "first_ms");
  const excludedTimes = shape.excluded.map((range, index) => `, arraySort(groupArrayIf(time_ms, ${range.condition})) AS held_excluded_${index}`).join("");
  const levels = new Levels(
    `SELECT user, minIf(time_ms, ${entry}) AS first_ms${entryValues}${classTimes(shape, "held")}${excludedTimes}, ${candidates} AS candidates` +
      ` FROM ${shape.table} WHERE ${readRows(shape, [...shape.classes, ...shape.excluded.map((range) => range.condition)])} GROUP BY user HAVING countIf(${entry}) > 0`,
  );
  // A user without a step-2 event is at depth 1 (it has an entry): its arrays are emptied, so every later level is cheap for it.
  const live = stepCount === 1 ? "0" : `notEmpty(held_${shape.classOfStep[1]})`;
  levels.add([
    ...shape.classes.map((_, index) => `if(${live}, held_${index}, emptyArrayInt64()) AS class_${index}`),
    ...shape.excluded.map((_, index) => `if(${live}, held_excluded_${index}, emptyArrayInt64()) AS excluded_${index}`),
  ]);
  // The entries are a prefix of step 1's class (sorted, and in the range from below).
  levels.add([`arrayFilter(t -> t < ${shape.toMsExclusive}, class_${shape.classOfStep[0]}) AS times_1`, `arrayEnumerate(times_1) AS index_1`]);
  // Greedy: step k takes the first event of its class at or after step k - 1, past the class's event used before.
  for (let step = 2; step <= stepCount; step++) {
    const own = `class_${shape.classOfStep[step - 1]}`;
    const same = previousOfClass(shape, step - 1);
    nextElements(levels, `step_${step}`, own, `times_${step - 1}`, [own], "ascending");
    if (same === undefined) {
      levels.add([`step_${step}_index AS index_${step}`, `step_${step}_0 AS times_${step}`]);
      continue;
    }
    // Past the event the class's earlier step used (at or before step k - 1's time): the later of the two indexes, then its time.
    levels.add([`arrayMap((first, used) -> greatest(first, used + 1), step_${step}_index, index_${same + 1}) AS index_${step}`]);
    nextElements(levels, `taken_${step}`, `arrayEnumerate(${own})`, `index_${step}`, [own], "ascending");
    levels.add([`taken_${step}_0 AS times_${step}`]);
  }
  const chain = exclusionChains(levels, shape);
  const parameters = ["e"];
  const reached = ["1"];
  for (let step = 2; step <= stepCount; step++) {
    parameters.push(`t${step}`);
    reached.push(`(t${step} - e <= ${windowMs})`);
  }
  const columns = [`greatest(1, arrayReduce('max', arrayMap((${parameters.join(", ")}) -> ${reached.join(" + ")}, ${chain.slice(1).join(", ")}))) AS depth`];
  // Time to convert to step k: the least chain_k - e over the entries within the window (read only when depth >= k).
  if (shape.timeToConvert) {
    for (let step = 2; step <= stepCount; step++) {
      columns.push(`arrayReduce('min', arrayFilter(span -> span <= ${windowMs}, arrayMap((e, t) -> t - e, times_1, ${chain[step]}))) AS convert_${step}`);
    }
  }
  levels.add(columns);
  return countedPerCell(levels, shape, (step) => `depth >= ${step}`);
}

/**
 * chain_k per entry (index k): the least step-k time over the chains valid for
 * every range closing by k. Without ranges, the greedy times_k. Walk i keeps
 * the ranges closing by the i-th distinct toStep and times the steps from
 * there to the next. With those ranges, the least valid completion from a
 * step-(a - 1) time t, for a the walk's distinct fromSteps from the last, is
 * F_a(t): the greedy run from t over steps a… (F of the next fromStep taking
 * over at its own step), when no range beginning at a holds an excluded event
 * strictly inside it; otherwise the first such run, valid, from an excluded
 * event x > t of a range beginning at a (a = 1: none, the entry is fixed). A
 * valid chain whose step a is at u is matched step by step, no later, by the
 * run from the last such x at or before u (or from t), and runs from later
 * starts end no earlier, so F_a is least at every step, and the upper bounds
 * that ranges begun before a put on its steps keep it best. F_a is a table
 * over the step-(a - 1) class's times (a = 1: the entries), read by
 * nextElements where an earlier run reaches step a - 1.
 */
function exclusionChains(levels: Levels, shape: FunnelShape): string[] {
  const stepCount = shape.classOfStep.length;
  const chain = Array.from({ length: stepCount + 1 }, (_, step) => `times_${step}`);
  const closings = [...new Set(shape.excluded.map((range) => range.toStep))].sort((left, right) => left - right);
  closings.forEach((closing, walk) => {
    const last = walk + 1 < closings.length ? closings[walk + 1] - 1 : stepCount;
    const kept = shape.excluded.flatMap((range, index) => (range.toStep <= closing ? [{ ...range, index }] : []));
    const starts = [...new Set(kept.map((range) => range.fromStep))].sort((left, right) => left - right);
    const needed = [...new Set([...Array.from({ length: last - closing + 1 }, (_, offset) => closing + offset), ...kept.map((range) => range.toStep)])];
    const classOf = (step: number) => `class_${shape.classOfStep[step - 1]}`;
    let deeper: { domain: string; times: Map<number, string> } | undefined;
    for (let level = starts.length - 1; level >= 0; level--) {
      const from = starts[level];
      const end = level + 1 < starts.length ? starts[level + 1] - 1 : last;
      const keep = needed.filter((step) => step >= from).sort((left, right) => left - right);
      const prefix = `w${walk}_${level}`;
      // Greedy over from…end, then the deeper table at step end: each step's times, aligned with the ascending `queries`.
      const run = (name: string, queries: string): Map<number, string> => {
        const times = new Map<number, string>();
        let current = queries;
        for (let step = from; step <= end; step++) {
          nextElements(levels, `${name}_${step}`, classOf(step), current, [classOf(step)], "ascending");
          times.set(step, (current = `${name}_${step}_0`));
        }
        if (deeper !== undefined) {
          const steps = [...deeper.times.keys()];
          nextElements(levels, `${name}_deep`, deeper.domain, current, steps.map((step) => deeper!.times.get(step)!), "ascending");
          steps.forEach((step, index) => times.set(step, `${name}_deep_${index}`));
        }
        return times;
      };
      // No excluded event of a range beginning here strictly inside: no more before its end than at or before its start.
      const ranges = kept.filter((range) => range.fromStep === from);
      const validity = (name: string, times: Map<number, string>): string => {
        const bounds = ranges.flatMap((range, index) => {
          nextElements(levels, `${name}_end${index}`, `excluded_${range.index}`, times.get(range.toStep)!, [], "ascending");
          nextElements(levels, `${name}_start${index}`, `excluded_${range.index}`, `arrayMap(t -> t + 1, ${times.get(from)})`, [], "ascending");
          return [`${name}_end${index}_index`, `${name}_start${index}_index`];
        });
        const holds = ranges.map((_, index) => `e${index} <= s${index}`).join(" AND ");
        levels.add([`arrayMap((${ranges.map((_, index) => `e${index}, s${index}`).join(", ")}) -> ${holds}, ${bounds.join(", ")}) AS ${name}_valid`]);
        return `${name}_valid`;
      };
      const domain = from === 1 ? "times_1" : classOf(from - 1);
      const own = run(`${prefix}_own`, domain);
      const ownValid = validity(`${prefix}_own`, own);
      if (from === 1) {
        levels.add(keep.map((step) => `arrayMap((valid, t) -> if(valid, t, ${noTime}), ${ownValid}, ${own.get(step)}) AS ${prefix}_f_${step}`));
      } else {
        const excluded = ranges.length === 1 ? `excluded_${ranges[0].index}` : `${prefix}_x`;
        if (ranges.length > 1) levels.add([`arraySort(arrayConcat(${ranges.map((range) => `excluded_${range.index}`).join(", ")})) AS ${prefix}_x`]);
        const jump = run(`${prefix}_jump`, excluded);
        const jumpValid = validity(`${prefix}_jump`, jump);
        levels.add([
          `arrayFilter((x, valid) -> valid, ${excluded}, ${jumpValid}) AS ${prefix}_valid_x`,
          ...keep.map((step) => `arrayFilter((t, valid) -> valid, ${jump.get(step)}, ${jumpValid}) AS ${prefix}_valid_${step}`),
        ]);
        nextElements(levels, `${prefix}_after`, `${prefix}_valid_x`, `arrayMap(t -> t + 1, ${domain})`, keep.map((step) => `${prefix}_valid_${step}`), "ascending");
        levels.add(keep.map((step, index) => `arrayMap((valid, own, other) -> if(valid, own, other), ${ownValid}, ${own.get(step)}, ${prefix}_after_${index}) AS ${prefix}_f_${step}`));
      }
      deeper = { domain, times: new Map(keep.map((step) => [step, `${prefix}_f_${step}`])) };
    }
    const table = deeper!;
    const owned = Array.from({ length: last - closing + 1 }, (_, offset) => closing + offset);
    if (starts[0] === 1) {
      for (const step of owned) chain[step] = table.times.get(step)!;
      return;
    }
    nextElements(levels, `w${walk}_entries`, table.domain, `times_${starts[0] - 1}`, owned.map((step) => table.times.get(step)!), "ascending");
    owned.forEach((step, index) => (chain[step] = `w${walk}_entries_${index}`));
  });
  return chain;
}

/**
 * Unordered: per entry time T and class, the index of the class's first
 * event at or after T (nextElements, with the class shifted by r as values:
 * step s reads its class's r-th event from there, r its earlier steps of the
 * class), then per step the window and at-T tests, aligned with the entries.
 */
function unorderedSql(shape: FunnelShape): string | undefined {
  const stepCount = shape.classOfStep.length;
  const windowMs = shape.windowMs;
  const entry = `(${shape.classes.join(" OR ")}) AND time_ms < ${shape.toMsExclusive}`;
  const { perUser: entryValues, candidates } = candidateValues(shape.breakdown, entry, "first_ms");
  const levels = new Levels(
    `SELECT user, minIf(time_ms, ${entry}) AS first_ms${entryValues}${classTimes(shape)}, arraySort(groupUniqArrayIf(time_ms, ${entry})) AS entries, ${candidates} AS candidates` +
      ` FROM ${shape.table} WHERE ${readRows(shape, shape.classes)} GROUP BY user HAVING countIf(${entry}) > 0`,
  );
  for (let index = 0; index < shape.classes.length; index++) {
    const taken = shape.classOfStep.filter((owner) => owner === index).length;
    const shiftedClasses = Array.from({ length: taken }, (_, shift) =>
      shift === 0 ? `class_${index}` : shifted(`class_${index}`, shift, noTime),
    );
    nextElements(levels, `first_${index}`, `class_${index}`, "entries", shiftedClasses, "ascending");
  }
  for (let step = 1; step <= stepCount; step++) {
    const times = `first_${shape.classOfStep[step - 1]}_${earlierOfClass(shape, step - 1)}`;
    // inside_k: steps 1…k all within the window of T; at_k: one of them at T.
    const columns = [
      step === 1 ? `arrayMap((origin, t) -> t - origin <= ${windowMs}, entries, ${times}) AS inside_1` : `arrayMap((origin, t, before) -> before AND t - origin <= ${windowMs}, entries, ${times}, inside_${step - 1}) AS inside_${step}`,
      step === 1 ? `arrayMap((origin, t) -> t = origin, entries, ${times}) AS at_1` : `arrayMap((origin, t, before) -> before OR t = origin, entries, ${times}, at_${step - 1}) AS at_${step}`,
    ];
    if (shape.timeToConvert && step > 1) columns.push(`arrayMap((a, b) -> greatest(a, b), ${step === 2 ? `first_${shape.classOfStep[0]}_0` : `latest_${step - 1}`}, ${times}) AS latest_${step}`);
    levels.add(columns);
    const reach = [`arrayExists((within, here) -> within AND here, inside_${step}, at_${step}) AS reach_${step}`];
    if (shape.timeToConvert && step > 1) {
      reach.push(`arrayReduce('min', arrayFilter((span, within, here) -> within AND here, arrayMap((latest, origin) -> latest - origin, latest_${step}, entries), inside_${step}, at_${step})) AS convert_${step}`);
    }
    levels.add(reach);
  }
  const reaches: string[] = [];
  for (let step = stepCount; step >= 1; step--) reaches.push(`reach_${step}, ${step}`);
  levels.add([`multiIf(${reaches.join(", ")}, 0) AS depth`]);
  return countedPerCell(levels, shape, (step) => `reach_${step}`);
}

/**
 * Strict: per user its groups of equal timestamps with a mask of the steps
 * present, and the masks and times shifted by each offset o (group i + o at
 * index i), so a step's bit set of offsets is one aligned arrayMap.
 */
function strictSql(shape: FunnelShape): string | undefined {
  const stepCount = shape.classOfStep.length;
  const windowMs = shape.windowMs;
  // Distinct classes: class i is step i + 1, bit i of a group's mask.
  // Bit steps + x: the event is one of exclusion range x's.
  const bits = [...shape.classes, ...shape.excluded.map((range) => range.condition)].map((condition, index) => `if(${condition}, ${2 ** index}, 0)`).join(" + ");
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
  // Users without a step-2 event are at depth 1: only the others are grouped by timestamp (every event of theirs, the costly part).
  const steppers = `SELECT user FROM ${shape.table} WHERE ${readRows(shape, [shape.classes[1] ?? "0"])}`;
  const reading = stepCount === 1 ? shape.range : [...shape.range, `user GLOBAL IN (${steppers})`];
  const groups = `SELECT user, time_ms, groupBitOr(toUInt32(${bits})) AS mask${valuesHere} FROM ${shape.table} WHERE ${reading.join(" AND ")} GROUP BY user, time_ms`;
  const entryGroup = `bitAnd(mask, 1) != 0 AND time_ms < ${shape.toMsExclusive}`;
  const levels = new Levels(
    `SELECT user, minIf(time_ms, ${entryGroup}) AS first_ms${entryValues}, arraySort(groupArray((time_ms, mask))) AS groups, ${candidates} AS candidates` +
      ` FROM (${groups}) GROUP BY user HAVING countIf(${entryGroup}) > 0`,
  );
  levels.add([`arrayMap(pair -> pair.1, groups) AS times_0`, `arrayMap(pair -> pair.2, groups) AS masks_0`]);
  const shifts: string[] = [];
  for (let offset = 1; offset < stepCount; offset++) {
    shifts.push(
      `${shifted("times_0", offset, noTime)} AS times_${offset}`,
      `${shifted("masks_0", offset, "toUInt32(0)")} AS masks_${offset}`,
    );
  }
  if (shifts.length > 0) levels.add(shifts);
  levels.add([`arrayMap((m, t) -> toUInt32(if(bitAnd(m, 1) != 0 AND t < ${shape.toMsExclusive}, 1, 0)), masks_0, times_0) AS chains_0_1_0`]);
  const walks = strictWalks(shape);
  for (let step = 2; step <= stepCount; step++) {
    // Bit o: the o-th group from the entry holds step `step` within the window (step `step` sits at most step - 1 groups after the entry).
    const offsets = Array.from({ length: step }, (_, offset) => offset);
    const present = offsets.map((offset) => `if(bitAnd(m${offset}, ${2 ** (step - 1)}) != 0 AND g${offset} - g0 <= ${windowMs}, ${2 ** offset}, 0)`).join(" + ");
    const perGroup = [`arrayMap((${[...offsets.map((offset) => `m${offset}`), ...offsets.map((offset) => `g${offset}`)].join(", ")}) -> toUInt32(${present}), ${[...offsets.map((offset) => `masks_${offset}`), ...offsets.map((offset) => `times_${offset}`)].join(", ")}) AS present_${step}`];
    // Bit o: group o holds no event of the ranges in `mask` (step - 1 sits at most step - 2 groups after the entry).
    const before = offsets.slice(0, -1);
    const dirtyMasks = new Set(walks.flatMap((walk) => (walk.computes(step) ? walk.levels(step - 1).map((level) => walk.dirty(level, step - 1)) : [])).filter((mask) => mask !== 0));
    for (const mask of dirtyMasks) {
      const clean = before.map((offset) => `if(bitAnd(m${offset}, ${mask}) = 0, ${2 ** offset}, 0)`).join(" + ");
      perGroup.push(`arrayMap((${before.map((offset) => `m${offset}`).join(", ")}) -> toUInt32(${clean}), ${before.map((offset) => `masks_${offset}`).join(", ")}) AS clean_${mask}_${step - 1}`);
    }
    levels.add(perGroup);
    // Per walk and level: stay in step - 1's group, or move one group on (out of a clean group where one of the walk's ranges is open).
    const chains: string[] = [];
    for (const walk of walks) {
      if (!walk.computes(step)) continue;
      for (const level of walk.levels(step)) {
        const arrays = [`present_${step}`];
        const parameter = (name: string) => `p${arrays.includes(name) ? arrays.indexOf(name) : arrays.push(name) - 1}`;
        const reach: string[] = [];
        if (walk.levels(step - 1).includes(level)) reach.push(parameter(walk.chains(step - 1, level)));
        if (level === walk.level(step)) {
          const moves = walk.levels(step - 1).map((from) => {
            const dirty = walk.dirty(from, step - 1);
            const chains = parameter(walk.chains(step - 1, from));
            return dirty === 0 ? chains : `bitAnd(${chains}, ${parameter(`clean_${dirty}_${step - 1}`)})`;
          });
          reach.push(`bitShiftLeft(${bitOrs(moves)}, 1)`);
        }
        chains.push(`arrayMap((${arrays.map((_, index) => `p${index}`).join(", ")}) -> toUInt32(bitAnd(${bitOrs(reach)}, p0)), ${arrays.join(", ")}) AS ${walk.chains(step, level)}`);
      }
    }
    levels.add(chains);
    // Reached: the union of the levels of the walk that owns the step (it keeps the ranges closed by then).
    const owner = walks.find((walk) => walk.owns(step))!;
    const owned = owner.levels(step).map((level) => owner.chains(step, level));
    levels.add([owned.length === 1 ? `${owned[0]} AS reached_${step}` : `arrayMap((${owned.map((_, index) => `c${index}`).join(", ")}) -> ${bitOrs(owned.map((_, index) => `c${index}`))}, ${owned.join(", ")}) AS reached_${step}`]);
    if (!shape.timeToConvert) continue;
    // The shortest time to convert from an entry: its chain's lowest offset.
    const lowest = offsets.map((offset) => `bitAnd(c, ${2 ** offset}) != 0, g${offset}`).join(", ");
    const spans = `arrayMap((c, ${offsets.map((offset) => `g${offset}`).join(", ")}) -> multiIf(${lowest}, g0) - g0, reached_${step}, ${offsets.map((offset) => `times_${offset}`).join(", ")})`;
    levels.add([`arrayReduce('min', arrayFilter((span, c) -> c != 0, ${spans}, reached_${step})) AS convert_${step}`]);
  }
  const chainLists = Array.from({ length: stepCount - 1 }, (_, index) => `reached_${index + 2}`);
  const depth = stepCount === 1 ? "1" : `arrayReduce('max', arrayMap((${chainLists.map((_, index) => `c${index + 2}`).join(", ")}) -> 1 + ${chainLists.map((_, index) => `(c${index + 2} != 0)`).join(" + ")}, ${chainLists.join(", ")}))`;
  levels.add([`${depth} AS depth`]);
  if (stepCount === 1) return countedPerCell(levels, shape, (step) => `depth >= ${step}`);
  const { perUser: firstValues, candidates: firstCandidates } = candidateValues(shape.breakdown, entryRow, "first_ms");
  const noConverts = Array.from({ length: shape.timeToConvert ? stepCount - 1 : 0 }, (_, index) => `, toInt64(0) AS convert_${index + 2}`).join("");
  const atDepthOne =
    `SELECT 1 AS depth, candidates${noConverts} FROM (SELECT user, minIf(time_ms, ${entryRow}) AS first_ms${firstValues}, ${firstCandidates} AS candidates FROM ${shape.table}` +
    ` WHERE ${[...shape.range, entryRow, `user GLOBAL NOT IN (${steppers})`].join(" AND ")} GROUP BY user)`;
  return countedPerCell(levels, shape, (step) => `depth >= ${step}`, atDepthOne);
}

function bitOrs(terms: string[]): string {
  return terms.reduce((left, right) => `bitOr(${left}, ${right})`);
}

/**
 * One walk of strictSql's groups per set of ranges it keeps: walk i keeps the
 * ranges that close by the i-th distinct toStep, and owns the steps from there
 * to the next (a chain reaching step k needs only the ranges closed by k). A
 * state is the chain's group offset (a bit) and its level: how many of the
 * walk's distinct fromSteps lie before the first step of the chain's current
 * group, i.e. which of its ranges began in an earlier group. Leaving a group
 * (step j to j + 1 one group on) puts that group strictly between e_a and e_b
 * of every range begun earlier and not closed before j + 1: it must hold none
 * of their events (only steps strictly inside a range lie there, and none of
 * them has an excluded name of it, so none is the chain's own).
 */
interface StrictWalk {
  /** Whether the walk computes its own chains at `step` (before, it shares walk 0's). */
  computes(step: number): boolean;
  owns(step: number): boolean;
  /** The level of a chain whose current group begins at step `first`. */
  level(first: number): number;
  /** The levels a chain at `step` may have. */
  levels(step: number): number[];
  /** The group-mask bits of the ranges a chain at `step` of `level` must not see in its group when it moves on. */
  dirty(level: number, step: number): number;
  chains(step: number, level: number): string;
}

function strictWalks(shape: FunnelShape): StrictWalk[] {
  const stepCount = shape.classOfStep.length;
  const closings = [...new Set(shape.excluded.map((range) => range.toStep))].sort((left, right) => left - right);
  return [0, ...closings].map((closing, index) => {
    const kept = shape.excluded.flatMap((range, bit) => (range.toStep <= closing ? [{ ...range, bit: 2 ** (stepCount + bit) }] : []));
    const starts = [...new Set(kept.map((range) => range.fromStep))].sort((left, right) => left - right);
    const last = index < closings.length ? closings[index] - 1 : stepCount;
    // Up to the first range's start no range is open: the walk is walk 0.
    const shared = index === 0 ? 1 : starts[0];
    const level = (first: number) => starts.filter((start) => start < first).length;
    const walk: StrictWalk = {
      computes: (step) => step > shared && step <= last,
      owns: (step) => step >= Math.max(1, closing) && step <= last,
      level,
      levels: (step) => [...new Set(Array.from({ length: step }, (_, first) => level(first + 1)))],
      dirty: (from, step) => kept.filter((range) => starts.indexOf(range.fromStep) < from && range.toStep > step).reduce((mask, range) => mask | range.bit, 0),
      chains: (step, from) => (step <= shared ? `chains_0_${step}_0` : `chains_${index}_${step}_${from}`),
    };
    return walk;
  });
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
