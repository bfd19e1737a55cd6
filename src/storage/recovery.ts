/**
 * Recovery: how a store opens. It reads `_checkpoint.json`, drops what no
 * published checkpoint owns (tmp_ and unpublished segments, the victims of an
 * interrupted merge), verifies every sealed segment, that they hold as many
 * rows as the checkpoint counted, and the dictionaries the checkpoint made
 * durable, replays the WAL files it does not cover through the
 * applier, and opens the WAL for appends. Damage that acknowledged data depends
 * on refuses the start (StoreCorruptionError; `eventide repair` moves it
 * aside); a torn WAL tail is cut and said. After the server serves, the sealed
 * segments' uuids are read back into the workspaces' sets (warmUuids).
 */
import { existsSync, readdirSync, rmSync } from "node:fs";
import { limits } from "../config/limits.js";
import { decodeChunk } from "./chunk-codec.js";
import type { Applier } from "./apply.js";
import { readCheckpointFile } from "./checkpoint-file.js";
import { isFileSystemError, StoreCorruptionError } from "./corruption.js";
import { refuseNewerFormats } from "./format-versions.js";
import { fsyncDirectory, makeDirectoryDurably, removeDirectory } from "./files.js";
import { dayDirectory, isWorkspaceId, segmentDirectory, segmentNamePattern, walFilePath, workspaceDirectory, workspacesDirectory } from "./paths.js";
import { SegmentCorruptError, type SegmentLayout } from "./segment-layout.js";
import { readSegmentLayout, readSegmentUuids, segmentExists, verifySegment } from "./segment-reader.js";
import { SealedSegment, writtenAtMs } from "./segments.js";
import { listWalSequences, scanWalFile, truncateWalFile, WriteAheadLog, type WalFileState } from "./wal.js";
import { currentUuidBytes, uuidBytes } from "./uuid-budget.js";
import { Workspaces, type WorkspaceStore } from "./workspace-store.js";
import { log } from "../log.js";

export interface RecoveredStore {
  workspaces: Workspaces;
  wal: WriteAheadLog;
  /** The WAL sequence the published checkpoint names (0: none published yet). */
  checkpointSequence: number;
}

/** Recovers the store: drops unpublished segments, loads dictionaries and segment catalogs, replays the WAL. */
export function recoverStore(dataDir: string, fsync: boolean, applier: Applier): RecoveredStore {
  refuseNewerFormats(dataDir);
  makeDirectoryDurably(workspacesDirectory(dataDir), fsync);
  // A workspace directory a killed process created may still be in the page cache only, as its days are (below).
  if (fsync) fsyncDirectory(workspacesDirectory(dataDir));
  const checkpoint = readCheckpointFile(dataDir);
  const checkpointSequence = checkpoint.walSequence;
  const workspaces = new Workspaces(dataDir, fsync, checkpoint.dictionaryBytes);
  for (const [workspaceId, bytes] of checkpoint.dictionaryBytes) {
    if (bytes.some((length) => length > 0) && !existsSync(workspaceDirectory(dataDir, workspaceId))) {
      throw new StoreCorruptionError(workspaceDirectory(dataDir, workspaceId), undefined, "missing, though a checkpoint made its dictionaries durable");
    }
  }

  for (const workspaceId of readdirSync(workspacesDirectory(dataDir))) {
    if (!isWorkspaceId(workspaceId)) continue;
    const workspace = workspaces.open(workspaceId);
    // Entries a killed process created (a day directory, a dictionary) may still be in the page cache only.
    if (fsync) fsyncDirectory(workspace.directory);
    for (const day of readdirSync(workspace.directory)) {
      if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) continue;
      recoverDay(dataDir, fsync, workspace, day, checkpointSequence);
    }
  }

  // Fewer sealed rows than the checkpoint counted: a segment or a whole day directory vanished, and the WAL no longer holds them.
  for (const [workspaceId, counted] of checkpoint.sealedRows ?? []) {
    const found = workspaces.byId.get(workspaceId)?.sealedRows() ?? 0;
    if (found >= counted) continue;
    throw new StoreCorruptionError(
      workspaceDirectory(dataDir, workspaceId),
      undefined,
      `its sealed segments hold ${found} rows, ${counted - found} fewer than the last checkpoint counted (${counted}): a segment or day directory is missing ` +
        "(removed by hand, or lost by the file system), and the write-ahead log no longer holds those rows. Restore the data directory from a backup if you have one; " +
        "repair counts what is left and goes on without them",
    );
  }

  // Replay every WAL file the last checkpoint did not cover, cutting torn tails.
  const sequences = listWalSequences(dataDir);
  let appendSequence = Math.max(checkpointSequence, 1);
  for (const sequence of sequences) {
    if (sequence < checkpointSequence) continue;
    const path = walFilePath(dataDir, sequence);
    const { records, validBytes, fileBytes, state } = scanWalFile(path);
    if (state.kind === "corrupt") {
      throw new StoreCorruptionError(path, state.offset, `${state.damagedBytes} damaged bytes, followed by ${state.recordsAfter} intact records that prove them durable (acknowledged data, not a torn write)`);
    }
    if (state.kind === "cut") {
      throw new StoreCorruptionError(
        path,
        state.offset,
        `${state.missingBytes} bytes missing: the record here was written when ${state.offset + state.missingBytes} bytes of the file were durable (the file was cut, then appended to; acknowledged data, not a torn write)`,
      );
    }
    // Without fsync a power loss may tear any file the page cache held: only a synced log proves its rotated files whole.
    if (fsync && damagedPastRotation(state, sequence, sequences)) {
      throw new StoreCorruptionError(
        path,
        state.offset,
        `${fileBytes - state.offset} damaged bytes at the end of a log file that later log files follow: the log had rotated past it, so every record in it was durable (acknowledged data, not a torn write)`,
      );
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
      const workspace = workspaces.open(record.workspaceId);
      if (chunk.uuidPresent) {
        for (let row = 0; row < chunk.rowCount; row++) if (chunk.uuidPresent[row]) workspace.uuids.add(chunk.uuidBytes!, row * 16);
      }
      applier.apply(workspace, chunk);
    }
    appendSequence = sequence;
  }
  const wal = WriteAheadLog.open(dataDir, appendSequence, fsync);
  // A checkpoint whose final directory fsync failed left `_checkpoint.json` renamed but maybe not
  // durable, and its old WAL files in place: make the rename durable before they go.
  if (fsync) fsyncDirectory(dataDir);
  wal.deleteBefore(Math.min(appendSequence, checkpointSequence));
  return { workspaces, wal, checkpointSequence };
}

/**
 * A whole record with a damaged payload at the end of a WAL file that a later
 * file follows is corruption, not a torn write: the log rotates only once
 * nothing is queued or in flight, and a group whose write failed is cut back
 * durably before it takes another, so every record written to such a file was
 * durable. Bytes past its last record that are not a whole record (zeros,
 * garbage, a partial header: what a file system may leave past a file's synced
 * length) are cut as a torn tail. Repair reads the same verdict.
 */
export function damagedPastRotation(state: WalFileState, sequence: number, sequences: readonly number[]): state is Extract<WalFileState, { kind: "torn-tail" }> {
  return state.kind === "torn-tail" && state.wholeRecord && sequences.some((later) => later > sequence);
}

/** Adopts one day directory's published segments into the workspace, removing (durably) what no checkpoint owns. */
function recoverDay(dataDir: string, fsync: boolean, workspace: WorkspaceStore, day: string, checkpointSequence: number): void {
  const workspaceId = workspace.id;
  const dayStartMs = Date.parse(`${day}T00:00:00Z`);
  let removed = false;
  const layouts = new Map<string, SegmentLayout>();
  for (const segmentName of readdirSync(dayDirectory(dataDir, workspaceId, day)).sort()) {
    const directory = segmentDirectory(dataDir, workspaceId, day, segmentName);
    const match = segmentNamePattern.exec(segmentName);
    // tmp_ directories are segments being written or deleted (files.ts renames before it deletes).
    if (match === null && segmentName.startsWith("tmp_")) {
      rmSync(directory, { recursive: true, force: true });
      removed = true;
      continue;
    }
    // Anything else the store never writes: a damaged name, or an entry put there by hand. Deleting it could delete sealed rows.
    if (match === null) throw new StoreCorruptionError(directory, undefined, "not a segment: a day directory holds only seg-<sequence>-<id> and tmp_ entries (a damaged name?)");
    if (Number(match[1]) > checkpointSequence) {
      // A checkpoint that never completed: its rows are still in the log, unless the name is a damaged one (its _meta.json says).
      const published = publishedName(directory);
      if (published !== undefined && published !== segmentName) {
        throw new StoreCorruptionError(directory, undefined, `published as ${published}: a damaged name, whose sequence is past the checkpoint`);
      }
      removeDirectory(directory);
      removed = true;
      continue;
    }
    // Segments are published whole by a rename and deleted by a rename first: one without _meta.json is damage.
    if (!segmentExists(directory)) throw new StoreCorruptionError(directory, undefined, "a sealed segment without its _meta.json (a damaged directory)");
    const layout = checkedSegment(directory);
    if (layout.name !== undefined && layout.name !== segmentName) throw new StoreCorruptionError(directory, undefined, `published as ${layout.name}: a damaged name`);
    layouts.set(segmentName, layout);
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
    // A file that cannot be read (EIO, a directory in its place, gone): damage too, named, with the way out.
    if (isFileSystemError(error)) throw new StoreCorruptionError(directory, undefined, `unreadable sealed segment (${(error as Error).message})`);
    throw error;
  }
}

/** The name a segment's _meta.json says it was published under; undefined when it says none or cannot be read. */
function publishedName(directory: string): string | undefined {
  try {
    return readSegmentLayout(directory).name;
  } catch {
    return undefined;
  }
}

/** Where start-up puts the next uuids of a segment: in the generation of their receipt, in the older one, or nowhere (the budget is full). */
type Placement = "as-received" | "older" | "none";

/** Uuids a segment adds between two looks at the budget: a merged day holds millions. */
const uuidsPerPlacement = 16_384;

/**
 * Adds a sealed segment's uuids to its workspace's set, as received when it
 * was written, in slices placed by `place`; false when the budget cut it short.
 */
function loadSegmentUuids(workspace: WorkspaceStore, segment: SealedSegment, place: () => Placement): boolean {
  let placement = place();
  if (placement === "none") {
    // Full already: not even read.
    segment.uuidsLoaded = true;
    return false;
  }
  const uuids = readSegmentUuids(segment.directory, segment.layout);
  const receivedAtMs = writtenAtMs(segment.directory);
  for (let offset = 0; offset < uuids.length; ) {
    const end = Math.min(uuids.length, offset + uuidsPerPlacement * 16);
    for (; offset < end; offset += 16) workspace.uuids.add(uuids, offset, receivedAtMs, placement === "older");
    if (offset < uuids.length && (placement = place()) === "none") break;
  }
  segment.uuidsLoaded = true;
  return placement !== "none";
}

/**
 * Adds the uuids of every sealed segment found at start-up to its workspace's
 * set, one segment per turn of the event loop, so a 10 M-event store serves
 * queries at once instead of after a second of hashing. The most recently
 * written first, within the memory budget (limits.uuidMemoryBytesMax) as the
 * running server keeps it: the newest fill the current generations up to
 * half of it, the next ones the older generations up to the rest; older
 * segments' uuids are left out, as the running server would have forgotten
 * them, and each set then remembers only from the newest such segment's
 * write time. A workspace is ready once its own segments are read.
 */
export async function warmUuids(workspaces: Workspaces, budget = limits.uuidMemoryBytesMax): Promise<void> {
  const waiting = [...workspaces.values()].filter((workspace) => workspace.uuidsPending);
  for (const workspace of waiting) workspace.uuidsReady = new Promise((resolve) => (workspace.markUuidsReady = resolve));
  const queue: Array<{ workspace: WorkspaceStore; segment: SealedSegment; writtenAtMs: number }> = [];
  for (const workspace of waiting) {
    for (const partition of workspace.days.values()) {
      for (const segment of partition.sealed) if (!segment.uuidsLoaded && segment.layout.uuids) queue.push({ workspace, segment, writtenAtMs: writtenAtMs(segment.directory) });
    }
  }
  queue.sort((left, right) => right.writtenAtMs - left.writtenAtMs);
  const queued = new Set(queue.map(({ segment }) => segment));
  // Each generation of all sets within half the budget, as the running server keeps them: the newest uuids of this
  // period into the newest generations, then the older generations, and uuids of the period before only into those.
  const place = (workspace: WorkspaceStore, receivedAtMs: number): Placement => {
    const current = currentUuidBytes(workspaces);
    if (workspace.uuids.inCurrentPeriod(receivedAtMs) && current < budget / 2) return "as-received";
    return uuidBytes(workspaces) - current < budget / 2 ? "older" : "none";
  };
  const failed = new Set<WorkspaceStore>();
  // Per workspace, the latest write time of a segment whose uuids went (in part) to the older generation, and of one
  // whose uuids were left out (in part or whole): rows received since are in later segments, all read.
  const olderUpTo = new Map<WorkspaceStore, number>();
  const forgottenUpTo = new Map<WorkspaceStore, number>();
  let forgotten = 0;
  // `writtenAt`: the segment's write time when known (a merged one read in place of its victim takes the victim's).
  const load = (workspace: WorkspaceStore, segment: SealedSegment, writtenAt?: number) => {
    if (failed.has(workspace) || segment.uuidsLoaded) return;
    if (segment.retired) {
      // A merge replaced it during the warm-up: its rows are in the merged segment, read in its place, at its time.
      const partition = workspace.days.get(segment.dayStartMs);
      for (const merged of partition?.sealed ?? []) if (!merged.uuidsLoaded && merged.layout.uuids && !queued.has(merged)) load(workspace, merged, writtenAt);
      return;
    }
    try {
      // Read here: a segment may be gone (a merge retired it, the store was closed), and that is answered below.
      const at = writtenAt ?? writtenAtMs(segment.directory);
      const placed = () => {
        const placement = place(workspace, at);
        if (placement === "older") olderUpTo.set(workspace, Math.max(olderUpTo.get(workspace) ?? -Infinity, at));
        return placement;
      };
      if (loadSegmentUuids(workspace, segment, placed)) return;
      forgotten++;
      forgottenUpTo.set(workspace, Math.max(forgottenUpTo.get(workspace) ?? -Infinity, at));
    } catch (error) {
      // A merge retired it meanwhile: its rows are in the merged segment, read as above.
      if (segment.retired) return load(workspace, segment, writtenAt);
      failed.add(workspace);
      log.error(`reading stored uuids of workspace ${workspace.id} failed: ${(error as Error).message}`);
    }
  };
  // A workspace is ready once its own segments are read: commits with uuids wait for that alone.
  const remaining = new Map<WorkspaceStore, number>(waiting.map((workspace) => [workspace, 0]));
  for (const { workspace } of queue) remaining.set(workspace, remaining.get(workspace)! + 1);
  const finish = (workspace: WorkspaceStore) => {
    // Merged segments born during the warm-up whose victims were not all read.
    for (const partition of workspace.days.values()) {
      for (const segment of partition.sealed) if (!segment.uuidsLoaded && segment.layout.uuids) load(workspace, segment);
    }
    workspace.uuids.rememberOnlySince(olderUpTo.get(workspace) ?? forgottenUpTo.get(workspace), forgottenUpTo.get(workspace));
    workspace.uuidsPending = false;
    workspace.markUuidsReady();
  };
  try {
    for (const workspace of waiting) if (remaining.get(workspace) === 0) finish(workspace);
    for (const { workspace, segment, writtenAtMs: writtenAt } of queue) {
      load(workspace, segment, writtenAt);
      await new Promise((resolve) => setImmediate(resolve));
      const left = remaining.get(workspace)! - 1;
      remaining.set(workspace, left);
      if (left === 0) finish(workspace);
    }
  } catch (error) {
    // Nothing here may end the process: a workspace left unread only recognises fewer retries.
    log.error(`reading stored uuids failed: ${(error as Error).message}`);
  } finally {
    if (forgotten > 0) {
      log.warn(
        { segments: forgotten, writtenUpTo: new Date(Math.max(...forgottenUpTo.values())).toISOString(), budgetBytes: budget },
        "uuids of older segments not loaded (some in part): the uuid sets reached their memory budget (a retry of those events would be stored again); EVENTIDE_UUID_MEMORY_BYTES_MAX sets the budget",
      );
    }
    for (const workspace of waiting) {
      if (!workspace.uuidsPending) continue;
      workspace.uuidsPending = false;
      workspace.markUuidsReady();
    }
  }
}
