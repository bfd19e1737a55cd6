/**
 * A consistent copy of a data directory, taken while a server may be writing
 * it, without asking the server anything: `eventide backup` copies into a new
 * directory, `eventide export` links into a private one and reads that.
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
 * (copied whole, later than the acknowledgement) or sealed at a checkpoint ≤ C.
 */
import { closeSync, copyFileSync, existsSync, fsyncSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { errorCode } from "../storage/lock-file.js";
import { checkpointPath, isWorkspaceId, registryPath, walDirectory, workspacesDirectory } from "../storage/paths.js";

/** `copy`: independent files (a backup). `link`: segments and WAL files hard-linked, read-only use (export). */
export type SnapshotMode = "copy" | "link";

export interface SnapshotSummary {
  checkpointSequence: number;
  segments: number;
  walFiles: number;
  bytes: number;
  attempts: number;
}

/** Copies start over at most this often: each restart means a checkpoint finished during the copy (seconds apart). */
const snapshotAttemptsMax = 10;

class SnapshotChanged extends Error {}

const dayPattern = /^\d{4}-\d{2}-\d{2}$/;
const segmentPattern = /^seg-(\d+)-[0-9a-z]+$/;
const walPattern = /^\d{12}\.wal$/;
const dictionaryNames = ["_events.dict", "_users.dict", "_keys.dict"];

export function checkpointSequenceOf(dataDir: string): number {
  try {
    return (JSON.parse(readFileSync(checkpointPath(dataDir), "utf8")) as { walSequence: number }).walSequence;
  } catch (error) {
    if (errorCode(error) === "ENOENT") return 0;
    throw error;
  }
}

/**
 * Takes a snapshot of `source` into `target` (created; must not exist or be
 * empty). `workspaceId` limits the segments and dictionaries to one workspace
 * (WAL files hold every workspace and are taken whole).
 */
export function takeSnapshot(source: string, target: string, mode: SnapshotMode, workspaceId?: string): SnapshotSummary {
  for (let attempt = 1; ; attempt++) {
    rmSync(target, { recursive: true, force: true });
    mkdirSync(target, { recursive: true, mode: 0o700 });
    try {
      return { ...copyOnce(source, target, mode, workspaceId), attempts: attempt };
    } catch (error) {
      const vanished = errorCode(error) === "ENOENT";
      if (!(error instanceof SnapshotChanged) && !vanished) throw error;
      if (attempt >= snapshotAttemptsMax) throw new Error(`the data directory kept changing under the copy (${attempt} attempts); try again`);
    }
  }
}

function copyOnce(source: string, target: string, mode: SnapshotMode, onlyWorkspace: string | undefined): Omit<SnapshotSummary, "attempts"> {
  const checkpointSequence = checkpointSequenceOf(source);
  let segments = 0;
  let walFiles = 0;
  let bytes = 0;
  const put = (from: string, to: string, how: SnapshotMode): void => {
    bytes += statSync(from).size;
    if (how === "link") linkSync(from, to);
    else copyDurably(from, to);
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
        const match = segmentPattern.exec(segmentName);
        // Unpublished (a checkpoint in progress, a tmp_ directory): not part of the state at C.
        if (match === null || Number(match[1]) > checkpointSequence) continue;
        const segmentFrom = join(from, day, segmentName);
        if (!existsSync(join(segmentFrom, "_meta.json"))) continue;
        const segmentTo = join(to, day, segmentName);
        mkdirSync(segmentTo);
        // Segment files are immutable: a link shares them safely; _meta.json last, as the store publishes it.
        const names = readdirSync(segmentFrom).sort((left, right) => Number(left === "_meta.json") - Number(right === "_meta.json"));
        for (const name of names) put(join(segmentFrom, name), join(segmentTo, name), mode);
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
    // Recovery truncates a WAL file's torn tail: a backup's files must be its own.
    put(join(sourceWal, name), join(targetWal, name), mode);
    walFiles++;
  }

  if (existsSync(registryPath(source))) copyDurably(registryPath(source), registryPath(target));
  if (checkpointSequence > 0) writeDurably(checkpointPath(target), JSON.stringify({ walSequence: checkpointSequence }));
  if (checkpointSequenceOf(source) !== checkpointSequence) throw new SnapshotChanged();
  if (mode === "copy") fsyncTree(target);
  return { checkpointSequence, segments, walFiles, bytes };
}

/** Copies the bytes `from` holds now (a file being appended to is copied up to where it is) and fsyncs them. */
function copyDurably(from: string, to: string): void {
  copyFileSync(from, to);
  const fd = openSync(to, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function writeDurably(path: string, text: string): void {
  writeFileSync(path, text, { mode: 0o600 });
  const fd = openSync(path, "r");
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
