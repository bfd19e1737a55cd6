/**
 * Per worker thread, for one event and one property of a workspace: the
 * users seen with each value of the property on rows of that event, and the
 * users seen with two values or more, over every sealed segment read so far.
 *
 * A breakdown by a property that a user keeps across events (a country, a
 * browser, a plan) then needs no row per user: a user of the cohort who is
 * seen with one value only had that value on its first event (SPEC §7.3),
 * whatever the range, the filters or the zone, as long as the segments read
 * include every one holding the query's rows. Reading more (days outside the
 * range, segments since merged or rewritten) only moves users into `multi`,
 * whose values are then read from rows: the sets never answer wrong, only
 * less. That is why they are kept across queries and grown, never cut.
 */
import roaring from "roaring";
import { valueInterner, type PropertyRead } from "./event-rows.js";
import type { SegmentView } from "../segment-view.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;

/** A property whose values on the event's rows are more than this is not kept here (a set per value would outgrow its rows). */
const ownerValuesMax = 256;
/**
 * Members of every value's set this thread keeps, at most: two bytes each in
 * roaring's arrays, and as many again in the sets less `multi` (16 MB). Least
 * recently used entries are dropped first.
 */
const ownerMembersMax = 4 * 1024 * 1024;

export interface ValueOwners {
  /** Value ids: 0 not set, else texts[id]. Only grows. */
  readonly texts: readonly string[];
  /** Per value id, the users seen with that value only; undefined where none. */
  readonly single: ReadonlyArray<Bitmap | undefined>;
  /** The users seen with two values or more. */
  readonly multi: Bitmap;
}

interface Entry extends ValueOwners {
  texts: string[];
  intern: (text: string) => number;
  /** Per value id, every user seen with it. */
  users: Array<Bitmap | undefined>;
  single: Array<Bitmap | undefined>;
  multi: Bitmap;
  /** Keys of the segments read. */
  segments: Set<string>;
  /** The most segments one query asked for since the sets were started: more than twice that read means mostly stale keys. */
  largestAsk: number;
  /** Members of every value's set. */
  members: number;
  /** Users in any set. */
  distinctUsers: number;
  /** `single` and `multi` lag `users`. */
  stale: boolean;
  /** Too many texts or members: this property is answered from rows. */
  declined: boolean;
}

const entries = new Map<string, Entry>();
let keptMembers = 0;

/** How often a query took its values from the sets (the tests read it to know the path ran). */
export const valueOwnersCounts = { answered: 0 };

/**
 * The owners of `read`'s values among the rows of `eventId`, over at least
 * the segments given (all sealed where they hold rows of the event).
 * Undefined when the property is not kept here (too many texts), an active
 * segment holds rows of the event, or most users are seen with several values.
 */
export function valueOwners(segments: readonly SegmentView[], eventId: number | undefined, read: PropertyRead): ValueOwners | undefined {
  if (eventId === undefined || read.kind !== "key" || segments.length === 0) return undefined;
  const workspace = segments[0].key.split("/", 1)[0];
  const name = `${workspace}/${eventId}/${read.keyId ?? ""}`;
  let entry = entries.get(name);
  if (entry !== undefined) {
    entries.delete(name);
    entries.set(name, entry);
  }
  const withRows = segments.filter((segment) => holdsRows(segment, eventId));
  if (withRows.some((segment) => segment.eventRowStart === undefined)) return undefined;
  if (entry !== undefined && entry.segments.size > 2 * Math.max(entry.largestAsk, withRows.length) + 64) {
    drop(name, entry);
    entry = undefined;
  }
  if (entry === undefined) {
    entry = newEntry();
    entries.set(name, entry);
  }
  entry.largestAsk = Math.max(entry.largestAsk, withRows.length);
  if (entry.declined) return undefined;
  for (const segment of withRows) {
    if (entry.segments.has(segment.key)) continue;
    const before = entry.members;
    const added = addSegment(entry, segment, eventId, read.keyId);
    keptMembers += entry.members - before;
    if (!added) {
      decline(entry);
      return undefined;
    }
    entry.segments.add(segment.key);
    entry.stale = true;
  }
  for (const [oldName, old] of entries) {
    if (keptMembers <= ownerMembersMax || old === entry) break;
    drop(oldName, old);
  }
  if (entry.stale) settle(entry);
  // Most users of two values or more: the rows would be read for most cohort users anyway.
  return 2 * entry.multi.size > entry.distinctUsers ? undefined : entry;
}

/** Kept, its sets released, so that the next query does not read the rows again to learn the same. */
function decline(entry: Entry): void {
  keptMembers -= entry.members;
  for (const users of entry.users) users?.dispose();
  for (const users of entry.single) users?.dispose();
  entry.multi.dispose();
  entry.users = [];
  entry.single = [];
  entry.multi = new RoaringBitmap32();
  entry.segments.clear();
  entry.members = 0;
  entry.declined = true;
}

/** Not disposed: the collector frees the sets (a query holds an entry no longer than its task). */
function drop(name: string, entry: Entry): void {
  entries.delete(name);
  keptMembers -= entry.members;
}

function newEntry(): Entry {
  const texts = [""];
  return {
    texts,
    intern: valueInterner(texts),
    users: [],
    single: [],
    multi: new RoaringBitmap32(),
    segments: new Set(),
    largestAsk: 0,
    members: 0,
    distinctUsers: 0,
    stale: false,
    declined: false,
  };
}

/** Whether the segment holds rows of the event. */
function holdsRows(segment: SegmentView, eventId: number): boolean {
  const rowStart = segment.eventRowStart;
  if (rowStart === undefined) return segment.rowCount > 0 && (segment.eventRows(eventId)?.length ?? 0) > 0;
  return eventId + 1 < rowStart.length && rowStart[eventId] < rowStart[eventId + 1];
}

/**
 * Adds the users of the event's rows in a sealed segment to the sets of
 * their values; false when the event's rows hold too many values or the sets
 * would grow past their bound. The rows are sorted by user, so a value's
 * users come ascending, a repeat right after its last one. Only the values
 * on the event's rows are interned: the column holds every event's.
 */
function addSegment(entry: Entry, segment: SegmentView, eventId: number, keyId: number | undefined): boolean {
  const start = segment.eventRowStart![eventId];
  const end = segment.eventRowStart![eventId + 1];
  const column = keyId === undefined ? undefined : segment.property(keyId);
  const texts = column?.texts ?? [""];
  const valueIds = column?.valueIds;
  const { userIds } = segment;
  const valueCount = texts.length;
  const counts = new Uint32Array(valueCount + 1);
  const lastUser = new Int32Array(valueCount).fill(-1);
  for (let row = start; row < end; row++) {
    const value = valueIds === undefined ? 0 : valueIds[row];
    if (lastUser[value] !== userIds[row]) {
      lastUser[value] = userIds[row];
      counts[value + 1]++;
    }
  }
  for (let value = 0; value < valueCount; value++) counts[value + 1] += counts[value];
  const users = new Uint32Array(counts[valueCount]);
  const next = counts.slice(0, valueCount);
  lastUser.fill(-1);
  for (let row = start; row < end; row++) {
    const value = valueIds === undefined ? 0 : valueIds[row];
    if (lastUser[value] !== userIds[row]) users[next[value]++] = lastUser[value] = userIds[row];
  }
  for (let value = 0; value < valueCount; value++) {
    if (counts[value + 1] === counts[value]) continue;
    const id = value === 0 ? 0 : entry.intern(texts[value]);
    // texts[0] stands for "not set".
    if (entry.texts.length - 1 > ownerValuesMax) return false;
    let set = entry.users[id];
    if (set === undefined) entry.users[id] = set = new RoaringBitmap32();
    const before = set.size;
    set.addMany(users.subarray(counts[value], counts[value + 1]));
    entry.members += set.size - before;
  }
  return entry.members <= ownerMembersMax;
}

/** `multi`: the users in two sets or more; `single`: each set less those. */
function settle(entry: Entry): void {
  const seen = new RoaringBitmap32();
  const multi = new RoaringBitmap32();
  try {
    for (const users of entry.users) {
      if (users === undefined) continue;
      const again = RoaringBitmap32.and(seen, users);
      multi.orInPlace(again);
      again.dispose();
      seen.orInPlace(users);
    }
    entry.distinctUsers = seen.size;
  } finally {
    seen.dispose();
  }
  // No query holds the sets settled before: a task runs to its end before the next one asks.
  entry.multi.dispose();
  for (const users of entry.single) users?.dispose();
  entry.multi = multi;
  entry.single = entry.users.map((users) => (users === undefined ? undefined : RoaringBitmap32.andNot(users, multi)));
  entry.stale = false;
}
