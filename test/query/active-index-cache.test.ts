/**
 * The worker's cache of active-segment indexes (src/query/active-index.ts):
 * an index whose segment a task's snapshot no longer lists for its day is
 * dropped (the segment was sealed), the least recently used go past the byte
 * budget, and none that the task reads is dropped.
 */
import { describe, expect, it } from "vitest";
import { ActiveIndexCache } from "../../src/query/active-index.js";

/** An active segment's columns with `rows` rows of event 0, users 0, 1, 2, … */
function segment(rows: number) {
  const event = new SharedArrayBuffer(4 * rows);
  const user = new Uint32Array(new SharedArrayBuffer(4 * rows));
  for (let row = 0; row < rows; row++) user[row] = row;
  return { rowCount: rows, event, user: user.buffer as SharedArrayBuffer };
}

describe("the active index cache", () => {
  it("drops the index of a segment its day no longer lists, and keeps the others", () => {
    const cache = new ActiveIndexCache(1 << 30);
    cache.get("ws/2024-01-01/active-1").eventRows(segment(10), 0);
    cache.get("ws/2024-01-02/active-2").eventRows(segment(10), 0);
    // Day one now holds a sealed segment and a new active one; day two is not read.
    cache.trim(new Set(["ws/2024-01-01/active-3"]), new Set(["ws/2024-01-01"]));
    expect(cache.has("ws/2024-01-01/active-1")).toBe(false);
    expect(cache.has("ws/2024-01-02/active-2")).toBe(true);
  });

  it("drops the least recently used past its budget, never one the task reads", () => {
    const cache = new ActiveIndexCache(0);
    cache.get("ws/2024-01-01/active-1").eventRows(segment(100), 0);
    cache.get("ws/2024-01-02/active-2").eventRows(segment(100), 0);
    expect(cache.byteLength).toBeGreaterThan(0);
    cache.trim(new Set(["ws/2024-01-01/active-1"]), new Set());
    expect(cache.has("ws/2024-01-01/active-1")).toBe(true);
    expect(cache.has("ws/2024-01-02/active-2")).toBe(false);
    const index = cache.get("ws/2024-01-01/active-1");
    expect(index.eventRows(segment(100), 0).length).toBe(100);
    expect(index.userBitmap(segment(100), 0)?.size).toBe(100);
  });
});
