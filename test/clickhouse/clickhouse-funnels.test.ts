/**
 * Funnels the ClickHouse store answers in SQL (strict, unordered, a repeated
 * step) on data made of ties: few users, three event names, every event at
 * one of a few instants a second apart, so chains meet equal timestamps,
 * several events of one step at one instant and windows of 1 or 2 s at every
 * turn. Every answer must equal the reference's, and the server must say that
 * every one of these funnels took the SQL path (none selected rows).
 */
import { describe, expect, it } from "vitest";
import { referenceFunnelV2, type EventReference, type FunnelQueryV2 } from "../reference/reference-v2.js";
import type { Filter, StoredEvent } from "../reference/reference.js";
import { clickhouseBinary, clickhousePerSuite, skipNotice, storeUrl } from "../helpers/clickhouse.js";
import { runConcurrently, truncate } from "../helpers/differential.js";
import { Random, seedsFromEnvironment } from "../helpers/random.js";
import { ingestAll, makeDataDir, post, removeDataDir, startServer } from "../helpers/server.js";

const binary = clickhouseBinary();
if (binary === undefined) console.warn(skipNotice("ClickHouse funnel SQL tests"));

const seed = seedsFromEnvironment("EVENTIDE_TEST_SEEDS", [7_301])[0];
const queryCount = 160;
const names = ["a", "b", "c"];
const startMs = Date.UTC(2024, 2, 30, 23, 59, 50);

function tiedEvents(random: Random): StoredEvent[] {
  const events: StoredEvent[] = [];
  for (let user = 0; user < 40; user++) {
    for (let index = random.integer(2, 30); index > 0; index--) {
      // Instants a second apart around midnight UTC, and a few a day later.
      const timestampMs = startMs + random.integer(0, 14) * 1000 + (random.chance(0.1) ? 86_400_000 : 0);
      const properties = random.chance(0.3) ? {} : { plan: random.pick(["x", "y", "z"]) };
      events.push({ event: random.pick(names), distinctId: `u${user}`, timestampMs, properties });
    }
  }
  return events;
}

function shuffled<T>(random: Random, items: readonly T[]): T[] {
  const copy = [...items];
  for (let index = copy.length - 1; index > 0; index--) {
    const other = random.integer(0, index);
    [copy[index], copy[other]] = [copy[other], copy[index]];
  }
  return copy;
}

function randomFunnel(random: Random): FunnelQueryV2 {
  const order = random.pick(["ordered", "strict", "unordered"] as const);
  const stepCount = random.integer(1, order === "strict" ? 3 : 5);
  const stepNames = order === "strict" ? shuffled(random, names).slice(0, stepCount) : Array.from({ length: stepCount }, () => random.pick(names));
  // A step name keeps one reference: with a filter on every step of that name, or none.
  const filtered = new Map(names.map((name) => [name, random.chance(0.3) ? [{ property: "plan", op: random.pick(["eq", "neq"] as const), value: "x" } as Filter] : undefined]));
  const steps: EventReference[] = stepNames.map((name) => (filtered.get(name) === undefined ? name : { event: name, filters: filtered.get(name) }));
  const body: FunnelQueryV2 = { steps, dateFrom: "2024-03-30", dateTo: random.pick(["2024-03-30", "2024-03-31"]), order, conversionWindow: random.pick([1, 2, 5, 3600, 172_800]) };
  if (random.chance(0.6)) body.timeToConvert = true;
  if (random.chance(0.4)) body.breakdown = random.pick(["plan", "missing"]);
  if (random.chance(0.3)) body.timezone = random.pick(["Europe/Berlin", "Pacific/Chatham"]);
  if (random.chance(0.2)) body.filters = [{ property: "plan", op: "is_set" }];
  return body;
}

describe.skipIf(binary === undefined)("the ClickHouse store's funnel SQL on tied timestamps", () => {
  const clickhouse = clickhousePerSuite();

  it(`answers strict, unordered and repeated-step funnels as the reference, all in SQL (seed ${seed})`, { timeout: 300_000 }, async () => {
    const random = new Random(seed);
    const events = tiedEvents(random);
    const cycle = (length: number) => Array.from({ length }, (_, index) => names[index % names.length]);
    const range = { dateFrom: "2024-03-30", dateTo: "2024-03-31", timeToConvert: true };
    // Long funnels at the bounds: 6 repeated ordered steps (EVENTIDE_CLICKHOUSE_FUNNEL_REPEATED_STEPS_MAX) and 8 unordered steps
    // (EVENTIDE_CLICKHOUSE_FUNNEL_SQL_STEPS_MAX) in SQL; past them, the row path.
    const long: FunnelQueryV2[] = [
      { steps: ["a", "a", "a", "a", "a", "a", "a"], ...range, conversionWindow: 5 },
      { steps: ["a", "b", "a", "c", "a", "b", "a"], ...range, breakdown: "plan" },
      { steps: cycle(8), ...range, order: "unordered", breakdown: "plan" },
      { steps: cycle(20), ...range, order: "unordered", breakdown: "plan" },
      { steps: cycle(20), ...range },
    ];
    const queries = [...Array.from({ length: queryCount }, () => randomFunnel(random)), ...long];
    const dataDir = makeDataDir();
    const server = await startServer({ dataDir, env: { EVENTIDE_STORE: storeUrl(clickhouse, "tied_funnels"), EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "20" }, startTimeoutMs: 90_000 });
    try {
      await ingestAll(server, events.map((event) => ({ event: event.event, distinctId: event.distinctId, timestamp: new Date(event.timestampMs).toISOString(), properties: event.properties })));
      for (;;) {
        const answer = await post(`${server.queryUrl}/api/v1/events`, undefined, { token: server.token, method: "GET" });
        if (answer.status === 200 && (answer.body.data as { count: number }[]).reduce((sum, entry) => sum + entry.count, 0) === events.length) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const problems: string[] = [];
      await runConcurrently(queries, 4, async (query) => {
        const want = JSON.parse(JSON.stringify(referenceFunnelV2(events, query)));
        const answer = await post(`${server.queryUrl}/api/v1/query/funnel`, query, { token: server.token });
        if (answer.status !== 200 || JSON.stringify(answer.body) !== JSON.stringify(want)) {
          problems.push(`${JSON.stringify(query)}\n  got ${answer.status} ${truncate(answer.text, 800)}\n  want ${truncate(JSON.stringify(want), 800)}`);
        }
      });
      expect(problems.slice(0, 5), `${problems.length} of ${queries.length} funnels differ (replay with EVENTIDE_TEST_SEEDS=${seed})\n${problems.slice(0, 5).join("\n")}`).toEqual([]);
      const counted = (await post(`${server.queryUrl}/metrics`, undefined, { method: "GET", raw: true })).text
        .split("\n")
        .filter((line) => line.startsWith('eventide_clickhouse_queries_total{query="funnel"'));
      const total = (path: string) => counted.filter((line) => line.includes(`path="${path}"`)).reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0);
      expect({ sql: total("sql"), rows: total("rows") }).toEqual({ sql: queries.length - 2, rows: 2 });
    } finally {
      await server.stop();
      removeDataDir(dataDir);
    }
  });
});
