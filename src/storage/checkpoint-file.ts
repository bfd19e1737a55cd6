/**
 * `_checkpoint.json`: the WAL sequence the last completed checkpoint reached,
 * the byte length of every workspace's dictionaries it fsynced, and (format
 * 2) how many rows each workspace's sealed segments held. The lengths let
 * start-up tell a dictionary block that was durable (its loss is corruption:
 * sealed segments use its ids) from one a power loss may tear (a checkpoint
 * that never published it; WAL replay re-creates its ids). The rows let it
 * tell a store whose segment or day directory vanished (deleted by hand, lost
 * by the file system) from a whole one: nothing else lists the segments that
 * should exist, and the WAL no longer holds their rows. A CRC32 covers the
 * rest of the file, so a flipped digit never names the wrong sequence. A file
 * without it (written before the checksum existed) is read as it is; one
 * without rows (format 1, a backup's copy) is not checked for them.
 */
import { existsSync } from "node:fs";
import { publishFileAtomically, readRegularFile } from "./files.js";
import { crc32 } from "node:zlib";
import { StoreCorruptionError } from "./corruption.js";
import { checkpointFormatVersion } from "./format-versions.js";
import { checkpointPath } from "./paths.js";

export interface CheckpointFile {
  walSequence: number;
  /** Per workspace: bytes of its events, users and keys dictionaries made durable by the checkpoint. */
  dictionaryBytes: Map<string, [number, number, number]>;
  /**
   * Per workspace: at most how many rows its published sealed segments hold (a deletion lowers it before it
   * removes rows, so a crash in between leaves more, never fewer); undefined: not known (format 1), not checked.
   */
  sealedRows: Map<string, number> | undefined;
}

type DictionaryBytesEntry = [string, number, number, number];
type SealedRowsEntry = [string, number];

function checksummed(walSequence: number, dictionaryBytes: DictionaryBytesEntry[], sealedRows: SealedRowsEntry[] | undefined): number {
  return crc32(JSON.stringify(sealedRows === undefined ? { walSequence, dictionaryBytes } : { walSequence, dictionaryBytes, sealedRows }));
}

export function encodeCheckpointFile(checkpoint: CheckpointFile): string {
  const dictionaryBytes: DictionaryBytesEntry[] = [...checkpoint.dictionaryBytes].map(([workspaceId, bytes]) => [workspaceId, ...bytes]);
  const sealedRows: SealedRowsEntry[] | undefined = checkpoint.sealedRows === undefined ? undefined : [...checkpoint.sealedRows].sort(([left], [right]) => (left < right ? -1 : 1));
  // The format is outside the checksum: files written before it existed check out as they are, and a flipped bit in
  // the digit of one that checks out reads as damage, not as a newer version's file (format-versions.ts). Format 1's
  // readers do not know sealedRows, which its checksum covers: to them this file is a newer one, as it is.
  const format = sealedRows === undefined ? 1 : checkpointFormatVersion;
  return JSON.stringify({ format, walSequence: checkpoint.walSequence, dictionaryBytes, ...(sealedRows === undefined ? {} : { sealedRows }), crc32: checksummed(checkpoint.walSequence, dictionaryBytes, sealedRows) });
}

function isCount(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

/** Reads `_checkpoint.json` (none: sequence 0, no dictionary bytes); throws StoreCorruptionError when it does not check out. */
export function readCheckpointFile(dataDir: string): CheckpointFile {
  const path = checkpointPath(dataDir);
  if (!existsSync(path)) return { walSequence: 0, dictionaryBytes: new Map(), sealedRows: undefined };
  let parsed: { walSequence?: unknown; dictionaryBytes?: unknown; sealedRows?: unknown; crc32?: unknown };
  try {
    parsed = JSON.parse(readRegularFile(path).toString("utf8"));
  } catch (error) {
    if (error instanceof StoreCorruptionError) throw error;
    throw new StoreCorruptionError(path, undefined, `unreadable (${(error as Error).message})`);
  }
  const { walSequence, dictionaryBytes = [], sealedRows, crc32: checksum } = parsed ?? {};
  if (!isCount(walSequence)) throw new StoreCorruptionError(path, undefined, "no valid walSequence");
  if (checksum === undefined && parsed.dictionaryBytes === undefined) return { walSequence, dictionaryBytes: new Map(), sealedRows: undefined };
  const entries = dictionaryBytes as DictionaryBytesEntry[];
  const rows = sealedRows as SealedRowsEntry[] | undefined;
  const wellFormed =
    Array.isArray(entries) &&
    entries.every((entry) => Array.isArray(entry) && entry.length === 4 && typeof entry[0] === "string" && entry.slice(1).every(isCount)) &&
    (rows === undefined || (Array.isArray(rows) && rows.every((entry) => Array.isArray(entry) && entry.length === 2 && typeof entry[0] === "string" && isCount(entry[1]))));
  if (!wellFormed || checksum !== checksummed(walSequence, entries, rows)) throw new StoreCorruptionError(path, undefined, "checksum mismatch");
  return {
    walSequence,
    dictionaryBytes: new Map(entries.map(([workspaceId, events, users, keys]) => [workspaceId, [events, users, keys]])),
    sealedRows: rows === undefined ? undefined : new Map(rows),
  };
}

/**
 * Drops a deleted workspace's dictionary lengths and rows (eventide workspace
 * delete), published atomically; otherwise start-up would take its missing
 * directory for lost durable data.
 */
export function forgetWorkspace(dataDir: string, workspaceId: string): void {
  const checkpoint = readCheckpointFile(dataDir);
  const forgotRows = checkpoint.sealedRows?.delete(workspaceId) ?? false;
  if (!checkpoint.dictionaryBytes.delete(workspaceId) && !forgotRows) return;
  publishFileAtomically(checkpointPath(dataDir), encodeCheckpointFile(checkpoint));
}
