/**
 * The crash loop of SPEC §2 Durability, shared by the kill -9 suite
 * (test/durability/crash-stream.test.ts) and the power-loss suite
 * (test/durability/power-loss-cycles.test.ts): several clients stream
 * /ingest/batch into a server that checkpoints every few hundred rows; the
 * server is killed at a random moment, its files are optionally damaged the
 * way a power loss would (`afterKill`), it is restarted on the same directory,
 * and the query API must count every acknowledged event, and nothing twice.
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
 *
 * Figures (cycles, acknowledged events, lost, duplicated, failed restarts)
 * are returned and printed, so a long run reports what it proved.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type BatchOutcome, dayMs, hourLabel, hourMs, isoDay, isoTime, sendBatch, sleep, trend } from "./events.js";
import { Random } from "./random.js";
import { type ServerHandle, startServer } from "./server.js";

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

export interface Anomaly {
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
  figures: CrashLoopFigures,
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
    if (acknowledged) {
      if (!target.acknowledged) figures.acknowledgedEvents += target.events.length;
      target.acknowledged = true;
    } else if (target.kind === "uuid" && !target.acknowledged) client.retries.push(target);
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

interface CheckResult {
  failures: string[];
  /** Acknowledged events not counted. */
  lost: number;
  /** Events counted more than once. */
  duplicated: number;
}

/** Checks every batch's count against what its client knows; returns failures as sentences. */
async function check(server: ServerHandle, clients: Client[], final: boolean): Promise<CheckResult> {
  const result: CheckResult = { failures: [], lost: 0, duplicated: 0 };
  const { failures } = result;
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
        if (count.unique !== count.total) {
          failures.push(`${where}: ${count.total} events but ${count.unique} distinct users (stored twice)`);
          result.duplicated += count.total - count.unique;
        }
        if (batch.acknowledged) {
          if (count.total !== size) failures.push(`${where}: acknowledged ${size} events, counted ${count.total}`);
          if (count.unique < size) result.lost += size - count.unique;
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
  return result;
}

/** `check`, with a query the server failed to answer reported as a failure. */
async function checkOrFail(server: ServerHandle, clients: Client[], final: boolean): Promise<CheckResult> {
  try {
    return await check(server, clients, final);
  } catch (error) {
    return { failures: [`the check's queries failed: ${(error as Error).message}`], lost: 0, duplicated: 0 };
  }
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

export interface CrashLoopFigures {
  cycles: number;
  /** Distinct events of acknowledged batches (a batch acknowledged twice counts once). */
  acknowledgedEvents: number;
  acknowledgedBatches: number;
  lost: number;
  duplicated: number;
  failedRestarts: number;
  durationMs: number;
}

export interface CrashLoopOptions {
  /** Names the run in the printed figures: "kill -9", "power loss". */
  label: string;
  dataDir: string;
  cycleCount: number;
  seed: number;
  env: Record<string, string>;
  /** Runs after each kill, before the restart (the process is gone); returns what it did, for the log. */
  afterKill?: (cycle: number, random: Random) => string;
}

export interface CrashLoopResult {
  figures: CrashLoopFigures;
  /** Empty when every check passed. */
  failures: string[];
  anomalies: Anomaly[];
  /** One line per cycle: what the kill interrupted and what afterKill did. */
  log: string[];
}

/** The per-cycle log, whole for short runs; for long ones, how often each kind of interruption and damage occurred. */
export function summarizeLog(log: string[], phrases: readonly string[] = []): string {
  if (log.length <= 20) return log.join("\n  ");
  const known = ["nothing in progress", "several WAL files", "a segment being written", "a segment of an unpublished checkpoint", ...phrases];
  const tally = known.map((phrase) => `${phrase}: ${log.reduce((sum, line) => sum + line.split(phrase).length - 1, 0)}`);
  return `over ${log.length} kills — ${tally.join(", ")}`;
}

export function formatFigures(label: string, seed: number, figures: CrashLoopFigures): string {
  return (
    `${label}: ${figures.cycles} cycles, ${figures.acknowledgedEvents} events acknowledged in ${figures.acknowledgedBatches} batches, ` +
    `${figures.lost} lost, ${figures.duplicated} duplicated, ${figures.failedRestarts} failed restarts, ` +
    `${(figures.durationMs / 1000).toFixed(1)} s (seed ${seed})`
  );
}

/**
 * Runs the loop; stops at the first cycle whose check fails or whose restart
 * fails. The caller asserts on the result (and sees the figures either way).
 */
export async function runCrashLoop(options: CrashLoopOptions): Promise<CrashLoopResult> {
  const startedAtMs = Date.now();
  const { dataDir, env, seed } = options;
  const random = new Random(seed);
  const clients = Array.from({ length: clientCount }, (_, index) => new Client(index));
  const figures: CrashLoopFigures = { cycles: 0, acknowledgedEvents: 0, acknowledgedBatches: 0, lost: 0, duplicated: 0, failedRestarts: 0, durationMs: 0 };
  const result: CrashLoopResult = { figures, failures: [], anomalies: [], log: [] };
  const servers: ServerHandle[] = [];
  const record = (checked: CheckResult, moment: string) => {
    figures.lost = Math.max(figures.lost, checked.lost);
    figures.duplicated = Math.max(figures.duplicated, checked.duplicated);
    for (const failure of checked.failures) result.failures.push(`${moment}: ${failure}`);
  };

  try {
    let server = await startServer({ dataDir, env });
    servers.push(server);
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };

    for (let cycle = 0; cycle < options.cycleCount; cycle++) {
      let running = true;
      let alive = true;
      // Every other cycle the kill also comes the moment a duplicate is answered while its twin
      // still waits: the twin's record must then already be durable (SPEC §2: a 200 means on disk).
      let twinWaiting = () => {};
      const twinSeen = new Promise<void>((resolve) => (twinWaiting = resolve));
      const targeted = cycle % 2 === 1;
      const streams = clients.map((client) =>
        stream(client, server, random, () => running, () => alive, result.anomalies, cycle, targeted ? twinWaiting : undefined, figures),
      );
      await Promise.race([sleep(random.integer(100, 1200)), twinSeen]);
      alive = false;
      await server.kill();
      running = false;
      await Promise.all(streams);
      const interrupted = interruptedWork(dataDir).join(", ") || "nothing in progress";
      const damage = options.afterKill?.(cycle, random);
      result.log.push(`cycle ${cycle}: ${interrupted}${damage ? `; ${damage}` : ""}`);

      try {
        server = await startServer({ dataDir, env, credentials });
      } catch (error) {
        figures.failedRestarts++;
        result.failures.push(`restart after kill ${cycle + 1} failed: ${(error as Error).message}`);
        return result;
      }
      servers.push(server);
      figures.cycles++;
      record(await checkOrFail(server, clients, false), `after kill ${cycle + 1} (${result.log[result.log.length - 1]}); server stderr: ${server.stderr().slice(-1500)}`);
      if (result.failures.length > 0) return result;
    }

    // Last round: the server stays up until every uuid batch is acknowledged.
    await Promise.all(
      clients.map(async (client) => {
        for (let attempt = 0; attempt < 20 && client.retries.length > 0; attempt++) {
          const batch = client.retries.shift()!;
          const outcome = await sendBatch(server.ingestUrl, server.apiKey, batch.events);
          batch.history.push(`final: ${outcome.kind}`);
          if (outcome.kind === "acknowledged" && outcome.accepted === batch.events.length) {
            if (!batch.acknowledged) figures.acknowledgedEvents += batch.events.length;
            batch.acknowledged = true;
          } else {
            result.anomalies.push({ batch: `uuid ${client.index}/${batch.slot} (final retry)`, outcome });
            client.retries.push(batch);
          }
        }
      }),
    );
    record(await checkOrFail(server, clients, true), `at the end; server stderr: ${server.stderr().slice(-1500)}`);
    if ((await server.stop()) !== 0) result.failures.push(`graceful stop at the end failed: ${server.stderr().slice(-600)}`);
    return result;
  } finally {
    for (const server of servers) await server.kill();
    for (const client of clients) for (const kind of ["uuid", "plain"] as const) figures.acknowledgedBatches += client.batches[kind].filter((batch) => batch.acknowledged).length;
    figures.durationMs = Date.now() - startedAtMs;
  }
}
