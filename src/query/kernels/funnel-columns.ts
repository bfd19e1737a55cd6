/**
 * Ordered and strict funnels of SPEC §7 from the segments' columns: the fast
 * path of funnel-chains.ts, which searches each user's events but does not
 * need every user's. Most entry users never do a step-2 event, and such a
 * user is at depth 1 whatever else it did (an entry alone is a valid chain:
 * exclusions end at step 2 or later), so only its breakdown value is needed.
 *
 *   1. One scan of the step-1 and step-2 references' rows (column-scan.ts):
 *      per user slot, the earliest entry in range and its breakdown value
 *      (SPEC §7.3: ties to the least value, "not set" first), and whether it
 *      has a step-2 event before the horizon.
 *   2. Candidates (an entry and a step-2 event): their rows gathered from the
 *      segments, every event for strict (any event between two steps breaks
 *      the chain), the referenced ones otherwise; the chain search of
 *      funnel-chains.ts runs over them and their values come from pass 1.
 *   3. Every other entry user is an outcome at depth 1.
 *
 * Unordered funnels answer undefined: their entry is any step, so step 2 does
 * not bound who goes deeper than 1.
 */
import type { SegmentView } from "../segment-view.js";
import { planColumnScan, runColumnScan } from "./column-scan.js";
import { compareValues, maskOf, segmentReferences, type EventRows, type GatherPlan, type SegmentReference } from "./event-rows.js";
import { collectOutcomes, emptyOutcomes, summariseOutcomes, type FunnelChainsAnswer, type FunnelChainsPlan } from "./funnel-chains.js";
import { sealedShardRows, segmentsByDay, type RowRange } from "./rows.js";
import { GrowableFloat64, GrowableUint32, ScratchFloat64, ScratchInt32, ScratchUint32 } from "./scratch.js";

/** Per user slot: the earliest entry time in range (Infinity: none) and its value; whether it has a step-2 event. */
const entryTimes = new ScratchFloat64();
const entryValues = new ScratchInt32();
const stepTwoMarks = new ScratchUint32();
/** The candidates' gathered rows. */
const candidateUsers = new GrowableUint32();
const candidateTimes = new GrowableFloat64();
const candidateMasks = new GrowableUint32();
const shardRows: RowRange = { start: 0, end: 0 };

export function funnelColumns(segments: readonly SegmentView[], gather: GatherPlan, plan: FunnelChainsPlan, userLo: number, userHi: number): FunnelChainsAnswer | undefined {
  if (plan.order === "unordered") return undefined;
  const slots = userHi - userLo;
  const stepTwo = plan.stepCount >= 2;
  const scan = planColumnScan(
    segments,
    { ...gather, references: gather.references.slice(0, stepTwo ? 2 : 1), allEvents: false, math: { kind: "none" } },
    new Float64Array([gather.fromMs, gather.toMsExclusive]),
    userLo,
    userHi,
  );
  if (scan === undefined) return undefined;
  const valueTexts = scan.valueTexts;

  // Pass 1: entries and step-2 marks.
  const times = entryTimes.get(slots).fill(Infinity, 0, slots);
  const values = entryValues.get(slots);
  const marks = stepTwoMarks.get(slots).fill(0, 0, slots);
  const { entryToMsExclusive } = plan;
  runColumnScan(scan, (slot, mask, value, _number, _bucket, timeMs) => {
    if ((mask & 2) !== 0) marks[slot] = 1;
    if ((mask & 1) === 0 || timeMs >= entryToMsExclusive) return;
    const earliestMs = times[slot];
    if (timeMs < earliestMs || (timeMs === earliestMs && compareValues(valueTexts, value, values[slot], true) < 0)) {
      times[slot] = timeMs;
      values[slot] = value;
    }
  });

  // Candidates keep their mark; every other entry user is an outcome at depth 1.
  let entryCount = 0;
  let candidateCount = 0;
  for (let slot = 0; slot < slots; slot++) {
    if (times[slot] === Infinity) {
      marks[slot] = 0;
      continue;
    }
    entryCount++;
    candidateCount += marks[slot];
  }
  const outcomes = emptyOutcomes(entryCount);
  for (let slot = 0; slot < slots; slot++) {
    if (times[slot] === Infinity || marks[slot] === 1) continue;
    const outcome = outcomes.count++;
    outcomes.depths[outcome] = 1;
    outcomes.values[outcome] = values[slot];
    if (plan.timeToConvert) outcomes.times[outcome] = undefined;
  }
  if (candidateCount === 0) return summariseOutcomes(outcomes, valueTexts, plan);

  // Pass 2: the candidates' chains.
  const rows = gatherCandidateRows(segments, gather, marks, userLo, userHi);
  const firstCandidate = outcomes.count;
  collectOutcomes(rows, plan, outcomes);
  if (outcomes.count - firstCandidate !== candidateCount) throw new Error(`${outcomes.count - firstCandidate} candidate outcomes, expected ${candidateCount}`);
  // Outcomes come in user order: the values of pass 1, which saw every entry (the gather reads no property).
  let outcome = firstCandidate;
  for (let slot = 0; slot < slots; slot++) if (marks[slot] === 1) outcomes.values[outcome++] = values[slot];
  return summariseOutcomes(outcomes, valueTexts, plan);
}

/**
 * The rows of marked users in [gather.fromMs, gather.toMsExclusive): with
 * `gather.allEvents` every event (mask 0 where no reference holds), else the
 * referenced ones. Values and numbers are not read (all 0 and NaN).
 */
function gatherCandidateRows(segments: readonly SegmentView[], gather: GatherPlan, marks: Uint32Array, userLo: number, userHi: number): EventRows {
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
        count = copyMarkedRows(userIds, timeOffsetMs, dayStartMs, start, end, offsetLow, offsetHigh, marks, userLo, references, gather.allEvents, users, times, masks, count);
      }
    } else {
      const eventIds = segment.eventIds!;
      reserve(segment.rowCount);
      for (let row = 0; row < segment.rowCount; row++) {
        const user = userIds[row];
        if (user < userLo || user >= userHi || marks[user - userLo] === 0) continue;
        const offset = timeOffsetMs[row];
        if (offset < offsetLow || offset >= offsetHigh) continue;
        const references = byEvent.get(eventIds[row]);
        if (references === undefined && !gather.allEvents) continue;
        const mask = maskOf(references, row);
        if (mask === 0 && !gather.allEvents) continue;
        users[count] = user;
        times[count] = dayStartMs + offset;
        masks[count] = mask;
        count++;
      }
    }
  }
  return { count, users, timesMs: times, masks, values: new Int32Array(count), valueTexts: [""], numbers: new Float64Array(0) };
}

/** Rows [start, end) of one sealed event run whose user is marked and time in range; returns the new count. */
function copyMarkedRows(
  userIds: Uint32Array,
  timeOffsetMs: Uint32Array,
  dayStartMs: number,
  start: number,
  end: number,
  offsetLow: number,
  offsetHigh: number,
  marks: Uint32Array,
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
    if (marks[user - userLo] === 0) continue;
    const offset = timeOffsetMs[row];
    if (offset < offsetLow || offset >= offsetHigh) continue;
    const mask = constant ? constantMask : maskOf(references, row);
    if (mask === 0 && !allEvents) continue;
    users[count] = user;
    times[count] = dayStartMs + offset;
    masks[count] = mask;
    count++;
  }
  return count;
}
