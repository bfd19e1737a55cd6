/**
 * Funnel of SPEC §7 (filtered references, time zones, strict and unordered
 * orders, exclusions, time to convert, breakdowns) over gathered event rows
 * sorted by user and time. Reference bits: steps are bits 0…n-1, exclusion x
 * is bit n + x.
 *
 * Ordered and strict: the greedy earliest chain of §4 is not enough once
 * references overlap (filters), exclusions reject chains, or strict forbids
 * gaps, so each user's events are searched. Events are grouped by timestamp;
 * a chain takes steps in nondecreasing groups, several steps in one group
 * being a matching of those steps to distinct events of the group. A
 * dynamic programme walks the groups with states (steps done j, cap): `cap`
 * is the deepest step still allowed, lowered when an exclusion (a, b) open
 * since an earlier group sees one of its events in a group that the chain
 * neither covers (uses it as a step between a and b) nor ends the exclusion
 * in (e_b in the same group: not strictly between), and, for strict, when a
 * group passes without a step. Ordered funnels walk once for every entry
 * (walkedDepth; without exclusions the simpler plainOrderedDepth); strict
 * ones walk from an entry (chainDepthFrom), only where equal times leave the
 * next step open.
 *
 * Unordered: from each entry group T in range, the events in [T, T + window]
 * are matched to steps 1…k with at least one event at T (so the set's
 * earliest is T, inside the range): the deepest k is the user's depth. When
 * each event matches one step, a sliding window of counts per step stands in
 * for the matching (disjointUnorderedDepth).
 */
import type { FunnelOrder } from "../schemas.js";
import { compareValues, rowsByUserAndTime, type EventRows } from "./event-rows.js";
import { ScratchFloat64, ScratchInt32 } from "./scratch.js";
import { rankSeries, valueOf } from "./series.js";

export interface FunnelChainsPlan {
  stepCount: number;
  /** 1-based step numbers, as in the request. */
  exclusions: ReadonlyArray<{ fromStep: number; toStep: number }>;
  order: FunnelOrder;
  entryFromMs: number;
  entryToMsExclusive: number;
  windowMs: number;
  timeToConvert: boolean;
  breakdownLimit: number | undefined;
  /** A shard's plan: its answer keeps each user's times to convert (StepCounts.times), for the merged medians. */
  keepTimes?: boolean;
}

export interface StepCounts {
  counts: number[];
  /** Per step from the second: median and mean time to convert (null: no user). */
  medians: Array<number | null> | undefined;
  averages: Array<number | null> | undefined;
  /** With keepTimes: per step, each user's time to convert (step 0's is empty). */
  times?: number[][];
}

export interface FunnelChainsAnswer {
  all: StepCounts;
  series: Array<{ value: string | null; steps: StepCounts }> | undefined;
  other: StepCounts | undefined;
}

/** Per user with an entry: its depth, breakdown value and (with timeToConvert) shortest time to convert per step. */
export interface Outcomes {
  count: number;
  /** The user of each outcome. */
  users: Uint32Array;
  depths: Int32Array;
  values: Int32Array;
  /** Per outcome (timeToConvert only): Infinity where the user did not reach the step itself; undefined when it reached no step past the first. */
  times: Array<Float64Array | undefined>;
}

export function emptyOutcomes(capacity: number): Outcomes {
  return { count: 0, users: new Uint32Array(capacity), depths: new Int32Array(capacity), values: new Int32Array(capacity), times: [] };
}

export function funnelChains(rows: EventRows, plan: FunnelChainsPlan): FunnelChainsAnswer {
  const outcomes = emptyOutcomes(rows.count);
  collectOutcomes(rows, plan, outcomes);
  return summariseOutcomes(outcomes, rows.valueTexts, plan);
}

/** Appends one outcome per user of `rows` with an entry event in range, in ascending user order (capacity: one per user). */
export function collectOutcomes(rows: EventRows, plan: FunnelChainsPlan, outcomes: Outcomes): void {
  const order = rowsByUserAndTime(rows);
  const entryBits = entryBitsOf(plan);
  for (let start = 0; start < order.length; ) {
    const user = rows.users[order[start]];
    let end = start;
    while (end < order.length && rows.users[order[end]] === user) end++;
    userOutcome(rows, order, start, end, plan, entryBits, outcomes);
    start = end;
  }
}

/** The reference bits of an entry event (SPEC §7.3): step 1's, or any step's for unordered. */
export function entryBitsOf(plan: FunnelChainsPlan): number {
  if (plan.order !== "unordered") return 1;
  return plan.stepCount >= 32 ? 0xffffffff : (1 << plan.stepCount) - 1;
}

/**
 * The answer: step counts over every outcome and, with a breakdown, per ranked
 * value. `depthOne[value]`, `depthZero[value]`: users at depth 1 or 0 (an
 * unordered entry without a step-1 event in range) without an outcome of their own.
 */
export function summariseOutcomes(outcomes: Outcomes, valueTexts: readonly string[], plan: FunnelChainsPlan, depthOne?: Float64Array, depthZero?: Float64Array): FunnelChainsAnswer {
  const stepCount = plan.stepCount;
  const breakdown = plan.breakdownLimit !== undefined;
  // Users per (value, depth): each series sums its values' rows.
  const valueCount = breakdown ? valueTexts.length : 1;
  const depthUsers = new Float64Array(valueCount * (stepCount + 1));
  for (let outcome = 0; outcome < outcomes.count; outcome++) depthUsers[(breakdown ? outcomes.values[outcome] : 0) * (stepCount + 1) + outcomes.depths[outcome]]++;
  if (depthOne !== undefined) for (let value = 0; value < depthOne.length; value++) depthUsers[(breakdown ? value : 0) * (stepCount + 1) + 1] += depthOne[value];
  if (depthZero !== undefined) for (let value = 0; value < depthZero.length; value++) depthUsers[(breakdown ? value : 0) * (stepCount + 1)] += depthZero[value];

  const summarise = (inGroup: (value: number) => boolean): StepCounts => {
    const groupDepths = new Float64Array(stepCount + 1);
    for (let value = 0; value < valueCount; value++) {
      if (!inGroup(value)) continue;
      for (let depth = 0; depth <= stepCount; depth++) groupDepths[depth] += depthUsers[value * (stepCount + 1) + depth];
    }
    const counts = new Array<number>(stepCount).fill(0);
    // Users at depth d count at every step below d.
    let reached = 0;
    for (let depth = stepCount; depth >= 1; depth--) {
      reached += groupDepths[depth];
      counts[depth - 1] = reached;
    }
    if (!plan.timeToConvert) return { counts, medians: undefined, averages: undefined };
    const times: number[][] = Array.from({ length: stepCount }, () => []);
    for (let outcome = 0; outcome < outcomes.count; outcome++) {
      const userTimes = outcomes.times[outcome];
      if (userTimes === undefined || !inGroup(breakdown ? outcomes.values[outcome] : 0)) continue;
      for (let step = 1; step < stepCount; step++) if (userTimes[step] !== Infinity) times[step].push(userTimes[step]);
    }
    // A shard's medians would be dropped: the merged ones come from its times.
    return plan.keepTimes ? { counts, medians: undefined, averages: undefined, times } : { counts, ...timesToConvert(times) };
  };

  const all = summarise(() => true);
  if (!breakdown) return { all, series: undefined, other: undefined };
  const weights = new Float64Array(valueCount);
  const present = new Uint8Array(valueCount);
  for (let value = 0; value < valueCount; value++) {
    for (let depth = 0; depth <= stepCount; depth++) {
      const users = depthUsers[value * (stepCount + 1) + depth];
      if (users === 0) continue;
      present[value] = 1;
      if (depth >= 1) weights[value] += users;
    }
  }
  const ranked = rankSeries(weights, present, valueTexts, plan.breakdownLimit!);
  const { groupOfValue } = ranked;
  return {
    all,
    series: ranked.listed.map((listedValue, rank) => ({ value: valueOf(valueTexts, listedValue), steps: summarise((value) => groupOfValue[value] === rank + 1) })),
    other: ranked.hasOther ? summarise((value) => groupOfValue[value] === ranked.otherGroup) : undefined,
  };
}

/** Median and mean of each step's times to convert from the second (times[step]: one per user; null: no user). */
export function timesToConvert(times: number[][]): { medians: Array<number | null>; averages: Array<number | null> } {
  const medians: Array<number | null> = [];
  const averages: Array<number | null> = [];
  for (let step = 1; step < times.length; step++) {
    // A typed array sorts numerically without a comparator call per pair.
    const values = Float64Array.from(times[step]).sort();
    if (values.length === 0) {
      medians.push(null);
      averages.push(null);
      continue;
    }
    const middle = values.length >> 1;
    medians.push(values.length % 2 === 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2);
    let sum = 0;
    for (const value of values) sum += value;
    averages.push(sum / values.length);
  }
  return { medians, averages };
}

/** Records the user's depth, value and times among the outcomes; nothing when it has no entry event in range. */
function userOutcome(rows: EventRows, order: Uint32Array, start: number, end: number, plan: FunnelChainsPlan, entryBits: number, outcomes: Outcomes): void {
  const { timesMs, masks, values } = rows;
  // Breakdown value: the earliest entry event in range, ties to the least value ("not set" first).
  let valueRow = -1;
  let userBits = 0;
  for (let index = start; index < end; index++) {
    const row = order[index];
    userBits |= masks[row];
    if (valueRow >= 0 && timesMs[row] > timesMs[valueRow]) continue;
    if ((masks[row] & entryBits) === 0 || timesMs[row] < plan.entryFromMs || timesMs[row] >= plan.entryToMsExclusive) continue;
    if (valueRow < 0 || timesMs[row] < timesMs[valueRow]) valueRow = row;
    else if (compareValues(rows.valueTexts, values[row], values[valueRow], true) < 0) valueRow = row;
  }
  if (valueRow < 0) return;
  const outcome = outcomes.count++;
  outcomes.users[outcome] = rows.users[valueRow];
  outcomes.values[outcome] = values[valueRow];
  // Ordered or strict without any event of step 2: an entry is the whole chain (no exclusion ends before step 2).
  if (plan.order !== "unordered" && (plan.stepCount === 1 || (userBits & 2) === 0)) {
    outcomes.depths[outcome] = 1;
    if (plan.timeToConvert) outcomes.times[outcome] = undefined;
    return;
  }

  if (plan.order === "strict") {
    const times = plan.timeToConvert ? new Float64Array(plan.stepCount).fill(Infinity) : discardedTimes.get(plan.stepCount);
    outcomes.depths[outcome] = strictDepth(order, start, end, masks, timesMs, plan, times);
    if (plan.timeToConvert) outcomes.times[outcome] = times;
    return;
  }

  const times = plan.timeToConvert ? new Float64Array(plan.stepCount).fill(Infinity) : discardedTimes.get(plan.stepCount);
  if (plan.order === "ordered" && plan.exclusions.length === 0) outcomes.depths[outcome] = plainOrderedDepth(order, start, end, masks, timesMs, plan, times);
  else {
    const user = userEvents(order, start, end, masks, timesMs);
    outcomes.depths[outcome] = plan.order === "unordered" ? unorderedDepth(user, plan, times) : walkedDepth(user, plan, times);
  }
  if (plan.timeToConvert) outcomes.times[outcome] = times;
}

/** Times to convert that nobody keeps (no timeToConvert): one array for every user, never reset; the walks lower it and nothing else reads it. */
const discardedTimes = new ScratchFloat64();

/** User groups of equal timestamps over order[start, end). */
function userEvents(order: Uint32Array, start: number, end: number, masks: Uint32Array, timesMs: Float64Array): UserEvents {
  const userRows = order.subarray(start, end);
  const groupStarts: number[] = [];
  for (let index = 0; index < userRows.length; index++) {
    if (index === 0 || timesMs[userRows[index]] !== timesMs[userRows[index - 1]]) groupStarts.push(index);
  }
  groupStarts.push(userRows.length);
  return { rows: userRows, masks, timesMs, groupStarts };
}

/**
 * Strict order, entry by entry. Where an entry's neighbourhood has no equal
 * timestamps (the event before it, each event its walk reads and the one
 * after the event that stops it), the chain is forced: step j + 1 is the
 * very next event, since any other event between two steps breaks the
 * chain; and no exclusion can hold, since an event strictly between e_a and
 * e_b lies between two consecutive steps, so it is one of the chain's. The
 * walk then reads that run once. An entry near equal timestamps is searched
 * over its group by chainDepthFrom, once per group.
 */
function strictDepth(order: Uint32Array, start: number, end: number, masks: Uint32Array, timesMs: Float64Array, plan: FunnelChainsPlan, times: Float64Array): number {
  const stepCount = plan.stepCount;
  let best = 0;
  let user: UserEvents | undefined;
  let searchedGroup = -1;
  for (let index = start; index < end; index++) {
    const row = order[index];
    const entryMs = timesMs[row];
    if (entryMs < plan.entryFromMs) continue;
    if (entryMs >= plan.entryToMsExclusive) break;
    if ((masks[row] & 1) === 0) continue;
    const windowEndMs = entryMs + plan.windowMs;
    let tied = index > start && timesMs[order[index - 1]] === entryMs;
    let depth = 1;
    let position = index;
    while (!tied && depth < stepCount && position + 1 < end) {
      const next = order[position + 1];
      const nextMs = timesMs[next];
      if (nextMs === timesMs[order[position]]) tied = true;
      else if ((masks[next] & (1 << depth)) === 0 || nextMs > windowEndMs) {
        // The stopping event: an event at its time could take the step instead.
        tied = position + 2 < end && timesMs[order[position + 2]] === nextMs;
        break;
      } else {
        if (nextMs - entryMs < times[depth]) times[depth] = nextMs - entryMs;
        position++;
        depth++;
      }
    }
    if (tied) {
      user ??= userEvents(order, start, end, masks, timesMs);
      const group = groupOf(user.groupStarts, index - start);
      if (group === searchedGroup) continue;
      searchedGroup = group;
      depth = chainDepthFrom(user, plan, group, times);
    } else times[0] = 0;
    if (depth > best) best = depth;
    if (best === stepCount && !plan.timeToConvert) break;
  }
  return best;
}

/** plainOrderedDepth's latest entry per steps done, made once. */
const latestEntries = new ScratchFloat64();

/**
 * Ordered, without exclusions: one walk of the user's groups, not a search
 * from every entry. A chain is then judged by its steps done and its entry
 * alone, and of two chains with the same steps done the later entry is never
 * worse (its window ends later, and a step it takes is nearer to it), so the
 * walk keeps, per steps done d, the latest entry of a chain with at least d
 * steps (latest[d], nonincreasing in d). A group extends each such chain
 * still inside its window by as many steps as its distinct events can take,
 * and taking more now is never worse: a later group can take whatever the
 * fewer would have left for it. times[k]: the least time from an entry to a
 * step k + 1 that a chain took, lowered in place. walkedDepth answers the
 * same; this one reads the rows in place, without the user's groups or sets.
 */
function plainOrderedDepth(order: Uint32Array, start: number, end: number, masks: Uint32Array, timesMs: Float64Array, plan: FunnelChainsPlan, times: Float64Array): number {
  const stepCount = plan.stepCount;
  const latest = latestEntries.get(stepCount + 1).fill(-Infinity, 0, stepCount + 1);
  let best = 0;
  let user: UserEvents | undefined;
  for (let index = start; index < end; ) {
    const groupMs = timesMs[order[index]];
    let groupEnd = index + 1;
    while (groupEnd < end && timesMs[order[groupEnd]] === groupMs) groupEnd++;
    const entryHere = groupMs >= plan.entryFromMs && groupMs < plan.entryToMsExclusive;
    // Steps done from the most: each reads latest[done] before any smaller done writes above it, so a group is used once per chain.
    const oldestEntryMs = groupMs - plan.windowMs;
    if (groupEnd - index === 1) {
      const mask = masks[order[index]];
      for (let done = Math.min(best, stepCount - 1); done >= 1; done--) {
        if ((mask & (1 << done)) === 0 || latest[done] < oldestEntryMs) continue;
        if (latest[done] > latest[done + 1]) latest[done + 1] = latest[done];
        if (groupMs - latest[done] < times[done]) times[done] = groupMs - latest[done];
      }
      if ((mask & 1) !== 0 && entryHere) {
        latest[1] = groupMs;
        times[0] = 0;
      }
    } else {
      user ??= userEvents(order, start, end, masks, timesMs);
      const group = groupOf(user.groupStarts, index - start);
      for (let done = Math.min(best, stepCount - 1); done >= 1; done--) {
        if (latest[done] < oldestEntryMs) continue;
        const reached = done + stepsInGroup(user, group, done, stepCount);
        for (let step = done + 1; step <= reached; step++) {
          if (latest[done] > latest[step]) latest[step] = latest[done];
          if (groupMs - latest[done] < times[step - 1]) times[step - 1] = groupMs - latest[done];
        }
      }
      if (entryHere) {
        const reached = stepsInGroup(user, group, 0, stepCount);
        for (let step = 1; step <= reached; step++) {
          latest[step] = groupMs;
          times[step - 1] = 0;
        }
      }
    }
    while (best < stepCount && latest[best + 1] !== -Infinity) best++;
    // With times to convert, a later chain may be shorter.
    if (best === stepCount && !plan.timeToConvert) break;
    index = groupEnd;
  }
  return best;
}

/** How many steps from `first` on the events of a group can take, each a distinct event. */
function stepsInGroup(user: UserEvents, group: number, first: number, stepCount: number): number {
  let count = 0;
  while (first + count < stepCount && groupWays(user, group, first, count + 1, stepCount, 0, 0).size > 0) count++;
  return count;
}

/** The group holding position `index`: the last group start at or before it. */
function groupOf(groupStarts: readonly number[], index: number): number {
  let low = 0;
  let high = groupStarts.length - 1;
  while (low < high) {
    const middle = (low + high + 1) >>> 1;
    if (groupStarts[middle] <= index) low = middle;
    else high = middle - 1;
  }
  return low;
}

interface UserEvents {
  rows: Uint32Array;
  masks: Uint32Array;
  timesMs: Float64Array;
  /** Group g is rows[groupStarts[g] .. groupStarts[g + 1]). */
  groupStarts: number[];
}

function groupTimeMs(user: UserEvents, group: number): number {
  return user.timesMs[user.rows[user.groupStarts[group]]];
}

// ---------------------------------------------------------------------------
// Ordered and strict

/**
 * Coverage masks (bit x: every event of exclusion x in the group is used) of
 * the ways steps [first, first + count) can take distinct events of a group:
 * the greatest ones (a state with more exclusions covered allows all that one
 * with fewer does, so the others add nothing). `wanted` lists the exclusions
 * whose coverage matters.
 *
 * Matchings, not placements: trying every placement of the steps over a
 * group's events took count! / … tries, and 26 events at one timestamp held
 * a worker past its time limit. A way covering the exclusions of C exists
 * exactly when some matching takes every step and some matching takes every
 * event of C's exclusions (Mendelsohn–Dulmage: then one matching does both),
 * and each is an augmenting-path search over the group's kinds of events.
 */
function groupWays(user: UserEvents, group: number, first: number, count: number, stepCount: number, exclusionCount: number, wanted: number): ReadonlySet<number> {
  const start = user.groupStarts[group];
  const size = user.groupStarts[group + 1] - start;
  // One event at this timestamp (the common case): at most one way, without the search.
  if (size === 1 && count <= 1) {
    const mask = user.masks[user.rows[start]];
    if (count === 1) return (mask & (1 << first)) === 0 ? noWays : coverageWays(wanted);
    let coverage = 0;
    for (let exclusion = 0; exclusion < exclusionCount; exclusion++) if ((wanted & (1 << exclusion)) !== 0 && (mask & (1 << (stepCount + exclusion))) === 0) coverage |= 1 << exclusion;
    return coverageWays(coverage);
  }
  if (count > size) return noWays;
  if (size <= placementSizeMax) return groupWaysByPlacement(user, group, first, count, stepCount, exclusionCount, wanted);
  const stepBits = count === 0 ? 0 : ((1 << count) - 1) << first;
  let wantedBits = 0;
  for (let exclusion = 0; exclusion < exclusionCount; exclusion++) if ((wanted & (1 << exclusion)) !== 0) wantedBits |= 1 << (stepCount + exclusion);
  const counts = kindCounts(user, group, group, stepBits | wantedBits);
  const kinds: GroupKinds = { masks: [...counts.keys()], counts: [...counts.values()] };
  if (!matchesEverySlot(kinds, first, count, stepBits, 0)) return noWays;
  if (wanted === 0) return coverageWays(0);
  // Covering C's exclusions is possible for every C within a covered set, so only sets not within one found are tried, largest first.
  const found: number[] = [];
  for (let size = popCount(wanted); size >= 0; size--) {
    for (let covered = wanted; ; covered = (covered - 1) & wanted) {
      if (popCount(covered) === size && !found.some((other) => (covered & other) === covered)) {
        let coveredBits = 0;
        for (let exclusion = 0; exclusion < exclusionCount; exclusion++) if ((covered & (1 << exclusion)) !== 0) coveredBits |= 1 << (stepCount + exclusion);
        if (matchesEverySlot(kinds, first, count, stepBits, coveredBits)) found.push(covered);
      }
      if (covered === 0) break;
    }
  }
  return found.length === 1 ? coverageWays(found[0]) : new Set(found);
}

/** Groups of at most this many events are searched by placement (at most 720 tries), larger ones by matching. */
let placementSizeMax = 6;

/** Sets placementSizeMax (tests: 0 searches every group by matching), and returns the one before. */
export function setPlacementSizeMax(size: number): number {
  const before = placementSizeMax;
  placementSizeMax = size;
  return before;
}

/**
 * groupWays for a small group: every placement of the steps over its events is
 * tried (at most placementSizeMax! of them), which costs less there than
 * building the matchings.
 */
function groupWaysByPlacement(user: UserEvents, group: number, first: number, count: number, stepCount: number, exclusionCount: number, wanted: number): ReadonlySet<number> {
  const start = user.groupStarts[group];
  const size = user.groupStarts[group + 1] - start;
  const ways = new Set<number>();
  const used = new Uint8Array(size);
  const place = (offset: number): boolean => {
    if (offset === count) {
      let coverage = 0;
      for (let exclusion = 0; exclusion < exclusionCount; exclusion++) {
        if ((wanted & (1 << exclusion)) === 0) continue;
        const bit = 1 << (stepCount + exclusion);
        let covered = true;
        for (let index = 0; index < size && covered; index++) if (used[index] === 0 && (user.masks[user.rows[start + index]] & bit) !== 0) covered = false;
        if (covered) coverage |= 1 << exclusion;
      }
      ways.add(coverage);
      return wanted === 0 || coverage === wanted;
    }
    const bit = 1 << (first + offset);
    for (let index = 0; index < size; index++) {
      if (used[index] === 1 || (user.masks[user.rows[start + index]] & bit) === 0) continue;
      used[index] = 1;
      const done = place(offset + 1);
      used[index] = 0;
      if (done) return true;
    }
    return false;
  };
  place(0);
  return ways;
}

function popCount(bits: number): number {
  let count = 0;
  for (let rest = bits; rest !== 0; rest &= rest - 1) count++;
  return count;
}

/** A group's events by kind (their mask within the bits that matter; events with none left out): each kind's mask and how many events have it. */
interface GroupKinds {
  masks: number[];
  counts: number[];
}

/**
 * With `requiredBits` 0: whether steps [first, first + count) can each take a
 * distinct event. Else whether every event with a bit of `requiredBits` can
 * take a distinct step of those. Kuhn's augmenting paths, events of one kind
 * being interchangeable: at most count paths over count × kinds edges.
 */
function matchesEverySlot(kinds: GroupKinds, first: number, count: number, stepBits: number, requiredBits: number): boolean {
  if (requiredBits === 0) return stepsMatch(Array.from({ length: count }, (_, step) => first + step), kinds.masks, kinds.counts);
  const kindCount = kinds.masks.length;
  const visitedSteps = new Uint8Array(count);
  // An event finds a step: a free one it matches, or one whose event can move to another step.
  const eventOfStep = new Int32Array(count).fill(-1);
  let required = 0;
  for (let kind = 0; kind < kindCount; kind++) if ((kinds.masks[kind] & requiredBits) !== 0) required += kinds.counts[kind];
  if (required > count) return false;
  const kindOfEvent: number[] = [];
  for (let kind = 0; kind < kindCount; kind++) if ((kinds.masks[kind] & requiredBits) !== 0) for (let copy = 0; copy < kinds.counts[kind]; copy++) kindOfEvent.push(kind);
  const placeEvent = (event: number): boolean => {
    const mask = kinds.masks[kindOfEvent[event]] & stepBits;
    for (let step = 0; step < count; step++) {
      if ((mask & (1 << (first + step))) === 0 || visitedSteps[step] === 1) continue;
      visitedSteps[step] = 1;
      if (eventOfStep[step] < 0 || placeEvent(eventOfStep[step])) {
        eventOfStep[step] = event;
        return true;
      }
    }
    return false;
  };
  for (let event = 0; event < kindOfEvent.length; event++) {
    visitedSteps.fill(0);
    if (!placeEvent(event)) return false;
  }
  return true;
}

const noWays: ReadonlySet<number> = new Set();
/** One-way sets by coverage mask, made once (exclusions are at most 10: 1 024 masks). */
const singleWays: Array<ReadonlySet<number>> = [];
function coverageWays(coverage: number): ReadonlySet<number> {
  return (singleWays[coverage] ??= new Set([coverage]));
}

/**
 * walkedDepth's states: the latest entry per state, before and after a group,
 * and the states that hold one, so a group reads the few live states rather
 * than all (steps + 1)² of them.
 */
class WalkStates {
  latest = new Float64Array(0);
  next = new Float64Array(0);
  live = new Int32Array(0);
  liveCount = 0;
  nextLive = new Int32Array(0);
  nextLiveCount = 0;

  reset(stateCount: number): void {
    if (this.latest.length < stateCount) {
      this.latest = new Float64Array(stateCount);
      this.next = new Float64Array(stateCount);
      this.live = new Int32Array(stateCount);
      this.nextLive = new Int32Array(stateCount);
    }
    this.latest.fill(-Infinity, 0, stateCount);
    this.next.fill(-Infinity, 0, stateCount);
    this.liveCount = 0;
    this.nextLiveCount = 0;
  }

  /** Keeps `entryMs` for `state` after the group when later than what it holds. */
  reach(state: number, entryMs: number): void {
    const held = this.next[state];
    if (held === -Infinity) this.nextLive[this.nextLiveCount++] = state;
    if (entryMs > held) this.next[state] = entryMs;
  }

  /** The group is done: its states become the ones before the next group. */
  advance(): void {
    for (let index = 0; index < this.liveCount; index++) this.latest[this.live[index]] = -Infinity;
    [this.latest, this.next] = [this.next, this.latest];
    [this.live, this.nextLive] = [this.nextLive, this.live];
    this.liveCount = this.nextLiveCount;
    this.nextLiveCount = 0;
  }
}

const walkStates = new WalkStates();

/**
 * The deepest valid chain of any entry, in one walk of the user's groups:
 * chainDepthFrom's states (steps done, cap), each holding the latest entry of
 * the chains in it. What a state may still reach depends on the state and
 * the groups to come alone, and a later entry's window ends later, so the
 * latest entry answers for all of the state's chains, and gives the least
 * time to each step it takes (times, lowered in place).
 */
function walkedDepth(user: UserEvents, plan: FunnelChainsPlan, times: Float64Array): number {
  const stepCount = plan.stepCount;
  const width = stepCount + 1;
  const states = walkStates;
  states.reset(width * width);
  const groupCount = user.groupStarts.length - 1;
  let best = 0;
  for (let group = 0; group < groupCount; group++) {
    const groupMs = groupTimeMs(user, group);
    const oldestEntryMs = groupMs - plan.windowMs;
    for (let index = 0; index < states.liveCount; index++) {
      const state = states.live[index];
      const entryMs = states.latest[state];
      if (entryMs < oldestEntryMs) continue;
      best = Math.max(best, walkGroup(user, plan, group, Math.floor(state / width), state % width, entryMs, states, times));
    }
    if (groupMs >= plan.entryFromMs && groupMs < plan.entryToMsExclusive) best = Math.max(best, walkGroup(user, plan, group, 0, stepCount, groupMs, states, times));
    if (best === stepCount && !plan.timeToConvert) break;
    states.advance();
  }
  return best;
}

/**
 * chainDepthFrom's step over one group from state (done, cap), for walkedDepth
 * (done 0: the chains entering here): the states it leads to keep `entryMs`
 * (the latest kept); returns the most steps done on the way.
 */
function walkGroup(user: UserEvents, plan: FunnelChainsPlan, group: number, done: number, cap: number, entryMs: number, states: WalkStates, times: Float64Array): number {
  const stepCount = plan.stepCount;
  const entry = done === 0;
  const groupMs = groupTimeMs(user, group);
  const exclusionCount = plan.exclusions.length;
  let best = 0;
  let open = 0;
  for (let exclusion = 0; exclusion < exclusionCount; exclusion++) {
    const { fromStep, toStep } = plan.exclusions[exclusion];
    if (fromStep <= done && done < toStep) open |= 1 << exclusion;
  }
  const start = user.groupStarts[group];
  if (user.groupStarts[group + 1] - start === 1) {
    // One event (the common case): it takes step `done`, or no step, and then an open exclusion it is an event of lowers the cap.
    const mask = user.masks[user.rows[start]];
    if (!entry) {
      let nextCap = cap;
      for (let exclusion = 0; exclusion < exclusionCount; exclusion++) {
        if ((open & (1 << exclusion)) !== 0 && (mask & (1 << (stepCount + exclusion))) !== 0) nextCap = Math.min(nextCap, plan.exclusions[exclusion].toStep - 1);
      }
      best = done;
      if (done < nextCap) states.reach(done * (stepCount + 1) + nextCap, entryMs);
    }
    if (done < cap && (mask & (1 << done)) !== 0) {
      best = done + 1;
      if (groupMs - entryMs < times[done]) times[done] = groupMs - entryMs;
      if (done + 1 < cap) states.reach((done + 1) * (stepCount + 1) + cap, entryMs);
    }
    return best;
  }
  for (let count = entry ? 1 : 0; done + count <= cap; count++) {
    let wanted = 0;
    for (let exclusion = 0; exclusion < exclusionCount; exclusion++) if ((open & (1 << exclusion)) !== 0 && plan.exclusions[exclusion].toStep > done + count) wanted |= 1 << exclusion;
    const ways = groupWays(user, group, done, count, stepCount, exclusionCount, wanted);
    if (ways.size === 0) break;
    const reached = done + count;
    if (reached > best) best = reached;
    for (let step = done; step < reached; step++) if (groupMs - entryMs < times[step]) times[step] = groupMs - entryMs;
    for (const coverage of ways) {
      let nextCap = cap;
      for (let exclusion = 0; exclusion < exclusionCount; exclusion++) {
        if ((wanted & (1 << exclusion)) !== 0 && (coverage & (1 << exclusion)) === 0) nextCap = Math.min(nextCap, plan.exclusions[exclusion].toStep - 1);
      }
      if (reached < nextCap) states.reach(reached * (stepCount + 1) + nextCap, entryMs);
    }
  }
  return best;
}

/** The deepest valid chain whose entry lies in group entryGroup (times: each step's least time from that entry, lowered in place). */
function chainDepthFrom(user: UserEvents, plan: FunnelChainsPlan, entryGroup: number, times: Float64Array): number {
  const stepCount = plan.stepCount;
  const exclusionCount = plan.exclusions.length;
  const strict = plan.order === "strict";
  const groupCount = user.groupStarts.length - 1;
  let best = 0;
  {
    const entryMs = groupTimeMs(user, entryGroup);
    const windowEndMs = entryMs + plan.windowMs;
    // States: j * (stepCount + 1) + cap.
    let states = new Set<number>([0 * (stepCount + 1) + stepCount]);
    for (let group = entryGroup; group < groupCount && states.size > 0; group++) {
      const groupMs = groupTimeMs(user, group);
      if (groupMs > windowEndMs) break;
      const next = new Set<number>();
      for (const state of states) {
        const done = Math.floor(state / (stepCount + 1));
        const cap = state % (stepCount + 1);
        // Exclusions open since an earlier group: a ≤ done < b.
        let open = 0;
        for (let exclusion = 0; exclusion < exclusionCount; exclusion++) {
          const { fromStep, toStep } = plan.exclusions[exclusion];
          if (fromStep <= done && done < toStep) open |= 1 << exclusion;
        }
        const firstStepHere = group === entryGroup;
        for (let count = firstStepHere ? 1 : 0; done + count <= cap; count++) {
          // Exclusions still open after this group need their events here covered.
          let wanted = 0;
          for (let exclusion = 0; exclusion < exclusionCount; exclusion++) if ((open & (1 << exclusion)) !== 0 && plan.exclusions[exclusion].toStep > done + count) wanted |= 1 << exclusion;
          const ways = groupWays(user, group, done, count, stepCount, exclusionCount, wanted);
          if (ways.size === 0) break;
          for (const coverage of ways) {
            let nextCap = cap;
            for (let exclusion = 0; exclusion < exclusionCount; exclusion++) {
              if ((wanted & (1 << exclusion)) !== 0 && (coverage & (1 << exclusion)) === 0) nextCap = Math.min(nextCap, plan.exclusions[exclusion].toStep - 1);
            }
            const reached = done + count;
            // Strict: a group passed without a step ends the chain (its events lie between).
            if (strict && count === 0 && done > 0) nextCap = Math.min(nextCap, done);
            for (let step = done; step < reached; step++) if (groupMs - entryMs < times[step]) times[step] = groupMs - entryMs;
            if (reached > best) best = reached;
            if (reached < nextCap) next.add(reached * (stepCount + 1) + nextCap);
          }
        }
      }
      states = next;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------
// Unordered

/** disjointUnorderedDepth's per step: events in the window, and the position of the earliest at or after the entry. */
const stepsInWindow = new ScratchInt32();
const earliestOfStep = new ScratchInt32();

/**
 * Unordered, when each of the user's events matches one step at most (step
 * events of different names, filters that do not overlap): the k steps have
 * a set from entry group T exactly when steps 0…k-1 each have an event in
 * T's window and one of those steps an event at T, so a sliding window of
 * counts per step answers, with no matching. Its shortest span for k is
 * that of the earliest event of each step from T on. Undefined when an event
 * matches two steps.
 */
function disjointUnorderedDepth(user: UserEvents, plan: FunnelChainsPlan, times: Float64Array): number | undefined {
  const stepCount = plan.stepCount;
  const { rows, masks, groupStarts } = user;
  for (let index = 0; index < rows.length; index++) {
    const mask = masks[rows[index]];
    if (mask === 0 || (mask & (mask - 1)) !== 0) return undefined;
  }
  const groupCount = groupStarts.length - 1;
  const inWindow = stepsInWindow.get(stepCount).fill(0, 0, stepCount);
  const earliest = earliestOfStep.get(stepCount).fill(0, 0, stepCount);
  let windowEnd = 0;
  let best = 0;
  for (let entryGroup = 0; entryGroup < groupCount; entryGroup++) {
    const entryMs = groupTimeMs(user, entryGroup);
    if (entryMs >= plan.entryToMsExclusive) break;
    if (entryGroup > 0) for (let index = groupStarts[entryGroup - 1]; index < groupStarts[entryGroup]; index++) inWindow[31 - Math.clz32(masks[rows[index]])]--;
    for (; windowEnd < groupCount && groupTimeMs(user, windowEnd) - entryMs <= plan.windowMs; windowEnd++) {
      for (let index = groupStarts[windowEnd]; index < groupStarts[windowEnd + 1]; index++) inWindow[31 - Math.clz32(masks[rows[index]])]++;
    }
    if (entryMs < plan.entryFromMs) continue;
    let atEntry = 0;
    for (let index = groupStarts[entryGroup]; index < groupStarts[entryGroup + 1]; index++) atEntry |= masks[rows[index]];
    let present = 0;
    while (present < stepCount && inWindow[present] > 0) present++;
    // Feasible k: lowest < k ≤ present, where `lowest` is the least step with an event at the entry.
    const lowest = 31 - Math.clz32(atEntry & -atEntry);
    if (atEntry === 0 || lowest >= present) continue;
    if (present > best) best = present;
    if (!plan.timeToConvert) continue;
    let spanMs = 0;
    for (let step = 0; step < present; step++) {
      let at = Math.max(earliest[step], groupStarts[entryGroup]);
      while ((masks[rows[at]] & (1 << step)) === 0) at++;
      earliest[step] = at;
      spanMs = Math.max(spanMs, user.timesMs[rows[at]] - entryMs);
      if (step >= lowest && spanMs < times[step]) times[step] = spanMs;
    }
  }
  return best;
}

function unorderedDepth(user: UserEvents, plan: FunnelChainsPlan, times: Float64Array): number {
  const disjoint = disjointUnorderedDepth(user, plan, times);
  if (disjoint !== undefined) return disjoint;
  // The window's events by kind (their mask), counted as the window slides: a matching over kinds, not over events,
  // whose answers repeat from window to window (a busy user's windows hold the same kinds, each at least k times).
  const groupCount = user.groupStarts.length - 1;
  const window = new Map<number, number>();
  const addGroup = (group: number, delta: number) => {
    for (let index = user.groupStarts[group]; index < user.groupStarts[group + 1]; index++) {
      const mask = user.masks[user.rows[index]];
      if (mask === 0) continue;
      const left = (window.get(mask) ?? 0) + delta;
      if (left === 0) window.delete(mask);
      else window.set(mask, left);
    }
  };
  const answers = new Map<string, boolean>();
  let best = 0;
  let lastGroup = -1;
  for (let entryGroup = 0; entryGroup < groupCount; entryGroup++) {
    const entryMs = groupTimeMs(user, entryGroup);
    if (entryMs >= plan.entryToMsExclusive) break;
    if (entryGroup > 0) addGroup(entryGroup - 1, -1);
    while (lastGroup + 1 < groupCount && groupTimeMs(user, lastGroup + 1) - entryMs <= plan.windowMs) addGroup(++lastGroup, 1);
    if (entryMs < plan.entryFromMs) continue;
    const entryKinds = [...kindCounts(user, entryGroup, entryGroup).keys()];
    for (let steps = 1; steps <= plan.stepCount; steps++) {
      // Not monotone: a deeper set may hold no smaller one whose earliest is here.
      if (!unorderedFeasible(window, entryKinds, steps, answers)) continue;
      if (steps > best) best = steps;
      if (!plan.timeToConvert) continue;
      // The shortest span: the first group by which the set fits. Only a span shorter than the best so far matters,
      // and it is searched from the entry outwards (doubling, then halving), so its cost follows the span, not the window.
      const fitsBy = (group: number) => unorderedFeasible(kindCounts(user, entryGroup, group), entryKinds, steps, answers);
      const shorterBy = lastGroupBefore(user, entryMs + times[steps - 1], entryGroup, lastGroup);
      if (shorterBy < entryGroup || !fitsBy(shorterBy)) continue;
      let low = entryGroup;
      let high = entryGroup;
      while (high < shorterBy && !fitsBy(high)) {
        low = high + 1;
        high = Math.min(shorterBy, entryGroup + 2 * (high - entryGroup) + 1);
      }
      while (low < high) {
        const middle = (low + high) >>> 1;
        if (fitsBy(middle)) high = middle;
        else low = middle + 1;
      }
      times[steps - 1] = groupTimeMs(user, low) - entryMs;
    }
  }
  if (!plan.timeToConvert) times.fill(Infinity);
  return best;
}

/** The last group in [first, last] whose time is before `beforeMs`; first - 1 when none. */
function lastGroupBefore(user: UserEvents, beforeMs: number, first: number, last: number): number {
  let low = first - 1;
  let high = last;
  while (low < high) {
    const middle = (low + high + 1) >> 1;
    if (groupTimeMs(user, middle) < beforeMs) low = middle;
    else high = middle - 1;
  }
  return low;
}

/** Events of groups [first, last] by kind: their mask within `bits` (every bit by default), those with none left out. */
function kindCounts(user: UserEvents, first: number, last: number, bits = 0xffffffff): Map<number, number> {
  const counts = new Map<number, number>();
  for (let index = user.groupStarts[first]; index < user.groupStarts[last + 1]; index++) {
    const mask = user.masks[user.rows[index]] & bits;
    if (mask !== 0) counts.set(mask, (counts.get(mask) ?? 0) + 1);
  }
  return counts;
}

/**
 * Whether steps 0…k-1 can take distinct events of the window (its events by
 * mask), one of them an event of the entry group (of a mask in `entryKinds`).
 * Masks are cut to the k steps and counts to k (more never matter), and the
 * answer is kept under that shape in `answers`.
 */
function unorderedFeasible(window: ReadonlyMap<number, number>, entryKinds: readonly number[], k: number, answers: Map<string, boolean>): boolean {
  const bits = k >= 32 ? 0xffffffff : (1 << k) - 1;
  const counts = new Map<number, number>();
  for (const [mask, count] of window) {
    const cut = mask & bits;
    if (cut !== 0) counts.set(cut, Math.min(k, (counts.get(cut) ?? 0) + count));
  }
  const entry = [...new Set(entryKinds.map((mask) => mask & bits).filter((mask) => mask !== 0))].sort((a, b) => a - b);
  const kinds = [...counts.keys()].sort((a, b) => a - b);
  const key = `${k}|${entry.join(",")}|${kinds.map((mask) => `${mask}:${counts.get(mask)}`).join(",")}`;
  const known = answers.get(key);
  if (known !== undefined) return known;
  let feasible = false;
  const capacity = kinds.map((mask) => counts.get(mask)!);
  const others = Array.from({ length: k }, (_, step) => step);
  for (const entryMask of entry) {
    const kind = kinds.indexOf(entryMask);
    for (let fixed = 0; fixed < k && !feasible; fixed++) {
      if ((entryMask & (1 << fixed)) === 0) continue;
      // One event of the entry's kind takes step `fixed`; the other steps match the rest.
      capacity[kind]--;
      feasible = stepsMatch(others.filter((step) => step !== fixed), kinds, capacity);
      capacity[kind]++;
    }
    if (feasible) break;
  }
  answers.set(key, feasible);
  return feasible;
}

/**
 * Kuhn's augmenting paths over kinds of events: can each of `steps` (step
 * numbers) take a distinct event, `capacity[i]` of them of mask `masks[i]`?
 * Events of one kind are interchangeable, so a path visits kinds, not events:
 * at most steps.length paths over steps × kinds edges.
 */
function stepsMatch(steps: readonly number[], masks: readonly number[], capacity: readonly number[]): boolean {
  const taken = new Int32Array(masks.length);
  const kindOfStep = new Int32Array(steps.length).fill(-1);
  const visited = new Uint8Array(masks.length);
  // A step finds an event: an untaken one of a kind it matches, or one whose step can move to another kind.
  const place = (slot: number): boolean => {
    const bit = 1 << steps[slot];
    for (let kind = 0; kind < masks.length; kind++) {
      if ((masks[kind] & bit) === 0 || visited[kind] === 1) continue;
      visited[kind] = 1;
      if (taken[kind] < capacity[kind]) {
        taken[kind]++;
        kindOfStep[slot] = kind;
        return true;
      }
      for (let other = 0; other < steps.length; other++) {
        if (kindOfStep[other] !== kind || !place(other)) continue;
        // `other` moved to another kind: its event of this one is this step's now (taken[kind] unchanged).
        kindOfStep[slot] = kind;
        return true;
      }
    }
    return false;
  };
  for (let slot = 0; slot < steps.length; slot++) {
    visited.fill(0);
    if (!place(slot)) return false;
  }
  return true;
}
