/**
 * A sum, average, minimum or maximum of a property by UTC day, week or month,
 * without filters or breakdown, over sealed segments only: the query service
 * answers it on the thread that received it, from the segments' stored value
 * counts, without a worker (query-service.ts, trend-columns.ts). Seeded events
 * go in over HTTP, a restart seals every segment, and every answer must equal
 * the v2 reference's, before the restart (workers, active segments) and after.
 */
import { afterAll, describe, expect, it } from "vitest";
import type { StoredEvent } from "../reference/reference.js";
import { referenceTrendV2, type TrendMath, type TrendQueryV2 } from "../reference/reference-v2.js";
import { seededRandom } from "./kernels-fixtures.js";
import { type ServerHandle, ingestAll, post, removeDataDir, startServer } from "../helpers/server.js";

const dayMs = 86_400_000;
const firstDayMs = Date.parse("2024-02-26T00:00:00Z");
const dayCount = 12;
const random = seededRandom(4_242);
const integer = (bound: number) => Math.floor(random() * bound);
/** Numbers, numeric strings, strings that are no number, and absent: each counts or not as SPEC §7.4 says. */
const prices: unknown[] = [1, 2.5, 10, -3, 0, "7", "12.25", "abc", "1e400", true, null];

const events = Array.from({ length: 3_000 }, () => {
  const properties: Record<string, unknown> = {};
  if (random() < 0.85) properties.price = prices[integer(prices.length)];
  return {
    distinctId: `u${integer(150)}`,
    event: random() < 0.6 ? "buy" : "view",
    timestamp: new Date(firstDayMs + integer(dayCount * dayMs)).toISOString(),
    properties,
  };
});
const stored: StoredEvent[] = events.map((event) => ({ event: event.event, distinctId: event.distinctId, timestampMs: Date.parse(event.timestamp), properties: JSON.parse(JSON.stringify(event.properties)) }));

function day(offset: number): string {
  return new Date(firstDayMs + offset * dayMs).toISOString().slice(0, 10);
}

function queries(): TrendQueryV2[] {
  const asked: TrendQueryV2[] = [];
  for (let index = 0; index < 40; index++) {
    const from = integer(dayCount + 2) - 1;
    asked.push({
      event: index % 9 === 0 ? "view" : "buy",
      dateFrom: day(from),
      dateTo: day(from + integer(dayCount)),
      groupBy: (["day", "week", "month"] as const)[integer(3)],
      math: (["sum", "avg", "min", "max"] as TrendMath[])[integer(4)],
      mathProperty: index % 13 === 0 ? "missing" : "price",
    });
  }
  return asked;
}

const servers: ServerHandle[] = [];
afterAll(async () => {
  for (const server of servers) await server.stop().catch(() => {});
  if (servers.length > 0) removeDataDir(servers[0].dataDir);
});

async function expectReferenceAnswers(server: ServerHandle, phase: string): Promise<void> {
  for (const query of queries()) {
    const response = await post(`${server.queryUrl}/api/v1/query/trend`, query, { token: server.token });
    expect(response.status, `${phase}: ${JSON.stringify(query)} answered ${response.text}`).toBe(200);
    const expected = referenceTrendV2(stored, query) as { data: Array<Record<string, unknown>> };
    const actual = response.body as { data: Array<Record<string, unknown>> };
    const close = (answer: { data: Array<Record<string, unknown>> }) =>
      answer.data.map((row) => Object.fromEntries(Object.entries(row).map(([key, value]) => [key, typeof value === "number" ? Number(value.toPrecision(12)) : value])));
    expect(close(actual), `${phase}: ${JSON.stringify(query)}`).toEqual(close(expected));
  }
}

describe("sums by UTC day over sealed segments, answered without a worker", () => {
  it("equal the reference before a restart and after it has sealed every segment", async () => {
    const first = await startServer();
    servers.push(first);
    await ingestAll(first, events);
    await expectReferenceAnswers(first, "active segments");
    expect(await first.stop()).toBe(0);
    const second = await startServer({ dataDir: first.dataDir, credentials: { apiKey: first.apiKey, token: first.token, workspaceId: first.workspaceId } });
    servers.push(second);
    await expectReferenceAnswers(second, "sealed segments");
    // Asked again: the days' totals are now kept.
    await expectReferenceAnswers(second, "sealed segments, asked again");
  });
});
