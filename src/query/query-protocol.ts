/**
 * Query tasks: a plan (ids already resolved against the workspace
 * dictionaries), the segments to read, and the user-id shard to compute.
 * Results are flat Float64Arrays whose element-wise sum over shards is the
 * answer, because shards hold disjoint users.
 */
import type { PostedSegment } from "../storage/segment-descriptor.js";
import type { GatherPlan } from "./kernels/event-rows.js";
import type { FunnelPlan } from "./kernels/funnel.js";
import type { ListingPlan } from "./kernels/workspace-listing.js";
import type { FunnelChainsAnswer, FunnelChainsPlan } from "./kernels/funnel-chains.js";
import type { RetentionCohortsAnswer, RetentionCohortsPlan } from "./kernels/retention-cohorts.js";
import type { TrendSeriesAnswer, TrendSeriesPlan } from "./kernels/trend-series.js";
import type { RetentionPlan } from "./kernels/retention.js";
import type { TrendPlan } from "./kernels/trend.js";
import type { QueryKind, QueryParseResult } from "./schemas.js";

export type QueryPlan =
  | { kind: "trend"; plan: TrendPlan }
  | { kind: "funnel"; plan: FunnelPlan }
  | { kind: "retention"; plan: RetentionPlan }
  | { kind: "rows"; gather: GatherPlan; answer: RowsAnswerPlan }
  | { kind: "listing"; plan: ListingPlan };

/** SPEC §7 queries: gathered rows (event-rows.ts), then one of these kernels over them. */
export type RowsAnswerPlan =
  | { kind: "trend"; plan: TrendSeriesPlan }
  | { kind: "funnel"; plan: FunnelChainsPlan }
  | { kind: "retention"; plan: RetentionCohortsPlan };

export type RowsAnswer =
  | { kind: "trend"; answer: TrendSeriesAnswer }
  | { kind: "funnel"; answer: FunnelChainsAnswer }
  | { kind: "retention"; answer: RetentionCohortsAnswer };

export interface QueryTask {
  kind: "query";
  query: QueryPlan;
  segments: PostedSegment[];
  userLo: number;
  userHi: number;
}

export interface QueryTaskResult {
  kind: "query";
  values: Float64Array;
  /** The answer of a "rows" plan (values is then empty). */
  rows?: RowsAnswer;
}

/** A task's worker held no view of these referenced segments (it started after they were posted, or dropped them): post them again whole. */
export interface SegmentsMissingResult {
  kind: "segments-missing";
  keys: string[];
}

/** A large query body, parsed and validated off the main thread (see QueryService.parse). */
export interface ParseQueryTask {
  kind: "parse-query";
  queryKind: QueryKind;
  /** Transferred. */
  body: ArrayBuffer;
}

export interface ParseQueryTaskResult {
  kind: "parse-query";
  result: QueryParseResult;
}
