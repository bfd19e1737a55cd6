/**
 * Hand-written SVG charts for the bench report: line charts (a figure over
 * time or over concurrency) and grouped bar charts (percentiles per scenario,
 * Eventide beside its peers), linear or logarithmic, stacked into one file
 * when a story needs panels. No chart library: the output is a few hundred
 * plain elements a browser, GitHub or an editor renders as is, and every bar
 * and point carries a <title> so hovering shows the exact value.
 *
 * Estimate: a chart is ~100–2 000 elements built by string concatenation,
 * well under a millisecond each.
 */

export const palette = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563", "#65a30d", "#9333ea"];

const fontFamily = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
const gridColor = "#e5e7eb";
const axisColor = "#9ca3af";
const textColor = "#374151";

/** A chart's inner content and size, so several can be stacked into one document. */
export interface ChartPart {
  width: number;
  height: number;
  body: string;
}

export type Scale = "linear" | "log";

export function escapeXml(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll('"', "&quot;").replaceAll("'", "&apos;");
}

function number(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

/** Axis labels: 0.5, 12, 250, 1.5 k, 12 M. */
export function formatAxisValue(value: number): string {
  const magnitude = Math.abs(value);
  const significant = (scaled: number) => String(Number(scaled.toPrecision(3)));
  if (magnitude >= 1e9) return `${significant(value / 1e9)} G`;
  if (magnitude >= 1e6) return `${significant(value / 1e6)} M`;
  if (magnitude >= 1e3) return `${significant(value / 1e3)} k`;
  return significant(value);
}

/** A "nice" step (1, 2 or 5 × 10^k) near range / targetCount. */
export function niceStep(range: number, targetCount: number): number {
  if (!(range > 0)) return 1;
  const rough = range / targetCount;
  const power = 10 ** Math.floor(Math.log10(rough));
  const fraction = rough / power;
  return (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * power;
}

interface Axis {
  min: number;
  max: number;
  ticks: number[];
  scale: Scale;
}

/** A linear axis from 0 (or the data's minimum when it is negative) to a nice maximum. */
export function linearAxis(values: readonly number[], targetTicks = 5, includeZero = true): Axis {
  const finite = values.filter((value) => Number.isFinite(value));
  let min = finite.length === 0 ? 0 : Math.min(...finite);
  let max = finite.length === 0 ? 1 : Math.max(...finite);
  if (includeZero) min = Math.min(0, min);
  if (max === min) max = min + (min === 0 ? 1 : Math.abs(min));
  const step = niceStep(max - min, targetTicks);
  min = Math.floor(min / step) * step;
  max = Math.ceil(max / step) * step;
  const ticks: number[] = [];
  for (let tick = min; tick <= max + step / 2; tick += step) ticks.push(Number(tick.toPrecision(12)));
  return { min, max, ticks, scale: "linear" };
}

/** A logarithmic axis over whole decades; 2 and 5 get ticks too when the data spans few decades. */
export function logAxis(values: readonly number[]): Axis {
  const positive = values.filter((value) => Number.isFinite(value) && value > 0);
  const low = positive.length === 0 ? 1 : Math.min(...positive);
  const high = positive.length === 0 ? 10 : Math.max(...positive);
  // Half a step of headroom below the smallest value, so its bar still shows.
  const minPower = Math.floor(Math.log10(low / 2));
  let maxPower = Math.ceil(Math.log10(high));
  if (maxPower === minPower) maxPower += 1;
  const ticks: number[] = [];
  const decades = maxPower - minPower;
  for (let power = minPower; power <= maxPower; power += 1) {
    const base = 10 ** power;
    ticks.push(Number(base.toPrecision(12)));
    if (decades <= 3 && power < maxPower) ticks.push(Number((2 * base).toPrecision(12)), Number((5 * base).toPrecision(12)));
  }
  return { min: 10 ** minPower, max: 10 ** maxPower, ticks, scale: "log" };
}

function project(axis: Axis, value: number, from: number, to: number): number {
  const fraction = axis.scale === "log" ? (Math.log10(value) - Math.log10(axis.min)) / (Math.log10(axis.max) - Math.log10(axis.min)) : (value - axis.min) / (axis.max - axis.min);
  return from + fraction * (to - from);
}

function text(x: number, y: number, content: string, attributes: Record<string, string | number> = {}): string {
  const extra = Object.entries(attributes)
    .map(([name, value]) => ` ${name}="${escapeXml(String(value))}"`)
    .join("");
  return `<text x="${number(x)}" y="${number(y)}"${extra}>${escapeXml(content)}</text>`;
}

function titleBlock(title: string, subtitle: string | undefined, width: number): string {
  let body = text(16, 24, title, { "font-size": 15, "font-weight": 600, fill: "#111827" });
  if (subtitle !== undefined) body += text(16, 42, subtitle, { "font-size": 11, fill: "#6b7280" });
  void width;
  return body;
}

/** Legend swatches in one row under the title, right-aligned to the plot. */
function legend(entries: readonly { name: string; color: string; dashed?: boolean }[], right: number, y: number): string {
  let x = right;
  let body = "";
  // Laid out from the right: estimate text width at ~6.5 px per character.
  for (let index = entries.length - 1; index >= 0; index -= 1) {
    const entry = entries[index];
    const labelWidth = entry.name.length * 6.5;
    x -= labelWidth;
    body += text(x, y + 4, entry.name, { "font-size": 11, fill: textColor });
    x -= 22;
    body += entry.dashed
      ? `<line x1="${number(x)}" y1="${number(y)}" x2="${number(x + 16)}" y2="${number(y)}" stroke="${entry.color}" stroke-width="2.5" stroke-dasharray="4 3"/>`
      : `<rect x="${number(x)}" y="${number(y - 5)}" width="16" height="10" rx="2" fill="${entry.color}"/>`;
    x -= 14;
  }
  return `<g class="legend">${body}</g>`;
}

export interface LineSeries {
  name: string;
  /** [x, y] pairs; a non-finite y breaks the line. */
  points: readonly (readonly [number, number])[];
  color?: string;
  dashed?: boolean;
}

export interface LineChartSpec {
  title: string;
  subtitle?: string;
  xLabel: string;
  yLabel: string;
  series: readonly LineSeries[];
  yScale?: Scale;
  xScale?: Scale;
  /** A linear x axis starts at 0 (time since the start) unless this is false. */
  xFromZero?: boolean;
  width?: number;
  height?: number;
  /** Formats a value in the hover titles. */
  valueFormat?: (value: number) => string;
}

export function lineChart(spec: LineChartSpec): ChartPart {
  const width = spec.width ?? 760;
  const height = spec.height ?? 320;
  const left = 72;
  const right = width - 20;
  const top = 64;
  const bottom = height - 46;
  const format = spec.valueFormat ?? formatAxisValue;
  const xs = spec.series.flatMap((series) => series.points.map(([x]) => x));
  const ys = spec.series.flatMap((series) => series.points.map(([, y]) => y));
  const xAxis = spec.xScale === "log" ? logAxis(xs) : linearAxis(xs, 8, spec.xFromZero ?? true);
  const yAxis = spec.yScale === "log" ? logAxis(ys) : linearAxis(ys);
  let body = titleBlock(spec.title, spec.subtitle, width);
  body += `<g class="grid" stroke="${gridColor}" stroke-width="1">`;
  for (const tick of yAxis.ticks) {
    const y = project(yAxis, tick, bottom, top);
    body += `<line x1="${left}" y1="${number(y)}" x2="${right}" y2="${number(y)}"/>`;
  }
  body += "</g>";
  body += `<g class="axis" font-size="11" fill="${textColor}">`;
  for (const tick of yAxis.ticks) body += text(left - 6, project(yAxis, tick, bottom, top) + 4, formatAxisValue(tick), { "text-anchor": "end" });
  for (const tick of xAxis.ticks) {
    const x = project(xAxis, tick, left, right);
    body += `<line x1="${number(x)}" y1="${bottom}" x2="${number(x)}" y2="${bottom + 4}" stroke="${axisColor}"/>`;
    body += text(x, bottom + 17, formatAxisValue(tick), { "text-anchor": "middle" });
  }
  body += "</g>";
  body += `<line x1="${left}" y1="${bottom}" x2="${right}" y2="${bottom}" stroke="${axisColor}"/>`;
  body += text((left + right) / 2, height - 10, spec.xLabel, { "text-anchor": "middle", "font-size": 12, fill: textColor });
  body += text(16, (top + bottom) / 2, spec.yLabel, { "text-anchor": "middle", "font-size": 12, fill: textColor, transform: `rotate(-90 16 ${number((top + bottom) / 2)})` });
  const legendEntries: { name: string; color: string; dashed?: boolean }[] = [];
  spec.series.forEach((series, index) => {
    const color = series.color ?? palette[index % palette.length];
    legendEntries.push({ name: series.name, color, dashed: series.dashed });
    const usable = (y: number) => Number.isFinite(y) && (yAxis.scale === "linear" || y > 0);
    // Split at gaps so a missing sample is a gap, not a line across it.
    const segments: string[][] = [];
    let current: string[] = [];
    for (const [x, y] of series.points) {
      if (!usable(y) || !Number.isFinite(x)) {
        if (current.length > 0) segments.push(current);
        current = [];
        continue;
      }
      current.push(`${number(project(xAxis, x, left, right))},${number(project(yAxis, y, bottom, top))}`);
    }
    if (current.length > 0) segments.push(current);
    body += `<g class="series" data-name="${escapeXml(series.name)}">`;
    for (const segment of segments) {
      body += `<polyline fill="none" stroke="${color}" stroke-width="2" stroke-linejoin="round"${series.dashed ? ' stroke-dasharray="5 4"' : ""} points="${segment.join(" ")}"/>`;
    }
    // Markers only where they stay readable.
    if (series.points.length <= 40) {
      for (const [x, y] of series.points) {
        if (!usable(y)) continue;
        body += `<circle cx="${number(project(xAxis, x, left, right))}" cy="${number(project(yAxis, y, bottom, top))}" r="3" fill="${color}"><title>${escapeXml(`${series.name}: ${format(y)} at ${formatAxisValue(x)}`)}</title></circle>`;
      }
    }
    body += "</g>";
  });
  body += legend(legendEntries, right, 54);
  return { width, height, body };
}

export interface BarSeries {
  name: string;
  values: readonly number[];
  color?: string;
}

export interface BarChartSpec {
  title: string;
  subtitle?: string;
  categories: readonly string[];
  series: readonly BarSeries[];
  valueLabel: string;
  scale?: Scale;
  /** horizontal: categories down the left (long labels); vertical: along the bottom. */
  orientation?: "vertical" | "horizontal";
  width?: number;
  valueFormat?: (value: number) => string;
}

export function barChart(spec: BarChartSpec): ChartPart {
  const horizontal = spec.orientation === "horizontal";
  const format = spec.valueFormat ?? formatAxisValue;
  const seriesCount = Math.max(1, spec.series.length);
  const values = spec.series.flatMap((series) => [...series.values]);
  const axis = spec.scale === "log" ? logAxis(values) : linearAxis(values);
  const usable = (value: number) => Number.isFinite(value) && (axis.scale === "linear" || value > 0);
  const legendEntries = spec.series.map((series, index) => ({ name: series.name, color: series.color ?? palette[index % palette.length] }));
  let body = "";

  if (horizontal) {
    const width = spec.width ?? 760;
    const labelWidth = Math.min(260, Math.max(80, Math.max(...spec.categories.map((category) => category.length)) * 6.6 + 12));
    const left = 16 + labelWidth;
    const right = width - 64;
    const top = 64;
    const bandHeight = Math.max(22, seriesCount * 13 + 10);
    const bottom = top + bandHeight * spec.categories.length;
    const height = bottom + 46;
    body += titleBlock(spec.title, spec.subtitle, width);
    body += `<g class="grid" stroke="${gridColor}" stroke-width="1">`;
    for (const tick of axis.ticks) {
      const x = project(axis, tick, left, right);
      body += `<line x1="${number(x)}" y1="${top}" x2="${number(x)}" y2="${bottom}"/>`;
    }
    body += "</g>";
    body += `<g class="axis" font-size="11" fill="${textColor}">`;
    for (const tick of axis.ticks) body += text(project(axis, tick, left, right), bottom + 16, formatAxisValue(tick), { "text-anchor": "middle" });
    body += "</g>";
    body += text((left + right) / 2, height - 10, spec.valueLabel, { "text-anchor": "middle", "font-size": 12, fill: textColor });
    const barHeight = (bandHeight - 10) / seriesCount;
    spec.categories.forEach((category, categoryIndex) => {
      const bandTop = top + categoryIndex * bandHeight;
      body += text(left - 8, bandTop + bandHeight / 2 + 4, category, { "text-anchor": "end", "font-size": 11, fill: textColor });
      spec.series.forEach((series, seriesIndex) => {
        const value = series.values[categoryIndex];
        if (!usable(value)) return;
        const y = bandTop + 5 + seriesIndex * barHeight;
        const x0 = left;
        const x1 = Math.max(x0 + 1, project(axis, value, left, right));
        body += `<rect class="bar" x="${number(x0)}" y="${number(y)}" width="${number(x1 - x0)}" height="${number(Math.max(1, barHeight - 2))}" fill="${legendEntries[seriesIndex].color}"><title>${escapeXml(`${category} · ${series.name}: ${format(value)}`)}</title></rect>`;
        body += text(x1 + 4, y + barHeight / 2 + 3, format(value), { "font-size": 10, fill: textColor });
      });
    });
    body += `<line x1="${left}" y1="${top}" x2="${left}" y2="${bottom}" stroke="${axisColor}"/>`;
    body += legend(legendEntries, right + 44, 54);
    return { width, height, body };
  }

  const longestLabel = Math.max(0, ...spec.categories.map((category) => category.length));
  const width = spec.width ?? Math.max(480, Math.min(1400, 90 + spec.categories.length * Math.max(48, seriesCount * 16 + 16, longestLabel * 6.6 + 8)));
  // Labels wider than their band are turned, so neighbours never overlap.
  const rotate = longestLabel * 6.2 > (width - 92) / Math.max(1, spec.categories.length) - 6;
  const left = 72;
  const right = width - 20;
  const top = 64;
  const labelSpace = rotate ? Math.min(140, longestLabel * 5 + 20) : 30;
  const bottom = 300;
  const height = bottom + labelSpace + 28;
  body += titleBlock(spec.title, spec.subtitle, width);
  body += `<g class="grid" stroke="${gridColor}" stroke-width="1">`;
  for (const tick of axis.ticks) {
    const y = project(axis, tick, bottom, top);
    body += `<line x1="${left}" y1="${number(y)}" x2="${right}" y2="${number(y)}"/>`;
  }
  body += "</g>";
  body += `<g class="axis" font-size="11" fill="${textColor}">`;
  for (const tick of axis.ticks) body += text(left - 6, project(axis, tick, bottom, top) + 4, formatAxisValue(tick), { "text-anchor": "end" });
  body += "</g>";
  body += text(16, (top + bottom) / 2, spec.valueLabel, { "text-anchor": "middle", "font-size": 12, fill: textColor, transform: `rotate(-90 16 ${number((top + bottom) / 2)})` });
  const bandWidth = (right - left) / Math.max(1, spec.categories.length);
  const barWidth = Math.min(28, (bandWidth - 8) / seriesCount);
  spec.categories.forEach((category, categoryIndex) => {
    const center = left + (categoryIndex + 0.5) * bandWidth;
    const groupLeft = center - (barWidth * seriesCount) / 2;
    spec.series.forEach((series, seriesIndex) => {
      const value = series.values[categoryIndex];
      if (!usable(value)) return;
      const x = groupLeft + seriesIndex * barWidth;
      const y = Math.min(bottom - 1, project(axis, value, bottom, top));
      body += `<rect class="bar" x="${number(x)}" y="${number(y)}" width="${number(Math.max(1, barWidth - 2))}" height="${number(bottom - y)}" fill="${legendEntries[seriesIndex].color}"><title>${escapeXml(`${category} · ${series.name}: ${format(value)}`)}</title></rect>`;
    });
    body += rotate
      ? text(center, bottom + 12, category, { "text-anchor": "end", "font-size": 11, fill: textColor, transform: `rotate(-35 ${number(center)} ${bottom + 12})` })
      : text(center, bottom + 17, category, { "text-anchor": "middle", "font-size": 11, fill: textColor });
  });
  body += `<line x1="${left}" y1="${bottom}" x2="${right}" y2="${bottom}" stroke="${axisColor}"/>`;
  body += legend(legendEntries, right, 54);
  return { width, height, body };
}

/** A complete SVG document: the parts stacked top to bottom on a white background. */
export function svgDocument(parts: readonly ChartPart[], title: string): string {
  const width = Math.max(...parts.map((part) => part.width));
  const height = parts.reduce((sum, part) => sum + part.height, 0);
  let offset = 0;
  let body = "";
  for (const part of parts) {
    body += `<g transform="translate(0 ${offset})">${part.body}</g>`;
    offset += part.height;
  }
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="${escapeXml(fontFamily)}" role="img">` +
    `<title>${escapeXml(title)}</title>` +
    `<rect width="100%" height="100%" fill="#ffffff"/>` +
    body +
    "</svg>\n"
  );
}
