/**
 * Checks a copied store as start-up would, without changing it: every sealed
 * segment's files against their checksums, every WAL file for damage that a
 * torn write cannot explain, every dictionary against the lengths the copied
 * checkpoint made durable, and the checkpoint itself. A backup used to copy
 * damaged files and report success; the damage then showed at the restore,
 * when the original may be gone. A torn tail (the newest bytes of a running
 * server's log or dictionary) is not damage: start-up cuts it; but a
 * damaged whole record ending a log file that a later one follows is, when
 * the server syncs (recovery.ts, damagedPastRotation), as at start-up.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { readCheckpointFile } from "../storage/checkpoint-file.js";
import { StoreCorruptionError } from "../storage/corruption.js";
import { durableDamage } from "../storage/dictionary.js";
import { dictionaryPath, isWorkspaceId, walDirectory, walFilePath, workspaceDirectory, workspacesDirectory, type DictionaryName } from "../storage/paths.js";
import { damagedPastRotation } from "../storage/recovery.js";
import { readSegmentLayout, verifySegment } from "../storage/segment-reader.js";
import { listWalSequences, scanWalFile } from "../storage/wal.js";

/** The first damage found in the store at `directory` (to be served with `fsync`): its path and what is wrong; undefined when it checks out. */
export function firstDamage(directory: string, fsync: boolean): { path: string; detail: string } | undefined {
  let dictionaryBytes: Map<string, [number, number, number]>;
  try {
    dictionaryBytes = readCheckpointFile(directory).dictionaryBytes;
  } catch (error) {
    return damageOf(error, join(directory, "_checkpoint.json"));
  }
  if (existsSync(walDirectory(directory))) {
    const sequences = listWalSequences(directory);
    for (const sequence of sequences) {
      const path = walFilePath(directory, sequence);
      const { state } = scanWalFile(path);
      if (state.kind === "corrupt" || state.kind === "cut") return { path, detail: `${state.kind === "cut" ? "durable bytes missing" : "damaged durable bytes"} at byte ${state.offset}` };
      if (fsync && damagedPastRotation(state, sequence, sequences)) return { path, detail: `a damaged record at byte ${state.offset}, ending a log file that later ones follow (durable bytes)` };
    }
  }
  const workspaces = existsSync(workspacesDirectory(directory)) ? readdirSync(workspacesDirectory(directory)).filter(isWorkspaceId) : [];
  for (const workspaceId of workspaces) {
    const durable = dictionaryBytes.get(workspaceId) ?? [0, 0, 0];
    for (const [index, name] of (["events", "users", "keys"] as DictionaryName[]).entries()) {
      const path = dictionaryPath(directory, workspaceId, name);
      const damage = durableDamage(existsSync(path) ? readFileSync(path) : Buffer.alloc(0), durable[index]);
      if (damage !== undefined) return { path, detail: `${damage.reason} (byte ${damage.offset})` };
    }
    const workspace = workspaceDirectory(directory, workspaceId);
    for (const day of readdirSync(workspace).filter((name) => /^\d{4}-\d{2}-\d{2}$/.test(name))) {
      for (const segment of readdirSync(join(workspace, day))) {
        if (segment.startsWith("tmp_")) continue;
        const path = join(workspace, day, segment);
        try {
          verifySegment(path, readSegmentLayout(path));
        } catch (error) {
          return damageOf(error, path);
        }
      }
    }
  }
  return undefined;
}

function damageOf(error: unknown, path: string): { path: string; detail: string } {
  if (error instanceof StoreCorruptionError) return { path: error.path, detail: error.detail };
  return { path, detail: (error as Error).message };
}
