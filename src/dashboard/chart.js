// The trend's line chart: one uPlot instance kept across answers, fed new data
// in place (setData) so that live refreshes do not flicker; rebuilt only when
// the set of series changes. x is the bucket's index and the axis shows the
// server's bucket labels, which are already wall times in the query's zone.
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import { html } from "./widgets.js";

export const palette = ["#3b6fd8", "#e0663e", "#2e9e6b", "#a14fc9", "#d4a21c", "#1aa3b8", "#d2487a", "#6b7a2e", "#7d5a43", "#5560a8"];

// Counts get whole-number ticks (no "0.2 events"); maths over a property keep uPlot's own.
const wholeSteps = Array.from({ length: 16 }, (_, power) => [1, 2, 5].map((step) => step * 10 ** power)).flat();

function options(labels, names, width, whole) {
  const shortLabel = (index) => {
    const label = labels[Math.round(index)];
    return label === undefined ? "" : label.length > 10 ? label.slice(5, 16) : label;
  };
  return {
    width,
    height: 300,
    padding: [12, 48, 0, 0],
    scales: { x: { time: false }, y: whole ? { range: (_, minimum, maximum) => [Math.min(0, minimum), Math.max(1, maximum)] } : {} },
    axes: [{ values: (_, splits) => splits.map((split) => (Number.isInteger(split) ? shortLabel(split) : "")), space: 60 }, whole ? { size: 60, incrs: wholeSteps } : { size: 60 }],
    series: [
      { label: "Bucket", value: (_, index) => (index === null ? "–" : labels[index] ?? "") },
      ...names.map((name, at) => ({ label: name, stroke: palette[at % palette.length], width: 2, points: { size: 5 } })),
    ],
    legend: { live: true },
    cursor: { drag: { x: false, y: false } },
  };
}

export function LineChart({ labels, series }) {
  const holder = useRef(null);
  const plot = useRef(null);
  const names = series.map((entry) => entry.name);
  const whole = series.every((entry) => entry.values.every((value) => value === null || Number.isInteger(value)));
  const shape = JSON.stringify(names) + "|" + labels.join(",") + "|" + whole;
  const data = [labels.map((_, index) => index), ...series.map((entry) => entry.values)];

  useEffect(() => {
    const width = holder.current.clientWidth || 800;
    plot.current = new uPlot(options(labels, names, width, whole), data, holder.current);
    const resize = () => plot.current.setSize({ width: holder.current.clientWidth, height: 300 });
    window.addEventListener("resize", resize);
    return () => {
      window.removeEventListener("resize", resize);
      plot.current.destroy();
      plot.current = null;
    };
  }, [shape]);

  // Same series and buckets, new numbers (a live refresh): update in place.
  useEffect(() => {
    plot.current?.setData(data);
  });

  return html`<div class="chart" ref=${holder} data-testid="trend-chart"></div>`;
}
