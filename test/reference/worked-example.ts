/** SPEC §5's worked example as stored events, shared by the reference's hand-checked tests. */
import type { StoredEvent } from "./reference.js";

/** One stored event from an ISO timestamp; a test's typo in the timestamp throws rather than yields NaN. */
export function storedEvent(distinctId: string, name: string, timestamp: string, properties?: Record<string, unknown>): StoredEvent {
  const timestampMs = Date.parse(timestamp);
  if (Number.isNaN(timestampMs)) throw new Error(`bad test timestamp ${timestamp}`);
  return { event: name, distinctId, timestampMs, properties };
}

/** SPEC §5, word for word. */
export const workedExample: StoredEvent[] = [
  storedEvent("u1", "signup", "2024-01-01T10:00:00Z"),
  storedEvent("u1", "view", "2024-01-01T11:00:00Z"),
  storedEvent("u1", "purchase", "2024-01-03T09:00:00Z"),
  storedEvent("u2", "signup", "2024-01-02T08:00:00Z"),
  storedEvent("u2", "purchase", "2024-01-02T08:30:00Z"),
  storedEvent("u3", "view", "2024-01-09T00:00:00Z"),
  storedEvent("u3", "signup", "2024-01-09T01:00:00Z"),
  storedEvent("u1", "view", "2024-01-10T12:00:00Z"),
];
