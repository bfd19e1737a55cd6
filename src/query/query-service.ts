// Over 500 lines: one pipeline (parse, resolve, snapshot, fan out, merge, format) for the three query kinds and both API versions, kept readable top to bottom.
/**
 * Main-thread side of a query: parse and validate the body, resolve names to
 * the workspace's ids, take a snapshot of the segments the range touches (rows
 * acknowledged before this moment are in it), fan the work out over the pool
 * by user-id shard, sum the partials and format the answer. Retention answers
 * are cached 60 s per workspace and request (SPEC §4).
 */
import { limits } from "../config/limits.js";
import type { ServiceReply } from "../errors.js";
import { UserDeletionError, UserDeletionInterrupted, type Store, type WorkspaceStore } from "../storage/store.js";
import type { SegmentDescriptor } from "../storage/segment-descriptor.js";
import { PoolTaskTimeoutError, type WorkerPool } from "../workers/pool.js";
import { DamagedSegmentError } from "../storage/segment-cache.js";
import { log } from "../log.js";
import { dayMs, retentionLayout, retentionPeriodLabels, trendBucketLabels, trendLayout, zonedDayStarts, zonedRange, zonedRetentionBoundaries, zonedTrendBoundaries } from "./buckets.js";
import type { FilterPlan } from "./filters.js";
import type { GatherPlan, PropertyRead, ReferencePlan } from "./kernels/event-rows.js";
import type { FunnelChainsAnswer, FunnelChainsPlan, StepCounts } from "./kernels/funnel-chains.js";
import type { ListingPlan } from "./kernels/workspace-listing.js";
import type { CohortCounts, RetentionCohortsAnswer } from "./kernels/retention-cohorts.js";
import type { BucketValues, TrendSeriesAnswer, TrendSeriesPlan } from "./kernels/trend-series.js";
import type { Snapshot } from "../storage/snapshot.js";
import type { TrendMath as CountMath } from "./kernels/trend.js";
import { retentionCountsByPair } from "./kernels/retention.js";
import { lowerBoundUser, sealedEventRowCount } from "./kernels/rows.js";
import { mathFromValueCounts, trendFromCountsOnly } from "./kernels/trend-columns.js";
import { breakdownFromDayParts, dayPartsFit, trendDayPartsApplies } from "./kernels/trend-day-parts.js";
import { dayParts } from "./kernels/column-scan.js";
import type { QueryPlan, RowsAnswer, RowsAnswerPlan } from "./query-protocol.js";
import {
  isVersion1Funnel,
  isVersion1Retention,
  isVersion1Trend,
  parseQueryBody,
  tooManyBuckets,
  type EventReference,
  type FunnelRequest,
  type PropertyFilter,
  type QueryKind,
  type QueryParseResult,
  type RetentionRequest,
  type TrendRequest,
} from "./schemas.js";
import { zoneClock } from "./time-zone.js";
import { ResultCache } from "./result-cache.js";
import { retentionCacheLookups } from "../metrics.js";
import type { SegmentView } from "./segment-view.js";
import { ownedSegmentViews } from "./segment-views.js";
import { parseUserDeletionBody } from "./user-deletion.js";
import { mergeRowsShards, shardable, shardPlan } from "./rows-shards.js";

export type { QueryKind } from "./schemas.js";

/**
 * Bodies up to this size are parsed on the main thread (a valid query is a few
 * hundred bytes; JSON.parse of 16 KiB costs well under a millisecond whatever
 * it holds). Larger ones go to the pool: a 1 MiB body of nested arrays costs
 * 0.1–1 s of JSON.parse, and on the main thread that would stall every request.
 */
const inlineParseBytesMax = 16 * 1024;

/**
 * Below this many rows to read, one task answers faster than a fan-out: a task
 * costs ~1 ms to post, wake and merge, and the kernels read ~1–2 ns per row.
 */
const fanOutRowsMin = 1_000_000;

/**
 * What a query's cost grows with, to choose how many user shards it runs in
 * and where they are cut.
 *
 * `event-rows`: reading the rows of one event (a filtered or hourly trend, a
 * funnel's entries). Shards get equal shares of those rows rather than of
 * user ids: ids are handed out in order of first appearance, so low ids
 * belong to the oldest and busiest users, and halving the id range gave one
 * worker nearly twice the other's funnel work.
 *
 * `sealed-event-rows`: the same, where active segments give only the event's
 * own rows, from their workers' indexes (a filtered or hourly trend): those
 * are a small share of the work, and every shard's message carries every
 * active segment's column handles (each costs tens of microseconds to post),
 * so they do not count towards splitting.
 *
 * `active-rows`: sealed segments answer without reading rows (a trend total
 * by day, week or month from the event's row-run bounds, a unique one and
 * retention from per-day user bitmaps, a total with one filter from the
 * column's value counts: value-counts.ts), and active ones nearly so (their
 * workers' indexes keep each event's rows and users: active-index.ts). Those
 * run in one task: splitting by user shard would repeat the per-segment and
 * bitmap work in every shard (each retention shard ORs the same day bitmaps)
 * and wake more threads.
 */
type Work = { kind: "event-rows" | "sealed-event-rows"; eventId: number } | { kind: "active-rows" };

export class QueryService {
  private readonly retentionCache = new ResultCache(limits.retentionCacheBytesMax, limits.retentionCacheTtlMs);
  private readonly listingCache = new ResultCache(limits.workspaceListingCacheBytesMax, limits.workspaceListingCacheTtlMs);

  constructor(
    private readonly pool: WorkerPool,
    private readonly store: Store,
  ) {}

  /**
   * Cached answers are keyed under the workspace's deletion generation: a user
   * deletion moves it on, so no answer computed before the deletion ended is
   * served after it (one still running then is cached under the old key).
   */
  private readonly deletionGenerations = new Map<string, number>();

  private cachePrefix(workspaceId: string): string {
    return `${workspaceId}\u0000${this.deletionGenerations.get(workspaceId) ?? 0}\u0000`;
  }

  /** POST /api/v1/users/delete: every event of the body's distinctId leaves the store (storage/user-deletion.ts). */
  async deleteUser(workspaceId: string, bytes: Uint8Array): Promise<ServiceReply> {
    const parsed = parseUserDeletionBody(bytes);
    if (!parsed.ok) return parsed;
    try {
      const { deletedEvents } = await this.store.deleteUser(workspaceId, parsed.distinctId);
      return { ok: true, body: JSON.stringify({ ok: true, deletedEvents }) };
    } catch (error) {
      if (error instanceof UserDeletionError) return { ok: false, error: { code: "unavailable", message: error.message } };
      if (error instanceof DamagedSegmentError) {
        const message = `${error.message}. Nothing was deleted; the operator stops the server, runs \`eventide repair\`, and the request is sent again`;
        return { ok: false, error: { code: "unavailable", message } };
      }
      if (error instanceof UserDeletionInterrupted) {
        // Every segment was read first, so this is damage only the rewrite met, or a disk that refused a rewrite after others:
        // those done stay done, and the same request sent again finishes the rest.
        const done = `${error.deletedEvents} of the user's events were deleted before it`;
        const retry = "the request is sent again (its deletedEvents counts what that request deletes)";
        const message =
          error.failure instanceof DamagedSegmentError
            ? `${error.failure.message}. ${done}; the operator stops the server, runs \`eventide repair\`, and ${retry}`
            : `a rewrite of the user's events failed (the server log says why: a full or failing disk). ${done}; once the disk is fixed, ${retry}`;
        log.error({ err: error.failure }, "user deletion interrupted");
        return { ok: false, error: { code: "unavailable", message } };
      }
      throw error;
    } finally {
      // Also after a failure: segments may have been rewritten before it.
      this.deletionGenerations.set(workspaceId, (this.deletionGenerations.get(workspaceId) ?? 0) + 1);
    }
  }

  get retentionCacheBytes(): number {
    return this.retentionCache.byteLength;
  }

  async run(kind: QueryKind, workspaceId: string, bytes: Uint8Array): Promise<ServiceReply> {
    try {
      return await this.runQuery(kind, workspaceId, bytes);
    } catch (error) {
      if (error instanceof DamagedSegmentError) {
        const message = `${error.message}. Its day is damaged on disk (ranges without it still answer): the operator stops the server and runs \`eventide repair\``;
        return { ok: false, error: { code: "unavailable", message } };
      }
      if (!(error instanceof PoolTaskTimeoutError)) throw error;
      const message = `the query ran past its time limit of ${limits.queryTaskTimeoutMs} ms and was stopped; narrow it (fewer filters, a shorter range) or retry later`;
      return { ok: false, error: { code: "overloaded", message } };
    }
  }

  private async runQuery(kind: QueryKind, workspaceId: string, bytes: Uint8Array): Promise<ServiceReply> {
    const parsed = await this.parse(kind, bytes);
    if (!parsed.ok) return parsed;
    const query = parsed.query;
    switch (query.kind) {
      case "trend":
        return this.trend(workspaceId, query.request);
      case "funnel":
        return this.funnel(workspaceId, query.request);
      case "retention": {
        // The whole request after defaults, the zone's canonical name included: an alias shares its zone's entry.
        const cacheKey = `${this.cachePrefix(workspaceId)}${JSON.stringify(query.request)}`;
        const cached = this.retentionCache.get(cacheKey);
        retentionCacheLookups.inc({ result: cached === undefined ? "miss" : "hit" });
        if (cached !== undefined) return { ok: true, body: cached };
        const reply = await this.retention(workspaceId, query.request);
        if (reply.ok) this.retentionCache.set(cacheKey, reply.body);
        return reply;
      }
    }
  }

  /** GET /api/v1/events (SPEC §7.6): every event name and its number of events, by count descending, then name. */
  async listEvents(workspaceId: string): Promise<ServiceReply> {
    return this.listing(`${this.cachePrefix(workspaceId)}events`, workspaceId, (workspace) => {
      const plan: ListingPlan = { kind: "events", eventCount: workspace.events.size };
      return { plan, names: workspace.events.texts, field: "event" };
    });
  }

  /** GET /api/v1/properties?event=NAME (SPEC §7.6): every property key set on events of that name (all events without one), and on how many. */
  async listProperties(workspaceId: string, event: string | undefined): Promise<ServiceReply> {
    const cacheKey = `${this.cachePrefix(workspaceId)}properties\u0000${event === undefined ? "all" : `event\u0000${event}`}`;
    return this.listing(cacheKey, workspaceId, (workspace) => {
      const eventId = event === undefined ? undefined : workspace.events.idOf(event);
      if (event !== undefined && eventId === undefined) return undefined;
      const keyCount = workspace.keys.size;
      const plan: ListingPlan = { kind: "properties", eventId, keyIds: Array.from({ length: keyCount }, (_, keyId) => keyId), keyCount };
      return { plan, names: workspace.keys.texts, field: "property" };
    });
  }

  private async listing(
    cacheKey: string,
    workspaceId: string,
    planOf: (workspace: WorkspaceStore) => { plan: ListingPlan; names: readonly string[]; field: string } | undefined,
  ): Promise<ServiceReply> {
    const cached = this.listingCache.get(cacheKey);
    if (cached !== undefined) return { ok: true, body: cached };
    const workspace = this.store.workspaces.get(workspaceId);
    const planned = workspace === undefined ? undefined : planOf(workspace);
    let data: Array<Record<string, string | number>> = [];
    if (workspace !== undefined && planned !== undefined) {
      const { plan, names, field } = planned;
      const keyIds = plan.kind === "properties" ? plan.keyIds : [];
      // A listing counts entries: every key's entries, none of their texts.
      const { segments } = await this.store.snapshot(workspace.id, -wholeTimeMs, wholeTimeMs, keyIds, false);
      const { values } = await this.pool.query({ kind: "query", query: { kind: "listing", plan }, segments, userLo: 0, userHi: workspace.userCount });
      const entries: Array<{ name: string; count: number }> = [];
      for (let id = 0; id < values.length; id++) if (values[id] > 0) entries.push({ name: names[id], count: values[id] });
      entries.sort((left, right) => right.count - left.count || (left.name < right.name ? -1 : left.name > right.name ? 1 : 0));
      data = entries.map(({ name, count }) => ({ [field]: name, count }));
    }
    const body = JSON.stringify({ data });
    this.listingCache.set(cacheKey, body);
    return { ok: true, body };
  }

  private async parse(kind: QueryKind, bytes: Uint8Array): Promise<QueryParseResult> {
    if (bytes.length <= inlineParseBytesMax) return parseQueryBody(kind, bytes);
    // Copied into a buffer of its own to transfer: uWS's buffer is only valid during the callback.
    const body = new Uint8Array(bytes).buffer;
    return (await this.pool.parseQuery({ kind: "parse-query", queryKind: kind, body })).result;
  }

  /** Runs a plan over [fromMs, toMs), split into user shards when it has enough work, and sums the partials. */
  private async fanOut(
    workspace: WorkspaceStore | undefined,
    query: QueryPlan,
    fromMs: number,
    toMs: number,
    filterKeyIds: number[],
    length: number,
    work: Work,
  ): Promise<Float64Array> {
    const total = new Float64Array(length);
    if (workspace === undefined) return total;
    const { segments } = await this.store.snapshot(workspace.id, fromMs, toMs, filterKeyIds);
    if (segments.length === 0) return total;
    const userCount = workspace.userCount;
    let bounds = [0, userCount];
    const shardCount = this.pool.queryThreadCount;
    if (work.kind !== "active-rows" && shardCount > 1) bounds = scanShardBounds(segments, [work.eventId], userCount, shardCount, fanOutRowsMin, work.kind === "event-rows") ?? bounds;
    const partials = await Promise.all(
      Array.from({ length: bounds.length - 1 }, (_, shard) => this.pool.query({ kind: "query", query, segments, userLo: bounds[shard], userHi: bounds[shard + 1] })),
    );
    for (const partial of partials) for (let index = 0; index < length; index++) total[index] += partial.values[index];
    return total;
  }

  private async trend(workspaceId: string, request: TrendRequest): Promise<ServiceReply> {
    if (!isVersion1Trend(request)) return this.rowsTrend(workspaceId, request);
    const workspace = this.store.workspaces.get(workspaceId);
    const layout = trendLayout(request.dateFrom, request.dateTo, request.groupBy);
    const filters: FilterPlan[] = request.filters.map((filter) => ({ keyId: workspace?.keys.idOf(filter.property), op: filter.op, value: filter.value }));
    // Each key once: an active segment's snapshot lists a key's entries and texts per id listed, on the main thread.
    const filterKeyIds = [...new Set(filters.flatMap((filter) => (filter.keyId === undefined ? [] : [filter.keyId])))];
    const eventId = workspace?.events.idOf(request.event);
    const counts =
      eventId === undefined
        ? new Float64Array(layout.bucketCount)
        : await this.fanOut(
            workspace,
            { kind: "trend", plan: { eventId, layout, filters, math: request.math as CountMath } },
            layout.fromMs,
            layout.toMsExclusive,
            filterKeyIds,
            layout.bucketCount,
            request.groupBy !== "hour" && (filters.length === 0 || (filters.length === 1 && request.math === "total")) ? { kind: "active-rows" } : { kind: "sealed-event-rows", eventId },
          );
    const labels = trendBucketLabels(layout);
    const data = labels.map((date, index) => ({ date, count: counts[index] }));
    return { ok: true, body: JSON.stringify({ data }) };
  }

  private async funnel(workspaceId: string, request: FunnelRequest): Promise<ServiceReply> {
    if (!isVersion1Funnel(request)) return this.rowsFunnel(workspaceId, request);
    const workspace = this.store.workspaces.get(workspaceId);
    const { fromMs: entryFromMs, toMsExclusive: entryToMsExclusive } = zonedRange(request.dateFrom, request.dateTo, zoneClock(request.timezone));
    const windowMs = request.conversionWindow * 1000;
    const stepEventIds = request.steps.map((step) => workspace?.events.idOf(step.event));
    const counts =
      stepEventIds[0] === undefined
        ? new Float64Array(request.steps.length)
        : await this.fanOut(
            workspace,
            { kind: "funnel", plan: { stepEventIds, entryFromMs, entryToMsExclusive, windowMs } },
            entryFromMs,
            entryToMsExclusive + windowMs,
            [],
            request.steps.length,
            { kind: "event-rows", eventId: stepEventIds[0] },
          );
    const entered = counts[0];
    const steps = request.steps.map(({ event }, index) => ({ event, count: counts[index], rate: index === 0 ? 1 : entered === 0 ? 0 : counts[index] / entered }));
    return { ok: true, body: JSON.stringify({ steps }) };
  }

  private async retention(workspaceId: string, request: RetentionRequest): Promise<ServiceReply> {
    if (!isVersion1Retention(request)) return this.rowsRetention(workspaceId, request);
    const workspace = this.store.workspaces.get(workspaceId);
    const layout = retentionLayout(request.dateFrom, request.dateTo, request.windowDays);
    const periods = layout.periodCount;
    const length = periods + (periods * (periods + 1)) / 2;
    const cohortEventId = workspace?.events.idOf(request.cohortEvent.event);
    const retentionEventId = workspace?.events.idOf(request.retentionEvent.event);
    const values =
      cohortEventId === undefined
        ? new Float64Array(length)
        : await this.fanOut(
            workspace,
            { kind: "retention", plan: { cohortEventId, retentionEventId, fromMs: layout.fromMs, periodMs: layout.periodMs, periodCount: periods, toMsExclusive: layout.toMsExclusive } },
            layout.fromMs,
            layout.toMsExclusive,
            [],
            length,
            retentionCountsByPair(periods) ? { kind: "active-rows" } : { kind: "event-rows", eventId: cohortEventId },
          );
    const labels = retentionPeriodLabels(layout);
    let cursor = periods;
    const cohorts = labels.map((cohortDate, period) => {
      const weeks = Array.from(values.subarray(cursor, cursor + periods - period));
      cursor += periods - period;
      return { cohortDate, total: values[period], weeks };
    });
    return { ok: true, body: JSON.stringify({ cohorts }) };
  }

  /**
   * Gathers the rows of [gather.fromMs, gather.toMsExclusive) and answers
   * them: in user shards over the pool when there are enough rows and the
   * shards' answers merge (rows-shards.ts), else in one task.
   */
  private async runRows(workspace: WorkspaceStore | undefined, gather: GatherPlan, answer: RowsAnswerPlan, keyIds: Set<number>): Promise<RowsAnswer> {
    return this.runRowsOn(await this.rowsSnapshot(workspace, gather, keyIds), workspace, gather, answer);
  }

  private async rowsSnapshot(workspace: WorkspaceStore | undefined, gather: GatherPlan, keyIds: Set<number>): Promise<Snapshot> {
    return workspace === undefined ? { segments: [], rowCount: 0 } : await this.store.snapshot(workspace.id, gather.fromMs, gather.toMsExclusive, [...keyIds]);
  }

  /** A rows query over the segments of one snapshot. */
  private async runRowsOn({ segments, rowCount }: Snapshot, workspace: WorkspaceStore | undefined, gather: GatherPlan, answer: RowsAnswerPlan): Promise<RowsAnswer> {
    const userCount = workspace?.userCount ?? 0;
    const run = async (plan: RowsAnswerPlan, userLo: number, userHi: number): Promise<RowsAnswer> => {
      const result = await this.pool.query({ kind: "query", query: { kind: "rows", gather: { ...gather, userCount }, answer: plan }, segments, userLo, userHi });
      if (result.rows === undefined || result.rows.kind !== plan.kind) throw new Error(`a rows task answered ${result.rows?.kind}, expected ${plan.kind}`);
      return result.rows;
    };
    if (answer.kind === "trend" && countsAnswer(gather, answer) && segments.length <= mainThreadCountsSegmentsMax && segments.every((segment) => segment.kind === "sealed")) {
      // Sealed days' value counts alone: answered here, without a worker's round trip (~0.4 ms, more than the sums).
      const local = trendFromCountsOnly(ownedSegmentViews(segments), { ...gather, userCount }, answer.plan, 0, userCount);
      if (local !== undefined) return { kind: "trend", answer: local };
    }
    const shardCount = this.pool.queryThreadCount;
    const bounds = !(shardCount > 1 && shardable(answer)) || countsAnswer(gather, answer) || dayPartsAnswer(segments, gather, answer, referencedEventIds(gather))
      ? undefined
      : answer.kind === "funnel"
        ? rowCount >= limits.rowsQueryShardRowsMin
          ? scanShardBounds(segments, referencedEventIds(gather), userCount, shardCount, 0, true)
          : undefined
        : scanShardBounds(segments, referencedEventIds(gather), userCount, shardCount, limits.rowsQueryShardRowsMin, true, answer.kind === "retention" ? retentionRowsPerUserSlot : 0);
    if (bounds !== undefined) {
      const plan = shardPlan(answer);
      const shards = await Promise.all(Array.from({ length: bounds.length - 1 }, (_, shard) => run(plan, bounds[shard], bounds[shard + 1])));
      const merged = mergeRowsShards(answer, shards);
      if (merged !== undefined) return merged;
    }
    return run(answer, 0, userCount);
  }

  private async rowsTrend(workspaceId: string, request: TrendRequest): Promise<ServiceReply> {
    const workspace = this.store.workspaces.get(workspaceId);
    const boundaries = zonedTrendBoundaries(request.dateFrom, request.dateTo, request.groupBy, zoneClock(request.timezone), limits.trendBucketsMax);
    if (boundaries === undefined) {
      const failure = tooManyBuckets(limits.trendBucketsMax + 1, request.groupBy);
      return { ok: false, error: { code: "invalid_request", message: failure.message } };
    }
    const { startsMs, labels } = boundaries;
    const resolver = new Resolver(workspace);
    const gather: GatherPlan = {
      fromMs: startsMs[0],
      toMsExclusive: startsMs[startsMs.length - 1],
      references: [resolver.reference({ event: request.event, filters: request.eventFilters }, request.filters)],
      allEvents: false,
      breakdown: resolver.property(request.breakdown?.property),
      math: resolver.property(request.mathProperty),
    };
    const plan: TrendSeriesPlan = { startsMs, math: request.math, breakdownLimit: request.breakdown?.limit };
    if (plan.math === "avg_per_user" && plan.breakdownLimit === undefined) return { ok: true, body: trendRowsBody(request, labels, await this.eventsPerUser(workspace, gather, plan, resolver.keyIds)) };
    const rows = await this.runRows(workspace, gather, { kind: "trend", plan }, resolver.keyIds);
    if (rows.kind !== "trend") throw new Error("unreachable");
    return { ok: true, body: trendRowsBody(request, labels, rows.answer) };
  }

  /**
   * avg_per_user without breakdown: events and distinct users per bucket over
   * one snapshot, divided (0 where no user). Each of the two is a trend the
   * workers answer in shards and from their fast paths; the average itself
   * does not merge across shards and ran in one task over every row.
   */
  private async eventsPerUser(workspace: WorkspaceStore | undefined, gather: GatherPlan, plan: TrendSeriesPlan, keyIds: Set<number>): Promise<TrendSeriesAnswer> {
    const snapshot = await this.rowsSnapshot(workspace, gather, keyIds);
    const [events, users] = await Promise.all(
      (["total", "unique"] as const).map(async (math) => {
        const rows = await this.runRowsOn(snapshot, workspace, gather, { kind: "trend", plan: { ...plan, math } });
        if (rows.kind !== "trend") throw new Error("unreachable");
        return rows.answer.values as number[];
      }),
    );
    return { values: events.map((count, bucket) => (users[bucket] === 0 ? 0 : count / users[bucket])), series: undefined, other: undefined };
  }

  private async rowsFunnel(workspaceId: string, request: FunnelRequest): Promise<ServiceReply> {
    const workspace = this.store.workspaces.get(workspaceId);
    const { fromMs, toMsExclusive } = zonedRange(request.dateFrom, request.dateTo, zoneClock(request.timezone));
    const windowMs = request.conversionWindow * 1000;
    const resolver = new Resolver(workspace);
    const references = [
      ...request.steps.map((step) => resolver.reference(step, request.filters)),
      ...request.exclusions.map((exclusion) => resolver.reference(exclusion.event, request.filters)),
    ];
    const gather: GatherPlan = {
      fromMs,
      toMsExclusive: Math.max(fromMs, toMsExclusive + windowMs),
      references,
      allEvents: request.order === "strict",
      breakdown: resolver.property(request.breakdown?.property),
      math: { kind: "none" },
    };
    const rows = await this.runRows(workspace, gather, { kind: "funnel", plan: funnelChainsPlanOf(request, fromMs, toMsExclusive) }, resolver.keyIds);
    if (rows.kind !== "funnel") throw new Error("unreachable");
    return { ok: true, body: funnelRowsBody(request, rows.answer) };
  }

  private async rowsRetention(workspaceId: string, request: RetentionRequest): Promise<ServiceReply> {
    const workspace = this.store.workspaces.get(workspaceId);
    const clock = zoneClock(request.timezone);
    const { startsMs, labels } = zonedRetentionBoundaries(request.dateFrom, request.dateTo, request.windowDays, clock);
    const dayStartsMs = zonedDayStarts(request.dateFrom, request.dateTo, clock, retentionDayStartsMax);
    const resolver = new Resolver(workspace);
    const gather: GatherPlan = {
      fromMs: startsMs[0],
      toMsExclusive: startsMs[startsMs.length - 1],
      references: [resolver.reference(request.cohortEvent, request.filters), resolver.reference(request.retentionEvent, request.filters)],
      allEvents: false,
      breakdown: resolver.property(request.breakdown?.property),
      math: { kind: "none" },
    };
    const rows = await this.runRows(workspace, gather, { kind: "retention", plan: { startsMs, breakdownLimit: request.breakdown?.limit, dayStartsMs } }, resolver.keyIds);
    if (rows.kind !== "retention") throw new Error("unreachable");
    return { ok: true, body: retentionRowsBody(labels, rows.answer) };
  }
}

// ---------------------------------------------------------------------------
// SPEC §7 queries: rows gathered and answered in one task

/** What a SPEC §7 query reads, resolved against one workspace's dictionaries. */
class Resolver {
  /** Property keys to describe in active segments' snapshots. */
  readonly keyIds = new Set<number>();

  constructor(private readonly workspace: WorkspaceStore | undefined) {}

  filters(filters: readonly PropertyFilter[]): FilterPlan[] {
    return filters.map((filter) => ({ keyId: this.key(filter.property), op: filter.op, value: filter.value }));
  }

  reference(reference: EventReference, shared: readonly PropertyFilter[]): ReferencePlan {
    return { eventId: this.workspace?.events.idOf(reference.event), filters: this.filters([...reference.filters, ...shared]) };
  }

  property(name: string | undefined): PropertyRead {
    return name === undefined ? { kind: "none" } : { kind: "key", keyId: this.key(name) };
  }

  private key(name: string): number | undefined {
    const keyId = this.workspace?.keys.idOf(name);
    if (keyId !== undefined) this.keyIds.add(keyId);
    return keyId;
  }
}

/**
 * The answer body of a SPEC §7 trend from its kernel's answer (also the
 * ClickHouse store's), written as text: a breakdown of 25 values by day over 90
 * days is 2 340 entries, and building an object per entry for
 * JSON.stringify took as long as the worker's kernel. Same text as
 * JSON.stringify of the objects.
 */
export function trendRowsBody(request: TrendRequest, labels: readonly string[], answer: TrendSeriesAnswer): string {
  const field = request.math === "total" || request.math === "unique" ? "count" : "value";
  const entryStarts = labels.map((date) => `{"date":${JSON.stringify(date)},"${field}":`);
  const data = (values: BucketValues) => {
    let text = "[";
    for (let index = 0; index < entryStarts.length; index++) {
      const value = values[index];
      text += `${index === 0 ? "" : ","}${entryStarts[index]}${value === null || !Number.isFinite(value) ? "null" : String(value)}}`;
    }
    return `${text}]`;
  };
  let body = `{"data":${data(answer.values)}`;
  if (answer.series !== undefined) body += `,"breakdown":[${answer.series.map((series) => `{"value":${JSON.stringify(series.value)},"data":${data(series.values)}}`).join(",")}]`;
  if (answer.other !== undefined) body += `,"breakdownOther":{"data":${data(answer.other)}}`;
  return `${body}}`;
}

export function funnelChainsPlanOf(request: FunnelRequest, fromMs: number, toMsExclusive: number): FunnelChainsPlan {
  return {
    stepCount: request.steps.length,
    exclusions: request.exclusions.map(({ fromStep, toStep }) => ({ fromStep, toStep })),
    order: request.order,
    entryFromMs: fromMs,
    entryToMsExclusive: toMsExclusive,
    windowMs: request.conversionWindow * 1000,
    timeToConvert: request.timeToConvert,
    breakdownLimit: request.breakdown?.limit,
  };
}

export function funnelRowsBody(request: FunnelRequest, answer: FunnelChainsAnswer): string {
  const events = request.steps.map((step) => step.event);
  const body: Record<string, unknown> = { steps: stepEntries(events, answer.all) };
  if (answer.series !== undefined) body.breakdown = answer.series.map((series) => ({ value: series.value, steps: stepEntries(events, series.steps) }));
  if (answer.other !== undefined) body.breakdownOther = { steps: stepEntries(events, answer.other) };
  return JSON.stringify(body);
}

export function retentionRowsBody(labels: readonly string[], answer: RetentionCohortsAnswer): string {
  const body: Record<string, unknown> = { cohorts: cohortEntries(labels, answer.all) };
  if (answer.series !== undefined) body.breakdown = answer.series.map((series) => ({ value: series.value, cohorts: cohortEntries(labels, series.counts) }));
  if (answer.other !== undefined) body.breakdownOther = { cohorts: cohortEntries(labels, answer.other) };
  return JSON.stringify(body);
}

function stepEntries(events: readonly string[], counts: StepCounts): Array<Record<string, unknown>> {
  const entered = counts.counts[0];
  return events.map((event, index) => {
    const step: Record<string, unknown> = { event, count: counts.counts[index], rate: index === 0 ? 1 : entered === 0 ? 0 : counts.counts[index] / entered };
    if (counts.medians !== undefined && index > 0) {
      step.medianTimeToConvertMs = counts.medians[index - 1];
      step.avgTimeToConvertMs = counts.averages![index - 1];
    }
    return step;
  });
}

function cohortEntries(labels: readonly string[], counts: CohortCounts): Array<{ cohortDate: string; total: number; weeks: number[] }> {
  return labels.map((cohortDate, period) => ({ cohortDate, total: counts.totals[period], weeks: counts.weeks[period] }));
}

/** Past every instant a Date holds: a listing's snapshot spans every day. */
const wholeTimeMs = 8.64e15 + dayMs;

/** The events a §7 trend or retention reads the rows of (column-scan.ts). */
function referencedEventIds(gather: GatherPlan): number[] {
  return [...new Set(gather.references.map((reference) => reference.eventId).filter((eventId) => eventId !== undefined))];
}

function activeRowCount(descriptors: readonly SegmentDescriptor[]): number {
  let rows = 0;
  for (const descriptor of descriptors) if (descriptor.kind === "active") rows += descriptor.rowCount;
  return rows;
}

/**
 * User shards for a scan of the sealed rows of `eventIds` and, with
 * `scansActiveRows`, every active row, not every row of the range (a rare
 * event over a busy range has few rows to read); undefined under `rowsMin`
 * rows (one task). Cut into equal shares of the first event's sealed rows
 * when they are most of the reading (low user ids are the busiest users),
 * else into equal user ranges: active rows are scanned whole by every shard,
 * so they do not tell where to cut.
 */
function scanShardBounds(
  descriptors: readonly SegmentDescriptor[],
  eventIds: readonly number[],
  userCount: number,
  shardCount: number,
  rowsMin: number,
  scansActiveRows: boolean,
  rowsPerUserSlot = 0,
): number[] | undefined {
  const activeRows = scansActiveRows ? activeRowCount(descriptors) : 0;
  const views = ownedSegmentViews(descriptors);
  let sealedRows = 0;
  for (const eventId of eventIds) sealedRows += sealedEventRowCount(views, eventId);
  if (sealedRows + activeRows < rowsMin) return undefined;
  return eventIds.length > 0 && sealedRows >= activeRows ? shardBoundsByRows(views, eventIds[0], userCount, shardCount, rowsPerUserSlot) : evenShardBounds(userCount, shardCount);
}

/**
 * What a §7 retention's user id costs, in rows: its kernels keep arrays over
 * the shard's id range and each user's first row goes further than the rest,
 * so cut by rows alone the shard of late ids (few rows each) ran longest. A
 * funnel's cost is its candidates' rows: the same weight made it slower.
 */
const retentionRowsPerUserSlot = 4;

/** A retention over more local days than this (ten years) cuts days at its periods' starts only: its day list would outweigh what it saves. */
const retentionDayStartsMax = 3_660;

function evenShardBounds(userCount: number, shardCount: number): number[] {
  return Array.from({ length: shardCount + 1 }, (_, shard) => Math.round((shard * userCount) / shardCount));
}

/**
 * Cuts [0, userCount) into shardCount ranges holding about as many sealed rows
 * of eventId each, each user id counting as `rowsPerUserSlot` more: a
 * bisection over user ids, each step counting the rows below an id by one
 * binary search per segment (sealed rows of an event are sorted by user).
 * ~12 steps × 90 segments × 17 reads: ~0.2 ms.
 */
function shardBoundsByRows(segments: readonly SegmentView[], eventId: number, userCount: number, shardCount: number, rowsPerUserSlot: number): number[] {
  const sealed = segments.filter((segment) => segment.eventRowStart !== undefined && eventId + 1 < segment.eventRowStart.length);
  const rowsBelow = (user: number) => {
    let rows = rowsPerUserSlot * user;
    for (const segment of sealed) {
      const start = segment.eventRowStart![eventId];
      rows += lowerBoundUser(segment.userIds, start, segment.eventRowStart![eventId + 1], user) - start;
    }
    return rows;
  };
  const totalRows = rowsBelow(userCount);
  const bounds = [0];
  for (let shard = 1; shard < shardCount; shard++) {
    const targetRows = (totalRows * shard) / shardCount;
    // About the first user id below which targetRows rows lie: a bound within
    // 1/256 of the id range balances well enough, in 8 fewer steps than an exact one.
    let low = bounds[shard - 1];
    let high = userCount;
    const precision = Math.max(1, Math.floor(userCount / 256));
    while (high - low > precision) {
      const middle = Math.floor((low + high) / 2);
      if (rowsBelow(middle) < targetRows) low = middle + 1;
      else high = middle;
    }
    bounds.push(low);
  }
  bounds.push(userCount);
  return bounds;
}

/**
 * Sealed segments a sum answered on the main thread may span. Its first query
 * decodes each segment's column there (a sparse key into a dense one, kept
 * while the segment is loaded): 90 days of 10 M events held the main thread
 * 11 ms once. Longer ranges go to a worker, whose views count against its
 * cache budget.
 */
const mainThreadCountsSegmentsMax = 120;

/**
 * A trend whose days all lie whole in their buckets and whose math reads
 * value counts (trend-columns.ts): one task, since active segments' counts
 * answer only a task that covers every user, and the rest is per-value
 * arithmetic that shards would each repeat.
 */
function countsAnswer(gather: GatherPlan, answer: RowsAnswerPlan): boolean {
  if (answer.kind !== "trend" || !mathFromValueCounts(gather, answer.plan)) return false;
  return answer.plan.startsMs.every((startMs) => startMs % dayMs === 0);
}

/**
 * A trend total or unique of one event without filters or breakdown, in a
 * zone whose boundaries cut each day into few parts (trend-day-parts.ts): one
 * task, since a sealed part's users are kept over all users and each shard
 * would union the same bitmaps again.
 */
function dayPartsAnswer(segments: readonly SegmentDescriptor[], gather: GatherPlan, answer: RowsAnswerPlan, eventIds: readonly number[]): boolean {
  if (answer.kind !== "trend" || !trendDayPartsApplies(gather, answer.plan)) return false;
  const partCounts = segments.map((segment) => dayParts(answer.plan.startsMs, segment.dayStartMs).length);
  if (!partCounts.every(dayPartsFit)) return false;
  // A breakdown over mostly active rows, or many segments a day, is scanned in shards instead (trend-day-parts.ts).
  if (answer.plan.breakdownLimit === undefined || eventIds.length === 0) return true;
  const inRange = segments.filter((_, index) => partCounts[index] > 0);
  return breakdownFromDayParts(inRange, sealedEventRowCount(ownedSegmentViews(inRange), eventIds[0]), activeRowCount(inRange));
}
