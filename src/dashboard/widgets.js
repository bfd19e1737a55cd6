// Form pieces shared by the three views: labelled fields that show the API's
// error for the field they edit, the event and property pickers (a list when
// the server has one, free text when it answers 404), filters, date range,
// time zone, and the empty-workspace help.
import { h } from "preact";
import { useEffect, useState } from "preact/hooks";
import { fetchProperties } from "./api.js";
import htm from "htm";
import { filterOps, opTakesValue, rangePresets } from "./state.js";

export const html = htm.bind(h);

// Does the API error name this field (or something inside it)?
export function claims(error, key) {
  const field = error?.field;
  return field !== undefined && (field === key || field.startsWith(`${key}.`) || field.startsWith(`${key}[`));
}

export function fieldError(error, key) {
  return claims(error, key) ? error.message : undefined;
}

export function Field({ label, error, children, name }) {
  return html`<label class=${`field${error ? " has-error" : ""}`} data-field=${name}>
    <span class="field-label">${label}</span>
    ${children}
    ${error && html`<span class="field-error" role="alert">${error}</span>`}
  </label>`;
}

// The request's error when no field on the form shows it.
export function ErrorBanner({ error, keys }) {
  if (!error || keys.some((key) => claims(error, key))) return null;
  return html`<div class="error-banner" role="alert">${error.code}: ${error.message}</div>`;
}

let listCounter = 0;
const listId = (prefix) => `${prefix}-${++listCounter}`;

export function EventInput({ value, onInput, caps, testid, placeholder = "event name" }) {
  const id = caps.events ? listId("events") : undefined;
  return html`<span class="picker">
    <input type="text" list=${id} value=${value} placeholder=${placeholder} data-testid=${testid} spellcheck="false"
      onInput=${(event) => onInput(event.currentTarget.value)} />
    ${caps.events && html`<datalist id=${id}>${caps.events.map((entry) => html`<option value=${entry.event}>${entry.count} events</option>`)}</datalist>`}
  </span>`;
}

export function PropertyInput({ value, onInput, properties, testid, placeholder = "property" }) {
  const id = properties ? listId("properties") : undefined;
  return html`<span class="picker">
    <input type="text" list=${id} value=${value} placeholder=${placeholder} data-testid=${testid} spellcheck="false"
      onInput=${(event) => onInput(event.currentTarget.value)} />
    ${properties && html`<datalist id=${id}>${properties.map((entry) => html`<option value=${entry.property}>${entry.count} events</option>`)}</datalist>`}
  </span>`;
}

export function FiltersEditor({ filters, onChange, properties, error, keyPrefix = "filters", testid = "filter" }) {
  const update = (index, change) => onChange(filters.map((filter, at) => (at === index ? { ...filter, ...change } : filter)));
  return html`<div class="filters">
    ${filters.map(
      (filter, index) => html`<div class="filter-row" key=${index}>
        <${PropertyInput} value=${filter.property} properties=${properties} testid=${`${testid}-property-${index}`} onInput=${(property) => update(index, { property })} />
        <select value=${filter.op} data-testid=${`${testid}-op-${index}`} onChange=${(event) => update(index, { op: event.currentTarget.value })}>
          ${filterOps.map((op) => html`<option value=${op}>${op}</option>`)}
        </select>
        ${opTakesValue(filter.op) &&
        html`<input type="text" value=${filter.value ?? ""} placeholder="value" data-testid=${`${testid}-value-${index}`} onInput=${(event) => update(index, { value: event.currentTarget.value })} />`}
        <button type="button" class="icon" title="Remove filter" onClick=${() => onChange(filters.filter((_, at) => at !== index))}>×</button>
        ${fieldError(error, `${keyPrefix}[${index}]`) && html`<span class="field-error" role="alert">${fieldError(error, `${keyPrefix}[${index}]`)}</span>`}
      </div>`,
    )}
    <button type="button" class="link" data-testid=${`${testid}-add`} onClick=${() => onChange([...filters, { property: "", op: "eq", value: "" }])}>+ filter</button>
    ${fieldError(error, keyPrefix) && !filters.some((_, index) => claims(error, `${keyPrefix}[${index}]`)) && html`<span class="field-error" role="alert">${error.message}</span>`}
  </div>`;
}

export function RangePicker({ query, set, error }) {
  return html`<div class="range">
    <${Field} label="Dates" name="range">
      <select value=${query.range} data-testid="range" onChange=${(event) => set({ range: event.currentTarget.value })}>
        ${rangePresets.map(([value, label]) => html`<option value=${value}>${label}</option>`)}
      </select>
    <//>
    ${query.range === "custom" &&
    html`<${Field} label="From" name="dateFrom" error=${fieldError(error, "dateFrom")}>
        <input type="date" value=${query.dateFrom} data-testid="date-from" onInput=${(event) => set({ dateFrom: event.currentTarget.value })} />
      <//>
      <${Field} label="To" name="dateTo" error=${fieldError(error, "dateTo")}>
        <input type="date" value=${query.dateTo} data-testid="date-to" onInput=${(event) => set({ dateTo: event.currentTarget.value })} />
      <//>`}
  </div>`;
}

const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];

export function ZonePicker({ query, set, caps, error }) {
  if (!caps.v2) return html`<${Field} label="Time zone" name="timezone"><span class="static" title="This server answers query API v1, in UTC only">UTC</span><//>`;
  return html`<${Field} label="Time zone" name="timezone" error=${fieldError(error, "timezone")}>
    <input type="text" list="zones" value=${query.timezone} data-testid="timezone" spellcheck="false" onInput=${(event) => set({ timezone: event.currentTarget.value })} />
    <datalist id="zones">${["UTC", ...zones].map((zone) => html`<option value=${zone} />`)}</datalist>
  <//>`;
}

// The date range and time zone, one row under each view's events.
export function DatesRow({ query, set, caps, error }) {
  return html`<div class="row">
    <${RangePicker} query=${query} set=${set} error=${error} />
    <${ZonePicker} query=${query} set=${set} caps=${caps} error=${error} />
  </div>`;
}

export function FiltersField({ label, query, set, properties, error }) {
  return html`<${Field} label=${label} name="filters">
    <${FiltersEditor} filters=${query.filters} properties=${properties} error=${error} onChange=${(filters) => set({ filters })} />
  <//>`;
}

export function BreakdownInput({ query, set, caps, properties, error }) {
  if (!caps.v2) return null;
  return html`<${Field} label="Breakdown" name="breakdown" error=${fieldError(error, "breakdown")}>
    <${PropertyInput} value=${query.breakdown} properties=${properties} testid="breakdown" placeholder="none" onInput=${(breakdown) => set({ breakdown })} />
  <//>`;
}

export function EmptyHelp() {
  const ingest = `${location.protocol}//${location.hostname}:8081`;
  return html`<div class="empty" data-testid="empty-help">
    <p>Nothing matched. If the workspace is new, send it an event (the ingest listener is on port 8081 by default):</p>
    <pre>curl -X POST ${ingest}/ingest -H 'content-type: application/json' \\
  -d '{"apiKey":"YOUR_API_KEY","event":"signup","distinctId":"user-1"}'</pre>
  </div>`;
}

export const formatNumber = (value) => (value === null || value === undefined ? "–" : typeof value === "number" ? value.toLocaleString("en-US", { maximumFractionDigits: 2 }) : String(value));
export const formatPercent = (ratio) => `${(ratio * 100).toFixed(1)}%`;
export function formatDuration(ms) {
  if (ms === null || ms === undefined) return "–";
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  if (seconds < 3600) return `${(seconds / 60).toFixed(1)} min`;
  if (seconds < 86_400) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86_400).toFixed(1)} d`;
}

// The property list of an event (v2 servers only), refreshed when the event name settles.
export function useProperties(token, caps, event) {
  const [properties, setProperties] = useState(undefined);
  useEffect(() => {
    if (!caps.v2) return undefined;
    const timer = setTimeout(() => {
      fetchProperties(token, event).then(setProperties, () => setProperties(undefined));
    }, 250);
    return () => clearTimeout(timer);
  }, [token, caps.v2, event]);
  return properties;
}

export const seriesName = (value) => (value === null ? "(not set)" : String(value));
