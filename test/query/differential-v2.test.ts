/**
 * Differential test of the query API v2 (SPEC §7): seeded random events —
 * moved into a season of clock changes and joined by events at the instants
 * around each change — go in through the real ingest endpoints, then hundreds
 * of random trend, funnel and retention queries combine time zones (aliases and
 * odd letter case included), event references with filters, top-level
 * filters, breakdowns, property maths, funnel orders, exclusions and times to
 * convert, and every answer must equal what the v2 reference computes (sum and
 * avg within a relative 1e-9). The workspace listings and the 400s of the new
 * fields are checked too. Seeds take turns at a restart halfway (which seals
 * every segment) and frequent checkpoints. A failure prints the seed (replay
 * with EVENTIDE_TEST_SEEDS=<seed>), and the first differing queries with the
 * path of the first difference and both answers.
 */
import { afterAll, describe, expect, it } from "vitest";
import { type Filter, type StoredEvent, dayMs, filterOperators, formatDay } from "../reference/reference.js";
import {
  type EventReference,
  type Exclusion,
  type FunnelQueryV2,
  type RetentionQueryV2,
  type TrendMath,
  type TrendQueryV2,
  type QueryV2,
  referenceAnswerV2,
  referenceEvents,
  referenceProperties,
  resolveZone,
  addDays,
} from "../reference/reference-v2.js";
import { edgeTimestamps, localDateOf, zoneTransitions } from "../reference/zone-transitions.js";
import { ingestInRandomOrder, randomDaysAroundData, randomQueries, randomStepNames, runDifferentialSeed, truncate } from "../helpers/differential.js";
import { type GeneratedDataset, type GeneratedEvent, Random, generateDataset, numericFilterValues, seedsFromEnvironment, toStoredEvents } from "../helpers/random.js";
import { type ServerHandle, post, removeDataDir, startServer } from "../helpers/server.js";
import { clickhouseBinary, clickhousePerSuite, skipNotice, storeUrl } from "../helpers/clickhouse.js";
import { limits } from "../../src/config/limits.js";

const seeds = seedsFromEnvironment("EVENTIDE_TEST_SEEDS", [20_241_027, 5_550_123]);
/** Three seeds × 180 = 540 queries per run. */
const queriesPerSeed = 180;
const queriesInFlightMax = 6;
const mismatchesPrintedMax = 6;
const notesPrintedMax = 3;
const relativeToleranceSumAvg = 1e-9;
/** SPEC §7.6: the listings may lag the newest events by up to 60 s. */
const listingLagMs = 60_000;

/** Zones as clients spell them: canonical names, an alias, odd letter case. */
const zoneSpellings = [
  "Pacific/Chatham",
  "Asia/Kolkata",
  "America/St_Johns",
  "Australia/Lord_Howe",
  "Europe/Berlin",
  "America/New_York",
  "UTC",
  "Asia/Calcutta",
  "europe/berlin",
  "AMERICA/NEW_YORK",
  "pacific/chatham",
  "utc",
  "Etc/UTC",
];
const canonicalZones = [...new Set(zoneSpellings.map((zone) => resolveZone(zone)))];
/** First days of seasons with clock changes in most of the zones above (spring and autumn, both hemispheres). */
const seasonStarts = [Date.UTC(2024, 2, 1), Date.UTC(2024, 8, 20), Date.UTC(2023, 9, 5)];
const unknownEventName = "never_ingested_event";
const mathKeys = ["price", "amount", "n"];

type GeneratedQuery = QueryV2;

const variants = ["restart", "checkpoints", "plain"] as const;
type Variant = (typeof variants)[number];

// ---------------------------------------------------------------------------
// Data

/**
 * The §4 generator's data set moved, whole days at a time, into a season of
 * clock changes, plus events at the instants around every change of the zones
 * (and at the first instants of the local days around them) for random users.
 */
/** A data set in a season of clock changes, and the local dates of those changes (zone and date). */
interface SeasonDataset extends GeneratedDataset {
  clockChanges: { zone: string; date: string }[];
}

/** A property that users keep across events, as a country or a browser is; values of every kind. */
const userKey = "region";
const userValues: readonly unknown[] = ["north", "south", "South", 7, 2.5, true, false, { r: 1 }, [1]];

/**
 * Every user's region, on nearly all of its events: most users are seen with
 * one value (what breakdowns by such a property answer from sets of users,
 * not rows), a few with two or none. Drawn from a generator of its own, so
 * the rest of the data set is the seed's as before.
 */
function withUserRegions(events: readonly GeneratedEvent[], seed: number): GeneratedEvent[] {
  const random = new Random((seed ^ 0x5eed) >>> 0);
  const regionOf = new Map<string, unknown>();
  return events.map((event) => {
    if (!regionOf.has(event.distinctId)) regionOf.set(event.distinctId, random.pick(userValues));
    const roll = random.next();
    if (roll < 0.04) return event;
    const region = roll < 0.07 ? random.pick(userValues) : regionOf.get(event.distinctId);
    // A new object: events may share theirs (the edge copies below), and a spread keeps an own "__proto__" key own.
    return { ...event, properties: { ...event.properties, [userKey]: region } };
  });
}

function datasetInDstSeason(random: Random): SeasonDataset {
  const generated = generateDataset(random);
  const dataset: GeneratedDataset = {
    ...generated,
    events: withUserRegions(generated.events, generated.seed),
    propertyKeys: [...generated.propertyKeys, userKey],
    filterValues: [...generated.filterValues, ...userValues.map((value) => (typeof value === "string" ? value : JSON.stringify(value)))],
  };
  const shiftMs = random.pick(seasonStarts) + random.integer(0, 10) * dayMs - dataset.firstDayMs;
  const events: GeneratedEvent[] = dataset.events.map((event) => ({ ...event, timestampMs: event.timestampMs + shiftMs }));
  const firstDayMs = dataset.firstDayMs + shiftMs;
  for (const timeMs of edgeTimestamps(canonicalZones, firstDayMs, firstDayMs + dataset.dayCount * dayMs)) {
    const copies = random.integer(1, 2);
    for (let copy = 0; copy < copies; copy++) {
      const model = random.pick(dataset.events);
      const edge: GeneratedEvent = { event: random.pick(dataset.eventNames), distinctId: random.pick(dataset.userIds), timestampMs: timeMs };
      if (model.properties !== undefined) edge.properties = model.properties;
      events.push(edge);
    }
  }
  const clockChanges = canonicalZones.flatMap((zone) =>
    zoneTransitions(zone, firstDayMs, firstDayMs + dataset.dayCount * dayMs, 6 * 3_600_000).map((transition) => ({ zone, date: localDateOf(zone, transition.atMs - 1) })),
  );
  return { ...dataset, events, firstDayMs, clockChanges };
}

// ---------------------------------------------------------------------------
// Random queries

function randomDateRange(random: Random, dataset: GeneratedDataset): { dateFrom: string; dateTo: string } {
  const day = (offset: number): number => dataset.firstDayMs + offset * dayMs;
  let fromMs: number;
  let toMs: number;
  switch (random.integer(0, 4)) {
    case 0: // one day, sometimes just outside the data
      fromMs = toMs = day(random.integer(-1, dataset.dayCount));
      break;
    case 1: // the whole span and a day around it
      fromMs = day(-1);
      toMs = day(dataset.dayCount);
      break;
    case 2: // a few days
      fromMs = day(random.integer(-2, dataset.dayCount));
      toMs = fromMs + random.integer(1, 6) * dayMs;
      break;
    default:
      ({ fromMs, toMs } = randomDaysAroundData(random, dataset));
  }
  return { dateFrom: formatDay(fromMs), dateTo: formatDay(toMs) };
}

function randomFilter(random: Random, dataset: GeneratedDataset): Filter {
  const op = random.pick(filterOperators);
  const property = random.chance(0.08) ? "missing_key" : random.pick(dataset.propertyKeys);
  const filter: Filter = { property, op };
  if (op === "is_set" || op === "is_not_set") return filter;
  filter.value = op === "gt" || op === "gte" || op === "lt" || op === "lte" ? random.pick(numericFilterValues) : random.pick(dataset.filterValues);
  return filter;
}

function randomFilters(random: Random, dataset: GeneratedDataset): Filter[] {
  return Array.from({ length: random.pick([0, 1, 1, 2]) }, () => randomFilter(random, dataset));
}

function randomName(random: Random, dataset: GeneratedDataset): string {
  return random.chance(0.04) ? unknownEventName : random.pick(dataset.eventNames);
}

function randomReference(random: Random, dataset: GeneratedDataset, name = randomName(random, dataset)): EventReference {
  if (random.chance(0.65)) return name;
  const reference: { event: string; filters?: Filter[] } = { event: name };
  if (random.chance(0.85)) reference.filters = randomFilters(random, dataset);
  return reference;
}

/** The optional fields every query kind takes: zone, breakdown and its limit. */
interface CommonFields {
  dateFrom: string;
  dateTo: string;
  timezone?: string;
  breakdown?: string;
  breakdownLimit?: number;
}

/**
 * The fields every query kind takes: range, zone, breakdown and its limit. A
 * third of the queries look at the local days of a clock change in the data's
 * span, in that change's zone (in one of its spellings).
 */
function commonFields(random: Random, dataset: SeasonDataset): CommonFields {
  let fields: CommonFields;
  if (dataset.clockChanges.length > 0 && random.chance(0.35)) {
    const change = random.pick(dataset.clockChanges);
    const spellings = zoneSpellings.filter((spelling) => resolveZone(spelling) === change.zone);
    fields = { dateFrom: addDays(change.date, -random.integer(0, 1)), dateTo: addDays(change.date, random.integer(0, 1)), timezone: random.pick(spellings) };
  } else {
    fields = randomDateRange(random, dataset);
    if (random.chance(0.85)) fields.timezone = random.pick(zoneSpellings);
  }
  if (random.chance(0.45)) {
    fields.breakdown = random.chance(0.08) ? "missing_key" : random.pick(dataset.propertyKeys);
    const limit = random.pick([undefined, 1, 2, 3, 5, 25, 1000]);
    if (limit !== undefined) fields.breakdownLimit = limit;
  }
  return fields;
}

function randomTrend(random: Random, dataset: SeasonDataset, ordinal: number): TrendQueryV2 {
  const body: TrendQueryV2 = { event: randomReference(random, dataset), ...commonFields(random, dataset) };
  const groupBy = ([undefined, "hour", "day", "week", "month"] as const)[ordinal % 5];
  if (groupBy !== undefined) body.groupBy = groupBy;
  const math = ([undefined, "total", "unique", "sum", "avg", "min", "max", "avg_per_user"] as const)[Math.floor(ordinal / 5) % 8] as TrendMath | undefined;
  if (math !== undefined) body.math = math;
  if (math === "sum" || math === "avg" || math === "min" || math === "max") {
    const numericKeys = mathKeys.filter((key) => dataset.propertyKeys.includes(key));
    body.mathProperty = numericKeys.length > 0 && random.chance(0.8) ? random.pick(numericKeys) : random.pick(dataset.propertyKeys);
  }
  if (random.chance(0.5)) body.filters = randomFilters(random, dataset);
  return body;
}

function randomFunnel(random: Random, dataset: SeasonDataset): FunnelQueryV2 {
  const stepCount = random.integer(1, 5);
  const names = randomStepNames(random, dataset, stepCount, () => randomName(random, dataset));
  const body: FunnelQueryV2 = { steps: names.map((name) => randomReference(random, dataset, name)), ...commonFields(random, dataset) };
  const windowSeconds = random.pick([undefined, 1, 3600, 86_400, 259_200, 604_800, 2_592_000]);
  if (windowSeconds !== undefined) body.conversionWindow = windowSeconds;
  const order = random.pick([undefined, "ordered", "strict", "unordered"] as const);
  if (order !== undefined) body.order = order;
  if (order !== "unordered" && stepCount >= 2 && random.chance(0.55)) {
    body.exclusions = random.chance(0.5) ? separateExclusions(random, dataset, names, stepCount) : anyExclusions(random, dataset, stepCount);
  }
  if (random.chance(0.5)) body.timeToConvert = random.chance(0.85);
  if (random.chance(0.3)) body.filters = randomFilters(random, dataset);
  return body;
}

function anyExclusions(random: Random, dataset: SeasonDataset, stepCount: number): Exclusion[] {
  const exclusions: Exclusion[] = [];
  for (let index = random.integer(1, 2); index > 0; index--) {
    const fromStep = random.integer(1, stepCount - 1);
    exclusions.push({ event: randomReference(random, dataset), fromStep, toStep: random.integer(fromStep + 1, stepCount) });
  }
  return exclusions;
}

/**
 * Exclusions the ClickHouse store answers in SQL (with ordered, distinct
 * steps): names no step has, and ranges equal or apart (one ends before the
 * next begins).
 */
function separateExclusions(random: Random, dataset: SeasonDataset, stepNames: readonly string[], stepCount: number): Exclusion[] {
  const names = [...dataset.eventNames.filter((name) => !stepNames.includes(name)), unknownEventName];
  const fromStep = random.integer(1, stepCount - 1);
  const toStep = random.integer(fromStep + 1, stepCount);
  const exclusions: Exclusion[] = [{ event: randomReference(random, dataset, random.pick(names)), fromStep, toStep }];
  if (random.chance(0.3)) exclusions.push({ event: randomReference(random, dataset, random.pick(names)), fromStep, toStep });
  if (toStep < stepCount - 1 && random.chance(0.5)) {
    const laterFrom = random.integer(toStep + 1, stepCount - 1);
    exclusions.push({ event: randomReference(random, dataset, random.pick(names)), fromStep: laterFrom, toStep: random.integer(laterFrom + 1, stepCount) });
  }
  return exclusions;
}

function randomRetention(random: Random, dataset: SeasonDataset): RetentionQueryV2 {
  const cohortName = randomName(random, dataset);
  const body: RetentionQueryV2 = {
    cohortEvent: randomReference(random, dataset, cohortName),
    retentionEvent: randomReference(random, dataset, random.chance(0.3) ? cohortName : randomName(random, dataset)),
    ...commonFields(random, dataset),
  };
  const windowDays = random.pick([undefined, 1, 2, 3, 7, 10]);
  if (windowDays !== undefined) body.windowDays = windowDays;
  if (random.chance(0.3)) body.filters = randomFilters(random, dataset);
  return body;
}

// ---------------------------------------------------------------------------
// Comparison

/** Keys whose numbers may differ in the last bits (SPEC §7.4 sum and avg; a mean time to convert). */
function tolerantKeys(query: GeneratedQuery): Set<string> {
  const keys = new Set(["avgTimeToConvertMs"]);
  if (query.kind === "trend" && (query.body.math === "sum" || query.body.math === "avg")) keys.add("value");
  return keys;
}

/** The path of the first difference between two JSON values, or undefined when they agree. */
function firstDifference(expected: unknown, got: unknown, tolerant: Set<string>, path = "", key = ""): string | undefined {
  if (typeof expected === "number" && typeof got === "number") {
    if (expected === got) return undefined;
    const scale = Math.max(Math.abs(expected), Math.abs(got));
    return tolerant.has(key) && Math.abs(expected - got) <= relativeToleranceSumAvg * scale ? undefined : path;
  }
  if (Array.isArray(expected) || Array.isArray(got)) {
    if (!Array.isArray(expected) || !Array.isArray(got)) return path;
    if (expected.length !== got.length) return `${path} (length ${expected.length} expected, ${got.length} got)`;
    for (let index = 0; index < expected.length; index++) {
      const difference = firstDifference(expected[index], got[index], tolerant, `${path}[${index}]`, key);
      if (difference !== undefined) return difference;
    }
    return undefined;
  }
  if (typeof expected === "object" && expected !== null && typeof got === "object" && got !== null) {
    const keys = new Set([...Object.keys(expected), ...Object.keys(got)]);
    for (const name of keys) {
      const difference = firstDifference((expected as Record<string, unknown>)[name], (got as Record<string, unknown>)[name], tolerant, `${path}.${name}`, name);
      if (difference !== undefined) return difference;
    }
    return undefined;
  }
  return expected === got ? undefined : path;
}

/** The value at a path such as `.breakdown[2].data[5]` (lengths in parentheses ignored). */
function valueAt(value: unknown, path: string): unknown {
  let current = value;
  for (const [, name, index] of path.replace(/ \(.*$/, "").matchAll(/\.([^.[]+)|\[(\d+)\]/g)) {
    if (current === null || typeof current !== "object") return undefined;
    current = (current as Record<string, unknown>)[name ?? index];
  }
  return current;
}

/** Compares one answer with the reference's; undefined when they agree. */
function compare(query: GeneratedQuery, want: unknown, status: number, body: unknown, text: string): string | undefined {
  if (status !== 200) return `expected 200 ${truncate(JSON.stringify(want), 600)}\n  got: ${status} ${truncate(text, 600)}`;
  const path = firstDifference(want, body, tolerantKeys(query));
  if (path === undefined) return undefined;
  return [
    `first difference at ${path || "(top)"}: expected ${truncate(JSON.stringify(valueAt(want, path)) ?? "absent", 600)}, got ${truncate(JSON.stringify(valueAt(body, path)) ?? "absent", 600)}`,
    `  expected: ${truncate(JSON.stringify(want), 1200)}`,
    `  got: ${truncate(text, 1200)}`,
  ].join("\n");
}

/**
 * How much of the answers has substance, so that a generator drifting into
 * empty answers fails loudly instead of passing on zeros: answers with a
 * non-zero number anywhere, with two or more breakdown series, funnels reaching
 * a second step, and answers in a zone other than UTC.
 */
function coverageOf(queries: readonly GeneratedQuery[], answers: readonly unknown[]): Record<string, number> {
  const coverage = { nonZero: 0, breakdowns: 0, secondSteps: 0, zoned: 0 };
  queries.forEach((query, index) => {
    const text = JSON.stringify(answers[index]);
    if (/"(count|value|total)":[1-9-]/.test(text)) coverage.nonZero += 1;
    const series = (answers[index] as { breakdown?: unknown[] }).breakdown;
    if (series !== undefined && series.length >= 2) coverage.breakdowns += 1;
    if (query.kind === "funnel" && ((answers[index] as { steps: { count: number }[] }).steps[1]?.count ?? 0) > 0) coverage.secondSteps += 1;
    if (query.body.timezone !== undefined && resolveZone(query.body.timezone) !== "UTC") coverage.zoned += 1;
  });
  return coverage;
}
const coverageMinimum: Record<string, number> = { nonZero: 80, breakdowns: 15, secondSteps: 10, zoned: 85 };

// ---------------------------------------------------------------------------
// Listings

async function getJson(url: string, token: string): Promise<{ status: number; body: unknown; text: string }> {
  return post(url, undefined, { token, method: "GET", raw: true });
}

/** Both listings, for all events and per name; polled while they differ, since they may lag by up to 60 s. */
async function checkListings(server: ServerHandle, events: readonly StoredEvent[], names: readonly string[]): Promise<string[]> {
  const requests: { path: string; want: unknown }[] = [{ path: "/api/v1/events", want: referenceEvents(events) }, { path: "/api/v1/properties", want: referenceProperties(events) }];
  for (const name of [...names, unknownEventName]) {
    requests.push({ path: `/api/v1/properties?event=${encodeURIComponent(name)}`, want: referenceProperties(events, name) });
  }
  const problems: string[] = [];
  for (const request of requests) {
    const deadlineMs = performance.now() + listingLagMs + 10_000;
    for (;;) {
      const answer = await getJson(`${server.queryUrl}${request.path}`, server.token);
      const detail = answer.status !== 200 ? `${answer.status} ${truncate(answer.text, 400)}` : firstDifference(request.want, answer.body, new Set());
      if (detail === undefined) break;
      if (answer.status !== 200 || performance.now() > deadlineMs) {
        problems.push(`GET ${request.path}: ${answer.status === 200 ? `first difference at ${detail}` : detail}\n  expected: ${truncate(JSON.stringify(request.want), 800)}\n  got: ${truncate(answer.text, 800)}`);
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
  return problems;
}

// ---------------------------------------------------------------------------

/** The ClickHouse store's settings for one seed's database; undefined: the embedded store. */
type StoreEnvironment = ((seed: number) => Record<string, string>) | undefined;

/** Resolves once the ClickHouse store's queries see all `count` events (its forwarder ships them a moment after the 200s). */
async function everyEventVisible(server: ServerHandle, count: number): Promise<void> {
  const deadlineMs = performance.now() + 120_000;
  for (;;) {
    const answer = await getJson(`${server.queryUrl}/api/v1/events`, server.token);
    const seen = answer.status === 200 ? (answer.body as { data: { count: number }[] }).data.reduce((sum, entry) => sum + entry.count, 0) : -1;
    if (seen === count) return;
    if (performance.now() > deadlineMs) throw new Error(`the ClickHouse store shows ${seen} events of ${count} after 120 s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * The path the ClickHouse store must take for each funnel, by the labels of
 * eventide_clickhouse_queries_total: SQL unless two steps of one name have
 * different filters, or (strict) a step repeats, or exclusions of repeated
 * steps or naming a step strictly inside their range, or past the step bounds.
 */
function expectedFunnelPaths(queries: readonly GeneratedQuery[]): Map<string, number> {
  const expected = new Map<string, number>();
  for (const query of queries) {
    if (query.kind !== "funnel") continue;
    const steps = query.body.steps.map((step) => (typeof step === "string" ? { event: step, filters: "[]" } : { event: step.event, filters: JSON.stringify(step.filters ?? []) }));
    const names = new Set(steps.map((step) => step.event));
    const overlapping = steps.some((step) => steps.some((other) => other.event === step.event && other.filters !== step.filters));
    const order = query.body.order ?? "ordered";
    const exclusionList = query.body.exclusions ?? [];
    const exclusions = exclusionList.length > 0;
    // Exclusions in SQL: distinct steps, and no excluded name among the steps strictly inside the exclusion's range.
    const exclusionsBySql =
      !exclusions ||
      (names.size === steps.length &&
        exclusionList.every((exclusion) => !steps.slice(exclusion.fromStep, exclusion.toStep - 1).some((step) => step.event === (typeof exclusion.event === "string" ? exclusion.event : exclusion.event.event))));
    const withinBounds = order === "ordered" ? steps.length - names.size <= limits.clickhouseFunnelRepeatedStepsMax : steps.length <= limits.clickhouseFunnelSqlStepsMax;
    const bySql = exclusionsBySql && withinBounds && !overlapping && !(order === "strict" && names.size < steps.length);
    const key = pathKey(order, names.size < steps.length ? "repeated" : "distinct", exclusions ? "some" : "none", bySql ? "sql" : "rows");
    expected.set(key, (expected.get(key) ?? 0) + 1);
  }
  return expected;
}

function pathKey(order: string, steps: string, exclusions: string, path: string): string {
  return `order=${order} steps=${steps} exclusions=${exclusions} path=${path}`;
}

/** The funnels the server counted in eventide_clickhouse_queries_total, by labels, added into `into`. */
async function countedFunnelPaths(server: ServerHandle, into: Map<string, number>): Promise<void> {
  const answer = await getJson(`${server.queryUrl}/metrics`, server.token);
  for (const line of answer.text.split("\n")) {
    if (!line.startsWith("eventide_clickhouse_queries_total{")) continue;
    const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map(([, name, value]) => [name, value]));
    if (labels.query !== "funnel") continue;
    const key = pathKey(labels.order, labels.steps, labels.exclusions, labels.path);
    into.set(key, (into.get(key) ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1)));
  }
}

/** Funnel paths over every seed of the ClickHouse run, printed after it: which shapes the random queries sent to SQL. */
const funnelPathsSeen = new Map<string, number>();

function differentialSeeds(store: StoreEnvironment): void {
  for (const [seedIndex, seed] of seeds.entries()) {
    const variant = variants[seedIndex % variants.length];
    it(`seed ${seed}, ${variant}`, { timeout: 180_000 }, async () => {
      // Read when the test runs: the ClickHouse server starts in beforeAll.
      // Answer-size limits are beyond the contract (test/http/query-validation.test.ts checks them): here every valid query answers.
      const batchDays = { EVENTIDE_BATCH_DAYS_MAX: "1000", EVENTIDE_TREND_POINTS_MAX: "100000000", EVENTIDE_RETENTION_CELLS_MAX: "1000000000", ...store?.(seed) };
      // A ClickHouse store's start creates its tables first: on a loaded machine that can take a while.
      // The restart variant runs every mergeable query in user shards (rows-shards.ts), however few its rows.
      const variantEnv = { restart: { EVENTIDE_ROWS_QUERY_SHARD_ROWS_MIN: "1" }, checkpoints: { EVENTIDE_CHECKPOINT_ROWS_MAX: "300" }, plain: {} }[variant];
      const serverOptions = { env: { ...batchDays, ...variantEnv }, startTimeoutMs: store === undefined ? undefined : 90_000 };
      const random = new Random(seed);
      const dataset = datasetInDstSeason(random);
      const events = toStoredEvents(dataset.events);
      const queries: GeneratedQuery[] = randomQueries(queriesPerSeed, {
        trend: (ordinal) => randomTrend(random, dataset, ordinal),
        funnel: () => randomFunnel(random, dataset),
        retention: () => randomRetention(random, dataset),
      });
      // JSON carries no -0 and no undefined fields: the reference's answer travels the same way.
      const expected = queries.map((query) => JSON.parse(JSON.stringify(referenceAnswerV2(events, query))) as unknown);
      const notes: string[] = [];
      const coverage = coverageOf(queries, expected);
      for (const [name, minimum] of Object.entries(coverageMinimum)) {
        if (coverage[name] < minimum) notes.push(`the generated queries lost substance: ${name} ${coverage[name]} < ${minimum} (${JSON.stringify(coverage)})`);
      }
      const funnelPaths = new Map<string, number>();
      await runDifferentialSeed({
        title: `seed ${seed} (${variant})`,
        replay: `EVENTIDE_TEST_SEEDS=${seed}`,
        referenceName: "the v2 reference",
        queries,
        serverOptions,
        queriesInFlightMax,
        restart: variant === "restart" ? "halfway" : "none",
        // Unique trends asked again over sealed rows are answered by an index of previous parts (previous-parts.ts).
        askedAgain: (query) => query.kind === "trend" && (query.body as { math?: string }).math === "unique",
        notes,
        mismatchesPrintedMax,
        notesPrintedMax,
        ingest: async (server) => {
          await ingestInRandomOrder(server, random, dataset, false);
          if (store !== undefined) await everyEventVisible(server, events.length);
        },
        judge: (ordinal, _phase, response) => {
          const detail = compare(queries[ordinal], expected[ordinal], response.status, response.body, response.text);
          return detail === undefined ? [] : [detail];
        },
        // The ClickHouse store counts funnels by the path that answered them; a restart starts the counts again.
        beforeRestart: async (server) => {
          if (store !== undefined) await countedFunnelPaths(server, funnelPaths);
        },
        afterQueries: async (server) => {
          const found = [...(await checkListings(server, events, dataset.eventNames))];
          if (store === undefined) return found;
          await countedFunnelPaths(server, funnelPaths);
          for (const [key, count] of funnelPaths) funnelPathsSeen.set(key, (funnelPathsSeen.get(key) ?? 0) + count);
          const want = [...expectedFunnelPaths(queries)].sort();
          const got = [...funnelPaths].sort();
          if (JSON.stringify(got) !== JSON.stringify(want)) found.push(`funnels by path: expected ${JSON.stringify(want)}\n  got ${JSON.stringify(got)}`);
          return found;
        },
      });
    });
  }
}

describe("the query engine answers the v2 fields exactly as the reference on seeded random data", () => {
  differentialSeeds(undefined);
});

const clickhouseServer = clickhouseBinary();
if (clickhouseServer === undefined) console.warn(skipNotice("the differential suite over the ClickHouse store"));

describe.skipIf(clickhouseServer === undefined)("the ClickHouse store answers the same queries exactly as the reference on the same events", () => {
  const clickhouse = clickhousePerSuite();
  // This suite checks answers: credentials read a few seconds late on a loaded machine must not turn one into a 503.
  const env = { EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "50", EVENTIDE_REGISTRY_STALE_MS_MAX: "30000", EVENTIDE_REGISTRY_READ_HANG_MS_MAX: "30000" };
  differentialSeeds((seed) => ({ EVENTIDE_STORE: storeUrl(clickhouse, `differential_${seed}`), ...env }));
  afterAll(() => {
    if (funnelPathsSeen.size > 0) console.log(`ClickHouse funnels by path over the seeds:\n  ${[...funnelPathsSeen].sort().map(([key, count]) => `${key}: ${count}`).join("\n  ")}`);
  });
});

describe("the v2 fields refuse what SPEC §7 refuses", () => {
  const range = { dateFrom: "2024-01-01", dateTo: "2024-01-07" };
  const refused: { path: string; body: Record<string, unknown>; field: string }[] = [
    { path: "trend", body: { event: "a", ...range, bogusField: 1 }, field: "bogusField" },
    { path: "funnel", body: { steps: ["a"], ...range, windowSize: 3 }, field: "windowSize" },
    { path: "retention", body: { cohortEvent: "a", retentionEvent: "a", ...range, cohort_event: "a" }, field: "cohort_event" },
    { path: "trend", body: { event: "a", ...range, timezone: "Mars/Olympus" }, field: "timezone" },
    { path: "funnel", body: { steps: ["a"], ...range, timezone: "" }, field: "timezone" },
    { path: "retention", body: { cohortEvent: "a", retentionEvent: "a", ...range, timezone: 5 }, field: "timezone" },
    { path: "trend", body: { event: "a", ...range, breakdownLimit: 3 }, field: "breakdownLimit" },
    { path: "trend", body: { event: "a", ...range, breakdown: "p", breakdownLimit: 1001 }, field: "breakdownLimit" },
    { path: "trend", body: { event: "a", ...range, math: "total", mathProperty: "n" }, field: "mathProperty" },
    { path: "trend", body: { event: "a", ...range, math: "sum" }, field: "mathProperty" },
    { path: "funnel", body: { steps: ["a", "b"], ...range, order: "unordered", exclusions: [{ event: "c", fromStep: 1, toStep: 2 }] }, field: "exclusions" },
    { path: "funnel", body: { steps: ["a", "b"], ...range, exclusions: [{ event: "c", fromStep: 2, toStep: 2 }] }, field: "exclusions" },
    { path: "funnel", body: { steps: ["a", "b"], ...range, order: "sideways" }, field: "order" },
    { path: "funnel", body: { steps: ["a", "b"], ...range, timeToConvert: "yes" }, field: "timeToConvert" },
  ];

  it("answers 400 invalid_request naming the field, and accepts every zone spelling of the list", async () => {
    const server = await startServer();
    try {
      const problems: string[] = [];
      for (const { path, body, field } of refused) {
        const answer = await post(`${server.queryUrl}/api/v1/query/${path}`, body, { token: server.token });
        const error = answer.body?.error;
        if (answer.status !== 400 || error?.code !== "invalid_request" || typeof error?.message !== "string" || !error.message.includes(field)) {
          problems.push(`POST /api/v1/query/${path} ${JSON.stringify(body)}: expected 400 invalid_request naming ${field}, got ${answer.status} ${truncate(answer.text, 300)}`);
        }
      }
      for (const timezone of zoneSpellings) {
        const answer = await post(`${server.queryUrl}/api/v1/query/trend`, { event: "a", ...range, timezone }, { token: server.token });
        if (answer.status !== 200) problems.push(`timezone ${timezone}: expected 200, got ${answer.status} ${truncate(answer.text, 300)}`);
      }
      expect(problems, problems.join("\n")).toEqual([]);
    } finally {
      await server.stop();
      removeDataDir(server.dataDir);
    }
  });
});
