/**
 * What a worker has learned about an active segment's rows, kept between
 * query tasks and extended by the rows that arrived since: per event, its rows
 * in ascending order and the set of its users; per filtered property key, a
 * dense column of value ids; per (event, key) that a filtered total reads,
 * how many of the event's rows hold each value; per part of the day that a
 * zoned trend or retention reads, the event's users there (and per value of
 * a breakdown key). An active segment is append-only (rows and property
 * entries below a count handed out are never rewritten), so what was read
 * once stays true, and a query reads only the rows of its event instead of
 * every row of every active segment it touches: with events arriving in
 * random day order, every day's active segment holds a share of the recent
 * rows, and a whole-range query scanned all of them per task.
 *
 * A task may carry an older snapshot than one this worker already indexed (it
 * was taken earlier but ran later): row lists are cut at its row count, and a
 * user set or column that already holds later rows is not used for it.
 */
import roaring from "roaring";
import type { ActiveSegmentDescriptor } from "../storage/segment-descriptor.js";
import { lowerBoundUser } from "./kernels/rows.js";
import type { PartUsers, PartValueUsers, PropertyColumn } from "./segment-view.js";
import { parseTextNumbers } from "./filters.js";
import { readSharedTexts } from "../storage/active-properties.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;

/** The parts of an active segment's descriptor the index reads. */
type ActiveRows = Pick<ActiveSegmentDescriptor, "rowCount" | "event" | "user">;
type ActiveProperty = ActiveSegmentDescriptor["properties"][number];

const dayMs = 86_400_000;
/** The users of a part that holds no row of the event; never changed by a reader. */
const noUsers = new RoaringBitmap32();

/** A set's bytes, roughly: two per member in array containers, plus its object. */
const bitmapBytesPerMember = 2;
const bitmapBytesFixed = 64;
/** A kept text's bytes besides its characters, roughly: its string header and the array's slot. */
const textBytesFixed = 24;

/** Users of newly covered rows, gathered for one addMany; one per thread. */
let userScratch = new Uint32Array(1024);

/** Rows of an event's list entries [from, rows.length) whose time offset lies in [lowMs, highMs), in a scratch array of this thread. */
let partRowScratch = new Uint32Array(1024);

function rowsInPart(segment: Pick<ActiveSegmentDescriptor, "rowCount" | "time">, rows: Uint32Array, from: number, lowMs: number, highMs: number): Uint32Array {
  if (partRowScratch.length < rows.length - from) partRowScratch = new Uint32Array(Math.max(rows.length - from, partRowScratch.length * 2));
  const timeOffsetMs = new Uint32Array(segment.time, 0, segment.rowCount);
  let count = 0;
  for (let index = from; index < rows.length; index++) {
    const offset = timeOffsetMs[rows[index]];
    if (offset >= lowMs && offset < highMs) partRowScratch[count++] = rows[index];
  }
  return partRowScratch.subarray(0, count);
}

function userMaxOf(userIds: Uint32Array, rows: Uint32Array, userMax: number): number {
  for (let index = 0; index < rows.length; index++) if (userIds[rows[index]] > userMax) userMax = userIds[rows[index]];
  return userMax;
}

function scratchUsers(length: number): Uint32Array {
  if (userScratch.length < length) userScratch = new Uint32Array(Math.max(length, userScratch.length * 2));
  return userScratch;
}

interface EventUsers {
  bitmap: Bitmap;
  /** Entries of the event's row list whose users are in the bitmap. */
  coveredEntries: number;
}

/** Rows of one event counted per value id of one key: the first coveredEntries of the event's row list. */
interface ValueCounts {
  counts: Uint32Array;
  coveredEntries: number;
  /** Highest user id among the counted rows; -1 before any. */
  userMax: number;
}

/** The users and rows of one event in one part of the day [lowMs, highMs): the first coveredEntries of its row list. */
interface PartEntry extends PartUsers {
  coveredEntries: number;
}

/** The same per value id of one key. */
interface PartValuesEntry {
  users: Array<Bitmap | undefined>;
  rows: Uint32Array;
  userMax: number;
  coveredEntries: number;
}

interface IndexedColumn {
  valueIds: Uint32Array;
  /** Property entries scattered into valueIds. */
  coveredEntries: number;
}

export class ActiveIndex {
  /** Rows [0, coveredRows) are in the row lists. */
  private coveredRows = 0;
  /** By event id: its rows, ascending; lengths[e] of them are set. */
  private readonly lists: Uint32Array[] = [];
  private readonly lengths: number[] = [];
  private readonly users = new Map<number, EventUsers>();
  private readonly columns = new Map<number, IndexedColumn>();
  /** By `${eventId}/${keyId}`. */
  private readonly valueCounts = new Map<string, ValueCounts>();
  /** By `${eventId}/${lowMs}/${highMs}`. */
  private readonly parts = new Map<string, PartEntry>();
  /** By `${eventId}/${keyId}/${lowMs}/${highMs}`. */
  private readonly partValues = new Map<string, PartValuesEntry>();
  /** By key id: its texts decoded so far. A key's texts only grow, and an id keeps its text. */
  private readonly texts = new Map<number, string[]>();
  /** By key id: each text's number, texts [1, parsed) read. */
  private readonly numbers = new Map<number, { values: Float64Array; parsed: number }>();
  /** Bytes held, for the cache's budget (bitmaps estimated). */
  bytes = 0;

  /** The workspace and day of its segment (see dayOfKey). */
  readonly day: string;

  constructor(readonly key: string) {
    this.day = dayOfKey(key);
  }

  /** Rows of eventId among the segment's first rowCount, ascending (a view into the index: do not keep it past the task). */
  eventRows(segment: ActiveRows, eventId: number): Uint32Array {
    this.cover(segment);
    const list = this.lists[eventId];
    if (list === undefined) return new Uint32Array(0);
    const length = this.lengths[eventId];
    const visible = this.coveredRows === segment.rowCount ? length : lowerBoundUser(list, 0, length, segment.rowCount);
    return list.subarray(0, visible);
  }

  /** Users having a row of eventId among the segment's first rowCount; undefined when none does, or when the set already holds later rows. */
  userBitmap(segment: ActiveRows, eventId: number): Bitmap | undefined {
    const rows = this.eventRows(segment, eventId);
    if (rows.length === 0) return undefined;
    let entry = this.users.get(eventId);
    if (entry === undefined) {
      entry = { bitmap: new RoaringBitmap32(), coveredEntries: 0 };
      this.users.set(eventId, entry);
      this.bytes += bitmapBytesFixed;
    }
    if (entry.coveredEntries > rows.length) return undefined;
    if (entry.coveredEntries < rows.length) {
      const added = rows.length - entry.coveredEntries;
      const users = scratchUsers(added);
      const userIds = new Uint32Array(segment.user, 0, segment.rowCount);
      for (let index = 0; index < added; index++) users[index] = userIds[rows[entry.coveredEntries + index]];
      this.addUsers(entry.bitmap, users.subarray(0, added));
      entry.coveredEntries = rows.length;
    }
    return entry.bitmap;
  }

  /**
   * The dense value-id column of a property, rows [0, rowCount), extended by
   * the entries applied since the last task. A snapshot holding fewer entries
   * than the column already has gets a column of its own: its dictionary
   * (`texts`) would not name the newer ids.
   */
  column(segment: ActiveRows, property: ActiveProperty): PropertyColumn {
    const rowCount = segment.rowCount;
    let indexed = this.columns.get(property.keyId);
    const texts = this.keyTexts(property);
    const numbers = () => this.textNumbers(property.keyId, texts);
    if (indexed !== undefined && indexed.coveredEntries > property.entryCount) return { valueIds: denseColumn(property, rowCount, 0, new Uint32Array(rowCount)), texts, numbers };
    if (indexed === undefined) {
      indexed = { valueIds: new Uint32Array(grownLength(0, rowCount)), coveredEntries: 0 };
      this.columns.set(property.keyId, indexed);
      this.bytes += indexed.valueIds.byteLength;
    } else if (indexed.valueIds.length < rowCount) {
      const valueIds = new Uint32Array(grownLength(indexed.valueIds.length, rowCount));
      valueIds.set(indexed.valueIds);
      this.bytes += valueIds.byteLength - indexed.valueIds.byteLength;
      indexed.valueIds = valueIds;
    }
    denseColumn(property, rowCount, indexed.coveredEntries, indexed.valueIds);
    indexed.coveredEntries = property.entryCount;
    return { valueIds: indexed.valueIds.subarray(0, rowCount), texts, numbers };
  }

  /** The key's first texts.count texts, decoding only those that arrived since the last task (a copy when the snapshot is older). */
  private keyTexts(property: ActiveProperty): readonly string[] {
    let kept = this.texts.get(property.keyId);
    if (kept === undefined) this.texts.set(property.keyId, (kept = [""]));
    const count = property.texts.count;
    if (kept.length < count) {
      const from = kept.length;
      readSharedTexts(property.texts, kept);
      for (let id = from; id < count; id++) this.bytes += textBytesFixed + 2 * kept[id].length;
    }
    return kept.length === count ? kept : kept.slice(0, count);
  }

  /**
   * Each text's number of a key (NaN when it does not count), extended by the
   * texts that arrived since the last task: a task's texts are a new copy
   * each time, and parsing every one of a busy day's prices took
   * milliseconds per query.
   */
  private textNumbers(keyId: number, texts: readonly string[]): Float64Array {
    let entry = this.numbers.get(keyId);
    if (entry === undefined) {
      entry = { values: new Float64Array(grownLength(0, texts.length)).fill(NaN), parsed: 1 };
      this.numbers.set(keyId, entry);
      this.bytes += entry.values.byteLength;
    }
    if (entry.parsed < texts.length) {
      if (entry.values.length < texts.length) {
        const values = new Float64Array(grownLength(entry.values.length, texts.length)).fill(NaN);
        values.set(entry.values.subarray(0, entry.parsed));
        this.bytes += values.byteLength - entry.values.byteLength;
        entry.values = values;
      }
      parseTextNumbers(texts, entry.parsed, entry.values);
      entry.parsed = texts.length;
    }
    return entry.values;
  }

  /**
   * How many rows of eventId among the segment's first rowCount hold each
   * value id of the key (`valueIds`: the key's column for this snapshot),
   * extended by the rows that arrived since the last task; undefined when the
   * counts already hold later rows (an older snapshot) or a user at or above
   * userHi.
   */
  eventValueCounts(segment: ActiveRows, eventId: number, keyId: number, valueIds: ArrayLike<number>, userHi: number): Uint32Array | undefined {
    const rows = this.eventRows(segment, eventId);
    const key = `${eventId}/${keyId}`;
    let entry = this.valueCounts.get(key);
    if (entry === undefined) {
      entry = { counts: new Uint32Array(64), coveredEntries: 0, userMax: -1 };
      this.valueCounts.set(key, entry);
      this.bytes += entry.counts.byteLength;
    }
    if (entry.coveredEntries > rows.length) return undefined;
    if (entry.coveredEntries < rows.length) {
      const userIds = new Uint32Array(segment.user, 0, segment.rowCount);
      let { counts, userMax } = entry;
      for (let index = entry.coveredEntries; index < rows.length; index++) {
        const row = rows[index];
        const valueId = valueIds[row];
        if (valueId >= counts.length) {
          const grown = new Uint32Array(grownLength(counts.length, valueId + 1));
          grown.set(counts);
          this.bytes += grown.byteLength - counts.byteLength;
          counts = grown;
        }
        counts[valueId]++;
        if (userIds[row] > userMax) userMax = userIds[row];
      }
      entry.counts = counts;
      entry.userMax = userMax;
      entry.coveredEntries = rows.length;
    }
    return entry.userMax < userHi ? entry.counts : undefined;
  }

  /**
   * The users and rows of eventId whose time offset lies in [lowMs, highMs),
   * among the segment's first rowCount (a zoned trend's part of the day),
   * extended by the rows that arrived since the last task; undefined when the
   * entry already holds later rows (an older snapshot).
   */
  partUsers(segment: ActiveRows & Pick<ActiveSegmentDescriptor, "time">, eventId: number, lowMs: number, highMs: number): PartUsers | undefined {
    const rows = this.eventRows(segment, eventId);
    // The whole day is the event's user set, kept once (a zone's weeks and months hold whole days).
    if (lowMs <= 0 && highMs >= dayMs) {
      if (rows.length === 0) return { users: noUsers, rows: 0, userMax: -1 };
      const users = this.userBitmap(segment, eventId);
      return users === undefined ? undefined : { users, rows: rows.length, userMax: users.maximum() };
    }
    const key = `${eventId}/${lowMs}/${highMs}`;
    let entry = this.parts.get(key);
    if (entry === undefined) {
      entry = { users: new RoaringBitmap32(), rows: 0, userMax: -1, coveredEntries: 0 };
      this.parts.set(key, entry);
      this.bytes += bitmapBytesFixed;
    }
    if (entry.coveredEntries > rows.length) return undefined;
    if (entry.coveredEntries < rows.length) {
      const added = rowsInPart(segment, rows, entry.coveredEntries, lowMs, highMs);
      const users = scratchUsers(added.length);
      const userIds = new Uint32Array(segment.user, 0, segment.rowCount);
      for (let index = 0; index < added.length; index++) users[index] = userIds[added[index]];
      this.addUsers(entry.users, users.subarray(0, added.length));
      entry.rows += added.length;
      entry.userMax = userMaxOf(userIds, added, entry.userMax);
      entry.coveredEntries = rows.length;
    }
    return entry;
  }

  /**
   * As partUsers, per value id of a key (`valueIds`: the key's column for
   * this snapshot; a row's value id never changes once applied). Undefined
   * for an older snapshot.
   */
  partValueUsers(segment: ActiveRows & Pick<ActiveSegmentDescriptor, "time">, eventId: number, keyId: number, valueIds: ArrayLike<number>, lowMs: number, highMs: number): PartValueUsers | undefined {
    const rows = this.eventRows(segment, eventId);
    const key = `${eventId}/${keyId}/${lowMs}/${highMs}`;
    let entry = this.partValues.get(key);
    if (entry === undefined) {
      entry = { users: [], rows: new Uint32Array(0), userMax: -1, coveredEntries: 0 };
      this.partValues.set(key, entry);
      this.bytes += bitmapBytesFixed;
    }
    if (entry.coveredEntries > rows.length) return undefined;
    if (entry.coveredEntries < rows.length) {
      const userIds = new Uint32Array(segment.user, 0, segment.rowCount);
      const inPart = rowsInPart(segment, rows, entry.coveredEntries, lowMs, highMs);
      const added = new Map<number, number[]>();
      for (let index = 0; index < inPart.length; index++) {
        const row = inPart[index];
        let users = added.get(valueIds[row]);
        if (users === undefined) added.set(valueIds[row], (users = []));
        users.push(userIds[row]);
      }
      const userMax = userMaxOf(userIds, inPart, entry.userMax);
      for (const [valueId, users] of added) {
        if (valueId >= entry.rows.length) {
          const grown = new Uint32Array(grownLength(entry.rows.length, valueId + 1));
          grown.set(entry.rows);
          this.bytes += grown.byteLength - entry.rows.byteLength;
          entry.rows = grown;
        }
        entry.rows[valueId] += users.length;
        let bitmap = entry.users[valueId];
        if (bitmap === undefined) {
          bitmap = entry.users[valueId] = new RoaringBitmap32();
          this.bytes += bitmapBytesFixed;
        }
        this.addUsers(bitmap, Uint32Array.from(users));
      }
      entry.userMax = userMax;
      entry.coveredEntries = rows.length;
    }
    return entry;
  }

  private addUsers(bitmap: Bitmap, users: Uint32Array): void {
    const before = bitmap.size;
    bitmap.addMany(users);
    this.bytes += (bitmap.size - before) * bitmapBytesPerMember;
  }

  /** Frees the sets (native memory). */
  dispose(): void {
    for (const { bitmap } of this.users.values()) bitmap.dispose();
    this.users.clear();
    for (const { users } of this.parts.values()) users.dispose();
    this.parts.clear();
    for (const { users } of this.partValues.values()) for (const bitmap of users) bitmap?.dispose();
    this.partValues.clear();
  }

  /** Appends rows [coveredRows, rowCount) to their events' lists. */
  private cover(segment: ActiveRows): void {
    const rowCount = segment.rowCount;
    if (rowCount <= this.coveredRows) return;
    const eventIds = new Uint32Array(segment.event, 0, rowCount);
    const { lists, lengths } = this;
    for (let row = this.coveredRows; row < rowCount; row++) {
      const eventId = eventIds[row];
      let list = lists[eventId];
      const length = lengths[eventId] ?? 0;
      if (list === undefined || length === list.length) {
        const grown = new Uint32Array(grownLength(list?.length ?? 0, length + 1));
        if (list !== undefined) grown.set(list);
        this.bytes += grown.byteLength - (list?.byteLength ?? 0);
        list = lists[eventId] = grown;
      }
      list[length] = row;
      lengths[eventId] = length + 1;
    }
    this.coveredRows = rowCount;
  }
}

function grownLength(current: number, needed: number): number {
  let length = Math.max(current, 64);
  while (length < needed) length *= 2;
  return length;
}

/** Writes a property's entries [fromEntry, entryCount) into valueIds (by row); returns valueIds. */
function denseColumn(property: ActiveProperty, rowCount: number, fromEntry: number, valueIds: Uint32Array): Uint32Array {
  const entryRows = new Uint32Array(property.rows, property.rowsOffset, property.entryCount);
  const entryValues = new Uint32Array(property.valueIds, property.valueIdsOffset, property.entryCount);
  for (let entry = fromEntry; entry < entryRows.length; entry++) {
    const row = entryRows[entry];
    if (row < rowCount) valueIds[row] = entryValues[entry];
  }
  return valueIds;
}

/**
 * The indexes of one worker, least recently used first, bounded by bytes.
 * Trimmed only between tasks: a kernel may hold an index's sets while it runs.
 */
export class ActiveIndexCache {
  private readonly indexes = new Map<string, ActiveIndex>();

  constructor(private bytesMax: number) {}

  setBytesMax(bytes: number): void {
    this.bytesMax = bytes;
  }

  /** The index of the segment under `key`, made empty when there is none; marks it used. */
  get(key: string): ActiveIndex {
    let index = this.indexes.get(key);
    if (index === undefined) index = new ActiveIndex(key);
    else this.indexes.delete(key);
    this.indexes.set(key, index);
    return index;
  }

  get byteLength(): number {
    let bytes = 0;
    for (const index of this.indexes.values()) bytes += index.bytes;
    return bytes;
  }

  get size(): number {
    return this.indexes.size;
  }

  has(key: string): boolean {
    return this.indexes.has(key);
  }

  /**
   * Before a task: drops the indexes of segments that are gone and then the
   * least recently used past the budget, never one the task reads (`keys`).
   * A segment is gone when the task reads its day but not it: a snapshot
   * lists every segment of a day it reads, frozen ones included, so an
   * active segment missing from it was sealed (and if the task's snapshot
   * was simply older, the index is rebuilt at the next use: answers do not
   * depend on it).
   */
  trim(keys: ReadonlySet<string>, days: ReadonlySet<string>): void {
    for (const [key, index] of this.indexes) {
      if (!keys.has(key) && days.has(index.day)) this.drop(key, index);
    }
    let bytes = this.byteLength;
    for (const [key, index] of this.indexes) {
      if (bytes <= this.bytesMax) break;
      if (keys.has(key)) continue;
      bytes -= index.bytes;
      this.drop(key, index);
    }
  }

  private drop(key: string, index: ActiveIndex): void {
    index.dispose();
    this.indexes.delete(key);
  }
}

/** A segment key's workspace and day (`workspace/yyyy-mm-dd/name`). */
export function dayOfKey(key: string): string {
  return key.slice(0, key.lastIndexOf("/"));
}
