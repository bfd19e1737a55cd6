/**
 * GET /openapi.json (SPEC §8): an OpenAPI 3.1 document of every route in
 * routes.ts, its request bodies generated (z.toJSONSchema) from the zod schemas
 * that validate them, so a field added to a schema appears here without an edit.
 * Answers are described here, by hand-written zod schemas: the services build
 * them as text and validate nothing on the way out.
 */
import { z } from "zod";
import { batchBodySchema, singleBodySchema } from "../ingest/event-schema.js";
import { queryRequestSchemas } from "../query/schemas.js";
import { userDeletionSchema } from "../query/user-deletion.js";
import { errorStatus } from "../errors.js";
import { routes, type RouteName } from "./routes.js";

type JsonObject = Record<string, unknown>;

const errorSchema = z.object({
  ok: z.literal(false),
  error: z.object({ code: z.enum(Object.keys(errorStatus) as [keyof typeof errorStatus, ...Array<keyof typeof errorStatus>]), message: z.string() }),
});
const okSchema = z.object({ ok: z.literal(true) });
const batchAnswerSchema = z.object({
  ok: z.literal(true),
  accepted: z.int().min(0),
  errors: z.array(z.object({ index: z.int().min(0), code: z.literal("invalid_request"), message: z.string() })).optional().describe("present only when some event was skipped; the first 100"),
});
const testEventAnswerSchema = z.object({ ok: z.literal(true), eventId: z.uuid(), timestamp: z.string().describe("UTC, YYYY-MM-DD HH:MM:SS.mmm") });
// Answers of the queries gain fields with SPEC §7 (breakdowns, math values); their core is described, the rest allowed.
const trendAnswerSchema = z.looseObject({ data: z.array(z.looseObject({ date: z.string(), count: z.number().optional(), value: z.number().nullable().optional() })) });
const funnelAnswerSchema = z.looseObject({ steps: z.array(z.looseObject({ event: z.string(), count: z.int(), rate: z.number() })) });
const userDeletionAnswerSchema = z.object({ ok: z.literal(true), deletedEvents: z.int().min(0) });
const retentionAnswerSchema = z.looseObject({ cohorts: z.array(z.looseObject({ cohortDate: z.string(), total: z.int(), weeks: z.array(z.int()) })) });

/** Input side: defaults are optional fields, and refinements the schema cannot express are left out. */
function jsonSchema(schema: z.ZodType, io: "input" | "output" = "input"): JsonObject {
  const generated = z.toJSONSchema(schema, { target: "draft-2020-12", io, unrepresentable: "any" }) as JsonObject;
  delete generated.$schema;
  return generated;
}

const json = (schema: z.ZodType, description: string) => ({ description, content: { "application/json": { schema: jsonSchema(schema, "output") } } });
const errorAnswer = (description: string) => json(errorSchema, description);

/** What differs between routes; the rest (errors, security) follows from the route's credential. */
interface Operation {
  request?: z.ZodType;
  ok: JsonObject;
  /** The status of `ok` when not 200 (the live socket's 101). */
  okStatus?: string;
  extraErrors?: Record<string, string>;
}

const queryErrors = { "400": "invalid JSON or an invalid field (the message names it)", "413": "body over 1 MiB" };
const ingestErrors = { "400": "invalid JSON, or an invalid event", "413": "body over the byte limit, or too many events" };

const operations: Record<RouteName, Operation> = {
  ingest: { request: singleBodySchema, ok: json(okSchema, "stored (on disk, fsynced)"), extraErrors: ingestErrors },
  ingest_batch: { request: batchBodySchema, ok: json(batchAnswerSchema, "valid events stored; invalid ones listed"), extraErrors: ingestErrors },
  test_event: { ok: json(testEventAnswerSchema, "stored") },
  query_trend: { request: queryRequestSchemas.trend, ok: json(trendAnswerSchema, "every bucket of the range"), extraErrors: queryErrors },
  query_funnel: { request: queryRequestSchemas.funnel, ok: json(funnelAnswerSchema, "users per step"), extraErrors: queryErrors },
  query_retention: { request: queryRequestSchemas.retention, ok: json(retentionAnswerSchema, "one cohort per period"), extraErrors: queryErrors },
  health: { ok: json(okSchema, "the process runs") },
  ready: { ok: json(okSchema, "ready to serve"), extraErrors: { "503": "starting or stopping" } },
  metrics: { ok: { description: "Prometheus text format 0.0.4", content: { "text/plain": { schema: { type: "string" } } } } },
  openapi: { ok: { description: "this document", content: { "application/json": { schema: { type: "object" } } } } },
  events: { ok: { description: "every event name and how many events carry it, by count descending, then name", content: { "application/json": { schema: { type: "object", properties: { data: { type: "array", items: { type: "object", properties: { event: { type: "string" }, count: { type: "integer" } } } } } } } } } },
  properties: { ok: { description: "every top-level property key set on events (of ?event=NAME when given) and on how many", content: { "application/json": { schema: { type: "object", properties: { data: { type: "array", items: { type: "object", properties: { property: { type: "string" }, count: { type: "integer" } } } } } } } } } },
  user_delete: { request: userDeletionSchema, ok: json(userDeletionAnswerSchema, "every event of the user stored before the request is gone"), extraErrors: queryErrors },
  live: {
    okStatus: "101",
    ok: { description: "Switching Protocols: a WebSocket. Send {\"type\":\"auth\",\"token\":…} first, then {\"type\":\"subscribe\",\"id\":…,\"kind\":\"trend\"|\"funnel\"|\"retention\",\"query\":…} with a query body as above; each answer arrives as {\"type\":\"answer\",\"id\":…,\"answer\":…} at once and again, at most once a second, when the workspace stores new events" },
    extraErrors: { "400": "a GET without Upgrade: websocket" },
  },
  sdk: { ok: { description: "the browser snippet, an ES module", content: { "text/javascript": { schema: { type: "string" } } } } },
};

export function openApiDocument(): JsonObject {
  const paths: Record<string, JsonObject> = {};
  for (const route of routes) {
    const operation = operations[route.name];
    const responses: JsonObject = { [operation.okStatus ?? "200"]: operation.ok };
    for (const [status, description] of Object.entries(operation.extraErrors ?? {})) responses[status] = errorAnswer(description);
    if (route.credential !== "none") responses["401"] = errorAnswer(route.credential === "bearer" ? "missing or unknown Bearer token" : "missing or unknown apiKey");
    if (route.credential !== "none") responses["503"] = errorAnswer("overloaded (with Retry-After), or starting or stopping");
    responses["405"] = errorAnswer("wrong method");
    const entry: JsonObject = {
      operationId: route.name,
      summary: route.summary,
      tags: [...route.listeners],
      responses,
    };
    if (route.credential === "bearer") entry.security = [{ bearer: [] }];
    else entry.security = [];
    if (operation.request !== undefined) entry.requestBody = { required: true, content: { "application/json": { schema: jsonSchema(operation.request) } } };
    // Ingest routes live on the ingest listener only; the document's default server is the query listener.
    if (route.listeners.length === 1 && route.listeners[0] === "ingest") entry.servers = [{ url: "http://127.0.0.1:8081", description: "ingest listener (EVENTIDE_INGEST_PORT)" }];
    paths[route.path] = { ...paths[route.path], [route.method]: entry };
  }
  return {
    openapi: "3.1.0",
    info: { title: "Eventide", version: "1", description: "Self-hosted product analytics. Two listeners: the query API (default server) and the ingest API." },
    servers: [{ url: "http://127.0.0.1:8080", description: "query listener (EVENTIDE_QUERY_PORT)" }],
    tags: [
      { name: "query", description: "served by the query listener" },
      { name: "ingest", description: "served by the ingest listener" },
    ],
    components: { securitySchemes: { bearer: { type: "http", scheme: "bearer", description: "a workspace's access token" } } },
    paths,
  };
}
