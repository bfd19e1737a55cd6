/**
 * A segment or a whole day directory that vanishes from a stopped store
 * (removed by hand, lost by a file system check): nothing listed the segments
 * that should exist, so start-up served on without their events, which the
 * WAL no longer holds. Now `_checkpoint.json` counts each workspace's sealed
 * rows and start-up refuses to serve on fewer, naming the workspace and the
 * rows missing; `eventide repair` counts what is left and the server starts.
 * Deletions (of a user's events, of expired days) lower the count before they
 * remove rows, so a crash in between never reads as a loss.
 */
import { execFileSync } from "node:child_process";
import { existsSync, linkSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readCheckpointFile } from "../../src/storage/checkpoint-file.js";
import { dayMs, isoDay, isoTime, trend } from "../helpers/events.js";
import { elapsedUntil, sendJson } from "../helpers/http.js";
import { runRepair } from "../helpers/repair.js";
import { type ServerHandle, ingestAll, startServer } from "../helpers/server.js";
import { sealedTwoDays, storeRestarts } from "../helpers/stopped-store.js";

const firstDayMs = Date.UTC(2024, 6, 1, 12);
const range = { dateFrom: isoDay(firstDayMs), dateTo: isoDay(firstDayMs + dayMs), groupBy: "day" as const };

// One faults file for the file's servers: `{}` arms nothing.
const faultsFile = join(process.env.TMPDIR ?? "/tmp", `eventide-vanished-faults-${process.pid}.json`);
writeFileSync(faultsFile, "{}");
const restarts = storeRestarts("eventide-vanished-", { EVENTIDE_FAULTS_FILE: faultsFile });
const { start, refusal } = restarts;

function armFaults(faults: object): void {
  // Renamed over: the server reads the file whole or not at all.
  const staged = `${faultsFile}.next`;
  writeFileSync(staged, JSON.stringify(faults));
  renameSync(staged, faultsFile);
}

/** The sealed rows `_checkpoint.json` counts for the workspace. */
function sealedRowsCounted(dataDir: string, workspaceId: string): number | undefined {
  return readCheckpointFile(dataDir).sealedRows?.get(workspaceId);
}

async function counts(server: ServerHandle): Promise<number[]> {
  return [...(await trend(server, { event: "view", ...range })).values()];
}

describe("sealed rows that vanish from a stopped store", () => {
  it("a segment directory removed: refused, naming the workspace and the rows missing; repair counts what is left and the other day is served", async () => {
    const { dataDir, server, dayPaths } = await sealedTwoDays(restarts, firstDayMs);
    const [segment] = readdirSync(dayPaths[0]);
    rmSync(join(dayPaths[0], segment), { recursive: true });

    const refused = await refusal(dataDir, server);
    expect(refused, "the server must refuse to start").toBeDefined();
    expect(refused).toContain(`corruption in ${join(dataDir, "ws", server.workspaceId)}`);
    expect(refused).toContain("hold 2 rows, 3 fewer than the last checkpoint counted (5)");

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.output?.actions).toContainEqual(expect.objectContaining({ action: "sealed-rows-recounted", counted: 5, found: 2, rowsLost: 3 }));
    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([0, 2]);
    expect(await restarted.stop()).toBe(0);
    // The count is what is left: a restart after repair starts as it is.
    const again = await start(dataDir, server);
    expect(await counts(again)).toEqual([0, 2]);
    expect(await again.stop()).toBe(0);
  });

  it("a whole day directory removed: refused the same way; after repair the first day is served", async () => {
    const { dataDir, server, dayPaths } = await sealedTwoDays(restarts, firstDayMs);
    rmSync(dayPaths[1], { recursive: true });

    const refused = await refusal(dataDir, server);
    expect(refused).toContain("hold 3 rows, 2 fewer than the last checkpoint counted (5)");

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([3, 0]);
    expect(await restarted.stop()).toBe(0);
  });

  it("a user deletion lowers the count before it removes rows: a kill after it, or after one that failed half way, is no loss", async () => {
    const { dataDir, server } = await sealedTwoDays(restarts, firstDayMs);
    let running = await start(dataDir, server);
    // The deletion's rewrite of the first day fails after the count was lowered: nothing was removed.
    armFaults({ "segment.write": { errno: "EIO" } });
    const failed = await sendJson(`${running.queryUrl}/api/v1/users/delete`, { distinctId: "u0" }, { token: running.token });
    armFaults({});
    expect(failed.status, JSON.stringify(failed.body)).toBeGreaterThanOrEqual(500);
    // Nothing was removed: the count is back to every row, so a loss of one row would still be found.
    expect(sealedRowsCounted(dataDir, server.workspaceId)).toBe(5);
    await running.kill();

    running = await start(dataDir, server);
    expect(await counts(running)).toEqual([3, 2]);
    const deleted = await sendJson(`${running.queryUrl}/api/v1/users/delete`, { distinctId: "u0" }, { token: running.token });
    expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
    expect(await counts(running)).toEqual([2, 2]);
    // Killed: no checkpoint after the deletion counts the rows again.
    await running.kill();

    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([2, 2]);
    expect(await restarted.stop()).toBe(0);
  });

  it("a whole workspace directory removed: refused; repair drops what the checkpoint knew of it and the server starts", async () => {
    const { dataDir, server } = await sealedTwoDays(restarts, firstDayMs);
    rmSync(join(dataDir, "ws", server.workspaceId), { recursive: true });

    expect(await refusal(dataDir, server)).toContain(`corruption in ${join(dataDir, "ws", server.workspaceId)}`);
    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.output?.actions).toContainEqual(expect.objectContaining({ action: "workspace-missing", rowsLost: 5 }));
    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([0, 0]);
    expect(await restarted.stop()).toBe(0);
  });

  it("a retention pass lowers the count before it drops days: a kill after it is no loss", async () => {
    const { dataDir, server } = await sealedTwoDays(restarts, firstDayMs);
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    const expiring = await startServer({ dataDir, credentials, workers: 1, env: { EVENTIDE_RETENTION_DAYS: "30", EVENTIDE_RETENTION_CHECK_INTERVAL_MS: "100" } });
    try {
      await elapsedUntil(async () => expiring.stderr().includes("expired days dropped"), 20_000);
      expect(await counts(expiring)).toEqual([0, 0]);
    } finally {
      await expiring.kill();
    }
    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([0, 0]);
    expect(await restarted.stop()).toBe(0);
  });
});

/** A small tmpfs to fill, when this machine lets the tests mount one (root); undefined otherwise. */
function smallFileSystem(): string | undefined {
  const mount = mkdtempSync(join(process.env.TMPDIR ?? "/tmp", "eventide-full-disk-"));
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=128m", "tmpfs", mount], { stdio: "ignore" });
    return mount;
  } catch {
    rmSync(mount, { recursive: true, force: true });
    return undefined;
  }
}

describe("a full disk", () => {
  let fullDisk: string | undefined;
  beforeAll(() => {
    fullDisk = smallFileSystem();
    if (fullDisk === undefined) console.warn("\n!!! SKIPPED: the full-disk retention test needs to mount a tmpfs (root); this machine does not allow it\n");
  });
  afterAll(() => {
    if (fullDisk === undefined) return;
    try {
      execFileSync("umount", ["-l", fullDisk]);
      rmSync(fullDisk, { recursive: true, force: true });
    } catch (error) {
      // Left mounted (a machine that let it mount but not unmount): said, not a failure of the suite.
      console.warn(`could not unmount ${fullDisk}: ${(error as Error).message}`);
    }
  });

  it("retention still drops expired days: the count's write takes the space the reserve held", async (context) => {
    if (fullDisk === undefined) return context.skip();
    const dataDir = mkdtempSync(join(fullDisk!, "data-"));
    const first = await startServer({ dataDir, workers: 1 });
    await ingestAll(first, [0, 1].map((day) => ({ event: "view", distinctId: `u${day}`, timestamp: isoTime(firstDayMs + day * dayMs) })));
    expect(await first.stop()).toBe(0);
    expect(existsSync(join(dataDir, "_checkpoint.reserve")), "a store keeps its reserve").toBe(true);
    const credentials = { apiKey: first.apiKey, token: first.token, workspaceId: first.workspaceId };
    const server = await startServer({ dataDir, credentials, workers: 1, env: { EVENTIDE_RETENTION_CHECK_INTERVAL_MS: "200" } });
    try {
      // Retention of 30 days staged before the disk fills, the old registry's blocks kept in use when it is replaced.
      const registry = JSON.parse(readFileSync(join(dataDir, "_registry.json"), "utf8"));
      for (const workspace of registry.workspaces) workspace.retention = 30;
      writeFileSync(join(dataDir, "_registry.next"), JSON.stringify(registry));
      linkSync(join(dataDir, "_registry.json"), join(fullDisk!, "old-registry"));
      try {
        execFileSync("dd", ["if=/dev/zero", `of=${join(fullDisk!, "filler")}`, "bs=4096"], { stdio: "ignore" });
      } catch {
        // dd stops at "No space left on device": the point.
      }
      renameSync(join(dataDir, "_registry.next"), join(dataDir, "_registry.json"));
      await elapsedUntil(async () => /expired days dropped|dropping expired days failed/.test(server.stderr()), 20_000);
      expect(server.stderr(), "retention failed on the full disk").toContain("expired days dropped");
      expect(server.stderr()).toContain("disk full: released");
      expect(readdirSync(join(dataDir, "ws", first.workspaceId)).filter((name) => /^\d{4}-/.test(name))).toEqual([]);
    } finally {
      await server.kill();
      rmSync(join(fullDisk!, "filler"), { force: true });
      rmSync(join(fullDisk!, "old-registry"), { force: true });
    }
    const restarted = await startServer({ dataDir, credentials, workers: 1 });
    expect(await counts(restarted)).toEqual([0, 0]);
    expect(await restarted.stop()).toBe(0);
    rmSync(dataDir, { recursive: true, force: true });
  });
});
