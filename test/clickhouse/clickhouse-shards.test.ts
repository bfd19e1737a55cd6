/**
 * A ClickHouse cluster of two shards (two clickhouse-server processes, a
 * Distributed table over their events_local tables) answers exactly as one
 * server does, and as the reference, on the same seeded random events; both
 * shards hold rows, a user's rows all on one.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { filterOperators } from "../reference/reference.js";
import { referenceFunnelV2, referenceRetentionV2, referenceTrendV2 } from "../reference/reference-v2.js";
import { ingestInRandomOrder } from "../helpers/differential.js";
import { type ClickHouseHandle, clickhouseBinary, clickhousePerSuite, freePort, skipNotice, startClickHouse, storeUrl } from "../helpers/clickhouse.js";
import { Random, generateDataset, toStoredEvents } from "../helpers/random.js";
import { type ServerHandle, makeDataDir, post, removeDataDir, startServer } from "../helpers/server.js";

const binary = clickhouseBinary();
if (binary === undefined) console.warn(skipNotice("ClickHouse two-shard tests"));

const seed = 31_337;
const queryCount = 60;

describe.skipIf(binary === undefined)("two ClickHouse shards behind a Distributed table", () => {
  const single = clickhousePerSuite();
  let shardA: ClickHouseHandle;
  let shardB: ClickHouseHandle;
  beforeAll(async () => {
    shardB = await startClickHouse();
    const tcpPortA = await freePort();
    // Shard A is also the entry server: its remote_servers names both shards.
    shardA = await startClickHouse({ tcpPort: tcpPortA, clusters: { two: [tcpPortA, shardB.tcpPort] } });
  }, 120_000);
  afterAll(async () => {
    await shardA?.stop();
    await shardB?.stop();
  });

  it("answer every query as one server and as the reference", { timeout: 300_000 }, async () => {
    const random = new Random(seed);
    const dataset = generateDataset(random);
    const events = toStoredEvents(dataset.events);
    const servers: ServerHandle[] = [];
    const dataDirs = [makeDataDir(), makeDataDir()];
    try {
      servers.push(await startServer({ dataDir: dataDirs[0], env: { EVENTIDE_STORE: storeUrl(single, "one"), EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "50" }, startTimeoutMs: 90_000 }));
      servers.push(
        await startServer({
          dataDir: dataDirs[1],
          env: {
            EVENTIDE_STORE: storeUrl(shardA, "two"),
            EVENTIDE_CLICKHOUSE_CLUSTER: "two",
            EVENTIDE_CLICKHOUSE_SHARD_URLS: `${shardA.httpUrl},${shardB.httpUrl}`,
            EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "50",
          },
          startTimeoutMs: 90_000,
        }),
      );
      for (const server of servers) {
        await ingestInRandomOrder(server, new Random(seed + 1), dataset, false);
        for (;;) {
          const answer = await post(`${server.queryUrl}/api/v1/events`, undefined, { token: server.token, method: "GET" });
          if (answer.status === 200 && (answer.body.data as { count: number }[]).reduce((sum, entry) => sum + entry.count, 0) === events.length) break;
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      }
      const counts = await Promise.all([shardA, shardB].map(async (shard) => Number((await shard.sql("SELECT count() FROM two.events_local FORMAT TSV")).trim())));
      expect(counts[0] + counts[1]).toBe(events.length);
      expect(Math.min(...counts)).toBeGreaterThan(0);
      const usersOnBoth = await shardA.sql(
        `SELECT count() FROM (SELECT user FROM two.events_local GROUP BY user) WHERE user IN (SELECT user FROM remote('127.0.0.1:${shardB.tcpPort}', two.events_local)) FORMAT TSV`,
      );
      expect(usersOnBoth.trim()).toBe("0");

      const query = new Random(seed + 2);
      const names = [...dataset.eventNames, "never_ingested"];
      const filter = () => ({ property: query.pick(dataset.propertyKeys), op: query.pick(filterOperators), value: query.pick(dataset.filterValues) });
      const range = () => {
        const from = dataset.firstDayMs + query.integer(-1, dataset.dayCount) * 86_400_000;
        const to = from + query.integer(0, 20) * 86_400_000;
        return { dateFrom: new Date(from).toISOString().slice(0, 10), dateTo: new Date(to).toISOString().slice(0, 10) };
      };
      const problems: string[] = [];
      for (let index = 0; index < queryCount; index++) {
        const timezone = query.pick(["UTC", "Europe/Berlin", "Asia/Kolkata"]);
        const breakdown = query.chance(0.5) ? { breakdown: query.pick(dataset.propertyKeys) } : {};
        const filters = query.chance(0.5) ? [filter()] : [];
        let kind: string;
        let body: object;
        let want: unknown;
        if (index % 3 === 0) {
          kind = "trend";
          const trend = { event: query.pick(names), ...range(), groupBy: query.pick(["hour", "day", "week"] as const), math: query.pick(["total", "unique"] as const), filters, timezone, ...breakdown };
          [body, want] = [trend, referenceTrendV2(events, trend)];
        } else if (index % 3 === 1) {
          kind = "funnel";
          const funnel = { steps: [query.pick(names), query.pick(names), query.pick(names)], ...range(), order: query.pick(["ordered", "strict", "unordered"] as const), filters, timezone, timeToConvert: true, ...breakdown };
          [body, want] = [funnel, referenceFunnelV2(events, funnel)];
        } else {
          kind = "retention";
          const retention = { cohortEvent: query.pick(names), retentionEvent: query.pick(names), ...range(), windowDays: query.integer(1, 7), filters, timezone, ...breakdown };
          [body, want] = [retention, referenceRetentionV2(events, retention)];
        }
        const answers = await Promise.all(servers.map((server) => post(`${server.queryUrl}/api/v1/query/${kind}`, body, { token: server.token })));
        const [one, two] = answers.map((answer) => answer.text);
        if (one !== two || JSON.stringify(JSON.parse(one)) !== JSON.stringify(JSON.parse(JSON.stringify(want)))) {
          problems.push(`${kind} ${JSON.stringify(body)}\n  one server: ${one.slice(0, 400)}\n  two shards: ${two.slice(0, 400)}\n  reference: ${JSON.stringify(want).slice(0, 400)}`);
        }
      }
      expect(problems.slice(0, 3), problems.slice(0, 3).join("\n")).toEqual([]);
    } finally {
      for (const server of servers) await server.stop();
      for (const dataDir of dataDirs) removeDataDir(dataDir);
    }
  });
});
