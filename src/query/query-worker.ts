/**
 * Worker side of a query task: descriptors → views → one kernel call.
 */
import { assertNever } from "../errors.js";
import { funnelPartial } from "./kernels/funnel.js";
import { retentionPartial } from "./kernels/retention.js";
import { trendPartial } from "./kernels/trend.js";
import type { QueryTask, QueryTaskResult } from "./query-protocol.js";
import { segmentViews } from "./segment-views.js";

export function runQueryTask(task: QueryTask): QueryTaskResult {
  const segments = segmentViews(task.segments);
  const query = task.query;
  switch (query.kind) {
    case "trend":
      return { kind: "query", values: trendPartial(segments, query.plan, task.userLo, task.userHi) };
    case "funnel":
      return { kind: "query", values: funnelPartial(segments, query.plan, task.userLo, task.userHi) };
    case "retention": {
      // Flattened as totals then weeks, so that every kind of partial sums the same way.
      const partial = retentionPartial(segments, query.plan, task.userLo, task.userHi);
      const values = new Float64Array(partial.totals.length + partial.weeks.length);
      values.set(partial.totals);
      values.set(partial.weeks, partial.totals.length);
      return { kind: "query", values };
    }
    default:
      return assertNever(query);
  }
}
