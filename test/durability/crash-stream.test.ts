/**
 * SPEC §2 Durability under kill -9: several clients stream /ingest/batch into a
 * server that checkpoints every few hundred rows; the server is killed at a
 * random moment, restarted on the same directory, and the query API must count
 * every acknowledged event, and nothing twice. The loop and its bookkeeping are
 * in test/helpers/crash-loop.ts; power-loss-cycles.test.ts runs the same loop
 * and also damages what was never fsynced.
 *
 * EVENTIDE_CRASH_CYCLES sets the number of cycles (default 20; `npm run
 * test:crash` runs 200), EVENTIDE_CRASH_SEED replays a run.
 */
import { afterAll, describe, expect, it } from "vitest";
import { formatFigures, runCrashLoop, summarizeLog } from "../helpers/crash-loop.js";
import { makeDataDir, removeDataDir } from "../helpers/server.js";

const cycleCount = Number(process.env.EVENTIDE_CRASH_CYCLES ?? 20);
const seed = Number(process.env.EVENTIDE_CRASH_SEED ?? (Date.now() ^ (process.pid << 16)) >>> 0);
const dataDir = makeDataDir("eventide-crash-");

afterAll(() => removeDataDir(dataDir));

describe(`kill -9 during concurrent ingest (${cycleCount} cycles, seed ${seed})`, () => {
  it("counts every acknowledged event once, and every retried uuid batch once", async () => {
    const { figures, failures, anomalies, log } = await runCrashLoop({
      label: "kill -9",
      dataDir,
      cycleCount,
      seed,
      env: { EVENTIDE_CHECKPOINT_ROWS_MAX: "300", EVENTIDE_CHECKPOINT_INTERVAL_MS: "50" },
    });
    console.log(`${formatFigures("crash-stream (kill -9)", seed, figures)}\n  ${summarizeLog(log)}`);
    expect(failures, `seed ${seed}`).toEqual([]);
    expect(anomalies, `seed ${seed}: requests refused or cut off while the server was up`).toEqual([]);
    expect(figures).toMatchObject({ cycles: cycleCount, lost: 0, duplicated: 0, failedRestarts: 0 });
  }, 30_000 + cycleCount * 10_000);
});
