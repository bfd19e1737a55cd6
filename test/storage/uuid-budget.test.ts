/**
 * The uuid sets' memory budget (EVENTIDE_UUID_MEMORY_BYTES_MAX): a store that
 * receives more uuids than memory holds keeps its sets within the budget, by
 * beginning generations early, and recognises the most recent retries; at
 * start-up it reloads the most recently written segments' uuids first and
 * stops at the budget. Without it, fresh uuids at any rate grew the process
 * until the system killed it, and a restart reloaded them and died again.
 */
import { describe, expect, it } from "vitest";
import { UuidSet } from "../../src/storage/uuid-set.js";
import { countEvents, expectOk, ingestBatch, send } from "../helpers/http.js";
import { makeDataDir, removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";
import { Random } from "../helpers/random.js";
import { countPresent, randomUuids } from "../helpers/uuids.js";

const startMs = Date.UTC(2026, 0, 5, 13, 30);

describe("a uuid set rotated before its period ends", () => {
  it("keeps the current generation, drops the older one, and remembers from the rotation on", () => {
    const random = new Random(81);
    const set = new UuidSet(7, startMs);
    const first = randomUuids(random, 3_000);
    for (let offset = 0; offset < first.length; offset += 16) set.claim(first, offset, 1);
    const firstBytes = set.byteLength;
    expect(set.currentByteLength).toBe(firstBytes);
    expect(set.previousByteLength).toBe(0);

    expect(set.rotate(startMs + 1_000, Infinity)).toBe(true);
    expect(countPresent(set, first)).toBe(3_000);
    expect(set.previousByteLength).toBe(firstBytes);
    expect(set.currentByteLength).toBe(0);
    const second = randomUuids(random, 500);
    for (let offset = 0; offset < second.length; offset += 16) set.claim(second, offset, 2);
    // A repeat of the older generation's uuid is still a repeat, owned by its first claim.
    expect(set.claim(first, 0, 3)).toBe(1);

    expect(set.rotate(startMs + 2_000, Infinity)).toBe(true);
    expect(countPresent(set, first)).toBe(0);
    expect(countPresent(set, second)).toBe(500);
    expect(set.byteLength).toBeLessThan(firstBytes);
    expect(set.rememberedSinceMs).toBe(startMs + 1_000);
    // Forgotten means new again.
    expect(set.claim(first, 0, 4)).toBe(-1);
  });

  it("refuses to drop a generation that a commit still in flight claimed into", () => {
    const random = new Random(82);
    const set = new UuidSet(7, startMs);
    const uuids = randomUuids(random, 10);
    set.claim(uuids, 0, 5);
    expect(set.rotate(startMs, 5)).toBe(true);
    // Commit 5's claim is now in the older generation: dropping it would let a retry in while 5 is on its way to disk.
    expect(set.rotate(startMs, 5)).toBe(false);
    expect(set.has(uuids, 0)).toBe(true);
    expect(set.rotate(startMs, 6)).toBe(true);
    expect(set.has(uuids, 0)).toBe(false);
  });

  it("counts the bytes of its tables as they grow", () => {
    const random = new Random(83);
    const set = new UuidSet(7, startMs);
    const uuids = randomUuids(random, 20_000);
    let last = 0;
    for (let offset = 0; offset < uuids.length; offset += 16) {
      set.claim(uuids, offset, 1);
      expect(set.byteLength).toBeGreaterThanOrEqual(last);
      last = set.byteLength;
    }
    // 20 bytes a slot, tables 50–75 % full at most.
    expect(set.byteLength).toBeGreaterThan(20_000 * 20);
    expect(set.byteLength).toBeLessThan(20_000 * 20 * 4);
  });
});

const budgetBytes = 1024 * 1024;
const batchEvents = 1_000;
const batches = 60;
const firstDay = Date.UTC(2024, 0, 1);
const dayMs = 86_400_000;

function batchOf(random: Random, index: number): object[] {
  return Array.from({ length: batchEvents }, (_, row) => ({
    event: "view",
    distinctId: `user-${row % 97}`,
    timestamp: new Date(firstDay + index * dayMs + row * 1_000).toISOString(),
    uuid: random.uuid(),
  }));
}

async function metric(server: ServerHandle, name: string): Promise<number | undefined> {
  const answer = await send(`${server.queryUrl}/metrics`, { method: "GET" });
  for (const line of answer.text.split("\n")) if (line.startsWith(`${name} `)) return Number(line.slice(name.length + 1));
  return undefined;
}

async function stored(server: ServerHandle): Promise<number> {
  return countEvents(server, server.token, "view", "2024-01-01", "2024-03-31");
}

async function sendBatch(server: ServerHandle, events: object[]): Promise<void> {
  const answer = expectOk(await ingestBatch(server, server.apiKey, events));
  expect(answer.accepted).toBe(events.length);
}

describe("a store receiving more uuids than its budget holds", () => {
  it("keeps its sets within the budget, recognises recent retries, and reloads the newest within it after a restart", async () => {
    const random = new Random(84);
    // A checkpoint after every batch: each batch's day becomes a segment of its own, written in turn.
    const env = { EVENTIDE_UUID_MEMORY_BYTES_MAX: String(budgetBytes), EVENTIDE_CHECKPOINT_ROWS_MAX: String(batchEvents) };
    // Both servers share one data directory: each is stopped, and the directory removed, here (whatever fails).
    const dataDir = makeDataDir();
    const servers: ServerHandle[] = [];
    try {
      const server = await startServer({ env, dataDir });
      servers.push(server);
      const sent = Array.from({ length: batches }, (_, index) => batchOf(random, index));
      for (const events of sent) await sendBatch(server, events);
      expect(await stored(server)).toBe(batches * batchEvents);
      // A table may double past the budget before the next claim rotates.
      expect(await metric(server, "eventide_uuid_bytes")).toBeLessThanOrEqual(budgetBytes * 1.25);
      expect(await metric(server, "eventide_uuid_window_seconds")).toBeLessThan(3_600);
      expect(server.stdoutLines.join("\n") + server.stderr()).toContain("uuid sets at half their memory budget");

      // The last batch is remembered: its retry stores nothing. The first was forgotten (60 000 uuids never fit a
      // mebibyte at 20 bytes a slot): its retry is stored again, the price of bounded memory.
      await sendBatch(server, sent[batches - 1]);
      expect(await stored(server)).toBe(batches * batchEvents);
      await sendBatch(server, sent[0]);
      expect(await stored(server)).toBe((batches + 1) * batchEvents);

      await server.stop();
      const again = await startServer({ env, dataDir, credentials: { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId } });
      servers.push(again);
      await sendBatch(again, sent[batches - 1]);
      expect(await stored(again)).toBe((batches + 1) * batchEvents);
      // At most one segment's uuids past the budget: the reload stops once it is reached.
      expect(await metric(again, "eventide_uuid_bytes")).toBeLessThanOrEqual(budgetBytes * 1.5);
      expect(again.stdoutLines.join("\n") + again.stderr()).toContain("uuids of older segments not loaded");
    } finally {
      for (const server of servers) await server.stop();
      removeDataDir(dataDir);
    }
  });
});
