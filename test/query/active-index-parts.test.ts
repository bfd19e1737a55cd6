/**
 * The worker's per-part user sets of an active segment (ActiveIndex.partUsers
 * and, per value of a key, partValueUsers, read by zoned trends, breakdowns
 * and retention over fresh rows): extended as the segment grows they equal a
 * count from scratch of the rows the snapshot holds, and a task whose
 * snapshot is older than what the set already holds gets none (it reads the
 * rows itself).
 */
import { describe, expect, it } from "vitest";
import { ActiveIndex } from "../../src/query/active-index.js";
import { seededRandom } from "./kernels-fixtures.js";

const dayMs = 86_400_000;

/** Columns of `capacity` rows (events 0–2, users below 50, offsets anywhere in the day); a snapshot is a row count. */
function columns(random: () => number, capacity: number) {
  const event = new Uint32Array(new SharedArrayBuffer(4 * capacity));
  const user = new Uint32Array(new SharedArrayBuffer(4 * capacity));
  const time = new Uint32Array(new SharedArrayBuffer(4 * capacity));
  for (let row = 0; row < capacity; row++) {
    event[row] = Math.floor(random() * 3);
    user[row] = Math.floor(random() * 50);
    // Whole hours often, so rows sit on part edges.
    time[row] = random() < 0.5 ? Math.floor(random() * 24) * 3_600_000 : Math.floor(random() * dayMs);
  }
  const snapshot = (rowCount: number) => ({ rowCount, event: event.buffer as SharedArrayBuffer, user: user.buffer as SharedArrayBuffer, time: time.buffer as SharedArrayBuffer });
  const expected = (rowCount: number, eventId: number, lowMs: number, highMs: number, counts: (row: number) => boolean = () => true) => {
    const users = new Set<number>();
    let rows = 0;
    for (let row = 0; row < rowCount; row++) {
      if (event[row] !== eventId || time[row] < lowMs || time[row] >= highMs || !counts(row)) continue;
      users.add(user[row]);
      rows++;
    }
    return { users: [...users].sort((left, right) => left - right), rows, userMax: users.size === 0 ? -1 : Math.max(...users) };
  };
  return { snapshot, expected };
}

describe("an active segment's per-part user sets", () => {
  it.each(Array.from({ length: 20 }, (_, index) => 4_200 + index))("equal a count from scratch as the segment grows (seed %i)", (seed) => {
    const random = seededRandom(seed);
    const capacity = 400;
    const { snapshot, expected } = columns(random, capacity);
    const index = new ActiveIndex("ws/2024-01-01/active-1");
    const edges = [0, 5 * 3_600_000, 9.5 * 3_600_000, dayMs];
    let rowCount = 0;
    while (rowCount < capacity) {
      rowCount = Math.min(capacity, rowCount + 1 + Math.floor(random() * 60));
      for (let part = 0; part + 1 < edges.length; part++) {
        for (let eventId = 0; eventId < 3; eventId++) {
          if (random() < 0.3) continue;
          const lowMs = edges[part];
          const highMs = random() < 0.3 ? dayMs : edges[part + 1];
          const kept = index.partUsers(snapshot(rowCount), eventId, lowMs, highMs);
          expect(kept, `rows ${rowCount}, event ${eventId}, [${lowMs}, ${highMs})`).toBeDefined();
          const want = expected(rowCount, eventId, lowMs, highMs);
          expect({ users: kept!.users.toArray(), rows: kept!.rows, userMax: kept!.userMax }).toEqual(want);
        }
      }
    }
  });

  it.each(Array.from({ length: 20 }, (_, index) => 4_300 + index))("per value of a key, equal a count from scratch as the segment grows (seed %i)", (seed) => {
    const random = seededRandom(seed);
    const capacity = 400;
    const { snapshot, expected } = columns(random, capacity);
    // A key's value id per row (0: not set); ids below 6.
    const valueIds = Uint32Array.from({ length: capacity }, () => Math.floor(random() * 6));
    const index = new ActiveIndex("ws/2024-01-01/active-1");
    const edges = [0, 5 * 3_600_000, dayMs];
    let rowCount = 0;
    while (rowCount < capacity) {
      rowCount = Math.min(capacity, rowCount + 1 + Math.floor(random() * 60));
      for (let part = 0; part + 1 < edges.length; part++) {
        const eventId = Math.floor(random() * 3);
        const kept = index.partValueUsers(snapshot(rowCount), eventId, 9, valueIds, edges[part], edges[part + 1]);
        expect(kept).toBeDefined();
        for (let valueId = 0; valueId < 6; valueId++) {
          const own = (row: number) => valueIds[row] === valueId;
          const want = expected(rowCount, eventId, edges[part], edges[part + 1], own);
          const rows = valueId < kept!.rows.length ? kept!.rows[valueId] : 0;
          expect({ users: kept!.users[valueId]?.toArray() ?? [], rows }, `rows ${rowCount}, event ${eventId}, part ${part}, value ${valueId}`).toEqual({ users: want.users, rows: want.rows });
        }
        expect(kept!.userMax).toBe(expected(rowCount, eventId, edges[part], edges[part + 1]).userMax);
      }
    }
  });

  it("gives none to a task whose snapshot is older than the set", () => {
    const { snapshot } = columns(seededRandom(7), 100);
    const index = new ActiveIndex("ws/2024-01-01/active-1");
    expect(index.partUsers(snapshot(100), 1, 0, dayMs)).toBeDefined();
    expect(index.partUsers(snapshot(60), 1, 0, dayMs)).toBeUndefined();
    // Another part has not seen the later rows: it answers the older snapshot.
    expect(index.partUsers(snapshot(60), 1, 0, 3_600_000)).toBeDefined();
    const valueIds = new Uint32Array(100).fill(1);
    expect(index.partValueUsers(snapshot(100), 1, 9, valueIds, 0, dayMs)).toBeDefined();
    expect(index.partValueUsers(snapshot(60), 1, 9, valueIds, 0, dayMs)).toBeUndefined();
  });

  it("keeps the whole day's users once: the part is the event's user set", () => {
    const { snapshot, expected } = columns(seededRandom(11), 200);
    const index = new ActiveIndex("ws/2024-01-01/active-1");
    const users = index.userBitmap(snapshot(150), 2)!;
    const bytes = index.bytes;
    const whole = index.partUsers(snapshot(150), 2, 0, dayMs)!;
    expect(whole.users).toBe(users);
    expect(index.bytes).toBe(bytes);
    // Grown by later rows, it still counts exactly those of its snapshot.
    const grown = index.partUsers(snapshot(200), 2, 0, dayMs)!;
    expect({ users: grown.users.toArray(), rows: grown.rows, userMax: grown.userMax }).toEqual(expected(200, 2, 0, dayMs));
  });
});
