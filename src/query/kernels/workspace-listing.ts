/**
 * What a workspace holds (SPEC §7.6): rows per event id, or rows per
 * property key id on which the key is set (of one event, or of all). Sealed
 * segments answer events from their row runs and keys from their property
 * directories, without reading values row by row where a key is sparse.
 */
import type { SegmentView } from "../segment-view.js";

export type ListingPlan = { kind: "events"; eventCount: number } | { kind: "properties"; eventId: number | undefined; keyIds: readonly number[]; keyCount: number };

/** Counts indexed by event id or key id. */
export function workspaceListing(segments: readonly SegmentView[], plan: ListingPlan): Float64Array {
  if (plan.kind === "events") {
    const counts = new Float64Array(plan.eventCount);
    for (const segment of segments) {
      const starts = segment.eventRowStart;
      if (starts !== undefined) {
        for (let eventId = 0; eventId + 1 < starts.length && eventId < plan.eventCount; eventId++) counts[eventId] += starts[eventId + 1] - starts[eventId];
      } else {
        const eventIds = segment.eventIds!;
        for (let row = 0; row < segment.rowCount; row++) if (eventIds[row] < plan.eventCount) counts[eventIds[row]]++;
      }
    }
    return counts;
  }
  const counts = new Float64Array(plan.keyCount);
  for (const segment of segments) {
    if (segment.eventRowStart !== undefined) {
      const starts = segment.eventRowStart;
      let start = 0;
      let end = segment.rowCount;
      if (plan.eventId !== undefined) {
        if (plan.eventId + 1 >= starts.length) continue;
        start = starts[plan.eventId];
        end = starts[plan.eventId + 1];
      }
      if (start === end) continue;
      for (const keyId of plan.keyIds) counts[keyId] += segment.rowsWithProperty(keyId, start, end);
      continue;
    }
    // Active rows come in arrival order: the event's rows are picked one by one.
    const eventIds = segment.eventIds!;
    for (const keyId of plan.keyIds) {
      const valueIds = segment.property(keyId)?.valueIds;
      if (valueIds === undefined) continue;
      let count = 0;
      for (let row = 0; row < segment.rowCount; row++) if (valueIds[row] !== 0 && (plan.eventId === undefined || eventIds[row] === plan.eventId)) count++;
      counts[keyId] += count;
    }
  }
  return counts;
}
