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
import { readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { dayMs, isoDay, trend } from "../helpers/events.js";
import { elapsedUntil, sendJson } from "../helpers/http.js";
import { runRepair } from "../helpers/repair.js";
import { type ServerHandle, startServer } from "../helpers/server.js";
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
