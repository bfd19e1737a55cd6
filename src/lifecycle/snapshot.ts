/**
 * A consistent copy of a data directory, taken while a server may be writing
 * it, without asking the server anything. Both `eventide backup` and
 * `eventide export` first take it as hard links in a private directory inside
 * the data directory (no bytes copied, so a busy server's checkpoints rarely
 * interrupt it); export reads that, backup then copies it out at leisure,
 * since a link keeps a file the server deletes meanwhile.
 *
 * What the store guarantees, and this relies on (storage/store.ts): sealed
 * segments are immutable and published by rename; a checkpoint names its
 * segments after the new WAL sequence and writes `_checkpoint.json` only once
 * they and the dictionaries are durable, then deletes older WAL files;
 * dictionaries only grow; WAL files only grow, and a file is never written
 * again once a newer one exists; a merge publishes its segment (listing the
 * ones it `replaces`) before deleting them.
 *
 * So the copy holds `_checkpoint.json` = C read first, every published
 * segment numbered ≤ C, then the dictionaries (after the segments: they cover
 * every id those use), then every WAL file ≥ C, and `_checkpoint.json` is read
 * again last: if it changed, a checkpoint may have deleted WAL files before
 * they were copied, and the copy starts over. The result is a state a crash of
 * the server during the copy could have left: recovery (Store.open) cuts a
 * torn WAL tail, drops segments above C and finishes interrupted merges. Every
 * event acknowledged before the copy began is in it: it was in a WAL file ≥ C
 * (linked whole, later than the acknowledgement) or sealed at a checkpoint ≤ C.
 */
import { closeSync, copyFileSync, existsSync, fsyncSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { join } from "node:path";

import { assertRegularFile, readRegularFile } from "../storage/files.js";
import { errorCode } from "../storage/lock-file.js";
import { checkpointPath, isWorkspaceId, registryPath, segmentNamePattern, walDirectory, workspacesDirectory } from "../storage/paths.js";

export interface SnapshotSummary {
  checkpointSequence: number;
  segments: number;
  walFiles: number;
  bytes: number;
  attempts: number;
}

/** Links start over at most this often: each restart means a checkpoint finished during the few milliseconds of linking. */
const snapshotAttemptsMax = 20;
/** Private snapshot directories inside the data directory: `tmp_` entries are never read by the store (`tmp_export_`: older versions). */
const snapshotPrefix = "tmp_snapshot_";

class SnapshotChanged extends Error {}

const dayPattern = /^\d{4}-\d{2}-\d{2}$/;
const walPattern = /^\d{12}\.wal$/;
const dictionaryNames = ["_events.dict", "_users.dict", "_keys.dict"];

export function checkpointSequenceOf(dataDir: string): number {
  try {
    return (JSON.parse(readRegularFile(checkpointPath(dataDir)).toString("utf8")) as { walSequence: number }).walSequence;
  } catch (error) {
    if (errorCode(error) === "ENOENT") return 0;
    throw error;
  }
}

/**
 * Links a snapshot of `source` into a new private directory inside it and
 * returns its path; the caller removes it (`removeSnapshot`), or the next
 * snapshot does if the caller was killed. `workspaceId` limits the segments
 * and dictionaries to one workspace (WAL files hold every workspace and are
 * taken whole).
 */
export function linkSnapshot(source: string, workspaceId?: string): { directory: string; summary: SnapshotSummary } {
  removeAbandonedSnapshots(source);
  const directory = join(source, `${snapshotPrefix}${process.pid}_${randomBytes(4).toString("hex")}`);
  for (let attempt = 1; ; attempt++) {
    rmSync(directory, { recursive: true, force: true });
    mkdirSync(directory, { mode: 0o700 });
    try {
      return { directory, summary: { ...linkOnce(source, directory, workspaceId), attempts: attempt } };
    } catch (error) {
      const vanished = errorCode(error) === "ENOENT";
      if ((!(error instanceof SnapshotChanged) && !vanished) || attempt >= snapshotAttemptsMax) {
        rmSync(directory, { recursive: true, force: true });
        if (error instanceof SnapshotChanged || vanished) throw new Error(`the data directory kept changing under the snapshot (${attempt} attempts); try again`);
        throw error;
      }
    }
  }
}

export function removeSnapshot(directory: string): void {
  rmSync(directory, { recursive: true, force: true });
}

/**
 * Copies a linked snapshot into `target` (created), every file its own and
 * durable, directory times kept (the uuid horizon reads a segment's, store.ts
 * writtenAtMs). The newest WAL file may still grow through its link: it is
 * copied up to where it is, and recovery cuts a torn tail.
 */
export function copySnapshot(snapshot: string, target: string): void {
  copyTree(snapshot, target);
  fsyncTree(target);
}

function copyTree(from: string, to: string): void {
  mkdirSync(to, { recursive: true, mode: 0o700 });
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    if (entry.isDirectory()) copyTree(join(from, entry.name), join(to, entry.name));
    else copyDurably(join(from, entry.name), join(to, entry.name));
  }
  const { atime, mtime } = statSync(from);
  utimesSync(to, atime, mtime);
}

/** Removes snapshots of commands that were killed (their process is gone). */
function removeAbandonedSnapshots(dataDir: string): void {
  for (const name of readdirSync(dataDir)) {
    const match = /^tmp_(?:snapshot|export)_(\d+)_/.exec(name);
    if (match === null) continue;
    try {
      process.kill(Number(match[1]), 0);
      continue;
    } catch (error) {
      if (errorCode(error) !== "ESRCH") continue;
    }
    rmSync(join(dataDir, name), { recursive: true, force: true });
  }
}

function linkOnce(source: string, target: string, onlyWorkspace: string | undefined): Omit<SnapshotSummary, "attempts"> {
  const checkpointSequence = checkpointSequenceOf(source);
  let segments = 0;
  let walFiles = 0;
  let bytes = 0;
  const put = (from: string, to: string, how: "link" | "copy"): void => {
    bytes += statSync(from).size;
    if (how === "link") linkSync(from, to);
    else {
      assertRegularFile(from);
      copyFileSync(from, to);
    }
  };

  const sourceWorkspaces = workspacesDirectory(source);
  const targetWorkspaces = workspacesDirectory(target);
  mkdirSync(targetWorkspaces);
  for (const workspaceId of existsSync(sourceWorkspaces) ? readdirSync(sourceWorkspaces) : []) {
    if (!isWorkspaceId(workspaceId) || (onlyWorkspace !== undefined && workspaceId !== onlyWorkspace)) continue;
    const from = join(sourceWorkspaces, workspaceId);
    const to = join(targetWorkspaces, workspaceId);
    mkdirSync(to);
    for (const day of readdirSync(from)) {
      if (!dayPattern.test(day)) continue;
      mkdirSync(join(to, day));
      for (const segmentName of readdirSync(join(from, day))) {
        const match = segmentNamePattern.exec(segmentName);
        // Unpublished (a checkpoint in progress, a tmp_ directory): not part of the state at C.
        if (match === null || Number(match[1]) > checkpointSequence) continue;
        const segmentFrom = join(from, day, segmentName);
        if (!existsSync(join(segmentFrom, "_meta.json"))) continue;
        const segmentTo = join(to, day, segmentName);
        mkdirSync(segmentTo);
        // Segment files are immutable: a link shares them safely; _meta.json last, as the store publishes it.
        const names = readdirSync(segmentFrom).sort((left, right) => Number(left === "_meta.json") - Number(right === "_meta.json"));
        for (const name of names) put(join(segmentFrom, name), join(segmentTo, name), "link");
        // The directory's time is when the segment was written, which the uuid horizon reads (store.ts writtenAtMs).
        const { atime, mtime } = statSync(segmentFrom);
        utimesSync(segmentTo, atime, mtime);
        segments++;
      }
    }
    // After the segments: a dictionary read now holds every id they use. Always copied, since
    // loading a dictionary cuts a torn tail, which must never touch the server's file.
    for (const name of dictionaryNames) {
      if (existsSync(join(from, name))) put(join(from, name), join(to, name), "copy");
    }
  }

  const sourceWal = walDirectory(source);
  const targetWal = walDirectory(target);
  mkdirSync(targetWal);
  // Listed once: every listed file but the newest is complete, since the store writes only the newest.
  const walNames = existsSync(sourceWal) ? readdirSync(sourceWal).filter((name) => walPattern.test(name)).sort() : [];
  for (const name of walNames) {
    if (Number(name.slice(0, 12)) < checkpointSequence) continue;
    // A link keeps the file if a checkpoint deletes it; readers copy it before recovery may cut its tail.
    put(join(sourceWal, name), join(targetWal, name), "link");
    walFiles++;
  }

  if (existsSync(registryPath(source))) copyFileSync(registryPath(source), registryPath(target));
  if (checkpointSequence > 0) writeFileSync(checkpointPath(target), JSON.stringify({ walSequence: checkpointSequence }), { mode: 0o600 });
  if (checkpointSequenceOf(source) !== checkpointSequence) throw new SnapshotChanged();
  return { checkpointSequence, segments, walFiles, bytes };
}

/** Copies the bytes `from` holds now (a file being appended to is copied up to where it is) and fsyncs them. */
function copyDurably(from: string, to: string): void {
  assertRegularFile(from);
  copyFileSync(from, to);
  const fd = openSync(to, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Every directory of the copy, so its entries survive a power loss too. */
function fsyncTree(directory: string): void {
  for (const entry of readdirSync(directory, { withFileTypes: true })) if (entry.isDirectory()) fsyncTree(join(directory, entry.name));
  const fd = openSync(directory, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
