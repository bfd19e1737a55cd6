/**
 * The ClickHouse store behind the same HTTP API: `eventide clickhouse init`
 * creates the tables (partitioned by day, ordered by workspace, event, user,
 * time) and is idempotent; names and values that would break a SQL literal
 * (quotes, backslashes, control bytes, a statement after a quote) are stored
 * and queried as the text they are, answers equal the reference's; a uuid
 * retry is stored once, also after a restart and across two front ends; an unreachable ClickHouse makes
 * queries answer 503.
 */
import { execFile } from "node:child_process";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { referenceFunnelV2, referenceRetentionV2, referenceTrendV2 } from "../reference/reference-v2.js";
import type { StoredEvent } from "../reference/reference.js";
import { clickhouseBinary, clickhousePerSuite, skipNotice, startClickHouse, storeUrl } from "../helpers/clickhouse.js";
import { ingestAll, makeDataDir, post, removeDataDir, repoRoot, startServer } from "../helpers/server.js";

const binary = clickhouseBinary();
if (binary === undefined) console.warn(skipNotice("ClickHouse store tests"));

const run = promisify(execFile);

/** Texts that end a naive SQL literal or smuggle a statement in. */
const hostile = ["it's", "back\\slash", "'); DROP TABLE events; --", "tab\tnew\nline", "nul\u0000byte", "\\'", "emoji 🎉 ü", "`x` \"y\""];

/** Resolves once the store's queries see `count` events (the forwarder ships them a moment after the 200s). */
async function visible(queryUrl: string, token: string, count: number): Promise<void> {
  for (;;) {
    const answer = await post(`${queryUrl}/api/v1/events`, undefined, { token, method: "GET" });
    const seen = answer.status === 200 ? (answer.body.data as { count: number }[]).reduce((sum, entry) => sum + entry.count, 0) : -1;
    if (seen === count) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe.skipIf(binary === undefined)("the ClickHouse store", () => {
  const clickhouse = clickhousePerSuite();

  it("eventide clickhouse init creates the tables, partitioned by day and ordered for the queries, and a second run changes nothing", { timeout: 60_000 }, async () => {
    const env = { ...process.env, EVENTIDE_STORE: storeUrl(clickhouse, "init_check") };
    for (let round = 0; round < 2; round++) {
      const { stdout } = await run(process.execPath, ["bin/eventide.js", "clickhouse", "init"], { cwd: repoRoot, env });
      expect(JSON.parse(stdout.trim())).toEqual({ database: "init_check", cluster: null, shards: 1, schemaVersion: 1 });
    }
    const table = await clickhouse.sql("SELECT partition_key, sorting_key FROM system.tables WHERE database = 'init_check' AND name = 'events' FORMAT TSV");
    expect(table.trim()).toBe("day\tworkspace, event, user, time_ms");
    expect((await clickhouse.sql("SELECT count() FROM init_check.eventide_schema FORMAT TSV")).trim()).toBe("1");
  });

  it("stores and queries hostile event names, property names and values as the text they are", { timeout: 120_000 }, async () => {
    const dataDir = makeDataDir();
    const server = await startServer({ dataDir, env: { EVENTIDE_STORE: storeUrl(clickhouse, "hostile"), EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "20" }, startTimeoutMs: 90_000 });
    try {
      const dayMs = 86_400_000;
      const startMs = Date.UTC(2024, 4, 1);
      const events: StoredEvent[] = [];
      hostile.forEach((name, index) => {
        for (let copy = 0; copy <= index; copy++) {
          const properties = { [name]: hostile[(index + copy) % hostile.length], n: String(index + copy) };
          events.push({ event: name, distinctId: `${name}${copy % 2}`, timestampMs: startMs + (copy % 3) * dayMs + index * 1000, properties });
          events.push({ event: "plain", distinctId: `${name}${copy % 2}`, timestampMs: startMs + (copy % 3) * dayMs + index * 1000 + 1, properties });
        }
      });
      await ingestAll(server, events.map((event) => ({ event: event.event, distinctId: event.distinctId, timestamp: new Date(event.timestampMs).toISOString(), properties: event.properties })));
      await visible(server.queryUrl, server.token, events.length);
      const range = { dateFrom: "2024-05-01", dateTo: "2024-05-04" };
      const problems: string[] = [];
      for (const [index, name] of hostile.entries()) {
        const value = hostile[(index + 1) % hostile.length];
        const trend = { event: { event: name, filters: [{ property: name, op: "neq" as const, value }] }, ...range, breakdown: name, filters: [{ property: name, op: "contains" as const, value: value.slice(0, 3) }] };
        const funnel = { steps: [name, { event: "plain", filters: [{ property: name, op: "eq" as const, value }] }], ...range, breakdown: name };
        // Each order's own SQL: strict reads the breakdown per group of equal times, unordered and ordered take a repeated step.
        const strict = { ...funnel, order: "strict" as const, timeToConvert: true };
        const unordered = { ...funnel, steps: [funnel.steps[1], name, name], order: "unordered" as const, timeToConvert: true };
        const repeated = { ...funnel, steps: [name, funnel.steps[1], name], filters: [{ property: name, op: "not_contains" as const, value }] };
        const retention = { cohortEvent: name, retentionEvent: { event: "plain", filters: [{ property: name, op: "is_set" as const }] }, ...range, windowDays: 1 };
        const sum = { event: "plain", ...range, math: "sum" as const, mathProperty: "n", breakdown: name };
        for (const [kind, body, want] of [
          ["trend", trend, referenceTrendV2(events, trend)],
          ["funnel", funnel, referenceFunnelV2(events, funnel)],
          ["funnel", strict, referenceFunnelV2(events, strict)],
          ["funnel", unordered, referenceFunnelV2(events, unordered)],
          ["funnel", repeated, referenceFunnelV2(events, repeated)],
          ["retention", retention, referenceRetentionV2(events, retention)],
          ["trend", sum, referenceTrendV2(events, sum)],
        ] as const) {
          const answer = await post(`${server.queryUrl}/api/v1/query/${kind}`, body, { token: server.token });
          if (answer.status !== 200 || JSON.stringify(answer.body) !== JSON.stringify(want)) problems.push(`${kind} ${JSON.stringify(body)}: ${answer.status} ${answer.text}\n  want ${JSON.stringify(want)}`);
        }
      }
      expect(problems, problems.join("\n")).toEqual([]);
      // Every funnel above took the SQL: none fell back to selecting rows.
      const metrics = (await post(`${server.queryUrl}/metrics`, undefined, { method: "GET", raw: true })).text.split("\n").filter((line) => line.startsWith("eventide_clickhouse_queries_total{query=\"funnel\""));
      expect(metrics.filter((line) => line.includes('path="rows"'))).toEqual([]);
      for (const order of ["ordered", "strict", "unordered"]) expect(metrics.some((line) => line.includes(`order="${order}"`) && line.includes('path="sql"')), order).toBe(true);
      const listing = await post(`${server.queryUrl}/api/v1/properties?event=${encodeURIComponent(hostile[2])}`, undefined, { token: server.token, method: "GET" });
      expect(listing.body.data.map((entry: { property: string }) => entry.property).sort()).toEqual([hostile[2], "n"].sort());
      expect((await clickhouse.sql("EXISTS TABLE hostile.events FORMAT TSV")).trim()).toBe("1");
    } finally {
      await server.stop();
      removeDataDir(dataDir);
    }
  });

  it("stores a uuid's event once: retried in one batch, in another, and after a restart", { timeout: 120_000 }, async () => {
    const dataDir = makeDataDir();
    const env = { EVENTIDE_STORE: storeUrl(clickhouse, "uuids"), EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "20" };
    let server = await startServer({ dataDir, env, startTimeoutMs: 90_000 });
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    try {
      const uuid = (index: number) => `6e3a1c2e-0000-4000-8000-${String(index).padStart(12, "0")}`;
      const event = (index: number) => ({ event: "paid", distinctId: `u${index}`, timestamp: "2024-05-01T10:00:00Z", uuid: uuid(index) });
      const first = await post(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, events: [event(1), event(2), event(1)] });
      expect(first.body).toEqual({ ok: true, accepted: 3 });
      const again = await post(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, events: [event(2), { ...event(3), uuid: uuid(3).toUpperCase() }] });
      expect(again.body).toEqual({ ok: true, accepted: 2 });
      await visible(server.queryUrl, server.token, 3);
      await server.stop();
      server = await startServer({ dataDir, env, credentials, startTimeoutMs: 90_000 });
      const afterRestart = await post(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, events: [event(1), event(3), event(4)] });
      expect(afterRestart.body).toEqual({ ok: true, accepted: 3 });
      await visible(server.queryUrl, server.token, 4);
      expect((await clickhouse.sql("SELECT count(), uniqExact(uuid) FROM uuids.events FORMAT TSV")).trim()).toBe("4\t4");
    } finally {
      await server.stop();
      removeDataDir(dataDir);
    }
  });

  it("forwards one block of 60 000 uuid-carrying events (more uuids than ClickHouse takes as literals in one query) and counts each once", { timeout: 300_000 }, async () => {
    const dataDir = makeDataDir();
    // Events wait long enough in the outbox to share one block.
    const env = { EVENTIDE_STORE: storeUrl(clickhouse, "many_uuids"), EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "45000" };
    const server = await startServer({ dataDir, env, startTimeoutMs: 90_000 });
    try {
      const uuid = (index: number) => `6e3a1c2e-0000-4000-8000-${index.toString().padStart(12, "0")}`;
      const events = Array.from({ length: 60_000 }, (_, index) => ({ event: "paid", distinctId: `u${index % 500}`, timestamp: "2024-05-01T10:00:00Z", uuid: uuid(index) }));
      await ingestAll(server, events);
      await visible(server.queryUrl, server.token, events.length);
      // A retry of some of them, once stored, is not stored again.
      await ingestAll(server, events.slice(0, 1000));
      await ingestAll(server, [{ event: "marker", distinctId: "u0", timestamp: "2024-05-01T11:00:00Z", uuid: uuid(99_999_999) }]);
      await visible(server.queryUrl, server.token, events.length + 1);
    } finally {
      await server.stop();
      removeDataDir(dataDir);
    }
  });

  it("counts a uuid once across two front ends: the second front end's copy, acknowledged after the first is visible, is not inserted", { timeout: 180_000 }, async () => {
    const firstDir = makeDataDir();
    const secondDir = makeDataDir();
    const env = { EVENTIDE_STORE: storeUrl(clickhouse, "two_front_ends"), EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "20" };
    const first = await startServer({ dataDir: firstDir, env, startTimeoutMs: 90_000 });
    let second: Awaited<ReturnType<typeof startServer>> | undefined;
    try {
      // Front ends share the workspaces: the second one starts on a copy of the first one's registry.
      copyFileSync(join(firstDir, "_registry.json"), join(secondDir, "_registry.json"));
      second = await startServer({ dataDir: secondDir, env, credentials: { apiKey: first.apiKey, token: first.token, workspaceId: first.workspaceId }, startTimeoutMs: 90_000 });
      const event = { event: "paid", distinctId: "u1", timestamp: "2024-05-01T10:00:00Z", uuid: "6e3a1c2e-0000-4000-8000-000000000001" };
      expect((await post(`${first.ingestUrl}/ingest/batch`, { apiKey: first.apiKey, events: [event] })).body).toEqual({ ok: true, accepted: 1 });
      await visible(first.queryUrl, first.token, 1);
      // The retry goes to the other front end, which has not seen the uuid; a second event in the same request shows when its block was forwarded.
      const marker = { event: "paid", distinctId: "u2", timestamp: "2024-05-01T11:00:00Z", uuid: "6e3a1c2e-0000-4000-8000-000000000002" };
      expect((await post(`${second.ingestUrl}/ingest/batch`, { apiKey: second.apiKey, events: [event, marker] })).body).toEqual({ ok: true, accepted: 2 });
      // The marker's row shows the block is in; a duplicate would have come with it.
      while ((await clickhouse.sql("SELECT count() FROM two_front_ends.events WHERE user = 'u2' FORMAT TSV")).trim() !== "1") await new Promise((resolve) => setTimeout(resolve, 100));
      expect((await clickhouse.sql("SELECT count(), uniqExact(uuid) FROM two_front_ends.events FORMAT TSV")).trim()).toBe("2\t2");
      const trend = await post(`${second.queryUrl}/api/v1/query/trend`, { event: "paid", dateFrom: "2024-05-01", dateTo: "2024-05-01" }, { token: second.token });
      expect(trend.body.data[0].count).toBe(2);
    } finally {
      await second?.stop();
      await first.stop();
      removeDataDir(firstDir);
      removeDataDir(secondDir);
    }
  });

  it("answers 503 unavailable to queries while ClickHouse is down, and acknowledges ingest from its outbox", { timeout: 120_000 }, async () => {
    const dataDir = makeDataDir();
    const down = await startClickHouse();
    const server = await startServer({ dataDir, env: { EVENTIDE_STORE: storeUrl(down, "gone") }, startTimeoutMs: 90_000 });
    try {
      await down.kill();
      const query = await post(`${server.queryUrl}/api/v1/query/trend`, { event: "a", dateFrom: "2024-05-01", dateTo: "2024-05-02" }, { token: server.token });
      expect(query.status).toBe(503);
      expect(query.body.error.code).toBe("unavailable");
      const ingest = await post(`${server.ingestUrl}/ingest`, { apiKey: server.apiKey, event: "a", distinctId: "u" });
      expect(ingest.body).toEqual({ ok: true });
    } finally {
      await server.stop();
      await down.stop();
      removeDataDir(dataDir);
    }
  });
});
