/**
 * Main-thread side of a query: parse and validate the body, resolve names to
 * the workspace's ids, take a snapshot of the segments the range touches (rows
 * acknowledged before this moment are in it), fan the work out over the pool
 * by user-id shard, sum the partials and format the answer. Retention answers
 * are cached 60 s per workspace and request (SPEC §4).
 */
import { limits } from "../config/limits.js";
import type { ServiceError } from "../http/errors.js";
import type { IngestReply } from "../ingest/ingest-service.js";
import { parseBody } from "../ingest/event-validation.js";
import type { Store, WorkspaceStore } from "../storage/store.js";
import type { WorkerPool } from "../workers/pool.js";
import { dayMs, retentionLayout, retentionPeriodLabels, trendBucketLabels, trendLayout } from "./buckets.js";
import type { FilterPlan } from "./filters.js";
import type { QueryPlan } from "./query-protocol.js";
import { parseFunnelRequest, parseRetentionRequest, parseTrendRequest, type FunnelRequest, type RetentionRequest, type TrendRequest } from "./schemas.js";
import { ResultCache } from "./result-cache.js";

export type QueryKind = "trend" | "funnel" | "retention";

/** Below this many rows in range a single task answers faster than a fan-out. */
const fanOutRowsMin = 200_000;

export class QueryService {
  private readonly retentionCache = new ResultCache(limits.retentionCacheBytesMax, limits.retentionCacheTtlMs);

  constructor(
    private readonly pool: WorkerPool,
    private readonly store: Store,
  ) {}

  async run(kind: QueryKind, workspaceId: string, bytes: Uint8Array): Promise<IngestReply> {
    const parsed = parseBody(bytes, false, limits.queryBodyBytesMax);
    if (!("value" in parsed)) return { ok: false, error: parsed };
    switch (kind) {
      case "trend": {
        const request = parseTrendRequest(parsed.value);
        return request.ok ? this.trend(workspaceId, request.value) : invalid(request.message);
      }
      case "funnel": {
        const request = parseFunnelRequest(parsed.value);
        return request.ok ? this.funnel(workspaceId, request.value) : invalid(request.message);
      }
      case "retention": {
        const request = parseRetentionRequest(parsed.value);
        if (!request.ok) return invalid(request.message);
        const cacheKey = `${workspaceId}\u0000${JSON.stringify(request.value, ["cohortEvent", "retentionEvent", "dateFrom", "dateTo", "windowDays"])}`;
        const cached = this.retentionCache.get(cacheKey);
        if (cached !== undefined) return { ok: true, body: cached };
        const reply = await this.retention(workspaceId, request.value);
        if (reply.ok) this.retentionCache.set(cacheKey, reply.body);
        return reply;
      }
    }
  }

  /** Runs a plan over [fromMs, toMs) split into user shards and sums the partials. */
  private async fanOut(workspace: WorkspaceStore | undefined, query: QueryPlan, fromMs: number, toMs: number, filterKeyIds: number[], length: number): Promise<Float64Array> {
    const total = new Float64Array(length);
    if (workspace === undefined) return total;
    const { segments, rowCount: rows } = await this.store.snapshot(workspace.id, fromMs, toMs, filterKeyIds);
    if (segments.length === 0) return total;
    const userCount = workspace.userCount;
    const shardCount = rows < fanOutRowsMin ? 1 : this.pool.threadCount;
    const shardUsers = Math.ceil(userCount / shardCount);
    const partials = await Promise.all(
      Array.from({ length: shardCount }, (_, shard) =>
        this.pool.query({ kind: "query", query, segments, userLo: shard * shardUsers, userHi: shard === shardCount - 1 ? userCount : (shard + 1) * shardUsers }),
      ),
    );
    for (const partial of partials) for (let index = 0; index < length; index++) total[index] += partial.values[index];
    return total;
  }

  private async trend(workspaceId: string, request: TrendRequest): Promise<IngestReply> {
    const workspace = this.store.workspaces.get(workspaceId);
    const layout = trendLayout(request.dateFrom, request.dateTo, request.groupBy);
    const filters: FilterPlan[] = request.filters.map((filter) => ({ keyId: workspace?.keys.idOf(filter.property), op: filter.op, value: filter.value }));
    const filterKeyIds = filters.flatMap((filter) => (filter.keyId === undefined ? [] : [filter.keyId]));
    const eventId = workspace?.events.idOf(request.event);
    const counts =
      eventId === undefined
        ? new Float64Array(layout.bucketCount)
        : await this.fanOut(workspace, { kind: "trend", plan: { eventId, layout, filters, math: request.math } }, layout.fromMs, layout.toMsExclusive, filterKeyIds, layout.bucketCount);
    const labels = trendBucketLabels(layout);
    const data = labels.map((date, index) => ({ date, count: counts[index] }));
    return { ok: true, body: JSON.stringify({ data }) };
  }

  private async funnel(workspaceId: string, request: FunnelRequest): Promise<IngestReply> {
    const workspace = this.store.workspaces.get(workspaceId);
    const entryFromMs = Date.parse(`${request.dateFrom}T00:00:00Z`);
    const entryToMsExclusive = Date.parse(`${request.dateTo}T00:00:00Z`) + dayMs;
    const windowMs = request.conversionWindow * 1000;
    const stepEventIds = request.steps.map((step) => workspace?.events.idOf(step));
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
          );
    const entered = counts[0];
    const steps = request.steps.map((event, index) => ({ event, count: counts[index], rate: index === 0 ? 1 : entered === 0 ? 0 : counts[index] / entered }));
    return { ok: true, body: JSON.stringify({ steps }) };
  }

  private async retention(workspaceId: string, request: RetentionRequest): Promise<IngestReply> {
    const workspace = this.store.workspaces.get(workspaceId);
    const layout = retentionLayout(request.dateFrom, request.dateTo, request.windowDays);
    const periods = layout.periodCount;
    const length = periods + (periods * (periods + 1)) / 2;
    const cohortEventId = workspace?.events.idOf(request.cohortEvent);
    const retentionEventId = workspace?.events.idOf(request.retentionEvent);
    const values =
      cohortEventId === undefined
        ? new Float64Array(length)
        : await this.fanOut(workspace, { kind: "retention", plan: { cohortEventId, retentionEventId, fromMs: layout.fromMs, periodMs: layout.periodMs, periodCount: periods, toMsExclusive: layout.toMsExclusive } }, layout.fromMs, layout.toMsExclusive, [], length);
    const labels = retentionPeriodLabels(layout);
    let cursor = periods;
    const cohorts = labels.map((cohortDate, period) => {
      const weeks = Array.from(values.subarray(cursor, cursor + periods - period));
      cursor += periods - period;
      return { cohortDate, total: values[period], weeks };
    });
    return { ok: true, body: JSON.stringify({ cohorts }) };
  }
}

function invalid(message: string): IngestReply {
  const error: ServiceError = { code: "invalid_request", message };
  return { ok: false, error };
}
