/**
 * SPEC §2 Durability across a kill -9 followed, later, by a power loss: bytes
 * a killed server wrote but never fsynced are still in the page cache, so the
 * restarted server reads them, counts them, and acknowledges a uuid retry of
 * them as already stored. Unless recovery fsyncs what it keeps, a power loss
 * after that takes an acknowledged event away. Each test plants such bytes
 * (a WAL record, a dictionary block) outside the sync journal, restarts,
 * acknowledges a retry, then applies a power loss that cuts every file to what
 * was fsynced (test/helpers/power-loss.ts) and expects the event to remain.
 *
 * The crash loops rarely hit this: the next group commit's fdatasync covers
 * the whole file. Planting the bytes makes it certain.
 */
import { appendFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { ChunkBuilder } from "../../src/storage/chunk-codec.js";
import { encodeRecord } from "../../src/storage/wal.js";
import { dayMs, isoDay, isoTime, sumCounts, trend } from "../helpers/events.js";
import { losePower } from "../helpers/power-loss.js";
import { Random } from "../helpers/random.js";
import { type ServerHandle, ingestAll, makeDataDir, removeDataDir, startServer } from "../helpers/server.js";

const timeMs = Date.UTC(2024, 6, 1, 12);
const directories: string[] = [];
const servers: ServerHandle[] = [];

afterAll(async () => {
  for (const server of servers) await server.kill();
  for (const directory of directories) removeDataDir(directory);
});

function setUp(): { dataDir: string; journalPath: string; start: (credentials?: ServerHandle) => Promise<ServerHandle> } {
  const dataDir = makeDataDir("eventide-recovery-sync-");
  const journalDir = makeDataDir("eventide-recovery-journal-");
  directories.push(dataDir, journalDir);
  const journalPath = join(journalDir, "sync-journal");
  const start = async (previous?: ServerHandle) => {
    const credentials = previous ? { apiKey: previous.apiKey, token: previous.token, workspaceId: previous.workspaceId } : undefined;
    const server = await startServer({ dataDir, credentials, workers: 1, env: { EVENTIDE_SYNC_JOURNAL: journalPath } });
    servers.push(server);
    return server;
  };
  return { dataDir, journalPath, start };
}

async function count(server: ServerHandle, event: string): Promise<number> {
  return sumCounts(await trend(server, { event, dateFrom: isoDay(timeMs - dayMs), dateTo: isoDay(timeMs + dayMs), groupBy: "day" }));
}

function newestWalFile(dataDir: string): string {
  const names = readdirSync(join(dataDir, "wal")).filter((name) => name.endsWith(".wal")).sort();
  return join(dataDir, "wal", names[names.length - 1]);
}

/** One event as the WAL holds it, and as a client would send it again. */
function ghost(random: Random, event: string): { record: (workspaceId: string) => Buffer; wire: object } {
  const uuid = random.uuid();
  const builder = new ChunkBuilder();
  builder.addRow(timeMs, event, `${event}-user`, Buffer.from(uuid.replaceAll("-", ""), "hex"));
  const chunk = new Uint8Array(builder.finish());
  return {
    record: (workspaceId) => encodeRecord(workspaceId, chunk),
    wire: { event, distinctId: `${event}-user`, timestamp: isoTime(timeMs), uuid },
  };
}

/** A dictionary block (src/storage/dictionary.ts) holding `texts`. */
function dictionaryBlock(texts: string[]): Buffer {
  const entries = texts.map((text) => {
    const bytes = Buffer.from(text, "utf8");
    const prefix = Buffer.alloc(4);
    prefix.writeUInt32LE(bytes.length);
    return Buffer.concat([prefix, bytes]);
  });
  const body = Buffer.concat(entries);
  const header = Buffer.alloc(16);
  header.writeUInt32LE(0x31434944, 0);
  header.writeUInt32LE(texts.length, 4);
  header.writeUInt32LE(body.length, 8);
  header.writeUInt32LE(crc32(body), 12);
  return Buffer.concat([header, body]);
}

describe("recovery makes durable what it replays from a killed server's page cache", () => {
  it("keeps an event acknowledged as a uuid repeat of a WAL record the killed server never fdatasynced", async () => {
    const random = new Random(71);
    const { dataDir, journalPath, start } = setUp();
    let server = await start();
    await ingestAll(server, [{ event: "anchor", distinctId: "a", timestamp: isoTime(timeMs) }]);
    await server.kill();

    // Written by the killed server, not yet fdatasynced: not in the sync journal.
    const planted = ghost(random, "written before the kill");
    appendFileSync(newestWalFile(dataDir), planted.record(server.workspaceId));

    server = await start(server);
    expect(await count(server, "written before the kill")).toBe(1);
    await ingestAll(server, [planted.wire]); // the client retries: acknowledged, already stored
    expect(await count(server, "written before the kill")).toBe(1);
    await server.kill();

    losePower(journalPath, random, "cut at the synced length");
    server = await start(server);
    expect(await count(server, "written before the kill"), server.stderr()).toBe(1);
    expect(await count(server, "anchor")).toBe(1);
    expect(await server.stop()).toBe(0);
  });

  it("keeps the event name of a sealed event whose dictionary block the killed server never fsynced", async () => {
    const random = new Random(72);
    const { dataDir, journalPath, start } = setUp();
    let server = await start();
    await ingestAll(server, [{ event: "anchor", distinctId: "a", timestamp: isoTime(timeMs) }]);
    expect(await server.stop()).toBe(0); // sealed: dictionaries fsynced, WAL emptied

    // A checkpoint appended the name's block and was killed before its fsync; the row is in the WAL.
    const planted = ghost(random, "named before the kill");
    appendFileSync(join(dataDir, "ws", server.workspaceId, "_events.dict"), dictionaryBlock(["named before the kill"]));
    appendFileSync(newestWalFile(dataDir), planted.record(server.workspaceId));

    server = await start(server);
    expect(await count(server, "named before the kill")).toBe(1);
    await ingestAll(server, [planted.wire]);
    // A graceful stop seals the row and deletes the WAL: the dictionary is the name's only copy.
    expect(await server.stop()).toBe(0);

    losePower(journalPath, random, "cut at the synced length");
    server = await start(server);
    expect(await count(server, "named before the kill"), server.stderr()).toBe(1);
    expect(await count(server, "anchor")).toBe(1);
    expect(await server.stop()).toBe(0);
  });
});
