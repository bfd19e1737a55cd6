/**
 * GET /openapi.json (SPEC §8) against the server that serves it: a structurally
 * valid OpenAPI 3.1 document whose operations are exactly the routes the two
 * listeners answer, and whose request bodies come from the validating schemas.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { routes } from "../../src/http/routes.js";
import { queryRequestSchemas } from "../../src/query/schemas.js";
import { eventFieldsSchema } from "../../src/ingest/event-schema.js";
import { send } from "../helpers/http.js";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

let server: ServerHandle;
let document: any;
beforeAll(async () => {
  server = await startServer();
  const answer = await send(`${server.queryUrl}/openapi.json`, { method: "GET" });
  expect(answer.status).toBe(200);
  expect(answer.headers["content-type"]).toBe("application/json");
  document = answer.body;
});
afterAll(async () => {
  await server.stop();
  removeDataDir(server.dataDir);
});

const methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/** Every `$ref` in the document points at something in it. */
function unresolvedRefs(node: unknown, root: any, found: string[] = []): string[] {
  if (Array.isArray(node)) for (const item of node) unresolvedRefs(item, root, found);
  else if (node !== null && typeof node === "object") {
    for (const [key, value] of Object.entries(node)) {
      if (key === "$ref" && typeof value === "string" && value.startsWith("#/")) {
        let target = root;
        for (const part of value.slice(2).split("/")) target = target?.[part];
        if (target === undefined) found.push(value);
      } else unresolvedRefs(value, root, found);
    }
  }
  return found;
}

describe("the OpenAPI document", () => {
  it("has the structure OpenAPI 3.1 requires", () => {
    expect(document.openapi).toMatch(/^3\.1\.\d+$/);
    expect(typeof document.info.title).toBe("string");
    expect(typeof document.info.version).toBe("string");
    expect(typeof document.paths).toBe("object");
    const operationIds = new Set<string>();
    for (const [path, item] of Object.entries<any>(document.paths)) {
      expect(path.startsWith("/"), path).toBe(true);
      for (const [method, operation] of Object.entries<any>(item)) {
        expect(methods, `${method} ${path}`).toContain(method);
        expect(operationIds.has(operation.operationId), operation.operationId).toBe(false);
        operationIds.add(operation.operationId);
        expect(Object.keys(operation.responses).length).toBeGreaterThan(0);
        for (const [status, response] of Object.entries<any>(operation.responses)) {
          expect(status).toMatch(/^[1-5]\d\d$/);
          expect(typeof response.description).toBe("string");
        }
        for (const requirement of operation.security ?? []) for (const scheme of Object.keys(requirement)) expect(document.components.securitySchemes[scheme]).toBeDefined();
        if (operation.requestBody) expect(operation.requestBody.content["application/json"].schema.type).toBe("object");
      }
    }
    expect(unresolvedRefs(document, document)).toEqual([]);
  });

  it("lists exactly the routes of the route table", () => {
    const listed = Object.entries<any>(document.paths).flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`));
    expect(listed.sort()).toEqual(routes.map((route) => `${route.method} ${route.path}`).sort());
  });

  it("names only routes the server answers, each on its own listeners, and nothing else is answered", async () => {
    for (const route of routes) {
      for (const [listener, base] of [["query", server.queryUrl], ["ingest", server.ingestUrl]] as const) {
        const answer = await send(`${base}${route.path}`, { method: route.method.toUpperCase(), body: route.method === "post" ? "{}" : undefined });
        const served = (route.listeners as readonly string[]).includes(listener);
        if (served) expect(answer.status, `${route.method} ${route.path} on ${listener}`).not.toBe(404);
        else expect(answer.status, `${route.method} ${route.path} on ${listener}`).toBe(404);
      }
    }
    // "/" is the dashboard's page (static files, not an API route: docs/dashboard.md).
    for (const path of ["/api/v1/query", "/api/v1/query/other", "/ingest/other", "/metrics/x", "/openapi"]) {
      expect((await send(`${server.queryUrl}${path}`, { method: "GET" })).status, path).toBe(404);
    }
  });

  it("describes request bodies from the schemas that validate them", () => {
    const body = (path: string) => document.paths[path].post.requestBody.content["application/json"].schema;
    for (const [kind, schema] of Object.entries(queryRequestSchemas)) {
      expect(Object.keys(body(`/api/v1/query/${kind}`).properties).sort(), kind).toEqual(Object.keys(schema.shape).sort());
    }
    expect(body("/api/v1/query/trend").required).toEqual(expect.arrayContaining(["event", "dateFrom", "dateTo"]));
    expect(body("/api/v1/query/trend").required).not.toContain("groupBy");
    expect(body("/api/v1/query/trend").properties.groupBy.enum).toEqual(expect.arrayContaining(["hour", "day", "week", "month"]));
    expect(Object.keys(body("/ingest").properties).sort()).toEqual(["apiKey", ...Object.keys(eventFieldsSchema.shape)].sort());
    expect(body("/ingest/batch").properties.events.items.required).toEqual(["event", "distinctId"]);
    expect(document.paths["/ingest"].post.servers[0].url).toMatch(/:8081$/);
  });
});
