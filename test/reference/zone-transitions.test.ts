/**
 * The reference's local-time arithmetic across every offset change of the
 * zones the differential suite uses, 1970–2037: around each change, local days
 * start where Intl says the date changes, last 24 hours less the offset gained
 * when they start and end at midnight, and hour buckets hold exactly the
 * instants Intl labels with their hour, a repeated label only after the clocks
 * went back.
 */
import { describe, expect, it } from "vitest";
import { LocalTime, addDays, hourRuns, offsetAt } from "./reference-v2.js";
import { edgeTimestamps, localDateOf, zoneTransitions } from "./zone-transitions.js";

const dayMs = 86_400_000;
const hourMs = 3_600_000;
const quarterHourMs = 900_000;
const zones = ["Pacific/Chatham", "Asia/Kolkata", "America/St_Johns", "Australia/Lord_Howe", "Europe/Berlin", "America/New_York", "Pacific/Apia"];
const fromMs = Date.UTC(1970, 0, 1);
const toMs = Date.UTC(2038, 0, 1);

/** Local wall clock straight from Intl, as `YYYY-MM-DD HH`, with no reference code between. */
function intlHour(zone: string, timeMs: number): string {
  return new Date(timeMs + offsetAt(zone, timeMs)).toISOString().slice(0, 13).replace("T", " ");
}

describe("local days and hours around every offset change, 1970–2037", () => {
  for (const zone of zones) {
    it(`${zone}`, () => {
      const transitions = zoneTransitions(zone, fromMs, toMs);
      // Kolkata has not changed its offset since 1945; the others change at least once most years.
      if (zone !== "Asia/Kolkata") expect(transitions.length).toBeGreaterThan(20);
      for (const transition of transitions) {
        expect(offsetAt(zone, transition.atMs - 1)).toBe(transition.offsetBeforeMs);
        expect(offsetAt(zone, transition.atMs)).toBe(transition.offsetAfterMs);
        const date = localDateOf(zone, transition.atMs - 1);
        const local = new LocalTime(zone, addDays(date, -1), addDays(date, 2));
        for (const day of [date, addDays(date, 1)]) {
          const startMs = local.dayStart(day);
          const endMs = local.dayStart(addDays(day, 1));
          const context = `${zone} ${day} (change at ${new Date(transition.atMs).toISOString()})`;
          // A day starts at the first instant whose local date is that day or later.
          expect(intlHour(zone, startMs).slice(0, 10) >= day, context).toBe(true);
          expect(intlHour(zone, startMs - 1).slice(0, 10) < day, context).toBe(true);
          const startsAtMidnight = (startMs + offsetAt(zone, startMs)) % dayMs === 0;
          const endsAtMidnight = (endMs + offsetAt(zone, endMs)) % dayMs === 0;
          if (startsAtMidnight && endsAtMidnight && endMs > startMs) {
            // The clocks moved forward by gainedMs during the day (a change at its very end belongs to the next).
            const gainedMs = offsetAt(zone, endMs - 1) - offsetAt(zone, startMs);
            expect(endMs - startMs, context).toBe(dayMs - gainedMs);
          }
          const runs = hourRuns(local, startMs, endMs);
          let previousEndMs = startMs;
          for (const [index, run] of runs.entries()) {
            expect(run.startMs, context).toBe(previousEndMs);
            expect(run.endMs - run.startMs, context).toBeLessThanOrEqual(hourMs);
            expect(intlHour(zone, run.startMs), context).toBe(run.label.slice(0, 13));
            expect(intlHour(zone, run.endMs - 1), context).toBe(run.label.slice(0, 13));
            const previous = runs[index - 1];
            if (previous !== undefined && previous.label === run.label) {
              // Same label twice in a row only when the clocks went back in between.
              expect(offsetAt(zone, run.startMs), context).toBeLessThan(offsetAt(zone, run.startMs - 1));
            }
            previousEndMs = run.endMs;
          }
          expect(previousEndMs, context).toBe(endMs);
          // Every quarter hour of the change's own day falls in the run Intl labels with its hour.
          for (let timeMs = startMs; day === date && timeMs < endMs; timeMs += quarterHourMs) {
            const run = runs.find((candidate) => candidate.startMs <= timeMs && timeMs < candidate.endMs);
            expect(run?.label.slice(0, 13), context).toBe(intlHour(zone, timeMs));
          }
        }
      }
    });
  }

  it("names the hours of a Chatham switch back and of a Berlin spring day as SPEC §7.1 says", () => {
    const chatham = new LocalTime("Pacific/Chatham", "2024-04-07", "2024-04-07");
    const labels = hourRuns(chatham, chatham.dayStart("2024-04-07"), chatham.dayStart("2024-04-08")).map((run) => run.label.slice(11, 13));
    expect(labels.slice(0, 7).join(" ")).toBe("00 01 02 03 02 03 04");
    expect(edgeTimestamps(["Europe/Berlin"], Date.UTC(2024, 2, 30), Date.UTC(2024, 3, 2))).toContain(Date.UTC(2024, 2, 31, 1));
  });
});
