/**
 * Sealed segments posted to query workers by key (src/query/segment-posting.ts
 * on the main thread, segmentViews in src/query/segment-views.ts in a
 * worker): a key names the view the worker built from the segment's whole
 * descriptor, a key the worker holds no view of (never posted there, or
 * dropped from its cache) is reported missing rather than read, and the main
 * thread names by key only what it posted whole and has not been told is missing.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { limits } from "../../src/config/limits.js";
import { SegmentPostings } from "../../src/query/segment-posting.js";
import { segmentViews, setSealedViewBytesMax } from "../../src/query/segment-views.js";
import type { SealedSegmentDescriptor } from "../../src/storage/segment-descriptor.js";
import { ActiveSegment, SealedSegment } from "../../src/storage/segments.js";
import { sealInline } from "../helpers/seal-inline.js";

const dayStartMs = Date.UTC(2024, 0, 1);
let directory: string;

/** A sealed segment of `rows` rows of event 0 (users 0, 1, 2, …), described as a query task carries it. */
async function sealed(key: string, rows: number): Promise<SealedSegmentDescriptor> {
  const active = new ActiveSegment(key, dayStartMs);
  for (let user = 0; user < rows; user++) {
    const row = active.appendRow();
    active.time.values[row] = user;
    active.user.values[row] = user;
    active.event.values[row] = 0;
  }
  const result = await sealInline(active, join(directory, key.replaceAll("/", "_")));
  const segment = new SealedSegment(key, directory, dayStartMs, result.layout);
  segment.attach(result);
  return segment.describe();
}

const reference = (descriptor: SealedSegmentDescriptor) => descriptor.key;

beforeAll(() => {
  directory = mkdtempSync(join(tmpdir(), "eventide-posting-"));
});

afterAll(() => {
  setSealedViewBytesMax(limits.segmentCacheBytesMax);
  rmSync(directory, { recursive: true, force: true });
});

describe("a worker's views of segments named by key", () => {
  it("reads a key as the view built from that segment's descriptor, and reports a key it never saw as missing", async () => {
    const small = await sealed("ws/2024-01-01/seg-small", 3);
    const large = await sealed("ws/2024-01-01/seg-large", 50);
    expect(segmentViews([reference(small)])).toEqual({ kind: "missing", keys: [small.key] });
    const whole = segmentViews([small, large]);
    expect(whole.kind).toBe("views");
    const named = segmentViews([reference(large), reference(small)]);
    if (named.kind !== "views") throw new Error("both segments were posted whole before");
    expect(named.views.map((view) => [view.key, view.rowCount])).toEqual([
      [large.key, 50],
      [small.key, 3],
    ]);
    // One unknown key among known ones: nothing is read.
    expect(segmentViews([reference(small), "ws/2024-01-01/seg-unknown"])).toEqual({ kind: "missing", keys: ["ws/2024-01-01/seg-unknown"] });
  });

  it("reports a key whose view its cache dropped as missing", async () => {
    const first = await sealed("ws/2024-01-02/seg-first", 40);
    const second = await sealed("ws/2024-01-02/seg-second", 40);
    // Room for one of them: reading the second drops the first.
    setSealedViewBytesMax(first.memory.byteLength + first.memory.byteLength / 2);
    try {
      expect(segmentViews([first]).kind).toBe("views");
      expect(segmentViews([second]).kind).toBe("views");
      expect(segmentViews([reference(first)])).toEqual({ kind: "missing", keys: [first.key] });
      expect(segmentViews([reference(second)]).kind).toBe("views");
    } finally {
      setSealedViewBytesMax(limits.segmentCacheBytesMax);
    }
  });
});

describe("the main thread's record of posted segments", () => {
  it("names a segment by key only once it was posted whole, and again whole once a worker lacked it", async () => {
    const one = await sealed("ws/2024-01-03/seg-one", 5);
    const two = await sealed("ws/2024-01-03/seg-two", 5);
    const postings = new SegmentPostings(1 << 30);
    expect(postings.compact([one, two])).toEqual([one, two]);
    postings.notePosted([one]);
    expect(postings.compact([one, two])).toEqual([reference(one), two]);
    postings.notePosted([reference(one), two]);
    expect(postings.compact([one, two])).toEqual([reference(one), reference(two)]);
    postings.forget([one, two], [two.key]);
    expect(postings.compact([one, two])).toEqual([reference(one), two]);
  });

  it("posts a segment whole again once the store reloaded it (new memory), and all whole past a worker's cache", async () => {
    const one = await sealed("ws/2024-01-04/seg-one", 5);
    const postings = new SegmentPostings(one.memory.byteLength * 2);
    postings.notePosted([one]);
    const reloaded = { ...one, memory: new SharedArrayBuffer(one.memory.byteLength) };
    expect(postings.compact([reloaded])).toEqual([reloaded]);
    const two = await sealed("ws/2024-01-04/seg-two", 5);
    const three = await sealed("ws/2024-01-04/seg-three", 5);
    postings.notePosted([two, three]);
    expect(postings.compact([one, two])).toEqual([one.key, two.key]);
    expect(postings.compact([one, two, three])).toEqual([one, two, three]);
  });
});
