/**
 * The open-loop half of the load generator: when to send, independent of when
 * answers come back. A closed loop (send the next request when the last one is
 * answered) slows down with the server and so hides its stalls — coordinated
 * omission: a 1 s stall costs one slow sample instead of the thousand requests
 * a real client population would have sent meanwhile. Here request k has an
 * intended send time fixed in advance, `startMs + k · intervalMs`, and its
 * latency is measured from that time, so waiting for a free connection counts.
 *
 * Pure logic with an injected clock, so tests replay it without sockets; the
 * generator process (./http-load.ts) drives it with a timer and real sockets.
 *
 * Estimate: `pump` is a few comparisons and one call per request, ~0.1 µs —
 * nothing next to the ~10 µs of syscalls a request costs. Its precision is
 * the timer's: Node's timers fire at ≥ 1 ms granularity, so at rates above
 * ~1 000 requests/s requests leave in small bursts up to ~1 ms late; that
 * lateness is part of the measured latency (it is real queueing in the client)
 * and is also reported on its own as scheduler lag.
 */

export interface OpenLoopSchedule {
  /** Intended send time of request 0, on the performance.now() clock. */
  startMs: number;
  /** Time between two intended sends of this process. */
  intervalMs: number;
}

/**
 * The schedule of one of `processCount` generator processes sharing a total
 * rate: each sends every processCount-th request of the combined stream, so
 * together they send evenly spaced requests at `ratePerSecond`.
 */
export function processSchedule(ratePerSecond: number, startMs: number, processIndex: number, processCount: number): OpenLoopSchedule {
  if (!(ratePerSecond > 0) || !Number.isFinite(ratePerSecond)) throw new Error(`rate must be a positive number, got ${ratePerSecond}`);
  if (!Number.isInteger(processIndex) || processIndex < 0 || processIndex >= processCount) throw new Error(`process ${processIndex} of ${processCount}`);
  const combinedIntervalMs = 1000 / ratePerSecond;
  return { startMs: startMs + processIndex * combinedIntervalMs, intervalMs: combinedIntervalMs * processCount };
}

export function intendedTimeMs(schedule: OpenLoopSchedule, index: number): number {
  return schedule.startMs + index * schedule.intervalMs;
}

/** How many requests are due at `nowMs` (intended time ≤ now). */
export function dueCount(schedule: OpenLoopSchedule, nowMs: number): number {
  if (nowMs < schedule.startMs) return 0;
  return Math.floor((nowMs - schedule.startMs) / schedule.intervalMs) + 1;
}

/** The first index whose intended time is at or after `timeMs`. */
export function firstIndexAtOrAfter(schedule: OpenLoopSchedule, timeMs: number): number {
  if (timeMs <= schedule.startMs) return 0;
  const index = Math.ceil((timeMs - schedule.startMs) / schedule.intervalMs);
  // Guard the floating-point edge where index · interval lands a hair below timeMs.
  return intendedTimeMs(schedule, index) < timeMs ? index + 1 : index;
}

/**
 * Hands due requests to idle connections, oldest first. A request that finds
 * no idle connection waits (the backlog) and keeps its intended time, so its
 * latency includes the wait. Nothing is dropped: the backlog is a range of
 * indexes, not a queue in memory, so it can grow without allocating.
 */
export class OpenLoopDispatcher<Connection> {
  private readonly idle: Connection[] = [];
  /** The next index to send. */
  next = 0;
  /** The largest backlog seen (requests due but not yet sent), at pump time. */
  backlogMax = 0;

  constructor(
    readonly schedule: OpenLoopSchedule,
    /** Requests with an index at or above this are never sent (the run's end). */
    private readonly endIndex: number,
    private readonly send: (connection: Connection, index: number, intendedMs: number, nowMs: number) => void,
  ) {}

  get idleCount(): number {
    return this.idle.length;
  }

  get finished(): boolean {
    return this.next >= this.endIndex;
  }

  backlog(nowMs: number): number {
    return Math.max(0, Math.min(dueCount(this.schedule, nowMs), this.endIndex) - this.next);
  }

  /** A connection is free (after connecting, or after its answer arrived); it takes the oldest due request. Returns what `pump` returns. */
  release(connection: Connection, nowMs: number): number {
    this.idle.push(connection);
    return this.pump(nowMs);
  }

  /** Forgets a connection that closed while idle. */
  remove(connection: Connection): void {
    const at = this.idle.indexOf(connection);
    if (at >= 0) this.idle.splice(at, 1);
  }

  /**
   * Sends every due request an idle connection can take. Returns the delay
   * until the next request falls due, or -1 when the next wake-up will come
   * from a connection becoming free (or the schedule is over).
   */
  pump(nowMs: number): number {
    const due = Math.min(dueCount(this.schedule, nowMs), this.endIndex);
    const backlog = due - this.next;
    if (backlog > this.backlogMax) this.backlogMax = backlog;
    while (this.next < due && this.idle.length > 0) {
      // The longest-idle connection first: every connection is used regularly, so none sits idle long
      // enough for the server's idle timeout to close it just as a request is written to it.
      const connection = this.idle.shift()!;
      const index = this.next;
      this.next += 1;
      this.send(connection, index, intendedTimeMs(this.schedule, index), nowMs);
    }
    if (this.next >= this.endIndex) return -1;
    if (this.next < due) return -1;
    return Math.max(0, intendedTimeMs(this.schedule, this.next) - nowMs);
  }
}
