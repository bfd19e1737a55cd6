/**
 * Differential test of the whole query path: seeded random events go in through
 * the real ingest endpoints (shuffled, in batches and one by one, some sent
 * twice with the same uuid), then hundreds of random trend, funnel and
 * retention queries go to the real query endpoints, and every answer must equal,
 * exactly, what the naive reference (test/reference) computes from the same
 * events. Seeds take turns at variants (see `variants`); one restarts the
 * server midway and checks that nothing changed. A failure prints the seed and
 * variant (replay with EVENTIDE_TEST_VARIANT=<variant> EVENTIDE_TEST_SEEDS=<seed>),
 * each differing query and both answers.
 */
import { isDeepStrictEqual } from "node:util";
import { describe, it } from "vitest";
import {
  type FilterOperator,
  type FunnelQuery,
  type RetentionQuery,
  type StoredEvent,
  type TrendQuery,
  dayMs,
  filterOperators,
  formatDay,
  referenceFunnel,
  referenceRetention,
  referenceTrend,
} from "../reference/reference.js";
import { ingestInRandomOrder, randomDaysAroundData, randomQueries, randomStepNames, runDifferentialSeed, truncate } from "../helpers/differential.js";
import { type GeneratedDataset, Random, generateDataset, numericFilterValues, seedsFromEnvironment, toStoredEvents } from "../helpers/random.js";

const seeds = seedsFromEnvironment("EVENTIDE_TEST_SEEDS", [20_240_101, 7_654_321]);
/** Three seeds × 180 = 540 queries per run, plus the replay after the restart. */
const queriesPerSeed = 180;
const queriesInFlightMax = 8;
/**
 * Seeds take turns at three variants: resending some events with their uuid
 * (which must not store them twice), restarting the server halfway through the
 * queries (which seals every segment), and checkpointing every few hundred rows
 * during ingest (so queries read sealed and active segments of the same day).
 */
const variants = ["resent-uuids", "restart", "checkpoints"] as const;
type Variant = (typeof variants)[number];
const variantDescriptions: Record<Variant, string> = {
  "resent-uuids": "some events resent with their uuid",
  restart: "a restart halfway",
  checkpoints: "a checkpoint every few hundred rows",
};
const frequentCheckpointRows = "300";

/** The variant of the seed at `seedIndex`; EVENTIDE_TEST_VARIANT forces one, to replay a failure as it ran. */
function variantOf(seedIndex: number): Variant {
  const forced = process.env.EVENTIDE_TEST_VARIANT;
  if (forced === undefined || forced === "") return variants[seedIndex % variants.length];
  if (!(variants as readonly string[]).includes(forced)) throw new Error(`EVENTIDE_TEST_VARIANT must be one of ${variants.join(", ")}`);
  return forced as Variant;
}
const mismatchesPrintedMax = 8;
const unknownEventName = "never_ingested_event";
const unknownPropertyKeys = ["missing_key", "hasOwnProperty", "__defineGetter__"];

type GeneratedQuery =
  | { kind: "trend"; body: TrendQuery }
  | { kind: "funnel"; body: FunnelQuery }
  | { kind: "retention"; body: RetentionQuery };

// ---------------------------------------------------------------------------
// Random queries

function randomDateRange(random: Random, dataset: GeneratedDataset): { dateFrom: string; dateTo: string } {
  const first = dataset.firstDayMs;
  const last = first + (dataset.dayCount - 1) * dayMs;
  const day = (offsetDays: number, from = first): number => from + offsetDays * dayMs;
  let fromMs: number;
  let toMs: number;
  switch (random.integer(0, 6)) {
    case 0: // one day, sometimes just outside the data
      fromMs = toMs = day(random.integer(-2, dataset.dayCount + 1));
      break;
    case 1: // the whole span
      fromMs = first;
      toMs = last;
      break;
    case 2: // wider than the data on both sides
      fromMs = day(-random.integer(1, 7));
      toMs = day(random.integer(1, 7), last);
      break;
    case 3: // starts before the data
      fromMs = day(-random.integer(1, 10));
      toMs = day(random.integer(0, dataset.dayCount - 1));
      break;
    case 4: // ends after the data
      fromMs = day(random.integer(0, dataset.dayCount - 1));
      toMs = day(random.integer(1, 10), last);
      break;
    case 5: // entirely after the data
      fromMs = day(random.integer(8, 12), last);
      toMs = fromMs + random.integer(0, 5) * dayMs;
      break;
    default: // anywhere in and around the data
      ({ fromMs, toMs } = randomDaysAroundData(random, dataset));
  }
  return { dateFrom: formatDay(fromMs), dateTo: formatDay(toMs) };
}

function randomEventName(random: Random, dataset: GeneratedDataset): string {
  return random.chance(0.06) ? unknownEventName : random.pick(dataset.eventNames);
}

function randomFilterValue(random: Random, dataset: GeneratedDataset, op: FilterOperator): string {
  if ((op === "gt" || op === "gte" || op === "lt" || op === "lte") && random.chance(0.75)) return random.pick(numericFilterValues);
  const text = random.pick(dataset.filterValues);
  if (random.chance(0.2) && text.length > 1) {
    // A substring, so contains has something to find.
    const start = random.integer(0, text.length - 1);
    return text.slice(start, random.integer(start + 1, text.length));
  }
  return text;
}

function randomTrend(random: Random, dataset: GeneratedDataset, ordinal: number): TrendQuery {
  const body: TrendQuery = { event: randomEventName(random, dataset), ...randomDateRange(random, dataset) };
  // groupBy and the first filter's op cycle, so every one of them is exercised on every run.
  const groupBy = ([undefined, "hour", "day", "week", "month"] as const)[ordinal % 5];
  if (groupBy !== undefined) body.groupBy = groupBy;
  const math = random.pick([undefined, "total", "unique"] as const);
  if (math !== undefined) body.math = math;
  const filterCount = random.pick([0, 1, 1, 1, 2, 2, 3]);
  if (filterCount > 0 || random.chance(0.1)) body.filters = [];
  for (let index = 0; index < filterCount; index++) {
    const op = index === 0 ? filterOperators[Math.floor(ordinal / 5) % filterOperators.length] : random.pick(filterOperators);
    const property = random.chance(0.1) ? random.pick(unknownPropertyKeys) : random.pick(dataset.propertyKeys);
    const filter: NonNullable<TrendQuery["filters"]>[number] = { property, op };
    if ((op !== "is_set" && op !== "is_not_set") || random.chance(0.5)) filter.value = randomFilterValue(random, dataset, op);
    body.filters!.push(filter);
  }
  return body;
}

function randomFunnel(random: Random, dataset: GeneratedDataset): FunnelQuery {
  const stepCount = random.integer(1, 6);
  const steps = randomStepNames(random, dataset, stepCount, () => randomEventName(random, dataset));
  const body: FunnelQuery = { steps, ...randomDateRange(random, dataset) };
  const windowSeconds = random.pick([undefined, 1, 60, 3600, 86_400, 259_200, 604_800, 2_592_000, 31_536_000, -1]);
  if (windowSeconds !== undefined) body.conversionWindow = windowSeconds === -1 ? random.integer(1, 1_000_000) : windowSeconds;
  return body;
}

function randomRetention(random: Random, dataset: GeneratedDataset): RetentionQuery {
  const cohortEvent = randomEventName(random, dataset);
  const retentionEvent = random.chance(0.3) ? cohortEvent : randomEventName(random, dataset);
  const body: RetentionQuery = { cohortEvent, retentionEvent, ...randomDateRange(random, dataset) };
  const windowDays = random.pick([undefined, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  if (windowDays !== undefined) body.windowDays = windowDays;
  return body;
}

function referenceAnswer(events: readonly StoredEvent[], query: GeneratedQuery): unknown {
  switch (query.kind) {
    case "trend":
      return referenceTrend(events, query.body);
    case "funnel":
      return referenceFunnel(events, query.body);
    case "retention":
      return referenceRetention(events, query.body);
  }
}

// ---------------------------------------------------------------------------
// Comparison

/** Both answers, or for long lists only the elements that differ, so a failure stays readable. */
function describeDifference(expected: unknown, got: unknown): string {
  const key = ["data", "steps", "cohorts"].find(
    (name) => Array.isArray((expected as Record<string, unknown>)[name]) && Array.isArray((got as Record<string, unknown> | undefined)?.[name]),
  );
  if (key !== undefined) {
    const expectedList = (expected as Record<string, unknown[]>)[key];
    const gotList = (got as Record<string, unknown[]>)[key];
    if (expectedList.length > 12 && expectedList.length === gotList.length && Object.keys(got as object).length === 1) {
      const lines: string[] = [];
      for (let index = 0; index < expectedList.length && lines.length < 10; index++) {
        if (!isDeepStrictEqual(expectedList[index], gotList[index])) {
          lines.push(`  ${key}[${index}] expected ${JSON.stringify(expectedList[index])} got ${JSON.stringify(gotList[index])}`);
        }
      }
      return `${expectedList.length} elements, differing:\n${lines.join("\n")}`;
    }
  }
  return `expected: ${truncate(JSON.stringify(expected))}\n  got: ${truncate(JSON.stringify(got))}`;
}

// ---------------------------------------------------------------------------

describe("the query engine answers exactly as the reference on seeded random data", () => {
  for (const [seedIndex, seed] of seeds.entries()) {
    const variant = variantOf(seedIndex);
    const restart = variant === "restart";
    const duplicates = variant === "resent-uuids";
    // Batches are shuffled slices of the whole span: the per-batch day cap, which such a client would meet, is lifted.
    const batchDays = { EVENTIDE_BATCH_DAYS_MAX: "1000" };
    const serverOptions = { env: variant === "checkpoints" ? { ...batchDays, EVENTIDE_CHECKPOINT_ROWS_MAX: frequentCheckpointRows } : batchDays };
    const title = `seed ${seed}, with ${variantDescriptions[variant]}`;

    it(title, async () => {
      const random = new Random(seed);
      const dataset = generateDataset(random, { uuids: duplicates });
      const events = toStoredEvents(dataset.events);
      const queries: GeneratedQuery[] = randomQueries(queriesPerSeed, {
        trend: (ordinal) => randomTrend(random, dataset, ordinal),
        funnel: () => randomFunnel(random, dataset),
        retention: () => randomRetention(random, dataset),
      });
      const expected = new Map<number, unknown>();
      const answers = new Map<number, unknown>();
      await runDifferentialSeed({
        title: `seed ${seed} (${variant})`,
        replay: `EVENTIDE_TEST_VARIANT=${variant} EVENTIDE_TEST_SEEDS=${seed}`,
        referenceName: "the reference",
        queries,
        serverOptions,
        queriesInFlightMax,
        restart: restart ? "halfway, replaying" : "none",
        mismatchesPrintedMax,
        notesPrintedMax: mismatchesPrintedMax,
        ingest: (server) => ingestInRandomOrder(server, random, dataset, duplicates),
        judge: (ordinal, phase, response) => {
          if (!expected.has(ordinal)) expected.set(ordinal, referenceAnswer(events, queries[ordinal]));
          const want = expected.get(ordinal);
          if (response.status !== 200) return [`${phase}: expected 200 ${truncate(JSON.stringify(want), 1500)}\n  got: ${response.status} ${truncate(response.text, 1500)}`];
          const details: string[] = [];
          if (phase === "after restart" && answers.has(ordinal) && !isDeepStrictEqual(answers.get(ordinal), response.body)) {
            details.push(`changed across the restart:\n  ${describeDifference(answers.get(ordinal), response.body)}`);
          }
          answers.set(ordinal, response.body);
          if (!isDeepStrictEqual(response.body, want)) details.push(`${phase}: ${describeDifference(want, response.body)}`);
          return details;
        },
      });
    });
  }
});
