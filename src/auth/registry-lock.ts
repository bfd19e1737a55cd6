/**
 * The registry's writer lock. Every change to `_registry.json` is a
 * read-modify-write, and writers live in different processes (the server
 * creating the `default` workspace, any number of `eventide` CLIs), so they are
 * serialized by a lock file (storage/lock-file.ts). Readers never take the
 * lock; they rely on the atomic rename in registry.ts. Within one process,
 * writers also queue in memory first, so they never poll the file against each
 * other.
 */
import { holdLockFile } from "../storage/lock-file.js";
import { registryLockPath } from "../storage/paths.js";
import { RegistryError } from "./registry-error.js";

/** A registry change takes milliseconds (one small write and two fsyncs); ten seconds of waiting means something is stuck. */
export const registryLockWaitMsDefault = 10_000;

export interface RegistryLockOptions {
  waitMs?: number;
}

/** Per lock path, the end of this process's queue of writers. */
const inProcessQueues = new Map<string, Promise<void>>();

/** Runs `work` while holding the registry lock of `dataDir` (which must exist). */
export async function withRegistryLock<T>(dataDir: string, work: () => Promise<T>, options: RegistryLockOptions = {}): Promise<T> {
  const lockPath = registryLockPath(dataDir);
  return inProcessTurn(lockPath, async () => {
    const waitMs = options.waitMs ?? registryLockWaitMsDefault;
    const release = await holdLockFile(lockPath, waitMs, registryLocked(lockPath, waitMs));
    try {
      return await work();
    } finally {
      await release();
    }
  });
}

/**
 * Writers of one process take turns in memory before touching the lock file.
 * Besides saving polls, this means that while this process tries to acquire the
 * file lock, no other holder in this process can exist.
 */
async function inProcessTurn<T>(key: string, work: () => Promise<T>): Promise<T> {
  const previous = inProcessQueues.get(key) ?? Promise.resolve();
  let finish!: () => void;
  const turn = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const tail = previous.then(() => turn);
  inProcessQueues.set(key, tail);
  await previous;
  try {
    return await work();
  } finally {
    finish();
    if (inProcessQueues.get(key) === tail) inProcessQueues.delete(key);
  }
}

function registryLocked(lockPath: string, waitMs: number) {
  return (holder: string) =>
    new RegistryError("registry_locked", `the registry is locked by ${holder} (waited ${waitMs} ms); if no eventide process is running, delete ${lockPath}`);
}
