/**
 * The store: every workspace's dictionaries, sealed segments and active
 * segments, the WAL, checkpoints and crash recovery. It lives on the main
 * thread, which is the single writer: chunks are applied here in WAL order, so
 * dictionary ids and uuid dedupe need no locks. CPU-heavy work — sorting and
 * encoding segments, reading them back — runs in the worker pool.
 *
 * Life of a row: worker encodes a chunk → `commit` checks uuids, appends a WAL
 * record → after the group's fdatasync the chunk is applied to the active
 * segment of its (workspace, UTC day) → the request is answered. A checkpoint
 * later rotates the WAL, freezes every active segment, seals each into column
 * files, appends the dictionaries, publishes `_checkpoint.json`, and deletes
 * the old WAL files. A checkpoint that fails (full or failing disk) changes
 * nothing that counts: its frozen segments stay queryable in memory, the WAL
 * files holding their rows stay, and the next checkpoint seals them again.
 */
import { strict as assert } from "node:assert";
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { limits, mainThreadSegmentCacheBytesMax } from "../config/limits.js";
import { decodeChunk, filterChunk, type DecodedChunk } from "./chunk-codec.js";
import { ActiveProperties, ValueIdCache } from "./active-properties.js";
import { CardinalityReservations, type RowRefusal } from "./cardinality.js";
import { SharedColumn } from "./column-builder.js";
import { encodeCheckpointFile, readCheckpointFile } from "./checkpoint-file.js";
import { StoreCorruptionError } from "./corruption.js";
import { Dictionary } from "./dictionary.js";
import { injectFault } from "./fault-injection.js";
import { fsyncDirectory, makeDirectoryDurably, publishFileAtomically, removeDirectory } from "./files.js";
import {
  checkpointPath,
  dayDirectory,
  dictionaryPath,
  isWorkspaceId,
  segmentDirectory,
  walFilePath,
  workspaceDirectory,
  workspacesDirectory,
} from "./paths.js";
import type { ActiveSegmentDescriptor, SealedSegmentDescriptor, SegmentDescriptor } from "./segment-descriptor.js";
import { SegmentCorruptError, type LoadSegmentResult, type SegmentLayout } from "./segment-layout.js";
import { readSegmentLayout, readSegmentUuids, segmentExists, verifySegment } from "./segment-reader.js";
import { UuidSet } from "./uuid-set.js";
import { encodeRecord, listWalSequences, scanWalFile, truncateWalFile, WriteAheadLog } from "./wal.js";
import { log } from "../log.js";

export const dayMs = 86_400_000;
/** Days larger than this are left as several segments rather than rewritten whole. */
const mergeRowsMax = 20_000_000;
/**
 * While ingest is busy, a day is merged only once it holds this many sealed
 * segments. Merging at every checkpoint rewrote each day's rows again and
 * again — work quadratic in a day's rows, taken from the workers that parse
 * ingest — while a query pays little for a few more segments. When ingest
 * pauses, every day is merged into one segment.
 */
const busyMergeSegmentsMin = 8;

/**
 * After a failed checkpoint, the next one waits this long: a disk that is full
 * or failing would otherwise be asked again on every commit that crosses the
 * row threshold, each attempt rotating the WAL into one more file.
 */
const checkpointRetryDelayMs = 1_000;
/** Why a checkpoint gives up past the shutdown deadline (its rows stay in the WAL). */
const sealDeadlinePassed = "the shutdown deadline passed before every segment was sealed";

/** A chunk with more property keys or entries than these is applied in slices (Store.applyDurable). */
const applyAtOnceKeysMax = 4_096;
const applyAtOnceEntriesMax = 65_536;
/** Longest the main thread applies one chunk without letting other work run. */
const applySliceMs = 8;
/** Keys, and entries, applied between looks at the clock. */
const applyClockKeys = 256;
const applyClockEntries = 16_384;

/** Where each row of a chunk being applied went. */
interface AppliedRows {
  rowSegment: ActiveSegment[];
  rowIndex: Uint32Array;
  textsAdded: number;
}

/**
 * When a sealed segment was written (sealed, or merged): a time no earlier than
 * the receipt of any of its rows, which the store keeps nowhere else. Its
 * directory's, as the files were created in it just before it was renamed into
 * place; a merge rewrites old rows and so counts them as received anew.
 */
function writtenAtMs(directory: string): number {
  return statSync(directory).mtimeMs;
}

/**
 * Reads a published segment's layout or, with `layout`, checks every file of
 * it: a damaged sealed segment refuses the start (repair moves it aside)
 * rather than failing queries later or answering from flipped bits.
 */
function checkedSegment(directory: string, layout?: SegmentLayout): SegmentLayout {
  try {
    if (layout === undefined) return readSegmentLayout(directory);
    verifySegment(directory, layout);
    return layout;
  } catch (error) {
    if (error instanceof SegmentCorruptError) throw new StoreCorruptionError(directory, undefined, `damaged sealed segment (${error.message})`);
    throw error;
  }
}

export function dayLabel(dayStartMs: number): string {
  return new Date(dayStartMs).toISOString().slice(0, 10);
}

export class ActiveSegment {
  rowCount = 0;
  readonly time = new SharedColumn(Uint32Array, 1);
  readonly user = new SharedColumn(Uint32Array, 1);
  readonly event = new SharedColumn(Uint32Array, 1);
  readonly uuidPresent = new SharedColumn(Uint8Array, 1);
  readonly uuid = new SharedColumn(Uint8Array, 16);
  readonly properties = new ActiveProperties();

  constructor(
    readonly key: string,
    readonly dayStartMs: number,
  ) {}

  /** Reserves one row; columns grow by doubling. */
  appendRow(): number {
    const row = this.rowCount++;
    if (row >= this.time.values.length) {
      const rows = this.rowCount;
      this.time.ensureRows(rows);
      this.user.ensureRows(rows);
      this.event.ensureRows(rows);
      this.uuidPresent.ensureRows(rows);
      this.uuid.ensureRows(rows);
    }
    return row;
  }

  describe(filterKeyIds: readonly number[]): ActiveSegmentDescriptor {
    const properties: ActiveSegmentDescriptor["properties"] = [];
    for (const keyId of filterKeyIds) {
      const slot = this.properties.slotOf(keyId);
      if (slot >= 0) properties.push(this.properties.entries(slot));
    }
    return {
      kind: "active",
      key: this.key,
      dayStartMs: this.dayStartMs,
      rowCount: this.rowCount,
      time: this.time.buffer,
      user: this.user.buffer,
      event: this.event.buffer,
      properties,
    };
  }
}

class RetiredSegmentError extends Error {}

export class SealedSegment {
  memory: SharedArrayBuffer | undefined;
  /** Set when a merge replaced this segment: it must not be described again. */
  retired = false;
  /** Its uuids are in the workspace's set (new segments: their rows' uuids were claimed at commit), or were written beyond the uuid horizon. */
  uuidsLoaded = true;
  private layoutJson: string | undefined;
  loading: Promise<void> | undefined;
  lastUsed = 0;

  constructor(
    readonly key: string,
    readonly directory: string,
    readonly dayStartMs: number,
    public layout: SegmentLayout,
  ) {}

  attach(result: LoadSegmentResult): void {
    this.layout = result.layout;
    this.memory = result.memory;
  }

  describe(): SealedSegmentDescriptor {
    assert(this.memory, "segment must be loaded before it is described");
    this.layoutJson ??= JSON.stringify(this.layout);
    return { kind: "sealed", key: this.key, dayStartMs: this.dayStartMs, layoutJson: this.layoutJson, memory: this.memory };
  }
}

interface DayPartition {
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
   * order (see Store.applyDurable); undefined when none is.
   */
  applying: Promise<void> | undefined;
  private activeSequence = 0;
  /** Active segments opened since the last checkpoint froze them (Store.checkpointDue bounds them). */
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
    this.users = Dictionary.load(dictionaryPath(dataDir, id, "users"), fsync, durableBytes[1]);
    this.keys = Dictionary.load(dictionaryPath(dataDir, id, "keys"), fsync, durableBytes[2]);
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

export interface CommitResult {
  /** Rows stored (uuid repeats of earlier events removed). */
  storedCount: number;
  /** Rows refused by a cardinality cap, in row order (rows of the chunk as committed). */
  refusals: RowRefusal[];
}

/** An active segment frozen by a checkpoint: in its partition's `sealing` list until sealed. */
interface FrozenSegment {
  workspace: WorkspaceStore;
  partition: DayPartition;
  segment: ActiveSegment;
}

export interface StoreTasks {
  seal(segment: ActiveSegment, directory: string, workspaceId: string): Promise<LoadSegmentResult>;
  load(directory: string): Promise<LoadSegmentResult>;
  merge(directories: string[], target: string, dayStartMs: number): Promise<LoadSegmentResult>;
}

export class Store {
  readonly workspaces = new Map<string, WorkspaceStore>();
  private wal!: WriteAheadLog;
  private checkpointSequence = 0;
  private checkpointRunning: Promise<boolean> | undefined;
  /** Counted when rows are applied to active segments; each bounds the memory they hold (see checkpointDue). */
  private rowsSinceCheckpoint = 0;
  private propertyEntriesSinceCheckpoint = 0;
  private propertyTextsSinceCheckpoint = 0;
  private checkpointTimer: NodeJS.Timeout | undefined;
  /** Segments a failed checkpoint froze but did not seal; the next checkpoint seals them first. */
  private unsealed: FrozenSegment[] = [];
  /**
   * Segment directories (and their tmp_ forms) a failed checkpoint may have
   * written. They must be gone before any later checkpoint publishes: its
   * higher sequence would make start-up adopt them, next to the same rows
   * sealed again.
   */
  private abandonedSegments: string[] = [];
  /**
   * Set while the last published `_checkpoint.json` was renamed into place but
   * its directory fsync failed: a power loss may still bring the previous one
   * back, with the WAL files this one made obsolete (they are kept).
   */
  private publishUncertain = false;
  /** No checkpoint starts on its own before this time (after a failure). */
  private checkpointRetryAtMs = 0;
  private closed = false;
  private tasks!: StoreTasks;
  private cachedBytes = 0;
  private useClock = 0;
  /** Rows applied since start, for figures. */
  rowsApplied = 0;
  private commitSequence = 0;
  /** Scratch of the apply loop; applies of different chunks may interleave (slices), but each run of a key starts afresh. */
  private readonly valueIdCache = new ValueIdCache();
  private closing = false;
  /**
   * When ingest last did something: a commit, or a request (noteIngest), even
   * one that stores nothing. Idle work — the idle checkpoint, merging every
   * day — waits until this is a few seconds old: refused 20 MiB bodies keep a
   * worker busy too, and a merge beside them doubled their answer time.
   */
  private lastIngestAtMs = 0;
  private mergeRunning: Promise<void> | undefined;
  private mergeWanted = false;
  /** A merge pass left a day unmerged because ingest was busy; the idle timer runs another. */
  private mergesDeferred = false;
  /** Checkpoints stop sealing after this time (set by close). */
  private sealDeadlineMs = Number.POSITIVE_INFINITY;
  private mergeCount = 0;
  /** Commits that claimed uuids and are not yet durable, by commit id. */
  private readonly commitsInFlight = new Map<number, Promise<void>>();
  /** Per workspace, the dictionary bytes the last published checkpoint made durable (see checkpoint-file.ts). */
  private durableDictionaryBytes = new Map<string, [number, number, number]>();

  private constructor(
    readonly dataDir: string,
    private readonly fsync: boolean,
  ) {}

  /** Recovers the store: drops unpublished segments, loads dictionaries and segment catalogs, replays the WAL. */
  static open(dataDir: string, fsync: boolean): Store {
    const store = new Store(dataDir, fsync);
    makeDirectoryDurably(workspacesDirectory(dataDir), fsync);
    const checkpoint = readCheckpointFile(dataDir);
    store.checkpointSequence = checkpoint.walSequence;
    store.durableDictionaryBytes = checkpoint.dictionaryBytes;
    for (const [workspaceId, bytes] of checkpoint.dictionaryBytes) {
      if (bytes.some((length) => length > 0) && !existsSync(workspaceDirectory(dataDir, workspaceId))) {
        throw new StoreCorruptionError(workspaceDirectory(dataDir, workspaceId), undefined, "missing, though a checkpoint made its dictionaries durable");
      }
    }

    for (const workspaceId of readdirSync(workspacesDirectory(dataDir))) {
      if (!isWorkspaceId(workspaceId)) continue;
      const workspace = store.workspace(workspaceId);
      // Entries a killed process created (a day directory, a dictionary) may still be in the page cache only.
      if (fsync) fsyncDirectory(workspace.directory);
      for (const day of readdirSync(workspace.directory)) {
        if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) continue;
        const dayStartMs = Date.parse(`${day}T00:00:00Z`);
        let removed = false;
        const layouts = new Map<string, SegmentLayout>();
        for (const segmentName of readdirSync(dayDirectory(dataDir, workspaceId, day)).sort()) {
          const directory = segmentDirectory(dataDir, workspaceId, day, segmentName);
          const match = /^seg-(\d+)-([0-9a-z]+)$/.exec(segmentName);
          // tmp_ directories and segments of a checkpoint that never completed are not part of the store.
          // A segment without _meta.json was never published (its files are written
          // before its directory is renamed into place): the remains of a deletion.
          if (match === null || Number(match[1]) > store.checkpointSequence || !segmentExists(directory)) {
            rmSync(directory, { recursive: true, force: true });
            removed = true;
            continue;
          }
          layouts.set(segmentName, checkedSegment(directory));
        }
        // A merge publishes its segment before deleting the ones it replaces; finish that deletion.
        for (const layout of [...layouts.values()]) {
          for (const replaced of layout.replaces ?? []) {
            if (!layouts.delete(replaced)) continue;
            removeDirectory(segmentDirectory(dataDir, workspaceId, day, replaced));
            removed = true;
          }
        }
        for (const [segmentName, layout] of layouts) {
          const directory = segmentDirectory(dataDir, workspaceId, day, segmentName);
          checkedSegment(directory, layout);
          const segment = new SealedSegment(`${workspaceId}/${day}/${segmentName}`, directory, dayStartMs, layout);
          workspace.partition(dayStartMs).sealed.push(segment);
          // Its uuids join the workspace's set in the background (warmUuids), after the server serves;
          // unless it was written beyond the uuid horizon (then so were its rows received).
          segment.uuidsLoaded = !layout.uuids || !workspace.uuids.remembers(writtenAtMs(directory));
          if (!segment.uuidsLoaded) workspace.uuidsPending = true;
        }
        // Durably gone: a removed segment that came back after a power loss would be adopted by the next published checkpoint.
        if (removed && fsync) fsyncDirectory(dayDirectory(dataDir, workspaceId, day));
      }
    }

    // Replay every WAL file the last checkpoint did not cover, cutting torn tails.
    const sequences = listWalSequences(dataDir);
    let appendSequence = Math.max(store.checkpointSequence, 1);
    for (const sequence of sequences) {
      if (sequence < store.checkpointSequence) continue;
      const path = walFilePath(dataDir, sequence);
      const { records, validBytes, fileBytes, state } = scanWalFile(path);
      if (state.kind === "corrupt") {
        throw new StoreCorruptionError(path, state.offset, `${state.damagedBytes} damaged bytes, followed by ${state.recordsAfter} intact records that prove them durable (acknowledged data, not a torn write)`);
      }
      // Cut a torn tail, and make what is replayed durable: the killed process may have left it in the
      // page cache only, and once replayed it is counted, and a uuid retry of it acknowledged as stored.
      if (validBytes < fileBytes || fsync) truncateWalFile(path, validBytes);
      if (validBytes < fileBytes) {
        // Never silent: unacknowledged bytes only (no later record proves them durable), but said.
        console.error(JSON.stringify({ level: "warn", time: new Date().toISOString(), msg: "write-ahead log torn tail cut", file: path, offset: validBytes, bytes: fileBytes - validBytes }));
      }
      for (const record of records) {
        if (!isWorkspaceId(record.workspaceId)) continue;
        const chunk = decodeChunk(record.payload);
        const workspace = store.workspace(record.workspaceId);
        if (chunk.uuidPresent) {
          for (let row = 0; row < chunk.rowCount; row++) if (chunk.uuidPresent[row]) workspace.uuids.add(chunk.uuidBytes!, row * 16);
        }
        store.apply(workspace, chunk);
      }
      appendSequence = sequence;
    }
    store.wal = WriteAheadLog.open(dataDir, appendSequence, fsync);
    // A checkpoint whose final directory fsync failed left `_checkpoint.json` renamed but maybe not
    // durable, and its old WAL files in place: make the rename durable before they go.
    if (fsync) fsyncDirectory(dataDir);
    store.wal.deleteBefore(Math.min(appendSequence, store.checkpointSequence));
    return store;
  }

  /** Starts background checkpoints; `tasks` runs seal and load work in the pool. */
  start(tasks: StoreTasks): void {
    this.tasks = tasks;
    void this.warmUuids();
    this.scheduleMerges();
    // Rows are sealed once ingest pauses for a few seconds, and at least every
    // checkpointIntervalMs: queries over sealed rows are far faster than scans of
    // active segments, and a restart replays less.
    let lastCheckpointAtMs = Date.now();
    this.checkpointTimer = setInterval(() => {
      const nowMs = Date.now();
      // Idle workspaces drop uuids past the horizon too.
      for (const workspace of this.workspaces.values()) workspace.uuids.advance(nowMs);
      if (this.mergesDeferred && nowMs - this.lastIngestAtMs >= limits.checkpointIdleMs) this.scheduleMerges();
      if (this.rowsSinceCheckpoint === 0 && this.unsealed.length === 0) return;
      if (nowMs - this.lastIngestAtMs < limits.checkpointIdleMs && nowMs - lastCheckpointAtMs < limits.checkpointIntervalMs) return;
      lastCheckpointAtMs = nowMs;
      this.checkpointSoon();
    }, Math.min(1000, limits.checkpointIntervalMs, limits.checkpointIdleMs));
    this.checkpointTimer.unref();
  }

  workspace(workspaceId: string): WorkspaceStore {
    let workspace = this.workspaces.get(workspaceId);
    if (workspace === undefined) {
      workspace = new WorkspaceStore(workspaceId, workspaceDirectory(this.dataDir, workspaceId), this.dataDir, this.fsync, this.durableDictionaryBytes.get(workspaceId));
      this.workspaces.set(workspaceId, workspace);
    }
    return workspace;
  }

  get writeQueueBytes(): number {
    return this.wal.queuedBytes;
  }

  /**
   * Makes a worker's chunk durable and visible. Resolves after the fdatasync of
   * its group and after its rows are applied, so a query that starts after the
   * resolution counts them. Rejects when the disk failed; nothing is then stored.
   */
  async commit(workspaceId: string, chunkBuffer: ArrayBuffer): Promise<CommitResult> {
    assert(!this.closed, "store is closed");
    const workspace = this.workspace(workspaceId);
    let bytes = new Uint8Array(chunkBuffer);
    let chunk = decodeChunk(bytes);
    // Dedupe needs every stored uuid: right after start-up the set may still be filling.
    if (chunk.uuidPresent && workspace.uuidsPending) await workspace.uuidsReady;
    assert(!this.closed, "store is closed");
    const commitId = ++this.commitSequence;
    workspace.uuids.advance(Date.now());

    // Before the uuids are claimed: a refused row's uuid stays free for a retry.
    const admission = workspace.cardinality.admit(workspace.events, workspace.keys, chunk);
    if (admission.keep) {
      bytes = new Uint8Array(filterChunk(chunk, admission.keep));
      chunk = decodeChunk(bytes);
    }

    // Claim uuids now, so a concurrent retry of the same events is recognised
    // while this one is still on its way to disk. A repeat of a uuid whose
    // commit is still in flight waits for that commit — and fails with it —
    // before it may be acknowledged.
    // Claimed uuids stay in the original chunk's bytes; only their offsets are kept.
    const claimedUuids: number[] = [];
    const originalUuidBytes = chunk.uuidBytes;
    const awaitedCommits = new Set<Promise<void>>();
    if (chunk.uuidPresent) {
      let keep: Uint8Array | undefined;
      const uuidBytes = chunk.uuidBytes!;
      workspace.uuids.prefetchHomes(uuidBytes, chunk.uuidPresent, chunk.rowCount);
      for (let row = 0; row < chunk.rowCount; row++) {
        if (!chunk.uuidPresent[row]) continue;
        const owner = workspace.uuids.claim(uuidBytes, row * 16, commitId);
        if (owner === -1) {
          claimedUuids.push(row * 16);
          continue;
        }
        keep ??= new Uint8Array(chunk.rowCount).fill(1);
        keep[row] = 0;
        const inFlight = this.commitsInFlight.get(owner);
        if (inFlight) awaitedCommits.add(inFlight);
      }
      if (keep) {
        bytes = new Uint8Array(filterChunk(chunk, keep));
        chunk = decodeChunk(bytes);
      }
    }
    try {
      const durable = chunk.rowCount === 0 ? Promise.resolve() : this.appendAndApply(workspace, chunk, bytes, originalUuidBytes, claimedUuids, commitId);
      await Promise.all([durable, ...awaitedCommits]);
    } finally {
      admission.release();
    }
    return { storedCount: chunk.rowCount, refusals: admission.refusals };
  }

  private appendAndApply(
    workspace: WorkspaceStore,
    chunk: DecodedChunk,
    bytes: Uint8Array,
    uuidBytes: Uint8Array | undefined,
    claimedUuids: number[],
    commitId: number,
  ): Promise<void> {
    const record = encodeRecord(workspace.id, bytes);
    // A uuid's owner id stays in the set after its commit is durable; the
    // owner is "in flight" exactly while it is in commitsInFlight.
    let applied: Promise<void> | undefined;
    // The WAL calls back (in WAL order) before it resolves: `applied` is known by the time this runs on.
    const durable = this.wal.append(record, () => (applied = this.applyDurable(workspace, chunk))).then(() => applied);
    if (claimedUuids.length > 0) this.commitsInFlight.set(commitId, durable);
    const settled = durable.then(
      () => {
        this.commitsInFlight.delete(commitId);
        this.lastIngestAtMs = Date.now();
        if (this.checkpointDue()) this.checkpointSoon();
      },
      (error: unknown) => {
        this.commitsInFlight.delete(commitId);
        for (const offset of claimedUuids) workspace.uuids.delete(uuidBytes!, offset);
        throw error;
      },
    );
    return settled;
  }

  /**
   * Applies a durable chunk: at once when it is small and nothing of its
   * workspace is still being applied, else chained after that in slices of at
   * most `applySliceMs`, with the event loop free in between. A batch may bring
   * a million property keys never seen before, a second of main-thread work
   * that other clients would wait out. Until a slice-applied chunk is done,
   * later commits of the same workspace wait for it (ids are assigned in WAL
   * order, so that replay assigns the same ones), and a checkpoint does not
   * freeze segments (its rows must be in them); other workspaces go on.
   * Returns the promise of a chained apply, or undefined when it is done.
   */
  private applyDurable(workspace: WorkspaceStore, chunk: DecodedChunk): Promise<void> | undefined {
    const large = chunk.keyStrings.length > applyAtOnceKeysMax || chunk.entryRows.length > applyAtOnceEntriesMax;
    if (workspace.applying === undefined && !large) {
      this.apply(workspace, chunk);
      return undefined;
    }
    const applied = (workspace.applying ?? Promise.resolve())
      .then(() => this.applyInSlices(workspace, chunk))
      .catch((error: unknown) => {
        // As when an apply at once throws inside the WAL's callback: the process stops rather than
        // serve from memory that no longer matches the WAL, which the next start replays.
        setImmediate(() => {
          throw error;
        });
        throw error;
      });
    workspace.applying = applied;
    const clear = () => {
      if (workspace.applying === applied) workspace.applying = undefined;
    };
    applied.then(clear, clear);
    return applied;
  }

  private async applyInSlices(workspace: WorkspaceStore, chunk: DecodedChunk): Promise<void> {
    const rows = this.applyRows(workspace, chunk);
    let key = 0;
    for (;;) {
      key = this.applyKeys(workspace, chunk, rows, key, performance.now() + applySliceMs);
      if (key === chunk.keyStrings.length) break;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.countApplied(chunk, rows.textsAdded);
  }

  /** Appends a decoded chunk's rows to the active segments of their days (main thread, WAL order), at once. */
  apply(workspace: WorkspaceStore, chunk: DecodedChunk): void {
    const rows = this.applyRows(workspace, chunk);
    this.applyKeys(workspace, chunk, rows, 0, Number.POSITIVE_INFINITY);
    this.countApplied(chunk, rows.textsAdded);
  }

  /** Appends a chunk's rows, not yet their properties; returns where each row went. */
  private applyRows(workspace: WorkspaceStore, chunk: DecodedChunk): AppliedRows {
    const { rowCount, stringCount } = chunk;
    // Each distinct string of the chunk is looked up once.
    const eventIdOfString = new Int32Array(stringCount).fill(-1);
    const userIdOfString = new Int32Array(stringCount).fill(-1);
    const rowSegment = new Array<ActiveSegment>(rowCount);
    const rowIndex = new Uint32Array(rowCount);
    let lastDayStartMs = -1;
    let segment: ActiveSegment | undefined;
    const uuidPresent = chunk.uuidPresent;
    const uuidSource = chunk.uuidBytes;
    const { stringBytes, stringEnds } = chunk;
    for (let row = 0; row < rowCount; row++) {
      const timeMs = chunk.timeMs[row];
      const dayStartMs = timeMs - (timeMs % dayMs);
      if (dayStartMs !== lastDayStartMs) {
        segment = workspace.activeSegment(dayStartMs);
        lastDayStartMs = dayStartMs;
      }
      const nameString = chunk.eventNameString[row];
      let eventId = eventIdOfString[nameString];
      if (eventId < 0) eventId = eventIdOfString[nameString] = workspace.events.internUtf8(stringBytes, stringEnds[nameString], stringEnds[nameString + 1]);
      const distinctString = chunk.distinctIdString[row];
      let userId = userIdOfString[distinctString];
      if (userId < 0) userId = userIdOfString[distinctString] = workspace.users.internUtf8(stringBytes, stringEnds[distinctString], stringEnds[distinctString + 1]);
      const target = segment!.appendRow();
      segment!.time.values[target] = timeMs - dayStartMs;
      segment!.user.values[target] = userId;
      segment!.event.values[target] = eventId;
      if (uuidPresent !== undefined && uuidPresent[row] === 1) {
        segment!.uuidPresent.values[target] = 1;
        // A byte loop: a subarray per row would allocate a view per event.
        const uuidTarget = segment!.uuid.values;
        for (let byte = 0; byte < 16; byte++) uuidTarget[target * 16 + byte] = uuidSource![row * 16 + byte];
      }
      rowSegment[row] = segment!;
      rowIndex[row] = target;
    }
    return { rowSegment, rowIndex, textsAdded: 0 };
  }

  /** Applies the chunk's property keys from `firstKey` until done or past `deadline`; returns the next key. */
  private applyKeys(workspace: WorkspaceStore, chunk: DecodedChunk, rows: AppliedRows, firstKey: number, deadline: number): number {
    const { rowSegment, rowIndex } = rows;
    const keyCount = chunk.keyStrings.length;
    let key = firstKey;
    let keysSinceClock = 0;
    let entriesSinceClock = 0;
    const valueIds = this.valueIdCache.reserve(chunk.stringCount);
    while (key < keyCount) {
      const keyString = chunk.keyStrings[key];
      const keyId = workspace.keys.internUtf8(chunk.stringBytes, chunk.stringEnds[keyString], chunk.stringEnds[keyString + 1]);
      // A key's entries are in row order, so mostly in one day's segment: its slot is looked up once per run.
      let properties: ActiveProperties | undefined;
      let slot = 0;
      for (let entry = chunk.entryStarts[key]; entry < chunk.entryStarts[key + 1]; entry++) {
        const row = chunk.entryRows[entry];
        const rowProperties = rowSegment[row].properties;
        if (rowProperties !== properties) {
          properties = rowProperties;
          slot = properties.slotFor(keyId);
          valueIds.forget();
        }
        // A value repeats across the rows of a chunk ("US" in a third of them): its id is looked up
        // once per run of the key, then read from the cache by its chunk string index.
        const valueString = chunk.entryValues[entry];
        let valueId = valueIds.get(valueString);
        if (valueId === 0) {
          valueId = properties.valueIdOf(slot, chunk.string(valueString));
          rows.textsAdded += properties.textWasNew;
          valueIds.set(valueString, valueId);
        }
        properties.append(slot, rowIndex[row], valueId);
      }
      entriesSinceClock += chunk.entryStarts[key + 1] - chunk.entryStarts[key];
      key++;
      if (++keysSinceClock >= applyClockKeys || entriesSinceClock >= applyClockEntries) {
        if (performance.now() > deadline) break;
        keysSinceClock = 0;
        entriesSinceClock = 0;
      }
    }
    return key;
  }

  private countApplied(chunk: DecodedChunk, textsAdded: number): void {
    this.rowsApplied += chunk.rowCount;
    this.rowsSinceCheckpoint += chunk.rowCount;
    this.propertyEntriesSinceCheckpoint += chunk.entryRows.length;
    this.propertyTextsSinceCheckpoint += textsAdded;
  }

  /**
   * Active segments hold rows and property entries in memory until sealed; rows
   * cost ~30 bytes, an entry 8–16, a distinct text ~100 with its map slot. The
   * WAL's byte bound alone would let 512 MiB of all-distinct property values
   * grow to gigabytes, so texts and entries have bounds of their own.
   */
  private checkpointDue(): boolean {
    return (
      this.rowsSinceCheckpoint >= limits.checkpointRowsMax ||
      this.propertyEntriesSinceCheckpoint >= limits.checkpointPropertyEntriesMax ||
      this.propertyTextsSinceCheckpoint >= limits.checkpointPropertyTextsMax ||
      this.wal.fileBytes >= limits.checkpointWalBytesMax ||
      this.activeSegmentsSinceCheckpoint() >= limits.checkpointActiveSegmentsMax
    );
  }

  /** Each distinct day a chunk touches opens an active segment (tens of KiB before its first row): days arriving in random order must not pile them up. */
  private activeSegmentsSinceCheckpoint(): number {
    let count = 0;
    for (const workspace of this.workspaces.values()) count += workspace.activeSegmentsSinceCheckpoint;
    return count;
  }

  /** Starts a checkpoint unless one failed less than `checkpointRetryDelayMs` ago. */
  private checkpointSoon(): void {
    if (Date.now() >= this.checkpointRetryAtMs) void this.checkpoint();
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
    if (this.checkpointRunning) return this.checkpointRunning;
    this.checkpointRunning = this.runCheckpoint()
      .then(
        () => {
          this.checkpointRetryAtMs = 0;
          return true;
        },
        (error: unknown) => {
          this.checkpointRetryAtMs = Date.now() + checkpointRetryDelayMs;
          log.error(`checkpoint failed, its rows stay in the write-ahead log and in memory; retrying in ${checkpointRetryDelayMs} ms: ${(error as Error).message}`);
          return false;
        },
      )
      .finally(() => {
        this.checkpointRunning = undefined;
      });
    return this.checkpointRunning;
  }

  private async runCheckpoint(): Promise<void> {
    // Past the shutdown deadline nothing more is sealed, and nothing is removed either: start-up drops
    // the segments of unpublished checkpoints, and removing them here (an fsync each, thousands after
    // a checkpoint of many days) could outlast the shutdown's own deadline.
    if (this.pastSealDeadline()) throw new Error(sealDeadlinePassed);
    // Before anything else: a failed checkpoint's directories must not survive into a published one.
    this.removeAbandonedSegments();
    // Segments a failed checkpoint froze go first; their rows are in WAL files older than any rotation below.
    const frozen: FrozenSegment[] = this.unsealed;
    this.unsealed = [];
    const written: string[] = [];
    let newSequence = 0;
    const sealed: Array<{ partition: DayPartition; active: ActiveSegment; segment: SealedSegment; result: LoadSegmentResult }> = [];
    let renamedWithoutDirectoryFsync = false;
    try {
      const dictionarySizes = new Map<WorkspaceStore, [number, number, number]>();
      // Rotation and freezing happen in one synchronous step once the WAL is idle:
      // every row of the old files is in a frozen segment, and no other row is.
      newSequence = await this.wal.rotate(() => this.applyingAnywhere(), () => {
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
        this.rowsSinceCheckpoint = 0;
        this.propertyEntriesSinceCheckpoint = 0;
        this.propertyTextsSinceCheckpoint = 0;
      });

      let segmentNumber = 0;
      // One seal at a time: a checkpoint may seal a segment for each of many days,
      // and queued all at once they would hold every worker while ingest and
      // queries wait behind them. A failure stops the rest; the caller removes
      // what was written.
      const outcomes: PromiseSettledResult<void>[] = [];
      const sealOne = async ({ workspace, partition, segment }: (typeof frozen)[number]) => {
          // Past the shutdown deadline the checkpoint gives up like a failed one: its rows stay in the
          // WAL, which the next start replays. (Events spread over thousands of days make thousands of
          // segments, and sealing each costs a few fsyncs.)
          if (this.pastSealDeadline()) throw new Error(sealDeadlinePassed);
          const day = dayLabel(segment.dayStartMs);
          const name = `seg-${String(newSequence).padStart(12, "0")}-${String(++segmentNumber).padStart(6, "0")}`;
          const directory = segmentDirectory(this.dataDir, workspace.id, day, name);
          written.push(directory);
          const result = await this.tasks.seal(segment, directory, workspace.id);
          assert.equal(result.layout.rowCount, segment.rowCount, "sealed segment lost rows");
          sealed.push({ partition, active: segment, segment: new SealedSegment(`${workspace.id}/${day}/${name}`, directory, segment.dayStartMs, result.layout), result });
      };
      for (const item of frozen) {
        try {
          await sealOne(item);
          outcomes.push({ status: "fulfilled", value: undefined });
        } catch (reason) {
          outcomes.push({ status: "rejected", reason });
          break;
        }
      }
      for (const outcome of outcomes) if (outcome.status === "rejected") throw outcome.reason;

      for (const [workspace, [events, users, keys]] of dictionarySizes) {
        workspace.events.persist(dictionaryPath(this.dataDir, workspace.id, "events"), events, this.fsync);
        workspace.users.persist(dictionaryPath(this.dataDir, workspace.id, "users"), users, this.fsync);
        workspace.keys.persist(dictionaryPath(this.dataDir, workspace.id, "keys"), keys, this.fsync);
      }
      injectFault("checkpoint.publish", checkpointPath(this.dataDir));
      publishFileAtomically(checkpointPath(this.dataDir), encodeCheckpointFile({ walSequence: newSequence, dictionaryBytes: this.dictionaryBytes() }), this.fsync);
      // As if the directory fsync that ends the publish had failed, after the rename.
      injectFault("checkpoint.directory-fsync", checkpointPath(this.dataDir));
    } catch (error) {
      // If only the directory fsync after the rename failed, `_checkpoint.json` already names the new
      // sequence and start-up would believe it: the segments stay and the checkpoint counts as done,
      // but the old WAL files are kept until a checkpoint publishes cleanly (or the next start-up).
      renamedWithoutDirectoryFsync = newSequence > 0 && this.publishedSequence() === newSequence;
      if (!renamedWithoutDirectoryFsync) {
        this.unsealed = frozen;
        this.abandonedSegments.push(...written);
        try {
          // Past the deadline no checkpoint can publish any more (see the top of runCheckpoint).
          if (!this.pastSealDeadline()) this.removeAbandonedSegments();
        } catch {
          // Retried before the next checkpoint, which cannot start until it succeeds.
        }
        throw error;
      }
      log.error(`checkpoint ${newSequence} published, but not made durable: ${(error as Error).message}`);
    }
    this.checkpointSequence = newSequence;

    // The sealed form replaces the frozen one in memory, already loaded.
    for (const { partition, active, segment, result } of sealed) {
      segment.attach(result);
      this.touch(segment, result.layout.memoryBytes);
      partition.sealing.splice(partition.sealing.indexOf(active), 1);
      partition.sealed.push(segment);
    }
    this.publishUncertain = renamedWithoutDirectoryFsync;
    this.scheduleMerges();
    if (renamedWithoutDirectoryFsync) return;
    try {
      await this.wal.deleteBeforeInPool(newSequence);
    } catch (error) {
      // The checkpoint is published; start-up skips WAL files it covers, and the next checkpoint deletes them.
      log.error(`deleting sealed write-ahead log files: ${(error as Error).message}`);
    }
  }

  /** The WAL sequence `_checkpoint.json` names now (0 when absent or unreadable). */
  private publishedSequence(): number {
    try {
      return readCheckpointFile(this.dataDir).walSequence;
    } catch {
      return 0;
    }
  }

  /** Every workspace's durable dictionary lengths, for `_checkpoint.json`. */
  private dictionaryBytes(): Map<string, [number, number, number]> {
    const bytes = new Map<string, [number, number, number]>();
    for (const workspace of this.workspaces.values()) bytes.set(workspace.id, [workspace.events.durableBytes, workspace.users.durableBytes, workspace.keys.durableBytes]);
    return bytes;
  }

  private pastSealDeadline(): boolean {
    return Date.now() > this.sealDeadlineMs;
  }

  /** Removes, durably, what failed checkpoints wrote; throws (keeping the rest listed) when the disk refuses. */
  private removeAbandonedSegments(): void {
    while (this.abandonedSegments.length > 0) {
      const directory = this.abandonedSegments[0];
      const parent = dirname(directory);
      removeDirectory(directory);
      rmSync(join(parent, `tmp_${basename(directory)}`), { recursive: true, force: true });
      if (this.fsync && existsSync(parent)) fsyncDirectory(parent);
      this.abandonedSegments.shift();
    }
  }

  /** Descriptors of every segment a query over [fromMs, toMs) must read, loading sealed ones as needed. */
  async snapshot(workspaceId: string, fromMs: number, toMs: number, filterKeyIds: readonly number[]): Promise<{ segments: SegmentDescriptor[]; rowCount: number }> {
    // A merge may retire a segment while this snapshot waits for it to load; then look again.
    for (let attempt = 0; ; attempt++) {
      const snapshot = await this.snapshotOnce(workspaceId, fromMs, toMs, filterKeyIds).catch((error: unknown) => {
        if (error instanceof RetiredSegmentError && attempt < 3) return undefined;
        throw error;
      });
      if (snapshot) return snapshot;
    }
  }

  private async snapshotOnce(workspaceId: string, fromMs: number, toMs: number, filterKeyIds: readonly number[]): Promise<{ segments: SegmentDescriptor[]; rowCount: number }> {
    const workspace = this.workspaces.get(workspaceId);
    if (workspace === undefined) return { segments: [], rowCount: 0 };
    const segments = workspace.segmentsIn(fromMs, toMs);
    // Describe active segments now: rows acknowledged before this moment are counted.
    const descriptors = segments.map((segment) => (segment instanceof ActiveSegment ? segment.describe(filterKeyIds) : undefined));
    const loads: Promise<void>[] = [];
    for (const segment of segments) if (segment instanceof SealedSegment && !segment.memory) loads.push(this.ensureLoaded(segment));
    const loaded = await Promise.allSettled(loads);
    const retired = segments.some((segment) => segment instanceof SealedSegment && segment.retired);
    if (retired) throw new RetiredSegmentError();
    for (const outcome of loaded) if (outcome.status === "rejected") throw outcome.reason;
    let rowCount = 0;
    for (const segment of segments) rowCount += segment instanceof ActiveSegment ? segment.rowCount : segment.layout.rowCount;
    return { segments: segments.map((segment, index) => descriptors[index] ?? (segment as SealedSegment).describe()), rowCount };
  }

  private ensureLoaded(segment: SealedSegment): Promise<void> {
    segment.loading ??= this.tasks.load(segment.directory).then(
      (result) => {
        segment.attach(result);
        segment.loading = undefined;
        this.touch(segment, result.layout.memoryBytes);
      },
      (error) => {
        segment.loading = undefined;
        throw error;
      },
    );
    return segment.loading;
  }

  private touch(segment: SealedSegment, bytes: number): void {
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

  /** Bytes of segment columns held in memory. */
  get residentSegmentBytes(): number {
    return this.cachedBytes;
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

  /** Flushes the WAL and seals everything, so the next start replays nothing. */
  /**
   * Adds the uuids of every sealed segment found at start-up to its workspace's
   * set, one segment per turn of the event loop, so a 10 M-event store serves
   * queries at once instead of after a second of hashing.
   */
  private async warmUuids(): Promise<void> {
    const waiting = [...this.workspaces.values()].filter((workspace) => workspace.uuidsPending);
    for (const workspace of waiting) workspace.uuidsReady = new Promise((resolve) => (workspace.markUuidsReady = resolve));
    for (const workspace of waiting) {
      try {
        for (const partition of [...workspace.days.values()]) {
          for (const segment of partition.sealed.slice()) {
            if (segment.uuidsLoaded || !segment.layout.uuids) continue;
            try {
              const uuids = readSegmentUuids(segment.directory, segment.layout);
              const receivedAtMs = writtenAtMs(segment.directory);
              for (let offset = 0; offset < uuids.length; offset += 16) workspace.uuids.add(uuids, offset, receivedAtMs);
              segment.uuidsLoaded = true;
            } catch (error) {
              // A merge retired it meanwhile: its rows are in the merged segment, read below.
              if (!segment.retired) throw error;
            }
            await new Promise((resolve) => setImmediate(resolve));
          }
          // Merged segments born during the warm-up hold rows not read yet.
          for (const segment of partition.sealed) {
            if (segment.uuidsLoaded || !segment.layout.uuids) continue;
            const uuids = readSegmentUuids(segment.directory, segment.layout);
            const receivedAtMs = writtenAtMs(segment.directory);
            for (let offset = 0; offset < uuids.length; offset += 16) workspace.uuids.add(uuids, offset, receivedAtMs);
            segment.uuidsLoaded = true;
          }
        }
      } catch (error) {
        log.error(`reading stored uuids of workspace ${workspace.id} failed: ${(error as Error).message}`);
      } finally {
        workspace.uuidsPending = false;
        workspace.markUuidsReady();
      }
    }
  }

  /** Runs merges in the background, one at a time; a call while one runs asks for another pass after it. */
  private scheduleMerges(): void {
    if (this.closing) return;
    if (this.mergeRunning) {
      this.mergeWanted = true;
      return;
    }
    this.mergeRunning = this.runMerges()
      .catch((error: unknown) => log.error(`merging segments failed (they stay as they are): ${(error as Error).message}`))
      .finally(() => {
        this.mergeRunning = undefined;
        if (this.mergeWanted) {
          this.mergeWanted = false;
          this.scheduleMerges();
        }
      });
  }

  /** Counts an ingest request as activity, whatever it stores (see lastIngestAtMs). */
  noteIngest(atMs: number): void {
    if (atMs > this.lastIngestAtMs) this.lastIngestAtMs = atMs;
  }

  /** Merges every day that holds several sealed segments into one now, busy or not (maintenance, tests). */
  async mergeAll(): Promise<void> {
    while (this.mergeRunning) await this.mergeRunning;
    this.mergeRunning = this.runMerges(true).finally(() => (this.mergeRunning = undefined));
    await this.mergeRunning;
  }

  /**
   * Merges every day that holds more than one sealed segment into one segment
   * (see busyMergeSegmentsMin). Whether ingest is busy is asked again before
   * each day, unless `force`: a pass that began in a pause must not go on
   * rewriting day after day once batches are back (it held a worker and a
   * core for seconds, and halved batch throughput in the bench's later repeats).
   */
  private async runMerges(force = false): Promise<void> {
    this.removeAbandonedSegments();
    this.mergesDeferred = false;
    for (const workspace of [...this.workspaces.values()]) {
      for (const [dayStartMs, partition] of [...workspace.days]) {
        // A merge must not fold in segments of a checkpoint a power loss could still undo (see runCheckpoint).
        if (this.closing || this.publishUncertain) return;
        const victims = partition.sealed.slice();
        if (victims.length < 2) continue;
        const busy = !force && Date.now() - this.lastIngestAtMs < limits.checkpointIdleMs;
        if (busy && victims.length < busyMergeSegmentsMin) {
          this.mergesDeferred = true;
          continue;
        }
        let rows = 0;
        for (const victim of victims) rows += victim.layout.rowCount;
        if (rows > mergeRowsMax) continue;
        const day = dayLabel(dayStartMs);
        // Named under the published checkpoint, so start-up accepts it; the suffix keeps it unique.
        const name = `seg-${String(this.checkpointSequence).padStart(12, "0")}-m${(++this.mergeCount).toString(36)}${Date.now().toString(36)}`;
        const target = segmentDirectory(this.dataDir, workspace.id, day, name);
        let result: LoadSegmentResult;
        try {
          result = await this.tasks.merge(victims.map((victim) => victim.directory), target, dayStartMs);
        } catch (error) {
          // The worker may have failed after the rename (its directory fsync): left in place, that segment
          // and a later merge of the same victims would both be adopted at start-up, each with their rows.
          this.abandonedSegments.push(target);
          try {
            this.removeAbandonedSegments();
          } catch {
            // Retried before the next merge pass and the next checkpoint, which wait for it.
          }
          throw error;
        }
        assert.equal(result.layout.rowCount, rows, "merged segment lost rows");
        const merged = new SealedSegment(`${workspace.id}/${day}/${name}`, target, dayStartMs, result.layout);
        merged.attach(result);
        merged.uuidsLoaded = victims.every((victim) => victim.uuidsLoaded);
        partition.sealed = [merged, ...partition.sealed.filter((segment) => !victims.includes(segment))];
        for (const victim of victims) {
          if (victim.memory) this.cachedBytes -= victim.layout.memoryBytes;
          victim.memory = undefined;
          victim.retired = true;
        }
        this.touch(merged, result.layout.memoryBytes);
        // Published first, deleted second: start-up finishes the deletion if a crash lands between.
        // Renamed away before deletion: a kill mid-delete must not leave a victim without its _meta.json.
        for (const victim of victims) removeDirectory(victim.directory);
        if (this.fsync) fsyncDirectory(dayDirectory(this.dataDir, workspace.id, day));
      }
    }
  }

  /**
   * Seals what is active (a faster next start) and closes the WAL. Sealing stops
   * at `deadlineMs`: the final checkpoint is then abandoned, which loses nothing.
   */
  async close(deadlineMs = Number.POSITIVE_INFINITY): Promise<void> {
    if (this.closed) return;
    this.closing = true;
    this.sealDeadlineMs = deadlineMs;
    clearInterval(this.checkpointTimer);
    await this.mergeRunning;
    await this.wal.idle();
    for (let applying = this.applyingAnywhere(); applying; applying = this.applyingAnywhere()) await applying.catch(() => {});
    if (this.checkpointRunning) await this.checkpointRunning;
    if (this.rowsSinceCheckpoint > 0 || this.hasActiveRows() || this.unsealed.length > 0) {
      if (!(await this.checkpoint())) log.error("the final checkpoint failed; the next start replays the write-ahead log");
    }
    this.closed = true;
    await this.wal.close();
  }

  /** A chunk some workspace is still applying in slices, or undefined when none is. */
  private applyingAnywhere(): Promise<void> | undefined {
    for (const workspace of this.workspaces.values()) if (workspace.applying) return workspace.applying;
    return undefined;
  }

  private hasActiveRows(): boolean {
    for (const workspace of this.workspaces.values()) for (const partition of workspace.days.values()) if (partition.active?.rowCount) return true;
    return false;
  }
}

