// Over 500 lines: the set pass and the row pass of one kernel decide together which users reach each step, so they sit side by side.
/**
 * Funnel kernel (SPEC §4): for the users of one shard [userLo, userHi), how
 * many reach each step. Workers run it per shard and the partials are summed,
 * which is exact because shards hold disjoint users and each user counts once.
 *
 * Sets first, rows only where they decide something:
 *   1. entry users: the users with a step-1 event in [entryFrom, entryTo), as a
 *      roaring bitmap: the OR of the step's per-day user bitmaps of the UTC
 *      days wholly inside the range (all of them, unless a time zone cuts it),
 *      plus the users of rows scanned where no bitmap applies (active segments,
 *      sealed ones without bitmaps, days cut by the range). Its size is step 1.
 *   2. candidates: entry users that also have a step-2 event before the
 *      horizon (entryTo + window). Every other entry user stops at step 1
 *      whatever else it did, so it is counted by cardinality and never read.
 *      Step 2 is usually far rarer than step 1, so this removes most users
 *      (a superset is enough here: a day bitmap that reaches past the horizon
 *      only adds candidates that the walk then stops at step 1).
 *   3. gather (CSR): for each candidate and each distinct step name ("slot"),
 *      the times of its events of that name in [entryFrom, horizon). In a
 *      sealed segment a name's rows are sorted by (user, time), so a
 *      candidate's rows are one run, found by galloping to the users of
 *      (candidates AND the day's bitmap): rows of other users are not read.
 *      Entries come last and, unless the entry name is reused by a later
 *      step, only from around each candidate's step-2 events (an entry with
 *      no step-2 event within the window after it cannot pass step 1): a
 *      candidate that did step 2 once needs a day or two of entries, not all.
 *      A cell is sorted only when it is not already (rare: segments come in
 *      day order).
 *   4. walk: from every entry event, the greedy chain below; the deepest wins.
 * Candidates are gathered in chunks of a few thousand (see chunkCellsMax), in
 * user order, so a chunk's cells stay in cache and memory stays bounded
 * whatever the number of candidates and steps.
 *
 * On 10 M events (90 days, 1 M users), a 5-step funnel from $pageview takes
 * 4–5× less CPU this way than by scanning the 4.7 M entry rows for every
 * entry user (measured, one thread).
 *
 * The greedy chain. From entry e1, step j takes the earliest event of name
 * steps[j-1] whose time is >= the previous step's time and that no earlier step
 * used (a per-name pointer past the last used index: a cell's times are sorted,
 * so "unused" means "after the last used one"); stop at the first step with no
 * such event inside the window. It is optimal, by an exchange argument: take
 * any valid chain f1 = e1, f2 … fk. Among steps of one name, f can be reordered
 * so that later steps use later positions of the name's sorted times (two
 * same-name events used out of position order must have equal times, and
 * swapping them keeps the chain valid; if one of them is f1, the swap moves the
 * entry to another event of the same time, which the walk also tries). Then,
 * by induction, greedy's gj sits at a position <= fj's: fj is after the
 * position greedy last used for that name (that is gi <= fi for the previous
 * same-name step i) and not earlier than g(j-1) <= f(j-1) <= fj in time, so fj
 * was a candidate and greedy took one no later. Hence ts(gk) <= ts(fk) and
 * greedy's chain fits the window whenever f's does: its depth is the best.
 *
 * Two consequences prune the walk over a user's entries. The same argument,
 * run for chains whose steps of the entry's name come after the entry, shows
 * that greedy from entry e goes at least as deep, window aside, as any chain
 * from a later entry e' (replace e' by e: still ordered and distinct). Hence
 * when greedy from e runs out of events at step j (no candidate at all, not
 * merely one outside the window), no later entry passes step j either, and the
 * walk stops. And a later entry at the same time as e has the same window and
 * stricter candidates, so it is skipped.
 */
import roaring from "roaring";
import type { SegmentView } from "../segment-view.js";
import { dayMs } from "../buckets.js";
import { GrowableFloat64, GrowableInt32, GrowableUint32, ScratchFloat64, ScratchInt32, ScratchUint32 } from "./scratch.js";
import { lowerBoundTime, lowerBoundUser, segmentsByDay, sealedShardRows, type RowRange } from "./rows.js";
import { sumPartials } from "./partials.js";

const { RoaringBitmap32 } = roaring;
type RoaringBitmap32 = InstanceType<typeof RoaringBitmap32>;

export interface FunnelPlan {
  /** One workspace event id per step; undefined for a name never ingested (no user reaches that step). */
  stepEventIds: readonly (number | undefined)[];
  /** The first instant of local day dateFrom (UTC midnight without a zone): the first instant an entry event may have. */
  entryFromMs: number;
  /** The first instant of local day dateTo + 1. */
  entryToMsExclusive: number;
  /** conversionWindow × 1000: ts(ek) - ts(e1) <= windowMs. */
  windowMs: number;
}

/**
 * Cells (candidates × distinct step names) gathered at once. Small on
 * purpose: a chunk's cell counts, cursors and times then stay in a core's L2
 * cache while runs are recorded and copied in scattered cell order (with all
 * 150 k candidates of a shard in one chunk, every count update was a cache
 * miss, and that dominated the gather).
 */
const chunkCellsMax = 1 << 16;
const userSpaceEnd = 2 ** 32;
/** Entries gallopUser reads one by one before it starts doubling its stride. */
const gallopProbeLength = 16;
/**
 * (candidate, day) pairs of one chunk to search for entries, at most. A
 * one-day window makes about two per candidate; wide windows or frequent
 * step-2 events make more, and past this bound (or past what a scan of the
 * chunk's entry rows costs) every entry of the chunk is gathered instead.
 */
const entryBucketItemsMax = 1 << 22;

/** Dense candidate index + 1 per user slot (user - userLo); all zero between queries. */
const userCandidateIndexes = new GrowableInt32();
/** Candidate user ids, ascending. */
const candidateUsers = new ScratchUint32();
/** Users of rows scanned where no bitmap applies, before they join a bitmap. */
const scannedUsers = new ScratchUint32();
/** For each (sealed segment, name) with a bitmap: the candidates it holds, ascending, concatenated. */
const presentUsers = new GrowableUint32();
/** Rows of candidates in active segments, in collection order then grouped by candidate. */
const activeIndexes = new GrowableInt32();
const activeSlots = new GrowableInt32();
const activeTimes = new GrowableFloat64();
const activeSlotsByCandidate = new ScratchInt32();
const activeTimesByCandidate = new ScratchFloat64();
/**
 * The chunk's recorded runs, in recording order: each run's cell and length,
 * and its times, copied while its rows are still in cache (the fill then reads
 * them in order instead of going back to every segment).
 */
const runCells = new GrowableInt32();
const runLengths = new GrowableInt32();
const runTimes = new GrowableFloat64();
const recorded = { runCount: 0, timeCount: 0 };
/** Per chunk candidate: the interval its entries must lie in to be followed by a step-2 event. */
const entryLows = new ScratchFloat64();
const entryHighs = new ScratchFloat64();
const entryBucketItems = new ScratchInt32();
const cellOffsets = new ScratchInt32();
const cellCursors = new ScratchInt32();
const cellTimes = new ScratchFloat64();
const shardRows: RowRange = { start: 0, end: 0 };

/** Users per step (stepEventIds.length entries): count[k] = users whose deepest step is >= k + 1. */
export function funnelPartial(segments: readonly SegmentView[], plan: FunnelPlan, userLo: number, userHi: number): Float64Array {
  const stepCount = plan.stepEventIds.length;
  const counts = new Float64Array(stepCount);
  let reachableStepCount = 0;
  while (reachableStepCount < stepCount && plan.stepEventIds[reachableStepCount] !== undefined) reachableStepCount++;
  if (reachableStepCount === 0 || userLo >= userHi) return counts;

  // Distinct names: a repeated name is gathered once and shared by its steps. Slot 0 is the entry name.
  const slotEventIds: number[] = [];
  const stepSlots = new Int32Array(reachableStepCount);
  for (let step = 0; step < reachableStepCount; step++) {
    const eventId = plan.stepEventIds[step]!;
    let slot = slotEventIds.indexOf(eventId);
    if (slot < 0) {
      slot = slotEventIds.length;
      slotEventIds.push(eventId);
    }
    stepSlots[step] = slot;
  }
  const horizonMs = plan.entryToMsExclusive + plan.windowMs;
  const order = segmentsByDay(segments, plan.entryFromMs, horizonMs);

  const created: RoaringBitmap32[] = [];
  let candidates: Uint32Array | undefined;
  try {
    const entryUsers = usersWithEvent(segments, order, slotEventIds[0], plan.entryFromMs, plan.entryToMsExclusive, true, userLo, userHi, created);
    const entryUserCount = entryUsers.size;
    if (entryUserCount === 0) return counts;
    if (reachableStepCount === 1) {
      counts[0] = entryUserCount;
      return counts;
    }
    const stepTwoUsers = usersWithEvent(segments, order, slotEventIds[stepSlots[1]], plan.entryFromMs, horizonMs, false, userLo, userHi, created);
    const candidateSet = entryUsers.andInPlace(stepTwoUsers);
    const candidateCount = candidateSet.size;
    const deepestUsers = new Float64Array(reachableStepCount + 1);
    deepestUsers[1] = entryUserCount - candidateCount;

    if (candidateCount > 0) {
      candidates = candidateSet.toUint32Array(candidateUsers.get(candidateCount));
      numberCandidates(candidates, userLo);
      const slotCount = slotEventIds.length;
      const pairCount = order.length * slotCount;
      const gather: Gather = {
        segments,
        order,
        slotEventIds,
        stepTwoSlot: stepSlots[1],
        entriesFollowedOnly: stepSlots.indexOf(0, 1) < 0,
        candidates,
        entryFromMs: plan.entryFromMs,
        entryToMsExclusive: plan.entryToMsExclusive,
        windowMs: plan.windowMs,
        horizonMs,
        userLo,
        userHi,
        rowCursors: new Int32Array(pairCount),
        rowEnds: new Int32Array(pairCount),
        listCursors: new Int32Array(pairCount).fill(-1),
        listEnds: new Int32Array(pairCount),
        activeStarts: undefined,
        entryLowMs: undefined,
        entryHighMs: undefined,
        indexStart: 0,
        indexEnd: 0,
        chunkUserHi: 0,
      };
      prepareGather(gather, candidateSet);
      const chunkUsersMax = Math.max(1, Math.floor(chunkCellsMax / slotCount));
      const lastUsed = new Int32Array(slotCount);
      for (let indexStart = 0; indexStart < candidateCount; indexStart += chunkUsersMax) {
        gather.indexStart = indexStart;
        gather.indexEnd = Math.min(candidateCount, indexStart + chunkUsersMax);
        gather.chunkUserHi = candidates[gather.indexEnd - 1] + 1;
        const cellCount = (gather.indexEnd - gather.indexStart) * slotCount;
        const offsets = cellOffsets.get(cellCount + 1);
        const times = gatherChunk(gather, offsets, cellCount);
        walkChunk(offsets, times, gather.indexEnd - gather.indexStart, stepSlots, plan.entryToMsExclusive, plan.windowMs, lastUsed, deepestUsers);
      }
    }
    let reachedCount = 0;
    for (let depth = reachableStepCount; depth >= 1; depth--) {
      reachedCount += deepestUsers[depth];
      counts[depth - 1] = reachedCount;
    }
    return counts;
  } catch (error) {
    // A failure part-way through numbering leaves marks not listed anywhere: clear them all.
    userCandidateIndexes.values.fill(0);
    candidates = undefined;
    throw error;
  } finally {
    if (candidates !== undefined) clearCandidates(candidates, userLo);
    for (const bitmap of created) bitmap.dispose();
  }
}

/** Sum of the shards' partials. */
export function mergeFunnelPartials(partials: readonly Float64Array[]): Float64Array {
  return sumPartials(partials);
}

// ---------------------------------------------------------------------------
// Passes 1 and 2: user sets

/**
 * The shard's users with an event `eventId` in [fromMs, toMsExclusive). With
 * `exact` false the set may also hold users whose event lies elsewhere in a day
 * the range only touches (a whole-day bitmap is then used as it is).
 */
function usersWithEvent(
  segments: readonly SegmentView[],
  order: readonly number[],
  eventId: number,
  fromMs: number,
  toMsExclusive: number,
  exact: boolean,
  userLo: number,
  userHi: number,
  created: RoaringBitmap32[],
): RoaringBitmap32 {
  const dayBitmaps: RoaringBitmap32[] = [];
  let scanned: RoaringBitmap32 | undefined;
  for (const segmentIndex of order) {
    const segment = segments[segmentIndex];
    if (segment.dayStartMs >= toMsExclusive || segment.dayStartMs + dayMs <= fromMs) continue;
    const offsetLow = Math.max(0, fromMs - segment.dayStartMs);
    const offsetHigh = Math.min(dayMs, toMsExclusive - segment.dayStartMs);
    let userCount: number;
    let users: Uint32Array;
    if (segment.eventRowStart !== undefined) {
      const wholeDay = offsetLow === 0 && offsetHigh === dayMs;
      const bitmap = wholeDay || !exact ? segment.userBitmap(eventId) : undefined;
      if (bitmap !== undefined) {
        dayBitmaps.push(bitmap);
        continue;
      }
      sealedShardRows(segment.eventRowStart, segment.userIds, eventId, userLo, userHi, shardRows);
      if (shardRows.start === shardRows.end) continue;
      users = scannedUsers.get(shardRows.end - shardRows.start);
      userCount = sealedUsersInTime(segment.userIds, segment.timeOffsetMs, shardRows.start, shardRows.end, offsetLow, offsetHigh, users);
    } else {
      const rows = segment.eventRows(eventId)!;
      users = scannedUsers.get(rows.length);
      userCount = activeUsersInTime(rows, segment.userIds, segment.timeOffsetMs, offsetLow, offsetHigh, userLo, userHi, users);
    }
    if (userCount === 0) continue;
    if (scanned === undefined) {
      scanned = new RoaringBitmap32();
      created.push(scanned);
    }
    scanned.addMany(users.subarray(0, userCount));
  }
  if (dayBitmaps.length === 0) {
    if (scanned !== undefined) return scanned;
    const empty = new RoaringBitmap32();
    created.push(empty);
    return empty;
  }
  // Day bitmaps hold every user of the day: when the shard is part of them, cutting
  // each to the shard first halves the OR's work (2.1 ms instead of 3.5 ms for
  // 90 days of $pageview in half of 1 M users); the cut after the OR stays exact.
  if (dayBitmaps.length > 1 && (dayBitmaps[0].minimum() < userLo || dayBitmaps[0].maximum() >= userHi)) {
    const shard = new RoaringBitmap32();
    created.push(shard);
    shard.addRange(userLo, userHi);
    for (let index = 0; index < dayBitmaps.length; index++) {
      dayBitmaps[index] = RoaringBitmap32.and(dayBitmaps[index], shard);
      created.push(dayBitmaps[index]);
    }
  }
  // Scanned users are already inside the shard.
  if (scanned !== undefined) dayBitmaps.push(scanned);
  const union = RoaringBitmap32.orMany(dayBitmaps);
  created.push(union);
  if (userLo > 0) union.removeRange(0, userLo);
  if (userHi < userSpaceEnd) union.removeRange(userHi, userSpaceEnd);
  return union;
}

/** Distinct users of sealed rows [start, end) (grouped by user) with a time offset in [offsetLow, offsetHigh). */
function sealedUsersInTime(
  userIds: Uint32Array,
  timeOffsetMs: Uint32Array,
  start: number,
  end: number,
  offsetLow: number,
  offsetHigh: number,
  users: Uint32Array,
): number {
  let userCount = 0;
  let previousUser = -1;
  for (let row = start; row < end; row++) {
    const user = userIds[row];
    if (user === previousUser) continue;
    const offset = timeOffsetMs[row];
    if (offset < offsetLow || offset >= offsetHigh) continue;
    previousUser = user;
    users[userCount++] = user;
  }
  return userCount;
}

/** Users (repeats kept) of an active segment's rows `rows` (one event's) in the shard and the time offsets. */
function activeUsersInTime(
  rows: Uint32Array,
  userIds: Uint32Array,
  timeOffsetMs: Uint32Array,
  offsetLow: number,
  offsetHigh: number,
  userLo: number,
  userHi: number,
  users: Uint32Array,
): number {
  let userCount = 0;
  for (let index = 0; index < rows.length; index++) {
    const row = rows[index];
    const user = userIds[row];
    if (user < userLo || user >= userHi) continue;
    const offset = timeOffsetMs[row];
    if (offset >= offsetLow && offset < offsetHigh) users[userCount++] = user;
  }
  return userCount;
}

/** Candidate index + 1 per user slot, in user order (the gather then writes each run to ascending cells). */
function numberCandidates(candidates: Uint32Array, userLo: number): void {
  let indexes = userCandidateIndexes.values;
  const slotMax = candidates[candidates.length - 1] - userLo;
  if (slotMax >= indexes.length) indexes = userCandidateIndexes.grow(slotMax + 1);
  for (let index = 0; index < candidates.length; index++) indexes[candidates[index] - userLo] = index + 1;
}

function clearCandidates(candidates: Uint32Array, userLo: number): void {
  const indexes = userCandidateIndexes.values;
  for (let index = 0; index < candidates.length; index++) indexes[candidates[index] - userLo] = 0;
}

// ---------------------------------------------------------------------------
// Pass 3: gather times per (candidate, slot)

/**
 * One shard's gather. Chunks take the candidates in ascending user order, so
 * every (sealed segment, name) pair keeps a cursor into its rows (and into its
 * list of present candidates) that only moves forward from chunk to chunk.
 */
interface Gather {
  segments: readonly SegmentView[];
  order: readonly number[];
  slotEventIds: readonly number[];
  stepTwoSlot: number;
  /** The entry name is not repeated by a later step, so only entries that a step-2 event can follow need gathering. */
  entriesFollowedOnly: boolean;
  /** Every candidate of the shard, ascending. */
  candidates: Uint32Array;
  entryFromMs: number;
  entryToMsExclusive: number;
  windowMs: number;
  /** entryTo + window: every gathered time lies in [entryFromMs, horizonMs). */
  horizonMs: number;
  userLo: number;
  userHi: number;
  /** Per pair (order index × slot count + slot): the next row of the name's shard run to look at, and the run's end. */
  rowCursors: Int32Array;
  rowEnds: Int32Array;
  /** Per pair: the next present candidate in presentUsers, or -1 when the pair has no list (no bitmap: scan the rows). */
  listCursors: Int32Array;
  listEnds: Int32Array;
  /** Active rows of candidate i are [activeStarts[i], activeStarts[i + 1]) of the ByCandidate arrays; undefined when none. */
  activeStarts: Int32Array | undefined;
  /**
   * When entriesFollowedOnly, per chunk candidate (index - indexStart): the
   * interval its entries must lie in to be followed by a step-2 event.
   */
  entryLowMs: Float64Array | undefined;
  entryHighMs: Float64Array | undefined;
  /** The chunk: candidates [indexStart, indexEnd), users below chunkUserHi. */
  indexStart: number;
  indexEnd: number;
  chunkUserHi: number;
}

/**
 * Once per shard: the run of every (sealed segment, name) pair in the shard,
 * the candidates each pair's bitmap holds (one CRoaring AND per pair), and
 * the active rows of candidates grouped by candidate.
 */
function prepareGather(gather: Gather, candidateSet: RoaringBitmap32): void {
  const { segments, order, slotEventIds, userLo, userHi } = gather;
  const slotCount = slotEventIds.length;
  let listLength = 0;
  let activeRowCount = 0;
  for (let orderIndex = 0; orderIndex < order.length; orderIndex++) {
    const segment = segments[order[orderIndex]];
    if (segment.eventRowStart === undefined) {
      activeRowCount = collectActiveRows(gather, segment, activeRowCount);
      continue;
    }
    for (let slot = 0; slot < slotCount; slot++) {
      const pair = orderIndex * slotCount + slot;
      const eventId = slotEventIds[slot];
      sealedShardRows(segment.eventRowStart, segment.userIds, eventId, userLo, userHi, shardRows);
      gather.rowCursors[pair] = shardRows.start;
      gather.rowEnds[pair] = shardRows.end;
      // Entries around step-2 events are searched per candidate instead (see gatherChunk).
      if (shardRows.start === shardRows.end || (slot === 0 && gather.entriesFollowedOnly)) continue;
      const bitmap = segment.userBitmap(eventId);
      if (bitmap === undefined) continue;
      const present = RoaringBitmap32.and(candidateSet, bitmap);
      try {
        const presentCount = present.size;
        let users = presentUsers.values;
        if (listLength + presentCount > users.length) users = presentUsers.grow(listLength + presentCount);
        present.toUint32Array(users.subarray(listLength, listLength + presentCount));
        gather.listCursors[pair] = listLength;
        listLength += presentCount;
        gather.listEnds[pair] = listLength;
      } finally {
        present.dispose();
      }
    }
  }
  if (activeRowCount > 0) groupActiveRows(gather, activeRowCount);
}

/**
 * Appends (candidate index, slot, time) of the active segment's rows that the
 * gather needs, slot by slot (each cell keeps its rows in row order, and cells
 * are sorted by time anyway); returns the new count.
 */
function collectActiveRows(gather: Gather, segment: SegmentView, rowCount: number): number {
  const { userIds, timeOffsetMs, dayStartMs } = segment;
  const { slotEventIds, userLo, userHi } = gather;
  const indexes = userCandidateIndexes.values;
  const offsetLow = Math.max(0, gather.entryFromMs - dayStartMs);
  const offsetHigh = Math.min(dayMs, gather.horizonMs - dayStartMs);
  let candidateIndexes = activeIndexes.values;
  let slots = activeSlots.values;
  let times = activeTimes.values;
  for (let slot = 0; slot < slotEventIds.length; slot++) {
    // A name listed twice has its rows under its first slot, as a row-by-row lookup would.
    if (slotEventIds.indexOf(slotEventIds[slot]) !== slot) continue;
    const rows = segment.eventRows(slotEventIds[slot])!;
    for (let index = 0; index < rows.length; index++) {
      const row = rows[index];
      const user = userIds[row];
      if (user < userLo || user >= userHi) continue;
      const userSlot = user - userLo;
      if (userSlot >= indexes.length || indexes[userSlot] === 0) continue;
      const offset = timeOffsetMs[row];
      if (offset < offsetLow || offset >= offsetHigh) continue;
      if (rowCount >= candidateIndexes.length) {
        candidateIndexes = activeIndexes.grow(rowCount + 1);
        slots = activeSlots.grow(rowCount + 1);
        times = activeTimes.grow(rowCount + 1);
      }
      candidateIndexes[rowCount] = indexes[userSlot] - 1;
      slots[rowCount] = slot;
      times[rowCount] = dayStartMs + offset;
      rowCount++;
    }
  }
  return rowCount;
}

/** Stable counting sort of the collected active rows by candidate index. */
function groupActiveRows(gather: Gather, rowCount: number): void {
  const candidateCount = gather.candidates.length;
  const starts = new Int32Array(candidateCount + 1);
  const candidateIndexes = activeIndexes.values;
  for (let row = 0; row < rowCount; row++) starts[candidateIndexes[row] + 1]++;
  for (let index = 0; index < candidateCount; index++) starts[index + 1] += starts[index];
  const cursors = starts.slice(0, candidateCount);
  const slots = activeSlotsByCandidate.get(rowCount);
  const times = activeTimesByCandidate.get(rowCount);
  for (let row = 0; row < rowCount; row++) {
    const target = cursors[candidateIndexes[row]]++;
    slots[target] = activeSlots.values[row];
    times[target] = activeTimes.values[row];
  }
  gather.activeStarts = starts;
}

/**
 * Fills offsets[0..cellCount] (cell c = slot × chunk users + (candidate index - indexStart)
 * holds times[offsets[c] .. offsets[c + 1])) and returns the times, each cell sorted.
 *
 * Entries are counted last: when the entry name is not reused by a later
 * step, an entry matters only if a step-2 event lies within the window after
 * it, so once the other names are counted each candidate's entries are cut to
 * [first step-2 time - window, last step-2 time], and only the days of that
 * interval are searched. A candidate that did step 2 once needs a day or two
 * of entries instead of all of them.
 */
function gatherChunk(gather: Gather, offsets: Int32Array, cellCount: number): Float64Array {
  const { segments, order } = gather;
  const chunkUserCount = gather.indexEnd - gather.indexStart;
  offsets.fill(0, 0, cellCount + 1);
  recorded.runCount = 0;
  recorded.timeCount = 0;
  gather.entryLowMs = undefined;
  gather.entryHighMs = undefined;
  if (gather.entriesFollowedOnly) {
    gather.entryLowMs = entryLows.get(chunkUserCount).fill(Infinity, 0, chunkUserCount);
    gather.entryHighMs = entryHighs.get(chunkUserCount).fill(-Infinity, 0, chunkUserCount);
  }

  // Count every sealed run but the entries that are searched below, and every active row;
  // step-2 times widen the entry intervals as they go by.
  const firstSlot = gather.entriesFollowedOnly ? 1 : 0;
  for (let orderIndex = 0; orderIndex < order.length; orderIndex++) {
    if (segments[order[orderIndex]].eventRowStart === undefined) continue;
    for (let slot = firstSlot; slot < gather.slotEventIds.length; slot++) recordPairRuns(gather, orderIndex, slot, offsets);
  }
  if (gather.activeStarts !== undefined) countActiveRows(gather, offsets);

  // Count the entries in sealed segments, around step-2 events when their intervals are few enough.
  if (gather.entryLowMs !== undefined && gather.entryHighMs !== undefined) {
    clampEntryIntervals(gather, gather.entryLowMs, gather.entryHighMs);
    // A (candidate, day) search costs about two scanned rows (measured: with a
    // 30-day window they are as many as the rows, and scanning wins by 15 %).
    const buckets = bucketEntryDays(gather, gather.entryLowMs, gather.entryHighMs, Math.min(entryBucketItemsMax, chunkEntryRowCount(gather) / 2));
    for (let orderIndex = 0; orderIndex < order.length; orderIndex++) {
      if (segments[order[orderIndex]].eventRowStart === undefined) continue;
      if (buckets !== undefined) recordEntryRuns(gather, orderIndex, buckets, gather.entryLowMs, gather.entryHighMs, offsets);
      else recordPairRuns(gather, orderIndex, 0, offsets);
    }
  }
  for (let cell = 0; cell < cellCount; cell++) offsets[cell + 1] += offsets[cell];

  // Fill: the recorded times in order, each run to its cell.
  const times = cellTimes.get(offsets[cellCount]);
  const cursors = cellCursors.get(cellCount);
  cursors.set(offsets.subarray(0, cellCount));
  const cells = runCells.values;
  const lengths = runLengths.values;
  const staged = runTimes.values;
  let timeIndex = 0;
  for (let run = 0; run < recorded.runCount; run++) {
    const cell = cells[run];
    const timeEnd = timeIndex + lengths[run];
    let cursor = cursors[cell];
    while (timeIndex < timeEnd) times[cursor++] = staged[timeIndex++];
    cursors[cell] = cursor;
  }
  if (gather.activeStarts !== undefined) fillActiveRows(gather, cursors, times);

  for (let cell = 0; cell < cellCount; cell++) {
    const start = offsets[cell];
    const end = offsets[cell + 1];
    for (let index = start + 1; index < end; index++) {
      if (times[index] < times[index - 1]) {
        times.subarray(start, end).sort();
        break;
      }
    }
  }
  return times;
}

/** Records sealed rows [start, end) of one segment as a run of `cell`: counts[cell + 1] grows by its length. */
function recordRun(timeOffsetMs: Uint32Array, dayStartMs: number, start: number, end: number, cell: number, counts: Int32Array): void {
  const runCount = recorded.runCount;
  if (runCount >= runCells.values.length) {
    runCells.grow(runCount + 1);
    runLengths.grow(runCount + 1);
  }
  runCells.values[runCount] = cell;
  runLengths.values[runCount] = end - start;
  recorded.runCount = runCount + 1;
  let timeCount = recorded.timeCount;
  let times = runTimes.values;
  if (timeCount + end - start > times.length) times = runTimes.grow(timeCount + end - start);
  for (let row = start; row < end; row++) times[timeCount++] = dayStartMs + timeOffsetMs[row];
  recorded.timeCount = timeCount;
  counts[cell + 1] += end - start;
}

/**
 * Records the chunk's runs of one (sealed segment, name) pair: with a list of
 * present candidates, each one's run is found by galloping, so the rows of
 * other users are never read; without one (no bitmap), the chunk's rows are
 * scanned. counts[cell + 1] grows by each run's length; returns the new run count.
 */
function recordPairRuns(gather: Gather, orderIndex: number, slot: number, counts: Int32Array): void {
  const pair = orderIndex * gather.slotEventIds.length + slot;
  let row = gather.rowCursors[pair];
  const rowEnd = gather.rowEnds[pair];
  if (row >= rowEnd) return;
  const segment = gather.segments[gather.order[orderIndex]];
  const { userIds, timeOffsetMs, dayStartMs } = segment;
  const offsetLow = Math.max(0, gather.entryFromMs - dayStartMs);
  const offsetHigh = Math.min(dayMs, gather.horizonMs - dayStartMs);
  const { indexStart, indexEnd, chunkUserHi } = gather;
  const cellStart = slot * (indexEnd - indexStart) - indexStart;
  const indexes = userCandidateIndexes.values;
  const userLo = gather.userLo;
  // Step-2 runs widen the entry intervals (see gatherChunk).
  const entryLowMs = slot === gather.stepTwoSlot ? gather.entryLowMs : undefined;
  const entryHighMs = gather.entryHighMs!;
  let listCursor = gather.listCursors[pair];
  const listEnd = listCursor < 0 ? -1 : gather.listEnds[pair];
  const users = presentUsers.values;
  const chunkRowEnd = listCursor < 0 ? lowerBoundUser(userIds, row, rowEnd, chunkUserHi) : rowEnd;

  while (true) {
    let start: number;
    let user: number;
    if (listCursor < 0) {
      // No list: every user of the chunk's rows, looked up.
      if (row >= chunkRowEnd) break;
      start = row;
      user = userIds[row];
    } else {
      // A present candidate: its run is found by galloping, rows of other users are skipped unread.
      if (listCursor >= listEnd || users[listCursor] >= chunkUserHi) break;
      user = users[listCursor++];
      start = gallopUser(userIds, row, rowEnd, user);
      if (start >= rowEnd || userIds[start] !== user) throw new Error(`segment ${segment.key}: user ${user} is in the bitmap of a name but has no row of it`);
    }
    let end = start + 1;
    while (end < chunkRowEnd && userIds[end] === user) end++;
    row = end;
    const index = indexes[user - userLo] - 1;
    if (index < 0) continue;
    // A user's rows are sorted by time: the ones in range are again a run.
    while (start < end && timeOffsetMs[start] < offsetLow) start++;
    while (end > start && timeOffsetMs[end - 1] >= offsetHigh) end--;
    if (start === end) continue;
    recordRun(timeOffsetMs, dayStartMs, start, end, cellStart + index, counts);
    if (entryLowMs !== undefined) {
      const chunkIndex = index - indexStart;
      entryLowMs[chunkIndex] = Math.min(entryLowMs[chunkIndex], dayStartMs + timeOffsetMs[start]);
      entryHighMs[chunkIndex] = Math.max(entryHighMs[chunkIndex], dayStartMs + timeOffsetMs[end - 1]);
    }
  }
  if (listCursor >= 0) gather.listCursors[pair] = listCursor;
  gather.rowCursors[pair] = row;
}

/**
 * First index in [start, end) whose user is >= user, for a target expected near
 * start: past a short linear probe the stride doubles until it passes the
 * user, then the last stride is bisected, so a gap of g entries costs about
 * 2·log2(g) reads.
 */
function gallopUser(users: Uint32Array, start: number, end: number, user: number): number {
  // Most targets are a few entries away: a short linear probe is predictable and sequential.
  const probeEnd = Math.min(start + gallopProbeLength, end);
  let index = start;
  while (index < probeEnd && users[index] < user) index++;
  if (index < probeEnd || index === end) return index;
  let low = index;
  let step = 1;
  while (index + step < end && users[index + step - 1] < user) {
    low = index + step;
    step *= 2;
  }
  let high = Math.min(index + step, end);
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (users[middle] < user) low = middle + 1;
    else high = middle;
  }
  return low;
}

/**
 * Entry intervals, from the step-2 times recorded while counting: candidate i
 * needs entries in [first step-2 time - window, last step-2 time], cut to the
 * entry range (empty when it has no step-2 time).
 */
function clampEntryIntervals(gather: Gather, entryLowMs: Float64Array, entryHighMs: Float64Array): void {
  const entryLastMs = gather.entryToMsExclusive - 1;
  for (let index = 0; index < gather.indexEnd - gather.indexStart; index++) {
    entryLowMs[index] = Math.max(gather.entryFromMs, entryLowMs[index] - gather.windowMs);
    entryHighMs[index] = Math.min(entryLastMs, entryHighMs[index]);
  }
}

/** Chunk candidate indexes (relative to indexStart, ascending) per day of the entry range that their interval touches. */
interface EntryBuckets {
  /** Epoch day of bucket 0. */
  firstDay: number;
  /** Bucket d holds items[starts[d] .. starts[d + 1]). */
  starts: Int32Array;
  items: Int32Array;
}

/** Sealed rows of the entry name that scanning the chunk's entries would read. */
function chunkEntryRowCount(gather: Gather): number {
  const slotCount = gather.slotEventIds.length;
  let rows = 0;
  for (let orderIndex = 0; orderIndex < gather.order.length; orderIndex++) {
    const segment = gather.segments[gather.order[orderIndex]];
    const pair = orderIndex * slotCount;
    if (segment.eventRowStart === undefined || gather.rowCursors[pair] >= gather.rowEnds[pair]) continue;
    rows += lowerBoundUser(segment.userIds, gather.rowCursors[pair], gather.rowEnds[pair], gather.chunkUserHi) - gather.rowCursors[pair];
  }
  return rows;
}

/** Undefined when the intervals are too wide to be worth it (more than itemsMax items). */
function bucketEntryDays(gather: Gather, entryLowMs: Float64Array, entryHighMs: Float64Array, itemsMax: number): EntryBuckets | undefined {
  const chunkUserCount = gather.indexEnd - gather.indexStart;
  const firstDay = Math.floor(gather.entryFromMs / dayMs);
  const dayCount = Math.floor((gather.entryToMsExclusive - 1) / dayMs) - firstDay + 1;
  const starts = new Int32Array(dayCount + 1);
  let itemCount = 0;
  for (let index = 0; index < chunkUserCount; index++) {
    if (entryLowMs[index] > entryHighMs[index]) continue;
    const firstBucket = Math.floor(entryLowMs[index] / dayMs) - firstDay;
    const lastBucket = Math.floor(entryHighMs[index] / dayMs) - firstDay;
    for (let day = firstBucket; day <= lastBucket; day++) starts[day + 1]++;
    itemCount += lastBucket - firstBucket + 1;
    if (itemCount > itemsMax) return undefined;
  }
  for (let day = 0; day < dayCount; day++) starts[day + 1] += starts[day];
  const items = entryBucketItems.get(itemCount);
  const cursors = starts.slice(0, dayCount);
  for (let index = 0; index < chunkUserCount; index++) {
    if (entryLowMs[index] > entryHighMs[index]) continue;
    const lastBucket = Math.floor(entryHighMs[index] / dayMs) - firstDay;
    for (let day = Math.floor(entryLowMs[index] / dayMs) - firstDay; day <= lastBucket; day++) items[cursors[day]++] = index;
  }
  return { firstDay, starts, items };
}

/**
 * Records the entry runs of one sealed segment for the candidates whose
 * interval touches its day, each cut to its interval: one gallop per
 * candidate through the entry name's rows.
 */
function recordEntryRuns(gather: Gather, orderIndex: number, buckets: EntryBuckets, entryLowMs: Float64Array, entryHighMs: Float64Array, counts: Int32Array): void {
  const segment = gather.segments[gather.order[orderIndex]];
  const day = Math.floor(segment.dayStartMs / dayMs) - buckets.firstDay;
  if (day < 0 || day + 1 >= buckets.starts.length) return;
  const itemEnd = buckets.starts[day + 1];
  const pair = orderIndex * gather.slotEventIds.length;
  let row = gather.rowCursors[pair];
  const rowEnd = gather.rowEnds[pair];
  const { userIds, timeOffsetMs, dayStartMs } = segment;
  const { items } = buckets;
  const { indexStart, candidates } = gather;
  for (let item = buckets.starts[day]; item < itemEnd && row < rowEnd; item++) {
    const index = items[item];
    const user = candidates[indexStart + index];
    let start = gallopUser(userIds, row, rowEnd, user);
    row = start;
    if (start >= rowEnd || userIds[start] !== user) continue;
    let end = start + 1;
    while (end < rowEnd && userIds[end] === user) end++;
    row = end;
    const offsetLow = entryLowMs[index] - dayStartMs;
    const offsetHigh = entryHighMs[index] - dayStartMs;
    while (start < end && timeOffsetMs[start] < offsetLow) start++;
    while (end > start && timeOffsetMs[end - 1] > offsetHigh) end--;
    if (start < end) recordRun(timeOffsetMs, dayStartMs, start, end, index, counts);
  }
  gather.rowCursors[pair] = row;
}

/**
 * The chunk's active rows, counted per cell. Every active entry is kept (a
 * superset of the entries that matter is still exact); step-2 rows widen the
 * entry intervals when those are used.
 */
function countActiveRows(gather: Gather, counts: Int32Array): void {
  const { entryLowMs, entryHighMs } = gather;
  const starts = gather.activeStarts!;
  const slots = activeSlotsByCandidate.get(0);
  const times = activeTimesByCandidate.get(0);
  const chunkUserCount = gather.indexEnd - gather.indexStart;
  const stepTwoSlot = entryLowMs === undefined ? -1 : gather.stepTwoSlot;
  for (let index = gather.indexStart; index < gather.indexEnd; index++) {
    const chunkIndex = index - gather.indexStart;
    for (let row = starts[index]; row < starts[index + 1]; row++) {
      const slot = slots[row];
      counts[slot * chunkUserCount + chunkIndex + 1]++;
      if (slot === stepTwoSlot) {
        if (times[row] < entryLowMs![chunkIndex]) entryLowMs![chunkIndex] = times[row];
        if (times[row] > entryHighMs![chunkIndex]) entryHighMs![chunkIndex] = times[row];
      }
    }
  }
}

function fillActiveRows(gather: Gather, cursors: Int32Array, times: Float64Array): void {
  const starts = gather.activeStarts!;
  const slots = activeSlotsByCandidate.get(0);
  const rowTimes = activeTimesByCandidate.get(0);
  const chunkUserCount = gather.indexEnd - gather.indexStart;
  for (let index = gather.indexStart; index < gather.indexEnd; index++) {
    const chunkIndex = index - gather.indexStart;
    for (let row = starts[index]; row < starts[index + 1]; row++) {
      times[cursors[slots[row] * chunkUserCount + chunkIndex]++] = rowTimes[row];
    }
  }
}

// ---------------------------------------------------------------------------
// Pass 4: the greedy walk from every entry

function walkChunk(
  offsets: Int32Array,
  times: Float64Array,
  chunkUserCount: number,
  stepSlots: Int32Array,
  entryToMsExclusive: number,
  windowMs: number,
  lastUsed: Int32Array,
  deepestUsers: Float64Array,
): void {
  const stepCount = stepSlots.length;
  const slotCount = lastUsed.length;
  for (let chunkIndex = 0; chunkIndex < chunkUserCount; chunkIndex++) {
    // Slot s of this user is cell s × chunkUserCount + chunkIndex; slot 0 is the entry name.
    const entryStart = offsets[chunkIndex];
    const entryEnd = offsets[chunkIndex + 1];
    let deepest = 1;
    for (let entry = entryStart; entry < entryEnd; entry++) {
      const entryMs = times[entry];
      if (entryMs >= entryToMsExclusive) break;
      const windowEndMs = entryMs + windowMs;
      for (let slot = 0; slot < slotCount; slot++) lastUsed[slot] = offsets[slot * chunkUserCount + chunkIndex] - 1;
      lastUsed[0] = entry;
      let previousMs = entryMs;
      let depth = 1;
      let exhausted = false;
      for (; depth < stepCount; depth++) {
        const slot = stepSlots[depth];
        const cellEnd = offsets[slot * chunkUserCount + chunkIndex + 1];
        const next = lowerBoundTime(times, lastUsed[slot] + 1, cellEnd, previousMs);
        if (next >= cellEnd) {
          exhausted = true;
          break;
        }
        if (times[next] > windowEndMs) break;
        lastUsed[slot] = next;
        previousMs = times[next];
      }
      if (depth > deepest) deepest = depth;
      // Every later entry would stop at this step too (see the header), so none can go deeper.
      if (deepest === stepCount || exhausted) break;
      // A later entry at the same time can only do as well as this one: skip it.
      while (entry + 1 < entryEnd && times[entry + 1] === entryMs) entry++;
    }
    deepestUsers[deepest]++;
  }
}
