/**
 * A day directory that a failing disk (or a slip of the hand) changed: start-up
 * deleted what it could not place — a segment whose name a flipped bit moved
 * past the checkpoint, one that lost its `_meta.json`, an entry it did not
 * recognise — and served on without those days' events. Now it refuses,
 * naming the entry; `eventide repair` renames a segment back to the name its
 * `_meta.json` records (nothing is lost) or moves the entry aside, and the
 * server starts again. A file that cannot be read at all is named the same
 * way, and repair moves its segment aside rather than stopping on it.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { dayMs, isoDay, trend } from "../helpers/events.js";
import { runRepair } from "../helpers/repair.js";
import { runEventide } from "../helpers/run-eventide.js";
import type { ServerHandle } from "../helpers/server.js";
import { sealedTwoDays as sealedDays, storeRestarts } from "../helpers/stopped-store.js";

const firstDayMs = Date.UTC(2024, 6, 1, 12);
const range = { dateFrom: isoDay(firstDayMs), dateTo: isoDay(firstDayMs + dayMs), groupBy: "day" as const };

const restarts = storeRestarts("eventide-day-entries-");
const { start, refusal } = restarts;

/** Two days of events (3 on the first, 2 on the second), sealed by a clean stop; the stopped server and the first day's segment. */
async function sealedTwoDays(): Promise<{ dataDir: string; server: ServerHandle; dayPath: string; segment: string }> {
  const { dataDir, server, dayPaths } = await sealedDays(restarts, firstDayMs);
  const segments = readdirSync(dayPaths[0]);
  expect(segments).toHaveLength(1);
  return { dataDir, server, dayPath: dayPaths[0], segment: segments[0] };
}

async function counts(server: ServerHandle): Promise<number[]> {
  return [...(await trend(server, { event: "view", ...range })).values()];
}

describe("a day directory changed under a stopped server", () => {
  it("a flipped digit moving a segment's sequence past the checkpoint: refused, and repair renames it back with every event", async () => {
    const { dataDir, server, dayPath, segment } = await sealedTwoDays();
    const match = /^seg-(\d+)-(.+)$/.exec(segment)!;
    const flipped = `seg-${String(Number(match[1]) + 1_000).padStart(match[1].length, "0")}-${match[2]}`;
    renameSync(join(dayPath, segment), join(dayPath, flipped));

    const refused = await refusal(dataDir, server);
    expect(refused, "the server must refuse to start").toBeDefined();
    expect(refused).toContain(`corruption in ${join(dayPath, flipped)}`);
    expect(refused).toContain(`published as ${segment}`);
    expect(existsSync(join(dayPath, flipped)), "nothing is deleted").toBe(true);

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.output?.actions).toContainEqual(expect.objectContaining({ action: "segment-renamed", renamedTo: join(dayPath, segment) }));
    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([3, 2]);
    expect(await restarted.stop()).toBe(0);
  });

  it("a segment without its _meta.json, and an entry that is no segment: refused; repair moves both aside and the other day is served", async () => {
    const { dataDir, server, dayPath, segment } = await sealedTwoDays();
    rmSync(join(dayPath, segment, "_meta.json"));
    mkdirSync(join(dayPath, "lost+found"));

    const refused = await refusal(dataDir, server);
    expect(refused).toContain(`corruption in ${join(dayPath, "lost+found")}`);
    expect(existsSync(join(dayPath, segment)), "nothing is deleted").toBe(true);

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    const movedAside = (repair.output?.actions ?? []).filter((action) => action.action === "entry-moved-aside");
    expect(movedAside.map((action) => action.entry).sort()).toEqual([join(dayPath, "lost+found"), join(dayPath, segment)]);
    for (const action of movedAside) expect(existsSync(action.movedTo as string)).toBe(true);
    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([0, 2]);
    expect(await restarted.stop()).toBe(0);
  });

  it("a column file that cannot be read (a directory in its place): refused naming the segment; repair moves it aside instead of stopping", async () => {
    const { dataDir, server, dayPath, segment } = await sealedTwoDays();
    const file = join(dayPath, segment, "time.u32");
    rmSync(file);
    mkdirSync(file);

    const refused = await refusal(dataDir, server);
    expect(refused).toContain(`corruption in ${join(dayPath, segment)}`);
    expect(refused).toContain("eventide repair");

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.output?.actions).toContainEqual(expect.objectContaining({ action: "segment-moved-aside", segment: join(dayPath, segment) }));
    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([0, 2]);
    expect(await restarted.stop()).toBe(0);
  });

  it("a FIFO in place of a column file, a dictionary or _checkpoint.json (a reader of it would block): refused naming it, where start-up waited for ever", async () => {
    const { dataDir, server, dayPath, segment } = await sealedTwoDays();
    const files: Array<[string, string]> = [
      [join(dayPath, segment, "user.u32"), `corruption in ${join(dayPath, segment)}`],
      [join(dataDir, "ws", server.workspaceId, "_users.dict"), "corruption in"],
      [join(dataDir, "_checkpoint.json"), "corruption in"],
    ];
    for (const [file, named] of files) {
      renameSync(file, `${file}.kept`);
      execFileSync("mkfifo", [file]);
      const refused = await refusal(dataDir, server);
      expect(refused).toContain(named);
      expect(refused).toContain(`${file}: not a regular file`);
      rmSync(file);
      renameSync(`${file}.kept`, file);
    }
    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([3, 2]);
    expect(await restarted.stop()).toBe(0);
  }, 60_000);

  it("a FIFO in a dictionary's place: backup refuses it naming it, and repair moves it aside, where both waited for ever", async () => {
    const { dataDir, server } = await sealedTwoDays();
    const file = join(dataDir, "ws", server.workspaceId, "_users.dict");
    rmSync(file);
    execFileSync("mkfifo", [file]);

    const backup = await runEventide(["backup", `${dataDir}-backup`, "--data-dir", dataDir]);
    expect(backup.code, backup.stdout + backup.stderr).toBe(1);
    expect(backup.stdout + backup.stderr).toContain(`${file}: not a regular file`);

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.output?.actions).toContainEqual(expect.objectContaining({ action: "entry-moved-aside", entry: file }));
    // The users' ids are gone with it: every segment that uses them is moved aside, and the rest starts.
    const restarted = await start(dataDir, server);
    expect(await counts(restarted)).toEqual([0, 0]);
    expect(await restarted.stop()).toBe(0);
  }, 60_000);
});
