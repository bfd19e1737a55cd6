// A query's state lives in the URL (?view=trend&q={…}), so every query is a
// link to share and the back button walks through the queries run. This module
// holds the defaults, the URL codec, date ranges and the request bodies.

export const views = ["trend", "funnel", "retention"];
export const rangePresets = [["7d", "Last 7 days"], ["30d", "Last 30 days"], ["90d", "Last 90 days"], ["custom", "Custom"]];
export const filterOps = ["eq", "neq", "contains", "not_contains", "gt", "gte", "lt", "lte", "is_set", "is_not_set"];
export const opTakesValue = (op) => op !== "is_set" && op !== "is_not_set";
export const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

const rangeDefaults = () => ({ range: "30d", dateFrom: "", dateTo: "", timezone: browserZone(), filters: [], breakdown: "" });

export function defaults(view) {
  switch (view) {
    case "trend":
      return { ...rangeDefaults(), range: "7d", event: "", math: "total", mathProperty: "", groupBy: "day" };
    case "funnel":
      return { ...rangeDefaults(), steps: ["", ""], windowValue: 1, windowUnit: "days", order: "ordered", exclusions: [] };
    case "retention":
      return { ...rangeDefaults(), cohortEvent: "", retentionEvent: "", windowDays: 7 };
  }
  throw new Error(`unknown view ${view}`);
}

export function readUrl(search = location.search) {
  const params = new URLSearchParams(search);
  const view = views.includes(params.get("view")) ? params.get("view") : "trend";
  let query = defaults(view);
  let given = false;
  const text = params.get("q");
  if (text) {
    try {
      query = { ...query, ...JSON.parse(text) };
      given = true;
    } catch {
      console.warn("Eventide dashboard: the q parameter of the URL is not JSON; using defaults");
    }
  }
  return { view, query, given, live: params.get("live") === "1" };
}

export function urlFor(view, query, live) {
  const params = new URLSearchParams({ view, q: JSON.stringify(query) });
  if (live) params.set("live", "1");
  return `?${params}`;
}

// YYYY-MM-DD of an instant in a zone ("en-CA" formats dates that way).
export function dateIn(zone, timeMs = Date.now()) {
  return new Intl.DateTimeFormat("en-CA", { timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit" }).format(new Date(timeMs));
}

export function addDays(date, days) {
  return new Date(Date.parse(`${date}T00:00:00Z`) + days * 86_400_000).toISOString().slice(0, 10);
}

export function zoneOf(query, caps) {
  return caps.v2 ? query.timezone || "UTC" : "UTC";
}

export function dateRange(query, caps) {
  if (query.range === "custom") return { dateFrom: query.dateFrom, dateTo: query.dateTo };
  const days = Number.parseInt(query.range, 10) || 7;
  const today = dateIn(zoneOf(query, caps));
  return { dateFrom: addDays(today, 1 - days), dateTo: today };
}

const activeFilters = (filters) =>
  filters.filter((filter) => filter.property !== "").map(({ property, op, value }) => (opTakesValue(op) ? { property, op, value: value ?? "" } : { property, op }));

const windowUnitSeconds = { minutes: 60, hours: 3600, days: 86_400 };
export const windowUnits = Object.keys(windowUnitSeconds);

// The request body of a view's query: v2 fields (SPEC §7) only when the server has them and they say something.
export function requestBody(view, query, caps) {
  const body = dateRange(query, caps);
  const v2 = (fields) => (caps.v2 ? Object.assign(body, fields) : body);
  const zone = zoneOf(query, caps);
  if (zone !== "UTC") v2({ timezone: zone });
  if (caps.v2 && query.breakdown) v2({ breakdown: query.breakdown });
  switch (view) {
    case "trend": {
      Object.assign(body, { event: query.event, groupBy: query.groupBy, math: query.math });
      const filters = activeFilters(query.filters);
      if (filters.length > 0) body.filters = filters;
      if (caps.v2 && query.mathProperty && !["total", "unique"].includes(query.math)) body.mathProperty = query.mathProperty;
      return body;
    }
    case "funnel": {
      Object.assign(body, { steps: query.steps, conversionWindow: Math.round(Number(query.windowValue) * windowUnitSeconds[query.windowUnit]) });
      if (caps.v2) {
        const filters = activeFilters(query.filters);
        if (filters.length > 0) body.filters = filters;
        if (query.order !== "ordered") body.order = query.order;
        const exclusions = query.exclusions.filter((exclusion) => exclusion.event !== "");
        if (exclusions.length > 0) body.exclusions = exclusions.map(({ event, fromStep, toStep }) => ({ event, fromStep: Number(fromStep), toStep: Number(toStep) }));
        body.timeToConvert = true;
      }
      return body;
    }
    case "retention": {
      Object.assign(body, { cohortEvent: query.cohortEvent, retentionEvent: query.retentionEvent, windowDays: Number(query.windowDays) });
      const filters = activeFilters(query.filters);
      if (caps.v2 && filters.length > 0) body.filters = filters;
      return body;
    }
  }
  throw new Error(`unknown view ${view}`);
}

export const queryPath = (view) => `/api/v1/query/${view}`;
