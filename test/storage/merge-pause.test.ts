/**
 * Merges wait for ingest to pause, and stop when it resumes: a merge pass that
 * began in a pause asks again before each day, so batches arriving mid-pass
 * do not share the machine with day after day of rewriting (one worker and a
 * core held for seconds, half the batch throughput in the bench's later
 * repeats). A forced pass (mergeAll) still merges everything.
 *
 * The idle threshold is shortened for this file, so it is set before the
 * store's modules load. Not too short: the commits and checkpoints below must
 * all count as recent, and a starved process can take longer than a short
 * threshold (this file once used 150 ms) between a commit and the end of the
 * checkpoint after it, which then merges at once; 2 s leaves room for that
 * while keeping the test a few seconds long.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, it } from "vitest";
import type { Store as StoreType, StoreTasks } from "../../src/storage/store.js";

const idleMs = 2000;
process.env.EVENTIDE_CHECKPOINT_IDLE_MS = String(idleMs);
const { ChunkBuilder } = await import("../../src/storage/chunk-codec.js");
const { loadSegment } = await import("../../src/storage/segment-reader.js");
const { sealInline } = await import("../helpers/seal-inline.js");
const { mergeSegments } = await import("../../src/storage/segment-merge.js");
const { Store } = await import("../../src/storage/store.js");

const workspaceId = "feedc0de12345678";
const firstDayMs = Date.UTC(2024, 2, 1);
const dayCount = 4;
const dataDir = mkdtempSync(join(tmpdir(), "eventide-merge-pause-"));

afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

function rowsOnEveryDay(): ArrayBuffer {
  const builder = new ChunkBuilder();
  for (let day = 0; day < dayCount; day++) {
    for (let row = 0; row < 10; row++) builder.addRow(firstDayMs + day * 86_400_000 + row, "e", `u${row}`, undefined);
  }
  return builder.finish();
}

it("a merge pass begun in a pause leaves the other days once ingest resumes, and a forced pass merges them", async () => {
  const merged: string[] = [];
  const store: StoreType = Store.open(dataDir, false);
  const tasks: StoreTasks = {
    seal: sealInline,
    load: async (directory) => loadSegment(directory),
    merge: async (directories: string[], target: string, dayStartMs: number) => {
      // A batch arrives while the first day is being merged (and ingest stays busy for the rest of the test).
      if (merged.length === 0) store.noteIngest(Date.now() + 60_000);
      merged.push(target);
      return mergeSegments({ directories, target, dayStartMs, fsync: false });
    },
  };
  store.start(tasks);
  // Two checkpoints, each sealing a segment on every day: every day then holds two.
  for (let round = 0; round < 2; round++) {
    await store.commit(workspaceId, rowsOnEveryDay());
    await store.checkpoint();
  }
  const segmentsPerDay = () => [...store.workspaces.get(workspaceId)!.days.values()].map((partition) => partition.sealed.length);
  expect(segmentsPerDay()).toEqual(Array(dayCount).fill(2));
  expect(merged, "no merge while commits are recent").toEqual([]);

  // Ingest pauses: the idle timer (checking every second) starts a merge pass once the last commit is idleMs old;
  // the batch noted in its first merge stops it there. Then the pass gets time to go on wrongly.
  const deadline = Date.now() + idleMs + 15_000;
  while (merged.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  expect(merged.length, `no merge pass started within ${idleMs + 15_000} ms of the pause`).toBeGreaterThan(0);
  while (!segmentsPerDay().includes(1) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  // The pass has ended: it cannot go on to other days later.
  await store.mergePass;
  expect(merged.length, "days merged after ingest resumed").toBe(1);
  expect(segmentsPerDay().sort()).toEqual([1, ...Array(dayCount - 1).fill(2)]);

  await store.mergeAll();
  expect(merged.length).toBe(dayCount);
  expect(segmentsPerDay()).toEqual(Array(dayCount).fill(1));
  await store.close();
});
