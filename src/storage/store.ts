/**
 * The store: every workspace's dictionaries, sealed segments and active
 * segments, the WAL, checkpoints and crash recovery, behind the one API that
 * ingest, query and main use. It lives on the main thread, which is the single
 * writer: chunks are applied here in WAL order, so dictionary ids and uuid
 * dedupe need no locks. CPU-heavy work — sorting and encoding segments,
 * reading them back — runs in the worker pool (StoreTasks).
 *
 * Life of a row: worker encodes a chunk → commit.ts checks uuids, appends a
 * WAL record → after the group's fdatasync apply.ts puts the chunk into the
 * active segment of its (workspace, UTC day) → the request is answered. Later
 * checkpoint.ts seals active segments into column files and merge-scheduler.ts
 * folds each day's into one; snapshot.ts and segment-cache.ts serve them to
 * queries; recovery.ts opens it all again after a stop or a crash. This class
 * owns none of that work: it builds the units, wires them, runs the idle timer
 * and orders the shutdown.
 */
import { limits } from "../config/limits.js";
import { AbandonedSegments } from "./abandoned-segments.js";
import { Applier } from "./apply.js";
import type { DecodedChunk } from "./chunk-codec.js";
import { Checkpoints } from "./checkpoint.js";
import { Committer, type CommitResult } from "./commit.js";
import { MergeScheduler } from "./merge-scheduler.js";
import { recoverStore, warmUuids } from "./recovery.js";
import { SegmentCache } from "./segment-cache.js";
import type { LoadSegmentResult } from "./segment-layout.js";
import type { ActiveSegment } from "./segments.js";
import { takeSnapshot, type Snapshot } from "./snapshot.js";
import type { RetentionPolicy } from "../config/config.js";
import { dropExpiredDays, type RetentionPass } from "./retention.js";
import { deleteUserEvents, type UserDeletion } from "./user-deletion.js";
import type { WriteAheadLog } from "./wal.js";
import type { Workspaces, WorkspaceStore } from "./workspace-store.js";
import { log } from "../log.js";

export { ActiveSegment, SealedSegment, dayLabel, dayMs } from "./segments.js";
export { WorkspaceStore } from "./workspace-store.js";
export type { CommitResult } from "./commit.js";
export { UserDeletionError, UserDeletionInterrupted, type UserDeletion } from "./user-deletion.js";

export interface StoreTasks {
  seal(segment: ActiveSegment, directory: string, workspaceId: string): Promise<LoadSegmentResult>;
  load(directory: string): Promise<LoadSegmentResult>;
  merge(directories: string[], target: string, dayStartMs: number, dropUserIds: readonly number[]): Promise<LoadSegmentResult>;
}

/** Open: commits accepted; closing: the final checkpoint is under way, no merge starts; closed: the WAL is closed. */
type StoreState = "open" | "closing" | "closed";

export class Store {
  readonly workspaces: Map<string, WorkspaceStore>;
  private state: StoreState = "open";
  private tasks!: StoreTasks;
  private checkpointTimer: NodeJS.Timeout | undefined;
  /**
   * When ingest last did something: a commit, or a request (noteIngest), even
   * one that stores nothing. Idle work — the idle checkpoint, merging every
   * day — waits until this is a few seconds old: refused 20 MiB bodies keep a
   * worker busy too, and a merge beside them doubled their answer time.
   */
  private lastIngestAtMs = 0;
  private readonly catalog: Workspaces;
  private readonly wal: WriteAheadLog;
  private readonly cache: SegmentCache;
  private readonly checkpoints: Checkpoints;
  private readonly merges: MergeScheduler;
  private readonly committer: Committer;
  private readonly rowsStoredListeners: Array<(workspaceId: string) => void> = [];

  private constructor(
    readonly dataDir: string,
    fsync: boolean,
    private readonly applier: Applier,
    recovered: ReturnType<typeof recoverStore>,
  ) {
    this.catalog = recovered.workspaces;
    this.workspaces = this.catalog.byId;
    this.wal = recovered.wal;
    // Tasks are read at each use: they are given at start, after recovery built the units.
    this.cache = new SegmentCache(this.catalog, (directory) => this.tasks.load(directory));
    const abandoned = new AbandonedSegments(fsync);
    this.checkpoints = new Checkpoints(
      dataDir,
      fsync,
      this.catalog,
      this.wal,
      applier.growth,
      this.cache,
      abandoned,
      (segment, directory, workspaceId) => this.tasks.seal(segment, directory, workspaceId),
      () => this.merges.schedule(),
      recovered.checkpointSequence,
    );
    this.checkpoints.keepReserve();
    this.merges = new MergeScheduler(
      dataDir,
      fsync,
      this.catalog,
      this.cache,
      abandoned,
      this.checkpoints,
      (directories, target, dayStartMs, dropUserIds) => this.tasks.merge(directories, target, dayStartMs, dropUserIds),
      () => this.lastIngestAtMs,
      () => this.state !== "open",
    );
    this.committer = new Committer(this.catalog, this.wal, applier, () => this.state === "closed", () => {
      this.lastIngestAtMs = Date.now();
      if (this.checkpoints.due()) this.checkpoints.soon();
    });
  }

  /** Recovers the store: drops unpublished segments, loads dictionaries and segment catalogs, replays the WAL. */
  static open(dataDir: string, fsync: boolean): Store {
    const applier = new Applier();
    return new Store(dataDir, fsync, applier, recoverStore(dataDir, fsync, applier));
  }

  /** Starts background checkpoints; `tasks` runs seal and load work in the pool. */
  start(tasks: StoreTasks): void {
    this.tasks = tasks;
    void warmUuids(this.catalog);
    this.merges.schedule();
    // Rows are sealed once ingest pauses for a few seconds, and at least every
    // checkpointIntervalMs: queries over sealed rows are far faster than scans of
    // active segments, and a restart replays less. The interval runs from the
    // first tick that finds rows to seal, not from the last checkpoint: after a
    // quiet spell, the first second of new ingest was sealed at once, a tiny
    // segment for every day it touched, each paying a seal's fsyncs.
    let lastCheckpointAtMs = Date.now();
    this.checkpointTimer = setInterval(() => {
      const nowMs = Date.now();
      // Idle workspaces drop uuids past the horizon too.
      const oldestInFlight = this.committer.oldestCommitInFlight();
      for (const workspace of this.catalog.values()) workspace.uuids.advance(nowMs, oldestInFlight);
      if (this.merges.deferred && nowMs - this.lastIngestAtMs >= limits.checkpointIdleMs) this.merges.schedule();
      if (!this.checkpoints.pending) {
        lastCheckpointAtMs = nowMs;
        return;
      }
      if (nowMs - this.lastIngestAtMs < limits.checkpointIdleMs && nowMs - lastCheckpointAtMs < limits.checkpointIntervalMs) return;
      lastCheckpointAtMs = nowMs;
      this.checkpoints.soon();
    }, Math.min(1000, limits.checkpointIntervalMs, limits.checkpointIdleMs));
    this.checkpointTimer.unref();
  }

  workspace(workspaceId: string): WorkspaceStore {
    return this.catalog.open(workspaceId);
  }

  get writeQueueBytes(): number {
    return this.wal.queuedBytes;
  }

  /** Rows applied since start (replayed ones included), for figures. */
  get rowsApplied(): number {
    return this.applier.rowsApplied;
  }

  /** See Committer.commit: resolves once the chunk is durable and its rows are visible to queries. */
  async commit(workspaceId: string, chunkBuffer: ArrayBuffer): Promise<CommitResult> {
    const result = await this.committer.commit(workspaceId, chunkBuffer);
    if (result.storedCount > 0) for (const listener of this.rowsStoredListeners) listener(workspaceId);
    return result;
  }

  /** Calls `listener` with a workspace's id after each commit that stored rows in it, before the commit resolves (live queries re-run on it). */
  onRowsStored(listener: (workspaceId: string) => void): void {
    this.rowsStoredListeners.push(listener);
  }

  /** Appends a decoded chunk's rows to the active segments of their days at once (replay; the WAL is the caller's). */
  apply(workspace: WorkspaceStore, chunk: DecodedChunk): void {
    this.applier.apply(workspace, chunk);
  }

  /** See Checkpoints.checkpoint: seals every active segment; resolves false (never rejects) when it failed. */
  checkpoint(): Promise<boolean> {
    return this.checkpoints.checkpoint();
  }

  /**
   * Descriptors of every segment a query over [fromMs, toMs) must read, loading sealed ones as needed; active
   * segments carry the entries of `filterKeyIds`, and their texts unless `withTexts` is false.
   */
  snapshot(workspaceId: string, fromMs: number, toMs: number, filterKeyIds: readonly number[], withTexts = true): Promise<Snapshot> {
    return takeSnapshot(this.catalog, this.cache, workspaceId, fromMs, toMs, filterKeyIds, withTexts);
  }

  /** Bytes of segment columns held in memory. */
  get residentSegmentBytes(): number {
    return this.cache.residentBytes;
  }

  /** Sealed segments and their column bytes on disk, for metrics (walks the catalog in memory, not the disk). */
  sealedSegmentTotals(): { count: number; bytes: number } {
    let count = 0;
    let bytes = 0;
    for (const workspace of this.workspaces.values()) {
      for (const partition of workspace.days.values()) {
        count += partition.sealed.length;
        for (const sealed of partition.sealed) bytes += sealed.layout.memoryBytes;
      }
    }
    return { count, bytes };
  }

  /** The uuid sets' bytes, and the shortest retry window among the sets that took uuids: seconds since the receipt time each remembers from. */
  uuidTotals(nowMs = Date.now()): { bytes: number; windowSeconds: number | undefined } {
    let bytes = 0;
    let sinceMs: number | undefined;
    for (const workspace of this.workspaces.values()) {
      bytes += workspace.uuids.byteLength;
      // A set that never took a uuid remembers from its period's start, no later than one that did: it changes nothing.
      if (workspace.uuids.tookUuids) sinceMs = Math.max(sinceMs ?? -Infinity, workspace.uuids.rememberedSinceMs);
    }
    return { bytes, windowSeconds: sinceMs === undefined ? undefined : Math.max(0, (nowMs - sinceMs) / 1000) };
  }

  /** Counts an ingest request as activity, whatever it stores (see lastIngestAtMs). */
  noteIngest(atMs: number): void {
    if (atMs > this.lastIngestAtMs) this.lastIngestAtMs = atMs;
  }

  /** See deleteUserEvents: every event of `distinctId` stored so far, gone from answers and from disk once it resolves. */
  deleteUser(workspaceId: string, distinctId: string): Promise<UserDeletion> {
    return deleteUserEvents({ workspaces: this.catalog, cache: this.cache, checkpoints: this.checkpoints, merges: this.merges }, workspaceId, distinctId);
  }

  /** See dropExpiredDays: removes the sealed segments of every whole day past its workspace's retention. */
  dropExpiredDays(retentionOf: (workspaceId: string) => RetentionPolicy, nowMs: number): Promise<RetentionPass> {
    return dropExpiredDays(this.dataDir, this.catalog, this.merges, retentionOf, nowMs);
  }

  /** The merge pass under way, if any: resolves when it ends. */
  get mergePass(): Promise<void> | undefined {
    return this.merges.inProgress;
  }

  /** Merges every day that holds several sealed segments into one now, busy or not (maintenance, tests). */
  mergeAll(): Promise<void> {
    return this.merges.mergeAll();
  }

  /**
   * Seals what is active (a faster next start) and closes the WAL. Sealing stops
   * at `deadlineMs`: the final checkpoint is then abandoned, which loses nothing.
   */
  async close(deadlineMs = Number.POSITIVE_INFINITY): Promise<void> {
    if (this.state === "closed") return;
    this.state = "closing";
    this.checkpoints.sealDeadlineMs = deadlineMs;
    clearInterval(this.checkpointTimer);
    await this.merges.inProgress;
    await this.wal.idle();
    for (let applying = this.catalog.applyingAnywhere(); applying; applying = this.catalog.applyingAnywhere()) await applying.catch(() => {});
    if (this.checkpoints.inProgress) await this.checkpoints.inProgress;
    if (this.checkpoints.pending || this.catalog.hasActiveRows()) {
      if (!(await this.checkpoints.checkpoint())) log.error("the final checkpoint failed; the next start replays the write-ahead log");
    }
    this.state = "closed";
    await this.wal.close();
  }
}
