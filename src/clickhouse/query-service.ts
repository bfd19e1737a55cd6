/**
 * Queries over the ClickHouse store: the same validation and answers as the
 * embedded store's QueryService. Where a query's fields translate exactly,
 * ClickHouse aggregates (trend-sql.ts, retention-sql.ts, funnel-sql.ts; each
 * lists what it leaves out). Otherwise ClickHouse selects the rows the query
 * reads (its workspace, its time range, its event names, the property texts
 * its filters, breakdown and math look at) with one SELECT whose names and
 * values are escaped literals; Eventide then builds the same event rows the
 * embedded store gathers (reference masks through the same compiled filters,
 * breakdown values, math numbers parsed as SPEC §7.4 says) and answers with
 * the same SPEC §7 kernels. Either way ClickHouse never applies a time zone.
 *
 * | query     | aggregated in ClickHouse                              | kernel path (rows selected)                                 |
 * |-----------|-------------------------------------------------------|-------------------------------------------------------------|
 * | trend     | every math, breakdowns, zones, filters               | a slot table over the slots limit; a gt/gte/lt/lte filter   |
 * |           |                                                       | on a property of too many numeric texts                     |
 * | retention | everything, breakdowns included                       | as the trend                                                |
 * | funnel    | ordered, strict, unordered; breakdowns, zones,         | other exclusions; one name in steps with different filters; |
 * |           | filters, timeToConvert; a repeated step (same filters) | strict with a repeated step; a comparison filter as the     |
 * |           | except with strict; exclusions of distinct steps that  | trend's; many steps (limits.ts); funnel-sql.ts says why     |
 * |           | name no step's event, any ranges                       |                                                             |
 *
 * eventide_clickhouse_queries_total counts the queries by path.
 */
import { limits } from "../config/limits.js";
import type { ServiceReply } from "../errors.js";
import { log } from "../log.js";
import { clickhouseQueries } from "../metrics.js";
import { zonedRange, zonedRetentionBoundaries, zonedTrendBoundaries } from "../query/buckets.js";
import { compileFilter, numericPattern, type FilterOp } from "../query/filters.js";
import type { EventRows } from "../query/kernels/event-rows.js";
import { funnelChains } from "../query/kernels/funnel-chains.js";
import { retentionCohorts } from "../query/kernels/retention-cohorts.js";
import { trendSeries } from "../query/kernels/trend-series.js";
import { funnelChainsPlanOf, funnelRowsBody, retentionRowsBody, trendRowsBody } from "../query/query-service.js";
import { parseQueryBody, tooManyBuckets, type EventReference, type FunnelRequest, type PropertyFilter, type QueryKind, type QueryParseResult } from "../query/schemas.js";
import { zoneClock } from "../query/time-zone.js";
import type { WorkerPool } from "../workers/pool.js";
import type { ClickHouseSettings } from "../config/config.js";
import { parseUserDeletionBody } from "../query/user-deletion.js";
import { ClickHouseClient, ClickHouseError, sqlIdentifier, sqlString } from "./client.js";
import { deleteClickHouseUser } from "./deletions.js";
import { funnelBySql, funnelSqlPlan, funnelTranslates } from "./funnel-sql.js";
import { retentionBySql, retentionSqlPlan } from "./retention-sql.js";
import { eventsTable } from "./schema.js";
import { comparisonTexts, type ComparisonTexts } from "./sql-parts.js";
import { trendBySql, trendSqlPlan } from "./trend-sql.js";

function countPath(query: QueryKind, funnel: FunnelRequest | undefined, bySql: boolean): void {
  const steps = funnel === undefined ? "" : new Set(funnel.steps.map((step) => step.event)).size < funnel.steps.length ? "repeated" : "distinct";
  const exclusions = funnel === undefined ? "" : funnel.exclusions.length > 0 ? "some" : "none";
  clickhouseQueries.inc({ query, order: funnel?.order ?? "", steps, exclusions, path: bySql ? "sql" : "rows" });
}

/** Bodies up to this size are parsed on the main thread, as QueryService does. */
const inlineParseBytesMax = 16 * 1024;

/** What a query reads: references (bit i: reference i), and optionally every event, a breakdown and a math property. */
interface RowsRequest {
  fromMs: number;
  toMsExclusive: number;
  references: ReadonlyArray<{ event: string; filters: readonly PropertyFilter[] }>;
  allEvents: boolean;
  breakdown: string | undefined;
  math: string | undefined;
}

/** One property's texts as read for a query: a dictionary (id 0: not set) and each row's id. */
class PropertyColumn {
  readonly texts: string[] = [""];
  private readonly ids = new Map<string, number>();

  idOf(text: string | null): number {
    if (text === null) return 0;
    let id = this.ids.get(text);
    if (id === undefined) {
      id = this.texts.length;
      this.ids.set(text, id);
      this.texts.push(text);
    }
    return id;
  }
}

export class ClickHouseQueryService {
  private readonly client: ClickHouseClient;
  private readonly table: string;

  constructor(
    private readonly pool: WorkerPool,
    private readonly settings: ClickHouseSettings,
    /** Resolves once every acknowledged event is in ClickHouse: a user deletion covers them all. */
    private readonly drained: () => Promise<void>,
  ) {
    this.client = new ClickHouseClient(settings.url, settings.user, settings.password, limits.clickhouseRequestTimeoutMs);
    this.table = `${sqlIdentifier(settings.database)}.${eventsTable}`;
  }

  /** Answers are not cached: ClickHouse answers retention from its own caches. */
  get retentionCacheBytes(): number {
    return 0;
  }

  async run(kind: QueryKind, workspaceId: string, bytes: Uint8Array): Promise<ServiceReply> {
    const parsed = await this.parse(kind, bytes);
    if (!parsed.ok) return parsed;
    return this.answering(async () => {
      const query = parsed.query;
      switch (query.kind) {
        case "trend": {
          const request = query.request;
          const boundaries = zonedTrendBoundaries(request.dateFrom, request.dateTo, request.groupBy, zoneClock(request.timezone), limits.trendBucketsMax);
          if (boundaries === undefined) return { ok: false, error: { code: "invalid_request", message: tooManyBuckets(limits.trendBucketsMax + 1, request.groupBy).message } };
          const { startsMs, labels } = boundaries;
          const comparisons = await this.comparisons(workspaceId, startsMs[0], startsMs[startsMs.length - 1], [...request.eventFilters, ...request.filters]);
          const plan = trendSqlPlan(this.table, workspaceId, request, startsMs, comparisons);
          countPath("trend", undefined, plan !== undefined);
          if (plan !== undefined) return { ok: true, body: trendRowsBody(request, labels, await trendBySql((sql) => this.client.rows(sql), request, plan)) };
          const rows = await this.gather(workspaceId, {
            fromMs: startsMs[0],
            toMsExclusive: startsMs[startsMs.length - 1],
            references: [{ event: request.event, filters: [...request.eventFilters, ...request.filters] }],
            allEvents: false,
            breakdown: request.breakdown?.property,
            math: request.mathProperty,
          });
          return { ok: true, body: trendRowsBody(request, labels, trendSeries(rows, { startsMs, math: request.math, breakdownLimit: request.breakdown?.limit })) };
        }
        case "funnel": {
          const request = query.request;
          const { fromMs, toMsExclusive } = zonedRange(request.dateFrom, request.dateTo, zoneClock(request.timezone));
          const filters = [...request.steps.flatMap((step) => step.filters), ...request.exclusions.flatMap((exclusion) => exclusion.event.filters), ...request.filters];
          const comparisons = funnelTranslates(request) ? await this.comparisons(workspaceId, fromMs, Math.max(fromMs, toMsExclusive + request.conversionWindow * 1000), filters) : new Map();
          const sql = funnelSqlPlan(this.table, workspaceId, request, fromMs, toMsExclusive, comparisons);
          countPath("funnel", request, sql !== undefined);
          if (sql !== undefined) return { ok: true, body: funnelRowsBody(request, await funnelBySql((text) => this.client.rows(text), request, sql)) };
          const withShared = (reference: EventReference) => ({ event: reference.event, filters: [...reference.filters, ...request.filters] });
          const rows = await this.gather(workspaceId, {
            fromMs,
            toMsExclusive: Math.max(fromMs, toMsExclusive + request.conversionWindow * 1000),
            references: [...request.steps.map(withShared), ...request.exclusions.map((exclusion) => withShared(exclusion.event))],
            allEvents: request.order === "strict",
            breakdown: request.breakdown?.property,
            math: undefined,
          });
          return { ok: true, body: funnelRowsBody(request, funnelChains(rows, funnelChainsPlanOf(request, fromMs, toMsExclusive))) };
        }
        case "retention": {
          const request = query.request;
          const { startsMs, labels } = zonedRetentionBoundaries(request.dateFrom, request.dateTo, request.windowDays, zoneClock(request.timezone));
          const filters = [...request.cohortEvent.filters, ...request.retentionEvent.filters, ...request.filters];
          const comparisons = await this.comparisons(workspaceId, startsMs[0], startsMs[startsMs.length - 1], filters);
          const plan = retentionSqlPlan(this.table, workspaceId, request, startsMs, comparisons);
          countPath("retention", undefined, plan !== undefined);
          if (plan !== undefined) return { ok: true, body: retentionRowsBody(labels, await retentionBySql((sql) => this.client.rows(sql), request, plan)) };
          const withShared = (reference: EventReference) => ({ event: reference.event, filters: [...reference.filters, ...request.filters] });
          const rows = await this.gather(workspaceId, {
            fromMs: startsMs[0],
            toMsExclusive: startsMs[startsMs.length - 1],
            references: [withShared(request.cohortEvent), withShared(request.retentionEvent)],
            allEvents: false,
            breakdown: request.breakdown?.property,
            math: undefined,
          });
          return { ok: true, body: retentionRowsBody(labels, retentionCohorts(rows, { startsMs, breakdownLimit: request.breakdown?.limit })) };
        }
      }
    });
  }

  /** POST /api/v1/users/delete: an awaited ALTER … DELETE (user-deletion.ts). */
  async deleteUser(workspaceId: string, bytes: Uint8Array): Promise<ServiceReply> {
    const parsed = parseUserDeletionBody(bytes);
    if (!parsed.ok) return parsed;
    return this.answering(async () => {
      const { deletedEvents } = await deleteClickHouseUser(this.settings, this.drained, workspaceId, parsed.distinctId);
      return { ok: true, body: JSON.stringify({ ok: true, deletedEvents }) };
    });
  }

  /** GET /api/v1/events (SPEC §7.6). */
  async listEvents(workspaceId: string): Promise<ServiceReply> {
    return this.answering(async () => {
      const rows = await this.client.rows(`SELECT event, count() FROM ${this.table} WHERE workspace = ${sqlString(workspaceId)} GROUP BY event`);
      return { ok: true, body: listingBody(rows, "event") };
    });
  }

  /** GET /api/v1/properties?event=NAME (SPEC §7.6). */
  async listProperties(workspaceId: string, event: string | undefined): Promise<ServiceReply> {
    return this.answering(async () => {
      const eventCondition = event === undefined ? "" : ` AND event = ${sqlString(event)}`;
      const rows = await this.client.rows(
        `SELECT key, count() FROM ${this.table} ARRAY JOIN prop_keys AS key WHERE workspace = ${sqlString(workspaceId)}${eventCondition} GROUP BY key`,
      );
      return { ok: true, body: listingBody(rows, "property") };
    });
  }

  /** The passing texts of a query's comparison filters; none (the row path) when a property has too many. */
  private async comparisons(workspaceId: string, fromMs: number, toMsExclusive: number, filters: readonly PropertyFilter[]): Promise<ComparisonTexts> {
    return (await comparisonTexts((sql) => this.client.rows(sql), this.table, workspaceId, fromMs, toMsExclusive, filters)) ?? new Map();
  }

  /** An unreachable or failing ClickHouse answers 503: the query may be retried. */
  private async answering(work: () => Promise<ServiceReply>): Promise<ServiceReply> {
    try {
      return await work();
    } catch (error) {
      if (!(error instanceof ClickHouseError)) throw error;
      log.error({ err: error.message }, "ClickHouse query failed");
      return { ok: false, error: { code: "unavailable", message: "the ClickHouse store did not answer; retry later" } };
    }
  }

  private async parse(kind: QueryKind, bytes: Uint8Array): Promise<QueryParseResult> {
    if (bytes.length <= inlineParseBytesMax) return parseQueryBody(kind, bytes);
    const body = new Uint8Array(bytes).buffer;
    return (await this.pool.parseQuery({ kind: "parse-query", queryKind: kind, body })).result;
  }

  /** The rows a query reads, as the kernels take them. */
  private async gather(workspaceId: string, request: RowsRequest): Promise<EventRows> {
    // Every property the query looks at, each once: column i + 3 of the answer holds its text (NULL: not set).
    const keys: string[] = [];
    const keyColumn = (name: string) => {
      let index = keys.indexOf(name);
      if (index < 0) index = keys.push(name) - 1;
      return index;
    };
    const references = request.references.map((reference) => ({
      event: reference.event,
      filters: reference.filters.map((filter) => ({ column: keyColumn(filter.property), op: filter.op, value: filter.value })),
    }));
    const breakdownColumn = request.breakdown === undefined ? undefined : keyColumn(request.breakdown);
    const mathColumn = request.math === undefined ? undefined : keyColumn(request.math);
    const names = [...new Set(references.map((reference) => reference.event))];
    const texts = keys.map((key) => `if(has(prop_keys, ${sqlString(key)}), prop_values[indexOf(prop_keys, ${sqlString(key)})], NULL)`);
    const conditions = [
      `workspace = ${sqlString(workspaceId)}`,
      `day >= ${Math.floor(request.fromMs / 86_400_000)} AND day <= ${Math.floor((request.toMsExclusive - 1) / 86_400_000)}`,
      `time_ms >= ${request.fromMs} AND time_ms < ${request.toMsExclusive}`,
    ];
    if (!request.allEvents) conditions.push(`event IN (${names.length === 0 ? "''" : names.map(sqlString).join(",")})`);
    if (!request.allEvents && names.length === 0) return emptyRows();
    const answer = await this.client.rows(`SELECT user, time_ms, event${texts.map((text) => `, ${text}`).join("")} FROM ${this.table} WHERE ${conditions.join(" AND ")}`);

    const columns = keys.map(() => new PropertyColumn());
    const valueIds = keys.map(() => new Int32Array(answer.length));
    for (let row = 0; row < answer.length; row++) {
      for (let key = 0; key < keys.length; key++) valueIds[key][row] = columns[key].idOf(answer[row][3 + key] as string | null);
    }
    // Filters compiled once per (property, op, value) over the texts read, as the embedded store compiles them per segment.
    const compiled = new Map<string, Uint8Array>();
    const passes = (column: number, op: FilterOp, value: string | undefined) => {
      const cacheKey = `${column}\u0000${op}\u0000${value ?? ""}`;
      let table = compiled.get(cacheKey);
      if (table === undefined) compiled.set(cacheKey, (table = compileFilter(columns[column].texts, op, value).passes));
      return table;
    };
    const referencePasses = references.map((reference) => reference.filters.map((filter) => ({ column: filter.column, passes: passes(filter.column, filter.op, filter.value) })));

    const users = new Map<string, number>();
    const rows = emptyRows(answer.length);
    let count = 0;
    const numbers = mathColumn === undefined ? undefined : columns[mathColumn].texts.map((text, id) => (id > 0 && numericPattern.test(text) && Number.isFinite(Number(text)) ? Number(text) : NaN));
    for (let row = 0; row < answer.length; row++) {
      const [user, timeMs, event] = answer[row] as [string, number, string];
      let mask = 0;
      for (let bit = 0; bit < references.length; bit++) {
        if (references[bit].event !== event) continue;
        let holds = true;
        for (const filter of referencePasses[bit]) if (filter.passes[valueIds[filter.column][row]] !== 1) holds = false;
        if (holds) mask |= 1 << bit;
      }
      if (mask === 0 && !request.allEvents) continue;
      let userId = users.get(user);
      if (userId === undefined) users.set(user, (userId = users.size));
      rows.users[count] = userId;
      rows.timesMs[count] = timeMs;
      rows.masks[count] = mask;
      rows.values[count] = breakdownColumn === undefined ? 0 : valueIds[breakdownColumn][row];
      rows.numbers[count] = numbers === undefined ? NaN : numbers[valueIds[mathColumn!][row]];
      count++;
    }
    rows.count = count;
    if (breakdownColumn !== undefined) rows.valueTexts = columns[breakdownColumn].texts;
    return rows;
  }
}

function emptyRows(length = 0): EventRows {
  return {
    count: 0,
    users: new Uint32Array(length),
    timesMs: new Float64Array(length),
    masks: new Uint32Array(length),
    values: new Int32Array(length),
    valueTexts: [""],
    numbers: new Float64Array(length),
  };
}

/** A listing's body: by count descending, then name in JavaScript's order (SPEC §7.6). */
function listingBody(rows: unknown[][], field: string): string {
  const entries = rows.map(([name, count]) => ({ name: name as string, count: Number(count) }));
  entries.sort((left, right) => right.count - left.count || (left.name < right.name ? -1 : left.name > right.name ? 1 : 0));
  return JSON.stringify({ data: entries.map(({ name, count }) => ({ [field]: name, count })) });
}

