/**
 * The main thread's cache of sealed segments' columns: a query's snapshot
 * loads the sealed segments it reads (in the worker pool) through it, a
 * checkpoint or a merge hands it the segments it just wrote, and past the
 * main thread's share of the segment cache budget the least recently loaded
 * are dropped from memory (they reload on demand).
 */
import { mainThreadSegmentCacheBytesMax } from "../config/limits.js";
import { log } from "../log.js";
import { damagedSegmentReads } from "../metrics.js";
import { segmentDamageMarker, type LoadSegmentResult } from "./segment-layout.js";
import type { SealedSegment } from "./segments.js";
import type { Workspaces } from "./workspace-store.js";

/** A sealed segment whose files failed to load: named by its key (workspace/day/name), never by its path, for the client. */
export class DamagedSegmentError extends Error {
  constructor(
    readonly segmentKey: string,
    readonly detail: string,
  ) {
    super(`sealed segment ${segmentKey} cannot be read: ${detail}`);
    this.name = "DamagedSegmentError";
  }
}

/** A load's failure that is the segment's (its files), not the pool's (a worker stopped, the process closing). */
function isDamage(error: Error): boolean {
  return error.message.startsWith(segmentDamageMarker);
}

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
      (error: Error) => {
        segment.loading = undefined;
        if (!isDamage(error)) throw error;
        damagedSegmentReads.inc();
        log.error({ segment: segment.directory, err: error }, "a sealed segment cannot be read: it is damaged or its disk failed; queries over its day answer 503 until `eventide repair` moves it aside (server stopped)");
        throw new DamagedSegmentError(segment.key, error.message.slice(segmentDamageMarker.length).replaceAll(segment.directory, segment.key));
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
