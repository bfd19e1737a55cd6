/**
 * Ordered and strict funnels of SPEC §7 from the segments' columns: the fast
 * path of funnel-chains.ts, which searches each user's events but does not
 * need every user's. Most entry users never do a step-2 event, and such a
 * user is at depth 1 whatever else it did (an entry alone is a valid chain:
 * exclusions end at step 2 or later), so only its breakdown value is needed.
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
 *   3. Every other entry user is an outcome at depth 1.
 *
 * Unordered funnels answer undefined: their entry is any step, so step 2 does
 * not bound who goes deeper than 1.
 */
import type { SegmentView } from "../segment-view.js";
import { compareValues, maskOf, propertyReader, segmentReferences, valueInterner, type EventRows, type GatherPlan, type SegmentReference } from "./event-rows.js";
import { collectOutcomes, emptyOutcomes, summariseOutcomes, type FunnelChainsAnswer, type FunnelChainsPlan } from "./funnel-chains.js";
import { sealedShardRows, segmentsByDay, type RowRange } from "./rows.js";
import { GrowableFloat64, GrowableUint32, ScratchFloat64, ScratchInt32 } from "./scratch.js";

/** Per user slot: the earliest entry time in range (Infinity: none) and its value; its first and last step-2 times, then its interval to gather. */
const entryTimes = new ScratchFloat64();
const entryValues = new ScratchInt32();
const intervalLows = new ScratchFloat64();
const intervalHighs = new ScratchFloat64();
/** The candidates' gathered rows. */
const candidateUsers = new GrowableUint32();
const candidateTimes = new GrowableFloat64();
const candidateMasks = new GrowableUint32();
const shardRows: RowRange = { start: 0, end: 0 };

export function funnelColumns(segments: readonly SegmentView[], gather: GatherPlan, plan: FunnelChainsPlan, userLo: number, userHi: number): FunnelChainsAnswer | undefined {
  if (plan.order === "unordered") return undefined;
  const slots = userHi - userLo;
  const times = entryTimes.get(slots).fill(Infinity, 0, slots);
  const values = entryValues.get(slots);
  const lows = intervalLows.get(slots).fill(Infinity, 0, slots);
  const highs = intervalHighs.get(slots).fill(-Infinity, 0, slots);
  const valueTexts = scanEntries(segments, gather, plan, userLo, userHi, times, values, lows, highs);

  // Candidates keep their interval (an empty one for every other user); every other entry user is an outcome at depth 1.
  let entryCount = 0;
  let candidateCount = 0;
  for (let slot = 0; slot < slots; slot++) {
    if (times[slot] === Infinity || lows[slot] === Infinity) {
      lows[slot] = Infinity;
      highs[slot] = -Infinity;
    } else {
      lows[slot] -= plan.windowMs;
      highs[slot] += plan.windowMs;
      candidateCount++;
    }
    if (times[slot] !== Infinity) entryCount++;
  }
  const outcomes = emptyOutcomes(entryCount);
  const depthOne = (slot: number) => {
    const outcome = outcomes.count++;
    outcomes.users[outcome] = slot + userLo;
    outcomes.depths[outcome] = 1;
    outcomes.values[outcome] = values[slot];
    if (plan.timeToConvert) outcomes.times[outcome] = undefined;
  };
  for (let slot = 0; slot < slots; slot++) if (times[slot] !== Infinity && lows[slot] === Infinity) depthOne(slot);
  if (candidateCount === 0) return summariseOutcomes(outcomes, valueTexts, plan);

  // Pass 2: the candidates' chains, in user order; a candidate without an entry in its interval is depth 1.
  const rows = gatherCandidateRows(segments, gather, lows, highs, userLo, userHi);
  const firstCandidate = outcomes.count;
  collectOutcomes(rows, plan, outcomes);
  const candidateEnd = outcomes.count;
  let outcome = firstCandidate;
  for (let slot = 0; slot < slots; slot++) {
    if (lows[slot] === Infinity) continue;
    if (outcome < candidateEnd && outcomes.users[outcome] === slot + userLo) outcomes.values[outcome++] = values[slot];
    else depthOne(slot);
  }
  if (outcome !== candidateEnd || outcomes.count !== entryCount) throw new Error(`candidate outcomes out of step: ${outcome} of ${candidateEnd}, ${outcomes.count} of ${entryCount} entry users`);
  return summariseOutcomes(outcomes, valueTexts, plan);
}

/**
 * Pass 1 over the rows of the step-1 and step-2 references in
 * [gather.fromMs, gather.toMsExclusive): per user slot the earliest entry
 * before entryToMsExclusive and its value (times, values), and the first and
 * last step-2 times (lows, highs). Returns the value texts (id 0: not set).
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
): string[] {
  const valueTexts: string[] = [""];
  const globalId = valueInterner(valueTexts);
  const references = gather.references.slice(0, Math.min(2, plan.stepCount));
  const entryToMsExclusive = plan.entryToMsExclusive;
  for (const segmentIndex of segmentsByDay(segments, gather.fromMs, gather.toMsExclusive)) {
    const segment = segments[segmentIndex];
    const byEvent = segmentReferences(segment, references);
    if (byEvent.size === 0) continue;
    const breakdown = propertyReader(segment, gather.breakdown, globalId);
    const { valueIds, globalIds } = breakdown;
    const { userIds, timeOffsetMs, dayStartMs, eventIds } = segment;
    const offsetLow = gather.fromMs - dayStartMs;
    const offsetHigh = gather.toMsExclusive - dayStartMs;
    for (const [eventId, eventReferences] of byEvent) {
      let start = 0;
      let end = segment.rowCount;
      if (segment.eventRowStart !== undefined) {
        sealedShardRows(segment.eventRowStart, userIds, eventId, userLo, userHi, shardRows);
        ({ start, end } = shardRows);
      }
      const constant = eventReferences.every((reference) => reference.passes.length === 0);
      const constantMask = constant ? maskOf(eventReferences, start) : 0;
      for (let row = start; row < end; row++) {
        const user = userIds[row];
        if (eventIds !== undefined && (eventIds[row] !== eventId || user < userLo || user >= userHi)) continue;
        const offset = timeOffsetMs[row];
        if (offset < offsetLow || offset >= offsetHigh) continue;
        const mask = constant ? constantMask : maskOf(eventReferences, row);
        const slot = user - userLo;
        const timeMs = dayStartMs + offset;
        if ((mask & 2) !== 0) {
          if (timeMs < lows[slot]) lows[slot] = timeMs;
          if (timeMs > highs[slot]) highs[slot] = timeMs;
        }
        if ((mask & 1) === 0 || timeMs >= entryToMsExclusive || timeMs > times[slot]) continue;
        const value = valueIds === undefined ? 0 : globalIds[valueIds[row]];
        if (timeMs < times[slot] || compareValues(valueTexts, value, values[slot], true) < 0) {
          times[slot] = timeMs;
          values[slot] = value;
        }
      }
    }
  }
  return valueTexts;
}

/**
 * The rows of each user slot s in [lows[s], highs[s]] and in [gather.fromMs, gather.toMsExclusive): with
 * `gather.allEvents` every event (mask 0 where no reference holds), else the
 * referenced ones. Values and numbers are not read (all 0 and NaN).
 */
function gatherCandidateRows(segments: readonly SegmentView[], gather: GatherPlan, lows: Float64Array, highs: Float64Array, userLo: number, userHi: number): EventRows {
  let users = candidateUsers.values;
  let times = candidateTimes.values;
  let masks = candidateMasks.values;
  let count = 0;
  const reserve = (extra: number) => {
    if (count + extra <= users.length) return;
    users = candidateUsers.grow(count + extra);
    times = candidateTimes.grow(count + extra);
    masks = candidateMasks.grow(count + extra);
  };
  for (const segmentIndex of segmentsByDay(segments, gather.fromMs, gather.toMsExclusive)) {
    const segment = segments[segmentIndex];
    const byEvent = segmentReferences(segment, gather.references);
    if (byEvent.size === 0 && !gather.allEvents) continue;
    const { userIds, timeOffsetMs, dayStartMs } = segment;
    const offsetLow = gather.fromMs - dayStartMs;
    const offsetHigh = gather.toMsExclusive - dayStartMs;
    const starts = segment.eventRowStart;
    if (starts !== undefined) {
      const eventCount = starts.length - 1;
      for (let eventId = 0; eventId < eventCount; eventId++) {
        const references = byEvent.get(eventId);
        if (references === undefined && !gather.allEvents) continue;
        sealedShardRows(starts, userIds, eventId, userLo, userHi, shardRows);
        const { start, end } = shardRows;
        reserve(end - start);
        count = copyMarkedRows(userIds, timeOffsetMs, dayStartMs, start, end, offsetLow, offsetHigh, lows, highs, userLo, references, gather.allEvents, users, times, masks, count);
      }
    } else {
      const eventIds = segment.eventIds!;
      reserve(segment.rowCount);
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
        users[count] = user;
        times[count] = timeMs;
        masks[count] = mask;
        count++;
      }
    }
  }
  return { count, users, timesMs: times, masks, values: new Int32Array(count), valueTexts: [""], numbers: new Float64Array(0) };
}

/** Rows [start, end) of one sealed event run whose time is in range and in its user's interval; returns the new count. */
function copyMarkedRows(
  userIds: Uint32Array,
  timeOffsetMs: Uint32Array,
  dayStartMs: number,
  start: number,
  end: number,
  offsetLow: number,
  offsetHigh: number,
  lows: Float64Array,
  highs: Float64Array,
  userLo: number,
  references: SegmentReference[] | undefined,
  allEvents: boolean,
  users: Uint32Array,
  times: Float64Array,
  masks: Uint32Array,
  count: number,
): number {
  // No filter to check: one mask for the whole run.
  const constant = references === undefined || references.every((reference) => reference.passes.length === 0);
  const constantMask = constant ? maskOf(references, start) : 0;
  for (let row = start; row < end; row++) {
    const user = userIds[row];
    const offset = timeOffsetMs[row];
    const timeMs = dayStartMs + offset;
    if (timeMs < lows[user - userLo] || timeMs > highs[user - userLo] || offset < offsetLow || offset >= offsetHigh) continue;
    const mask = constant ? constantMask : maskOf(references, row);
    if (mask === 0 && !allEvents) continue;
    users[count] = user;
    times[count] = timeMs;
    masks[count] = mask;
    count++;
  }
  return count;
}
