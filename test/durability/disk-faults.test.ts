/**
 * SPEC §2 Durability when the disk fails: write, fsync and rename errors
 * (ENOSPC and EIO) injected into the running server through
 * EVENTIDE_FAULTS_FILE (src/storage/fault-injection.ts).
 *
 * Faults in the WAL (write, fdatasync) fail the requests they hit: each is
 * answered 503 `unavailable` in SPEC's error shape with Retry-After, never
 * 200, and stores nothing. Faults in a checkpoint (opening the next WAL file,
 * dictionary blocks, segment files, segment renames, `_checkpoint.json`) fail
 * no request: ingest goes on into the WAL, the frozen rows stay queryable, and
 * the checkpoint is retried. Either way the process stays up, takes events
 * again once the fault clears, counts everything it acknowledged before,
 * during and after exactly once, leaves files a restart reads without cutting
 * anything, and a restart (kill -9 or graceful, alternately) recovers the
 * same counts.
 *
 * One server and one data directory go through every episode in turn, so
 * each episode also starts from the leftovers of the one before.
 */
import { existsSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { readWalFile } from "../../src/storage/wal.js";
import { dayMs, isoDay, isoTime, sleep, sumCounts, trend } from "../helpers/events.js";
import { expectError, ingestBatch, ingestOne } from "../helpers/http.js";
import { Random } from "../helpers/random.js";
import { type ServerHandle, makeDataDir, removeDataDir, startServer } from "../helpers/server.js";

type Operation =
  | "wal.write"
  | "wal.fsync"
  | "wal.rotate"
  | "dictionary.write"
  | "dictionary.fsync"
  | "segment.write"
  | "segment.rename"
  | "checkpoint.publish"
  | "checkpoint.directory-fsync";

/**
 * Where a fault shows: in the requests it fails (WAL), or only in the
 * checkpoints it fails. A failed directory fsync after `_checkpoint.json` was
 * renamed cannot undo the rename: that checkpoint counts, but keeps the WAL
 * files it covers until a later one is published cleanly.
 */
const operations: Array<{ operation: Operation; fails: "requests" | "checkpoints" }> = [
  { operation: "wal.write", fails: "requests" },
  { operation: "wal.fsync", fails: "requests" },
  { operation: "wal.rotate", fails: "checkpoints" },
  { operation: "dictionary.write", fails: "checkpoints" },
  { operation: "dictionary.fsync", fails: "checkpoints" },
  { operation: "segment.write", fails: "checkpoints" },
  { operation: "segment.rename", fails: "checkpoints" },
  { operation: "checkpoint.publish", fails: "checkpoints" },
  { operation: "checkpoint.directory-fsync", fails: "checkpoints" },
];

const timeMs = Date.UTC(2024, 2, 10, 9);
const dataDir = makeDataDir("eventide-disk-faults-");
const controlDir = makeDataDir("eventide-disk-faults-control-");
const faultsFile = join(controlDir, "faults.json");
const environment = {
  EVENTIDE_FAULTS_FILE: faultsFile,
  // Checkpoints all the time, so every checkpoint step meets the fault within milliseconds.
  EVENTIDE_CHECKPOINT_ROWS_MAX: "40",
  EVENTIDE_CHECKPOINT_INTERVAL_MS: "50",
};
const servers: ServerHandle[] = [];
const random = new Random(4242);
/** Per event name, how many events must be counted. */
const expected = new Map<string, number>();

afterAll(async () => {
  for (const server of servers) await server.kill();
  removeDataDir(dataDir);
  removeDataDir(controlDir);
});

/** Arms faults the way the module header asks: the new file is renamed into place, never seen half-written. */
function arm(faults: Record<string, { errno: string; count?: number }>): void {
  writeFileSync(`${faultsFile}.tmp`, JSON.stringify(faults));
  renameSync(`${faultsFile}.tmp`, faultsFile);
}

/** `padBytes`: a property of that many bytes per event, to make the WAL record large (the thread pool writes those). */
function makeEvents(name: string, size: number, uuids: boolean, padBytes = 0): object[] {
  return Array.from({ length: size }, (_, index) => ({
    event: name,
    distinctId: `${name}/${index}/${random.integer(0, 1e9)}`,
    timestamp: isoTime(timeMs + index * 1000),
    properties: { index, plan: random.pick(["free", "pro"]), ...(padBytes > 0 ? { pad: `${index}`.padEnd(padBytes, "x") } : {}) },
    ...(uuids ? { uuid: random.uuid() } : {}),
  }));
}

async function counts(server: ServerHandle, name: string): Promise<{ total: number; unique: number }> {
  const request = { event: name, dateFrom: isoDay(timeMs - dayMs), dateTo: isoDay(timeMs + dayMs), groupBy: "day" as const };
  const [total, unique] = await Promise.all([trend(server, request), trend(server, { ...request, math: "unique" })]);
  return { total: sumCounts(total), unique: sumCounts(unique) };
}

/** Every event name counted as expected, each event once (distinctIds are unique per event). */
async function expectCounts(server: ServerHandle, moment: string): Promise<void> {
  const actual = new Map<string, number>();
  for (const name of expected.keys()) {
    const { total, unique } = await counts(server, name);
    expect(unique, `${moment}: ${name} counted ${total} events of ${unique} distinct users`).toBe(total);
    actual.set(name, total);
  }
  expect(actual, `${moment}; server stderr: ${server.stderr().slice(-1500)}`).toEqual(expected);
}

async function acknowledged(server: ServerHandle, events: object[], name: string): Promise<void> {
  const answer = await ingestBatch(server, server.apiKey, events);
  expect(answer.status, `${name}: ${answer.text}; stderr: ${server.stderr().slice(-800)}`).toBe(200);
  expect(answer.body.accepted).toBe(events.length);
}

function occurrences(text: string, fragment: string): number {
  return text.split(fragment).length - 1;
}

async function waitFor(condition: () => boolean, timeoutMs: number, what: string, server: ServerHandle): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${what}; server stderr: ${server.stderr().slice(-1500)}`);
    await sleep(20);
  }
}

/** The store's files once nothing is in flight: one WAL file, the one `_checkpoint.json` names, and no segment of a failed checkpoint. */
function settled(): boolean {
  const checkpointFile = join(dataDir, "_checkpoint.json");
  if (!existsSync(checkpointFile)) return false;
  const published = (JSON.parse(readFileSync(checkpointFile, "utf8")) as { walSequence: number }).walSequence;
  const walFiles = readdirSync(join(dataDir, "wal")).filter((name) => name.endsWith(".wal"));
  if (walFiles.length !== 1 || Number(walFiles[0].slice(0, 12)) !== published) return false;
  for (const workspace of readdirSync(join(dataDir, "ws"))) {
    for (const day of readdirSync(join(dataDir, "ws", workspace))) {
      if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) continue;
      for (const name of readdirSync(join(dataDir, "ws", workspace, day))) {
        const match = /^seg-(\d+)-/.exec(name);
        if (match === null || Number(match[1]) > published) return false;
      }
    }
  }
  return true;
}

/** Valid to the last byte: a failed write was cut back, nothing for recovery to cut. */
function expectFilesIntact(moment: string): void {
  for (const name of readdirSync(join(dataDir, "wal"))) {
    const { validBytes, fileBytes } = readWalFile(join(dataDir, "wal", name));
    expect(validBytes, `${moment}: wal/${name} has an invalid tail`).toBe(fileBytes);
  }
  for (const workspace of readdirSync(join(dataDir, "ws"))) {
    for (const dictionary of ["_events.dict", "_users.dict", "_keys.dict"]) {
      const path = join(dataDir, "ws", workspace, dictionary);
      if (!existsSync(path)) continue;
      const bytes = readFileSync(path);
      let offset = 0;
      while (offset + 16 <= bytes.length && bytes.readUInt32LE(offset) === 0x31434944) {
        const end = offset + 16 + bytes.readUInt32LE(offset + 8);
        if (end > bytes.length || crc32(bytes.subarray(offset + 16, end)) !== bytes.readUInt32LE(offset + 12)) break;
        offset = end;
      }
      expect(offset, `${moment}: ${dictionary} has an invalid tail`).toBe(statSync(path).size);
    }
  }
}

/**
 * An episode may wait 15 s for two failed checkpoints and 15 s for a clean one, then stops (up to 10 s) and
 * starts (up to 20 s) a server: past vitest's 60 s default on a slow machine, where the bare timeout would hide
 * which wait ran long. Each wait reports its own failure well within this.
 */
const episodeTimeoutMs = 120_000;

describe("injected disk faults (ENOSPC, EIO) in writes, fsyncs and renames", () => {
  let server: ServerHandle;
  let episode = 0;

  it("starts", async () => {
    arm({});
    server = await startServer({ dataDir, env: environment });
    servers.push(server);
  });

  for (const { operation, fails } of operations) {
    for (const errno of ["ENOSPC", "EIO"]) {
      it(`${operation} fails with ${errno}: ${fails === "requests" ? "requests answer 503 and store nothing" : "checkpoints fail and are retried, ingest goes on"}; nothing acknowledged is lost`, async () => {
        const label = `${operation} ${errno}`;
        const before = makeEvents(`${label} before`, 60, true);
        await acknowledged(server, before, "before the fault");
        expected.set(`${label} before`, before.length);

        const stderrAtArming = server.stderr().length;
        arm({ [operation]: { errno } });
        const refusedWithUuids: object[][] = [];
        if (fails === "requests") {
          for (let attempt = 0; attempt < 4; attempt++) {
            // Odd attempts send a large batch: its WAL group is written by the thread pool, not the main thread.
            const withUuids = makeEvents(`${label} refused with uuids`, 30, true, attempt % 2 === 1 ? 4096 : 0);
            const plain = makeEvents(`${label} refused`, 30, false);
            const answers = await Promise.all([ingestBatch(server, server.apiKey, withUuids), ingestBatch(server, server.apiKey, plain)]);
            for (const answer of answers) {
              expectError(answer, 503, "unavailable");
              expect(answer.headers["retry-after"], answer.text).toBe("1");
            }
            refusedWithUuids.push(withUuids);
          }
          expectError(await ingestOne(server, server.apiKey, makeEvents(`${label} refused`, 1, false)[0] as Record<string, unknown>), 503, "unavailable");
          expected.set(`${label} refused`, 0);
          expect(occurrences(server.stderr().slice(stderrAtArming), `injected ${errno} into ${operation}`)).toBeGreaterThan(0);
        } else {
          // Ingest goes on; the checkpoints it sets off fail, and are retried (after a second) while the fault lasts.
          const failure = operation === "checkpoint.directory-fsync" ? "published, but not made durable" : "checkpoint failed";
          const failedTwice = () => {
            const stderr = server.stderr().slice(stderrAtArming);
            return occurrences(stderr, failure) >= 2 && occurrences(stderr, `injected ${errno} into ${operation}`) >= 2;
          };
          let during = 0;
          const deadline = Date.now() + 15_000;
          while (!failedTwice()) {
            if (Date.now() > deadline) throw new Error(`no two checkpoints failed by ${operation}; stderr: ${server.stderr().slice(-1500)}`);
            const events = makeEvents(`${label} during`, 30, random.chance(0.5));
            await acknowledged(server, events, "during a checkpoint fault");
            during += events.length;
            await sleep(100);
          }
          expected.set(`${label} during`, during);
        }
        // Queries answer during the fault, and count what was acknowledged, frozen segments included.
        await expectCounts(server, `during the ${label} fault`);

        arm({});
        for (const events of refusedWithUuids) await acknowledged(server, events, "a refused batch sent again after the fault cleared");
        if (refusedWithUuids.length > 0) expected.set(`${label} refused with uuids`, refusedWithUuids.flat().length);
        const after = makeEvents(`${label} after`, 50, true);
        await acknowledged(server, after, "after the fault cleared");
        expected.set(`${label} after`, after.length);
        // A retried uuid batch counts once.
        await acknowledged(server, before, "the first batch sent again");
        await waitFor(settled, 15_000, "a checkpoint to succeed after the fault cleared", server);
        await expectCounts(server, `after the ${label} fault cleared`);
        expect(server.process.exitCode, "the process stayed up").toBeNull();

        episode++;
        const restart = episode % 2 === 1 ? "kill -9" : "graceful stop";
        if (restart === "kill -9") await server.kill();
        else expect(await server.stop(), server.stderr().slice(-1500)).toBe(0);
        expectFilesIntact(`after the ${label} episode and a ${restart}`);
        const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
        server = await startServer({ dataDir, env: environment, credentials });
        servers.push(server);
        await expectCounts(server, `after the ${label} episode and a ${restart}`);
      }, episodeTimeoutMs);
    }
  }

  it("a single fdatasync EIO fails the requests of its group (and of a group already in flight behind it), and the next group is stored", async () => {
    arm({ "wal.fsync": { errno: "EIO", count: 1 } });
    const name = "one failed group";
    const answers = await Promise.all(Array.from({ length: 6 }, () => ingestBatch(server, server.apiKey, makeEvents(name, 20, false))));
    let storedEvents = 0;
    for (const answer of answers) {
      if (answer.status === 200) storedEvents += answer.body.accepted;
      else expectError(answer, 503, "unavailable");
    }
    expect(answers.filter((answer) => answer.status === 503).length, "the failed group").toBeGreaterThan(0);
    const next = makeEvents(`${name} next`, 20, false);
    await acknowledged(server, next, "the group after the failed one");
    expected.set(name, storedEvents);
    expected.set(`${name} next`, next.length);
    await expectCounts(server, "after one failed group");
    await server.kill();
    server = await startServer({ dataDir, env: environment, credentials: { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId } });
    servers.push(server);
    await expectCounts(server, "after one failed group and a kill -9");
    arm({});
    expect(await server.stop()).toBe(0);
    expectFilesIntact("at the end");
  }, episodeTimeoutMs);
});
