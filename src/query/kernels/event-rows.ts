/**
 * The rows a SPEC §7 query reads, gathered once per task into plain typed
 * arrays: for every row of a referenced event (or of any event, for strict
 * funnels) inside [fromMs, toMsExclusive), its user, time, which references it
 * matches (a bit mask: name and filters), its breakdown value (a task-wide id,
 * 0 for "not set") and its math property as a number (NaN when it does not
 * count). The trend, funnel and retention kernels of §7 then run over these
 * arrays alone, so they know nothing of segments, dictionaries or filters.
 *
 * Filters are compiled once per segment into pass tables (filters.ts), so a
 * row costs one table load per filter.
 */
import type { SegmentView, ValueIdColumn } from "../segment-view.js";
import { CompiledFilterCache, compileFilter, filterPassesNotSet, numbersOf, type FilterPlan } from "../filters.js";
import { segmentsByDay } from "./rows.js";
import { ScratchInt32, ScratchUint32 } from "./scratch.js";

export interface ReferencePlan {
  /** undefined: the name was never ingested, the reference matches nothing. */
  eventId: number | undefined;
  /** All must hold: the reference's own filters and the query's top-level ones. */
  filters: readonly FilterPlan[];
}

/** Which property a gather reads beside the references: absent, or a key (undefined when never ingested: every row "not set"). */
export type PropertyRead = { kind: "none" } | { kind: "key"; keyId: number | undefined };

export interface GatherPlan {
  fromMs: number;
  toMsExclusive: number;
  /** Reference i sets bit i of a row's mask; at most 32. */
  references: readonly ReferencePlan[];
  /** Keep rows that match no reference too (mask 0): strict funnels look at every event. */
  allEvents: boolean;
  breakdown: PropertyRead;
  math: PropertyRead;
  /** The workspace's users when the query was planned: a shard's share of them sizes its gather. */
  userCount?: number;
}

export interface EventRows {
  count: number;
  users: Uint32Array;
  timesMs: Float64Array;
  masks: Uint32Array;
  /** Breakdown value id per row: 0 not set, else valueTexts[id]. */
  values: Int32Array;
  valueTexts: string[];
  /** Math property per row; NaN when it is not a finite number text. */
  numbers: Float64Array;
}

/** Per worker thread, as the trend kernel's. */
const compiledFiltersBytesMax = 16 * 1024 * 1024;
const sealedFilters = new CompiledFilterCache(compiledFiltersBytesMax);

/** A reference as one segment sees it: undefined tables when no row can match. */
export interface SegmentReference {
  bit: number;
  passes: Uint8Array[];
  valueIds: ValueIdColumn[];
}

class RowBuilder {
  count = 0;
  users: Uint32Array;
  timesMs: Float64Array;
  masks: Uint32Array;
  values: Int32Array;
  numbers: Float64Array;

  constructor(capacity: number) {
    this.users = new Uint32Array(capacity);
    this.timesMs = new Float64Array(capacity);
    this.masks = new Uint32Array(capacity);
    this.values = new Int32Array(capacity);
    this.numbers = new Float64Array(capacity);
  }

  push(user: number, timeMs: number, mask: number, value: number, number: number): void {
    if (this.count === this.users.length) this.grow();
    const index = this.count++;
    this.users[index] = user;
    this.timesMs[index] = timeMs;
    this.masks[index] = mask;
    this.values[index] = value;
    this.numbers[index] = number;
  }

  private grow(): void {
    const length = this.users.length * 2;
    const users = new Uint32Array(length);
    users.set(this.users);
    this.users = users;
    const timesMs = new Float64Array(length);
    timesMs.set(this.timesMs);
    this.timesMs = timesMs;
    const masks = new Uint32Array(length);
    masks.set(this.masks);
    this.masks = masks;
    const values = new Int32Array(length);
    values.set(this.values);
    this.values = values;
    const numbers = new Float64Array(length);
    numbers.set(this.numbers);
    this.numbers = numbers;
  }
}

export function segmentReferences(segment: SegmentView, references: readonly ReferencePlan[]): Map<number, SegmentReference[]> {
  const byEvent = new Map<number, SegmentReference[]>();
  for (let bit = 0; bit < references.length; bit++) {
    const reference = references[bit];
    if (reference.eventId === undefined) continue;
    const passes: Uint8Array[] = [];
    const valueIds: ValueIdColumn[] = [];
    if (segmentFilterPasses(segment, reference.filters, sealedFilters, passes, valueIds) === undefined) continue;
    let list = byEvent.get(reference.eventId);
    if (list === undefined) byEvent.set(reference.eventId, (list = []));
    list.push({ bit, passes, valueIds });
  }
  return byEvent;
}

/**
 * Compiles `filters` against one segment's dictionaries and writes the ones
 * that narrow its rows (neither every row nor no row passes) to passes[i] and
 * valueIds[i]; returns how many, or undefined when no row of the segment can
 * pass. Sealed segments' tables come from `cache`, active ones' are compiled
 * afresh (their dictionaries grow).
 */
export function segmentFilterPasses(
  segment: SegmentView,
  filters: readonly FilterPlan[],
  cache: CompiledFilterCache,
  passes: Uint8Array[],
  valueIds: ValueIdColumn[],
): number | undefined {
  let count = 0;
  for (const filter of filters) {
    const column = filter.keyId === undefined ? undefined : segment.property(filter.keyId);
    if (column === undefined) {
      // No row of this segment sets the property: every row answers as "not set".
      if (filterPassesNotSet(filter.op)) continue;
      return undefined;
    }
    const compiled =
      segment.eventRowStart !== undefined ? cache.compile(column.texts, filter) : compileFilter(column.texts, filter.op, filter.value);
    if (compiled.passingCount === compiled.passes.length) continue;
    if (compiled.passingCount === 0) return undefined;
    passes[count] = compiled.passes;
    valueIds[count] = column.valueIds;
    count++;
  }
  return count;
}

export function maskOf(references: readonly SegmentReference[] | undefined, row: number): number {
  if (references === undefined) return 0;
  let mask = 0;
  for (const reference of references) {
    let holds = 1;
    for (let index = 0; index < reference.passes.length && holds === 1; index++) holds = reference.passes[index][reference.valueIds[index][row]];
    if (holds === 1) mask |= 1 << reference.bit;
  }
  return mask >>> 0;
}

/** A property column's per-row reader: value ids and, per segment text id, the task-wide value id and number. */
export interface PropertyReader {
  valueIds: ValueIdColumn | undefined;
  globalIds: Int32Array;
  numbers: Float64Array;
}

/** A task-wide value id per breakdown text: its index in valueTexts, appended when new (valueTexts[0] stands for "not set"). */
export function valueInterner(valueTexts: string[]): (text: string) => number {
  const idOfText = new Map<string, number>();
  for (let id = 1; id < valueTexts.length; id++) idOfText.set(valueTexts[id], id);
  return (text) => {
    let id = idOfText.get(text);
    if (id === undefined) {
      id = valueTexts.length;
      valueTexts.push(text);
      idOfText.set(text, id);
    }
    return id;
  };
}

export function gatherEventRows(segments: readonly SegmentView[], plan: GatherPlan, userLo: number, userHi: number): EventRows {
  if (plan.references.length > 32) throw new Error(`${plan.references.length} references, at most 32`);
  const valueTexts: string[] = [""];
  const globalId = valueInterner(valueTexts);
  const order = segmentsByDay(segments, plan.fromMs, plan.toMsExclusive);
  const builder = new RowBuilder(initialCapacity(segments, order, plan, userLo, userHi));
  for (const segmentIndex of order) {
    const segment = segments[segmentIndex];
    const byEvent = segmentReferences(segment, plan.references);
    if (byEvent.size === 0 && !plan.allEvents) continue;
    const breakdown = propertyReader(segment, plan.breakdown, globalId);
    const math = propertyReader(segment, plan.math, () => 0);
    const offsetLow = plan.fromMs - segment.dayStartMs;
    const offsetHigh = plan.toMsExclusive - segment.dayStartMs;
    const { userIds, timeOffsetMs, dayStartMs } = segment;
    const visit = (row: number, references: SegmentReference[] | undefined) => {
      const user = userIds[row];
      if (user < userLo || user >= userHi) return;
      const offset = timeOffsetMs[row];
      if (offset < offsetLow || offset >= offsetHigh) return;
      const mask = maskOf(references, row);
      if (mask === 0 && !plan.allEvents) return;
      const value = breakdown.valueIds === undefined ? 0 : breakdown.globalIds[breakdown.valueIds[row]];
      const number = math.valueIds === undefined ? NaN : math.numbers[math.valueIds[row]];
      builder.push(user, dayStartMs + offset, mask, value, number);
    };
    if (segment.eventRowStart !== undefined) {
      const starts = segment.eventRowStart;
      if (plan.allEvents) {
        for (let eventId = 0; eventId + 1 < starts.length; eventId++) {
          const references = byEvent.get(eventId);
          for (let row = starts[eventId]; row < starts[eventId + 1]; row++) visit(row, references);
        }
      } else {
        for (const [eventId, references] of byEvent) {
          if (eventId + 1 >= starts.length) continue;
          for (let row = starts[eventId]; row < starts[eventId + 1]; row++) visit(row, references);
        }
      }
    } else {
      const eventIds = segment.eventIds!;
      for (let row = 0; row < segment.rowCount; row++) visit(row, byEvent.get(eventIds[row]));
    }
  }
  return {
    count: builder.count,
    users: builder.users,
    timesMs: builder.timesMs,
    masks: builder.masks,
    values: builder.values,
    valueTexts,
    numbers: builder.numbers,
  };
}

/**
 * Rows the gather will likely keep: the candidate rows (the referenced
 * events' runs of sealed segments, every row of active ones, or every row
 * for strict funnels) times the shard's share of user ids, plus a margin.
 * Sized once, the builder rarely grows (each growth copies five arrays).
 */
function initialCapacity(segments: readonly SegmentView[], order: readonly number[], plan: GatherPlan, userLo: number, userHi: number): number {
  let candidates = 0;
  for (const segmentIndex of order) {
    const segment = segments[segmentIndex];
    const starts = segment.eventRowStart;
    if (starts === undefined || plan.allEvents) {
      candidates += segment.rowCount;
      continue;
    }
    for (const reference of plan.references) {
      const eventId = reference.eventId;
      if (eventId !== undefined && eventId + 1 < starts.length) candidates += starts[eventId + 1] - starts[eventId];
    }
  }
  const share = plan.userCount === undefined || plan.userCount === 0 ? 1 : Math.min(1, (userHi - userLo) / plan.userCount);
  return Math.min(candidates, Math.ceil(candidates * share * 1.1)) + 1024;
}

const emptyReader: PropertyReader = { valueIds: undefined, globalIds: new Int32Array(1), numbers: new Float64Array([NaN]) };

export function propertyReader(segment: SegmentView, read: PropertyRead, globalId: (text: string) => number): PropertyReader {
  if (read.kind === "none" || read.keyId === undefined) return emptyReader;
  const column = segment.property(read.keyId);
  if (column === undefined) return emptyReader;
  const { texts } = column;
  const globalIds = new Int32Array(Math.max(1, texts.length));
  for (let id = 1; id < texts.length; id++) globalIds[id] = globalId(texts[id]);
  return { valueIds: column.valueIds, globalIds, numbers: numbersOf(column) };
}

/** Row indexes grouped by user, ascending, each user's rows in row order (a stable counting sort). */
export function rowsByUser(rows: EventRows): Uint32Array {
  const { users, count } = rows;
  const indexes = new Uint32Array(count);
  if (count === 0) return indexes;
  let userLow = users[0];
  let userHigh = users[0];
  for (let row = 1; row < count; row++) {
    if (users[row] < userLow) userLow = users[row];
    if (users[row] > userHigh) userHigh = users[row];
  }
  const cursors = new Int32Array(userHigh - userLow + 1);
  for (let row = 0; row < count; row++) cursors[users[row] - userLow]++;
  let start = 0;
  for (let slot = 0; slot < cursors.length; slot++) {
    const rowsOfUser = cursors[slot];
    cursors[slot] = start;
    start += rowsOfUser;
  }
  for (let row = 0; row < count; row++) indexes[cursors[users[row] - userLow]++] = row;
  return indexes;
}

/**
 * Row indexes sorted by (user, time, row): each user's events in time order.
 * Rows are gathered day by day, so a user's rows are out of order only within
 * a day: insertion sort moves each row past the few rows of its own day that
 * are later (a comparator call per pair would cost more). A run that needs
 * more moves than insertionMovesPerRowMax per row (many rows on one day, in
 * arrival order) is merge-sorted instead (mergeAscendingRuns).
 */
export function rowsByUserAndTime(rows: EventRows): Uint32Array {
  const { users, timesMs, count } = rows;
  const indexes = rowsByUser(rows);
  let start = 0;
  while (start < count) {
    const user = users[indexes[start]];
    let end = start + 1;
    while (end < count && users[indexes[end]] === user) end++;
    let movesLeft = insertionMovesPerRowMax * (end - start);
    for (let index = start + 1; index < end && movesLeft >= 0; index++) {
      const row = indexes[index];
      const timeMs = timesMs[row];
      let place = index - 1;
      // Strictly greater: ties keep row order.
      while (place >= start && timesMs[indexes[place]] > timeMs) {
        indexes[place + 1] = indexes[place];
        place--;
      }
      indexes[place + 1] = row;
      movesLeft -= index - 1 - place;
    }
    if (movesLeft < 0) mergeAscendingRuns(indexes, start, end, timesMs);
    start = end;
  }
  return indexes;
}

/** Insertion moves per row of a user's run before its sort falls back to merging. */
const insertionMovesPerRowMax = 8;

const mergeScratch = new ScratchUint32();
const runStartScratch = new ScratchInt32();

/**
 * Sorts indexes[start, end) by timesMs, stably: a natural merge sort, whose
 * ascending runs are merged in pairs until one is left, O(n log r) for r runs
 * and no comparator call. A busy user's rows are a few runs a day (one per
 * event gathered), where the built-in sort with a comparator cost ten times
 * the insertion sort's moves.
 */
function mergeAscendingRuns(indexes: Uint32Array, start: number, end: number, timesMs: Float64Array): void {
  const count = end - start;
  let from = indexes.subarray(start, end);
  let to = mergeScratch.get(count).subarray(0, count);
  // Run boundaries, then the boundaries of the merged runs written over them.
  const bounds = runStartScratch.get(count + 1);
  let runs = 0;
  bounds[runs++] = 0;
  for (let index = 1; index < count; index++) if (timesMs[from[index]] < timesMs[from[index - 1]]) bounds[runs++] = index;
  bounds[runs] = count;
  while (runs > 1) {
    let merged = 0;
    for (let run = 0; run < runs; run += 2) {
      const low = bounds[run];
      const middle = bounds[Math.min(run + 1, runs)];
      const high = bounds[Math.min(run + 2, runs)];
      let left = low;
      let right = middle;
      let out = low;
      // Ties to the left run: rows keep their order.
      while (left < middle && right < high) to[out++] = timesMs[from[right]] < timesMs[from[left]] ? from[right++] : from[left++];
      while (left < middle) to[out++] = from[left++];
      while (right < high) to[out++] = from[right++];
      bounds[merged++] = low;
    }
    bounds[merged] = count;
    runs = merged;
    const swap = from;
    from = to;
    to = swap;
  }
  if (from.buffer !== indexes.buffer || from.byteOffset !== indexes.byteOffset + start * Uint32Array.BYTES_PER_ELEMENT) indexes.set(from, start);
}

/** Value ordering of SPEC §7.3 for ties: by text in UTF-16 code units, with "not set" (id 0) first or last. */
export function compareValues(texts: readonly string[], left: number, right: number, notSetFirst: boolean): number {
  if (left === right) return 0;
  if (left === 0) return notSetFirst ? -1 : 1;
  if (right === 0) return notSetFirst ? 1 : -1;
  return texts[left] < texts[right] ? -1 : texts[left] > texts[right] ? 1 : 0;
}
