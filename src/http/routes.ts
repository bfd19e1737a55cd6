/**
 * Every endpoint the two listeners serve, in one list: the router dispatches
 * from it, the metrics label requests by its `name` (a fixed set, never the raw
 * URL, so a client cannot grow the label set), and the OpenAPI document is
 * generated from it. A route added here does not compile until server.ts has a
 * handler and openapi.ts a description for it.
 */

export type Listener = "query" | "ingest";

/** What a route takes as a credential; `none` routes are also served while the registry is unreadable. */
export type Credential = "none" | "apiKey" | "bearer";

export interface RouteSpec {
  /** Stable label: metrics' `route`, the handler's key, the OpenAPI operationId. */
  name: string;
  listeners: readonly Listener[];
  method: "get" | "post";
  path: string;
  credential: Credential;
  summary: string;
}

const both = ["query", "ingest"] as const satisfies readonly Listener[];

export const routes = [
  { name: "ingest", listeners: ["ingest"], method: "post", path: "/ingest", credential: "apiKey", summary: "Store one event (SPEC §2)" },
  { name: "ingest_batch", listeners: ["ingest"], method: "post", path: "/ingest/batch", credential: "apiKey", summary: "Store up to 1 000 events; each is checked on its own (SPEC §2)" },
  { name: "test_event", listeners: ["query"], method: "post", path: "/api/v1/internal/test-event", credential: "bearer", summary: "Store one test_event in the token's workspace (SPEC §3)" },
  { name: "query_trend", listeners: ["query"], method: "post", path: "/api/v1/query/trend", credential: "bearer", summary: "Events per bucket (SPEC §4, §7)" },
  { name: "query_funnel", listeners: ["query"], method: "post", path: "/api/v1/query/funnel", credential: "bearer", summary: "Users reaching each step (SPEC §4, §7)" },
  { name: "query_retention", listeners: ["query"], method: "post", path: "/api/v1/query/retention", credential: "bearer", summary: "Cohorts and their return per period (SPEC §4, §7)" },
  { name: "events", listeners: ["query"], method: "get", path: "/api/v1/events", credential: "bearer", summary: "Event names of the workspace and how many events carry each (SPEC §7.6)" },
  { name: "properties", listeners: ["query"], method: "get", path: "/api/v1/properties", credential: "bearer", summary: "Top-level property keys and on how many events each is set; ?event=NAME narrows to one event (SPEC §7.6)" },
  { name: "user_delete", listeners: ["query"], method: "post", path: "/api/v1/users/delete", credential: "bearer", summary: "Delete every event of one distinctId stored so far, from answers and from disk (a privacy request)" },
  { name: "live", listeners: ["query"], method: "get", path: "/api/v1/live", credential: "bearer", summary: "A WebSocket: subscribe queries and receive their answers again as events arrive; the token goes in the first message (docs/dashboard.md)" },
  { name: "sdk", listeners: ["ingest"], method: "get", path: "/sdk.js", credential: "none", summary: "The browser snippet, an ES module (docs/clients.md)" },
  { name: "health", listeners: both, method: "get", path: "/health", credential: "none", summary: "200 while the process runs (SPEC §8)" },
  { name: "ready", listeners: both, method: "get", path: "/ready", credential: "none", summary: "200 once the store is open and the workers started; 503 while starting or stopping (SPEC §8)" },
  { name: "metrics", listeners: ["query"], method: "get", path: "/metrics", credential: "none", summary: "Prometheus text format (SPEC §8)" },
  { name: "openapi", listeners: ["query"], method: "get", path: "/openapi.json", credential: "none", summary: "This document (SPEC §8)" },
] as const satisfies readonly RouteSpec[];

export type RouteName = (typeof routes)[number]["name"];

/** The metrics label of a request that matched no route. */
export const unknownRouteName = "unknown";

export function routesOf(listener: Listener): RouteSpec[] {
  return routes.filter((route) => (route.listeners as readonly Listener[]).includes(listener));
}
