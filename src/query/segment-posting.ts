/**
 * Main-thread side of posting segments to query workers. A sealed segment's
 * descriptor (its memory's handle and its layout's JSON) costs several
 * microseconds to post, and a query over 90 days posted 90 of them with every
 * task — more than the work of a small query. Workers keep a view of each
 * sealed segment under its key (segment-views.ts), so once a segment's
 * memory has been posted whole, later tasks name it by key only.
 *
 * The main thread cannot know which worker takes a task, nor whether that
 * worker still holds the view (its cache drops the least recently used, and
 * a worker terminated at a task's time limit is replaced by an empty one).
 * So a worker that lacks a referenced segment answers `segments-missing`, and
 * the task is posted again with every segment whole, which any worker can run.
 */
import type { PostedSegment, SegmentDescriptor } from "../storage/segment-descriptor.js";

export class SegmentPostings {
  /**
   * Memories posted whole at least once. Weak: a segment whose memory the
   * store dropped (evicted, or retired by a merge) leaves on its own; reloaded,
   * it has a new memory and is posted whole again.
   */
  private readonly posted = new WeakSet<SharedArrayBuffer>();

  /** `viewBytesMax`: what one worker's cache of views holds (limits.ts). */
  constructor(private readonly viewBytesMax: number) {}

  /**
   * The segments as a task carries them: sealed ones posted before by key.
   * All whole when their columns exceed a worker's cache of views: it would
   * drop some of them while it read the others, and the next task would miss them.
   */
  compact(segments: readonly SegmentDescriptor[]): PostedSegment[] {
    let sealedBytes = 0;
    for (const segment of segments) if (segment.kind === "sealed") sealedBytes += segment.memory.byteLength;
    if (sealedBytes > this.viewBytesMax) return [...segments];
    return segments.map((segment) => (segment.kind === "sealed" && this.posted.has(segment.memory) ? segment.key : segment));
  }

  /** Called once a worker has answered a task that carried these segments. */
  notePosted(segments: readonly PostedSegment[]): void {
    for (const segment of segments) if (typeof segment !== "string" && segment.kind === "sealed") this.posted.add(segment.memory);
  }

  /** A worker lacked these: the next task posts them whole (it may well reach that worker again). */
  forget(segments: readonly SegmentDescriptor[], missingKeys: readonly string[]): void {
    const missing = new Set(missingKeys);
    for (const segment of segments) if (segment.kind === "sealed" && missing.has(segment.key)) this.posted.delete(segment.memory);
  }
}
