/**
 * The slot table that buckets rows in ClickHouse's SQL (no zone applied
 * there): every instant's slot must name the bucket the embedded store's
 * binary search over the same boundaries finds, across DST switches of an
 * hour and of half an hour, zones off the hour, and days a zone skipped.
 */
import { describe, expect, it } from "vitest";
import { bucketSlots } from "../../src/clickhouse/sql-parts.js";
import { boundaryIndex, zonedRetentionBoundaries, zonedTrendBoundaries, type GroupBy } from "../../src/query/buckets.js";
import { zoneClock } from "../../src/query/time-zone.js";

/** The bucket of `timeMs` as the slot table answers it. */
function slotBucket(startsMs: Float64Array, timeMs: number): number {
  const slots = bucketSlots(startsMs)!;
  const slot = Math.floor((timeMs - startsMs[0]) / slots.stepMs);
  return slots.bucketOfSlot === undefined ? slot : slots.bucketOfSlot[slot];
}

/** Instants worth checking: each boundary, a millisecond either side, and the middle of each bucket. */
function instants(startsMs: Float64Array): number[] {
  const times: number[] = [];
  for (let index = 0; index < startsMs.length - 1; index++) {
    times.push(startsMs[index], startsMs[index] + 1, startsMs[index + 1] - 1, Math.floor((startsMs[index] + startsMs[index + 1]) / 2));
  }
  return times.filter((time) => time >= startsMs[0] && time < startsMs[startsMs.length - 1]);
}

const cases: Array<[string, GroupBy, string, string]> = [
  ["Europe/Berlin", "hour", "2024-03-30", "2024-04-01"],
  ["Europe/Berlin", "day", "2024-03-01", "2024-11-30"],
  ["Pacific/Chatham", "hour", "2024-04-06", "2024-04-08"],
  ["Australia/Lord_Howe", "hour", "2024-04-06", "2024-04-08"],
  ["Australia/Lord_Howe", "week", "2024-01-01", "2024-12-31"],
  ["Asia/Kolkata", "month", "2023-01-15", "2024-12-31"],
  ["Asia/Kathmandu", "hour", "2024-01-01", "2024-01-03"],
  ["Pacific/Apia", "day", "2011-12-28", "2012-01-02"],
  ["America/St_Johns", "week", "2024-01-01", "2024-12-31"],
  ["UTC", "hour", "2024-01-01", "2024-01-10"],
];

describe("ClickHouse bucket slots", () => {
  it.each(cases)("%s by %s from %s to %s: every instant falls in the embedded store's bucket", (zone, groupBy, dateFrom, dateTo) => {
    const { startsMs } = zonedTrendBoundaries(dateFrom, dateTo, groupBy, zoneClock(zone), 10_000)!;
    for (const time of instants(startsMs)) expect([time, slotBucket(startsMs, time)]).toEqual([time, boundaryIndex(startsMs, time)]);
  });

  it("retention periods in a zone with DST, one day each and a week each", () => {
    for (const windowDays of [1, 7]) {
      const { startsMs } = zonedRetentionBoundaries("2024-03-01", "2024-11-30", windowDays, zoneClock("America/New_York"));
      for (const time of instants(startsMs)) expect([time, slotBucket(startsMs, time)]).toEqual([time, boundaryIndex(startsMs, time)]);
    }
  });

  it("a bucket of no instant (a day the zone skipped) next to a longer one is not taken for equal buckets", () => {
    const startsMs = Float64Array.from([0, 0, 2, 3]);
    expect([1, 2].map((time) => slotBucket(startsMs, time))).toEqual([1, 2]);
    expect(slotBucket(startsMs, 0)).toBe(1);
  });
});
