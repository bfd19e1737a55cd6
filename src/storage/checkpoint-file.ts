/**
 * `_checkpoint.json`: the WAL sequence the last completed checkpoint reached,
 * and the byte length of every workspace's dictionaries it fsynced. The
 * lengths let start-up tell a dictionary block that was durable (its loss is
 * corruption: sealed segments use its ids) from one a power loss may tear (a
 * checkpoint that never published it; WAL replay re-creates its ids). A
 * CRC32 covers the rest of the file, so a flipped digit never names the wrong
 * sequence. A file without it (written before the checksum existed) is read
 * as it is.
 */
import { existsSync, readFileSync } from "node:fs";
import { publishFileAtomically } from "./files.js";
import { crc32 } from "node:zlib";
import { StoreCorruptionError } from "./corruption.js";
import { checkpointFormatVersion } from "./format-versions.js";
import { checkpointPath } from "./paths.js";

export interface CheckpointFile {
  walSequence: number;
  /** Per workspace: bytes of its events, users and keys dictionaries made durable by the checkpoint. */
  dictionaryBytes: Map<string, [number, number, number]>;
}

type DictionaryBytesEntry = [string, number, number, number];

function checksummed(walSequence: number, dictionaryBytes: DictionaryBytesEntry[]): number {
  return crc32(JSON.stringify({ walSequence, dictionaryBytes }));
}

export function encodeCheckpointFile(checkpoint: CheckpointFile): string {
  const dictionaryBytes: DictionaryBytesEntry[] = [...checkpoint.dictionaryBytes].map(([workspaceId, bytes]) => [workspaceId, ...bytes]);
  // The format is outside the checksum: files written before it existed check out as they are. A newer format's
  // checksum is to cover its format, so that a flipped bit in this one's digit reads as damage (format-versions.ts).
  return JSON.stringify({ format: checkpointFormatVersion, walSequence: checkpoint.walSequence, dictionaryBytes, crc32: checksummed(checkpoint.walSequence, dictionaryBytes) });
}

function isCount(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

/** Reads `_checkpoint.json` (none: sequence 0, no dictionary bytes); throws StoreCorruptionError when it does not check out. */
export function readCheckpointFile(dataDir: string): CheckpointFile {
  const path = checkpointPath(dataDir);
  if (!existsSync(path)) return { walSequence: 0, dictionaryBytes: new Map() };
  let parsed: { walSequence?: unknown; dictionaryBytes?: unknown; crc32?: unknown };
  try {
    parsed = JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    throw new StoreCorruptionError(path, undefined, `unreadable (${(error as Error).message})`);
  }
  const { walSequence, dictionaryBytes = [], crc32: checksum } = parsed ?? {};
  if (!isCount(walSequence)) throw new StoreCorruptionError(path, undefined, "no valid walSequence");
  if (checksum === undefined && parsed.dictionaryBytes === undefined) return { walSequence, dictionaryBytes: new Map() };
  const entries = dictionaryBytes as DictionaryBytesEntry[];
  const wellFormed = Array.isArray(entries) && entries.every((entry) => Array.isArray(entry) && entry.length === 4 && typeof entry[0] === "string" && entry.slice(1).every(isCount));
  if (!wellFormed || checksum !== checksummed(walSequence, entries)) throw new StoreCorruptionError(path, undefined, "checksum mismatch");
  return { walSequence, dictionaryBytes: new Map(entries.map(([workspaceId, events, users, keys]) => [workspaceId, [events, users, keys]])) };
}

/**
 * Drops a deleted workspace's dictionary lengths (eventide workspace delete),
 * published atomically; otherwise start-up would take its missing directory
 * for lost durable data.
 */
export function forgetWorkspace(dataDir: string, workspaceId: string): void {
  const checkpoint = readCheckpointFile(dataDir);
  if (!checkpoint.dictionaryBytes.delete(workspaceId)) return;
  publishFileAtomically(checkpointPath(dataDir), encodeCheckpointFile(checkpoint));
}
