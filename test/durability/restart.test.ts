/**
 * SPEC §2 Durability across restarts: events ingested over HTTP into a server
 * that checkpoints every few hundred rows are counted exactly once after a
 * graceful stop, after a kill -9 (no seal: the tail comes back from the WAL),
 * and after a kill -9 right after a recovery. uuids keep deduplicating across
 * restarts, whether the earlier copy is in a sealed segment or only in the WAL.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { dayMs, isoDay, isoTime, trend } from "../helpers/events.js";
import { Random } from "../helpers/random.js";
import { type ServerHandle, ingestAll, makeDataDir, removeDataDir, startServer } from "../helpers/server.js";
import { elapsedUntil } from "../helpers/http.js";

const firstDayMs = Date.UTC(2024, 1, 26); // crosses the leap day and the month end
const dayCount = 8;
const eventNames = ["signup", "page view", "achat 🛒", "名前", "nul\u0000name", "x".repeat(200)];
const plans = ["free", "pro", "über 🚀"];

interface SentEvent {
  event: string;
  distinctId: string | number;
  timestamp: string;
  properties: Record<string, unknown>;
  uuid?: string;
}

/** What the store should hold: per event, per day, the number of events and the set of users. */
class Expected {
  private readonly cells = new Map<string, { total: number; pro: number; rare: number; users: Set<string> }>();
  private readonly uuids = new Set<string>();

  add(event: SentEvent): void {
    if (event.uuid !== undefined) {
      const uuid = event.uuid.toLowerCase();
      if (this.uuids.has(uuid)) return;
      this.uuids.add(uuid);
    }
    const key = `${event.event}\u0001${isoDay(Date.parse(event.timestamp))}`;
    let cell = this.cells.get(key);
    if (cell === undefined) {
      cell = { total: 0, pro: 0, rare: 0, users: new Set() };
      this.cells.set(key, cell);
    }
    cell.total++;
    if (event.properties.plan === "pro") cell.pro++;
    if (event.properties.rare !== undefined) cell.rare++;
    cell.users.add(String(event.distinctId));
  }

  cell(event: string, day: string) {
    return this.cells.get(`${event}\u0001${day}`) ?? { total: 0, pro: 0, rare: 0, users: new Set<string>() };
  }

  get storedCount(): number {
    let count = 0;
    for (const cell of this.cells.values()) count += cell.total;
    return count;
  }
}

function generate(random: Random, count: number, tag: string): SentEvent[] {
  const events: SentEvent[] = [];
  for (let index = 0; index < count; index++) {
    const dayStart = firstDayMs + random.integer(0, dayCount - 1) * dayMs;
    const offsetMs = random.chance(0.05) ? random.pick([0, dayMs - 1]) : random.integer(0, dayMs - 1);
    const user = random.integer(0, 399);
    events.push({
      event: random.pick(eventNames),
      // Numeric distinctIds are stored as String(n): user 7 sent as 7 and as "7" is one user.
      distinctId: user % 10 === 7 ? (random.chance(0.5) ? user : String(user)) : `user-${user}`,
      timestamp: isoTime(dayStart + offsetMs),
      properties: {
        plan: random.pick(plans),
        n: random.integer(0, 1000),
        tag,
        nested: { deep: [1, "two"] },
        // A key few rows set: its column must still cover every row of a segment that grew.
        ...(random.chance(0.003) ? { rare: "yes" } : {}),
      },
      uuid: random.chance(0.5) ? random.uuid() : undefined,
    });
  }
  return events;
}

const dateFrom = isoDay(firstDayMs - dayMs);
const dateTo = isoDay(firstDayMs + dayCount * dayMs);

async function expectCounts(server: ServerHandle, expected: Expected, moment: string): Promise<void> {
  for (const event of eventNames) {
    const [totals, uniques, pros, rares] = await Promise.all([
      trend(server, { event, dateFrom, dateTo, groupBy: "day" }),
      trend(server, { event, dateFrom, dateTo, groupBy: "day", math: "unique" }),
      trend(server, { event, dateFrom, dateTo, groupBy: "day", filters: [{ property: "plan", op: "eq", value: "pro" }] }),
      trend(server, { event, dateFrom, dateTo, groupBy: "day", filters: [{ property: "rare", op: "is_set" }] }),
    ]);
    const want = { totals: new Map<string, number>(), uniques: new Map<string, number>(), pros: new Map<string, number>(), rares: new Map<string, number>() };
    for (let day = firstDayMs - dayMs; day <= firstDayMs + dayCount * dayMs; day += dayMs) {
      const cell = expected.cell(event, isoDay(day));
      want.totals.set(isoDay(day), cell.total);
      want.uniques.set(isoDay(day), cell.users.size);
      want.pros.set(isoDay(day), cell.pro);
      want.rares.set(isoDay(day), cell.rare);
    }
    expect(totals, `${moment}: totals of ${JSON.stringify(event)} per day`).toEqual(want.totals);
    expect(uniques, `${moment}: unique users of ${JSON.stringify(event)} per day`).toEqual(want.uniques);
    expect(pros, `${moment}: plan=pro totals of ${JSON.stringify(event)} per day`).toEqual(want.pros);
    expect(rares, `${moment}: rare-is-set totals of ${JSON.stringify(event)} per day`).toEqual(want.rares);
  }
}

/** Sealed segments per day directory. */
function segmentsPerDay(dataDir: string): number[] {
  const counts: number[] = [];
  const workspaces = join(dataDir, "ws");
  for (const workspace of readdirSync(workspaces)) {
    for (const day of readdirSync(join(workspaces, workspace))) {
      if (/^\d{4}-\d{2}-\d{2}$/.test(day)) counts.push(readdirSync(join(workspaces, workspace, day)).filter((name) => name.startsWith("seg-")).length);
    }
  }
  return counts;
}

/** The WAL sequence `_checkpoint.json` names, 0 before the first checkpoint is published. */
function publishedWalSequence(dataDir: string): number {
  if (!existsSync(join(dataDir, "_checkpoint.json"))) return 0;
  return (JSON.parse(readFileSync(join(dataDir, "_checkpoint.json"), "utf8")) as { walSequence: number }).walSequence;
}

function sealedSegmentCount(dataDir: string): number {
  let count = 0;
  const workspaces = join(dataDir, "ws");
  for (const workspace of readdirSync(workspaces)) {
    for (const day of readdirSync(join(workspaces, workspace))) {
      if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) continue;
      count += readdirSync(join(workspaces, workspace, day)).filter((name) => name.startsWith("seg-")).length;
    }
  }
  return count;
}

const servers: ServerHandle[] = [];
const dataDir = makeDataDir("eventide-restart-");
const environment = { EVENTIDE_CHECKPOINT_ROWS_MAX: "500", EVENTIDE_CHECKPOINT_IDLE_MS: "500" };

async function start(credentials?: { apiKey: string; token: string; workspaceId: string }): Promise<ServerHandle> {
  const server = await startServer({ dataDir, credentials, env: environment });
  servers.push(server);
  return server;
}

afterAll(async () => {
  for (const server of servers) await server.kill();
  removeDataDir(dataDir);
});

/**
 * Each test below may wait up to 30 s for a checkpoint or a merge, or stop (up to 10 s) and start (up to 20 s)
 * servers around thousands of events and dozens of queries: past vitest's 60 s default on a slow machine, where
 * a bare timeout would hide which step ran long.
 */
const testTimeoutMs = 120_000;

describe("events survive restarts, counted exactly once", () => {
  const random = new Random(20240229);
  const expected = new Expected();
  const firstEvents = generate(random, 6000, "first");
  const secondEvents = generate(random, 3000, "second");
  let credentials: { apiKey: string; token: string; workspaceId: string };

  it("counts what was ingested, with several checkpoints on the way", async () => {
    const server = await start();
    credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    // Repeats of earlier uuids, some in upper case, go in later batches: acknowledged, not stored.
    const repeats = firstEvents.filter((event) => event.uuid !== undefined).slice(0, 300).map((event, index) => ({ ...event, uuid: index % 2 ? event.uuid!.toUpperCase() : event.uuid }));
    const sent = [...firstEvents, ...repeats];
    for (const event of sent) expected.add(event);
    for (let start = 0; start < sent.length; start += 250) await ingestAll(server, sent.slice(start, start + 250));
    expect(expected.storedCount).toBe(6000);
    await expectCounts(server, expected, "before any restart");
    // Merges fold each day's segments into one, so a checkpoint shows in the sequence it published
    // (the first start appends to WAL file 1; each checkpoint moves on by one). Checkpoints run in
    // the background: on a loaded machine the first may still be sealing when the last batch is
    // acknowledged, so wait for one to publish.
    await elapsedUntil(async () => publishedWalSequence(dataDir) > 1, 30_000, 50);
    expect(sealedSegmentCount(dataDir), "checkpoints sealed segments").toBeGreaterThan(0);
  }, testTimeoutMs);

  it("merges each day into one segment once ingest pauses (merges wait while it is busy)", async () => {
    const deadline = Date.now() + 30_000;
    while (segmentsPerDay(dataDir).some((count) => count !== 1)) {
      expect(Date.now(), `segments per day still ${JSON.stringify(segmentsPerDay(dataDir))} after 30 s`).toBeLessThan(deadline);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await expectCounts(servers.at(-1)!, expected, "after the idle merge");
  }, testTimeoutMs);

  it("counts the same after SIGTERM and a restart, and still deduplicates uuids from sealed segments", async () => {
    const previous = servers.at(-1)!;
    expect(await previous.stop(), previous.exitReport()).toBe(0);
    const server = await start(credentials);
    await expectCounts(server, expected, "after SIGTERM and restart");
    await ingestAll(server, firstEvents.filter((event) => event.uuid !== undefined));
    await expectCounts(server, expected, "after re-sending every uuid event");
  }, testTimeoutMs);

  it("counts the same after kill -9 with recent events only in the WAL", async () => {
    const server = servers.at(-1)!;
    for (const event of secondEvents) expected.add(event);
    for (let start = 0; start < secondEvents.length; start += 230) await ingestAll(server, secondEvents.slice(start, start + 230));
    await expectCounts(server, expected, "before kill -9");
    await server.kill();
    const restarted = await start(credentials);
    await expectCounts(restarted, expected, "after kill -9 and restart");
    await ingestAll(restarted, secondEvents.filter((event) => event.uuid !== undefined));
    await expectCounts(restarted, expected, "after re-sending the uuid events replayed from the WAL");
  }, testTimeoutMs);

  it("counts the same after a kill -9 right after a recovery, and after a graceful stop following it", async () => {
    await servers.at(-1)!.kill();
    const recovered = await start(credentials);
    await expectCounts(recovered, expected, "after two kills in a row");
    expect(await recovered.stop(), recovered.exitReport()).toBe(0);
    const final = await start(credentials);
    await expectCounts(final, expected, "after the final graceful restart");
    await final.stop();
  }, testTimeoutMs);
});

describe("a graceful stop with events spread over thousands of days", () => {
  // Each day is a segment of its own, and sealing one costs a few fsyncs: the final checkpoint
  // cannot finish within SPEC's 10 s. It is abandoned at the deadline (its rows stay in the WAL),
  // the process still exits 0 in time, and the next start counts every event.
  //
  // Fewer days would not make the stop faster: the server seals for a fixed share of its shutdown
  // budget whatever the day count, so the day count only decides whether the checkpoint runs out of
  // time at all. 6 000 keeps it out of time on a fast machine (~2 300 segments sealed there with
  // fsync off); the test checks that it did, so a machine that seals them all says so instead of
  // passing without testing the deadline.
  it("exits 0 within 10 s and loses nothing", async () => {
    const spreadDir = makeDataDir("eventide-spread-");
    const random = new Random(31);
    const dayTotal = 6000;
    const events = Array.from({ length: 12_000 }, (_, index) => ({
      event: "spread",
      distinctId: `user-${index % 500}`,
      timestamp: isoTime(Date.UTC(2001, 0, 1) + random.integer(0, dayTotal - 1) * dayMs + random.integer(0, dayMs - 1)),
    }));
    // No checkpoint before the stop (none by rows either: 12 000 are far below the bound), so the final one has every day to seal.
    // The per-batch day cap, which keeps a client from spreading a batch this way, is lifted to reach the deadline.
    let server = await startServer({ dataDir: spreadDir, env: { EVENTIDE_CHECKPOINT_IDLE_MS: "600000", EVENTIDE_CHECKPOINT_INTERVAL_MS: "600000", EVENTIDE_BATCH_DAYS_MAX: "1000" } });
    try {
      for (let start = 0; start < events.length; start += 1000) await ingestAll(server, events.slice(start, start + 1000));
      // The deadline is the server's (limits.shutdownTimeoutMs): an exit 0 with the checkpoint abandoned shows it held, untimed.
      expect(await server.stop(), server.exitReport()).toBe(0);
      expect(publishedWalSequence(spreadDir), `the final checkpoint was abandoned at the deadline, not published (if this machine seals ${dayTotal} segments in time, raise dayTotal); ${server.exitReport()}`).toBe(0);
      server = await startServer({ dataDir: spreadDir, credentials: { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId } });
      const counts = await trend(server, { event: "spread", dateFrom: "2001-01-01", dateTo: isoDay(Date.UTC(2001, 0, 1) + dayTotal * dayMs), groupBy: "month" });
      expect([...counts.values()].reduce((sum, count) => sum + count, 0)).toBe(events.length);
    } finally {
      await server.kill();
      removeDataDir(spreadDir);
    }
    // Ingest of 12 batches over 6 000 days, a stop of up to 10 s and a start of up to 20 s.
  }, testTimeoutMs);
});
