/**
 * The store's crash recovery, in process and deterministic: the seal and load
 * tasks run inline instead of in the pool, and a "crash" is opening a second
 * Store on the same directory while the first is abandoned mid-flight (every
 * write the first made went through a system call, as before a kill -9). Each
 * test stops the first store at one step of the checkpoint protocol and checks
 * that the reopened store counts every committed row once, with the right
 * event names, and keeps deduplicating uuids.
 */
import { appendFileSync, cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ChunkBuilder } from "../../src/storage/chunk-codec.js";
import { SharedColumn } from "../../src/storage/column-builder.js";
import { readSharedTexts } from "../../src/storage/active-properties.js";
import { checkpointPath, walFilePath } from "../../src/storage/paths.js";
import { unpackPropertyEntries } from "../../src/storage/property-transfer.js";
import type { LoadSegmentResult } from "../../src/storage/segment-layout.js";
import { loadSegment, PropertyDirectory } from "../../src/storage/segment-reader.js";
import { sealSegment } from "../../src/storage/segment-writer.js";
import { mergeSegments } from "../../src/storage/segment-merge.js";
import { ActiveSegment, Store, type StoreTasks } from "../../src/storage/store.js";
import { readWalFile } from "../../src/storage/wal.js";
import { Random } from "../helpers/random.js";
import { sealInline } from "../helpers/seal-inline.js";

const workspaceId = "feedc0de12345678";
const dayStartMs = Date.UTC(2024, 2, 1);

const inlineTasks: StoreTasks = {
  seal: async (segment, directory) => sealInline(segment, directory),
  load: async (directory) => loadSegment(directory),
  merge: async (directories, target, dayStartMs) => mergeSegments({ directories, target, dayStartMs, fsync: false }),
};

/**
 * Refuses merges (the store keeps a day's segments as they are). For tests that
 * rewind `_checkpoint.json` by hand: a merge runs only after a published
 * checkpoint, so rewinding past one that merged makes a state no crash can.
 */
const noMergeTasks: StoreTasks = { ...inlineTasks, merge: () => Promise.reject(new Error("merges are off in this test")) };

/** Seals (so the files exist) but never reports back: the checkpoint stops before publishing. */
const stalledTasks: StoreTasks = {
  seal: async (segment, directory) => {
    await sealInline(segment, directory);
    return new Promise<LoadSegmentResult>(() => {});
  },
  load: async (directory) => loadSegment(directory),
  merge: () => new Promise<LoadSegmentResult>(() => {}),
};

interface Row {
  event: string;
  user: string;
  dayOffset: number;
  uuid?: string;
  plan?: string;
}

function chunk(rows: Row[]): ArrayBuffer {
  const builder = new ChunkBuilder();
  for (const [index, row] of rows.entries()) {
    const uuid = row.uuid === undefined ? undefined : Buffer.from(row.uuid.replaceAll("-", ""), "hex");
    const added = builder.addRow(dayStartMs + row.dayOffset * 86_400_000 + index, row.event, row.user, uuid);
    if (row.plan !== undefined) builder.addProperty(added, "plan", row.plan);
  }
  return builder.finish();
}

function rows(random: Random, count: number, names: string[], uuidShare: number): Row[] {
  return Array.from({ length: count }, () => ({
    event: random.pick(names),
    user: `user-${random.integer(0, 50)}`,
    dayOffset: random.integer(0, 2),
    uuid: random.chance(uuidShare) ? random.uuid() : undefined,
    plan: random.chance(0.02) ? "rare" : undefined,
  }));
}

/** Rows per event name in one workspace, read through the store's catalog (sealed segments loaded from disk). */
function countsByEvent(store: Store): Map<string, number> {
  const counts = new Map<string, number>();
  const workspace = store.workspaces.get(workspaceId);
  if (workspace === undefined) return counts;
  const add = (eventId: number, count: number) => {
    const name = workspace.events.texts[eventId];
    counts.set(name, (counts.get(name) ?? 0) + count);
  };
  for (const partition of workspace.days.values()) {
    for (const sealed of partition.sealed) {
      const { layout, memory } = loadSegment(sealed.directory);
      const eventStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
      for (let event = 0; event < layout.eventCount; event++) if (eventStart[event + 1] > eventStart[event]) add(event, eventStart[event + 1] - eventStart[event]);
    }
    for (const active of [...partition.sealing, ...(partition.active ? [partition.active] : [])]) {
      for (let row = 0; row < active.rowCount; row++) add(active.event.values[row], 1);
    }
  }
  return counts;
}

function expectedCounts(committed: Row[][]): Map<string, number> {
  const counts = new Map<string, number>();
  const uuids = new Set<string>();
  for (const batch of committed) {
    for (const row of batch) {
      if (row.uuid !== undefined) {
        if (uuids.has(row.uuid)) continue;
        uuids.add(row.uuid);
      }
      counts.set(row.event, (counts.get(row.event) ?? 0) + 1);
    }
  }
  return counts;
}

function open(dataDir: string, tasks: StoreTasks = inlineTasks): Store {
  const store = Store.open(dataDir, false);
  store.start(tasks);
  return store;
}

function segmentNames(dataDir: string): string[] {
  const names: string[] = [];
  const root = join(dataDir, "ws", workspaceId);
  if (!existsSync(root)) return names;
  for (const day of readdirSync(root)) if (/^\d{4}-\d{2}-\d{2}$/.test(day)) names.push(...readdirSync(join(root, day)).map((name) => `${day}/${name}`));
  return names.sort();
}

let dataDir: string;

beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), "eventide-store-"));
});

afterEach(() => {
  rmSync(dataDir, { recursive: true, force: true });
});

describe("the store acknowledges", () => {
  it("a repeat of a uuid batch still on its way to disk only once the first copy is written", async () => {
    const store = Store.open(dataDir, true);
    store.start(inlineTasks);
    const random = new Random(1);
    // A group in flight (write + fdatasync) makes the next record wait in the queue.
    const inFlight = store.commit(workspaceId, chunk(rows(random, 2000, ["earlier"], 0)));
    const batch = rows(random, 50, ["retried"], 1);
    const original = store.commit(workspaceId, chunk(batch));
    await store.commit(workspaceId, chunk(batch));
    // SPEC §2: the repeat's 200 says its events are on disk, so the original's record must
    // at least be written (kill -9 keeps written pages) when the repeat is acknowledged.
    const records = readWalFile(walFilePath(dataDir, 1)).records.length;
    await Promise.all([inFlight, original]);
    await store.close();
    expect(records, "WAL records written when the repeat was acknowledged").toBe(2);
  });
});

describe("the store, reopened after a crash", () => {
  it("counts rows that were only in the WAL once", async () => {
    const random = new Random(2);
    const committed = [rows(random, 300, ["a", "b 🚀"], 0.5), rows(random, 200, ["b 🚀", "c"], 0.5)];
    const first = open(dataDir);
    for (const batch of committed) await first.commit(workspaceId, chunk(batch));
    const second = open(dataDir);
    expect(countsByEvent(second)).toEqual(expectedCounts(committed));
    await second.close();
  });

  it("drops the segments of a checkpoint that sealed but never published, and replays their rows once", async () => {
    const random = new Random(3);
    const committed = [rows(random, 400, ["a", "b"], 0.5)];
    const first = open(dataDir);
    await first.commit(workspaceId, chunk(committed[0]));
    await first.checkpoint();
    const publishedSegments = segmentNames(dataDir);
    expect(publishedSegments.length).toBeGreaterThan(0);

    committed.push(rows(random, 300, ["b", "c"], 0.5));
    await first.commit(workspaceId, chunk(committed[1]));
    // Swap in stalled tasks: the next checkpoint writes its segments, then hangs before publishing.
    (first as unknown as { tasks: StoreTasks }).tasks = stalledTasks;
    void first.checkpoint();
    // Bounded by the clock, not by a count of polls: a loaded machine may take far longer than 100 × 5 ms to write them.
    const deadline = Date.now() + 10_000;
    while (segmentNames(dataDir).length === publishedSegments.length && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(segmentNames(dataDir).length, "the stalled checkpoint wrote its segments (none within 10 s)").toBeGreaterThan(publishedSegments.length);

    const second = open(dataDir);
    expect(segmentNames(dataDir)).toEqual(publishedSegments);
    expect(countsByEvent(second)).toEqual(expectedCounts(committed));
    // The uuids of the replayed rows are known again.
    expect((await second.commit(workspaceId, chunk(committed[1]))).storedCount).toBe(committed[1].filter((row) => row.uuid === undefined).length);
    committed.push(committed[1]);
    expect(countsByEvent(second)).toEqual(expectedCounts(committed));
    await second.close();
  });

  it("keeps event ids right when the dictionaries were appended but the checkpoint was not published", async () => {
    const random = new Random(4);
    const committed = [rows(random, 200, ["alpha", "beta"], 0.3)];
    const first = open(dataDir, noMergeTasks);
    await first.commit(workspaceId, chunk(committed[0]));
    await first.checkpoint();
    committed.push(rows(random, 200, ["gamma", "delta", "alpha"], 0.3));
    await first.commit(workspaceId, chunk(committed[1]));
    const eventIds = first.workspace(workspaceId).events.texts.slice();
    const checkpointBefore = readFileSync(checkpointPath(dataDir));
    const walSequence = (JSON.parse(checkpointBefore.toString("utf8")) as { walSequence: number }).walSequence;
    const walBefore = readFileSync(walFilePath(dataDir, walSequence));
    await first.checkpoint();
    // Undo the publish and the WAL deletion: the disk now looks like a crash just before
    // `_checkpoint.json` was replaced, with the new dictionary blocks already appended.
    writeFileSync(checkpointPath(dataDir), checkpointBefore);
    writeFileSync(walFilePath(dataDir, walSequence), walBefore);

    const second = open(dataDir, noMergeTasks);
    expect(countsByEvent(second)).toEqual(expectedCounts(committed));
    expect(second.workspace(workspaceId).events.texts).toEqual(eventIds);
    committed.push(rows(random, 100, ["epsilon", "gamma"], 0.3));
    await second.commit(workspaceId, chunk(committed[2]));
    await second.close();

    const third = open(dataDir);
    expect(countsByEvent(third)).toEqual(expectedCounts(committed));
    await third.close();
  });

  it("ignores a WAL file whose rows a published checkpoint already sealed", async () => {
    const random = new Random(5);
    const committed = [rows(random, 250, ["a", "b"], 0.5)];
    const first = open(dataDir);
    await first.commit(workspaceId, chunk(committed[0]));
    const walBefore = readFileSync(walFilePath(dataDir, 1));
    await first.checkpoint();
    expect(existsSync(walFilePath(dataDir, 1))).toBe(false);
    writeFileSync(walFilePath(dataDir, 1), walBefore); // as if the deletion never reached the disk

    const second = open(dataDir);
    expect(countsByEvent(second)).toEqual(expectedCounts(committed));
    await second.close();
  });

  it("cuts a garbage WAL tail, and the rows appended after the cut survive the next crash", async () => {
    const random = new Random(6);
    const committed = [rows(random, 100, ["a"], 0.5), rows(random, 100, ["b"], 0.5)];
    const first = open(dataDir);
    for (const batch of committed) await first.commit(workspaceId, chunk(batch));
    appendFileSync(walFilePath(dataDir, 1), Buffer.from("torn group write: garbage, not a record"));

    const second = open(dataDir);
    expect(countsByEvent(second)).toEqual(expectedCounts(committed));
    committed.push(rows(random, 100, ["c"], 0.5));
    await second.commit(workspaceId, chunk(committed[2]));

    const third = open(dataDir);
    expect(countsByEvent(third)).toEqual(expectedCounts(committed));
    await third.close();
  });

  it("merges a day's segments into one, and finishes a merge that crashed before deleting what it replaced", async () => {
    const backup = mkdtempSync(join(tmpdir(), "eventide-merge-backup-"));
    const saved: Array<{ from: string; to: string }> = [];
    let merges = 0;
    // Keep a copy of each merge's inputs, to put them back as a crash between publish and delete would leave them.
    const copyingTasks: StoreTasks = {
      ...inlineTasks,
      merge: async (directories, target, dayStartMs) => {
        for (const directory of directories) {
          const copy = join(backup, `${saved.length}`);
          cpSync(directory, copy, { recursive: true });
          saved.push({ from: copy, to: directory });
        }
        merges++;
        return mergeSegments({ directories, target, dayStartMs, fsync: false });
      },
    };
    const random = new Random(7);
    const committed = [rows(random, 300, ["alpha", "beta"], 0.5), rows(random, 300, ["beta", "gamma"], 0.5), rows(random, 300, ["alpha"], 0.5)];
    const first = open(dataDir, copyingTasks);
    for (const batch of committed) {
      await first.commit(workspaceId, chunk(batch));
      await first.checkpoint();
    }
    // Ingest just ran, so the background passes deferred these merges (busyMergeSegmentsMin).
    expect(merges).toBe(0);
    await first.mergeAll();
    await first.close();
    expect(merges).toBeGreaterThan(0);
    const days = new Set(segmentNames(dataDir).map((name) => name.split("/")[0]));
    expect(segmentNames(dataDir).length).toBe(days.size);

    for (const { from, to } of saved) if (!existsSync(to)) cpSync(from, to, { recursive: true });
    expect(segmentNames(dataDir).length).toBeGreaterThan(days.size);
    const second = open(dataDir, noMergeTasks);
    expect(segmentNames(dataDir).length).toBe(days.size);
    expect(countsByEvent(second)).toEqual(expectedCounts(committed));
    // Uuids of merged rows are still known: a retry of the first batch stores nothing.
    expect((await second.commit(workspaceId, chunk(committed[0]))).storedCount).toBe(committed[0].filter((row) => row.uuid === undefined).length);
    await second.close();
    rmSync(backup, { recursive: true, force: true });
  });

  it("seals a property that only early rows set, after the segment grew past its first capacity", async () => {
    const committed: Row[][] = [[{ event: "a", user: "u", dayOffset: 0, plan: "early" }]];
    committed.push(Array.from({ length: 5000 }, (_, index) => ({ event: "a", user: `u${index}`, dayOffset: 0 })));
    const store = open(dataDir);
    for (const batch of committed) await store.commit(workspaceId, chunk(batch));
    await store.checkpoint();
    await store.close();
    const reopened = open(dataDir);
    expect(countsByEvent(reopened)).toEqual(expectedCounts(committed));
    await reopened.close();
  });
});

describe("uuid columns of an active segment", () => {
  /** Bytes of the segment's shared columns, whichever it has. */
  function columnBytes(segment: ActiveSegment): number {
    const columns = Object.values(segment).flatMap((value) => (value instanceof SharedColumn ? [value] : value?.present instanceof SharedColumn ? [value.present, value.bytes] : []));
    return columns.reduce((sum, column) => sum + column.byteLength, 0);
  }

  it("are not held while no row has a uuid: time, user and event, 12 bytes a row", async () => {
    const store = open(dataDir);
    await store.commit(workspaceId, chunk(Array.from({ length: 3000 }, (_, index) => ({ event: "a", user: `u${index}`, dayOffset: 0 }))));
    const active = store.workspaces.get(workspaceId)!.days.get(dayStartMs)!.active!;
    expect(columnBytes(active)).toBe(12 * active.time.values.length);
    await store.close();
  });

  it("are made at the first uuid, after the segment grew without any, and its uuids are deduplicated after a restart", async () => {
    const withoutUuids: Row[] = Array.from({ length: 3000 }, (_, index) => ({ event: "a", user: `u${index}`, dayOffset: 0 }));
    const random = new Random(7);
    const withUuids: Row[] = Array.from({ length: 50 }, (_, index) => ({ event: "b", user: `v${index}`, dayOffset: 0, uuid: random.uuid() }));
    const store = open(dataDir);
    await store.commit(workspaceId, chunk(withoutUuids));
    await store.commit(workspaceId, chunk(withUuids));
    const active = store.workspaces.get(workspaceId)!.days.get(dayStartMs)!.active!;
    expect(columnBytes(active)).toBe(29 * active.time.values.length);
    await store.checkpoint();
    await store.close();
    const reopened = open(dataDir);
    expect((await reopened.commit(workspaceId, chunk(withUuids))).storedCount).toBe(0);
    expect(countsByEvent(reopened)).toEqual(expectedCounts([withoutUuids, withUuids]));
    await reopened.close();
  });
});

describe("applying property values", () => {
  it("stores each row's text, for keys whose rows span days and values that repeat across chunks", async () => {
    // Rows of one chunk land in several days' segments; each segment numbers a key's texts on its own,
    // so an id the apply loop remembered for one segment must never serve another.
    const random = new Random(7);
    const store = open(dataDir);
    const expected = new Map<string, string[]>(); // "day/user" → texts of key "plan", in row order
    for (let chunkIndex = 0; chunkIndex < 30; chunkIndex++) {
      const batch: Row[] = Array.from({ length: random.integer(1, 60) }, () => ({
        event: "e",
        user: "u",
        dayOffset: random.integer(0, 3),
        plan: random.chance(0.8) ? `p${random.integer(0, 5)}` : undefined,
      }));
      // Rows of a day in time order, as a client would send them; days interleave.
      await store.commit(workspaceId, chunk(batch));
      for (const row of batch) {
        if (row.plan === undefined) continue;
        const texts = expected.get(String(row.dayOffset)) ?? [];
        texts.push(row.plan);
        expected.set(String(row.dayOffset), texts);
      }
    }
    const workspace = store.workspaces.get(workspaceId)!;
    const keyId = workspace.keys.idOf("plan")!;
    const stored = new Map<string, string[]>();
    for (const [dayStartMsOfPartition, partition] of workspace.days) {
      const properties = partition.active!.properties;
      const entries = properties.entries(properties.slotOf(keyId));
      const valueIds = new Uint32Array(entries.valueIds, entries.valueIdsOffset, entries.entryCount);
      const texts: string[] = [];
      readSharedTexts(entries.texts, texts);
      stored.set(String(Math.round((dayStartMsOfPartition - dayStartMs) / 86_400_000)), [...valueIds].map((id) => texts[id]));
    }
    expect(stored).toEqual(expected);
    await store.close();
  });
});

describe("a chunk of many new property keys", () => {
  /** Every (key text → value text) stored for the workspace, read from its sealed segments on disk. */
  function storedValues(store: Store): Map<string, string> {
    const workspace = store.workspaces.get(workspaceId)!;
    const values = new Map<string, string>();
    for (const partition of workspace.days.values()) {
      expect(partition.active?.rowCount ?? 0, "everything sealed").toBe(0);
      for (const sealed of partition.sealed) {
        const { layout, memory } = loadSegment(sealed.directory);
        const directory = new PropertyDirectory(layout, memory);
        for (let index = 0; index < directory.keyCount; index++) {
          const property = directory.at(index);
          const texts = property.texts();
          for (let entry = 0; entry < property.entryCount; entry++) values.set(workspace.keys.texts[property.keyId], texts[property.values[entry]]);
        }
      }
    }
    return values;
  }

  it("is applied in slices: the event loop runs meanwhile, the workspace's later commits keep WAL order, other workspaces go on, a checkpoint waits, and replay gives the same key ids", async () => {
    const store = open(dataDir);
    const wide = new ChunkBuilder();
    const expected = new Map<string, string>();
    // 40 000 keys never seen before, one entry each: far past what is applied at once, within the workspace's key cap.
    for (let row = 0; row < 400; row++) {
      const added = wide.addRow(dayStartMs + row, "wide", `user-${row}`, undefined);
      for (let key = 0; key < 100; key++) {
        wide.addProperty(added, `k${row}-${key}`, `v${row}-${key}`);
        expected.set(`k${row}-${key}`, `v${row}-${key}`);
      }
    }
    const after = new ChunkBuilder();
    after.addProperty(after.addRow(dayStartMs + 5000, "after", "user-x", undefined), "after", "yes");
    expected.set("after", "yes");

    let turns = 0;
    let wideDone = false;
    const countTurns = () => {
      if (wideDone) return;
      turns++;
      setImmediate(countTurns);
    };
    setImmediate(countTurns);
    const settled: string[] = [];
    const wideCommit = store.commit(workspaceId, wide.finish()).then(() => {
      wideDone = true;
      settled.push("wide");
    });
    const afterCommit = store.commit(workspaceId, after.finish()).then(() => settled.push("after"));
    const otherCommit = store.commit("0123456789abcdef", chunk([{ event: "elsewhere", user: "u", dayOffset: 0 }])).then(() => settled.push("other workspace"));
    const checkpoint = store.checkpoint();
    await Promise.all([wideCommit, afterCommit, otherCommit, checkpoint]);

    expect(turns, "event-loop turns while the wide chunk was applied").toBeGreaterThan(0);
    expect(settled.indexOf("other workspace"), `settled in the order ${settled.join(", ")}`).toBeLessThan(settled.indexOf("wide"));
    expect(settled.indexOf("after")).toBeGreaterThan(settled.indexOf("wide"));
    const keyTexts = store.workspaces.get(workspaceId)!.keys.texts.slice();
    // Ids in WAL order: the small commit's key comes after every key of the wide one.
    expect(keyTexts).toEqual([...expected.keys()]);
    await store.close();
    const reopened = open(dataDir);
    expect(reopened.workspaces.get(workspaceId)!.keys.texts).toEqual(keyTexts);
    expect(storedValues(reopened)).toEqual(expected);
    await reopened.close();
  });
});
