/**
 * A funnel answered in user shards and merged (rows-shards.ts) equals the
 * same funnel answered in one task, times to convert included: the shards
 * keep each user's times, and the medians and means are taken once merged.
 */
import { describe, expect, it } from "vitest";
import { funnelChains, type FunnelChainsAnswer, type FunnelChainsPlan, type StepCounts } from "../../src/query/kernels/funnel-chains.js";
import type { EventRows } from "../../src/query/kernels/event-rows.js";
import { mergeRowsShards, shardable, shardPlan } from "../../src/query/rows-shards.js";
import type { FunnelOrder } from "../../src/query/schemas.js";
import { seededRandom } from "./kernels-fixtures.js";

const valueTexts = ["", "a", "b", "c"];
const startMs = Date.parse("2024-06-01T00:00:00Z");

function integer(random: () => number, bound: number): number {
  return Math.floor(random() * bound);
}

/** Rows of users [0, userCount), sorted by user: few distinct times, so ties and windows both matter. */
function randomRows(random: () => number, userCount: number, bits: number): EventRows {
  const rows: Array<[number, number, number, number]> = [];
  for (let user = 0; user < userCount; user++) {
    for (let event = integer(random, 14); event > 0; event--) rows.push([user, startMs + integer(random, 30) * 3_600_000, 1 + integer(random, (1 << bits) - 1), integer(random, valueTexts.length)]);
  }
  return {
    count: rows.length,
    users: Uint32Array.from(rows, (row) => row[0]),
    timesMs: Float64Array.from(rows, (row) => row[1]),
    masks: Uint32Array.from(rows, (row) => row[2]),
    values: Int32Array.from(rows, (row) => row[3]),
    valueTexts,
    numbers: new Float64Array(rows.length).fill(NaN),
  };
}

/** The rows of users [lo, hi). */
function shardRows(rows: EventRows, lo: number, hi: number): EventRows {
  const kept = Array.from({ length: rows.count }, (_, row) => row).filter((row) => rows.users[row] >= lo && rows.users[row] < hi);
  return {
    count: kept.length,
    users: Uint32Array.from(kept, (row) => rows.users[row]),
    timesMs: Float64Array.from(kept, (row) => rows.timesMs[row]),
    masks: Uint32Array.from(kept, (row) => rows.masks[row]),
    values: Int32Array.from(kept, (row) => rows.values[row]),
    valueTexts,
    numbers: new Float64Array(kept.length).fill(NaN),
  };
}

function expectSteps(merged: StepCounts, whole: StepCounts, context: string): void {
  expect(merged.counts, context).toEqual(whole.counts);
  expect(merged.medians, context).toEqual(whole.medians);
  expect(merged.averages?.length, context).toBe(whole.averages?.length);
  merged.averages?.forEach((average, step) => {
    if (average === null || whole.averages![step] === null) expect(average, context).toBe(whole.averages![step]);
    else expect(average, context).toBeCloseTo(whole.averages![step]!, 6);
  });
  expect(merged.times, `${context}: no times left in the answer`).toBeUndefined();
}

describe("a funnel in user shards, merged, answers as one task does", () => {
  it.each(Array.from({ length: 60 }, (_, index) => 23_000 + index))("seed %i", (seed) => {
    const random = seededRandom(seed);
    const stepCount = 2 + integer(random, 3);
    const order: FunnelOrder = (["ordered", "strict", "unordered"] as const)[integer(random, 3)];
    const exclusions = order === "unordered" || random() < 0.5 ? [] : [{ fromStep: 1, toStep: 1 + 1 + integer(random, stepCount - 1) }];
    const userCount = 40 + integer(random, 60);
    const rows = randomRows(random, userCount, stepCount + exclusions.length);
    const plan: FunnelChainsPlan = {
      stepCount,
      exclusions,
      order,
      entryFromMs: startMs + 3_600_000,
      entryToMsExclusive: startMs + 20 * 3_600_000,
      windowMs: (1 + integer(random, 8)) * 3_600_000,
      timeToConvert: random() < 0.8,
      breakdownLimit: random() < 0.3 ? undefined : 1 + integer(random, 4),
    };
    const answerPlan = { kind: "funnel" as const, plan };
    expect(shardable(answerPlan)).toBe(true);
    const whole = funnelChains(rows, plan);
    const cuts = [0, ...Array.from({ length: 1 + integer(random, 3) }, () => integer(random, userCount)).sort((left, right) => left - right), userCount];
    const shards = cuts.slice(1).map((hi, index) => ({ kind: "funnel" as const, answer: funnelChains(shardRows(rows, cuts[index], hi), (shardPlan(answerPlan).plan as FunnelChainsPlan)) }));
    const merged = mergeRowsShards(answerPlan, shards);
    expect(merged?.kind).toBe("funnel");
    const answer = (merged as { answer: FunnelChainsAnswer }).answer;
    const context = `seed ${seed}: ${order}, ${stepCount} steps, shards at ${cuts.join(",")}`;
    expectSteps(answer.all, whole.all, `${context}, all`);
    expect(answer.series?.map((one) => one.value), context).toEqual(whole.series?.map((one) => one.value));
    answer.series?.forEach((one, index) => expectSteps(one.steps, whole.series![index].steps, `${context}, ${one.value}`));
    expect(answer.other === undefined, context).toBe(whole.other === undefined);
    if (answer.other !== undefined) expectSteps(answer.other, whole.other!, `${context}, other`);
  });
});
