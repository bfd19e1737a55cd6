/**
 * The registry lock on a real data dir: it serializes writers, breaks the lock
 * of a dead owner, and waits for a live one only for a bounded time.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, unlinkSync, utimesSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { RegistryError } from "../../src/auth/registry-error.js";
import { withRegistryLock } from "../../src/auth/registry-lock.js";
import { createWorkspace, listWorkspaces } from "../../src/auth/registry.js";
import { registryLockPath } from "../../src/storage/paths.js";
import { makeDataDir, removeDataDir } from "../helpers/server.js";

let dataDir: string;

beforeEach(() => {
  dataDir = makeDataDir("eventide-lock-");
});

afterEach(() => {
  removeDataDir(dataDir);
});

/** The pid of a process that has certainly exited (spawnSync waits for it and reaps it). */
function deadPid(): number {
  const child = spawnSync(process.execPath, ["-e", ""]);
  return child.pid!;
}

function writeLock(owner: { pid: number; host?: string; acquiredAt?: Date }): void {
  const acquiredAt = (owner.acquiredAt ?? new Date()).toISOString();
  writeFileSync(registryLockPath(dataDir), JSON.stringify({ pid: owner.pid, host: owner.host ?? hostname(), nonce: "someone-else", acquiredAt }));
}

describe("registry lock", () => {
  it("lets one holder in at a time", async () => {
    let inside = 0;
    let insideMax = 0;
    await Promise.all(
      Array.from({ length: 8 }, () =>
        withRegistryLock(dataDir, async () => {
          inside += 1;
          insideMax = Math.max(insideMax, inside);
          await sleep(5);
          inside -= 1;
        }),
      ),
    );
    expect(insideMax).toBe(1);
    expect(existsSync(registryLockPath(dataDir))).toBe(false);
  });

  it("releases the lock when the work throws", async () => {
    await expect(withRegistryLock(dataDir, async () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(existsSync(registryLockPath(dataDir))).toBe(false);
  });

  it("breaks a lock left by a dead process", async () => {
    writeLock({ pid: deadPid() });
    const created = await createWorkspace(dataDir, "acme");
    expect((await listWorkspaces(dataDir)).map((workspace) => workspace.workspaceId)).toEqual([created.workspaceId]);
    expect(readdirSync(dataDir)).toEqual(["_registry.json"]);
  });

  it("breaks a lock left by an earlier process that had this process's pid (a restarted container)", async () => {
    writeLock({ pid: process.pid, acquiredAt: new Date(Date.now() - process.uptime() * 1000 - 60_000) });
    await createWorkspace(dataDir, "acme");
    expect(existsSync(registryLockPath(dataDir))).toBe(false);
  });

  it("waits for a lock with this process's pid taken since it started (another thread of it)", async () => {
    writeLock({ pid: process.pid });
    await expect(withRegistryLock(dataDir, async () => "in", { waitMs: 100 })).rejects.toMatchObject({ code: "registry_locked" });
  });

  it("removes a breaker lock left by a crashed breaker once it is old", async () => {
    writeLock({ pid: deadPid() });
    const breakerPath = `${registryLockPath(dataDir)}.break`;
    writeFileSync(breakerPath, "");
    const longAgo = new Date(Date.now() - 60_000);
    utimesSync(breakerPath, longAgo, longAgo);
    expect(await withRegistryLock(dataDir, async () => "in", { waitMs: 1_000 })).toBe("in");
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it("breaks an unreadable lock only once it is old", async () => {
    writeFileSync(registryLockPath(dataDir), "");
    await expect(withRegistryLock(dataDir, async () => "in", { waitMs: 100 })).rejects.toMatchObject({ code: "registry_locked" });
    const longAgo = new Date(Date.now() - 60_000);
    utimesSync(registryLockPath(dataDir), longAgo, longAgo);
    expect(await withRegistryLock(dataDir, async () => "in", { waitMs: 100 })).toBe("in");
  });

  it("waits for a live holder for a bounded time, then fails with a message naming the lock file", async () => {
    // The parent of this test process is alive for the whole test.
    writeLock({ pid: process.ppid });
    const startedMs = Date.now();
    const error = await withRegistryLock(dataDir, async () => "in", { waitMs: 300 }).catch((reason: unknown) => reason);
    expect(error).toBeInstanceOf(RegistryError);
    expect((error as RegistryError).code).toBe("registry_locked");
    expect((error as RegistryError).message).toContain(registryLockPath(dataDir));
    expect((error as RegistryError).message).toContain(String(process.ppid));
    // It waited its whole wait (a lower bound: load only lengthens it); how long past it is the machine's, not asserted.
    expect(Date.now() - startedMs).toBeGreaterThanOrEqual(300);
    // Someone else's lock is left alone.
    expect(existsSync(registryLockPath(dataDir))).toBe(true);
  });

  it("does not judge a lock written on another host by its pid", async () => {
    writeLock({ pid: deadPid(), host: "some-other-host.invalid" });
    await expect(withRegistryLock(dataDir, async () => "in", { waitMs: 100 })).rejects.toMatchObject({ code: "registry_locked" });
  });

  it("gets the lock as soon as a live holder releases it", async () => {
    writeLock({ pid: process.ppid });
    // The holder finishes.
    setTimeout(() => unlinkSync(registryLockPath(dataDir)), 100);
    expect(await withRegistryLock(dataDir, async () => "in", { waitMs: 5_000 })).toBe("in");
  });
});
