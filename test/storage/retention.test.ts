/**
 * Retention, end to end with a real server: with EVENTIDE_RETENTION_DAYS, the
 * whole UTC days older than the period leave the disk (their directories
 * removed) and every answer, while younger days stay whole; a workspace's own
 * retention (`eventide workspace retention`) overrides the server's and a
 * running server applies it at its next check.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { ingestAll, post, serversPerFile, type ServerHandle } from "../helpers/server.js";
import { runEventide, succeeded } from "../helpers/run-eventide.js";

const startServer = serversPerFile();
const dayMs = 86_400_000;

function dayOf(daysAgo: number): string {
  return new Date(Date.now() - daysAgo * dayMs).toISOString().slice(0, 10);
}

async function countOn(server: ServerHandle, day: string): Promise<number> {
  const response = await post(`${server.queryUrl}/api/v1/query/trend`, { event: "view", dateFrom: day, dateTo: day }, { token: server.token });
  expect(response.status, response.text).toBe(200);
  return response.body.data[0].count;
}

/** Waits for the server's `count`-th "expired days dropped" log line; returns its figures. */
async function retentionPass(server: ServerHandle, count: number): Promise<{ daysDropped: number; rowsDropped: number }> {
  for (;;) {
    const passes = server
      .stderr()
      .split("\n")
      .filter((line) => line.includes("expired days dropped"))
      .map((line) => JSON.parse(line));
    if (passes.length >= count) return passes[count - 1];
    if (server.process.exitCode !== null) throw new Error(`server exited: ${server.exitReport()}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("retention", () => {
  it("drops whole days past EVENTIDE_RETENTION_DAYS, then past a workspace's own retention, files and answers", async () => {
    const days = { old: "2024-01-05", middle: dayOf(10), recent: dayOf(1) };
    const first = await startServer();
    const events = Object.values(days).flatMap((day) => Array.from({ length: 10 }, (_, index) => ({ event: "view", distinctId: `u${index}`, timestamp: `${day}T12:00:00Z` })));
    await ingestAll(first, events);
    await first.stop();
    const directory = (day: string) => join(first.dataDir, "ws", first.workspaceId, day);
    for (const day of Object.values(days)) expect(existsSync(directory(day))).toBe(true);

    const credentials = { apiKey: first.apiKey, token: first.token, workspaceId: first.workspaceId };
    const server = await startServer({ dataDir: first.dataDir, credentials, env: { EVENTIDE_RETENTION_DAYS: "30", EVENTIDE_RETENTION_CHECK_INTERVAL_MS: "100" } });
    expect(await retentionPass(server, 1)).toMatchObject({ daysDropped: 1, rowsDropped: 10 });
    expect(existsSync(directory(days.old))).toBe(false);
    expect([await countOn(server, days.old), await countOn(server, days.middle), await countOn(server, days.recent)]).toEqual([0, 10, 10]);

    const set = succeeded(await runEventide(["workspace", "retention", "default", "5", "--data-dir", first.dataDir]));
    expect(set).toEqual({ workspaceId: first.workspaceId, retention: 5 });
    expect(await retentionPass(server, 2)).toMatchObject({ daysDropped: 1, rowsDropped: 10 });
    expect(existsSync(directory(days.middle))).toBe(false);
    expect([await countOn(server, days.middle), await countOn(server, days.recent)]).toEqual([0, 10]);
    expect(existsSync(directory(days.recent))).toBe(true);

    const refused = await runEventide(["workspace", "retention", "default", "0", "--data-dir", first.dataDir]);
    expect(refused.code).toBe(1);
    expect(refused.output.error).toMatch(/whole number of days/);
  }, 120_000);

  it("refuses a start with an EVENTIDE_RETENTION_DAYS that is not a number of days", async () => {
    await expect(startServer({ env: { EVENTIDE_RETENTION_DAYS: "30d" }, startTimeoutMs: 20_000 })).rejects.toThrow(/EVENTIDE_RETENTION_DAYS must be a whole number of days/);
  });
});
