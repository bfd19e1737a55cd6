/**
 * Workers keep an index of each active segment between queries (rows and
 * users by event, filtered property columns) and extend it by the rows that
 * arrived since (src/query/active-index.ts). Here events arrive in rounds, in
 * random day order, through the real ingest endpoints; after every round
 * random trends, funnels and retentions are asked — some at once, so tasks
 * of different snapshots meet in one worker — and every answer must equal the
 * naive reference over the events sent so far. Checkpoints every few hundred
 * rows seal segments between rounds (their indexes must be dropped, not
 * reused), and the server restarts halfway (workers start empty, the WAL
 * replays into new active segments).
 */
import { isDeepStrictEqual } from "node:util";
import { describe, expect, it } from "vitest";
import { type Filter, type FunnelQuery, type RetentionQuery, type StoredEvent, type TrendQuery, formatDay, referenceFunnel, referenceRetention, referenceTrend } from "../reference/reference.js";
import { runConcurrently, truncate } from "../helpers/differential.js";
import { Random, generateDataset, seedsFromEnvironment, toStoredEvents, toWireEvent, type GeneratedDataset, type GeneratedEvent } from "../helpers/random.js";
import { post, removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

const seeds = seedsFromEnvironment("EVENTIDE_TEST_SEEDS", [3_141_592, 2_718_281]);
const rounds = 6;
const queriesPerRound = 24;
const dayMs = 86_400_000;

type Query = { kind: "trend"; body: TrendQuery } | { kind: "funnel"; body: FunnelQuery } | { kind: "retention"; body: RetentionQuery };

function wholeRange(dataset: GeneratedDataset): { dateFrom: string; dateTo: string } {
  return { dateFrom: formatDay(dataset.firstDayMs), dateTo: formatDay(dataset.firstDayMs + (dataset.dayCount - 1) * dayMs) };
}

function randomRange(random: Random, dataset: GeneratedDataset): { dateFrom: string; dateTo: string } {
  if (random.chance(0.5)) return wholeRange(dataset);
  const from = random.integer(0, dataset.dayCount - 1);
  const to = random.integer(from, dataset.dayCount - 1);
  return { dateFrom: formatDay(dataset.firstDayMs + from * dayMs), dateTo: formatDay(dataset.firstDayMs + to * dayMs) };
}

function randomFilter(random: Random, dataset: GeneratedDataset): Filter {
  return { property: random.pick(dataset.propertyKeys), op: random.pick(["eq", "neq", "contains", "is_set"] as const), value: random.pick(dataset.filterValues) };
}

/** `ordinal` is unique per query: retention answers are cached for 60 s per request, and each must see the rows sent so far. */
function randomQuery(random: Random, dataset: GeneratedDataset, ordinal: number): Query {
  const roll = random.next();
  if (roll < 0.6) {
    const body: TrendQuery = { event: random.pick(dataset.eventNames), ...randomRange(random, dataset), groupBy: random.pick(["day", "day", "week", "hour"] as const), math: random.pick(["total", "unique"] as const) };
    if (random.chance(0.5)) body.filters = Array.from({ length: random.integer(1, 2) }, () => randomFilter(random, dataset));
    return { kind: "trend", body };
  }
  if (roll < 0.8) {
    const steps = Array.from({ length: random.integer(2, 3) }, () => random.pick(dataset.eventNames));
    return { kind: "funnel", body: { steps, ...randomRange(random, dataset), conversionWindow: random.pick([3600, 86_400, 604_800]) } };
  }
  const range = { dateFrom: formatDay(dataset.firstDayMs - ordinal * dayMs), dateTo: wholeRange(dataset).dateTo };
  return { kind: "retention", body: { cohortEvent: random.pick(dataset.eventNames), retentionEvent: random.pick(dataset.eventNames), ...range, windowDays: random.pick([1, 7]) } };
}

function referenceAnswer(events: readonly StoredEvent[], query: Query): unknown {
  if (query.kind === "trend") return referenceTrend(events, query.body);
  if (query.kind === "funnel") return referenceFunnel(events, query.body);
  return referenceRetention(events, query.body);
}

async function send(server: ServerHandle, random: Random, events: readonly GeneratedEvent[]): Promise<void> {
  for (let start = 0; start < events.length; ) {
    const batch = events.slice(start, (start += random.integer(1, 120))).map((event) => toWireEvent(random, event));
    const response = await post(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, events: batch });
    if (response.status !== 200 || response.body?.accepted !== batch.length) throw new Error(`/ingest/batch answered ${response.status} ${response.text.slice(0, 500)}`);
  }
}

describe("queries over active segments that grow between them equal the reference", () => {
  for (const seed of seeds) {
    it(`seed ${seed}`, async () => {
      const random = new Random(seed);
      const dataset = generateDataset(random);
      const arrival = random.shuffle([...dataset.events]);
      const env = { EVENTIDE_BATCH_DAYS_MAX: "1000", EVENTIDE_CHECKPOINT_ROWS_MAX: String(random.integer(300, 700)) };
      let server = await startServer({ env });
      const dataDir = server.dataDir;
      const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
      const mismatches: string[] = [];
      let queriesAsked = 0;
      try {
        for (let round = 0; round < rounds; round++) {
          if (round === rounds / 2) {
            expect(await server.stop()).toBe(0);
            server = await startServer({ env, dataDir, credentials });
          }
          const sentBefore = Math.floor((arrival.length * round) / rounds);
          const sentAfter = Math.floor((arrival.length * (round + 1)) / rounds);
          await send(server, random, arrival.slice(sentBefore, sentAfter));
          const stored = toStoredEvents(arrival.slice(0, sentAfter));
          const queries = Array.from({ length: queriesPerRound }, (_, index) => randomQuery(random, dataset, round * queriesPerRound + index));
          // One at a time, then several at once (tasks of different snapshots in one worker).
          const ask = async (query: Query): Promise<void> => {
            queriesAsked++;
            const response = await post(`${server.queryUrl}/api/v1/query/${query.kind}`, query.body, { token: server.token });
            const want = referenceAnswer(stored, query);
            if (response.status !== 200 || !isDeepStrictEqual(response.body, want)) {
              mismatches.push(`round ${round}, ${query.kind} ${JSON.stringify(query.body)}\n  expected: ${truncate(JSON.stringify(want), 1500)}\n  got: ${response.status} ${truncate(response.text, 1500)}`);
            }
          };
          for (const query of queries.slice(0, queriesPerRound / 2)) await ask(query);
          await runConcurrently(queries.slice(queriesPerRound / 2), 6, ask);
        }
      } finally {
        await server.stop();
        removeDataDir(dataDir);
      }
      expect(queriesAsked).toBe(rounds * queriesPerRound);
      if (mismatches.length > 0) throw new Error(`seed ${seed} (replay with EVENTIDE_TEST_SEEDS=${seed}): ${mismatches.length} answers differ:\n${mismatches.slice(0, 6).join("\n")}`);
    });
  }
});
