/**
 * Deletions over the ClickHouse store, with a real server: a user deleted
 * through POST /api/v1/users/delete is gone from every answer when it answers
 * (also events acknowledged just before it, still in the outbox), other users
 * stay whole; with EVENTIDE_RETENTION_DAYS, days past the period leave
 * ClickHouse and younger ones stay.
 */
import { describe, expect, it } from "vitest";
import { clickhouseBinary, clickhousePerSuite, skipNotice, storeUrl } from "../helpers/clickhouse.js";
import { ingestAll, makeDataDir, post, removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

const binary = clickhouseBinary();
if (binary === undefined) console.warn(skipNotice("ClickHouse deletion tests"));

const dayMs = 86_400_000;

async function count(server: ServerHandle, body: object): Promise<number> {
  const answer = await post(`${server.queryUrl}/api/v1/query/trend`, body, { token: server.token });
  expect(answer.status, answer.text).toBe(200);
  return (answer.body.data as { count: number }[]).reduce((sum, bucket) => sum + bucket.count, 0);
}

async function countUntil(server: ServerHandle, body: object, want: number): Promise<void> {
  while ((await count(server, body)) !== want) await new Promise((resolve) => setTimeout(resolve, 100));
}

describe.skipIf(binary === undefined)("deletions over the ClickHouse store", () => {
  const clickhouse = clickhousePerSuite();

  it("deletes one user's events, also those still in the outbox, and keeps everyone else's", { timeout: 120_000 }, async () => {
    const dataDir = makeDataDir();
    // A long forward delay: the deleted user's last events are still in the outbox when the deletion arrives.
    const server = await startServer({ dataDir, env: { EVENTIDE_STORE: storeUrl(clickhouse, "user_delete"), EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "3000" }, startTimeoutMs: 90_000 });
    try {
      const range = { dateFrom: "2024-05-01", dateTo: "2024-05-03" };
      const events = [];
      for (let index = 0; index < 60; index++) {
        events.push({ event: "view", distinctId: ["gone", "kept", "it's"][index % 3], timestamp: new Date(Date.UTC(2024, 4, 1) + (index % 3) * dayMs + index * 1000).toISOString() });
      }
      await ingestAll(server, events.slice(0, 30));
      await countUntil(server, { event: "view", ...range }, 30);
      await ingestAll(server, events.slice(30));
      const deleted = await post(`${server.queryUrl}/api/v1/users/delete`, { distinctId: "gone" }, { token: server.token });
      expect(deleted.status, deleted.text).toBe(200);
      expect(deleted.body).toEqual({ ok: true, deletedEvents: 20 });
      expect(await count(server, { event: "view", ...range })).toBe(40);
      expect(await count(server, { event: "view", ...range, math: "unique" })).toBe(2);
      const again = await post(`${server.queryUrl}/api/v1/users/delete`, { distinctId: "gone" }, { token: server.token });
      expect(again.body).toEqual({ ok: true, deletedEvents: 0 });
      const bad = await post(`${server.queryUrl}/api/v1/users/delete`, { distinctId: "gone", extra: 1 }, { token: server.token });
      expect(bad.status).toBe(400);
    } finally {
      await server.stop();
      removeDataDir(dataDir);
    }
  });

  it("drops the days past EVENTIDE_RETENTION_DAYS and keeps the younger ones", { timeout: 120_000 }, async () => {
    const dataDir = makeDataDir();
    const dayOf = (daysAgo: number) => new Date(Date.now() - daysAgo * dayMs).toISOString().slice(0, 10);
    const env = { EVENTIDE_STORE: storeUrl(clickhouse, "retention"), EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "20", EVENTIDE_PAST_DAYS: "0" };
    let server = await startServer({ dataDir, env, startTimeoutMs: 90_000 });
    const daysAgo = [40, 20, 5, 1];
    try {
      await ingestAll(server, daysAgo.map((ago) => ({ event: "view", distinctId: "u", timestamp: `${dayOf(ago)}T12:00:00Z` })));
      for (const ago of daysAgo) await countUntil(server, { event: "view", dateFrom: dayOf(ago), dateTo: dayOf(ago) }, 1);
      await server.stop();
      // A start applies the retention at once.
      const { apiKey, token, workspaceId } = server;
      server = await startServer({ dataDir, env: { ...env, EVENTIDE_RETENTION_DAYS: "10" }, startTimeoutMs: 90_000, credentials: { apiKey, token, workspaceId } });
      await countUntil(server, { event: "view", dateFrom: dayOf(40), dateTo: dayOf(20) }, 0);
      expect(await count(server, { event: "view", dateFrom: dayOf(5), dateTo: dayOf(1) })).toBe(2);
    } finally {
      await server.stop();
      removeDataDir(dataDir);
    }
  });
});
