/**
 * Format versions: every file of the data directory says which format wrote
 * it — the registry and `_checkpoint.json` by a field, the WAL's records and
 * the dictionaries' blocks by the last character of their magic ("EWL2",
 * "DIC1"), a segment by its `_meta.json` (which describes its column files).
 * A file written by a newer Eventide is refused before anything is read or
 * cut: an older server must never take a newer WAL record for a torn tail, a
 * newer segment for damage (repair would move it aside), or rewrite either.
 * Start-up checks the lot here; segments are checked as their layout is read.
 * The upgrade path is the other direction: a format this version still reads
 * is read as it is, and test/storage/format-upgrade.test.ts keeps a data
 * directory of each released format answering the same queries.
 */
import { closeSync, existsSync, readdirSync, readSync } from "node:fs";
import { openRegularFile, readRegularFile } from "./files.js";
import { checkpointPath, dictionaryPath, isWorkspaceId, walDirectory, walFilePath, workspacesDirectory } from "./paths.js";
import { firstBlockIsCurrentFormat } from "./dictionary.js";
import { firstRecordIsCurrentFormat } from "./wal.js";
import { readCheckpointFile } from "./checkpoint-file.js";

/** `_checkpoint.json`'s `format`; files written before it existed have none and are format 1 (2 adds sealedRows). */
export const checkpointFormatVersion = 2;
/** The newest WAL record format ("EWL<n>") and dictionary block format ("DIC<n>") this version reads. */
export const walRecordFormatVersion = 2;
export const dictionaryFormatVersion = 1;

/** A file of the data directory that a newer Eventide wrote: not damage, and nothing to repair. */
export class NewerFormatError extends Error {
  constructor(path: string, what: string, found: number, known: number) {
    super(`${path}: written by a newer Eventide (${what} format ${found}; this version reads up to ${known}). Run that version (or newer) on this data directory, or restore a backup taken with this one`);
  }
}

/** The format digit after a 3-letter magic at the start of a file, or undefined when the file does not start with it. */
function magicVersion(path: string, prefix: string): number | undefined {
  const bytes = Buffer.alloc(4);
  // Not a regular file: start-up names it as damage where it reads it whole.
  const fd = openRegularFile(path);
  if (fd === undefined) return undefined;
  try {
    if (readSync(fd, bytes, 0, 4, 0) < 4) return undefined;
  } finally {
    closeSync(fd);
  }
  if (bytes.toString("latin1", 0, 3) !== prefix) return undefined;
  const digit = bytes[3] - 0x30;
  return digit >= 0 && digit <= 9 ? digit : undefined;
}

/** Whether `_checkpoint.json` reads as this version's whatever its format says (a newer format's checksum is to cover its format). */
function checkpointChecksOut(dataDir: string): boolean {
  try {
    readCheckpointFile(dataDir);
    return true;
  } catch {
    return false;
  }
}

/** Throws NewerFormatError naming the first file of `dataDir` a newer version wrote (segments: segment-reader.ts). */
export function refuseNewerFormats(dataDir: string): void {
  const checkpoint = checkpointPath(dataDir);
  if (existsSync(checkpoint)) {
    let format: unknown;
    try {
      format = (JSON.parse(readRegularFile(checkpoint).toString("utf8")) as { format?: unknown }).format;
    } catch {
      // Unreadable: recovery reports it as damage.
    }
    // As with the WAL and dictionaries: a file that checks out as this version's (its checksum leaves the format out) has a damaged digit.
    if (typeof format === "number" && format > checkpointFormatVersion && !checkpointChecksOut(dataDir)) throw new NewerFormatError(checkpoint, "checkpoint", format, checkpointFormatVersion);
  }
  const wal = walDirectory(dataDir);
  if (existsSync(wal)) {
    for (const name of readdirSync(wal)) {
      if (!/^\d{12}\.wal$/.test(name)) continue;
      const path = walFilePath(dataDir, Number(name.slice(0, 12)));
      const version = magicVersion(path, "EWL");
      // A digit one flipped bit away from this version's, on a record that otherwise reads as one: damage (recovery says so).
      if (version !== undefined && version > walRecordFormatVersion && !firstRecordIsCurrentFormat(path)) throw new NewerFormatError(path, "write-ahead log record", version, walRecordFormatVersion);
    }
  }
  if (!existsSync(workspacesDirectory(dataDir))) return;
  for (const workspaceId of readdirSync(workspacesDirectory(dataDir))) {
    if (!isWorkspaceId(workspaceId)) continue;
    for (const dictionary of ["events", "users", "keys"] as const) {
      const path = dictionaryPath(dataDir, workspaceId, dictionary);
      if (!existsSync(path)) continue;
      const version = magicVersion(path, "DIC");
      if (version !== undefined && version > dictionaryFormatVersion && !firstBlockIsCurrentFormat(path)) throw new NewerFormatError(path, "dictionary", version, dictionaryFormatVersion);
    }
  }
}
