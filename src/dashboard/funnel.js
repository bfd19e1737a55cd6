// Funnel: steps a user goes through within a conversion window (SPEC §4),
// with v2's order modes, exclusions, filters, breakdown and time to convert
// (§7) when the server has them. Bars per step; conversion from the first and
// from the previous step.
import { windowUnits } from "./state.js";
import { BreakdownInput, ErrorBanner, EventInput, Field, DatesRow, FiltersField, claims, fieldError, formatDuration, formatNumber, formatPercent, html, seriesName, useProperties } from "./widgets.js";

const orders = ["ordered", "strict", "unordered"];
const fieldKeys = ["steps", "conversionWindow", "order", "exclusions", "filters", "dateFrom", "dateTo", "timezone", "breakdown", "breakdownLimit", "timeToConvert"];

function moved(list, from, to) {
  const copy = [...list];
  const [item] = copy.splice(from, 1);
  copy.splice(to, 0, item);
  return copy;
}

export function FunnelForm({ query, set, caps, token, error }) {
  const properties = useProperties(token, caps, query.steps[0]);
  const setStep = (index, value) => set({ steps: query.steps.map((step, at) => (at === index ? value : step)) });
  const setExclusion = (index, change) => set({ exclusions: query.exclusions.map((exclusion, at) => (at === index ? { ...exclusion, ...change } : exclusion)) });
  const stepError = claims(error, "steps") && !query.steps.some((_, index) => claims(error, `steps[${index}]`)) ? error.message : undefined;
  return html`<div class="form">
    <div class="steps">
      ${query.steps.map(
        (step, index) => html`<div class="step-row" key=${index}>
          <span class="step-number">${index + 1}</span>
          <${EventInput} value=${step} caps=${caps} testid=${`funnel-step-${index}`} onInput=${(value) => setStep(index, value)} />
          <button type="button" class="icon" title="Move up" disabled=${index === 0} onClick=${() => set({ steps: moved(query.steps, index, index - 1) })}>↑</button>
          <button type="button" class="icon" title="Move down" disabled=${index === query.steps.length - 1} onClick=${() => set({ steps: moved(query.steps, index, index + 1) })}>↓</button>
          <button type="button" class="icon" title="Remove step" data-testid=${`funnel-remove-${index}`} disabled=${query.steps.length === 1} onClick=${() => set({ steps: query.steps.filter((_, at) => at !== index) })}>×</button>
          ${fieldError(error, `steps[${index}]`) && html`<span class="field-error" role="alert">${fieldError(error, `steps[${index}]`)}</span>`}
        </div>`,
      )}
      <button type="button" class="link" data-testid="funnel-add-step" disabled=${query.steps.length >= 20} onClick=${() => set({ steps: [...query.steps, ""] })}>+ step</button>
      ${stepError && html`<span class="field-error" role="alert">${stepError}</span>`}
    </div>
    <div class="row">
      <${Field} label="Conversion window" name="conversionWindow" error=${fieldError(error, "conversionWindow")}>
        <span class="pair">
          <input type="number" min="1" value=${query.windowValue} data-testid="funnel-window" onInput=${(event) => set({ windowValue: event.currentTarget.value })} />
          <select value=${query.windowUnit} data-testid="funnel-window-unit" onChange=${(event) => set({ windowUnit: event.currentTarget.value })}>
            ${windowUnits.map((unit) => html`<option value=${unit}>${unit}</option>`)}
          </select>
        </span>
      <//>
      ${caps.v2 &&
      html`<${Field} label="Order" name="order" error=${fieldError(error, "order")}>
        <select value=${query.order} data-testid="funnel-order" onChange=${(event) => set({ order: event.currentTarget.value })}>
          ${orders.map((order) => html`<option value=${order}>${order}</option>`)}
        </select>
      <//>`}
      <${BreakdownInput} query=${query} set=${set} caps=${caps} properties=${properties} error=${error} />
    </div>
    <${DatesRow} query=${query} set=${set} caps=${caps} error=${error} />
    ${caps.v2 &&
    html`<${FiltersField} label="Filters (every step)" query=${query} set=${set} properties=${properties} error=${error} />
      <${Field} label="Exclusions" name="exclusions" error=${fieldError(error, "exclusions")}>
        <div class="filters">
          ${query.exclusions.map(
            (exclusion, index) => html`<div class="filter-row" key=${index}>
              <${EventInput} value=${exclusion.event} caps=${caps} testid=${`funnel-exclusion-${index}`} onInput=${(event) => setExclusion(index, { event })} />
              <span>between step</span>
              <input type="number" min="1" class="short" value=${exclusion.fromStep} onInput=${(event) => setExclusion(index, { fromStep: event.currentTarget.value })} />
              <span>and</span>
              <input type="number" min="2" class="short" value=${exclusion.toStep} onInput=${(event) => setExclusion(index, { toStep: event.currentTarget.value })} />
              <button type="button" class="icon" title="Remove exclusion" onClick=${() => set({ exclusions: query.exclusions.filter((_, at) => at !== index) })}>×</button>
            </div>`,
          )}
          <button type="button" class="link" onClick=${() => set({ exclusions: [...query.exclusions, { event: "", fromStep: 1, toStep: 2 }] })}>+ exclusion</button>
        </div>
      <//>`}
    <${ErrorBanner} error=${error} keys=${fieldKeys} />
  </div>`;
}

function FunnelBars({ steps, testid }) {
  const first = steps[0]?.count ?? 0;
  return html`<div class="funnel" data-testid=${testid}>
    ${steps.map((step, index) => {
      const fromPrevious = index === 0 ? 1 : steps[index - 1].count === 0 ? 0 : step.count / steps[index - 1].count;
      const fromFirst = first === 0 ? 0 : step.count / first;
      return html`<div class="funnel-step" key=${index} data-step=${index}>
        <div class="funnel-label"><span class="step-number">${index + 1}</span> ${step.event}</div>
        <div class="bar-track"><div class="bar" style=${{ width: `${Math.max(fromFirst * 100, 0.5)}%` }}></div></div>
        <div class="funnel-numbers">
          <strong data-testid="funnel-count" data-value=${step.count}>${formatNumber(step.count)}</strong>
          <span data-testid="funnel-from-first" data-value=${fromFirst}>${formatPercent(fromFirst)} of step 1</span>
          ${index > 0 && html`<span data-testid="funnel-from-previous" data-value=${fromPrevious}>${formatPercent(fromPrevious)} of previous</span>`}
          ${step.medianTimeToConvertMs !== undefined &&
          html`<span class="muted">median ${formatDuration(step.medianTimeToConvertMs)}, mean ${formatDuration(step.avgTimeToConvertMs)} to convert</span>`}
        </div>
      </div>`;
    })}
  </div>`;
}

export function FunnelResult({ answer }) {
  const series = answer.breakdown ? [...answer.breakdown, ...(answer.breakdownOther ? [{ ...answer.breakdownOther, value: "Other" }] : [])] : [];
  return html`<div class="result">
    <${FunnelBars} steps=${answer.steps} testid="funnel-bars" />
    ${series.length > 0 &&
    html`<table class="numbers" data-testid="funnel-breakdown">
      <thead><tr><th>Value</th>${answer.steps.map((step, index) => html`<th>${index + 1}. ${step.event}</th>`)}</tr></thead>
      <tbody>
        ${series.map(
          (entry) => html`<tr><td>${seriesName(entry.value)}</td>${entry.steps.map(
            (step) => html`<td class="num" data-value=${step.count}>${formatNumber(step.count)} <span class="muted">${formatPercent(step.rate)}</span></td>`,
          )}</tr>`,
        )}
      </tbody>
    </table>`}
  </div>`;
}
