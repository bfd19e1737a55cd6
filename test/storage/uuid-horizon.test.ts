/**
 * SPEC §2's idempotent retries, bounded in time: a uuid is remembered for at
 * least the horizon (limits.uuidHorizonDays) after its event was received, and
 * forgotten within twice that, its memory freed. The set is driven by an
 * injected clock here; the store's start-up by a segment's write time.
 */
import { mkdtempSync, readdirSync, rmSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { limits } from "../../src/config/limits.js";
import { Store } from "../../src/storage/store.js";
import { UuidSet } from "../../src/storage/uuid-set.js";
import { Random } from "../helpers/random.js";
import { inlineTasks } from "../helpers/seal-inline.js";
import { countPresent, randomUuids, uuidChunk } from "../helpers/uuids.js";

const dayMs = 86_400_000;
const horizonDays = 7;
const startMs = Date.UTC(2026, 0, 5, 13, 30);

describe("the uuid set's horizon", () => {
  it("remembers a uuid for the horizon after its receipt, then forgets it and frees its tables", () => {
    const random = new Random(71);
    const set = new UuidSet(horizonDays, startMs);
    const early = randomUuids(random, 5_000);
    for (let offset = 0; offset < early.length; offset += 16) set.claim(early, offset, 1);
    const earlyBytes = set.byteLength;
    expect(earlyBytes).toBeGreaterThan(0);

    // A horizon later: still known, and a retry is a repeat that adds nothing.
    set.advance(startMs + horizonDays * dayMs);
    expect(countPresent(set, early)).toBe(5_000);
    let repeats = 0;
    for (let offset = 0; offset < early.length; offset += 16) if (set.claim(early, offset, 2) === 1) repeats++;
    expect(repeats).toBe(5_000);
    const late = randomUuids(random, 100);
    for (let offset = 0; offset < late.length; offset += 16) set.claim(late, offset, 3);
    expect(set.size).toBe(5_100);

    // Two horizons after its receipt a uuid is forgotten: the generation holding it is dropped whole.
    set.advance(startMs + 2 * horizonDays * dayMs);
    expect(countPresent(set, early)).toBe(0);
    expect(countPresent(set, late)).toBe(100);
    expect(set.size).toBe(100);
    expect(set.byteLength).toBeLessThan(earlyBytes / 4);
    set.advance(startMs + 4 * horizonDays * dayMs);
    expect(set.size).toBe(0);
    expect(set.byteLength).toBe(0);
    // Forgotten means new again.
    expect(set.claim(early, 0, 4)).toBe(-1);
  });

  it("changes nothing when the clock goes back", () => {
    const random = new Random(72);
    const set = new UuidSet(horizonDays, startMs);
    const uuids = randomUuids(random, 50);
    for (let offset = 0; offset < uuids.length; offset += 16) set.add(uuids, offset);
    set.advance(startMs - 30 * dayMs);
    expect(countPresent(set, uuids)).toBe(50);
  });

  it("takes stored uuids by when they were written: within the horizon kept, older ones not added", () => {
    const random = new Random(73);
    const set = new UuidSet(horizonDays, startMs);
    const recent = randomUuids(random, 40);
    const old = randomUuids(random, 40);
    expect(set.remembers(startMs - horizonDays * dayMs)).toBe(true);
    expect(set.remembers(startMs - 2 * horizonDays * dayMs)).toBe(false);
    // A file written "after now" (its clock ahead) counts as now.
    expect(set.remembers(startMs + 3 * horizonDays * dayMs)).toBe(true);
    for (let offset = 0; offset < recent.length; offset += 16) expect(set.add(recent, offset, startMs - horizonDays * dayMs)).toBe(true);
    for (let offset = 0; offset < old.length; offset += 16) expect(set.add(old, offset, startMs - 2 * horizonDays * dayMs)).toBe(false);
    expect(countPresent(set, recent)).toBe(40);
    expect(countPresent(set, old)).toBe(0);
    // A uuid in the older generation is a repeat, not added again to the newer one.
    expect(set.add(recent, 0)).toBe(false);
    expect(set.claim(recent, 16, 9)).toBe(0);
    expect(set.size).toBe(40);
    // Deleting reaches either generation (a commit that failed after a period began).
    set.delete(recent, 0, 0);
    expect(set.has(recent, 0)).toBe(false);
    expect(set.size).toBe(39);
  });

  it("answers claims read ahead in batches the same when both generations hold uuids", () => {
    const random = new Random(75);
    const set = new UuidSet(horizonDays, startMs);
    const older = randomUuids(random, 3_000);
    for (let offset = 0; offset < older.length; offset += 16) set.claim(older, offset, 1);
    set.advance(startMs + horizonDays * dayMs);
    // Half repeats of the older generation's uuids, half new ones, some rows without a uuid.
    const rowCount = 2_000;
    const batch = new Uint8Array(rowCount * 16);
    const present = new Uint8Array(rowCount);
    const fresh = randomUuids(random, rowCount);
    for (let row = 0; row < rowCount; row++) {
      batch.set(row % 2 === 0 ? older.subarray(row * 16, row * 16 + 16) : fresh.subarray(row * 16, row * 16 + 16), row * 16);
      present[row] = row % 7 === 0 ? 0 : 1;
    }
    set.prefetchHomes(batch, present, rowCount);
    let wrong = 0;
    for (let row = 0; row < rowCount; row++) {
      if (present[row] === 0) continue;
      if (set.claim(batch, row * 16, 2) !== (row % 2 === 0 ? 1 : -1)) wrong++;
    }
    expect(wrong).toBe(0);
  });

  it("is seven days or more by default", () => {
    expect(limits.uuidHorizonDays).toBeGreaterThanOrEqual(7);
  });
});

const workspaceId = "feedc0de87654321";


let dataDir: string;
beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), "eventide-uuid-horizon-"));
});
afterEach(() => {
  rmSync(dataDir, { recursive: true, force: true });
});

describe("the store's uuids across a restart", () => {
  it("reloads the uuids of segments written within the horizon and skips older ones", async () => {
    const random = new Random(74);
    const oldDayMs = Date.UTC(2024, 2, 1);
    const recentDayMs = Date.UTC(2024, 2, 2);
    const oldBatch = Array.from({ length: 200 }, () => random.uuid());
    const recentBatch = Array.from({ length: 300 }, () => random.uuid());
    const first = Store.open(dataDir, false);
    first.start(inlineTasks);
    await first.commit(workspaceId, uuidChunk(oldDayMs, oldBatch));
    await first.commit(workspaceId, uuidChunk(recentDayMs, recentBatch));
    await first.close();

    // The old day's segment was written long ago (far beyond any horizon), as if its events had arrived then.
    const oldDayDirectory = join(dataDir, "ws", workspaceId, "2024-03-01");
    const [segmentName] = readdirSync(oldDayDirectory);
    const longAgo = new Date(Date.UTC(2000, 0, 1));
    utimesSync(join(oldDayDirectory, segmentName), longAgo, longAgo);

    const second = Store.open(dataDir, false);
    second.start(inlineTasks);
    const workspace = second.workspaces.get(workspaceId)!;
    await workspace.uuidsReady;
    expect(workspace.uuids.size).toBe(recentBatch.length);
    // A retry within the horizon stores nothing; one beyond it is stored again.
    expect((await second.commit(workspaceId, uuidChunk(recentDayMs, recentBatch))).storedCount).toBe(0);
    expect((await second.commit(workspaceId, uuidChunk(oldDayMs, oldBatch))).storedCount).toBe(oldBatch.length);
    await second.close();
  });
});
