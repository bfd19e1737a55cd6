/**
 * A sealed segment damaged under a running server (a flipped bit in a column
 * file it has not read since start-up): a query over its day answered a bare
 * 500 internal_error and nothing else told the operator. Now the query answers
 * 503 unavailable naming the segment (by its key, not its path) and the way
 * out, ranges without that day still answer, /metrics counts the damaged read,
 * and the next start refuses, as for any damage.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { dayMs, isoDay, isoTime } from "../helpers/events.js";
import { elapsedUntil, expectError, expectOk, send, sendJson } from "../helpers/http.js";
import { type ServerHandle, ingestAll, startServer } from "../helpers/server.js";
import { storeRestarts } from "../helpers/stopped-store.js";

const firstDayMs = Date.UTC(2024, 6, 1, 12);
const { newDataDir, start, refusal } = storeRestarts("eventide-damage-running-");

function trendOf(server: ServerHandle, dateFrom: string, dateTo: string) {
  return sendJson(`${server.queryUrl}/api/v1/query/trend`, { event: "view", dateFrom, dateTo }, { token: server.token });
}

/** Flips a bit of the second day's time column on disk (one segment a day); the segment's name. */
function flipSecondDay(dataDir: string, workspaceId: string): string {
  const dayPath = join(dataDir, "ws", workspaceId, isoDay(firstDayMs + dayMs));
  const [segment] = readdirSync(dayPath);
  const file = join(dayPath, segment, "time.u32");
  const bytes = readFileSync(file);
  bytes[0] ^= 0x10;
  writeFileSync(file, bytes);
  return segment;
}

async function damagedReads(server: ServerHandle): Promise<number> {
  const text = (await send(`${server.queryUrl}/metrics`, { method: "GET" })).text;
  return Number(/^eventide_damaged_segment_reads_total (\d+)/m.exec(text)?.[1]);
}

describe("a sealed segment damaged while the server runs", () => {
  it("answers 503 unavailable for its day, naming it and repair; other days answer; /metrics counts it; the next start refuses", async () => {
    const dataDir = newDataDir();
    let server = await start(dataDir);
    await ingestAll(server, [0, 1, 2].map((day) => ({ event: "view", distinctId: `u${day}`, timestamp: isoTime(firstDayMs + day * dayMs) })));
    expect(await server.stop()).toBe(0);
    server = await start(dataDir, server);
    expect(await damagedReads(server)).toBe(0);

    // Nothing has read the second day's columns since the start checked them.
    const day = isoDay(firstDayMs + dayMs);
    const dayPath = join(dataDir, "ws", server.workspaceId, day);
    const [segment] = readdirSync(dayPath);
    const file = join(dayPath, segment, "time.u32");
    const bytes = readFileSync(file);
    bytes[0] ^= 0x10;
    writeFileSync(file, bytes);

    const answer = await trendOf(server, isoDay(firstDayMs), isoDay(firstDayMs + 2 * dayMs));
    expectError(answer, 503, "unavailable", "eventide repair");
    expect(answer.body.error.message).toContain(`${server.workspaceId}/${day}/${segment}`);
    expect(answer.body.error.message, "a client is not told the server's paths").not.toContain(dataDir);
    expect(answer.headers["retry-after"]).toBeDefined();
    expect(expectOk(await trendOf(server, isoDay(firstDayMs), isoDay(firstDayMs))).data).toEqual([{ date: isoDay(firstDayMs), count: 1 }]);
    expect(await damagedReads(server)).toBeGreaterThanOrEqual(1);
    // A user deletion that meets the damaged day says so, and how to finish it, where it answered a bare 500.
    const deletion = await sendJson(`${server.queryUrl}/api/v1/users/delete`, { distinctId: "u1" }, { token: server.token });
    expectError(deletion, 503, "unavailable", "eventide repair");
    expect(deletion.body.error.message).toContain(`${server.workspaceId}/${day}/${segment}`);
    await server.kill();

    const refused = await refusal(dataDir, server);
    expect(refused).toContain(`corruption in ${join(dayPath, segment)}`);
  });

  it("a user deletion that meets a damaged day deletes nothing: every segment is read before any is rewritten", async () => {
    const dataDir = newDataDir();
    let server = await start(dataDir);
    await ingestAll(server, [0, 1].map((day) => ({ event: "view", distinctId: "u1", timestamp: isoTime(firstDayMs + day * dayMs) })));
    expect(await server.stop()).toBe(0);
    server = await start(dataDir, server);
    flipSecondDay(dataDir, server.workspaceId);

    const deletion = await sendJson(`${server.queryUrl}/api/v1/users/delete`, { distinctId: "u1" }, { token: server.token });
    expectError(deletion, 503, "unavailable", "eventide repair");
    expect(deletion.body.error.message).toContain("Nothing was deleted");
    // The first day, read and found whole before the damaged one, still holds the user's event.
    expect(expectOk(await trendOf(server, isoDay(firstDayMs), isoDay(firstDayMs))).data).toEqual([{ date: isoDay(firstDayMs), count: 1 }]);
    await server.kill();
  });

  it("a user deletion whose rewrite meets damage its read did not see answers 503 saying how many events it deleted before it", async () => {
    const dataDir = newDataDir();
    let server = await start(dataDir);
    await ingestAll(server, [0, 1].flatMap((day) => ["u1", "u2"].map((user) => ({ event: "view", distinctId: user, timestamp: isoTime(firstDayMs + day * dayMs) }))));
    expect(await server.stop()).toBe(0);
    server = await start(dataDir, server);
    // Loaded by a query, then damaged on disk: the deletion's read finds it whole in memory, its rewrite reads the file.
    expect(expectOk(await trendOf(server, isoDay(firstDayMs + dayMs), isoDay(firstDayMs + dayMs))).data).toEqual([{ date: isoDay(firstDayMs + dayMs), count: 2 }]);
    const segment = flipSecondDay(dataDir, server.workspaceId);

    const deletion = await sendJson(`${server.queryUrl}/api/v1/users/delete`, { distinctId: "u1" }, { token: server.token });
    expectError(deletion, 503, "unavailable", "eventide repair");
    expect(deletion.body.error.message).toContain(`${server.workspaceId}/${isoDay(firstDayMs + dayMs)}/${segment}`);
    expect(deletion.body.error.message).toContain("1 of the user's events were deleted before it");
    expect(deletion.body.error.message, "a client is not told the server's paths").not.toContain(dataDir);
    expect(expectOk(await trendOf(server, isoDay(firstDayMs), isoDay(firstDayMs))).data).toEqual([{ date: isoDay(firstDayMs), count: 1 }]);
    await server.kill();
  });

  it("exits within 10 s of SIGTERM while a worker is blocked reading a hung file, and loses nothing", async () => {
    // A read that never returns (an injected HANG) is a hung disk: no thread blocked in it can be stopped.
    const dataDir = newDataDir();
    const server = await start(dataDir);
    await ingestAll(server, [0, 1].map((day) => ({ event: "view", distinctId: `u${day}`, timestamp: isoTime(firstDayMs + day * dayMs) })));
    expect(await server.stop()).toBe(0);
    const faultsFile = join(dataDir, "..", `${dataDir.split("/").pop()}-faults.json`);
    writeFileSync(faultsFile, "{}");
    // The injected hang opens this FIFO, which no one writes: blocked in the kernel, as in a read of a hung disk.
    execFileSync("mkfifo", [`${faultsFile}.fifo`]);
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    const hanging = await startServer({ dataDir, credentials, workers: 1, env: { EVENTIDE_FAULTS_FILE: faultsFile } });
    try {
      // Armed once it serves: start-up's own checks read every segment on the main thread.
      writeFileSync(`${faultsFile}.next`, JSON.stringify({ "segment.read": { errno: "HANG", pathIncludes: `/${isoDay(firstDayMs + dayMs)}/` } }));
      renameSync(`${faultsFile}.next`, faultsFile);
      const hung = trendOf(hanging, isoDay(firstDayMs + dayMs), isoDay(firstDayMs + dayMs)).catch(() => undefined);
      await elapsedUntil(async () => hanging.stderr().includes("injected HANG into segment.read"), 10_000);
      const stoppedAtMs = performance.now();
      await hanging.stop();
      const tookMs = performance.now() - stoppedAtMs;
      void hung;
      expect(tookMs, hanging.exitReport()).toBeLessThan(10_000);
      expect(hanging.stderr()).toContain("shutdown exceeded its time limit");
    } finally {
      await hanging.kill();
      rmSync(faultsFile, { force: true });
      rmSync(`${faultsFile}.fifo`, { force: true });
    }

    const restarted = await start(dataDir, server);
    expect(expectOk(await trendOf(restarted, isoDay(firstDayMs), isoDay(firstDayMs + dayMs))).data.map((bucket: { count: number }) => bucket.count)).toEqual([1, 1]);
    expect(await restarted.stop()).toBe(0);
  }, 60_000);

  it("a day whose merge fails leaves its segments as they are, and the other days are merged", async () => {
    // Two days of two segments each (two runs, each sealed by its stop); then a start whose merges of the first day fail.
    const dataDir = newDataDir();
    let server = await start(dataDir);
    for (let run = 0; run < 2; run++) {
      if (run > 0) server = await start(dataDir, server);
      await ingestAll(server, [0, 1].map((day) => ({ event: "view", distinctId: `u${run}-${day}`, timestamp: isoTime(firstDayMs + day * dayMs) })));
      expect(await server.stop()).toBe(0);
    }
    const dayPaths = [0, 1].map((day) => join(dataDir, "ws", server.workspaceId, isoDay(firstDayMs + day * dayMs)));
    for (const dayPath of dayPaths) expect(readdirSync(dayPath)).toHaveLength(2);
    const faultsFile = join(dataDir, "..", `${dataDir.split("/").pop()}-faults.json`);
    writeFileSync(faultsFile, JSON.stringify({ "segment.write": { errno: "EIO", pathIncludes: `/${isoDay(firstDayMs)}/` } }));
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    const merging = await startServer({ dataDir, credentials, workers: 1, env: { EVENTIDE_FAULTS_FILE: faultsFile } });
    try {
      // Start-up asks for a merge pass: the first day fails first, and the second must still be merged.
      await elapsedUntil(async () => readdirSync(dayPaths[1]).filter((name) => name.startsWith("seg-")).length === 1, 30_000);
      expect(readdirSync(dayPaths[0]).filter((name) => name.startsWith("seg-")), "the failed day keeps its segments").toHaveLength(2);
      expect(merging.stderr()).toContain("merging a day's segments failed");
      expect(expectOk(await trendOf(merging, isoDay(firstDayMs), isoDay(firstDayMs + dayMs))).data.map((bucket: { count: number }) => bucket.count)).toEqual([2, 2]);
    } finally {
      await merging.kill();
      rmSync(faultsFile, { force: true });
    }
  });
});
