/**
 * Local time for queries with a `timezone` (SPEC §7.1), from the platform's
 * `Intl` data and nothing else: a zone's offset at an instant, the first
 * instant of a local day, and local wall-clock parts. Bucket layouts
 * (buckets.ts) turn these into boundary instants once per query on the main
 * thread; kernels then place rows by binary search over those instants.
 */
import { dayMs, hourMs } from "./buckets.js";

export const utcZone = "UTC";

/** The canonical name of a zone `Intl` accepts (aliases and any letter case), or undefined. */
export function canonicalTimeZone(name: string): string | undefined {
  // Offsets like "+05:00" are accepted by newer Intl versions, but they are not IANA names.
  if (!/^[A-Za-z]/.test(name)) return undefined;
  try {
    return new Intl.DateTimeFormat("en-US", { timeZone: name }).resolvedOptions().timeZone;
  } catch {
    return undefined;
  }
}

/** Local wall-clock fields of an instant. */
export interface LocalParts {
  year: number;
  month: number;
  day: number;
  hour: number;
}

/**
 * One zone's clock. Offsets are whole seconds in every zone `Intl` knows, so
 * the offset at t is read from the local fields of t's second.
 */
export class ZoneClock {
  private readonly format: Intl.DateTimeFormat | undefined;

  constructor(readonly zone: string) {
    this.format =
      zone === utcZone
        ? undefined
        : new Intl.DateTimeFormat("en-US", {
            timeZone: zone,
            hourCycle: "h23",
            era: "short",
            year: "numeric",
            month: "numeric",
            day: "numeric",
            hour: "numeric",
            minute: "numeric",
            second: "numeric",
          });
  }

  /** Local time minus UTC at instant timeMs, in ms. */
  offsetMs(timeMs: number): number {
    if (this.format === undefined) return 0;
    const secondMs = Math.floor(timeMs / 1000) * 1000;
    let year = 0;
    let month = 0;
    let day = 0;
    let hour = 0;
    let minute = 0;
    let second = 0;
    let before = false;
    for (const part of this.format.formatToParts(secondMs)) {
      switch (part.type) {
        case "era":
          before = part.value === "BC" || part.value === "B";
          break;
        case "year":
          year = Number(part.value);
          break;
        case "month":
          month = Number(part.value);
          break;
        case "day":
          day = Number(part.value);
          break;
        case "hour":
          hour = Number(part.value);
          break;
        case "minute":
          minute = Number(part.value);
          break;
        case "second":
          second = Number(part.value);
          break;
      }
    }
    if (before) year = 1 - year;
    const wallMs = new Date(0).setUTCFullYear(year, month - 1, day) + hour * hourMs + minute * 60_000 + second * 1000;
    return wallMs - secondMs;
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
    // Usually the instant of local midnight at the offset in force there.
    let guess = wallMs - this.offsetMs(wallMs);
    guess = wallMs - this.offsetMs(guess);
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

  /** Local date and hour at timeMs. */
  localParts(timeMs: number): LocalParts {
    const date = new Date(timeMs + this.offsetMs(timeMs));
    return { year: date.getUTCFullYear(), month: date.getUTCMonth() + 1, day: date.getUTCDate(), hour: date.getUTCHours() };
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
