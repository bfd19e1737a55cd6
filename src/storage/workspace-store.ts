/**
 * One workspace's share of the store — its dictionaries, uuid set, cardinality
 * caps and day partitions (sealed, sealing and active segments per UTC day) —
 * and the catalog of every workspace, opened on first use. Commit, apply,
 * checkpoint, merge and recovery all work on these; none owns them.
 */
import { CardinalityReservations } from "./cardinality.js";
import { Dictionary } from "./dictionary.js";
import { makeDirectoryDurably } from "./files.js";
import { dictionaryPath, workspaceDirectory } from "./paths.js";
import { ActiveSegment, dayLabel, dayMs, rowsOf, type SealedSegment } from "./segments.js";
import { UuidSet } from "./uuid-set.js";

/** Byte lengths of a workspace's events, users and keys dictionaries. */
export type DictionaryBytes = [number, number, number];

export interface DayPartition {
  sealed: SealedSegment[];
  /** Frozen at a checkpoint and being sealed; still queried from memory. */
  sealing: ActiveSegment[];
  active: ActiveSegment | undefined;
}

export class WorkspaceStore {
  readonly events: Dictionary;
  readonly users: Dictionary;
  readonly keys: Dictionary;
  readonly uuids = new UuidSet();
  readonly cardinality = new CardinalityReservations();
  /**
   * True while sealed segments' uuids are still being added to `uuids` (start-up
   * rebuilds the set in the background, so queries are served at once); a commit
   * that carries uuids waits for `uuidsReady` first.
   */
  uuidsPending = false;
  uuidsReady: Promise<void> = Promise.resolve();
  markUuidsReady: () => void = () => {};
  readonly days = new Map<number, DayPartition>();
  /**
   * The applies of this workspace still running in slices, chained in WAL
   * order (see Applier.applyDurable); undefined when none is.
   */
  applying: Promise<void> | undefined;
  private activeSequence = 0;
  /** Active segments opened since the last checkpoint froze them (Checkpoints.due bounds them). */
  activeSegmentsSinceCheckpoint = 0;

  constructor(
    readonly id: string,
    readonly directory: string,
    dataDir: string,
    fsync = true,
    /** Bytes of each dictionary the last checkpoint made durable (recovery: damage below them is corruption). */
    durableBytes: readonly [number, number, number] = [0, 0, 0],
  ) {
    makeDirectoryDurably(directory, fsync);
    this.events = Dictionary.load(dictionaryPath(dataDir, id, "events"), fsync, durableBytes[0]);
    this.users = Dictionary.load(dictionaryPath(dataDir, id, "users"), fsync, durableBytes[1], false);
    this.keys = Dictionary.load(dictionaryPath(dataDir, id, "keys"), fsync, durableBytes[2]);
  }

  /** Rows of its sealed segments, every day. */
  sealedRows(): number {
    let rows = 0;
    for (const partition of this.days.values()) rows += rowsOf(partition.sealed);
    return rows;
  }

  partition(dayStartMs: number): DayPartition {
    let partition = this.days.get(dayStartMs);
    if (partition === undefined) {
      partition = { sealed: [], sealing: [], active: undefined };
      this.days.set(dayStartMs, partition);
    }
    return partition;
  }

  activeSegment(dayStartMs: number): ActiveSegment {
    const partition = this.partition(dayStartMs);
    if (partition.active === undefined) {
      partition.active = new ActiveSegment(`${this.id}/${dayLabel(dayStartMs)}/active-${++this.activeSequence}`, dayStartMs);
      this.activeSegmentsSinceCheckpoint++;
    }
    return partition.active;
  }

  /** Segments overlapping [fromMs, toMs), day order. Loading of sealed ones is the caller's. */
  segmentsIn(fromMs: number, toMs: number): Array<SealedSegment | ActiveSegment> {
    const days = [...this.days.keys()].filter((day) => day + dayMs > fromMs && day < toMs).sort((a, b) => a - b);
    const segments: Array<SealedSegment | ActiveSegment> = [];
    for (const day of days) {
      const partition = this.days.get(day)!;
      segments.push(...partition.sealed, ...partition.sealing);
      if (partition.active && partition.active.rowCount > 0) segments.push(partition.active);
    }
    return segments;
  }

  get userCount(): number {
    return this.users.size;
  }
}

/** Every workspace of the store, by id; a workspace is opened (its directory made, its dictionaries loaded) on first use. */
export class Workspaces {
  readonly byId = new Map<string, WorkspaceStore>();

  constructor(
    private readonly dataDir: string,
    private readonly fsync: boolean,
    /** Per workspace, the dictionary bytes the checkpoint found at start-up made durable (see checkpoint-file.ts). */
    private readonly durableDictionaryBytes: ReadonlyMap<string, DictionaryBytes>,
  ) {}

  open(workspaceId: string): WorkspaceStore {
    let workspace = this.byId.get(workspaceId);
    if (workspace === undefined) {
      workspace = new WorkspaceStore(workspaceId, workspaceDirectory(this.dataDir, workspaceId), this.dataDir, this.fsync, this.durableDictionaryBytes.get(workspaceId));
      this.byId.set(workspaceId, workspace);
    }
    return workspace;
  }

  values(): IterableIterator<WorkspaceStore> {
    return this.byId.values();
  }

  /** A chunk some workspace is still applying in slices, or undefined when none is. */
  applyingAnywhere(): Promise<void> | undefined {
    for (const workspace of this.byId.values()) if (workspace.applying) return workspace.applying;
    return undefined;
  }

  hasActiveRows(): boolean {
    for (const workspace of this.byId.values()) for (const partition of workspace.days.values()) if (partition.active?.rowCount) return true;
    return false;
  }

  /** Each distinct day a chunk touches opens an active segment (tens of KiB before its first row): days arriving in random order must not pile them up. */
  activeSegmentsSinceCheckpoint(): number {
    let count = 0;
    for (const workspace of this.byId.values()) count += workspace.activeSegmentsSinceCheckpoint;
    return count;
  }

  /** Every workspace's durable dictionary lengths, for `_checkpoint.json`. */
  dictionaryBytes(): Map<string, DictionaryBytes> {
    const bytes = new Map<string, DictionaryBytes>();
    for (const workspace of this.byId.values()) bytes.set(workspace.id, [workspace.events.durableBytes, workspace.users.durableBytes, workspace.keys.durableBytes]);
    return bytes;
  }
}
