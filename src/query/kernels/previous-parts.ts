/**
 * Distinct users of each breakdown value over any run of sealed day parts,
 * without a union. A unit is one part of a sealed segment's day (its rows of
 * one event in [lowMs, highMs), as trend-day-parts.ts cuts days for a zone's
 * buckets); units are ordered by time. For each unit and value the index
 * keeps where each member was last seen with the same value before (as
 * counts per earlier unit, or sorted). The users of a value in units a…b are
 * then the members of a…b last seen before a: a lookup or a binary search
 * per unit, where a union reads every member of every unit (a 90-day trend
 * by country read ~4 M members per query for its ranks alone).
 *
 * An index is built from the kept parts at once when each day is one
 * segment (merges have settled), else once the same parts are asked twice,
 * and answers any run of its units: a shorter range, another limit.
 * It covers every user, so it answers tasks over all of them only. The
 * users of the event without breakdown are indexed as one value, under key
 * id wholeKeyId.
 */
import roaring from "roaring";
import { lowerBound } from "./rows.js";
import { ScratchInt32, ScratchUint32 } from "./scratch.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;

/**
 * Indexes kept per worker thread, least recently used dropped first, and their
 * bytes in all. The bytes are the bound; the count only keeps the lookup's
 * walk short: a dashboard asks for a dozen (event, breakdown) pairs on each
 * refresh, and with room for four every one of them was rebuilt every time.
 */
const indexesMax = 64;
const indexBytesMax = 32 * 1024 * 1024;

/** One unit's part: its users per value of the segment's column (index: the segment's value id, 0: not set). */
export interface UnitPart {
  /** `${segment key}/${lowMs}/${highMs}`, as partKey builds it. */
  key: string;
  users: ReadonlyArray<Bitmap | undefined>;
  /** Text of each segment value id (id 0, not set, has no text). */
  texts: readonly string[];
}

/** The key id of an index of the event's users without breakdown. */
export const wholeKeyId = -1;

export function partKey(segmentKey: string, lowMs: number, highMs: number): string {
  return `${segmentKey}/${lowMs}/${highMs}`;
}

export class PreviousParts {
  /** Unit index of each part key. */
  readonly unitOfPart = new Map<string, number>();
  /** Index value id → text; id 0 is "not set". */
  readonly texts: string[] = [""];
  readonly idOfText = new Map<string, number>();
  /** [unit]: the values with members there, so that a query reads what the units hold, not every value. */
  readonly values: number[][] = [];
  /**
   * [unit][i], for value values[unit][i]: when its members are at least
   * unit + 1, how many were last seen before each unit k ≤ unit (at k, so
   * the array is unit + 1 long); else each member's previous unit + 1
   * (0: none before), ascending (shorter than unit + 1).
   */
  readonly previous: Uint32Array[][] = [];
  bytes = 0;
  /** Above every member: the index counts users [0, userEnd). */
  userEnd = 0;

  constructor(readonly eventId: number, readonly keyId: number | undefined) {}

  /** Users holding `value` in units [first, last]. */
  users(value: number, first: number, last: number): number {
    let count = 0;
    for (let unit = first; unit <= last; unit++) {
      const at = this.values[unit].indexOf(value);
      if (at >= 0) count += newUsers(this.previous[unit][at], unit, first);
    }
    return count;
  }

  /** For each value with members in units [first, last], adds its users there to counts[value] and sets present[value]. */
  addUsers(first: number, last: number, counts: Float64Array, present?: Uint8Array): void {
    for (let unit = first; unit <= last; unit++) {
      const values = this.values[unit];
      const previous = this.previous[unit];
      for (let at = 0; at < values.length; at++) {
        counts[values[at]] += newUsers(previous[at], unit, first);
        if (present !== undefined) present[values[at]] = 1;
      }
    }
  }

  idOf(text: string): number {
    let id = this.idOfText.get(text);
    if (id === undefined) {
      id = this.texts.length;
      this.texts.push(text);
      this.idOfText.set(text, id);
    }
    return id;
  }
}

/** Members of a (unit, value) not seen with the value in units [first, unit). */
function newUsers(previous: Uint32Array, unit: number, first: number): number {
  return previous.length === unit + 1 ? previous[first] : lowerBound(previous, first + 1);
}

const kept: PreviousParts[] = [];
/** Indexes built and answers given from one, in this thread (the tests read them to know an index answered). */
export const previousPartsCounts = { built: 0, answered: 0 };
/** Per event and key, the parts last asked without an index (asked again, they get one), or last refused one (never tried again). */
const lastMissed = new Map<string, string>();
const refused = new Map<string, string>();
const signaturesMax = 64;
const seenScratch = new ScratchInt32();
const memberScratch = new ScratchUint32();

/** A kept index holding every key of `partKeys`, most recently used first; undefined when none does. */
export function keptPreviousParts(eventId: number, keyId: number | undefined, partKeys: readonly string[]): PreviousParts | undefined {
  for (let at = 0; at < kept.length; at++) {
    const index = kept[at];
    if (index.eventId !== eventId || index.keyId !== keyId || !partKeys.every((key) => index.unitOfPart.has(key))) continue;
    kept.splice(at, 1);
    kept.unshift(index);
    return index;
  }
  return undefined;
}

/** Forgets a kept index (its parts are no longer one run: a segment between them is gone). */
export function dropPreviousParts(index: PreviousParts): void {
  const at = kept.indexOf(index);
  if (at >= 0) kept.splice(at, 1);
}

function remember(map: Map<string, string>, of: string, signature: string): void {
  if (map.size >= signaturesMax) map.clear();
  map.set(of, signature);
}

/**
 * Whether `partKeys` (in time order) were the last parts asked without an
 * index; records them when not. An index costs about two unions of its
 * parts to build: a range asked once is answered by the union instead.
 */
export function askedAgain(eventId: number, keyId: number | undefined, partKeys: readonly string[]): boolean {
  const of = `${eventId}/${keyId}`;
  const signature = partKeys.join("|");
  if (lastMissed.get(of) === signature) return true;
  remember(lastMissed, of, signature);
  return false;
}

/** Whether an index of these parts was refused (too large, too many values): asked again, they are not read for one. */
export function refusedBefore(eventId: number, keyId: number | undefined, partKeys: readonly string[]): boolean {
  return refused.get(`${eventId}/${keyId}`) === partKeys.join("|");
}

/** A (unit, value) list's own cost beside its elements (typed array, buffer, slots in the unit's lists), counted against the budget. */
const arrayBytesFixed = 256;

/**
 * The index of these units (in time order), kept; undefined, and remembered
 * as refused, when it would pass the byte budget or hold more than valuesMax
 * values. Building costs O(members) plus a sort of each short list.
 */
export function buildPreviousParts(eventId: number, keyId: number | undefined, units: readonly UnitPart[], valuesMax: number): PreviousParts | undefined {
  const index = new PreviousParts(eventId, keyId);
  // Per index value, its units' sets in time order, and where each goes in its unit's lists.
  const setsOfValue: Array<Array<{ unit: number; at: number; users: Bitmap }>> = [];
  let members = 0;
  let pairs = 0;
  let userEnd = 0;
  const refuse = () => {
    remember(refused, `${eventId}/${keyId}`, units.map((unit) => unit.key).join("|"));
    return undefined;
  };
  for (let unit = 0; unit < units.length; unit++) {
    const part = units[unit];
    index.unitOfPart.set(part.key, unit);
    const values: number[] = [];
    for (let id = 0; id < part.users.length; id++) {
      const users = part.users[id];
      if (users === undefined || users.size === 0) continue;
      const value = id === 0 ? 0 : index.idOf(part.texts[id]);
      if (index.texts.length > valuesMax) return refuse();
      (setsOfValue[value] ??= []).push({ unit, at: values.length, users });
      values.push(value);
      members += users.size;
      userEnd = Math.max(userEnd, users.maximum() + 1);
    }
    index.values.push(values);
    index.previous.push(new Array<Uint32Array>(values.length));
    pairs += values.length;
    // Either form takes at most 4 bytes a member, and each (unit, value) its own array.
    if (members * 4 + pairs * arrayBytesFixed > indexBytesMax) return refuse();
  }
  if (members === 0) return undefined;
  // Each user's last sighting as one number, (value + 1) × span + unit: one array read per member, not two.
  const span = units.length;
  if ((setsOfValue.length + 1) * span >= 0x7fff_ffff) return refuse();
  index.userEnd = userEnd;
  const seen = seenScratch.get(userEnd).fill(0, 0, userEnd);
  for (let value = 0; value < setsOfValue.length; value++) {
    const sets = setsOfValue[value];
    if (sets === undefined) continue;
    // Values go in order, so a sighting below base is another value's: none of this one yet.
    const base = (value + 1) * span;
    for (const { unit, at, users } of sets) {
      const ids = users.toUint32Array(memberScratch.get(users.size));
      const sighting = base + unit;
      // Previous units + 1 are at most `unit`: counted into unit + 1 slots when no longer than the members, else listed and sorted.
      const counted = ids.length >= unit + 1;
      const previous = new Uint32Array(counted ? unit + 1 : ids.length);
      for (let member = 0; member < ids.length; member++) {
        const user = ids[member];
        const last = seen[user];
        const encoded = last >= base ? last - base + 1 : 0;
        if (counted) previous[encoded]++;
        else previous[member] = encoded;
        seen[user] = sighting;
      }
      if (counted) for (let k = 1; k <= unit; k++) previous[k] += previous[k - 1];
      else previous.sort();
      index.previous[unit][at] = previous;
      index.bytes += previous.byteLength + arrayBytesFixed;
    }
  }
  let bytes = index.bytes;
  for (const other of kept) bytes += other.bytes;
  while (kept.length > 0 && (kept.length >= indexesMax || bytes > indexBytesMax)) bytes -= kept.pop()!.bytes;
  kept.unshift(index);
  previousPartsCounts.built++;
  return index;
}
