// Trend: an event counted per bucket (SPEC §4), with v2's maths, time zone and
// breakdown (§7) when the server has them; a uPlot line per series and a
// table of the same numbers under it.
import { LineChart } from "./chart.js";
import { BreakdownInput, EmptyHelp, ErrorBanner, EventInput, Field, DatesRow, FiltersField, fieldError, formatNumber, html, seriesName, useProperties } from "./widgets.js";

const countMaths = ["total", "unique"];
const propertyMaths = ["sum", "avg", "min", "max"];
const groupBys = ["hour", "day", "week", "month"];
const fieldKeys = ["event", "math", "mathProperty", "groupBy", "filters", "dateFrom", "dateTo", "timezone", "breakdown", "breakdownLimit"];

export function TrendForm({ query, set, caps, token, error }) {
  const properties = useProperties(token, caps, query.event);
  const maths = caps.v2 ? [...countMaths, ...propertyMaths, "avg_per_user"] : countMaths;
  return html`<div class="form">
    <div class="row">
      <${Field} label="Event" name="event" error=${fieldError(error, "event")}>
        <${EventInput} value=${query.event} caps=${caps} testid="trend-event" onInput=${(event) => set({ event })} />
      <//>
      <${Field} label="Math" name="math" error=${fieldError(error, "math")}>
        <select value=${query.math} data-testid="trend-math" onChange=${(event) => set({ math: event.currentTarget.value })}>
          ${maths.map((math) => html`<option value=${math}>${math}</option>`)}
        </select>
      <//>
      ${propertyMaths.includes(query.math) &&
      html`<${Field} label="Of property" name="mathProperty" error=${fieldError(error, "mathProperty")}>
        <input type="text" value=${query.mathProperty} data-testid="trend-math-property" onInput=${(event) => set({ mathProperty: event.currentTarget.value })} />
      <//>`}
      <${Field} label="Group by" name="groupBy" error=${fieldError(error, "groupBy")}>
        <select value=${query.groupBy} data-testid="trend-group-by" onChange=${(event) => set({ groupBy: event.currentTarget.value })}>
          ${groupBys.map((unit) => html`<option value=${unit}>${unit}</option>`)}
        </select>
      <//>
      <${BreakdownInput} query=${query} set=${set} caps=${caps} properties=${properties} error=${error} />
    </div>
    <${DatesRow} query=${query} set=${set} caps=${caps} error=${error} />
    <${FiltersField} label="Filters" query=${query} set=${set} properties=${properties} error=${error} />
    <${ErrorBanner} error=${error} keys=${fieldKeys} />
  </div>`;
}

// One series per breakdown value (and "Other"), or the whole count alone.
export function trendSeries(answer, query) {
  const valueOf = (point) => (point.count !== undefined ? point.count : point.value);
  if (answer.breakdown) {
    const series = answer.breakdown.map((entry) => ({ name: seriesName(entry.value), values: entry.data.map(valueOf) }));
    if (answer.breakdownOther) series.push({ name: "Other", values: answer.breakdownOther.data.map(valueOf) });
    return series;
  }
  return [{ name: query.event || "events", values: answer.data.map(valueOf) }];
}

export function TrendResult({ answer, query }) {
  const labels = answer.data.map((point) => point.date);
  const series = trendSeries(answer, query);
  const counting = answer.data.every((point) => point.count !== undefined);
  const total = counting ? answer.data.reduce((sum, point) => sum + point.count, 0) : undefined;
  return html`<div class="result">
    ${counting && html`<p class="headline">Total <strong data-testid="trend-total" data-value=${total}>${formatNumber(total)}</strong>${query.math === "unique" ? " (unique users, summed per bucket)" : ""}</p>`}
    ${total === 0 && !answer.breakdown && html`<${EmptyHelp} />`}
    <${LineChart} labels=${labels} series=${series} />
    <table class="numbers" data-testid="trend-table">
      <thead><tr><th>Bucket</th>${series.map((entry) => html`<th>${entry.name}</th>`)}</tr></thead>
      <tbody>
        ${labels.map(
          (label, row) => html`<tr key=${row}><td>${label}</td>${series.map(
            (entry, column) => html`<td class="num" data-series=${column} data-date=${label} data-value=${entry.values[row] ?? ""}>${formatNumber(entry.values[row])}</td>`,
          )}</tr>`,
        )}
      </tbody>
    </table>
  </div>`;
}
