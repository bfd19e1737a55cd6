/**
 * `eventide repair`: what start-up refuses to decide (StoreCorruptionError),
 * decided once, by an operator who asked for it. Nothing is deleted: every
 * damaged file is copied, or moved, into `<data>/damaged-<time>/` under its
 * own relative path before the store is changed, and every step is reported
 * as one JSON object (`log`), with what it costs in rows.
 *
 *  - WAL file with damage that later records prove durable, or a damaged
 *    tail in a file the log had rotated past (recovery.ts): the file is
 *    rewritten with every intact record, before and after the damage, in
 *    order; the damaged bytes stay in the copy.
 *  - Dictionary with a damaged block: ids past the damage cannot be known
 *    again (a block's texts are its ids), so the file keeps its intact
 *    prefix, and every sealed segment of the workspace that uses an id past
 *    it is moved aside (its rows are lost: a checkpoint sealed them, so the
 *    WAL no longer holds them). Segments using only intact ids stay; rows in
 *    the WAL are replayed and named again. Renumbering is what must never
 *    happen: it would answer for the wrong names.
 *  - Sealed segment with a bad file or `_meta.json`: moved aside; its rows
 *    are lost for the same reason.
 *  - `_checkpoint.json` unreadable: rebuilt from the WAL files present (the
 *    newest checkpoint is the newest WAL sequence, or the one before it when
 *    that file still exists: a checkpoint that may not have published);
 *    segments of a later sequence are moved aside rather than deleted.
 *  - Last, each workspace's sealed rows are counted again: fewer than the
 *    checkpoint counted (segments moved aside above, or a segment, day or
 *    workspace directory that vanished) are reported as lost and no longer
 *    expected.
 *
 * Repair runs with the server stopped (the CLI holds the server's lock).
 */
import { refuseNewerFormats } from "./format-versions.js";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, truncateSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { encodeCheckpointFile, readCheckpointFile, type CheckpointFile } from "./checkpoint-file.js";
import { isFileSystemError, StoreCorruptionError } from "./corruption.js";
import { durableDamage, scanDictionaryBlocks } from "./dictionary.js";
import { fsyncDirectory, isRegularFile, publishFileAtomically } from "./files.js";
import { checkpointPath, dictionaryPath, isWorkspaceId, segmentNamePattern, walFilePath, workspaceDirectory, workspacesDirectory, type DictionaryName } from "./paths.js";
import { SegmentCorruptError, type SegmentLayout } from "./segment-layout.js";
import { loadSegment, PropertyDirectory, readSegmentLayout, verifySegment } from "./segment-reader.js";
import { damagedPastRotation } from "./recovery.js";
import { encodeRecord, listWalSequences, scanWalFile } from "./wal.js";

export interface RepairReport {
  /** Where damaged files went; undefined when nothing was damaged. */
  quarantine: string | undefined;
  actions: object[];
}

const dictionaryNames: readonly DictionaryName[] = ["events", "users", "keys"];

class Quarantine {
  private directory: string | undefined;

  constructor(private readonly dataDir: string) {}

  get path(): string | undefined {
    return this.directory;
  }

  /** Where `path` goes inside the quarantine (created on first use). */
  private target(path: string): string {
    this.directory ??= join(this.dataDir, `damaged-${new Date().toISOString().replace(/[:.]/g, "-")}`);
    const target = join(this.directory, relative(this.dataDir, path));
    mkdirSync(dirname(target), { recursive: true });
    return target;
  }

  copy(path: string): string {
    const target = this.target(path);
    copyFileSync(path, target);
    return target;
  }

  move(path: string): string {
    const target = this.target(path);
    renameSync(path, target);
    fsyncDirectory(dirname(path));
    fsyncDirectory(dirname(target));
    return target;
  }
}

interface SegmentEntry {
  workspaceId: string;
  directory: string;
  sequence: number;
}

function segmentsOf(dataDir: string, workspaceId: string): SegmentEntry[] {
  const entries: SegmentEntry[] = [];
  const workspace = workspaceDirectory(dataDir, workspaceId);
  for (const day of readdirSync(workspace)) {
    if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) continue;
    for (const name of readdirSync(join(workspace, day)).sort()) {
      const match = segmentNamePattern.exec(name);
      if (match === null || !existsSync(join(workspace, day, name, "_meta.json"))) continue;
      entries.push({ workspaceId, directory: join(workspace, day, name), sequence: Number(match[1]) });
    }
  }
  return entries;
}

/** Rows of the workspace's published segments as start-up adopts them: sequence within the checkpoint's, not replaced by a merge's. */
function publishedRows(dataDir: string, workspaceId: string, walSequence: number): number {
  const layouts = new Map<string, SegmentLayout>();
  for (const segment of segmentsOf(dataDir, workspaceId)) {
    if (segment.sequence > walSequence) continue;
    try {
      layouts.set(segment.directory, readSegmentLayout(segment.directory));
    } catch {
      // Unreadable: counted as missing (repair has moved such a segment aside above).
    }
  }
  const replaced = new Set<string>();
  for (const [directory, layout] of layouts) for (const name of layout.replaces ?? []) replaced.add(join(dirname(directory), name));
  let rows = 0;
  for (const [directory, layout] of layouts) if (!replaced.has(directory)) rows += layout.rowCount;
  return rows;
}

/** The largest id of each dictionary a segment uses, +1 (0: none). */
function idsUsed(directory: string): Record<DictionaryName, number> {
  const { layout, memory } = loadSegment(directory);
  const users = new Uint32Array(memory, layout.user.offset, layout.rowCount);
  let userEnd = 0;
  for (let row = 0; row < users.length; row++) if (users[row] + 1 > userEnd) userEnd = users[row] + 1;
  const properties = new PropertyDirectory(layout, memory);
  const keyEnd = properties.keyCount === 0 ? 0 : properties.at(properties.keyCount - 1).keyId + 1;
  return { events: layout.eventCount, users: userEnd, keys: keyEnd };
}

/**
 * What start-up refuses in a day directory: an entry that is neither a
 * segment nor a tmp_ leftover, a segment without its _meta.json, or one whose
 * _meta.json names another directory (a flipped bit in its name). A segment
 * whose recorded name is free is renamed back to it (its files check out:
 * nothing is lost); anything else is moved aside.
 */
function repairDayEntries(dataDir: string, workspaceId: string, quarantine: Quarantine, act: (entry: object) => void): void {
  const workspace = workspaceDirectory(dataDir, workspaceId);
  for (const day of readdirSync(workspace)) {
    if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) continue;
    const dayPath = join(workspace, day);
    for (const name of readdirSync(dayPath).sort()) {
      const path = join(dayPath, name);
      if (name.startsWith("tmp_")) continue; // start-up removes these
      const isSegmentName = segmentNamePattern.test(name);
      const lost = { rowsLost: "unknown", note: "a checkpoint sealed these rows, so the WAL no longer holds them: they are lost" };
      if (!existsSync(join(path, "_meta.json"))) {
        act({ action: "entry-moved-aside", entry: path, movedTo: quarantine.move(path), damage: isSegmentName ? "a segment without _meta.json" : "not a segment", ...lost });
        continue;
      }
      let published: string | undefined;
      try {
        published = readSegmentLayout(path).name;
      } catch (error) {
        // A segment's damaged _meta.json: the segment check below moves it aside.
        if (isSegmentName) continue;
        act({ action: "entry-moved-aside", entry: path, movedTo: quarantine.move(path), damage: `not a segment (${(error as Error).message})`, ...lost });
        continue;
      }
      if (isSegmentName && (published === undefined || published === name)) continue;
      if (published !== undefined && segmentNamePattern.test(published) && !existsSync(join(dayPath, published))) {
        renameSync(path, join(dayPath, published));
        fsyncDirectory(dayPath);
        act({ action: "segment-renamed", segment: path, renamedTo: join(dayPath, published), damage: `its name: its _meta.json says it was published as ${published}` });
        continue;
      }
      act({ action: "entry-moved-aside", entry: path, movedTo: quarantine.move(path), damage: published === undefined ? "not a segment" : `published as ${published}`, ...lost });
    }
  }
}

/** Repairs the store at `dataDir` (server stopped); `log` receives one object per step. */
export function repairStore(dataDir: string, log: (entry: object) => void): RepairReport {
  // A newer version's files are not damage: moved aside, they would be lost to that version too.
  refuseNewerFormats(dataDir);
  const quarantine = new Quarantine(dataDir);
  const actions: object[] = [];
  const act = (entry: object) => {
    actions.push(entry);
    log(entry);
  };
  const workspaceIds = existsSync(workspacesDirectory(dataDir)) ? readdirSync(workspacesDirectory(dataDir)).filter(isWorkspaceId).sort() : [];

  // 1. The checkpoint file: everything else is judged against it.
  let checkpoint: CheckpointFile;
  let checkpointChanged = false;
  try {
    checkpoint = readCheckpointFile(dataDir);
  } catch (error) {
    if (!(error instanceof StoreCorruptionError)) throw error;
    const sequences = listWalSequences(dataDir);
    const newest = sequences[sequences.length - 1];
    const walSequence = newest === undefined ? 0 : sequences.includes(newest - 1) ? newest - 1 : newest;
    // Something else in its place (a FIFO would block a copy for ever) is moved aside instead.
    const copy = isRegularFile(checkpointPath(dataDir)) ? quarantine.copy(checkpointPath(dataDir)) : quarantine.move(checkpointPath(dataDir));
    checkpoint = { walSequence, dictionaryBytes: new Map(), sealedRows: undefined };
    checkpointChanged = true;
    act({ action: "checkpoint-rebuilt", file: checkpointPath(dataDir), damage: error.detail, copy, walSequence });
    for (const workspaceId of workspaceIds) {
      for (const segment of segmentsOf(dataDir, workspaceId)) {
        if (segment.sequence <= walSequence) continue;
        const movedTo = quarantine.move(segment.directory);
        act({ action: "segment-moved-aside", segment: segment.directory, movedTo, reason: `names checkpoint ${segment.sequence}, which may not have been published; its rows are replayed from the WAL when it still holds them` });
      }
    }
  }

  // 2. Day directories: entries start-up does not take (a damaged name, a segment without _meta.json) are moved aside,
  // or renamed back when their _meta.json names where they were published; then any bad file or layout moves a segment aside.
  for (const workspaceId of workspaceIds) repairDayEntries(dataDir, workspaceId, quarantine, act);
  for (const workspaceId of workspaceIds) {
    for (const segment of segmentsOf(dataDir, workspaceId)) {
      if (segment.sequence > checkpoint.walSequence) continue; // unpublished: start-up removes it
      let rowCount: number | undefined;
      try {
        const layout = readSegmentLayout(segment.directory);
        rowCount = layout.rowCount;
        verifySegment(segment.directory, layout);
      } catch (error) {
        // A file that cannot be read at all (EIO, a directory in its place) is damage as much as a bad checksum.
        if (!(error instanceof SegmentCorruptError) && !isFileSystemError(error)) throw error;
        const movedTo = quarantine.move(segment.directory);
        act({ action: "segment-moved-aside", segment: segment.directory, movedTo, damage: (error as Error).message, rowsLost: rowCount ?? "unknown", note: "a checkpoint sealed these rows, so the WAL no longer holds them: they are lost" });
      }
    }
  }

  // 3. Dictionaries: keep the intact prefix; move aside the segments that use ids past it.
  for (const workspaceId of workspaceIds) {
    const durable = checkpoint.dictionaryBytes.get(workspaceId) ?? [0, 0, 0];
    for (const [index, name] of dictionaryNames.entries()) {
      const path = dictionaryPath(dataDir, workspaceId, name);
      if (existsSync(path) && !isRegularFile(path)) {
        // A FIFO or device would block the read below for ever: moved aside, it is a missing dictionary.
        act({ action: "entry-moved-aside", entry: path, movedTo: quarantine.move(path), reason: "not a regular file" });
      }
      if (!existsSync(path)) {
        if (durable[index] === 0) continue;
        act({ action: "dictionary-missing", file: path, note: "every segment of the workspace that uses it is moved aside below" });
      }
      const bytes = existsSync(path) ? readFileSync(path) : Buffer.alloc(0);
      const { blocks, damage } = scanDictionaryBlocks(bytes);
      const keptBytes = damage?.offset ?? bytes.length;
      if (durableDamage(bytes, durable[index], damage) === undefined) continue;
      const keptIds = blocks.reduce((sum, block) => sum + block.count, 0);
      const copy = existsSync(path) ? quarantine.copy(path) : undefined;
      if (existsSync(path)) truncateSync(path, keptBytes);
      durable[index] = keptBytes;
      checkpointChanged = true;
      act({ action: "dictionary-cut", file: path, offset: keptBytes, copy, idsKept: keptIds, note: "ids past the damage cannot be known again; segments using them are moved aside" });
      for (const segment of segmentsOf(dataDir, workspaceId)) {
        if (segment.sequence > checkpoint.walSequence) continue;
        const used = idsUsed(segment.directory);
        if (used[name] <= keptIds) continue;
        const movedTo = quarantine.move(segment.directory);
        act({
          action: "segment-moved-aside",
          segment: segment.directory,
          movedTo,
          reason: `uses ${name} ids up to ${used[name] - 1}, past the ${keptIds} the damaged dictionary still names`,
          note: "a checkpoint sealed these rows, so the WAL no longer holds them: they are lost",
        });
      }
    }
    checkpoint.dictionaryBytes.set(workspaceId, durable);
  }

  // 4. WAL files start-up would replay: rewrite each corrupt one with every intact record.
  const sequences = listWalSequences(dataDir);
  for (const sequence of sequences) {
    if (sequence < checkpoint.walSequence) continue;
    const path = walFilePath(dataDir, sequence);
    const scan = scanWalFile(path);
    const state = scan.state;
    if (state.kind === "intact" || (state.kind === "torn-tail" && !damagedPastRotation(state, sequence, sequences))) continue;
    const copy = quarantine.copy(path);
    const records: Buffer[] = [];
    let offset = 0;
    for (const record of scan.allRecords) {
      // Every byte of the rewritten file before a record is durable once it is published.
      const encoded = encodeRecord(record.workspaceId, record.payload, offset);
      records.push(encoded);
      offset += encoded.length;
    }
    publishFileAtomically(path, Buffer.concat(records));
    act({
      action: "wal-rewritten",
      file: path,
      copy,
      damaged: scan.damaged,
      recordsKept: scan.allRecords.length,
      recordsKeptAfterDamage: scan.allRecords.filter((record) => record.start > state.offset).length,
    });
  }

  // 5. A workspace directory the checkpoint counts on that is gone: its durable dictionaries and sealed rows with it.
  for (const workspaceId of new Set([...checkpoint.dictionaryBytes.keys(), ...(checkpoint.sealedRows?.keys() ?? [])])) {
    if (existsSync(workspaceDirectory(dataDir, workspaceId))) continue;
    const rowsLost = checkpoint.sealedRows?.get(workspaceId) ?? "unknown";
    checkpoint.dictionaryBytes.delete(workspaceId);
    checkpoint.sealedRows?.delete(workspaceId);
    checkpointChanged = true;
    act({ action: "workspace-missing", workspace: workspaceDirectory(dataDir, workspaceId), rowsLost, note: "its dictionaries and sealed segments are gone; rows of it still in the write-ahead log are replayed" });
  }

  // 6. Sealed rows: what the steps above moved aside, or what vanished before (a segment or day directory removed by
  // hand, lost by the file system), is no longer counted; start-up then checks against what is left.
  for (const [workspaceId, counted] of checkpoint.sealedRows ?? []) {
    const found = publishedRows(dataDir, workspaceId, checkpoint.walSequence);
    if (found >= counted) continue;
    checkpoint.sealedRows!.set(workspaceId, found);
    checkpointChanged = true;
    act({
      action: "sealed-rows-recounted",
      workspace: workspaceDirectory(dataDir, workspaceId),
      counted,
      found,
      rowsLost: counted - found,
      note: "rows the last checkpoint counted in sealed segments and no longer found (a segment moved aside above, or missing); the WAL no longer holds them",
    });
  }

  if (checkpointChanged) publishFileAtomically(checkpointPath(dataDir), encodeCheckpointFile(checkpoint));
  if (actions.length === 0) act({ action: "nothing-to-repair" });
  return { quarantine: quarantine.path, actions };
}
