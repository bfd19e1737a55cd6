/**
 * SPEC §2 Durability under kill -9: several clients stream /ingest/batch into a
 * server that checkpoints every few hundred rows; the server is killed at a
 * random moment, restarted on the same directory, and the query API must count
 * every acknowledged event, and nothing twice. Repeated for several cycles
 * (EVENTIDE_CRASH_CYCLES, default 5; EVENTIDE_CRASH_SEED replays a run).
 *
 * Making counts checkable exactly: every batch gets its own hour of the
 * timeline ("slot") under its client's event name, and every event its own
 * distinctId, so one trend query per client and kind (groupBy hour) reads
 * each batch's count, and `unique` equal to `total` shows no event was stored
 * twice. A batch is one WAL record, so it is stored whole or not at all:
 *  - acknowledged → exactly its size, at every later check;
 *  - unanswered, without uuids → 0 or its size, and the same at every later check;
 *  - unanswered, with uuids → retried with the same uuids (after the restart)
 *    until acknowledged, then exactly its size.
 * Some uuid batches go out twice at once, and some are re-sent after their
 * acknowledgement, as a client that lost the answer would. Every other cycle,
 * the kill comes the moment one of two identical requests is answered while
 * the other still waits.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { type BatchOutcome, dayMs, hourLabel, hourMs, isoDay, isoTime, sendBatch, sleep, trend } from "../helpers/events.js";
import { Random } from "../helpers/random.js";
import { type ServerHandle, makeDataDir, removeDataDir, startServer } from "../helpers/server.js";

const cycleCount = Number(process.env.EVENTIDE_CRASH_CYCLES ?? 5);
const seed = Number(process.env.EVENTIDE_CRASH_SEED ?? (Date.now() ^ (process.pid << 16)) >>> 0);
const clientCount = 3;
const timelineStartMs = Date.UTC(2023, 0, 2);
/** A trend answers at most 10 000 buckets: read slots in windows of 400 days. */
const windowDays = 400;

type BatchKind = "uuid" | "plain";

interface Batch {
  kind: BatchKind;
  client: number;
  slot: number;
  events: object[];
  /** Set once any attempt was answered 200 with every event accepted. */
  acknowledged: boolean;
  /** Plain batches that were never answered: the count first seen after a restart (0 or size), which must not change. */
  observed: number | undefined;
  /** One entry per attempt, e.g. "cycle 2: acknowledged + unanswered", for failure messages. */
  history: string[];
}

class Client {
  readonly batches: Record<BatchKind, Batch[]> = { uuid: [], plain: [] };
  readonly retries: Batch[] = [];

  constructor(readonly index: number) {}

  eventName(kind: BatchKind): string {
    return `${kind}-client-${this.index}`;
  }

  newBatch(random: Random, kind: BatchKind): Batch {
    const slot = this.batches[kind].length;
    const size = random.integer(1, 200);
    const slotStartMs = timelineStartMs + slot * hourMs;
    const events: object[] = [];
    for (let index = 0; index < size; index++) {
      const event: Record<string, unknown> = {
        event: this.eventName(kind),
        distinctId: `c${this.index}-${kind}-s${slot}-e${index}`,
        timestamp: isoTime(slotStartMs + index * 7),
        properties: { slot, index, note: "ünïcode ✓" },
      };
      if (kind === "uuid") event.uuid = random.uuid();
      events.push(event);
    }
    const batch: Batch = { kind, client: this.index, slot, events, acknowledged: false, observed: undefined, history: [] };
    this.batches[kind].push(batch);
    return batch;
  }
}

interface Anomaly {
  batch: string;
  outcome: BatchOutcome;
}

/** Streams batches until `running()` turns false; records acknowledgements and anomalies. */
async function stream(
  client: Client,
  server: ServerHandle,
  random: Random,
  running: () => boolean,
  alive: () => boolean,
  anomalies: Anomaly[],
  cycle: number,
  /** Called when one of two identical requests is answered while its twin is still waiting. */
  onTwinWaiting: (() => void) | undefined,
): Promise<void> {
  while (running()) {
    let batch = client.retries.shift();
    let copies = 1;
    if (batch === undefined) {
      const acknowledgedUuids = client.batches.uuid.filter((candidate) => candidate.acknowledged);
      if (acknowledgedUuids.length > 0 && random.chance(0.05)) {
        batch = random.pick(acknowledgedUuids); // the client lost the answer and sends again
      } else {
        batch = client.newBatch(random, random.chance(0.6) ? "uuid" : "plain");
        if (batch.kind === "uuid" && random.chance(0.3)) copies = 2; // two identical requests at once
      }
    }
    const target = batch;
    const answered = [false, false];
    const outcomes = await Promise.all(
      Array.from({ length: copies }, (_, copy) =>
        sendBatch(server.ingestUrl, server.apiKey, target.events).then((outcome) => {
          answered[copy] = true;
          if (copies === 2 && outcome.kind === "acknowledged" && !answered[1 - copy]) onTwinWaiting?.();
          return outcome;
        }),
      ),
    );
    const wasAlive = alive();
    let acknowledged = false;
    for (const outcome of outcomes) {
      if (outcome.kind === "acknowledged") {
        if (outcome.accepted !== target.events.length) anomalies.push({ batch: `${target.kind} ${target.client}/${target.slot}`, outcome });
        else acknowledged = true;
      } else if (wasAlive && !(outcome.kind === "refused" && outcome.status === 503)) {
        // Only the kill may cut a request off; anything else is a server fault.
        anomalies.push({ batch: `${target.kind} ${target.client}/${target.slot}`, outcome });
      }
    }
    target.history.push(`cycle ${cycle}: ${outcomes.map((outcome) => outcome.kind).join(" + ")}`);
    if (acknowledged) target.acknowledged = true;
    else if (target.kind === "uuid" && !target.acknowledged) client.retries.push(target);
  }
}

/** Per slot: total and unique count of one client's event name. */
async function slotCounts(server: ServerHandle, eventName: string, slotCount: number): Promise<Array<{ total: number; unique: number }>> {
  const counts: Array<{ total: number; unique: number }> = [];
  const lastDayMs = timelineStartMs + Math.max(0, slotCount - 1) * hourMs;
  for (let windowStartMs = timelineStartMs; windowStartMs <= lastDayMs; windowStartMs += windowDays * dayMs) {
    const windowEndMs = Math.min(windowStartMs + (windowDays - 1) * dayMs, lastDayMs - (lastDayMs % dayMs));
    const request = { event: eventName, dateFrom: isoDay(windowStartMs), dateTo: isoDay(windowEndMs), groupBy: "hour" as const };
    const [totals, uniques] = await Promise.all([trend(server, request), trend(server, { ...request, math: "unique" })]);
    for (let hourStartMs = windowStartMs; hourStartMs < windowEndMs + dayMs; hourStartMs += hourMs) {
      const label = hourLabel(hourStartMs);
      counts.push({ total: totals.get(label) ?? Number.NaN, unique: uniques.get(label) ?? Number.NaN });
    }
  }
  return counts;
}

/** Checks every batch's count against what its client knows; returns failures as sentences. */
async function check(server: ServerHandle, clients: Client[], final: boolean): Promise<string[]> {
  const failures: string[] = [];
  for (const client of clients) {
    for (const kind of ["uuid", "plain"] as const) {
      const batches = client.batches[kind];
      const counts = await slotCounts(server, client.eventName(kind), batches.length);
      for (const [slot, count] of counts.entries()) {
        const batch = batches[slot] as Batch | undefined;
        const where = `client ${client.index} ${kind} batch ${slot} [${batch?.history.join("; ")}]`;
        if (batch === undefined) {
          if (count.total !== 0) failures.push(`${where}: never sent, counted ${count.total}`);
          continue;
        }
        const size = batch.events.length;
        if (count.unique !== count.total) failures.push(`${where}: ${count.total} events but ${count.unique} distinct users (stored twice)`);
        if (batch.acknowledged) {
          if (count.total !== size) failures.push(`${where}: acknowledged ${size} events, counted ${count.total}`);
        } else if (kind === "uuid" && final) {
          failures.push(`${where}: never acknowledged despite retries`);
        } else if (count.total !== 0 && count.total !== size) {
          failures.push(`${where}: unacknowledged batch of ${size} partly stored (${count.total})`);
        } else if (kind === "plain") {
          if (batch.observed === undefined) batch.observed = count.total;
          else if (batch.observed !== count.total) failures.push(`${where}: counted ${batch.observed}, later ${count.total}`);
        }
      }
    }
  }
  return failures;
}

/** What the kill interrupted, read from the files: a checkpoint in progress shows as tmp_ or unpublished segments, or two WAL files. */
function interruptedWork(dataDir: string): string[] {
  const found = new Set<string>();
  const checkpointFile = join(dataDir, "_checkpoint.json");
  const published = existsSync(checkpointFile) ? (JSON.parse(readFileSync(checkpointFile, "utf8")) as { walSequence: number }).walSequence : 0;
  if (existsSync(join(dataDir, "wal")) && readdirSync(join(dataDir, "wal")).length > 1) found.add("several WAL files");
  const workspaces = join(dataDir, "ws");
  if (!existsSync(workspaces)) return [...found];
  for (const workspace of readdirSync(workspaces)) {
    for (const day of readdirSync(join(workspaces, workspace))) {
      if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) continue;
      for (const name of readdirSync(join(workspaces, workspace, day))) {
        if (name.startsWith("tmp_")) found.add("a segment being written");
        const match = /^seg-(\d+)-\d+$/.exec(name);
        if (match && Number(match[1]) > published) found.add("a segment of an unpublished checkpoint");
      }
    }
  }
  return [...found];
}

const dataDir = makeDataDir("eventide-crash-");
const servers: ServerHandle[] = [];
const environment = { EVENTIDE_CHECKPOINT_ROWS_MAX: "300", EVENTIDE_CHECKPOINT_INTERVAL_MS: "50" };

afterAll(async () => {
  for (const server of servers) await server.kill();
  removeDataDir(dataDir);
});

describe(`kill -9 during concurrent ingest (${cycleCount} cycles, seed ${seed})`, () => {
  it("counts every acknowledged event once, and every retried uuid batch once", async () => {
    const random = new Random(seed);
    const clients = Array.from({ length: clientCount }, (_, index) => new Client(index));
    const anomalies: Anomaly[] = [];
    const interruptions: string[] = [];
    let server = await startServer({ dataDir, env: environment });
    servers.push(server);
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };

    for (let cycle = 0; cycle < cycleCount; cycle++) {
      let running = true;
      let alive = true;
      // Every other cycle the kill also comes the moment a duplicate is answered while its twin
      // still waits: the twin's record must then already be durable (SPEC §2: a 200 means on disk).
      let twinWaiting = () => {};
      const twinSeen = new Promise<void>((resolve) => (twinWaiting = resolve));
      const targeted = cycle % 2 === 1;
      const streams = clients.map((client) => stream(client, server, random, () => running, () => alive, anomalies, cycle, targeted ? twinWaiting : undefined));
      await Promise.race([sleep(random.integer(100, 1200)), twinSeen]);
      alive = false;
      await server.kill();
      running = false;
      await Promise.all(streams);
      interruptions.push(`cycle ${cycle}: ${interruptedWork(dataDir).join(", ") || "nothing in progress"}`);

      server = await startServer({ dataDir, env: environment, credentials });
      servers.push(server);
      const failures = await check(server, clients, false);
      expect(failures, `seed ${seed}, after kill ${cycle + 1}`).toEqual([]);
    }

    // Last round: the server stays up until every uuid batch is acknowledged.
    const rounds = clients.map(async (client) => {
      for (let attempt = 0; attempt < 20 && client.retries.length > 0; attempt++) {
        const batch = client.retries.shift()!;
        const outcome = await sendBatch(server.ingestUrl, server.apiKey, batch.events);
        batch.history.push(`final: ${outcome.kind}`);
        if (outcome.kind === "acknowledged" && outcome.accepted === batch.events.length) batch.acknowledged = true;
        else {
          anomalies.push({ batch: `uuid ${client.index}/${batch.slot} (final retry)`, outcome });
          client.retries.push(batch);
        }
      }
    });
    await Promise.all(rounds);
    const failures = await check(server, clients, true);
    expect(failures, `seed ${seed}, at the end`).toEqual([]);
    expect(anomalies, `seed ${seed}: requests refused or cut off while the server was up`).toEqual([]);

    const sent = clients.map((client) => `client ${client.index}: ${client.batches.uuid.length} uuid + ${client.batches.plain.length} plain batches`);
    console.log(`crash-stream seed ${seed}\n  ${sent.join("\n  ")}\n  ${interruptions.join("\n  ")}`);
    await server.stop();
  }, 30_000 + cycleCount * 10_000);
});
