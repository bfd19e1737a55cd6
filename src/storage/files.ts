/**
 * File primitives with the durability rules of the store: atomic publish
 * (write tmp_…, fsync, rename, fsync the directory), directory fsync, and
 * directories whose creation is itself durable. A new directory entry — file,
 * directory or rename target — survives a power loss only once its parent
 * directory has been fsynced, so every helper that creates one fsyncs the
 * parent before returning.
 */
import { chmodSync, closeSync, constants, existsSync, fstatSync, fsyncSync, lstatSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statfsSync, writeSync } from "node:fs";
import { open, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { StoreCorruptionError } from "./corruption.js";
import { recordCreate, recordDirectorySync } from "./fault-injection.js";

/**
 * Makes the data directory the owner's alone: it holds every event and the
 * credential hashes. The process's umask becomes 077, so every file and
 * directory any thread creates from now on is 0600 / 0700 whatever mode its
 * creator asked for; the directory itself is created, or changed, to 0700,
 * which also closes what an older version created 0644 / 0755 below it
 * (nobody else can reach past a 0700 directory).
 */
export function makeDataDirectoryPrivate(dataDir: string): void {
  process.umask(0o077);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  chmodSync(dataDir, 0o700);
}

export function fsyncDirectory(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  recordDirectorySync(path);
}

/** fsyncDirectory in libuv's thread pool, for work the main thread should not wait out. */
export async function fsyncDirectoryInPool(path: string): Promise<void> {
  const handle = await open(path, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
  recordDirectorySync(path);
}

/**
 * `mkdir -p` whose result survives a power loss: each level it creates is
 * made durable by an fsync of its parent (without fsync, a plain mkdir).
 */
export function makeDirectoryDurably(path: string, fsync = true): void {
  if (existsSync(path)) return;
  const missing: string[] = [];
  for (let level = path; !existsSync(level); level = dirname(level)) missing.push(level);
  mkdirSync(path, { recursive: true });
  for (const level of missing.reverse()) {
    recordCreate(level);
    if (fsync) fsyncDirectory(dirname(level));
  }
}

/** Renames `source` to `target` (a new name) and makes the new entry durable. */
export function renameIntoPlace(source: string, target: string, fsync = true): void {
  renameSync(source, target);
  recordCreate(target);
  if (fsync) fsyncDirectory(dirname(target));
}

/**
 * Deletes a directory without ever leaving it half-deleted under its own name
 * (a kill during a recursive delete would leave a segment without its
 * `_meta.json`, which start-up cannot read): it is renamed to
 * `tmp_deleted_<name>` first, in one step, and start-up removes tmp_ leftovers.
 * The caller fsyncs the parent when the deletion must be durable.
 */
export function removeDirectory(path: string): void {
  if (!existsSync(path)) return;
  const doomed = join(dirname(path), `tmp_deleted_${basename(path)}`);
  rmSync(doomed, { recursive: true, force: true });
  renameSync(path, doomed);
  rmSync(doomed, { recursive: true, force: true });
}

/**
 * removeDirectory whose file deletions run in libuv's thread pool: only the
 * rename is synchronous. A merge's victims hold tens of files each; unlinked
 * on the main thread they stalled it 2–6 ms per victim while merges settled.
 */
export async function removeDirectoryInPool(path: string): Promise<void> {
  if (!existsSync(path)) return;
  const doomed = join(dirname(path), `tmp_deleted_${basename(path)}`);
  if (existsSync(doomed)) await rm(doomed, { recursive: true, force: true });
  renameSync(path, doomed);
  await rm(doomed, { recursive: true, force: true });
}

export function writeFileDurably(path: string, data: Uint8Array | string, fsync = true): void {
  const fd = openSync(path, "w");
  try {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
    if (fsync) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Where a file is written before it is renamed over `path`. */
function publishingPath(path: string): string {
  return join(dirname(path), `tmp_${basename(path)}.${process.pid}`);
}

/** Renames the written `temporary` over `path`; the caller fsyncs the directory. */
function renameOver(temporary: string, path: string): void {
  const replacing = existsSync(path);
  renameSync(temporary, path);
  // Replacing an existing file creates no new entry: before the directory fsync a power loss leaves the old or the new file, both valid.
  if (!replacing) recordCreate(path);
}

/** publishFileAtomically with the write and both fsyncs in libuv's thread pool (the checkpoint file, while requests are served). */
export async function publishFileAtomicallyInPool(path: string, data: Uint8Array | string, fsync = true): Promise<void> {
  const temporary = publishingPath(path);
  const file = await open(temporary, "w");
  try {
    await file.writeFile(data);
    if (fsync) await file.sync();
  } finally {
    await file.close();
  }
  renameOver(temporary, path);
  if (fsync) await fsyncDirectoryInPool(dirname(path));
}

/** Replaces `path` atomically: readers see the old file or the new one, never a mix. */
export function publishFileAtomically(path: string, data: Uint8Array | string, fsync = true): void {
  const temporary = publishingPath(path);
  writeFileDurably(temporary, data, fsync);
  renameOver(temporary, path);
  if (fsync) fsyncDirectory(dirname(path));
}

/**
 * Opens a store file for reading, or undefined (closed again) when it is not a
 * regular file. O_NONBLOCK: a FIFO in a file's place blocked its opener for
 * ever, and start-up with it (a hung disk looks the same to a reader).
 */
export function openRegularFile(path: string): number | undefined {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  if (fstatSync(fd).isFile()) return fd;
  closeSync(fd);
  return undefined;
}

/** Whether `path` is a regular file, asked without opening it (a FIFO is not opened: that would block). */
export function isRegularFile(path: string): boolean {
  return lstatSync(path).isFile();
}

/** StoreCorruptionError unless `path` is a regular file: a copy of a FIFO (backup) blocks for ever. */
export function assertRegularFile(path: string): void {
  if (!isRegularFile(path)) throw new StoreCorruptionError(path, undefined, notRegularFile);
}

const notRegularFile = "not a regular file (a FIFO, a device or a directory in its place)";

/** The whole of a store file; `refused(path)` (StoreCorruptionError) when something other than a regular file is in its place. */
export function readRegularFile(path: string, refused: (path: string) => Error = (at) => new StoreCorruptionError(at, undefined, notRegularFile)): Buffer {
  const fd = openRegularFile(path);
  if (fd === undefined) throw refused(path);
  try {
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * `_checkpoint.reserve`: disk space held back for `_checkpoint.json`. A
 * deletion must publish a lower row count before it removes rows (checkpoint.ts,
 * expectFewerRows), a write of a new file; on a full disk that write failed, and
 * the deletion that would have freed space (expired days) could not run. Then
 * the reserve is removed and the write tried again; it comes back once there is
 * room.
 */
const reserveBytes = 256 * 1024;

export function checkpointReservePath(dataDir: string): string {
  return join(dataDir, "_checkpoint.reserve");
}

export function isOutOfSpace(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === "ENOSPC" || code === "EDQUOT";
}

/** Free space below which the reserve is not written back: it would take what the log needs next. */
const reserveRoomBytes = 32 * 1024 * 1024;

/**
 * Writes the reserve when it is missing and the disk has room for it and more
 * (its blocks allocated: zeros, not a hole; fsynced, so a power loss does not
 * leave an empty file that passes for it). A short write is a full disk.
 */
export function ensureReserve(dataDir: string): void {
  const path = checkpointReservePath(dataDir);
  if (existsSync(path)) return;
  const { bavail, bsize } = statfsSync(dataDir);
  if (bavail * bsize < reserveRoomBytes + reserveBytes) return;
  const temporary = `${path}.tmp`;
  const fd = openSync(temporary, "w", 0o600);
  try {
    if (writeSync(fd, Buffer.alloc(reserveBytes)) < reserveBytes) throw Object.assign(new Error(`ENOSPC: short write of ${temporary}`), { code: "ENOSPC" });
    fsyncSync(fd);
  } catch (error) {
    closeSync(fd);
    rmSync(temporary, { force: true });
    throw error;
  }
  closeSync(fd);
  renameSync(temporary, path);
}

/** Removes the reserve; false when there was none to give. */
export function releaseReserve(dataDir: string): boolean {
  const path = checkpointReservePath(dataDir);
  if (!existsSync(path)) return false;
  rmSync(path, { force: true });
  return true;
}
