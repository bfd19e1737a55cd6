/**
 * The offset changes of time zones, found by scanning Intl (through the
 * reference's offset pieces), and the instants around them where a local-time
 * engine is most likely to go wrong: each change and a millisecond either side,
 * an hour either side, and the first instants of the local days around it.
 * The differential suite ingests events at these instants.
 */
import { LocalTime, addDays, offsetPieces } from "./reference-v2.js";

const dayMs = 86_400_000;
const hourMs = 3_600_000;

export interface Transition {
  zone: string;
  atMs: number;
  offsetBeforeMs: number;
  offsetAfterMs: number;
}

/**
 * Every offset change of `zone` in `[fromMs, toMs)`, sampling Intl once a day
 * by default (a scan of decades stays within a second; no zone changes its
 * offset twice within a day).
 */
export function zoneTransitions(zone: string, fromMs: number, toMs: number, scanStepMs = dayMs): Transition[] {
  const pieces = offsetPieces(zone, fromMs, toMs, scanStepMs);
  const transitions: Transition[] = [];
  for (let index = 1; index < pieces.length; index++) {
    transitions.push({ zone, atMs: pieces[index].startMs, offsetBeforeMs: pieces[index - 1].offsetMs, offsetAfterMs: pieces[index].offsetMs });
  }
  return transitions;
}

/** The local date (`YYYY-MM-DD`) of an instant in `zone`. */
export function localDateOf(zone: string, timeMs: number): string {
  const date = new Date(timeMs).toISOString().slice(0, 10);
  return new LocalTime(zone, addDays(date, -1), addDays(date, 1)).localDate(timeMs);
}

/** Instants in `[fromMs, toMs)` at and around every offset change of these zones, ascending, without repeats. */
export function edgeTimestamps(zones: readonly string[], fromMs: number, toMs: number): number[] {
  const edges = new Set<number>();
  for (const zone of zones) {
    for (const transition of zoneTransitions(zone, fromMs - dayMs, toMs + dayMs)) {
      const at = transition.atMs;
      for (const timeMs of [at - hourMs, at - 1, at, at + 1, at + hourMs - 1, at + hourMs]) edges.add(timeMs);
      const date = localDateOf(zone, at);
      const local = new LocalTime(zone, addDays(date, -1), addDays(date, 2));
      for (const day of [date, addDays(date, 1)]) {
        const startMs = local.dayStart(day);
        edges.add(startMs - 1);
        edges.add(startMs);
      }
    }
  }
  return [...edges].filter((timeMs) => timeMs >= fromMs && timeMs < toMs).sort((left, right) => left - right);
}
