/**
 * Local time for queries with a `timezone` (SPEC §7.1), from the platform's
 * `Intl` data and nothing else: a zone's offset at an instant, the first
 * instant of a local day, and the next change of offset. Bucket layouts
 * (buckets.ts) turn these into boundary instants once per query on the main
 * thread; kernels then place rows by binary search over those instants.
 */
import { dayMs, hourMs } from "./buckets.js";

export const utcZone = "UTC";

/** Names already resolved (a format's construction costs ~0.1 ms a query); cleared when full, and long ones never kept, since clients choose the names. */
const canonicalNamesMax = 1024;
const canonicalNameLengthMax = 64;
const canonicalNames = new Map<string, string | undefined>();

/** The canonical name of a zone `Intl` accepts (aliases and any letter case), or undefined. */
export function canonicalTimeZone(name: string): string | undefined {
  if (canonicalNames.has(name)) return canonicalNames.get(name);
  if (name.length > canonicalNameLengthMax) return resolvedZone(name);
  if (canonicalNames.size >= canonicalNamesMax) canonicalNames.clear();
  const canonical = resolvedZone(name);
  canonicalNames.set(name, canonical);
  return canonical;
}

function resolvedZone(name: string): string | undefined {
  // Offsets like "+05:00" are accepted by newer Intl versions, but they are not IANA names.
  if (!/^[A-Za-z]/.test(name)) return undefined;
  try {
    return new Intl.DateTimeFormat("en-US", { timeZone: name }).resolvedOptions().timeZone;
  } catch {
    return undefined;
  }
}

/** Day starts a clock remembers: 100 000 days span 270 years, a few MB. */
const dayStartsCachedMax = 100_000;
/** Clocks kept by zone name, so their formats and day starts outlive a request. */
const clocksMax = 64;
const clocks = new Map<string, ZoneClock>();

/** The clock of a canonical zone name, shared by the requests that use it. */
export function zoneClock(zone: string): ZoneClock {
  let clock = clocks.get(zone);
  if (clock === undefined) {
    if (clocks.size >= clocksMax) clocks.delete(clocks.keys().next().value!);
    clock = new ZoneClock(zone);
    clocks.set(zone, clock);
  }
  return clock;
}

/** "…, GMT+05:30", "…, GMT-00:44:30", "…, GMT" (zero): sign, hours, minutes, seconds. */
const offsetPattern = /GMT(?:([+-])(\d{1,2})(?::(\d{2}))?(?::(\d{2}))?)?$/;

/**
 * One zone's clock. The offset at an instant is read from the `longOffset`
 * zone name `Intl` prints for it (a few µs; formatToParts of the wall-clock
 * fields cost ~10× more), so a 10 000-day range's boundaries take
 * milliseconds, not a second of the main thread.
 */
export class ZoneClock {
  private readonly format: Intl.DateTimeFormat | undefined;
  /** dayStartMs by epoch day: a dashboard asks for the same days again and again. */
  private readonly dayStarts = new Map<number, number>();
  /** The offset at the last day start searched: the next day most likely starts at it too. */
  private lastOffsetMs = 0;

  constructor(readonly zone: string) {
    this.format = zone === utcZone ? undefined : new Intl.DateTimeFormat("en-US", { timeZone: zone, timeZoneName: "longOffset" });
  }

  /** Local time minus UTC at instant timeMs, in ms. */
  offsetMs(timeMs: number): number {
    if (this.format === undefined) return 0;
    const match = offsetPattern.exec(this.format.format(timeMs));
    if (match === null) throw new Error(`zone ${this.zone}: unreadable offset in ${JSON.stringify(this.format.format(timeMs))}`);
    if (match[1] === undefined) return 0;
    const magnitudeMs = Number(match[2]) * hourMs + Number(match[3] ?? 0) * 60_000 + Number(match[4] ?? 0) * 1000;
    return match[1] === "-" ? -magnitudeMs : magnitudeMs;
  }

  /** Days since 1970-01-01 of the local date at timeMs. */
  localEpochDay(timeMs: number): number {
    return Math.floor((timeMs + this.offsetMs(timeMs)) / dayMs);
  }

  /**
   * The first instant whose local date is `epochDay` or later: local midnight,
   * the first instant after a skipped midnight, or for a date the zone skipped
   * altogether the first instant of the next date (so that day is empty).
   */
  dayStartMs(epochDay: number): number {
    const wallMs = epochDay * dayMs;
    if (this.format === undefined) return wallMs;
    const known = this.dayStarts.get(epochDay);
    if (known !== undefined) return known;
    const startMs = this.searchDayStartMs(epochDay, wallMs);
    if (this.dayStarts.size >= dayStartsCachedMax) this.dayStarts.clear();
    this.dayStarts.set(epochDay, startMs);
    return startMs;
  }

  private searchDayStartMs(epochDay: number, wallMs: number): number {
    // Most days start at midnight at the offset of the day asked for before: two reads confirm it.
    const hintedMs = wallMs - this.lastOffsetMs;
    if (this.offsetMs(hintedMs) === this.lastOffsetMs && this.offsetMs(hintedMs - 1) === this.lastOffsetMs) return hintedMs;
    // Usually the instant of local midnight at the offset in force there.
    let guess = wallMs - this.offsetMs(wallMs);
    guess = wallMs - this.offsetMs(guess);
    this.lastOffsetMs = this.offsetMs(guess);
    if (this.localEpochDay(guess) >= epochDay && this.localEpochDay(guess - 1) < epochDay) return guess;
    // Midnight skipped or repeated: search, offsets lie within ±16 h.
    let low = wallMs - 16 * hourMs;
    let high = wallMs + 16 * hourMs;
    while (low < high) {
      const middle = Math.floor((low + high) / 2);
      if (this.localEpochDay(middle) >= epochDay) high = middle;
      else low = middle + 1;
    }
    return low;
  }

  /** The first instant in (afterMs, untilMs] whose offset differs from afterMs's; undefined when the offset at untilMs is the same. */
  nextTransitionMs(afterMs: number, untilMs: number): number | undefined {
    const offset = this.offsetMs(afterMs);
    if (this.offsetMs(untilMs) === offset) return undefined;
    let low = afterMs + 1;
    let high = untilMs;
    while (low < high) {
      const middle = Math.floor((low + high) / 2);
      if (this.offsetMs(middle) !== offset) high = middle;
      else low = middle + 1;
    }
    return low;
  }
}
