/**
 * The values' owners (value-owners.ts) on shapes the random suites rarely
 * draw: a property that other events fill with texts of their own, and one
 * whose values on the event outgrow what the sets keep.
 */
import { describe, expect, it } from "vitest";
import { dayMs, zonedRetentionBoundaries } from "../../src/query/buckets.js";
import { gatherEventRows, type GatherPlan } from "../../src/query/kernels/event-rows.js";
import { retentionCohorts } from "../../src/query/kernels/retention-cohorts.js";
import { retentionDayParts } from "../../src/query/kernels/retention-day-parts.js";
import { valueOwners, valueOwnersCounts } from "../../src/query/kernels/value-owners.js";
import type { SegmentView } from "../../src/query/segment-view.js";
import { zoneClock } from "../../src/query/time-zone.js";
import { sealedSegment } from "./kernels-fixtures.js";

const firstDayMs = Date.parse("2024-01-01T00:00:00Z");
const userCount = 100;

/**
 * Day `index` of a workspace: event 0 on every user, its value by user (ten
 * users and the day's new user seen with two), each of its `eventValues`
 * values on some row, and event 1 setting the same property to `otherTexts`
 * texts of the day's own (a page, a label).
 */
function day(workspace: string, index: number, otherTexts: number, eventValues = 2): SegmentView {
  const eventIds: number[] = [];
  const userIds: number[] = [];
  const times: number[] = [];
  const valueIds: number[] = [];
  const texts = ["", ...Array.from({ length: eventValues }, (_, value) => (value === 0 ? "a" : value === 1 ? "b" : `v${value}`))];
  const row = (event: number, user: number, timeMs: number, value: number) => {
    eventIds.push(event);
    userIds.push(user);
    times.push(timeMs);
    valueIds.push(value);
  };
  for (let user = 0; user < userCount; user++) {
    row(0, user, 1_000 + user, 1 + (user % eventValues));
    if (user < 10) row(0, user, 2_000 + user, 1 + ((user + 1) % eventValues));
  }
  row(0, userCount + index, 3_000, 1);
  row(0, userCount + index, 4_000, 2);
  // Every value on some row of the event.
  for (let value = 1; value <= eventValues; value++) row(0, value % userCount, 6_000 + value, value);
  for (let other = 0; other < otherTexts; other++) {
    row(1, other % userCount, 5_000 + other, texts.length);
    texts.push(`page-${index}-${other}`);
  }
  return sealedSegment(
    `${workspace}/${index}/segment`,
    { dayStartMs: firstDayMs + index * dayMs, eventIds: Uint32Array.from(eventIds), userIds: Uint32Array.from(userIds), timeOffsetMs: Uint32Array.from(times), properties: [{ keyId: 0, valueIds: Uint32Array.from(valueIds), texts }] },
    { bitmaps: true, eventRowStartPadding: 0, valueIdWidth: 16 },
  );
}

/** A daily retention of event 0 by the property over the segments' days: its answer from the kept parts, the gathered rows' answer, and whether the owners' sets answered. */
function retention(segments: readonly SegmentView[]) {
  const dateTo = new Date(firstDayMs + (segments.length - 1) * dayMs).toISOString().slice(0, 10);
  const startsMs = zonedRetentionBoundaries("2024-01-01", dateTo, 1, zoneClock("UTC")).startsMs;
  const gather: GatherPlan = {
    fromMs: startsMs[0],
    toMsExclusive: startsMs[startsMs.length - 1],
    references: [
      { eventId: 0, filters: [] },
      { eventId: 0, filters: [] },
    ],
    allEvents: false,
    breakdown: { kind: "key", keyId: 0 },
    math: { kind: "none" },
  };
  const plan = { startsMs, breakdownLimit: 25, dayStartsMs: undefined };
  const answeredBefore = valueOwnersCounts.answered;
  const fast = retentionDayParts(segments, gather, plan, 0, userCount + segments.length);
  return { fast, rows: retentionCohorts(gatherEventRows(segments, gather, 0, userCount + segments.length), plan), fromOwners: valueOwnersCounts.answered > answeredBefore };
}

describe("the values' owners", () => {
  it("keep only the event's values when other events fill the property with texts, and answer again a day later", () => {
    const segments = Array.from({ length: 30 }, (_, index) => day("other-texts", index, 250));
    const first = retention(segments.slice(0, 29));
    expect(first.fromOwners).toBe(true);
    expect(first.fast).toEqual(first.rows);
    // Event 0 holds "a" and "b": rows read for users of both values must not add the pages of event 1.
    expect(valueOwners(segments.slice(0, 29), 0, { kind: "key", keyId: 0 })!.texts).toEqual(["", "a", "b"]);
    const next = retention(segments);
    expect(next.fromOwners).toBe(true);
    expect(next.fast).toEqual(next.rows);
  });

  it("decline a property of more than 256 values on the event, release their sets, and leave the answer to the rows", () => {
    const segments = [day("many-values", 0, 0), day("many-values", 1, 0, 300)];
    const owners = valueOwners(segments.slice(0, 1), 0, { kind: "key", keyId: 0 });
    expect(owners!.single.filter((users) => users !== undefined)).toHaveLength(2);
    const answer = retention(segments);
    expect(answer.fromOwners).toBe(false);
    expect(answer.fast).toEqual(answer.rows);
    expect(valueOwners(segments, 0, { kind: "key", keyId: 0 })).toBeUndefined();
    expect(owners!.single).toHaveLength(0);
    expect(owners!.multi.size).toBe(0);
  });
});
