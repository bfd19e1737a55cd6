// Retention: cohorts by the period of their first cohort event, and how many
// came back with the return event in each later period (SPEC §4), with v2's
// filters, time zone and breakdown (§7). A triangle heat map: counts and
// percentages of the cohort.
import { useState } from "preact/hooks";
import { BreakdownInput, ErrorBanner, EventInput, Field, DatesRow, FiltersField, fieldError, formatPercent, html, seriesName, useProperties } from "./widgets.js";

const fieldKeys = ["cohortEvent", "retentionEvent", "windowDays", "filters", "dateFrom", "dateTo", "timezone", "breakdown", "breakdownLimit"];

export function RetentionForm({ query, set, caps, token, error }) {
  const properties = useProperties(token, caps, query.cohortEvent);
  const reference = (key) =>
    html`<${Field} label=${key === "cohortEvent" ? "Cohort event" : "Return event"} name=${key} error=${fieldError(error, key)}>
      <${EventInput} value=${query[key]} caps=${caps} testid=${`retention-${key === "cohortEvent" ? "cohort" : "return"}`} onInput=${(value) => set({ [key]: value })} />
    <//>`;
  return html`<div class="form">
    <div class="row">
      ${reference("cohortEvent")} ${reference("retentionEvent")}
      <${Field} label="Period (days)" name="windowDays" error=${fieldError(error, "windowDays")}>
        <input type="number" min="1" max="365" class="short" value=${query.windowDays} data-testid="retention-period" onInput=${(event) => set({ windowDays: event.currentTarget.value })} />
      <//>
      <${BreakdownInput} query=${query} set=${set} caps=${caps} properties=${properties} error=${error} />
    </div>
    <${DatesRow} query=${query} set=${set} caps=${caps} error=${error} />
    ${caps.v2 && html`<${FiltersField} label="Filters (both events)" query=${query} set=${set} properties=${properties} error=${error} />`}
    <${ErrorBanner} error=${error} keys=${fieldKeys} />
  </div>`;
}

// Blue, from pale (0%) to strong (100%).
const shade = (ratio) => `hsl(220 70% ${Math.round(96 - ratio * 50)}%)`;

function Triangle({ cohorts, windowDays }) {
  const periods = cohorts.reduce((most, cohort) => Math.max(most, cohort.weeks.length), 0);
  return html`<table class="numbers triangle" data-testid="retention-table">
    <thead><tr><th>Cohort</th><th>Users</th>${Array.from({ length: periods }, (_, index) => html`<th>${index === 0 ? "Start" : `+${index * windowDays} d`}</th>`)}</tr></thead>
    <tbody>
      ${cohorts.map(
        (cohort) => html`<tr data-cohort=${cohort.cohortDate}>
          <td>${cohort.cohortDate}</td>
          <td class="num" data-testid="retention-total" data-value=${cohort.total}>${cohort.total}</td>
          ${Array.from({ length: periods }, (_, index) => {
            if (index >= cohort.weeks.length) return html`<td class="void"></td>`;
            const count = cohort.weeks[index];
            const ratio = cohort.total === 0 ? 0 : count / cohort.total;
            return html`<td class="cell" data-period=${index} data-value=${count} style=${{ background: shade(ratio), color: ratio > 0.6 ? "#fff" : "#1c2430" }}>
              <span class="pct">${cohort.total === 0 ? "–" : formatPercent(ratio)}</span><span class="count">${count}</span>
            </td>`;
          })}
        </tr>`,
      )}
    </tbody>
  </table>`;
}

export function RetentionResult({ answer, query }) {
  const [chosen, choose] = useState("all");
  const series = answer.breakdown ? [...answer.breakdown, ...(answer.breakdownOther ? [{ ...answer.breakdownOther, value: "Other" }] : [])] : [];
  const shown = chosen === "all" ? answer.cohorts : series[Number(chosen)]?.cohorts ?? answer.cohorts;
  return html`<div class="result">
    ${series.length > 0 &&
    html`<label class="field inline"><span class="field-label">Show</span>
      <select value=${chosen} data-testid="retention-series" onChange=${(event) => choose(event.currentTarget.value)}>
        <option value="all">All users</option>
        ${series.map((entry, index) => html`<option value=${index}>${seriesName(entry.value)}</option>`)}
      </select></label>`}
    <${Triangle} cohorts=${shown} windowDays=${Number(query.windowDays)} />
  </div>`;
}
