/**
 * Distinct users of each breakdown value over any run of sealed day parts,
 * without a union. A unit is one part of a sealed segment's day (its rows of
 * one event in [lowMs, highMs), as trend-day-parts.ts cuts days for a zone's
 * buckets); units are ordered by time. For each unit and value the index
 * keeps, sorted, every member's previous unit holding the same user with the
 * same value. The users of a value in units a…b are then the members of a…b
 * whose previous unit lies before a: one binary search per unit, where a
 * union reads every member of every unit (a 90-day trend by country read
 * ~4 M members per query for its ranks alone).
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

/** Indexes kept per worker thread, least recently used dropped first, and their bytes in all. */
const indexesMax = 4;
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
  /**
   * [unit][value]: how many members have their previous unit before each
   * unit k ≤ unit (at k), when that is shorter than the members; else
   * `sorted` holds each member's previous unit + 1 (0: none before), ascending.
   */
  readonly below: Array<Array<Uint32Array | undefined>> = [];
  readonly sorted: Array<Array<Uint32Array | undefined>> = [];
  /** [unit]: the values with members there, so that a query reads what the units hold, not every value. */
  readonly values: number[][] = [];
  bytes = 0;
  /** Above every member: the index counts users [0, userEnd). */
  userEnd = 0;

  constructor(readonly eventId: number, readonly keyId: number | undefined) {}

  /** Users holding `value` in units [first, last]. */
  users(value: number, first: number, last: number): number {
    let count = 0;
    for (let unit = first; unit <= last; unit++) count += this.newUsers(unit, value, first);
    return count;
  }

  /** For each value with members in units [first, last], adds its users there to counts[value] and sets present[value]. */
  addUsers(first: number, last: number, counts: Float64Array, present: Uint8Array): void {
    for (let unit = first; unit <= last; unit++) {
      for (const value of this.values[unit]) {
        counts[value] += this.newUsers(unit, value, first);
        present[value] = 1;
      }
    }
  }

  /** Members of (unit, value) not seen with the value in units [first, unit). */
  private newUsers(unit: number, value: number, first: number): number {
    const below = this.below[unit][value];
    if (below !== undefined) return below[first];
    const sorted = this.sorted[unit][value];
    return sorted === undefined ? 0 : lowerBound(sorted, first + 1);
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

const kept: PreviousParts[] = [];
/** Indexes built and answers given from one, in this thread (the tests read them to know an index answered). */
export const previousPartsCounts = { built: 0, answered: 0 };
/** Per event and key, the parts last asked without an index: asked again, they get one. */
const lastMissed = new Map<string, string>();
const lastMissedMax = 64;
const seenScratch = new ScratchInt32();
const memberScratch = new ScratchUint32();
const countScratch = new ScratchUint32();

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

/**
 * Whether `partKeys` (in time order) were the last parts asked without an
 * index; records them when not. An index costs about two unions of its
 * parts to build: a range asked once is answered by the union instead.
 */
export function askedAgain(eventId: number, keyId: number | undefined, partKeys: readonly string[]): boolean {
  const of = `${eventId}/${keyId}`;
  const signature = partKeys.join("|");
  if (lastMissed.get(of) === signature) return true;
  if (lastMissed.size >= lastMissedMax) lastMissed.clear();
  lastMissed.set(of, signature);
  return false;
}

/** The index of these units (in time order), kept; undefined when it would pass the byte budget or hold more than valuesMax values. */
export function buildPreviousParts(eventId: number, keyId: number | undefined, units: readonly UnitPart[], valuesMax: number): PreviousParts | undefined {
  const index = new PreviousParts(eventId, keyId);
  // Per index value, its units' sets in time order.
  const setsOfValue: Array<Array<{ unit: number; users: Bitmap }>> = [];
  let members = 0;
  let userEnd = 0;
  for (let unit = 0; unit < units.length; unit++) {
    const part = units[unit];
    index.unitOfPart.set(part.key, unit);
    index.below.push([]);
    index.sorted.push([]);
    index.values.push([]);
    for (let id = 0; id < part.users.length; id++) {
      const users = part.users[id];
      if (users === undefined || users.size === 0) continue;
      const value = id === 0 ? 0 : index.idOf(part.texts[id]);
      (setsOfValue[value] ??= []).push({ unit, users });
      index.values[unit].push(value);
      members += users.size;
      userEnd = Math.max(userEnd, users.maximum() + 1);
    }
  }
  // Either form takes at most 4 bytes a member.
  if (members * 4 > indexBytesMax || index.texts.length > valuesMax) return undefined;
  // Each user's last sighting as one number, (value + 1) × span + unit: one array read per member, not two.
  const span = units.length;
  if ((setsOfValue.length + 1) * span >= 0x7fff_ffff) return undefined;
  index.userEnd = userEnd;
  const seen = seenScratch.get(userEnd).fill(0, 0, userEnd);
  for (let value = 0; value < setsOfValue.length; value++) {
    const sets = setsOfValue[value];
    if (sets === undefined) continue;
    // Values go in order, so a sighting below base is another value's: none of this one yet.
    const base = (value + 1) * span;
    for (const { unit, users } of sets) {
      const ids = users.toUint32Array(memberScratch.get(users.size));
      // Previous units + 1 are at most `unit`: counted, not sorted.
      const counts = countScratch.get(unit + 1).fill(0, 0, unit + 1);
      const sighting = base + unit;
      for (let at = 0; at < ids.length; at++) {
        const user = ids[at];
        const last = seen[user];
        counts[last >= base ? last - base + 1 : 0]++;
        seen[user] = sighting;
      }
      if (unit + 1 <= ids.length) {
        const below = new Uint32Array(unit + 1);
        let sum = 0;
        for (let k = 0; k <= unit; k++) below[k] = sum += counts[k];
        index.below[unit][value] = below;
        index.bytes += below.byteLength;
      } else {
        const sorted = new Uint32Array(ids.length);
        let at = 0;
        for (let k = 0; k <= unit; k++) for (let left = counts[k]; left > 0; left--) sorted[at++] = k;
        index.sorted[unit][value] = sorted;
        index.bytes += sorted.byteLength;
      }
    }
  }
  let bytes = index.bytes;
  for (const other of kept) bytes += other.bytes;
  while (kept.length > 0 && (kept.length >= indexesMax || bytes > indexBytesMax)) bytes -= kept.pop()!.bytes;
  kept.unshift(index);
  previousPartsCounts.built++;
  return index;
}
