/**
 * Funnel kernel (SPEC §4): for the users of one shard [userLo, userHi), how
 * many reach each step. Workers run it per shard and the partials are summed,
 * which is exact because shards hold disjoint users and each user counts once.
 *
 * Three passes over typed arrays, then one walk per user:
 *   1. entry users: users with a step-1 event in [entryFrom, entryTo) get a
 *      dense index (userEntryIndexes holds index + 1 and is zeroed again at the
 *      end); every other user is skipped by the later passes;
 *   2. gather (CSR): for each entry user and each distinct step name ("slot"),
 *      the times of that user's events of that name in [entryFrom, entryTo +
 *      window), counted in one pass and written in a second; a cell is sorted
 *      only when it is not already (sealed rows come sorted by user then time,
 *      and segments are visited in day order, so that is rare);
 *   3. walk: from every entry event, the greedy chain below; the deepest wins.
 * Users are gathered in chunks of bounded cell count, so memory stays bounded
 * when a shard holds millions of entry users and 20 steps.
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
import type { SegmentView } from "../segment-view.js";
import { dayMs } from "../buckets.js";
import { GrowableInt32, ScratchFloat64, ScratchInt32 } from "./scratch.js";
import { lowerBoundTime, segmentsByDay, sealedShardRows, type RowRange } from "./rows.js";
import { sumPartials } from "./partials.js";

export interface FunnelPlan {
  /** One workspace event id per step; undefined for a name never ingested (no user reaches that step). */
  stepEventIds: readonly (number | undefined)[];
  /** dateFrom 00:00 UTC: the first instant an entry event may have. */
  entryFromMs: number;
  /** dateTo + 1 day 00:00 UTC. */
  entryToMsExclusive: number;
  /** conversionWindow × 1000: ts(ek) - ts(e1) <= windowMs. */
  windowMs: number;
}

/**
 * Cells (entry users × distinct step names) gathered at once: 4 Mi cells keep
 * the offset and cursor arrays at 16 MiB each.
 */
const chunkCellsMax = 1 << 22;

/** Dense entry index + 1 per user slot (user - userLo); all zero between queries. */
const userEntryIndexes = new GrowableInt32();
/** The slots set in userEntryIndexes, to zero them again. */
const entryUserSlots = new GrowableInt32();
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

  // Distinct names: a repeated name is gathered once and shared by its steps.
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
  const eventSlots = eventSlotTable(slotEventIds);
  const horizonMs = plan.entryToMsExclusive + plan.windowMs;
  const order = segmentsByDay(segments, plan.entryFromMs, horizonMs);

  let entryUserCount = 0;
  try {
    entryUserCount = markEntryUsers(segments, order, slotEventIds[0], plan.entryFromMs, plan.entryToMsExclusive, userLo, userHi);
    if (entryUserCount === 0) return counts;
    const deepestUsers = new Float64Array(reachableStepCount + 1);
    if (reachableStepCount >= 2) {
      // An entry user with no event of step 2's name before the horizon stops at
      // step 1 whatever else it did: count it now and gather only the others.
      // Step 2 is usually far rarer than step 1, so most entry users go here.
      const keptCount = keepUsersWithEvent(segments, order, slotEventIds[stepSlots[1]], plan.entryFromMs, horizonMs, userLo, userHi, entryUserCount);
      deepestUsers[1] = entryUserCount - keptCount;
      entryUserCount = keptCount;
    }
    numberEntryUsersInUserOrder(entryUserCount);
    if (reachableStepCount === 1) {
      deepestUsers[1] = entryUserCount;
    } else if (entryUserCount > 0) {
      const slotCount = slotEventIds.length;
      const chunkUsersMax = Math.max(1, Math.floor(chunkCellsMax / slotCount));
      const chunk: GatherChunk = {
        segments,
        order,
        slotEventIds,
        eventSlots,
        fromMs: plan.entryFromMs,
        toMsExclusive: horizonMs,
        userLo,
        userHi,
        indexStart: 0,
        indexEnd: 0,
      };
      const lastUsed = new Int32Array(slotCount);
      for (let indexStart = 0; indexStart < entryUserCount; indexStart += chunkUsersMax) {
        chunk.indexStart = indexStart;
        chunk.indexEnd = Math.min(entryUserCount, indexStart + chunkUsersMax);
        const cellCount = (chunk.indexEnd - chunk.indexStart) * slotCount;
        const offsets = cellOffsets.get(cellCount + 1);
        const times = gatherChunk(chunk, offsets, cellCount);
        walkChunk(
          offsets,
          times,
          chunk.indexEnd - chunk.indexStart,
          slotCount,
          stepSlots,
          plan.entryToMsExclusive,
          plan.windowMs,
          lastUsed,
          deepestUsers,
        );
      }
    }
    let reachedCount = 0;
    for (let depth = reachableStepCount; depth >= 1; depth--) {
      reachedCount += deepestUsers[depth];
      counts[depth - 1] = reachedCount;
    }
    return counts;
  } catch (error) {
    // Marks of a half-finished pass 1 are not listed in entryUserCount: clear them all.
    userEntryIndexes.values.fill(0);
    throw error;
  } finally {
    clearEntryUsers(entryUserCount);
  }
}

/** Sum of the shards' partials. */
export function mergeFunnelPartials(partials: readonly Float64Array[]): Float64Array {
  return sumPartials(partials);
}

/** slot + 1 per event id (0: not a step), so an active segment's rows are routed with one load. */
function eventSlotTable(slotEventIds: readonly number[]): Int32Array {
  let eventIdMax = 0;
  for (const eventId of slotEventIds) eventIdMax = Math.max(eventIdMax, eventId);
  const table = new Int32Array(eventIdMax + 1);
  for (let slot = 0; slot < slotEventIds.length; slot++) table[slotEventIds[slot]] = slot + 1;
  return table;
}

// ---------------------------------------------------------------------------
// Pass 1: entry users

function markEntryUsers(
  segments: readonly SegmentView[],
  order: readonly number[],
  entryEventId: number,
  fromMs: number,
  toMsExclusive: number,
  userLo: number,
  userHi: number,
): number {
  let entryUserCount = 0;
  for (const segmentIndex of order) {
    const segment = segments[segmentIndex];
    if (segment.dayStartMs >= toMsExclusive || segment.dayStartMs + dayMs <= fromMs) continue;
    const offsetLow = Math.max(0, fromMs - segment.dayStartMs);
    const offsetHigh = Math.min(dayMs, toMsExclusive - segment.dayStartMs);
    if (segment.eventRowStart !== undefined) {
      sealedShardRows(segment.eventRowStart, segment.userIds, entryEventId, userLo, userHi, shardRows);
      entryUserCount = markSealedEntries(segment, shardRows.start, shardRows.end, offsetLow, offsetHigh, userLo, entryUserCount);
    } else {
      entryUserCount = markActiveEntries(segment, entryEventId, offsetLow, offsetHigh, userLo, userHi, entryUserCount);
    }
  }
  return entryUserCount;
}

/**
 * Keeps, among the marked entry users, those with at least one event `eventId`
 * in [fromMs, toMsExclusive); unmarks the others. Returns how many were kept;
 * the kept ones stay listed first in entryUserSlots.
 */
function keepUsersWithEvent(
  segments: readonly SegmentView[],
  order: readonly number[],
  eventId: number,
  fromMs: number,
  toMsExclusive: number,
  userLo: number,
  userHi: number,
  entryUserCount: number,
): number {
  const indexes = userEntryIndexes.values;
  const slotLimit = indexes.length;
  for (const segmentIndex of order) {
    const segment = segments[segmentIndex];
    if (segment.dayStartMs >= toMsExclusive || segment.dayStartMs + dayMs <= fromMs) continue;
    const offsetLow = Math.max(0, fromMs - segment.dayStartMs);
    const offsetHigh = Math.min(dayMs, toMsExclusive - segment.dayStartMs);
    const { userIds, timeOffsetMs } = segment;
    if (segment.eventRowStart !== undefined) {
      sealedShardRows(segment.eventRowStart, userIds, eventId, userLo, userHi, shardRows);
      for (let row = shardRows.start; row < shardRows.end; row++) {
        const slot = userIds[row] - userLo;
        if (slot >= slotLimit || indexes[slot] !== 1) continue;
        const offset = timeOffsetMs[row];
        if (offset >= offsetLow && offset < offsetHigh) indexes[slot] = 2;
      }
    } else {
      const eventIds = segment.eventIds!;
      for (let row = 0; row < segment.rowCount; row++) {
        if (eventIds[row] !== eventId) continue;
        const user = userIds[row];
        if (user < userLo || user >= userHi) continue;
        const slot = user - userLo;
        if (slot >= slotLimit || indexes[slot] !== 1) continue;
        const offset = timeOffsetMs[row];
        if (offset >= offsetLow && offset < offsetHigh) indexes[slot] = 2;
      }
    }
  }
  const slots = entryUserSlots.values;
  let keptCount = 0;
  for (let index = 0; index < entryUserCount; index++) {
    const slot = slots[index];
    if (indexes[slot] === 2) {
      indexes[slot] = 1;
      slots[keptCount++] = slot;
    } else {
      indexes[slot] = 0;
    }
  }
  return keptCount;
}

/** Rows [rowStart, rowEnd) are the entry event's rows in the shard, grouped by user. */
function markSealedEntries(
  segment: SegmentView,
  rowStart: number,
  rowEnd: number,
  offsetLow: number,
  offsetHigh: number,
  userLo: number,
  entryUserCount: number,
): number {
  const { userIds, timeOffsetMs } = segment;
  let indexes = userEntryIndexes.values;
  let slots = entryUserSlots.values;
  let markedUser = -1;
  for (let row = rowStart; row < rowEnd; row++) {
    const user = userIds[row];
    if (user === markedUser) continue;
    const offset = timeOffsetMs[row];
    if (offset < offsetLow || offset >= offsetHigh) continue;
    markedUser = user;
    const slot = user - userLo;
    if (slot >= indexes.length) indexes = userEntryIndexes.grow(slot + 1);
    if (indexes[slot] !== 0) continue;
    if (entryUserCount >= slots.length) slots = entryUserSlots.grow(entryUserCount + 1);
    slots[entryUserCount++] = slot;
    indexes[slot] = 1; // numbered later, in user order
  }
  return entryUserCount;
}

function markActiveEntries(
  segment: SegmentView,
  entryEventId: number,
  offsetLow: number,
  offsetHigh: number,
  userLo: number,
  userHi: number,
  entryUserCount: number,
): number {
  const { userIds, timeOffsetMs, rowCount } = segment;
  const eventIds = segment.eventIds!;
  let indexes = userEntryIndexes.values;
  let slots = entryUserSlots.values;
  for (let row = 0; row < rowCount; row++) {
    const user = userIds[row];
    if (eventIds[row] !== entryEventId || user < userLo || user >= userHi) continue;
    const offset = timeOffsetMs[row];
    if (offset < offsetLow || offset >= offsetHigh) continue;
    const slot = user - userLo;
    if (slot >= indexes.length) indexes = userEntryIndexes.grow(slot + 1);
    if (indexes[slot] !== 0) continue;
    if (entryUserCount >= slots.length) slots = entryUserSlots.grow(entryUserCount + 1);
    slots[entryUserCount++] = slot;
    indexes[slot] = 1;
  }
  return entryUserCount;
}

/**
 * Dense indexes in user-id order, not first-seen order: sealed rows are sorted by
 * user, so the gather passes then write each (segment, name) run of rows to
 * ascending cells, a few sequential streams instead of scattered stores
 * (measured on the kernel benchmark: first-seen numbering made the whole
 * funnel ~40 % slower).
 */
function numberEntryUsersInUserOrder(entryUserCount: number): void {
  const indexes = userEntryIndexes.values;
  const slots = entryUserSlots.values.subarray(0, entryUserCount);
  slots.sort();
  for (let index = 0; index < entryUserCount; index++) indexes[slots[index]] = index + 1;
}

function clearEntryUsers(entryUserCount: number): void {
  const indexes = userEntryIndexes.values;
  const slots = entryUserSlots.values;
  for (let index = 0; index < entryUserCount; index++) indexes[slots[index]] = 0;
}

// ---------------------------------------------------------------------------
// Pass 2: gather times per (entry user, slot)

interface GatherChunk {
  segments: readonly SegmentView[];
  order: readonly number[];
  slotEventIds: readonly number[];
  /** slot + 1 per event id, 0 when not a step. */
  eventSlots: Int32Array;
  fromMs: number;
  toMsExclusive: number;
  userLo: number;
  userHi: number;
  /** Entry users [indexStart, indexEnd) are gathered. */
  indexStart: number;
  indexEnd: number;
}

/**
 * Fills offsets[0..cellCount] (cell c = slot × chunk users + (entry index - indexStart)
 * holds times[offsets[c] .. offsets[c + 1])) and returns the times, each cell sorted.
 */
function gatherChunk(chunk: GatherChunk, offsets: Int32Array, cellCount: number): Float64Array {
  offsets.fill(0, 0, cellCount + 1);
  visitChunkRows(chunk, offsets, undefined, undefined);
  for (let cell = 0; cell < cellCount; cell++) offsets[cell + 1] += offsets[cell];
  const times = cellTimes.get(offsets[cellCount]);
  const cursors = cellCursors.get(cellCount);
  cursors.set(offsets.subarray(0, cellCount));
  visitChunkRows(chunk, undefined, cursors, times);
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

/**
 * Visits the rows of the chunk's users and step names inside [fromMs, toMsExclusive):
 * with `counts`, adds one per row to counts[cell + 1]; with `cursors` and `times`, writes each row's time.
 */
function visitChunkRows(
  chunk: GatherChunk,
  counts: Int32Array | undefined,
  cursors: Int32Array | undefined,
  times: Float64Array | undefined,
): void {
  const slotCount = chunk.slotEventIds.length;
  for (const segmentIndex of chunk.order) {
    const segment = chunk.segments[segmentIndex];
    const offsetLow = Math.max(0, chunk.fromMs - segment.dayStartMs);
    const offsetHigh = Math.min(dayMs, chunk.toMsExclusive - segment.dayStartMs);
    if (segment.eventRowStart !== undefined) {
      for (let slot = 0; slot < slotCount; slot++) {
        sealedShardRows(segment.eventRowStart, segment.userIds, chunk.slotEventIds[slot], chunk.userLo, chunk.userHi, shardRows);
        if (shardRows.start === shardRows.end) continue;
        if (counts !== undefined) {
          countSealedRows(segment, shardRows.start, shardRows.end, offsetLow, offsetHigh, chunk, slot, counts);
        } else {
          fillSealedRows(segment, shardRows.start, shardRows.end, offsetLow, offsetHigh, chunk, slot, cursors!, times!);
        }
      }
    } else if (counts !== undefined) {
      countActiveRows(segment, offsetLow, offsetHigh, chunk, counts);
    } else {
      fillActiveRows(segment, offsetLow, offsetHigh, chunk, cursors!, times!);
    }
  }
}

function countSealedRows(
  segment: SegmentView,
  rowStart: number,
  rowEnd: number,
  offsetLow: number,
  offsetHigh: number,
  chunk: GatherChunk,
  slot: number,
  counts: Int32Array,
): void {
  const { userIds, timeOffsetMs } = segment;
  const indexes = userEntryIndexes.values;
  const { userLo, indexStart } = chunk;
  const chunkUserCount = chunk.indexEnd - indexStart;
  // Rows come grouped by user: look the user up once per run, and count the run in a
  // local so that rows do not wait on each other's store. cell < 0: not an entry user of this chunk.
  let previousUser = -1;
  let cell = -1;
  let runCount = 0;
  for (let row = rowStart; row < rowEnd; row++) {
    const user = userIds[row];
    if (user !== previousUser) {
      if (cell >= 0) counts[cell] += runCount;
      runCount = 0;
      previousUser = user;
      const userSlot = user - userLo;
      // Non-entry users (index 0 → -1) and users of other chunks fall outside [0, chunkUserCount).
      const chunkIndex = userSlot < indexes.length ? indexes[userSlot] - 1 - indexStart : -1;
      cell = chunkIndex < 0 || chunkIndex >= chunkUserCount ? -1 : slot * chunkUserCount + chunkIndex + 1;
    }
    if (cell < 0) continue;
    const offset = timeOffsetMs[row];
    if (offset >= offsetLow && offset < offsetHigh) runCount++;
  }
  if (cell >= 0) counts[cell] += runCount;
}

function fillSealedRows(
  segment: SegmentView,
  rowStart: number,
  rowEnd: number,
  offsetLow: number,
  offsetHigh: number,
  chunk: GatherChunk,
  slot: number,
  cursors: Int32Array,
  times: Float64Array,
): void {
  const { userIds, timeOffsetMs, dayStartMs } = segment;
  const indexes = userEntryIndexes.values;
  const { userLo, indexStart } = chunk;
  const chunkUserCount = chunk.indexEnd - indexStart;
  let previousUser = -1;
  let cell = -1;
  let cursor = 0;
  for (let row = rowStart; row < rowEnd; row++) {
    const user = userIds[row];
    if (user !== previousUser) {
      if (cell >= 0) cursors[cell] = cursor;
      previousUser = user;
      const userSlot = user - userLo;
      const chunkIndex = userSlot < indexes.length ? indexes[userSlot] - 1 - indexStart : -1;
      cell = chunkIndex < 0 || chunkIndex >= chunkUserCount ? -1 : slot * chunkUserCount + chunkIndex;
      if (cell >= 0) cursor = cursors[cell];
    }
    if (cell < 0) continue;
    const offset = timeOffsetMs[row];
    if (offset >= offsetLow && offset < offsetHigh) times[cursor++] = dayStartMs + offset;
  }
  if (cell >= 0) cursors[cell] = cursor;
}

function countActiveRows(segment: SegmentView, offsetLow: number, offsetHigh: number, chunk: GatherChunk, counts: Int32Array): void {
  const { userIds, timeOffsetMs, rowCount } = segment;
  const eventIds = segment.eventIds!;
  const indexes = userEntryIndexes.values;
  const { eventSlots, userLo, userHi, indexStart } = chunk;
  const chunkUserCount = chunk.indexEnd - indexStart;
  for (let row = 0; row < rowCount; row++) {
    const eventId = eventIds[row];
    const slotPlusOne = eventId < eventSlots.length ? eventSlots[eventId] : 0;
    if (slotPlusOne === 0) continue;
    const user = userIds[row];
    if (user < userLo || user >= userHi) continue;
    const userSlot = user - userLo;
    const chunkIndex = userSlot < indexes.length ? indexes[userSlot] - 1 - indexStart : -1;
    if (chunkIndex < 0 || chunkIndex >= chunkUserCount) continue;
    const offset = timeOffsetMs[row];
    if (offset < offsetLow || offset >= offsetHigh) continue;
    counts[(slotPlusOne - 1) * chunkUserCount + chunkIndex + 1]++;
  }
}

function fillActiveRows(
  segment: SegmentView,
  offsetLow: number,
  offsetHigh: number,
  chunk: GatherChunk,
  cursors: Int32Array,
  times: Float64Array,
): void {
  const { userIds, timeOffsetMs, rowCount, dayStartMs } = segment;
  const eventIds = segment.eventIds!;
  const indexes = userEntryIndexes.values;
  const { eventSlots, userLo, userHi, indexStart } = chunk;
  const chunkUserCount = chunk.indexEnd - indexStart;
  for (let row = 0; row < rowCount; row++) {
    const eventId = eventIds[row];
    const slotPlusOne = eventId < eventSlots.length ? eventSlots[eventId] : 0;
    if (slotPlusOne === 0) continue;
    const user = userIds[row];
    if (user < userLo || user >= userHi) continue;
    const userSlot = user - userLo;
    const chunkIndex = userSlot < indexes.length ? indexes[userSlot] - 1 - indexStart : -1;
    if (chunkIndex < 0 || chunkIndex >= chunkUserCount) continue;
    const offset = timeOffsetMs[row];
    if (offset < offsetLow || offset >= offsetHigh) continue;
    times[cursors[(slotPlusOne - 1) * chunkUserCount + chunkIndex]++] = dayStartMs + offset;
  }
}

// ---------------------------------------------------------------------------
// Pass 3: the greedy walk from every entry

function walkChunk(
  offsets: Int32Array,
  times: Float64Array,
  chunkUserCount: number,
  slotCount: number,
  stepSlots: Int32Array,
  entryToMsExclusive: number,
  windowMs: number,
  lastUsed: Int32Array,
  deepestUsers: Float64Array,
): void {
  const stepCount = stepSlots.length;
  for (let chunkIndex = 0; chunkIndex < chunkUserCount; chunkIndex++) {
    // Slot s of this user is cell s × chunkUserCount + chunkIndex.
    // Slot 0 is the entry name (the first distinct name is steps[0]'s).
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
