/**
 * Small statistics and number formatting for the bench suite: exact
 * nearest-rank percentiles of a sample (for runs timed one by one, such as the
 * DuckDB peer), percentiles of the generator's log-linear histograms, and the
 * units people read figures in.
 *
 * Estimate: sorting a sample of n timings costs n log n comparisons — 10 k
 * timings in ~1 ms — and a histogram percentile is one pass over 864 counters,
 * so nothing here is measurable next to a benchmark step.
 */
import { LatencyHistogram, summarizeLatency, type LatencySummary, type SparseHistogram } from "../load/http-load.js";

export type { LatencySummary } from "../load/http-load.js";

/**
 * Nearest-rank percentile of an ascending sample: the smallest value with at
 * least `percentile` % of the sample at or below it (p50 of [1, 2, 3, 4] is 2,
 * p100 is the maximum). NaN for an empty sample.
 */
export function percentileOfSorted(sorted: readonly number[], percentile: number): number {
  if (!(percentile >= 0 && percentile <= 100)) throw new Error(`percentile must be in [0, 100], got ${percentile}`);
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.max(1, Math.ceil((percentile / 100) * sorted.length));
  return sorted[rank - 1];
}

export function sortedCopy(values: readonly number[]): number[] {
  return values.filter((value) => Number.isFinite(value)).sort((left, right) => left - right);
}

/** The same summary the load generator reports, from individual timings in milliseconds. */
export function summarizeSample(valuesMs: readonly number[]): LatencySummary {
  const sorted = sortedCopy(valuesMs);
  const mean = sorted.length === 0 ? Number.NaN : sorted.reduce((sum, value) => sum + value, 0) / sorted.length;
  return {
    p50: percentileOfSorted(sorted, 50),
    p90: percentileOfSorted(sorted, 90),
    p95: percentileOfSorted(sorted, 95),
    p99: percentileOfSorted(sorted, 99),
    p999: percentileOfSorted(sorted, 99.9),
    max: sorted.length === 0 ? Number.NaN : sorted[sorted.length - 1],
    mean,
  };
}

export function median(values: readonly number[]): number {
  const sorted = sortedCopy(values);
  if (sorted.length === 0) return Number.NaN;
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

export function mean(values: readonly number[]): number {
  const finite = values.filter((value) => Number.isFinite(value));
  return finite.length === 0 ? Number.NaN : finite.reduce((sum, value) => sum + value, 0) / finite.length;
}

/** Percentiles of a histogram as the generator reports it. */
export function summarizeHistogram(histogram: SparseHistogram): LatencySummary {
  return summarizeLatency(LatencyHistogram.fromSparse(histogram));
}

/** Merges histograms (one per generator process, or per interval) and summarizes the result. */
export function mergeHistograms(histograms: readonly SparseHistogram[]): SparseHistogram {
  const merged = new LatencyHistogram();
  for (const histogram of histograms) merged.addSparse(histogram.buckets, histogram.sumMicroseconds, histogram.maxMicroseconds);
  return merged.toJSON();
}

/** JSON writes NaN as null; figures read back from a results file come through here. */
export function numberOrNaN(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) ? value : Number.NaN;
}

// ---------------------------------------------------------------------------
// Formatting.

/** 1234567 → "1.23 M", 12345 → "12.3 k", 12 → "12". */
export function formatCount(value: number): string {
  if (!Number.isFinite(value)) return "–";
  const magnitude = Math.abs(value);
  if (magnitude >= 1e9) return `${trim(value / 1e9, 3)} G`;
  if (magnitude >= 1e6) return `${trim(value / 1e6, 3)} M`;
  if (magnitude >= 1e3) return `${trim(value / 1e3, 3)} k`;
  if (magnitude >= 100 || Number.isInteger(value)) return value.toFixed(0);
  return trim(value, 3);
}

/** Three significant digits without trailing zeros. */
function trim(value: number, digits: number): string {
  return String(Number(value.toPrecision(digits)));
}

/** Milliseconds with a sensible number of digits: 0.123, 1.23, 12.3, 123, 1 234. */
export function formatMs(value: number): string {
  if (!Number.isFinite(value)) return "–";
  if (value >= 10_000) return Math.round(value).toLocaleString("en-US").replaceAll(",", " ");
  if (value >= 100) return value.toFixed(0);
  if (value >= 10) return value.toFixed(1);
  if (value >= 1) return value.toFixed(2);
  return value.toFixed(3);
}

export function formatPercent(value: number, digits = 0): string {
  return Number.isFinite(value) ? `${value.toFixed(digits)} %` : "–";
}

export function formatBytes(value: number): string {
  if (!Number.isFinite(value)) return "–";
  if (value >= 2 ** 30) return `${trim(value / 2 ** 30, 3)} GiB`;
  if (value >= 2 ** 20) return `${trim(value / 2 ** 20, 3)} MiB`;
  if (value >= 2 ** 10) return `${trim(value / 2 ** 10, 3)} KiB`;
  return `${value} B`;
}

/** 75 → "1:15", 3725 → "1:02:05". */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "–";
  const total = Math.round(seconds);
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const rest = total % 60;
  const two = (value: number) => String(value).padStart(2, "0");
  return hours > 0 ? `${hours}:${two(minutes)}:${two(rest)}` : `${minutes}:${two(rest)}`;
}

/** A plain-text table: the first `leftColumns` columns (names) left-aligned, the others (figures) right-aligned. */
export function formatTextTable(header: readonly string[], rows: readonly (readonly string[])[], leftColumns = 1): string {
  const widths = header.map((cell, column) => Math.max(cell.length, ...rows.map((row) => (row[column] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells.map((cell, column) => (column < leftColumns ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join("  ").trimEnd();
  return [line(header), widths.map((width) => "-".repeat(width)).join("  "), ...rows.map(line)].join("\n");
}

/** A Markdown table; `|` in cells is escaped. */
export function formatMarkdownTable(header: readonly string[], rows: readonly (readonly string[])[], alignRight: readonly boolean[] = []): string {
  const escape = (cell: string) => cell.replaceAll("|", "\\|");
  const rule = header.map((_, column) => (alignRight[column] ?? column > 0 ? "---:" : "---"));
  return [`| ${header.map(escape).join(" | ")} |`, `| ${rule.join(" | ")} |`, ...rows.map((row) => `| ${row.map(escape).join(" | ")} |`)].join("\n");
}
