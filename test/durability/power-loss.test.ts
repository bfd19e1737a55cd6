/**
 * SPEC §2 Durability under simulated power loss: after a kill -9, the bytes
 * past the last complete record of the newest WAL file — and past the last
 * block of the dictionary files — are damaged the ways a lost page cache or a
 * torn write leaves them (zeros, garbage, a torn record, a cut or flipped last
 * record). The server must start, count every event whose record is intact
 * exactly once, forget the events of a record that was damaged (so their
 * uuids can be sent again), and keep what is ingested after the repair across
 * the next crash and the next seal.
 *
 * Every WAL-only batch carries its own event name, so each record's events are
 * counted by one query, and the test reads the WAL file itself to find which
 * record is last.
 */
import { appendFileSync, cpSync, readdirSync, readFileSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeChunk } from "../../src/storage/chunk-codec.js";
import { encodeRecord, readWalFile } from "../../src/storage/wal.js";
import { dayMs, isoDay, isoTime, sumCounts, trend } from "../helpers/events.js";
import { Random } from "../helpers/random.js";
import { type ServerHandle, ingestAll, makeDataDir, removeDataDir, startServer } from "../helpers/server.js";

/** The damaged records must still be only in the WAL: no idle or timed checkpoint may seal them first. */
const walOnly = { EVENTIDE_CHECKPOINT_IDLE_MS: "600000", EVENTIDE_CHECKPOINT_INTERVAL_MS: "600000" };

const firstDayMs = Date.UTC(2024, 4, 30);
const dateFrom = isoDay(firstDayMs - dayMs);
const dateTo = isoDay(firstDayMs + 3 * dayMs);

interface Batch {
  name: string;
  events: object[];
}

function makeBatch(random: Random, name: string, size: number, uuids: boolean): Batch {
  const events: object[] = [];
  for (let index = 0; index < size; index++) {
    events.push({
      event: name,
      distinctId: `${name}-user-${random.integer(0, size)}`,
      timestamp: isoTime(firstDayMs + random.integer(0, 3 * dayMs - 1)),
      properties: { [`key-of-${name}`]: `value ${index % 7} ✓`, plan: random.pick(["free", "pro"]) },
      ...(uuids ? { uuid: random.uuid() } : {}),
    });
  }
  return { name, events };
}

/** Per event name: total over the range must equal the expected count (0 for a lost batch). */
async function expectTotals(server: ServerHandle, expected: Map<string, number>, moment: string): Promise<void> {
  const actual = new Map<string, number>();
  await Promise.all(
    [...expected.keys()].map(async (name) => actual.set(name, sumCounts(await trend(server, { event: name, dateFrom, dateTo, groupBy: "day" })))),
  );
  expect(new Map([...actual].sort()), `${moment}; server stderr: ${server.stderr().slice(-800)}`).toEqual(new Map([...expected].sort()));
}

function newestWalFile(dataDir: string): string {
  const names = readdirSync(join(dataDir, "wal")).filter((name) => name.endsWith(".wal")).sort();
  return join(dataDir, "wal", names[names.length - 1]);
}

/** The event name of each record in a WAL file, with its byte range. */
function walRecords(path: string): Array<{ name: string; start: number; end: number; payload: Uint8Array; workspaceId: string }> {
  const { records, validBytes, fileBytes } = readWalFile(path);
  expect(validBytes, "a WAL written by a live server has no invalid tail").toBe(fileBytes);
  let offset = 0;
  return records.map((record) => {
    const bytes = encodeRecord(record.workspaceId, record.payload).length;
    const chunk = decodeChunk(record.payload);
    const names = new Set(Array.from(chunk.eventNameString, (index) => chunk.string(index)));
    expect(names.size, "one batch, one event name, one record").toBe(1);
    const entry = { name: [...names][0], start: offset, end: offset + bytes, payload: record.payload, workspaceId: record.workspaceId };
    offset += bytes;
    return entry;
  });
}

type WalDamage = (path: string, records: ReturnType<typeof walRecords>) => { lost: string[] };
type DictionaryDamage = (path: string) => void;

const garbage = Buffer.from("\x13\x37 power went out here; these bytes are not a record ∅∅∅ ".repeat(40), "utf8");

const walDamages: Record<string, WalDamage> = {
  "zeros after the last record": (path) => {
    appendFileSync(path, Buffer.alloc(16_384));
    return { lost: [] };
  },
  "garbage after the last record": (path) => {
    appendFileSync(path, garbage);
    return { lost: [] };
  },
  "a torn record (header and half a payload) after the last record": (path, records) => {
    const last = records[records.length - 1];
    const record = encodeRecord(last.workspaceId, last.payload);
    appendFileSync(path, record.subarray(0, Math.floor(record.length / 2)));
    return { lost: [] };
  },
  "the last record cut in the middle": (path, records) => {
    const last = records[records.length - 1];
    truncateSync(path, last.start + Math.floor((last.end - last.start) / 2));
    return { lost: [last.name] };
  },
  "a flipped byte in the last record": (path, records) => {
    const last = records[records.length - 1];
    const bytes = readFileSync(path);
    bytes[last.end - 9] ^= 0x20;
    writeFileSync(path, bytes);
    return { lost: [last.name] };
  },
  "the last record zeroed from its middle, and zeros after it": (path, records) => {
    const last = records[records.length - 1];
    const bytes = readFileSync(path);
    bytes.fill(0, last.start + 20);
    writeFileSync(path, Buffer.concat([bytes, Buffer.alloc(4096)]));
    return { lost: [last.name] };
  },
};

const dictionaryDamages: DictionaryDamage[] = [
  (path) => appendFileSync(path, garbage),
  (path) => appendFileSync(path, Buffer.alloc(4096)),
  (path) => {
    // A torn copy of the last block: its header promises bytes that never arrived.
    const bytes = readFileSync(path);
    const entryBytes = bytes.readUInt32LE(8);
    appendFileSync(path, bytes.subarray(0, 16 + Math.min(5, entryBytes - 1)));
  },
];

const dataDirs: string[] = [];
const servers: ServerHandle[] = [];
const baseDataDir = makeDataDir("eventide-power-base-");
dataDirs.push(baseDataDir);
let credentials: { apiKey: string; token: string; workspaceId: string };
const baseExpected = new Map<string, number>();
let walBatches: Batch[] = [];

async function start(dataDir: string): Promise<ServerHandle> {
  const server = await startServer({ dataDir, credentials, workers: 1, env: walOnly });
  servers.push(server);
  return server;
}

/**
 * One store, killed after its newest WAL file got one record per batch; each
 * damage below works on a copy of it.
 */
beforeAll(async () => {
  const random = new Random(900);
  // Sealed: ingested, then a graceful stop writes segments and dictionary blocks.
  let server = await start(baseDataDir);
  credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
  for (const name of ["sealed one", "sealed two 🚀"]) {
    await ingestAll(server, makeBatch(random, name, 300, true).events);
    baseExpected.set(name, 300);
  }
  expect(await server.stop()).toBe(0);

  // In the WAL only: one record per batch, each acknowledged before the next is sent.
  server = await start(baseDataDir);
  walBatches = Array.from({ length: 6 }, (_, batchIndex) => makeBatch(random, `wal batch ${batchIndex}`, random.integer(5, 120), batchIndex % 2 === 1));
  for (const batch of walBatches) {
    await ingestAll(server, batch.events);
    baseExpected.set(batch.name, batch.events.length);
  }
  await expectTotals(server, baseExpected, "before the kill");
  await server.kill();
});

afterAll(async () => {
  for (const server of servers) await server.kill();
  for (const dataDir of dataDirs) removeDataDir(dataDir);
});

describe("after a kill -9 and a damaged WAL tail, the server starts and counts every intact event once", () => {
  for (const [index, [label, damageWal]] of Object.entries(walDamages).entries()) {
    it(label, async () => {
      const random = new Random(1000 + index);
      const dataDir = makeDataDir("eventide-power-");
      dataDirs.push(dataDir);
      cpSync(baseDataDir, dataDir, { recursive: true });
      const expected = new Map(baseExpected);

      const walPath = newestWalFile(dataDir);
      const records = walRecords(walPath);
      expect(records.map((record) => record.name)).toEqual(walBatches.map((batch) => batch.name));
      const { lost } = damageWal(walPath, records);
      for (const name of lost) expected.set(name, 0);
      const workspaceDirectory = join(dataDir, "ws", credentials.workspaceId);
      for (const dictionary of ["_events.dict", "_users.dict", "_keys.dict"]) {
        const path = join(workspaceDirectory, dictionary);
        expect(statSync(path).size).toBeGreaterThan(0);
        dictionaryDamages[(index + dictionary.length) % dictionaryDamages.length](path);
      }

      let server = await start(dataDir);
      await expectTotals(server, expected, "after the damage and a restart");

      // A lost batch was never stored, so its uuids are free: sent again, it counts.
      for (const name of lost) {
        const batch = walBatches.find((candidate) => candidate.name === name)!;
        await ingestAll(server, batch.events);
        expected.set(name, batch.events.length);
      }
      // Sent again, the intact uuid batches count once.
      for (const batch of walBatches.filter((_, batchIndex) => batchIndex % 2 === 1)) await ingestAll(server, batch.events);
      const after = makeBatch(random, "after the repair", 77, true);
      await ingestAll(server, after.events);
      expected.set(after.name, 77);
      await expectTotals(server, expected, "after ingesting past the repaired tail");

      // What was appended after the cut must survive the next crash.
      await server.kill();
      server = await start(dataDir);
      await expectTotals(server, expected, "after the next kill -9");
      // And the next seal, whose dictionary blocks go where the damaged tails were cut. Every
      // variant damages all three dictionaries, one way each, so two variants (one that lost a
      // record, one that did not) cover it; the others save the time of a restart.
      if (index % 3 === 0) {
        expect(await server.stop()).toBe(0);
        server = await start(dataDir);
        await expectTotals(server, expected, "after sealing and a graceful restart");
      }
      await server.stop();
    });
  }
});
