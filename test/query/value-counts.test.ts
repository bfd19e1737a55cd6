import { describe, expect, it } from "vitest";
import { countPassingIndexed, countValuesIndexed, valueCountsOf } from "../../src/query/kernels/value-counts.js";
import { buildValueCounts, chunkRowsFor, valueCountMarks, valueCountsValuesMax } from "../../src/storage/value-counts-index.js";
import { seededRandom } from "./kernels-fixtures.js";

const naiveCount = (valueIds: ArrayLike<number>, passes: Uint8Array, start: number, end: number) => {
  let count = 0;
  for (let row = start; row < end; row++) count += passes[valueIds[row]];
  return count;
};

describe("value counts of a sealed column", () => {
  it("count the passing rows, and the rows of each value, of any range as a row scan does", () => {
    let checked = 0;
    for (let seed = 1; seed <= 60; seed++) {
      const random = seededRandom(seed);
      const valueCount = 1 + Math.floor(random() * 40);
      const rows = Math.floor(random() * 3000);
      const source = Uint32Array.from({ length: rows }, () => Math.floor(random() * random() * valueCount));
      const valueIds = seed % 3 === 0 ? Uint8Array.from(source) : seed % 3 === 1 ? Uint16Array.from(source) : source;
      // Tiny chunks, so that ranges cover many whole chunks and partial ones at both ends; runs as a segment's events make them.
      const runStarts = Uint32Array.from({ length: Math.floor(random() * 6) }, () => Math.floor(random() * (rows + 1))).sort();
      const counts = buildValueCounts(valueIds, valueCount, valueCountMarks(rows, valueCount, 1 + Math.floor(random() * 64), runStarts));
      for (let query = 0; query < 40; query++) {
        const passes = Uint8Array.from({ length: valueCount }, () => (random() < 0.4 ? 1 : 0));
        // Sometimes one event's whole run, as a query over every user reads it.
        const run = runStarts.length > 1 && random() < 0.3 ? Math.floor(random() * (runStarts.length - 1)) : -1;
        const start = run >= 0 ? runStarts[run] : Math.floor(random() * (rows + 1));
        const end = run >= 0 ? runStarts[run + 1] : start + Math.floor(random() * (rows - start + 1));
        const scan = (rowPasses: Uint8Array, from: number, to: number) => naiveCount(valueIds, rowPasses, from, to);
        expect(countPassingIndexed(counts, passes, start, end, scan), JSON.stringify({ seed, query, start, end })).toBe(naiveCount(valueIds, passes, start, end));
        // Each value's rows, as a sum or an extreme over the range reads them (left-over entries past valueCount untouched).
        const rowsOfValue = new Float64Array(valueCount + 2).fill(7);
        countValuesIndexed(counts, valueIds, start, end, rowsOfValue);
        const expected = new Float64Array(valueCount + 2).fill(7);
        expected.fill(0, 0, valueCount);
        for (let row = start; row < end; row++) expected[valueIds[row]]++;
        expect(Array.from(rowsOfValue), JSON.stringify({ seed, query, start, end })).toEqual(Array.from(expected));
        checked++;
      }
    }
    expect(checked).toBe(60 * 40);
  });

  it("keep one index per column, within a quarter of its rows in bytes, marks at event runs only when they fit, none for a large dictionary", () => {
    const valueIds = Uint8Array.from({ length: 100_000 }, (_, row) => row % 7);
    const fewRuns = [0, 10, 50_000, 100_000];
    const counts = valueCountsOf(valueIds, 7, fewRuns)!;
    expect(valueCountsOf(valueIds, 7, fewRuns)).toBe(counts);
    expect([...counts.marks].filter((mark) => fewRuns.includes(mark))).toEqual(fewRuns);
    expect(counts.prefix.byteLength).toBeLessThanOrEqual(valueIds.length / 4 + 7 * 4);
    const manyRuns = Array.from({ length: 5_000 }, (_, run) => run * 20);
    const other = Uint8Array.from(valueIds);
    const crowded = valueCountsOf(other, 7, manyRuns)!;
    expect(crowded.prefix.byteLength).toBeLessThanOrEqual(other.length / 4 + 7 * 4);
    expect(crowded.marks).toContain(1024);
    const wide = Uint32Array.from({ length: 10_000 }, (_, row) => row);
    expect(valueCountsOf(wide, valueCountsValuesMax + 1, [])).toBeUndefined();
    expect(chunkRowsFor(valueCountsValuesMax) * 1).toBeGreaterThanOrEqual(valueCountsValuesMax * 32);
  });
});
