/**
 * Funnels of SPEC §7 from the segments' columns: the fast
 * path of funnel-chains.ts, which searches each user's events but does not
 * need every user's. Most entry users never do a step-2 event, and such a
 * user is at depth 1 whatever else it did (an entry alone is a valid chain:
 * exclusions end at step 2 or later), so only its breakdown value is needed.
 * Ordered and strict (unordered: below):
 *
 *   1. One scan of the step-1 and step-2 references' rows:
 *      per user slot, the earliest entry in range and its breakdown value
 *      (SPEC §7.3: ties to the least value, "not set" first), and the first
 *      and last of its step-2 times.
 *   2. Candidates (an entry and a step-2 event): their rows in
 *      [first step-2 time - window, last step-2 time + window] gathered from
 *      the segments, every event for strict (any event between two steps
 *      breaks the chain), the referenced ones otherwise. A chain that
 *      reaches step 2 lies in that interval (e1 within the window before
 *      its e2, the rest within the window after e1), and so does every event
 *      a strict gap or an exclusion asks about; a user's other events only
 *      repeat depth 1. The chain search of funnel-chains.ts runs over them;
 *      values come from pass 1, and a candidate without an entry in its
 *      interval is depth 1.
 *   3. Every other entry user is at depth 1, counted per value.
 * Both passes read a sealed segment's runs a block of user ids at a time
 * (blockSlots), every run's block before the next block: the per-user state
 * and a block's gathered rows then stay in a core's cache, where a whole
 * shard's (a few MB) was read nearly at random, and the chain search reads
 * a block's rows in (user, time) order while they are still cached.
 *
 * Unordered funnels: a user's entry (its value) is its earliest event of any
 * step in range, and pass 1 reads every step's rows. Only a user with events
 * of steps 1 and 2 can go deeper than 1; such a candidate's rows of the whole
 * range are gathered (a set's events may lie anywhere in it), and every other
 * entry user is at depth 1, or 0 without a step-1 event in range. The
 * entry range's start is gather.fromMs (the query service sets both alike):
 * pass 1 reads no row before it.
 */
import type { SegmentView } from "../segment-view.js";
import { compareValues, maskOf, propertyReader, segmentReferences, valueInterner, type EventRows, type GatherPlan, type PropertyReader, type SegmentReference } from "./event-rows.js";
import { collectOutcomes, emptyOutcomes, entryBitsOf, summariseOutcomes, type FunnelChainsAnswer, type FunnelChainsPlan, type Outcomes } from "./funnel-chains.js";
import { lowerBoundUser, segmentsByDay } from "./rows.js";
import { GrowableFloat64, GrowableUint32, ScratchFloat64, ScratchInt32 } from "./scratch.js";

/** Per user slot: the earliest entry time in range (Infinity: none) and its value; its first and last step-2 times, then its interval to gather. */
const entryTimes = new ScratchFloat64();
const entryValues = new ScratchInt32();
const intervalLows = new ScratchFloat64();
const intervalHighs = new ScratchFloat64();

export function funnelColumns(segments: readonly SegmentView[], gather: GatherPlan, plan: FunnelChainsPlan, userLo: number, userHi: number): FunnelChainsAnswer | undefined {
  const unordered = plan.order === "unordered";
  const slots = userHi - userLo;
  const times = entryTimes.get(slots).fill(Infinity, 0, slots);
  const values = entryValues.get(slots);
  const lows = intervalLows.get(slots).fill(Infinity, 0, slots);
  const highs = intervalHighs.get(slots).fill(-Infinity, 0, slots);
  const seen = unordered ? stepsSeen.get(slots).fill(0, 0, slots) : undefined;
  const valueTexts = scanEntries(segments, gather, plan, userLo, userHi, times, values, lows, highs, seen);

  // Candidates keep their interval (an empty one for every other user); every other entry user is at depth 1
  // (unordered: 0 without a step-1 event in range), counted per value: only a candidate needs an outcome of its own.
  const depthOne = new Float64Array(valueTexts.length);
  const depthZero = new Float64Array(unordered ? valueTexts.length : 0);
  const depthWithoutOutcome = (slot: number) => (seen !== undefined && (seen[slot] & seenStepOneInRange) === 0 ? depthZero : depthOne);
  let entryCount = 0;
  let candidateCount = 0;
  for (let slot = 0; slot < slots; slot++) {
    const entered = times[slot] !== Infinity;
    const candidate = entered && (seen === undefined ? lows[slot] !== Infinity : (seen[slot] & seenStepsOneAndTwo) === seenStepsOneAndTwo);
    if (!candidate) {
      if (entered) depthWithoutOutcome(slot)[values[slot]]++;
      lows[slot] = Infinity;
      highs[slot] = -Infinity;
    } else {
      // Unordered: any of its events in range may start the set, and the rest lie within the window after it.
      lows[slot] = unordered ? gather.fromMs : lows[slot] - plan.windowMs;
      highs[slot] = unordered ? gather.toMsExclusive : highs[slot] + plan.windowMs;
      candidateCount++;
    }
    if (entered) entryCount++;
  }
  const outcomes = emptyOutcomes(candidateCount);
  if (candidateCount === 0) return summariseOutcomes(outcomes, valueTexts, plan, depthOne, depthZero);

  // Pass 2: the candidates' chains, in user order; a candidate without an entry in its interval is depth 1 (unordered: as any other).
  collectCandidateOutcomes(segments, gather, plan, lows, highs, userLo, userHi, outcomes);
  let outcome = 0;
  for (let slot = 0; slot < slots; slot++) {
    if (lows[slot] === Infinity) continue;
    if (outcome < outcomes.count && outcomes.users[outcome] === slot + userLo) outcomes.values[outcome++] = values[slot];
    else depthWithoutOutcome(slot)[values[slot]]++;
  }
  let counted = outcomes.count;
  for (const users of depthOne) counted += users;
  for (const users of depthZero) counted += users;
  if (outcome !== outcomes.count || counted !== entryCount) throw new Error(`candidate outcomes out of step: ${outcome} of ${outcomes.count}, ${counted} of ${entryCount} entry users`);
  return summariseOutcomes(outcomes, valueTexts, plan, depthOne, depthZero);
}

/**
 * Unordered, per user slot, what pass 1 saw: a step-1 event in the entry
 * range (seenStepOneInRange), and a step-1 or step-2 event anywhere it read
 * (seenStepOne, seenStepTwo). Only a user with both of the latter can go
 * deeper than 1; one without the former is at depth 0.
 */
const stepsSeen = new ScratchInt32();
const seenStepOneInRange = 1;
const seenStepOne = 2;
const seenStepTwo = 4;
const seenStepsOneAndTwo = seenStepOne | seenStepTwo;

/**
 * One event's rows in one segment, read by a pass: a sealed segment's run of
 * the event ([cursor, end) left to read, sorted by user) or, for an active
 * segment (`eventIds` set), every row, of which the event's are kept.
 */
interface EventRun {
  segment: SegmentView;
  eventId: number;
  references: SegmentReference[] | undefined;
  /** No filter to check: `constantMask` holds for every row of the event. */
  constant: boolean;
  constantMask: number;
  cursor: number;
  end: number;
}

function eventRun(segment: SegmentView, eventId: number, references: SegmentReference[] | undefined, userLo: number): EventRun {
  const constant = references === undefined || references.every((reference) => reference.passes.length === 0);
  const starts = segment.eventRowStart;
  const runEnd = starts === undefined ? segment.rowCount : starts[eventId + 1];
  const cursor = starts === undefined ? 0 : lowerBoundUser(segment.userIds, starts[eventId], runEnd, userLo);
  return { segment, eventId, references, constant, constantMask: constant ? maskOf(references, cursor) : 0, cursor, end: runEnd };
}

/**
 * Calls `read(run, userHi)` for every run's rows from its cursor, of users
 * [userLo, userHi): an active segment's rows once (userHi: the shard's end),
 * a sealed run's in blocks of blockSlots users, every run's block before the
 * next block, then `blockDone(block)`. A sealed read stops at its first row
 * of a user >= its userHi and returns that row, where the run's next block
 * starts. A pass keeps per-user state for the whole shard (times, intervals:
 * a few MB) and a sealed run visits its users in order, one run after
 * another, so without blocks nearly every row's state would miss the cache;
 * within a block it stays in it.
 */
function eachBlockOfRuns(runs: readonly EventRun[], userLo: number, userHi: number, read: (run: EventRun, userHi: number) => number, blockDone?: (block: number) => void): void {
  for (const run of runs) if (run.segment.eventRowStart === undefined) read(run, userHi);
  for (let block = 0, blockLo = userLo; blockLo < userHi; block++, blockLo += blockSlots) {
    const blockHi = Math.min(userHi, blockLo + blockSlots);
    for (const run of runs) {
      if (run.segment.eventRowStart !== undefined && run.cursor < run.end) run.cursor = read(run, blockHi);
    }
    blockDone?.(block);
  }
}

/** User slots per block of the sealed passes: a block's per-slot state (~28 bytes a slot) stays in a core's L2 cache. */
const blockSlots = 8192;

/**
 * Pass 1 over the rows of the step-1 and step-2 references in
 * [gather.fromMs, gather.toMsExclusive): per user slot the earliest entry
 * before entryToMsExclusive and its value (times, values), and the first and
 * last step-2 times (lows, highs). Unordered (`seen`), over every step's
 * rows: the entry is the earliest event of any step, and `seen` marks the
 * steps 1 and 2 met. Returns the value texts (id 0: not set).
 */
function scanEntries(
  segments: readonly SegmentView[],
  gather: GatherPlan,
  plan: FunnelChainsPlan,
  userLo: number,
  userHi: number,
  times: Float64Array,
  values: Int32Array,
  lows: Float64Array,
  highs: Float64Array,
  seen: Int32Array | undefined,
): string[] {
  const valueTexts: string[] = [""];
  const globalId = valueInterner(valueTexts);
  const references = gather.references.slice(0, seen === undefined ? Math.min(2, plan.stepCount) : plan.stepCount);
  const entryBits = entryBitsOf(plan);
  const entryToMsExclusive = plan.entryToMsExclusive;
  const runs: EventRun[] = [];
  const readers = new Map<SegmentView, PropertyReader>();
  for (const segmentIndex of segmentsByDay(segments, gather.fromMs, gather.toMsExclusive)) {
    const segment = segments[segmentIndex];
    const byEvent = segmentReferences(segment, references);
    if (byEvent.size === 0) continue;
    readers.set(segment, propertyReader(segment, gather.breakdown, globalId));
    for (const [eventId, eventReferences] of byEvent) runs.push(eventRun(segment, eventId, eventReferences, userLo));
  }
  eachBlockOfRuns(runs, userLo, userHi, (run, readHi) => {
    const { segment, eventId, references: eventReferences, constant, constantMask, end } = run;
    const { valueIds, globalIds } = readers.get(segment)!;
    const { userIds, timeOffsetMs, dayStartMs, eventIds } = segment;
    const offsetLow = gather.fromMs - dayStartMs;
    const offsetHigh = gather.toMsExclusive - dayStartMs;
    for (let row = run.cursor; row < end; row++) {
      const user = userIds[row];
      if (eventIds === undefined) {
        if (user >= readHi) return row;
      } else if (eventIds[row] !== eventId || user < userLo || user >= userHi) continue;
      const offset = timeOffsetMs[row];
      if (offset < offsetLow || offset >= offsetHigh) continue;
      const mask = constant ? constantMask : maskOf(eventReferences, row);
      const slot = user - userLo;
      const timeMs = dayStartMs + offset;
      if ((mask & 2) !== 0) {
        if (timeMs < lows[slot]) lows[slot] = timeMs;
        if (timeMs > highs[slot]) highs[slot] = timeMs;
      }
      if (seen !== undefined) seen[slot] |= (mask & 1) * seenStepOne + (mask & 2) * (seenStepTwo / 2) + (timeMs < entryToMsExclusive ? (mask & 1) * seenStepOneInRange : 0);
      if ((mask & entryBits) === 0 || timeMs >= entryToMsExclusive || timeMs > times[slot]) continue;
      const value = valueIds === undefined ? 0 : globalIds[valueIds[row]];
      if (timeMs < times[slot] || compareValues(valueTexts, value, values[slot], true) < 0) {
        times[slot] = timeMs;
        values[slot] = value;
      }
    }
    return end;
  });
  return valueTexts;
}

/**
 * Pass 2: the outcomes of the candidates, block by block of users. A block's
 * rows are each user slot s's rows in [lows[s], highs[s]] and in
 * [gather.fromMs, gather.toMsExclusive): with `gather.allEvents` every event
 * (mask 0 where no reference holds), else the referenced ones; values and
 * numbers are not read (all 0 and NaN). Gathered and searched a block at a
 * time, they stay in the cache while the chain search reads them in (user,
 * time) order: gathered for the whole shard at once, they were a few MB, and
 * that order read them nearly at random.
 */
function collectCandidateOutcomes(
  segments: readonly SegmentView[],
  gather: GatherPlan,
  plan: FunnelChainsPlan,
  lows: Float64Array,
  highs: Float64Array,
  userLo: number,
  userHi: number,
  outcomes: Outcomes,
): void {
  const sink = blockRows;
  const runs: EventRun[] = [];
  // An active segment's rows are not sorted by user: read once, then dealt to blocks.
  const active = activeRows;
  active.count = 0;
  for (const segmentIndex of segmentsByDay(segments, gather.fromMs, gather.toMsExclusive)) {
    const segment = segments[segmentIndex];
    const byEvent = segmentReferences(segment, gather.references);
    if (byEvent.size === 0 && !gather.allEvents) continue;
    const starts = segment.eventRowStart;
    if (starts === undefined) {
      copyActiveRows(segment, byEvent, gather, lows, highs, userLo, userHi, active);
      continue;
    }
    for (let eventId = 0; eventId + 1 < starts.length; eventId++) {
      const references = byEvent.get(eventId);
      if ((references !== undefined || gather.allEvents) && starts[eventId + 1] > starts[eventId]) runs.push(eventRun(segment, eventId, references, userLo));
    }
  }
  const activeBlocks = rowsByBlock(active, userLo, userHi);
  sink.count = 0;
  const readRun = (run: EventRun, blockHi: number) => copyMarkedRows(run, blockHi, gather, lows, highs, userLo, sink);
  eachBlockOfRuns(runs, userLo, userHi, readRun, (block) => {
    for (let index = activeBlocks.starts[block]; index < activeBlocks.starts[block + 1]; index++) {
      const row = activeBlocks.order[index];
      sink.push(active.users[row], active.times[row], active.masks[row]);
    }
    if (sink.count === 0) return;
    collectOutcomes({ count: sink.count, users: sink.users, timesMs: sink.times, masks: sink.masks, values: zeroValues.get(sink.count), valueTexts: noTexts, numbers: noNumbers }, plan, outcomes);
    sink.count = 0;
  });
}

const noTexts = [""];
const noNumbers = new Float64Array(0);
/** Breakdown values of gathered rows: never written, so all 0 ("not set"). */
const zeroValues = new ScratchInt32();

/** Gathered rows: `count` used of the arrays, which grow as rows come (kept for the next task). */
class RowSink {
  private readonly userStore = new GrowableUint32();
  private readonly timeStore = new GrowableFloat64();
  private readonly maskStore = new GrowableUint32();
  users = this.userStore.values;
  times = this.timeStore.values;
  masks = this.maskStore.values;
  count = 0;

  push(user: number, timeMs: number, mask: number): void {
    if (this.count === this.users.length) this.grow();
    this.users[this.count] = user;
    this.times[this.count] = timeMs;
    this.masks[this.count] = mask;
    this.count++;
  }

  grow(): void {
    this.users = this.userStore.grow(this.count + 1);
    this.times = this.timeStore.grow(this.count + 1);
    this.masks = this.maskStore.grow(this.count + 1);
  }
}

/** One block's rows, and the active segments' rows of the whole shard. */
const blockRows = new RowSink();
const activeRows = new RowSink();

/**
 * Rows of one sealed event run from its cursor up to its first row of a user
 * >= userHi (returned; the run's end when none) whose time is in range and in
 * its user's interval, into the sink.
 */
function copyMarkedRows(run: EventRun, userHi: number, gather: GatherPlan, lows: Float64Array, highs: Float64Array, userLo: number, sink: RowSink): number {
  const { userIds, timeOffsetMs, dayStartMs } = run.segment;
  const offsetLow = gather.fromMs - dayStartMs;
  const offsetHigh = gather.toMsExclusive - dayStartMs;
  const allEvents = gather.allEvents;
  const { references, constant, constantMask, end } = run;
  // The sink's arrays in locals: a push per row through the object cost as much as the rest of the loop.
  let { users, times, masks, count } = sink;
  let row = run.cursor;
  for (; row < end; row++) {
    const user = userIds[row];
    if (user >= userHi) break;
    const offset = timeOffsetMs[row];
    const timeMs = dayStartMs + offset;
    if (timeMs < lows[user - userLo] || timeMs > highs[user - userLo] || offset < offsetLow || offset >= offsetHigh) continue;
    const mask = constant ? constantMask : maskOf(references, row);
    if (mask === 0 && !allEvents) continue;
    if (count === users.length) {
      sink.count = count;
      sink.grow();
      ({ users, times, masks } = sink);
    }
    users[count] = user;
    times[count] = timeMs;
    masks[count] = mask;
    count++;
  }
  sink.count = count;
  return row;
}

/** An active segment's rows of users [userLo, userHi) whose time is in range and in its user's interval, into the sink. */
function copyActiveRows(
  segment: SegmentView,
  byEvent: ReadonlyMap<number, SegmentReference[]>,
  gather: GatherPlan,
  lows: Float64Array,
  highs: Float64Array,
  userLo: number,
  userHi: number,
  sink: RowSink,
): void {
  const { userIds, timeOffsetMs, dayStartMs } = segment;
  const eventIds = segment.eventIds!;
  const offsetLow = gather.fromMs - dayStartMs;
  const offsetHigh = gather.toMsExclusive - dayStartMs;
  for (let row = 0; row < segment.rowCount; row++) {
    const user = userIds[row];
    if (user < userLo || user >= userHi) continue;
    const offset = timeOffsetMs[row];
    const timeMs = dayStartMs + offset;
    if (offset < offsetLow || offset >= offsetHigh || timeMs < lows[user - userLo] || timeMs > highs[user - userLo]) continue;
    const references = byEvent.get(eventIds[row]);
    if (references === undefined && !gather.allEvents) continue;
    const mask = maskOf(references, row);
    if (mask === 0 && !gather.allEvents) continue;
    sink.push(user, timeMs, mask);
  }
}

/** The sink's rows in order of user block (stable): block b's are order[starts[b], starts[b + 1]). */
function rowsByBlock(sink: RowSink, userLo: number, userHi: number): { order: Uint32Array; starts: Uint32Array } {
  const blockCount = Math.ceil((userHi - userLo) / blockSlots);
  const starts = new Uint32Array(blockCount + 1);
  for (let row = 0; row < sink.count; row++) starts[Math.floor((sink.users[row] - userLo) / blockSlots) + 1]++;
  for (let block = 0; block < blockCount; block++) starts[block + 1] += starts[block];
  const next = starts.slice(0, blockCount);
  const order = new Uint32Array(sink.count);
  for (let row = 0; row < sink.count; row++) order[next[Math.floor((sink.users[row] - userLo) / blockSlots)]++] = row;
  return { order, starts };
}
