/**
 * SPEC §2 over the ClickHouse store: a 200 means the events are counted
 * exactly once, even when Eventide or ClickHouse is killed (SIGKILL) while
 * batches stream in and blocks are being forwarded. Each event carries a
 * sequence number and no uuid (so no dedupe hides a replayed block); after the
 * kills, every acknowledged number must be in ClickHouse once and no number twice.
 */
import { describe, expect, it } from "vitest";
import { type ClickHouseHandle, clickhouseBinary, clickhousePerSuite, skipNotice, storeUrl } from "../helpers/clickhouse.js";
import { type ServerHandle, makeDataDir, removeDataDir, startServer } from "../helpers/server.js";

const binary = clickhouseBinary();
if (binary === undefined) console.warn(skipNotice("ClickHouse store crash tests"));

const dayMs = 86_400_000;
const firstDayMs = Date.UTC(2024, 0, 1);
/** Events of a batch spread over this many days: an INSERT then writes one part per day, and a kill can fall between them. */
const daysSpread = 8;
const batchEvents = 200;
const batchesInFlight = 4;

interface Stream {
  acknowledged: Set<number>;
  sent: number;
}

function batchOf(first: number, apiKey: string): string {
  const events = Array.from({ length: batchEvents }, (_, index) => {
    const seq = first + index;
    return { event: `e${seq % 3}`, distinctId: `u${seq % 97}`, timestamp: new Date(firstDayMs + (seq % daysSpread) * dayMs + seq).toISOString(), properties: { seq: String(seq) } };
  });
  return JSON.stringify({ apiKey, events });
}

/** Sends batches until `stop()` says so; a batch's numbers count once its 200 came. Errors (the server killed) end a sender quietly. */
async function streamBatches(server: ServerHandle, stream: Stream, keepGoing: () => boolean): Promise<void> {
  const sender = async () => {
    while (keepGoing()) {
      const first = stream.sent;
      stream.sent += batchEvents;
      try {
        const response = await fetch(`${server.ingestUrl}/ingest/batch`, { method: "POST", body: batchOf(first, server.apiKey) });
        const body = (await response.json()) as { ok?: boolean; accepted?: number };
        if (response.status === 200 && body.accepted === batchEvents) for (let seq = first; seq < first + batchEvents; seq++) stream.acknowledged.add(seq);
      } catch {
        return;
      }
    }
  };
  await Promise.all(Array.from({ length: batchesInFlight }, sender));
}

/** Counts per sequence number in ClickHouse: [missing acknowledged ones, numbers stored more than once]. */
async function audit(clickhouse: ClickHouseHandle, database: string, acknowledged: Set<number>): Promise<{ missing: number[]; duplicated: string[]; rows: number }> {
  const text = await clickhouse.sql(`SELECT prop_values[indexOf(prop_keys, 'seq')] AS seq, count() FROM ${database}.events GROUP BY seq FORMAT TSV`);
  const counts = new Map<number, number>();
  let rows = 0;
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const [seq, count] = line.split("\t");
    counts.set(Number(seq), Number(count));
    rows += Number(count);
  }
  const missing = [...acknowledged].filter((seq) => !counts.has(seq));
  const duplicated = [...counts].filter(([, count]) => count > 1).map(([seq, count]) => `${seq}×${count}`);
  return { missing, duplicated, rows };
}

/** Waits until every acknowledged number reached ClickHouse (the outbox drained), or the deadline: the audit then names what is missing. */
async function auditWhenForwarded(clickhouse: ClickHouseHandle, database: string, acknowledged: Set<number>) {
  const deadlineMs = performance.now() + 120_000;
  for (;;) {
    const result = await audit(clickhouse, database, acknowledged).catch(() => undefined);
    if (result !== undefined && (result.missing.length === 0 || performance.now() > deadlineMs)) return result;
    if (performance.now() > deadlineMs) throw new Error("ClickHouse did not answer");
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** Resolves once at least `count` more numbers are acknowledged. */
async function acknowledgedGrowsBy(stream: Stream, count: number): Promise<void> {
  const target = stream.acknowledged.size + count;
  while (stream.acknowledged.size < target) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe.skipIf(binary === undefined)("the ClickHouse store counts every acknowledged event exactly once across kill -9", () => {
  const clickhouse = clickhousePerSuite();

  const env = (database: string) => ({ EVENTIDE_STORE: storeUrl(clickhouse, database), EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "50", EVENTIDE_CLICKHOUSE_BLOCK_ROWS_MAX: "2000", EVENTIDE_CLICKHOUSE_OUTBOX_FILE_BYTES_MAX: "300000" });

  it("kill -9 of Eventide while it ingests and forwards, three times: 0 lost, 0 duplicated", { timeout: 240_000 }, async () => {
    const database = "crash_eventide";
    const dataDir = makeDataDir();
    const stream: Stream = { acknowledged: new Set(), sent: 0 };
    let server = await startServer({ dataDir, env: env(database), startTimeoutMs: 90_000 });
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    try {
      for (let cycle = 0; cycle < 3; cycle++) {
        let going = true;
        const sending = streamBatches(server, stream, () => going);
        await acknowledgedGrowsBy(stream, 3000 + cycle * 1000);
        await server.kill();
        going = false;
        await sending;
        server = await startServer({ dataDir, env: env(database), credentials, startTimeoutMs: 90_000 });
      }
      const { missing, duplicated, rows } = await auditWhenForwarded(clickhouse, database, stream.acknowledged);
      expect(stream.acknowledged.size).toBeGreaterThan(9000);
      expect({ missing: missing.slice(0, 10), duplicated: duplicated.slice(0, 10) }).toEqual({ missing: [], duplicated: [] });
      expect(rows).toBeLessThanOrEqual(stream.sent);
    } finally {
      await server.stop();
      removeDataDir(dataDir);
    }
  });

  it("kill -9 of ClickHouse while Eventide ingests and forwards, twice: acknowledgements go on, 0 lost, 0 duplicated", { timeout: 240_000 }, async () => {
    const database = "crash_clickhouse";
    const dataDir = makeDataDir();
    const stream: Stream = { acknowledged: new Set(), sent: 0 };
    const server = await startServer({ dataDir, env: { ...env(database), EVENTIDE_CLICKHOUSE_RETRY_DELAY_MS: "100" }, startTimeoutMs: 90_000 });
    try {
      let going = true;
      const sending = streamBatches(server, stream, () => going);
      for (let cycle = 0; cycle < 2; cycle++) {
        await acknowledgedGrowsBy(stream, 3000);
        await clickhouse.kill();
        // Acknowledged while ClickHouse is down: they wait in the outbox.
        await acknowledgedGrowsBy(stream, 1000);
        await clickhouse.restart();
      }
      await acknowledgedGrowsBy(stream, 1000);
      going = false;
      await sending;
      const { missing, duplicated } = await auditWhenForwarded(clickhouse, database, stream.acknowledged);
      expect({ missing: missing.slice(0, 10), duplicated: duplicated.slice(0, 10) }, server.stderr().slice(-3000)).toEqual({ missing: [], duplicated: [] });
      expect(server.process.exitCode).toBeNull();
    } finally {
      await server.stop();
      removeDataDir(dataDir);
    }
  });
});
