/**
 * SPEC §2 Durability under power loss, in cycles: the crash loop of
 * crash-stream.test.ts, with a server that journals every fsync
 * (EVENTIDE_SYNC_JOURNAL). After three kills in four, the test applies a
 * simulated power loss to the files (test/helpers/power-loss.ts): entries whose
 * directory was never fsynced after they appeared are dropped, and every WAL
 * and dictionary file loses or garbles what was written after its last fsync
 * (cut at the synced length, a torn prefix of the unsynced bytes kept, zeros,
 * garbage, a torn header). The fourth kill is a plain kill -9, so the next
 * power loss also catches a restart that counted or deduplicated against
 * bytes that were replayed from the page cache but never made durable.
 *
 * Recovery must cut every damaged tail, start, and count every acknowledged
 * event exactly once. EVENTIDE_POWER_LOSS_CYCLES sets the number of cycles
 * (default 20; `npm run test:crash` runs 200), EVENTIDE_CRASH_SEED replays a run.
 */
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { formatFigures, runCrashLoop, summarizeLog } from "../helpers/crash-loop.js";
import { losePower, tailDamages, type PowerLossReport } from "../helpers/power-loss.js";
import { makeDataDir, removeDataDir } from "../helpers/server.js";

const cycleCount = Number(process.env.EVENTIDE_POWER_LOSS_CYCLES ?? 20);
const seed = Number(process.env.EVENTIDE_CRASH_SEED ?? (Date.now() ^ (process.pid << 17)) >>> 0);
const dataDir = makeDataDir("eventide-power-cycles-");
// Outside the data directory, so the store never sees it.
const journalDir = makeDataDir("eventide-power-journal-");
const journalPath = join(journalDir, "sync-journal");

afterAll(() => {
  removeDataDir(dataDir);
  removeDataDir(journalDir);
});

describe(`power loss during concurrent ingest (${cycleCount} cycles, seed ${seed})`, () => {
  it("cuts every torn, zeroed or garbage tail and counts every acknowledged event once", async () => {
    const totals = { powerLosses: 0, unsyncedBytes: 0, damagedFiles: 0, droppedEntries: 0 };
    const describeLoss = (report: PowerLossReport) => {
      totals.powerLosses++;
      totals.unsyncedBytes += report.unsyncedBytes;
      totals.damagedFiles += report.damagedFiles.length;
      totals.droppedEntries += report.droppedEntries.length;
      const files = report.damagedFiles.map((file) => `${file.path.slice(dataDir.length + 1)} ${file.syncedBytes}/${file.fileBytes} ${file.damage}`);
      const dropped = report.droppedEntries.map((path) => `dropped ${path.slice(dataDir.length + 1)}`);
      return `power loss: ${[...files, ...dropped].join(", ") || "nothing unsynced"}`;
    };
    const { figures, failures, anomalies, log } = await runCrashLoop({
      label: "power loss",
      dataDir,
      cycleCount,
      seed,
      env: { EVENTIDE_CHECKPOINT_ROWS_MAX: "300", EVENTIDE_CHECKPOINT_INTERVAL_MS: "50", EVENTIDE_SYNC_JOURNAL: journalPath },
      afterKill: (cycle, random) => (cycle % 4 === 3 ? "kill -9 only" : describeLoss(losePower(journalPath, random))),
    });
    console.log(
      `${formatFigures("power-loss-cycles", seed, figures)}; ${totals.powerLosses} power losses, ` +
        `${totals.unsyncedBytes} unsynced bytes lost or garbled in ${totals.damagedFiles} file tails, ${totals.droppedEntries} unsynced directory entries dropped` +
        `\n  ${summarizeLog(log, ["kill -9 only", "dropped", ...tailDamages])}`,
    );
    expect(failures, `seed ${seed}`).toEqual([]);
    expect(anomalies, `seed ${seed}: requests refused or cut off while the server was up`).toEqual([]);
    expect(figures).toMatchObject({ cycles: cycleCount, lost: 0, duplicated: 0, failedRestarts: 0 });
  }, 30_000 + cycleCount * 10_000);
});
