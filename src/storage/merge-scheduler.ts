/**
 * Merge scheduling: after a published checkpoint (and when ingest pauses),
 * the sealed segments of each day are merged into one in the worker pool, in
 * the background and one pass at a time. A merged segment is published before
 * the ones it replaces are deleted; recovery finishes a deletion a crash cut.
 */
import { strict as assert } from "node:assert";
import { limits } from "../config/limits.js";
import type { AbandonedSegments } from "./abandoned-segments.js";
import type { PublishedCheckpoint } from "./checkpoint.js";
import { fsyncDirectoryInPool, removeDirectoryInPool } from "./files.js";
import { dayDirectory, segmentDirectory } from "./paths.js";
import { DamagedSegmentError, type SegmentCache } from "./segment-cache.js";
import { segmentDamageMarker, type LoadSegmentResult } from "./segment-layout.js";
import { dayLabel, rowsOf, SealedSegment } from "./segments.js";
import type { DayPartition, Workspaces, WorkspaceStore } from "./workspace-store.js";
import { log } from "../log.js";

/** How long a day whose merge failed waits before it is tried again. */
const failedMergeRetryMs = 10 * 60_000;

/** Whether a merge pass is needed: none asked, or one asked while a pass runs (it runs again after). */
type MergeRequest = "none" | "again-after-this-pass";

export class MergeScheduler {
  private running: Promise<void> | undefined;
  private request: MergeRequest = "none";
  /** A merge pass left a day unmerged because ingest was busy; the idle timer runs another. */
  deferred = false;
  private mergeCount = 0;

  constructor(
    private readonly dataDir: string,
    private readonly fsync: boolean,
    private readonly workspaces: Workspaces,
    private readonly cache: SegmentCache,
    private readonly abandoned: AbandonedSegments,
    private readonly checkpoint: PublishedCheckpoint,
    /** Merges the segments of `directories` into `target` in the pool (the store's tasks, given at start). */
    private readonly merge: (directories: string[], target: string, dayStartMs: number, dropUserIds: readonly number[]) => Promise<LoadSegmentResult>,
    /** When ingest last did something (see Store.lastIngestAtMs). */
    private readonly lastIngestAtMs: () => number,
    private readonly isClosing: () => boolean,
  ) {}

  /** The pass under way, if any. */
  get inProgress(): Promise<void> | undefined {
    return this.running;
  }

  /** Runs merges in the background, one at a time; a call while one runs asks for another pass after it. */
  schedule(): void {
    if (this.isClosing()) return;
    if (this.running) {
      this.request = "again-after-this-pass";
      return;
    }
    this.running = this.runMerges()
      .catch((error: unknown) => log.error(`merging segments failed (they stay as they are): ${(error as Error).message}`))
      .finally(() => {
        this.running = undefined;
        if (this.request === "again-after-this-pass") {
          this.request = "none";
          this.schedule();
        }
      });
  }

  /** Merges every day that holds several sealed segments into one now, busy or not (maintenance, tests). */
  async mergeAll(): Promise<void> {
    while (this.running) await this.running;
    this.running = this.runMerges(true).finally(() => (this.running = undefined));
    await this.running;
  }

  /**
   * Merges every day that holds more than one sealed segment into one segment
   * (see busyMergeSegmentsMin). Whether ingest is busy is asked again before
   * each day, unless `force`: a pass that began in a pause must not go on
   * rewriting day after day once batches are back (it held a worker and a
   * core for seconds, and halved batch throughput in the bench's later repeats).
   */
  private async runMerges(force = false): Promise<void> {
    this.abandoned.remove();
    this.deferred = false;
    for (const [victimKeys, retryAtMs] of this.failedMerges) if (retryAtMs <= Date.now()) this.failedMerges.delete(victimKeys);
    for (const workspace of [...this.workspaces.values()]) {
      for (const [dayStartMs, partition] of [...workspace.days]) {
        // A merge must not fold in segments of a checkpoint a power loss could still undo (see Checkpoints.run).
        if (this.isClosing() || this.checkpoint.state === "rename-not-durable") return;
        const victims = partition.sealed.slice();
        if (victims.length < 2) continue;
        const busy = !force && Date.now() - this.lastIngestAtMs() < limits.checkpointIdleMs;
        if (busy && victims.length < limits.busyMergeSegmentsMin) {
          this.deferred = true;
          continue;
        }
        const rows = rowsOf(victims);
        if (rows > limits.mergeRowsMax) continue;
        const victimKeys = victims.map((victim) => victim.key).join(" ");
        if (!force && (this.failedMerges.get(victimKeys) ?? 0) > Date.now()) continue;
        try {
          await this.replace(workspace, partition, dayStartMs, victims, rows);
          this.failedMerges.delete(victimKeys);
        } catch (error) {
          // One day's failure (a damaged segment among its victims, a full disk) must not stop every later day's merges,
          // pass after pass; the same victims wait a while before they are tried again (a full disk may clear).
          this.failedMerges.set(victimKeys, Date.now() + failedMergeRetryMs);
          log.error({ err: error, day: dayLabel(dayStartMs), workspaceId: workspace.id }, "merging a day's segments failed (they stay as they are; other days go on)");
          if (this.isClosing()) return;
        }
      }
    }
  }

  /** Victim sets whose merge failed, by their keys: when they may be tried again. */
  private readonly failedMerges = new Map<string, number>();

  /**
   * Runs `work` while no merge pass runs, and starts none until it ends: a user
   * deletion rewrites segments that a pass would otherwise merge meanwhile.
   */
  async exclusive<T>(work: () => Promise<T>): Promise<T> {
    while (this.running) await this.running;
    const result = work();
    this.running = result.then(
      () => undefined,
      () => undefined,
    );
    void this.running.finally(() => {
      this.running = undefined;
      if (this.request === "again-after-this-pass") {
        this.request = "none";
        this.schedule();
      }
    });
    return result;
  }

  /**
   * Writes `victims` (sealed segments of one day, oldest first) as one segment
   * in the pool, leaving out the rows of `dropUserIds`, and puts it in their
   * place: published first, the victims deleted second (start-up finishes the
   * deletion if a crash lands between). `rowCount` is what the new segment must
   * hold; when it is 0 the victims are only deleted.
   */
  async replace(workspace: WorkspaceStore, partition: DayPartition, dayStartMs: number, victims: SealedSegment[], rowCount: number, dropUserIds: readonly number[] = []): Promise<void> {
    const victimRows = rowsOf(victims);
    // Rows a deletion removes are first taken off what start-up must find (a merge keeps them all).
    const endReduction = victimRows > rowCount ? await this.checkpoint.expectFewerRows(workspace.id, victimRows - rowCount, rowCount === 0) : undefined;
    try {
      await this.put(workspace, partition, dayStartMs, victims, rowCount, dropUserIds, endReduction);
    } catch (error) {
      if (endReduction !== undefined) {
        endReduction();
        // Nothing was removed: the count goes back up, or a segment that vanished later with no more rows than the
        // deletion's would pass unnoticed until the next checkpoint. Best effort: a full disk keeps the lower count.
        await this.checkpoint.publishSealedRows().catch((recount: unknown) => log.warn(`restoring the sealed row count after a failed deletion: ${(recount as Error).message}`));
      }
      throw error;
    } finally {
      endReduction?.();
    }
  }

  /** replace's work; `endReduction` is called as the catalog stops holding the victims. */
  private async put(
    workspace: WorkspaceStore,
    partition: DayPartition,
    dayStartMs: number,
    victims: SealedSegment[],
    rowCount: number,
    dropUserIds: readonly number[],
    endReduction: (() => void) | undefined,
  ): Promise<void> {
    const day = dayLabel(dayStartMs);
    let merged: SealedSegment | undefined;
    if (rowCount > 0) {
      // Named under the published checkpoint, so start-up accepts it; the suffix keeps it unique.
      const name = `seg-${String(this.checkpoint.sequence).padStart(12, "0")}-m${(++this.mergeCount).toString(36)}${Date.now().toString(36)}`;
      const target = segmentDirectory(this.dataDir, workspace.id, day, name);
      let result: LoadSegmentResult;
      try {
        result = await this.merge(victims.map((victim) => victim.directory), target, dayStartMs, dropUserIds);
      } catch (error) {
        // The worker may have failed after the rename (its directory fsync): left in place, that segment
        // and a later merge of the same victims would both be adopted at start-up, each with their rows.
        this.abandoned.add(target);
        try {
          this.abandoned.remove();
        } catch {
          // Retried before the next merge pass and the next checkpoint, which wait for it.
        }
        // A victim's files failed their checks (the worker marks it): said as a query's read of it would say it.
        const message = (error as Error).message;
        const damaged = message.startsWith(segmentDamageMarker) ? victims.find((victim) => message.includes(victim.directory)) : undefined;
        if (damaged !== undefined) throw new DamagedSegmentError(damaged.key, message.slice(segmentDamageMarker.length).replaceAll(damaged.directory, damaged.key));
        throw error;
      }
      assert.equal(result.layout.rowCount, rowCount, "merged segment lost rows");
      merged = new SealedSegment(`${workspace.id}/${day}/${name}`, target, dayStartMs, result.layout);
      merged.attach(result);
      merged.uuidsLoaded = victims.every((victim) => victim.uuidsLoaded);
    }
    const kept = partition.sealed.filter((segment) => !victims.includes(segment));
    partition.sealed = merged ? [merged, ...kept] : kept;
    endReduction?.();
    for (const victim of victims) {
      this.cache.release(victim);
      victim.retired = true;
    }
    if (merged) this.cache.admit(merged, merged.layout.memoryBytes);
    // Renamed away before deletion: a kill mid-delete must not leave a victim without its _meta.json.
    // Each victim is renamed before its first await (after one, when a stale tmp_deleted_ of its name is removed first);
    // replace is awaited by its pass, so no pass picks a victim still under its own name.
    await Promise.all(victims.map((victim) => removeDirectoryInPool(victim.directory)));
    if (this.fsync) await fsyncDirectoryInPool(dayDirectory(this.dataDir, workspace.id, day));
  }
}
