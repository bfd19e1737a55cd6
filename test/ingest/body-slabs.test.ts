/**
 * Body slabs (body-slabs.ts): a large body is read into a shared slab sized by
 * its class, and a slab given back serves the next body of its class while the
 * free slabs stay within their budget.
 */
import { describe, expect, it } from "vitest";
import { tuning } from "../../src/config/limits.js";
import { BodySlabs } from "../../src/ingest/body-slabs.js";

describe("body slabs", () => {
  it("take only bodies between the slab sizes", () => {
    expect(BodySlabs.fits(tuning.bodySlabBytesMin - 1)).toBe(false);
    expect(BodySlabs.fits(tuning.bodySlabBytesMin)).toBe(true);
    expect(BodySlabs.fits(tuning.bodySlabBytesMax)).toBe(true);
    expect(BodySlabs.fits(tuning.bodySlabBytesMax + 1)).toBe(false);
  });

  it("give a view of the body's length over a shared slab of the next class up", () => {
    const slabs = new BodySlabs(1 << 30);
    const view = slabs.take(tuning.bodySlabBytesMin + 1);
    expect(view.length).toBe(tuning.bodySlabBytesMin + 1);
    expect(view.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(view.buffer.byteLength).toBe(tuning.bodySlabBytesMin * 2);
    expect(slabs.take(tuning.bodySlabBytesMin).buffer.byteLength).toBe(tuning.bodySlabBytesMin);
  });

  it("reuse a slab given back for the next body of its class, and never hand one out twice", () => {
    const slabs = new BodySlabs(1 << 30);
    const first = slabs.take(100_000);
    slabs.give(first.buffer);
    const second = slabs.take(120_000);
    expect(second.buffer).toBe(first.buffer);
    expect(slabs.take(120_000).buffer).not.toBe(first.buffer);
    expect(slabs.take(tuning.bodySlabBytesMin * 4).buffer).not.toBe(first.buffer);
  });

  it("keep free slabs within their budget", () => {
    const slabs = new BodySlabs(tuning.bodySlabBytesMin * 3);
    const taken = [slabs.take(tuning.bodySlabBytesMin), slabs.take(tuning.bodySlabBytesMin), slabs.take(tuning.bodySlabBytesMin * 2)];
    for (const view of taken) slabs.give(view.buffer);
    expect(slabs.freeByteCount).toBe(tuning.bodySlabBytesMin * 2);
    expect(new BodySlabs(0).take(tuning.bodySlabBytesMin).buffer.byteLength).toBe(tuning.bodySlabBytesMin);
  });
});
