/**
 * Value counts the seal stores in a segment (format 3) answer queries as the
 * counts a worker builds at first use do (format 2 segments, and keys the
 * seal did not index), and both as a plain count of the rows: filtered
 * totals of one event over every user and over user shards (marks inside the
 * range read from the counts, rows outside them scanned), and the per-value
 * counts that sums over whole days read. Segments of tens of thousands of
 * rows, so that chunk and event-run marks fall inside the ranges.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { trendLayout } from "../../src/query/buckets.js";
import type { FilterOp, FilterPlan } from "../../src/query/filters.js";
import { trendPartial } from "../../src/query/kernels/trend.js";
import { countValuesIndexed, valueCountsOf } from "../../src/query/kernels/value-counts.js";
import type { SegmentView } from "../../src/query/segment-view.js";
import { segmentViews } from "../../src/query/segment-views.js";
import type { SealedSegmentDescriptor } from "../../src/storage/segment-descriptor.js";
import { valueCountsFields, type SegmentLayout } from "../../src/storage/segment-layout.js";
import { ActiveSegment, SealedSegment } from "../../src/storage/segments.js";
import { sealInline } from "../helpers/seal-inline.js";
import { Random } from "../helpers/random.js";

const dayStartMs = Date.UTC(2024, 0, 1);
const countries = Array.from({ length: 25 }, (_, index) => `C${index}`);
const plans = ["free", "pro", "team"];
const prices = Array.from({ length: 40 }, (_, index) => String(index * 2.5));

interface Row {
  event: number;
  user: number;
  /** keyId → text. */
  properties: Map<number, string>;
}

let directory: string;
let rows: Row[];
/** The same sealed segment twice: with its stored counts, and described without them (as format 2). */
let stored: SegmentView;
let built: SegmentView;
let layout: SegmentLayout;

beforeAll(async () => {
  directory = mkdtempSync(join(tmpdir(), "eventide-counts-"));
  const random = new Random(71);
  const active = new ActiveSegment("ws/2024-01-01/seg-counts", dayStartMs);
  rows = [];
  for (let index = 0; index < 40_000; index++) {
    const row: Row = { event: random.integer(0, 4), user: random.integer(0, 5_000), properties: new Map() };
    if (random.chance(0.9)) row.properties.set(0, random.pick(countries));
    if (random.chance(0.6)) row.properties.set(1, random.pick(plans));
    // Prices on purchases only (event 3): a fifth of the rows, stored sparse.
    if (row.event === 3) row.properties.set(2, random.pick(prices));
    // A key on 1 % of the rows: too few for stored counts, so a query builds them.
    if (random.chance(0.01)) row.properties.set(3, random.pick(plans));
    const target = active.appendRow();
    active.time.values[target] = random.integer(0, 86_399_999);
    active.user.values[target] = row.user;
    active.event.values[target] = row.event;
    for (const [keyId, text] of row.properties) active.properties.add(active.properties.slotFor(keyId), target, text);
    rows.push(row);
  }
  const result = await sealInline(active, join(directory, "seg"));
  layout = result.layout;
  const segment = new SealedSegment(active.key, directory, dayStartMs, result.layout);
  segment.attach(result);
  const descriptor = segment.describe();
  const withoutCounts: SealedSegmentDescriptor = { ...descriptor, key: `${descriptor.key}-built`, layoutJson: JSON.stringify({ ...result.layout, valueCounts: undefined }) };
  const viewed = segmentViews([descriptor, withoutCounts]);
  if (viewed.kind !== "views") throw new Error("segments missing");
  [stored, built] = viewed.views;
});

afterAll(() => {
  rmSync(directory, { recursive: true, force: true });
});

function naiveCount(event: number, filter: { keyId: number; op: FilterOp; value: string }, userLo: number, userHi: number): number {
  let count = 0;
  for (const row of rows) {
    if (row.event !== event || row.user < userLo || row.user >= userHi) continue;
    const text = row.properties.get(filter.keyId);
    if (filter.op === "eq" ? text === filter.value : text !== filter.value) count++;
  }
  return count;
}

describe("value counts stored by the seal", () => {
  it("are stored for keys of few values set on enough rows, dense or sparse", () => {
    const keys = layout.valueCounts?.keys ?? [];
    expect(keys.filter((_, index) => index % valueCountsFields === 0)).toEqual([0, 1, 2]);
  });

  it("answer filtered totals as built counts and as a row count, over every user and over shards", () => {
    const random = new Random(72);
    const dayLayout = trendLayout("2024-01-01", "2024-01-01", "day");
    for (let query = 0; query < 300; query++) {
      const keyId = random.integer(0, 3);
      const value = random.pick(keyId === 0 ? countries : keyId === 2 ? prices : plans);
      const op: FilterOp = random.chance(0.7) ? "eq" : "neq";
      const event = random.integer(0, 4);
      const whole = random.chance(0.3);
      const userLo = whole ? 0 : random.integer(0, 5_000);
      const userHi = whole ? 5_001 : random.integer(userLo + 1, 5_001);
      const filters: FilterPlan[] = [{ keyId, op, value }];
      const plan = { eventId: event, layout: dayLayout, filters, math: "total" as const };
      const expected = naiveCount(event, { keyId, op, value }, userLo, userHi);
      const context = `query ${query}: event ${event}, key ${keyId} ${op} ${value}, users [${userLo}, ${userHi})`;
      expect(trendPartial([stored], plan, userLo, userHi)[0], context).toBe(expected);
      expect(trendPartial([built], plan, userLo, userHi)[0], context).toBe(expected);
    }
  });

  it("give each value's rows in any range as built counts do", () => {
    const random = new Random(73);
    for (const keyId of [0, 1, 2]) {
      const storedColumn = stored.property(keyId)!;
      const builtColumn = built.property(keyId)!;
      const valueCount = storedColumn.texts.length;
      const storedCounts = valueCountsOf(storedColumn.valueIds, valueCount, stored.eventRowStart!)!;
      const builtCounts = valueCountsOf(builtColumn.valueIds, valueCount, built.eventRowStart!)!;
      // The stored index is read in place from the segment's shared memory; a built one is a thread's own.
      expect(storedCounts.prefix.buffer).toBeInstanceOf(SharedArrayBuffer);
      expect(builtCounts.prefix.buffer).not.toBeInstanceOf(SharedArrayBuffer);
      const fromStored = new Float64Array(valueCount);
      const fromBuilt = new Float64Array(valueCount);
      for (let range = 0; range < 200; range++) {
        const start = random.integer(0, stored.rowCount);
        const end = random.chance(0.2) ? stored.rowCount : random.integer(start, stored.rowCount);
        countValuesIndexed(storedCounts, storedColumn.valueIds, start, end, fromStored);
        countValuesIndexed(builtCounts, builtColumn.valueIds, start, end, fromBuilt);
        const byRow = new Float64Array(valueCount);
        for (let row = start; row < end; row++) byRow[storedColumn.valueIds[row]]++;
        expect([...fromStored], `key ${keyId} rows [${start}, ${end})`).toEqual([...byRow]);
        expect([...fromBuilt]).toEqual([...byRow]);
      }
    }
  });
});
