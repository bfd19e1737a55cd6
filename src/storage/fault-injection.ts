/**
 * Test seams of the storage layer, off unless an environment variable turns
 * them on: injected disk faults, and a journal of what each fsync made durable
 * (for power-loss simulation). They sit inside the store's write paths — WAL,
 * dictionaries, segment publishing, checkpoint publishing — so an injected
 * fault runs the same failure handling a real one would. With neither variable
 * set every hook is one test of a module-level boolean.
 *
 * Faults: `EVENTIDE_FAULTS_FILE=<path>` names a JSON file the test rewrites
 * (atomically: write a temporary file, rename it over) to arm and clear faults:
 *
 *   {"wal.fsync": {"errno": "EIO"}}                   every wal.fsync fails until the entry is removed
 *   {"wal.write": {"errno": "ENOSPC", "count": 3}}    the next 3 wal.write calls fail, then it clears itself
 *   {"segment.write": {"errno": "HANG"}}               the operation never returns (pool workers only: a hung disk;
 *                                                    blocked in the kernel when the test made a FIFO at <file>.fifo)
 *   {"segment.write": {"errno": "EIO", "pathIncludes": "/2024-03-01/"}}   only on paths holding that text (one day's)
 *   {}                                                nothing armed
 *
 * The file is re-read when its identity (inode, size, mtime) changes, checked
 * at every hook call (a stat: test runs only), so a fault is in force from the
 * first operation after the rename. `count` is per thread: segment writes run
 * in pool workers, each of which counts its own. Rewriting the file restarts
 * every count. An injected error looks like Node's own (`code`, `errno`,
 * `syscall`), and each injection prints one line on stderr
 * (`eventide: injected <errno> into <operation> <path>`), which tests count.
 *
 * Operations (where the hook sits):
 *   wal.write          after a WAL group's writev (the bytes may be partly on disk, as after a real failure)
 *   wal.fsync          after a WAL group's fdatasync, and in the cut-back after a failed group
 *   wal.rotate         before a checkpoint opens the next WAL file
 *   dictionary.write   before a dictionary block is appended
 *   dictionary.fsync   after a dictionary block's fsync
 *   segment.write      before a segment's column files are written (pool worker)
 *   segment.rename     before a segment's tmp_ directory is renamed into place (pool worker)
 *   segment.read       before a segment's column file is read (start-up's checks; loads in pool workers)
 *   checkpoint.publish before `_checkpoint.json` is written
 *   checkpoint.directory-fsync  after `_checkpoint.json` is renamed into place, as if the directory fsync failed
 *
 * Sync journal: `EVENTIDE_SYNC_JOURNAL=<path>` appends one line per event that
 * changes what survives a power loss, in the order they happened:
 *
 *   file <bytes> <path>   an fsync/fdatasync of a WAL or dictionary file covered its first <bytes> bytes
 *   create <path>         a directory entry appeared (new file, new directory, rename target)
 *   dir <path>            a directory was fsynced: entries created in it before are durable
 *
 * A test that kills the server can then cut each journaled file back to what
 * was synced and drop entries whose directory was never synced after they
 * appeared — what a power loss may leave. Lines are appended with one write
 * each (O_APPEND), so the main thread and pool workers never interleave them.
 */
import { appendFileSync, existsSync, openSync, readFileSync, statSync } from "node:fs";
import { constants } from "node:os";
import { log } from "../log.js";

export type FaultOperation =
  | "wal.write"
  | "wal.fsync"
  | "wal.rotate"
  | "dictionary.write"
  | "dictionary.fsync"
  | "segment.write"
  | "segment.rename"
  | "segment.read"
  | "checkpoint.publish"
  | "checkpoint.directory-fsync";

interface ArmedFault {
  errno: string;
  /** Injections left in this thread; undefined: until the file no longer arms it. */
  remaining: number | undefined;
  /** Only operations on paths holding this text (one day's segments, say); undefined: every path. */
  pathIncludes: string | undefined;
}

const faultsFile = process.env.EVENTIDE_FAULTS_FILE || undefined;
const journalFile = process.env.EVENTIDE_SYNC_JOURNAL || undefined;

/** False in production: every hook below returns at its first line. */
export const faultInjectionEnabled = faultsFile !== undefined;
export const syncJournalEnabled = journalFile !== undefined;

let armed = new Map<string, ArmedFault>();
let faultsFileIdentity = "";

function refreshFaults(): void {
  let identity: string;
  try {
    const stat = statSync(faultsFile!);
    identity = `${stat.ino}:${stat.size}:${stat.mtimeMs}`;
  } catch {
    identity = "absent";
  }
  if (identity === faultsFileIdentity) return;
  faultsFileIdentity = identity;
  const next = new Map<string, ArmedFault>();
  if (identity !== "absent") {
    try {
      const parsed = JSON.parse(readFileSync(faultsFile!, "utf8")) as Record<string, { errno?: string; count?: number; pathIncludes?: string }>;
      for (const [operation, fault] of Object.entries(parsed)) {
        next.set(operation, { errno: fault.errno ?? "EIO", remaining: fault.count, pathIncludes: fault.pathIncludes });
      }
    } catch (error) {
      // A half-written file (the test did not rename it into place) arms nothing; the next change is read again.
      faultsFileIdentity = "";
      log.error(`faults file ${faultsFile} unreadable: ${(error as Error).message}`);
    }
  }
  armed = next;
}

/** The error an armed fault injects into `operation` on `path`, or undefined (always, unless EVENTIDE_FAULTS_FILE is set). */
export function injectedFault(operation: FaultOperation, path: string): NodeJS.ErrnoException | undefined {
  if (!faultInjectionEnabled) return undefined;
  refreshFaults();
  const fault = armed.get(operation);
  if (fault === undefined || (fault.pathIncludes !== undefined && !path.includes(fault.pathIncludes))) return undefined;
  if (fault.remaining !== undefined) {
    if (fault.remaining <= 0) return undefined;
    fault.remaining--;
  }
  log.warn(`injected ${fault.errno} into ${operation} ${path}`);
  if (fault.errno === "HANG") {
    // A hung disk. With a FIFO beside the faults file (`<file>.fifo`, made by the test), the thread blocks in the
    // kernel opening it, where terminating its worker cannot reach it; else in a wait that terminating does end.
    if (existsSync(`${faultsFile}.fifo`)) openSync(`${faultsFile}.fifo`, "r");
    for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  }
  const errno = (constants.errno as Record<string, number | undefined>)[fault.errno] ?? constants.errno.EIO;
  const error: NodeJS.ErrnoException = new Error(`${fault.errno}: injected fault, ${operation} '${path}'`);
  error.code = fault.errno;
  error.errno = -errno;
  error.syscall = operation;
  error.path = path;
  return error;
}

/** Throws the error an armed fault injects into `operation`; does nothing otherwise. */
export function injectFault(operation: FaultOperation, path: string): void {
  if (!faultInjectionEnabled) return;
  const error = injectedFault(operation, path);
  if (error) throw error;
}

function journal(line: string): void {
  appendFileSync(journalFile!, line);
}

/** After a successful fsync/fdatasync: the first `bytes` bytes of `path` survive a power loss. */
export function recordSync(path: string, bytes: number): void {
  if (syncJournalEnabled) journal(`file ${bytes} ${path}\n`);
}

/** A new directory entry `path` (file, directory or rename target), not durable until its parent is fsynced. */
export function recordCreate(path: string): void {
  if (syncJournalEnabled) journal(`create ${path}\n`);
}

/** After a successful fsync of directory `path`. */
export function recordDirectorySync(path: string): void {
  if (syncJournalEnabled) journal(`dir ${path}\n`);
}
