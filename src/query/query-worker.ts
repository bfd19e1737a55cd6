/**
 * Worker side of a query task: descriptors → views → one kernel call.
 */
import { assertNever } from "../errors.js";
import { gatherEventRows } from "./kernels/event-rows.js";
import { funnelPartial } from "./kernels/funnel.js";
import { funnelChains } from "./kernels/funnel-chains.js";
import { funnelColumns } from "./kernels/funnel-columns.js";
import { retentionCohorts } from "./kernels/retention-cohorts.js";
import { trendSeries } from "./kernels/trend-series.js";
import { trendColumns } from "./kernels/trend-columns.js";
import { trendDayParts } from "./kernels/trend-day-parts.js";
import { retentionColumns } from "./kernels/retention-columns.js";
import { retentionDayParts } from "./kernels/retention-day-parts.js";
import { workspaceListing } from "./kernels/workspace-listing.js";
import { retentionPartial } from "./kernels/retention.js";
import { trendPartial } from "./kernels/trend.js";
import type { QueryTask, QueryTaskResult, RowsAnswer, RowsAnswerPlan, SegmentsMissingResult } from "./query-protocol.js";
import type { EventRows, GatherPlan } from "./kernels/event-rows.js";
import type { SegmentView } from "./segment-view.js";
import { segmentViews } from "./segment-views.js";

export function runQueryTask(task: QueryTask): QueryTaskResult | SegmentsMissingResult {
  const viewed = segmentViews(task.segments);
  if (viewed.kind === "missing") return { kind: "segments-missing", keys: viewed.keys };
  const segments = viewed.views;
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
    case "rows": {
      const fast = answerColumns(segments, query.gather, query.answer, task.userLo, task.userHi);
      if (fast !== undefined) return { kind: "query", values: new Float64Array(0), rows: fast };
      return { kind: "query", values: new Float64Array(0), rows: answerRows(gatherEventRows(segments, query.gather, task.userLo, task.userHi), query.answer) };
    }
    case "listing":
      return { kind: "query", values: workspaceListing(segments, query.plan) };
    default:
      return assertNever(query);
  }
}

/** The column fast paths of SPEC §7 queries; undefined when the plan's shape is not one they cover. */
function answerColumns(segments: readonly SegmentView[], gather: GatherPlan, plan: RowsAnswerPlan, userLo: number, userHi: number): RowsAnswer | undefined {
  if (plan.kind === "trend") {
    const answer = trendDayParts(segments, gather, plan.plan, userLo, userHi) ?? trendColumns(segments, gather, plan.plan, userLo, userHi);
    return answer === undefined ? undefined : { kind: "trend", answer };
  }
  if (plan.kind === "retention") {
    const answer = retentionDayParts(segments, gather, plan.plan, userLo, userHi) ?? retentionColumns(segments, gather, plan.plan, userLo, userHi);
    return answer === undefined ? undefined : { kind: "retention", answer };
  }
  if (plan.kind === "funnel") {
    const answer = funnelColumns(segments, gather, plan.plan, userLo, userHi);
    return answer === undefined ? undefined : { kind: "funnel", answer };
  }
  return assertNever(plan);
}

function answerRows(rows: EventRows, plan: RowsAnswerPlan): RowsAnswer {
  switch (plan.kind) {
    case "trend":
      return { kind: "trend", answer: trendSeries(rows, plan.plan) };
    case "funnel":
      return { kind: "funnel", answer: funnelChains(rows, plan.plan) };
    case "retention":
      return { kind: "retention", answer: retentionCohorts(rows, plan.plan) };
    default:
      return assertNever(plan);
  }
}
