/**
 * Power loss, simulated from the test side. A server started with
 * EVENTIDE_SYNC_JOURNAL appends one line per durability event
 * (src/storage/fault-injection.ts): `file <bytes> <path>` after an fsync,
 * `create <path>` when a directory entry appears, `dir <path>` after a
 * directory fsync. After a kill -9, `losePower` turns the data directory into
 * one state a power cut at that moment may leave:
 *
 *  - a directory entry (WAL file, dictionary, day or segment directory) whose
 *    parent directory was not fsynced after it appeared is gone, with all
 *    beneath it;
 *  - every WAL and dictionary file loses what was written after its last
 *    fsync, in one of the ways a lost page cache or a torn write leaves it: cut
 *    exactly at the synced length; a random prefix of the unsynced bytes kept
 *    (a torn record, or whole records that were never acknowledged); zeros or
 *    garbage past the synced length (an extended size whose blocks never
 *    arrived); a torn copy of a record header promising bytes that never came.
 *
 * Not simulated: a rename over an existing file (`_checkpoint.json`) or an
 * unlink coming undone. Both are followed by their directory fsync in the
 * same synchronous step of the store, so only a kill landing between two
 * system calls could split them, and the test cannot rebuild the old file.
 * Segment column files are fsynced before their directory is renamed into
 * place, so they are never cut.
 *
 * What survived a power loss is on disk: the journal is extended with the
 * new lengths and directory syncs, so a later cycle never cuts deeper.
 */
import { appendFileSync, existsSync, readFileSync, rmSync, statSync, truncateSync } from "node:fs";
import { dirname } from "node:path";
import type { Random } from "./random.js";

export type TailDamage = "cut at the synced length" | "unsynced prefix kept" | "zeros past the synced length" | "garbage past the synced length" | "torn header past the synced length";

export const tailDamages: readonly TailDamage[] = [
  "cut at the synced length",
  "unsynced prefix kept",
  "zeros past the synced length",
  "garbage past the synced length",
  "torn header past the synced length",
];

export interface PowerLossReport {
  /** Bytes written but never fsynced, thrown away or damaged, over every file. */
  unsyncedBytes: number;
  /** Files whose tail was changed, with the damage applied. */
  damagedFiles: Array<{ path: string; syncedBytes: number; fileBytes: number; damage: TailDamage }>;
  /** Directory entries dropped because their directory was never fsynced after they appeared. */
  droppedEntries: string[];
}

interface JournalState {
  /** Per path: line number of its last `create`. */
  created: Map<string, number>;
  /** Per file: bytes its last fsync covered (since its last `create`). */
  synced: Map<string, number>;
  /** Per directory: line number of its last fsync. */
  directorySynced: Map<string, number>;
}

export function readJournal(journalPath: string): JournalState {
  const state: JournalState = { created: new Map(), synced: new Map(), directorySynced: new Map() };
  if (!existsSync(journalPath)) return state;
  const lines = readFileSync(journalPath, "utf8").split("\n");
  for (const [index, line] of lines.entries()) {
    if (line === "") continue;
    const kind = line.slice(0, line.indexOf(" "));
    const rest = line.slice(kind.length + 1);
    switch (kind) {
      case "file": {
        const space = rest.indexOf(" ");
        state.synced.set(rest.slice(space + 1), Number(rest.slice(0, space)));
        break;
      }
      case "create":
        state.created.set(rest, index);
        state.synced.delete(rest);
        break;
      case "dir":
        state.directorySynced.set(rest, index);
        break;
      default:
        throw new Error(`sync journal line ${index + 1}: ${JSON.stringify(line)}`);
    }
  }
  return state;
}

/** Files whose unsynced bytes a power loss takes: WAL files and dictionaries (append-only, fsynced at commit or checkpoint). */
function isTrackedFile(path: string): boolean {
  return /\.(wal|dict)$/.test(path);
}

/**
 * Applies one power loss to a stopped server's files (see the module comment);
 * `journalPath` is the server's EVENTIDE_SYNC_JOURNAL. `damage` forces one
 * kind of tail damage on every file that has unsynced bytes (else random).
 */
export function losePower(journalPath: string, random: Random, damage?: TailDamage): PowerLossReport {
  const state = readJournal(journalPath);
  const report: PowerLossReport = { unsyncedBytes: 0, damagedFiles: [], droppedEntries: [] };
  const journalLines: string[] = [];

  for (const [path, line] of state.created) {
    if ((state.directorySynced.get(dirname(path)) ?? -1) > line || !existsSync(path)) continue;
    rmSync(path, { recursive: true, force: true });
    report.droppedEntries.push(path);
  }

  const files = new Set([...state.synced.keys(), ...[...state.created.keys()].filter(isTrackedFile)]);
  for (const path of files) {
    if (!existsSync(path) || !statSync(path).isFile()) continue;
    const fileBytes = statSync(path).size;
    const syncedBytes = Math.min(state.synced.get(path) ?? 0, fileBytes);
    const unsynced = fileBytes - syncedBytes;
    // A file nothing was written to since its last fsync is left alone most of the time.
    if (unsynced === 0 && (damage !== undefined || random.chance(0.7))) continue;
    const applied = damage ?? random.pick(unsynced > 0 ? tailDamages : tailDamages.filter((candidate) => candidate !== "unsynced prefix kept"));
    const tail = readFileSync(path).subarray(syncedBytes);
    truncateSync(path, syncedBytes);
    switch (applied) {
      case "cut at the synced length":
        break;
      case "unsynced prefix kept":
        appendFileSync(path, tail.subarray(0, random.integer(1, unsynced)));
        break;
      case "zeros past the synced length":
        appendFileSync(path, Buffer.alloc(random.integer(1, 8192)));
        break;
      case "garbage past the synced length": {
        const garbage = Buffer.alloc(random.integer(1, 4096));
        for (let index = 0; index < garbage.length; index++) garbage[index] = random.integer(0, 255);
        appendFileSync(path, garbage);
        break;
      }
      case "torn header past the synced length": {
        // A copy of the file's first header (WAL record or dictionary block) whose length field
        // promises more bytes than follow: the start of a write that stopped.
        const header = Buffer.from(readFileSync(path).subarray(0, 16));
        const lengthOffset = path.endsWith(".wal") ? 4 : 8;
        if (header.length === 16) header.writeUInt32LE(header.readUInt32LE(lengthOffset) + 0x1000, lengthOffset);
        appendFileSync(path, Buffer.concat([header, Buffer.alloc(random.integer(0, 64), 0x5a)]));
        break;
      }
    }
    report.unsyncedBytes += unsynced;
    report.damagedFiles.push({ path, syncedBytes, fileBytes, damage: applied });
    journalLines.push(`file ${statSync(path).size} ${path}\n`);
  }

  // After the power comes back, what is on disk stays there: surviving entries and bytes are durable.
  for (const path of state.created.keys()) if (existsSync(path)) journalLines.push(`dir ${dirname(path)}\n`);
  if (journalLines.length > 0) appendFileSync(journalPath, journalLines.join(""));
  return report;
}
