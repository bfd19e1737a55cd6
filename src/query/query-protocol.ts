/**
 * Query tasks: a plan (ids already resolved against the workspace
 * dictionaries), the segments to read, and the user-id shard to compute.
 * Results are flat Float64Arrays whose element-wise sum over shards is the
 * answer, because shards hold disjoint users.
 */
import type { SegmentDescriptor } from "../storage/segment-descriptor.js";
import type { FunnelPlan } from "./kernels/funnel.js";
import type { RetentionPlan } from "./kernels/retention.js";
import type { TrendPlan } from "./kernels/trend.js";
import type { QueryKind, QueryParseResult } from "./schemas.js";

export type QueryPlan =
  | { kind: "trend"; plan: TrendPlan }
  | { kind: "funnel"; plan: FunnelPlan }
  | { kind: "retention"; plan: RetentionPlan };

export interface QueryTask {
  kind: "query";
  query: QueryPlan;
  segments: SegmentDescriptor[];
  userLo: number;
  userHi: number;
}

export interface QueryTaskResult {
  kind: "query";
  values: Float64Array;
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
