/**
 * The main thread's cache of sealed segments' columns: a query's snapshot
 * loads the sealed segments it reads (in the worker pool) through it, a
 * checkpoint or a merge hands it the segments it just wrote, and past the
 * main thread's share of the segment cache budget the least recently loaded
 * are dropped from memory (they reload on demand).
 */
import { mainThreadSegmentCacheBytesMax } from "../config/limits.js";
import type { LoadSegmentResult } from "./segment-layout.js";
import type { SealedSegment } from "./segments.js";
import type { Workspaces } from "./workspace-store.js";

export class SegmentCache {
  private cachedBytes = 0;
  private useClock = 0;

  constructor(
    private readonly workspaces: Workspaces,
    /** Loads a segment's files in the pool (the store's tasks, given at start). */
    private readonly load: (directory: string) => Promise<LoadSegmentResult>,
  ) {}

  /** Bytes of segment columns held in memory. */
  get residentBytes(): number {
    return this.cachedBytes;
  }

  /**
   * Loads a sealed segment's columns, once however many snapshots wait for
   * them, and resolves with them: loads finishing together may drop each
   * other from the cache before a waiter runs, so waiters use these.
   */
  ensureLoaded(segment: SealedSegment): Promise<SharedArrayBuffer> {
    segment.loading ??= this.load(segment.directory).then(
      (result) => {
        segment.attach(result);
        segment.loading = undefined;
        this.admit(segment, result.layout.memoryBytes);
        return result.memory;
      },
      (error) => {
        segment.loading = undefined;
        throw error;
      },
    );
    return segment.loading;
  }

  /** Counts a segment that now holds its columns in memory; over budget, drops others. */
  admit(segment: SealedSegment, bytes: number): void {
    segment.lastUsed = ++this.useClock;
    this.cachedBytes += bytes;
    if (this.cachedBytes <= mainThreadSegmentCacheBytesMax) return;
    // Over budget: drop the least recently loaded segments from memory (they reload on demand).
    const loaded: SealedSegment[] = [];
    for (const workspace of this.workspaces.values()) {
      for (const partition of workspace.days.values()) for (const sealed of partition.sealed) if (sealed.memory && sealed !== segment) loaded.push(sealed);
    }
    loaded.sort((a, b) => a.lastUsed - b.lastUsed);
    for (const victim of loaded) {
      if (this.cachedBytes <= mainThreadSegmentCacheBytesMax) break;
      this.cachedBytes -= victim.layout.memoryBytes;
      victim.memory = undefined;
    }
  }

  /** Forgets a segment's columns (a merge replaced it). */
  release(segment: SealedSegment): void {
    if (segment.memory) this.cachedBytes -= segment.layout.memoryBytes;
    segment.memory = undefined;
  }
}
