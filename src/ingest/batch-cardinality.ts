/**
 * Cardinality checks a worker can make on its own, per event: the timestamp
 * window around receipt, and the distinct UTC days one batch may touch. Each
 * distinct day costs an active segment in memory and a sealed segment's files
 * on disk, so a batch spread over thousands of days cost thousands of each for
 * a handful of rows. The per-workspace caps (event names, property keys) need
 * the store's dictionaries and are checked on the main thread (storage/cardinality.ts).
 */
import { limits } from "../config/limits.js";

const dayMs = 86_400_000;
const pastMs = limits.timestampPastDays * dayMs;
const futureMs = limits.timestampFutureDays * dayMs;

/** The message refusing a timestamp outside the accepted window around receipt; undefined when inside. */
export function timestampWindowError(timeMs: number, receivedAtMs: number): string | undefined {
  if (futureMs > 0 && timeMs > receivedAtMs + futureMs) {
    return `timestamp: more than ${limits.timestampFutureDays} day(s) after the server's time (EVENTIDE_TIMESTAMP_FUTURE_DAYS)`;
  }
  if (pastMs > 0 && timeMs < receivedAtMs - pastMs) {
    return `timestamp: more than ${limits.timestampPastDays} day(s) before the server's time (EVENTIDE_TIMESTAMP_PAST_DAYS)`;
  }
  return undefined;
}

export const batchDaysExceeded = `timestamp: the batch already holds events on ${limits.batchDaysMax} distinct UTC days (EVENTIDE_BATCH_DAYS_MAX); send other days in another batch`;

/**
 * The distinct UTC days of one batch's accepted events, in order of first use:
 * the first batchDaysMax days are admitted, events on later new days refused.
 * A linear search: at most batchDaysMax entries.
 */
export class BatchDays {
  private readonly days: number[] = [];

  reset(): void {
    this.days.length = 0;
  }

  /** Whether an event at `timeMs` may join the batch; admitting it records its day. */
  admit(timeMs: number): boolean {
    const day = Math.floor(timeMs / dayMs);
    const days = this.days;
    for (let index = 0; index < days.length; index++) if (days[index] === day) return true;
    if (days.length >= limits.batchDaysMax) return false;
    days.push(day);
    return true;
  }
}
