/**
 * The funnel chain search (funnel-chains.ts) where many of a user's events
 * share a timestamp: steps taking distinct events of one group, exclusions
 * whose events the chain must use to stay valid, references that overlap.
 * Each answer is checked against the naive reference of SPEC §7 on the same
 * events; and a user whose one group would take count! placements to search
 * whole is answered as worked out by hand.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { funnelChains, setPlacementSizeMax, type FunnelChainsPlan } from "../../src/query/kernels/funnel-chains.js";
import type { EventRows } from "../../src/query/kernels/event-rows.js";
import { funnelRowsBody } from "../../src/query/query-service.js";
import type { FunnelRequest } from "../../src/query/schemas.js";
import { matches, referenceFunnelV2, type FunnelQueryV2, type StoredEvent } from "../reference/reference-v2.js";
import { seededRandom } from "./kernels-fixtures.js";

type Random = () => number;
const integer = (random: Random, bound: number) => Math.floor(random() * bound);
const pick = <T>(random: Random, items: readonly T[]): T => items[integer(random, items.length)];

type Reference = { event: string; filters: Array<{ property: string; op: "eq"; value: string }> };
const references: Reference[] = [
  { event: "a", filters: [] },
  { event: "b", filters: [] },
  { event: "c", filters: [] },
  { event: "x", filters: [] },
  { event: "a", filters: [{ property: "p", op: "eq", value: "1" }] },
  { event: "b", filters: [{ property: "p", op: "eq", value: "2" }] },
];
const dayStartMs = Date.UTC(2024, 4, 1);
let placementBefore = 0;

/** The engine's input: rows with the reference bits the query planner would give them (steps, then exclusions). */
function rowsOf(events: readonly StoredEvent[], steps: readonly Reference[], exclusions: readonly Reference[]): EventRows {
  const count = events.length;
  const masks = new Uint32Array(count);
  events.forEach((event, row) => {
    [...steps, ...exclusions].forEach((reference, bit) => {
      if (matches(event, reference, [])) masks[row] |= 1 << bit;
    });
  });
  return {
    count,
    users: Uint32Array.from(events, (event) => Number(event.distinctId.slice(1))),
    timesMs: Float64Array.from(events, (event) => event.timestampMs),
    masks,
    values: new Int32Array(count),
    valueTexts: [""],
    numbers: new Float64Array(0),
  };
}

type Body = Omit<FunnelQueryV2, "steps" | "exclusions" | "conversionWindow"> & { steps: Reference[]; exclusions: Array<{ event: Reference; fromStep: number; toStep: number }>; conversionWindow: number };

function answer(events: readonly StoredEvent[], body: Body) {
  const plan: FunnelChainsPlan = {
    stepCount: body.steps.length,
    exclusions: body.exclusions.map(({ fromStep, toStep }) => ({ fromStep, toStep })),
    order: body.order ?? "ordered",
    entryFromMs: dayStartMs,
    entryToMsExclusive: dayStartMs + 86_400_000,
    windowMs: body.conversionWindow * 1000,
    timeToConvert: body.timeToConvert ?? false,
    breakdownLimit: undefined,
  };
  const rows = rowsOf(
    events,
    body.steps,
    body.exclusions.map((exclusion) => exclusion.event),
  );
  return JSON.parse(funnelRowsBody({ steps: body.steps } as unknown as FunnelRequest, funnelChains(rows, plan)));
}

describe.each([
  ["small groups by placement, larger ones by matching", undefined],
  ["every group by matching", 0],
])("funnels over events that share timestamps answer as the naive reference (%s)", (_, placementMax) => {
  beforeAll(() => {
    if (placementMax !== undefined) placementBefore = setPlacementSizeMax(placementMax);
  });
  afterAll(() => {
    if (placementMax !== undefined) setPlacementSizeMax(placementBefore);
  });

  it.each(Array.from({ length: 30 }, (_, seed) => seed + 1))("seed %i", (seed) => {
    const random = seededRandom(seed * 7919);
    const events: StoredEvent[] = [];
    for (let user = 0; user < 40; user++) {
      let timeMs = dayStartMs + integer(random, 3_600_000);
      for (let group = 1 + integer(random, 4); group > 0; group--) {
        // Groups of up to seven events at one timestamp: the reference searches them whole.
        for (let size = 1 + integer(random, 7); size > 0; size--) {
          events.push({ event: pick(random, ["a", "b", "c", "x"]), distinctId: `u${user}`, timestampMs: timeMs, properties: { p: pick(random, ["1", "2"]) } });
        }
        timeMs += pick(random, [0, 1, 1_000, 600_000]);
      }
    }
    for (let query = 0; query < 20; query++) {
      const order = pick(random, ["ordered", "strict", "unordered"] as const);
      const steps = Array.from({ length: 1 + integer(random, 6) }, () => pick(random, references));
      const exclusions =
        order === "unordered" || steps.length < 2
          ? []
          : Array.from({ length: integer(random, 3) }, () => {
              const fromStep = 1 + integer(random, steps.length - 1);
              return { event: pick(random, references), fromStep, toStep: fromStep + 1 + integer(random, steps.length - fromStep) };
            });
      const body: Body = { steps, exclusions, order, dateFrom: "2024-05-01", dateTo: "2024-05-01", conversionWindow: pick(random, [1, 600, 3_600]), timeToConvert: random() < 0.5 };
      expect(answer(events, body), JSON.stringify(body)).toEqual(referenceFunnelV2(events, body));
    }
  });

  it("covers an exclusion's events of a group only when each can take a step, moving a step where it must", () => {
    // b, then a (p 1) and a (p 2) at one time, then c: the a events lie between e1 and e4, so the chain must use both,
    // a (p 2) as step 2 (only "a" takes it) and a (p 1) as step 3, though a (p 1) may take step 2 as well.
    const at = (offsetMs: number, event: string, p?: string): StoredEvent => ({ event, distinctId: "u1", timestampMs: dayStartMs + offsetMs, properties: p === undefined ? {} : { p } });
    const events = [at(0, "b"), at(1_000, "a", "1"), at(1_000, "a", "2"), at(2_000, "c")];
    const [a, b, c] = references;
    const body: Body = {
      steps: [b, a, references[4], c],
      exclusions: [{ event: a, fromStep: 1, toStep: 4 }],
      order: "ordered",
      dateFrom: "2024-05-01",
      dateTo: "2024-05-01",
      conversionWindow: 3_600,
    };
    expect(answer(events, body).steps.map((step: { count: number }) => step.count)).toEqual([1, 1, 1, 1]);
    expect(answer(events, body)).toEqual(referenceFunnelV2(events, body));
    // Without a second event able to take step 3, the chain cannot cover both a events and stops before step 4.
    const fewer = [at(0, "b"), at(1_000, "a", "2"), at(1_000, "a", "2"), at(2_000, "c")];
    expect(answer(fewer, body).steps.map((step: { count: number }) => step.count)).toEqual([1, 1, 0, 0]);
    expect(answer(fewer, body)).toEqual(referenceFunnelV2(fewer, body));
  });

  it("matches an unordered set's steps to events whose references overlap, moving a step where it must", () => {
    // Steps a, a (p 1), a (p 2), c from the entry c: a (p 1) can take step 1 or 2, a (p 2) step 1 or 3; step 1 must go
    // to an a (p 2) so that a (p 1) is left for step 2.
    const at = (offsetMs: number, event: string, p?: string): StoredEvent => ({ event, distinctId: "u1", timestampMs: dayStartMs + offsetMs, properties: p === undefined ? {} : { p } });
    const events = [at(0, "c"), at(1_000, "a", "1"), at(2_000, "a", "2"), at(3_000, "a", "2")];
    const [a, , c] = references;
    const body: Body = {
      steps: [a, references[4], { event: "a", filters: [{ property: "p", op: "eq", value: "2" }] }, c],
      exclusions: [],
      order: "unordered",
      dateFrom: "2024-05-01",
      dateTo: "2024-05-01",
      conversionWindow: 3_600,
      timeToConvert: true,
    };
    expect(answer(events, body).steps.map((step: { count: number }) => step.count)).toEqual([1, 1, 1, 1]);
    expect(answer(events, body)).toEqual(referenceFunnelV2(events, body));
  });

  it("answers an unordered funnel of repeated steps over a user with 10 000 events in one window", () => {
    // s0…s9 in turn, a second apart; the funnel asks for s0…s9 twice. Every window holds each name thousands of times,
    // so its shape (names, counts up to the steps asked) repeats: the search answered each window afresh, quadratically.
    const names = Array.from({ length: 10 }, (_, index) => `s${index}`);
    const events: StoredEvent[] = Array.from({ length: 10_000 }, (_, index) => ({ event: names[index % 10], distinctId: "u1", timestampMs: dayStartMs + index * 1_000, properties: {} }));
    const steps = [...names, ...names].map((event): Reference => ({ event, filters: [] }));
    const body: Body = { steps, exclusions: [], order: "unordered", dateFrom: "2024-05-01", dateTo: "2024-05-01", conversionWindow: 86_400, timeToConvert: true };
    const answered = answer(events, body);
    expect(answered.steps.map((step: { count: number }) => step.count)).toEqual(Array.from({ length: 20 }, () => 1));
    // The shortest set of k steps from an s0: s0…s(k-1) a second apart, then a second round.
    expect(answered.steps.map((step: { medianTimeToConvertMs?: number }) => step.medianTimeToConvertMs)).toEqual([undefined, ...Array.from({ length: 19 }, (_, step) => (step + 1) * 1_000)]);
  });

  it("searches a group of 25 events over 20 steps by matching, not by trying every placement", () => {
    // One a, then 24 a and one x at a later timestamp: the x can take no step, so no placement covers it,
    // and every placement of 19 steps over 24 events was tried. The x is at e20's time, not between e1 and e20.
    const at = (offsetMs: number, event: string): StoredEvent => ({ event, distinctId: "u1", timestampMs: dayStartMs + offsetMs, properties: {} });
    const events = [at(0, "a"), ...Array.from({ length: 24 }, () => at(1_000, "a")), at(1_000, "x")];
    const a = references[0];
    const body: Body = {
      steps: Array.from({ length: 20 }, () => a),
      exclusions: [{ event: references[3], fromStep: 1, toStep: 20 }],
      order: "ordered",
      dateFrom: "2024-05-01",
      dateTo: "2024-05-01",
      conversionWindow: 3_600,
    };
    expect(answer(events, body).steps.map((step: { count: number }) => step.count)).toEqual(Array.from({ length: 20 }, () => 1));
    // With x between e1 and e20 (e1 at the start, x a moment later), e1 must sit at the group's time: 25 events
    // there hold the 20 steps only using every a, and the x is then between no two of them.
    const later = [at(0, "a"), at(500, "x"), ...Array.from({ length: 20 }, () => at(1_000, "a"))];
    expect(answer(later, body).steps.map((step: { count: number }) => step.count)).toEqual(Array.from({ length: 20 }, () => 1));
    expect(answer(later, { ...body, order: "strict" }).steps.map((step: { count: number }) => step.count)).toEqual(Array.from({ length: 20 }, () => 1));
  });
});
