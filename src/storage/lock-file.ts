/**
 * Lock files of the data directory: the lock a server holds on it for its whole
 * life (holdServerLock), and the exclusive lock files beneath it and the
 * registry's writer lock (auth/registry-lock.ts), created with
 * `open(…, "wx")`: the kernel lets exactly one creator win.
 *
 * A writer that dies holding the lock leaves the file behind, so the lock
 * records its owner's pid, host and start time: a lock whose owner is gone is
 * stale and is broken. A live owner is waited for, but only for a bounded time.
 */
import { randomBytes } from "node:crypto";
import { statSync } from "node:fs";
import { open, readFile, stat, unlink, type FileHandle } from "node:fs/promises";
import { createServer } from "node:net";
import { hostname } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";

/** The gap between tries grows from the first to the last value, with jitter so that waiters do not retry in lockstep. */
const lockRetryDelayMsMin = 2;
const lockRetryDelayMsMax = 50;
/**
 * A lock file is created empty and its owner is written just after, so an
 * unreadable lock is only judged abandoned once it has been unreadable for this long.
 */
const unreadableLockStaleMs = 5_000;
/** Breaking a stale lock takes a few milliseconds; a breaker's own lock this old was left by a crash. */
const breakerLockStaleMs = 10_000;
/** When this process started, to tell a lock written by an earlier process with the same pid (a restarted container). */
const processStartedMs = Date.now() - process.uptime() * 1000;

interface LockOwner {
  pid: number;
  host: string;
  /** Tells this acquisition apart from any other, so a release never removes someone else's lock. */
  nonce: string;
  acquiredAt: string;
}

/**
 * How long a server waits for its data directory's lock: a lock file is
 * written just after it is created, so one left empty by a kill at that moment
 * is broken only once it is this old; a lock whose owner is known dead is
 * broken at once, and a live owner's makes the start fail after this wait.
 */
export const serverLockWaitMs = unreadableLockStaleMs + 1_000;

/**
 * Takes the lock file at `lockPath`, breaking it when its owner is gone, and
 * keeps it until the returned release is called. Throws `lockedError`'s error
 * when a live process still holds it after `waitMs`.
 */
export async function holdLockFile(lockPath: string, waitMs: number, lockedError: (holder: string) => Error): Promise<() => Promise<void>> {
  const owner = await acquire(lockPath, waitMs, lockedError);
  return () => release(lockPath, owner);
}

/**
 * The lock a server holds on its data directory: first a kernel-owned name,
 * then the lock file (holdLockFile), which says who holds it. A lock file
 * alone is defeated by an `rm`, after which a second server would append to
 * the same WAL. The kernel name is a Unix socket in Linux's abstract namespace
 * named after the directory's device and inode: no file to delete, a second
 * bind fails with EADDRINUSE, and the kernel releases it when the process
 * dies, however it dies. Node has no flock; this needs no native addon.
 * The namespace is per network namespace (two containers sharing a volume do
 * not see each other's names): there the lock file still guards.
 */
export async function holdServerLock(dataDir: string, lockPath: string, lockedError: (holder: string) => Error): Promise<() => Promise<void>> {
  const name = serverLockName(dataDir);
  const server = createServer((socket) => socket.destroy());
  if (process.platform === "linux") {
    try {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen({ path: name, exclusive: true }, resolve);
      });
    } catch (error) {
      if (errorCode(error) !== "EADDRINUSE") throw error;
      const holder = await readOwner(lockPath);
      throw lockedError(holder ? `process ${holder.pid} on ${holder.host} since ${holder.acquiredAt}` : "another eventide server");
    }
    // Held for the life of the process, without keeping it alive.
    server.unref();
  }
  const releaseFile = await holdLockFile(lockPath, serverLockWaitMs, lockedError);
  return async () => {
    await releaseFile();
    if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()));
  };
}

async function acquire(lockPath: string, waitMs: number, lockedError: (holder: string) => Error): Promise<LockOwner> {
  const owner: LockOwner = {
    pid: process.pid,
    host: hostname(),
    nonce: randomBytes(12).toString("hex"),
    acquiredAt: new Date().toISOString(),
  };
  const text = JSON.stringify(owner);
  const deadlineMs = Date.now() + waitMs;
  for (let attempt = 1; ; attempt += 1) {
    try {
      const handle = await open(lockPath, "wx", 0o600);
      try {
        await handle.writeFile(text, "utf8");
      } finally {
        await handle.close();
      }
      return owner;
    } catch (error) {
      if (errorCode(error) !== "EEXIST") throw error;
    }
    if (await breakIfStale(lockPath)) continue;
    if (Date.now() >= deadlineMs) {
      const holder = await readOwner(lockPath);
      throw lockedError(holder ? `process ${holder.pid} on ${holder.host} since ${holder.acquiredAt}` : "another process");
    }
    const ceilingMs = Math.min(lockRetryDelayMsMax, lockRetryDelayMsMin * 2 ** Math.min(attempt, 6));
    await sleep(lockRetryDelayMsMin + Math.random() * (ceilingMs - lockRetryDelayMsMin));
  }
}

async function release(lockPath: string, owner: LockOwner): Promise<void> {
  // Remove only our own lock: if it was (wrongly) broken, the file now belongs to someone else.
  const current = await readOwner(lockPath);
  if (current?.nonce !== owner.nonce) return;
  await unlink(lockPath).catch((error: unknown) => {
    if (errorCode(error) !== "ENOENT") throw error;
  });
}

/**
 * Removes the lock if its owner is gone; true when the caller should try again at once.
 *
 * Two waiters may judge the same lock stale. If one removed it and a third
 * process took a fresh lock, a plain unlink by the other waiter would delete the
 * fresh lock. So breakers first take a breaker lock, then judge again and
 * unlink: a stale lock can only be removed by a breaker (its owner is gone), so
 * while we hold the breaker lock the file we judged is the file we remove.
 */
async function breakIfStale(lockPath: string): Promise<boolean> {
  if (!(await isStale(lockPath))) return false;
  // paths.ts names the lock but not its breaker; the breaker sits beside it.
  const breakerPath = `${lockPath}.break`;
  let breaker: FileHandle;
  try {
    breaker = await open(breakerPath, "wx", 0o600);
  } catch (error) {
    if (errorCode(error) !== "EEXIST") throw error;
    // Another breaker is at work; a breaker lock left by a crash is removed by age.
    const stats = await stat(breakerPath).catch(() => undefined);
    if (stats !== undefined && Date.now() - stats.mtimeMs > breakerLockStaleMs) await unlink(breakerPath).catch(() => undefined);
    return false;
  }
  try {
    await breaker.close();
    if (await isStale(lockPath)) {
      await unlink(lockPath).catch((error: unknown) => {
        if (errorCode(error) !== "ENOENT") throw error;
      });
    }
    return true;
  } finally {
    await unlink(breakerPath).catch(() => undefined);
  }
}

/** True when the lock file's owner is gone; false when it is alive, unknown, or the lock is already released. */
async function isStale(lockPath: string): Promise<boolean> {
  let text: string;
  let modifiedMs: number;
  try {
    const handle = await open(lockPath, "r");
    try {
      modifiedMs = (await handle.stat()).mtimeMs;
      text = await handle.readFile("utf8");
    } finally {
      await handle.close();
    }
  } catch (error) {
    if (errorCode(error) === "ENOENT") return false;
    throw error;
  }
  const owner = parseOwner(text);
  if (owner === undefined) return Date.now() - modifiedMs >= unreadableLockStaleMs;
  return isOwnerGone(owner);
}

function isOwnerGone(owner: LockOwner): boolean {
  // A pid means nothing on another host sharing the directory: wait, and let the timeout message guide the user.
  if (owner.host !== hostname()) return false;
  // Our own pid: an earlier process that had it is gone; one written since we started is a thread of ours, alive.
  if (owner.pid === process.pid) return Date.parse(owner.acquiredAt) < processStartedMs;
  try {
    process.kill(owner.pid, 0);
    return false;
  } catch (error) {
    // EPERM: the process exists but belongs to another user.
    return errorCode(error) === "ESRCH";
  }
}

async function readOwner(lockPath: string): Promise<LockOwner | undefined> {
  try {
    return parseOwner(await readFile(lockPath, "utf8"));
  } catch {
    return undefined;
  }
}

function parseOwner(text: string): LockOwner | undefined {
  try {
    const value = JSON.parse(text) as Partial<LockOwner> | null;
    if (
      value !== null &&
      typeof value === "object" &&
      Number.isSafeInteger(value.pid) &&
      typeof value.host === "string" &&
      typeof value.nonce === "string" &&
      typeof value.acquiredAt === "string"
    ) {
      return value as LockOwner;
    }
  } catch {
    // Empty or half-written: the caller decides by age.
  }
  return undefined;
}

export function errorCode(error: unknown): string | undefined {
  return typeof error === "object" && error !== null && "code" in error ? String((error as { code: unknown }).code) : undefined;
}

/** The kernel name a server binds for `dataDir` (see holdServerLock); the CLI probes it to tell whether a server runs. */
export function serverLockName(dataDir: string): string {
  const { dev, ino } = statSync(dataDir, { bigint: true });
  return `\0eventide-data-${dev}-${ino}`;
}
