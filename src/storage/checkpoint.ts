/**
 * Checkpoint: after commits have grown the active segments, this rotates the
 * WAL, freezes every active segment, seals each into column files in the
 * worker pool, appends the dictionaries, publishes `_checkpoint.json`, and
 * deletes the WAL files it covers. A checkpoint that fails (full or failing
 * disk) changes nothing that counts: its frozen segments stay queryable in
 * memory, the WAL files holding their rows stay, and the next checkpoint
 * seals them again. Merges run after a published checkpoint (onPublished).
 */
import { strict as assert } from "node:assert";
import { limits } from "../config/limits.js";
import type { AbandonedSegments } from "./abandoned-segments.js";
import type { ActiveGrowth } from "./apply.js";
import { encodeCheckpointFile, readCheckpointFile } from "./checkpoint-file.js";
import { injectFault } from "./fault-injection.js";
import { checkpointReservePath, ensureReserve, isOutOfSpace, publishFileAtomicallyInPool, releaseReserve } from "./files.js";
import { checkpointPath, dictionaryPath, segmentDirectory } from "./paths.js";
import type { SegmentCache } from "./segment-cache.js";
import type { LoadSegmentResult } from "./segment-layout.js";
import { dayLabel, SealedSegment, type ActiveSegment } from "./segments.js";
import type { WriteAheadLog } from "./wal.js";
import type { DayPartition, DictionaryBytes, Workspaces, WorkspaceStore } from "./workspace-store.js";
import { log } from "../log.js";

/** Why a checkpoint gives up past the shutdown deadline (its rows stay in the WAL). */
const sealDeadlinePassed = "the shutdown deadline passed before every segment was sealed";

/** An active segment frozen by a checkpoint: in its partition's `sealing` list until sealed. */
interface FrozenSegment {
  workspace: WorkspaceStore;
  partition: DayPartition;
  segment: ActiveSegment;
}

/**
 * How sure the store is of the last `_checkpoint.json` it published: "durable", or renamed into
 * place but its directory fsync failed, so a power loss may still bring the previous one back
 * with the WAL files this one made obsolete (they are kept, and merges wait).
 */
export type PublishState = "durable" | "rename-not-durable";

/** The last published checkpoint, as merges need it: segments they write are named under its sequence. */
export interface PublishedCheckpoint {
  readonly sequence: number;
  readonly state: PublishState;
  /**
   * Publishes `_checkpoint.json` counting `rows` fewer sealed rows of the workspace, before a deletion removes
   * them; the returned function ends the reduction, once the catalog no longer holds those rows. A deletion that
   * `freesSpace` (whole segments, nothing written: expired days) may take the reserve on a full disk.
   */
  expectFewerRows(workspaceId: string, rows: number, freesSpace?: boolean): Promise<() => void>;
  /** Publishes `_checkpoint.json` with the sealed rows as the catalog holds them now (after a deletion that failed). */
  publishSealedRows(): Promise<void>;
}

export class Checkpoints implements PublishedCheckpoint {
  /** The WAL sequence the last published checkpoint names. */
  sequence: number;
  state: PublishState = "durable";
  private running: Promise<boolean> | undefined;
  /** Segments a failed checkpoint froze but did not seal; the next checkpoint seals them first. */
  private unsealed: FrozenSegment[] = [];
  /** No checkpoint starts on its own before this time (after a failure). */
  private retryAtMs = 0;
  /** Checkpoints stop sealing after this time (set by close). */
  sealDeadlineMs = Number.POSITIVE_INFINITY;
  /** Writes of `_checkpoint.json`, one at a time: each counts sealed rows as they stand when it writes. */
  private publishing: Promise<unknown> = Promise.resolve();
  /** Per workspace, rows a deletion under way will remove (expectFewerRows), still in the catalog. */
  private readonly reductions = new Map<string, number>();

  constructor(
    private readonly dataDir: string,
    private readonly fsync: boolean,
    private readonly workspaces: Workspaces,
    private readonly wal: WriteAheadLog,
    private readonly growth: ActiveGrowth,
    private readonly cache: SegmentCache,
    private readonly abandoned: AbandonedSegments,
    /** Seals a frozen segment in the pool (the store's tasks, given at start). */
    private readonly seal: (segment: ActiveSegment, directory: string, workspaceId: string) => Promise<LoadSegmentResult>,
    /** Runs after every checkpoint that published (merges). */
    private readonly onPublished: () => void,
    publishedSequence: number,
  ) {
    this.sequence = publishedSequence;
  }

  /** Rows wait to be sealed: applied since the last checkpoint, or frozen by one that failed. */
  get pending(): boolean {
    return this.growth.rows > 0 || this.unsealed.length > 0;
  }

  /** The checkpoint under way, if any. */
  get inProgress(): Promise<boolean> | undefined {
    return this.running;
  }

  /**
   * Active segments hold rows and property entries in memory until sealed; rows
   * cost ~30 bytes, an entry 8–16, a distinct text ~100 with its map slot. The
   * WAL's byte bound alone would let 512 MiB of all-distinct property values
   * grow to gigabytes, so texts and entries have bounds of their own.
   */
  due(): boolean {
    return (
      this.growth.rows >= limits.checkpointRowsMax ||
      this.growth.propertyEntries >= limits.checkpointPropertyEntriesMax ||
      this.growth.propertyTexts >= limits.checkpointPropertyTextsMax ||
      this.wal.fileBytes >= limits.checkpointWalBytesMax ||
      this.workspaces.activeSegmentsSinceCheckpoint() >= limits.checkpointActiveSegmentsMax
    );
  }

  /** Starts a checkpoint unless one failed less than `checkpointRetryDelayMs` ago. */
  soon(): void {
    if (Date.now() >= this.retryAtMs) void this.checkpoint();
  }

  /**
   * Seals every active segment. Crash-safe at every step: segments are named
   * after the new WAL sequence and ignored at start-up until `_checkpoint.json`
   * names that sequence, which is written only after every segment and the
   * dictionaries are durable. Never rejects: a failure is logged, leaves the
   * rows in the WAL and in memory, and resolves false; a later checkpoint
   * retries.
   */
  checkpoint(): Promise<boolean> {
    if (this.running) return this.running;
    this.running = this.run()
      .then(
        () => {
          this.retryAtMs = 0;
          return true;
        },
        (error: unknown) => {
          this.retryAtMs = Date.now() + limits.checkpointRetryDelayMs;
          log.error(`checkpoint failed, its rows stay in the write-ahead log and in memory; retrying in ${limits.checkpointRetryDelayMs} ms: ${(error as Error).message}`);
          return false;
        },
      )
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  private async run(): Promise<void> {
    // Past the shutdown deadline nothing more is sealed, and nothing is removed either: start-up drops
    // the segments of unpublished checkpoints, and removing them here (an fsync each, thousands after
    // a checkpoint of many days) could outlast the shutdown's own deadline.
    if (this.pastSealDeadline()) throw new Error(sealDeadlinePassed);
    // Before anything else: a failed checkpoint's directories must not survive into a published one.
    this.abandoned.remove();
    // Segments a failed checkpoint froze go first; their rows are in WAL files older than any rotation below.
    const frozen: FrozenSegment[] = this.unsealed;
    this.unsealed = [];
    const written: string[] = [];
    let newSequence: number | undefined;
    const sealed: Array<{ partition: DayPartition; active: ActiveSegment; segment: SealedSegment; result: LoadSegmentResult }> = [];
    let renamedWithoutDirectoryFsync = false;
    try {
      const dictionarySizes = new Map<WorkspaceStore, DictionaryBytes>();
      // Rotation and freezing happen in one synchronous step once the WAL is idle:
      // every row of the old files is in a frozen segment, and no other row is.
      const rotatedSequence = await this.wal.rotate(() => this.workspaces.applyingAnywhere(), () => {
        for (const workspace of this.workspaces.values()) {
          for (const partition of workspace.days.values()) {
            if (partition.active && partition.active.rowCount > 0) {
              frozen.push({ workspace, partition, segment: partition.active });
              partition.sealing.push(partition.active);
              partition.active = undefined;
            }
          }
          dictionarySizes.set(workspace, [workspace.events.size, workspace.users.size, workspace.keys.size]);
          workspace.activeSegmentsSinceCheckpoint = 0;
        }
        this.growth.reset();
      });
      newSequence = rotatedSequence;

      // One seal at a time: a checkpoint may seal a segment for each of many days,
      // and queued all at once they would hold every worker while ingest and
      // queries wait behind them. A failure stops the rest; the catch below
      // removes what was written.
      let segmentNumber = 0;
      for (const { workspace, partition, segment } of frozen) {
        // Past the shutdown deadline the checkpoint gives up like a failed one: its rows stay in the
        // WAL, which the next start replays. (Events spread over thousands of days make thousands of
        // segments, and sealing each costs a few fsyncs.)
        if (this.pastSealDeadline()) throw new Error(sealDeadlinePassed);
        const day = dayLabel(segment.dayStartMs);
        const name = `seg-${String(rotatedSequence).padStart(12, "0")}-${String(++segmentNumber).padStart(6, "0")}`;
        const directory = segmentDirectory(this.dataDir, workspace.id, day, name);
        written.push(directory);
        const result = await this.seal(segment, directory, workspace.id);
        assert.equal(result.layout.rowCount, segment.rowCount, "sealed segment lost rows");
        sealed.push({ partition, active: segment, segment: new SealedSegment(`${workspace.id}/${day}/${name}`, directory, segment.dayStartMs, result.layout), result });
      }

      for (const [workspace, [events, users, keys]] of dictionarySizes) {
        await workspace.events.persist(dictionaryPath(this.dataDir, workspace.id, "events"), events, this.fsync);
        await workspace.users.persist(dictionaryPath(this.dataDir, workspace.id, "users"), users, this.fsync);
        await workspace.keys.persist(dictionaryPath(this.dataDir, workspace.id, "keys"), keys, this.fsync);
      }
      injectFault("checkpoint.publish", checkpointPath(this.dataDir));
      await this.serially(() =>
        publishFileAtomicallyInPool(
          checkpointPath(this.dataDir),
          encodeCheckpointFile({ walSequence: rotatedSequence, dictionaryBytes: this.workspaces.dictionaryBytes(), sealedRows: this.sealedRows(sealed) }),
          this.fsync,
        ),
      );
      // As if the directory fsync that ends the publish had failed, after the rename.
      injectFault("checkpoint.directory-fsync", checkpointPath(this.dataDir));
    } catch (error) {
      // If only the directory fsync after the rename failed, `_checkpoint.json` already names the new
      // sequence and start-up would believe it: the segments stay and the checkpoint counts as done,
      // but the old WAL files are kept until a checkpoint publishes cleanly (or the next start-up).
      renamedWithoutDirectoryFsync = newSequence !== undefined && this.sequenceOnDisk() === newSequence;
      if (!renamedWithoutDirectoryFsync) {
        this.unsealed = frozen;
        this.abandoned.add(...written);
        try {
          // Past the deadline no checkpoint can publish any more (see the top of run).
          if (!this.pastSealDeadline()) this.abandoned.remove();
        } catch {
          // Retried before the next checkpoint, which cannot start until it succeeds.
        }
        throw error;
      }
      log.error(`checkpoint ${newSequence} published, but not made durable: ${(error as Error).message}`);
    }
    assert(newSequence !== undefined, "a published checkpoint rotated the WAL");
    this.sequence = newSequence;

    // The sealed form replaces the frozen one in memory, already loaded.
    for (const { partition, active, segment, result } of sealed) {
      segment.attach(result);
      this.cache.admit(segment, result.layout.memoryBytes);
      partition.sealing.splice(partition.sealing.indexOf(active), 1);
      partition.sealed.push(segment);
    }
    this.state = renamedWithoutDirectoryFsync ? "rename-not-durable" : "durable";
    this.keepReserve();
    this.onPublished();
    if (this.state === "rename-not-durable") return;
    try {
      await this.wal.deleteBeforeInPool(newSequence);
    } catch (error) {
      // The checkpoint is published; start-up skips WAL files it covers, and the next checkpoint deletes them.
      log.error(`deleting sealed write-ahead log files: ${(error as Error).message}`);
    }
  }

  async expectFewerRows(workspaceId: string, rows: number, freesSpace = false): Promise<() => void> {
    this.reductions.set(workspaceId, (this.reductions.get(workspaceId) ?? 0) + rows);
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      const left = this.reductions.get(workspaceId)! - rows;
      if (left === 0) this.reductions.delete(workspaceId);
      else this.reductions.set(workspaceId, left);
    };
    try {
      await this.publishSealedRows(freesSpace);
    } catch (error) {
      end();
      throw error;
    }
    return end;
  }

  /**
   * Publishes `_checkpoint.json` as it is (its sequence and dictionary lengths may be newer than this object knows
   * while a checkpoint publishes) with the sealed rows counted now: lower than what stays on disk whatever a crash
   * interrupts next. `freesSpace`: see expectFewerRows.
   */
  publishSealedRows(freesSpace = false): Promise<void> {
    return this.serially(async () => {
      // As before any publish: a failed merge's output must not be adopted with rows this count leaves out.
      this.abandoned.remove();
      const file = readCheckpointFile(this.dataDir);
      if (file.sealedRows === undefined) return;
      const publish = () => publishFileAtomicallyInPool(checkpointPath(this.dataDir), encodeCheckpointFile({ ...file, sealedRows: this.sealedRows([]) }), this.fsync);
      try {
        await publish();
      } catch (error) {
        // A full disk: a deletion (expired days) is how space comes back, so the reserve gives way to its count.
        if (!freesSpace || !isOutOfSpace(error) || !releaseReserve(this.dataDir)) throw error;
        log.warn(`disk full: released ${checkpointReservePath(this.dataDir)} so that a deletion can record what it removes`);
        await publish();
      }
    });
  }

  /**
   * Per workspace, the rows of its sealed segments in the catalog and of `sealing` (a checkpoint's, about to join
   * it), less those a deletion under way will remove: what start-up must find at least, once this is published.
   */
  private sealedRows(sealing: ReadonlyArray<{ segment: SealedSegment }>): Map<string, number> {
    const rows = new Map<string, number>();
    for (const workspace of this.workspaces.values()) {
      rows.set(workspace.id, workspace.sealedRows() - (this.reductions.get(workspace.id) ?? 0));
    }
    for (const { segment } of sealing) {
      const workspaceId = segment.key.slice(0, segment.key.indexOf("/"));
      rows.set(workspaceId, (rows.get(workspaceId) ?? 0) + segment.layout.rowCount);
    }
    return rows;
  }

  /** Puts the reserve back once there is room (after a checkpoint, or a deletion freed space); a full disk leaves it for later. */
  keepReserve(): void {
    try {
      ensureReserve(this.dataDir);
    } catch (error) {
      if (!isOutOfSpace(error)) log.warn(`could not write ${checkpointReservePath(this.dataDir)}: ${(error as Error).message}`);
    }
  }

  /** Runs a write of `_checkpoint.json` after those already under way. */
  private serially<T>(write: () => Promise<T>): Promise<T> {
    const result = this.publishing.then(write);
    this.publishing = result.catch(() => undefined);
    return result;
  }

  /** The WAL sequence `_checkpoint.json` names now; undefined when it is absent or unreadable. */
  private sequenceOnDisk(): number | undefined {
    try {
      return readCheckpointFile(this.dataDir).walSequence;
    } catch {
      return undefined;
    }
  }

  private pastSealDeadline(): boolean {
    return Date.now() > this.sealDeadlineMs;
  }
}
