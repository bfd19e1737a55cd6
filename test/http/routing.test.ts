/**
 * SPEC §1 at the edge of the two listeners: routing (404/405), the one error
 * shape, the order in which checks answer (route → size → Bearer → JSON →
 * apiKey → batch size → fields), and CORS on the ingest listener.
 */
import { describe, expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import {
  countEvents,
  expectError,
  expectOk,
  ingestBatch,
  mebibyte,
  paddedJson,
  send,
  sendJson,
  uniqueName,
} from "../helpers/http.js";

const server = serverPerFile();

const queryPaths = ["/api/v1/query/trend", "/api/v1/query/funnel", "/api/v1/query/retention", "/api/v1/internal/test-event"];
const ingestPaths = ["/ingest", "/ingest/batch"];
const validTrend = { event: "anything", dateFrom: "2024-01-01", dateTo: "2024-01-02" };

describe("routing", () => {
  it.each(["/", "/nope", "/api", "/api/v1/query", "/api/v1/query/unknown", "/api/v1/query/trendx", "/ingest"])(
    "answers 404 not_found for the unknown query-listener path %s",
    async (path) => {
      expectError(await sendJson(`${server.queryUrl}${path}`, validTrend, { token: server.token }), 404, "not_found");
    },
  );

  it.each(["/", "/nope", "/ingest/batchx", "/ingest/single", "/api/v1/query/trend"])(
    "answers 404 not_found for the unknown ingest-listener path %s",
    async (path) => {
      expectError(await sendJson(`${server.ingestUrl}${path}`, { apiKey: server.apiKey, event: "e", distinctId: "u" }), 404, "not_found");
    },
  );

  it("answers 404 for a GET of an unknown path too, before any method check", async () => {
    expectError(await send(`${server.queryUrl}/nope`, { method: "GET" }), 404, "not_found");
    expectError(await send(`${server.ingestUrl}/nope`, { method: "GET" }), 404, "not_found");
  });

  for (const path of queryPaths) {
    it.each(["GET", "PUT", "DELETE", "PATCH", "OPTIONS"])(`answers 405 method_not_allowed for %s ${path} on the query listener`, async (method) => {
      const body = method === "GET" ? undefined : JSON.stringify(validTrend);
      expectError(await send(`${server.queryUrl}${path}`, { method, body, token: server.token }), 405, "method_not_allowed");
    });
  }

  for (const path of ingestPaths) {
    it.each(["GET", "PUT", "DELETE", "PATCH"])(`answers 405 method_not_allowed for %s ${path} on the ingest listener`, async (method) => {
      const body = method === "GET" ? undefined : JSON.stringify({ apiKey: server.apiKey, event: "e", distinctId: "u" });
      expectError(await send(`${server.ingestUrl}${path}`, { method, body }), 405, "method_not_allowed");
    });
  }

  it("takes each route with a trailing slash and with a query string, and no other spelling of it", async () => {
    const day = "2024-01-03";
    const event = uniqueName("spelling");
    const single = { apiKey: server.apiKey, event, distinctId: "u", timestamp: `${day}T00:00:00Z` };
    for (const path of ["/ingest/", "/ingest?source=web", "/ingest/?a=1"]) expectOk(await sendJson(`${server.ingestUrl}${path}`, single));
    for (const path of ["/ingest/batch/", "/ingest/batch?x=y"]) {
      expect(expectOk(await sendJson(`${server.ingestUrl}${path}`, { apiKey: server.apiKey, events: [single] })).accepted).toBe(1);
    }
    const trend = { event, dateFrom: day, dateTo: day, groupBy: "day" };
    for (const path of ["/api/v1/query/trend/", "/api/v1/query/trend?cache=no"]) {
      expect(expectOk(await sendJson(`${server.queryUrl}${path}`, trend, { token: server.token })).data).toEqual([{ date: day, count: 5 }]);
    }
    for (const path of ["/Ingest", "/ingest//", "/INGEST/BATCH"]) expectError(await sendJson(`${server.ingestUrl}${path}`, single), 404, "not_found");
    expectError(await sendJson(`${server.queryUrl}/api/v1/Query/trend`, trend, { token: server.token }), 404, "not_found");
    expect((await send(`${server.ingestUrl}/ingest/batch/`, { method: "OPTIONS" })).status).toBe(204);
    expectError(await send(`${server.ingestUrl}/ingest/`, { method: "GET" }), 405, "method_not_allowed");
    expectError(await send(`${server.queryUrl}/api/v1/query/funnel/`, { method: "OPTIONS" }), 405, "method_not_allowed");
    expect(await countEvents(server, server.token, event, day)).toBe(5);
  });

  it("stores nothing from a PUT to an ingest path", async () => {
    const event = uniqueName("put");
    const body = JSON.stringify({ apiKey: server.apiKey, events: [{ event, distinctId: "u", timestamp: "2024-01-01T00:00:00Z" }] });
    expectError(await send(`${server.ingestUrl}/ingest/batch`, { method: "PUT", body }), 405, "method_not_allowed");
    expect(await countEvents(server, server.token, event, "2024-01-01")).toBe(0);
  });
});

describe("request bodies", () => {
  it.each([
    ["text/plain (as navigator.sendBeacon sends)", { "content-type": "text/plain;charset=UTF-8" }],
    ["application/x-www-form-urlencoded", { "content-type": "application/x-www-form-urlencoded" }],
    ["no content type", {}],
  ])("are read as JSON whatever the content type: %s", async (_, headers) => {
    const event = uniqueName("content-type");
    const ingested = await send(`${server.ingestUrl}/ingest`, { headers, body: JSON.stringify({ apiKey: server.apiKey, event, distinctId: "u", timestamp: "2024-01-01T00:00:00Z" }) });
    expectOk(ingested);
    const queried = await send(`${server.queryUrl}/api/v1/query/trend`, { headers, token: server.token, body: JSON.stringify({ event, dateFrom: "2024-01-01", dateTo: "2024-01-01" }) });
    expect(expectOk(queried)).toEqual({ data: [{ date: "2024-01-01", count: 1 }] });
  });
});

describe("the error body", () => {
  it("is exactly {ok:false, error:{code, message}} with a JSON content type, on both listeners", async () => {
    for (const answer of [
      await send(`${server.queryUrl}/nope`),
      await send(`${server.ingestUrl}/nope`),
      await send(`${server.queryUrl}/api/v1/query/trend`, { body: "{" }),
      await send(`${server.ingestUrl}/ingest`, { body: "{" }),
    ]) {
      expect(answer.headers["content-type"]).toMatch(/^application\/json\b/);
      expect(answer.body).toEqual({ ok: false, error: { code: expect.any(String), message: expect.any(String) } });
      expect(Object.keys(answer.body)).toHaveLength(2);
      expect(Object.keys(answer.body.error)).toHaveLength(2);
    }
  });
});

describe("check order (SPEC §1: route, size, Bearer, JSON, apiKey, batch size, fields)", () => {
  const oversize = paddedJson({ event: "e" }, mebibyte + 1);

  it("answers 404 rather than 413 for an oversize body to an unknown path", async () => {
    expectError(await send(`${server.queryUrl}/api/v1/query/nope`, { body: oversize }), 404, "not_found");
    expectError(await send(`${server.ingestUrl}/nope`, { body: oversize }), 404, "not_found");
  });

  it("answers 405 rather than 413 for an oversize body with the wrong method", async () => {
    expectError(await send(`${server.queryUrl}/api/v1/query/trend`, { method: "PUT", body: oversize }), 405, "method_not_allowed");
    expectError(await send(`${server.ingestUrl}/ingest`, { method: "PUT", body: oversize }), 405, "method_not_allowed");
  });

  it("answers 404 and 405 rather than 401 when no token is sent", async () => {
    expectError(await send(`${server.queryUrl}/api/v1/query/nope`, { body: "{}" }), 404, "not_found");
    expectError(await send(`${server.queryUrl}/api/v1/query/trend`, { method: "GET" }), 405, "method_not_allowed");
  });

  it("answers 413 rather than 401 for an oversize query body with a bad token", async () => {
    expectError(await send(`${server.queryUrl}/api/v1/query/trend`, { body: oversize, token: "not-a-token" }), 413, "payload_too_large");
    expectError(await send(`${server.queryUrl}/api/v1/query/trend`, { body: oversize }), 413, "payload_too_large");
  });

  it("answers 413 rather than 401 for an oversize /ingest body with a bad apiKey", async () => {
    const body = paddedJson({ apiKey: "bad-key", event: "e", distinctId: "u" }, mebibyte + 1);
    expectError(await send(`${server.ingestUrl}/ingest`, { body }), 413, "payload_too_large");
  });

  it("answers 401 rather than 400 for a body that is not JSON with a bad or missing token on /api", async () => {
    for (const path of queryPaths) {
      expectError(await send(`${server.queryUrl}${path}`, { body: "not json", token: "not-a-token" }), 401, "unauthorized");
      expectError(await send(`${server.queryUrl}${path}`, { body: "not json" }), 401, "unauthorized");
    }
  });

  it("answers 400 invalid_json for a body that is not JSON with a good token", async () => {
    for (const path of ["/api/v1/query/trend", "/api/v1/query/funnel", "/api/v1/query/retention"]) {
      expectError(await send(`${server.queryUrl}${path}`, { body: "not json", token: server.token }), 400, "invalid_json");
    }
  });

  it("answers 401 rather than 400 invalid_request for invalid query fields with a bad token", async () => {
    expectError(await sendJson(`${server.queryUrl}/api/v1/query/trend`, { event: 5 }, { token: "not-a-token" }), 401, "unauthorized");
  });

  it("answers 400 invalid_json, not 401, for a body that is not JSON on ingest (the apiKey is inside the JSON)", async () => {
    for (const path of ingestPaths) {
      expectError(await send(`${server.ingestUrl}${path}`, { body: "{not json" }), 400, "invalid_json");
    }
  });

  it("answers 401 rather than 400 for invalid event fields with a missing, non-string or unknown apiKey", async () => {
    for (const apiKey of [undefined, 42, null, ["k"], "unknown-key"]) {
      expectError(await sendJson(`${server.ingestUrl}/ingest`, { apiKey, event: "" }), 401, "unauthorized");
      expectError(await sendJson(`${server.ingestUrl}/ingest/batch`, { apiKey, events: "not an array" }), 401, "unauthorized");
    }
  });

  it("answers 401 rather than 413 for 1001 events with a bad apiKey", async () => {
    const events = Array.from({ length: 1001 }, () => ({ event: "e", distinctId: "u" }));
    expectError(await ingestBatch(server, "bad-key", events), 401, "unauthorized");
  });

  it("answers 413 batch_too_large rather than 400 for 1001 invalid events with a good apiKey, storing nothing", async () => {
    const event = uniqueName("too-many");
    const events = Array.from({ length: 1001 }, (_, index) =>
      index % 2 === 0 ? { event, distinctId: "u", timestamp: "2024-01-01T00:00:00Z" } : { event: "", distinctId: null },
    );
    expectError(await ingestBatch(server, server.apiKey, events), 413, "batch_too_large");
    expect(await countEvents(server, server.token, event, "2024-01-01")).toBe(0);
  });
});

describe("CORS on the ingest listener", () => {
  const preflightHeaders = {
    origin: "https://shop.example",
    "access-control-request-method": "POST",
    "access-control-request-headers": "content-type, content-encoding",
  };

  function headerList(value: string | string[] | undefined): string[] {
    return String(value ?? "")
      .split(",")
      .map((part) => part.trim().toLowerCase())
      .filter((part) => part !== "");
  }

  it.each(ingestPaths)("answers an OPTIONS preflight to %s with 204 allowing content-type and content-encoding", async (path) => {
    const answer = await send(`${server.ingestUrl}${path}`, { method: "OPTIONS", headers: preflightHeaders });
    expect(answer.status).toBe(204);
    expect(answer.text).toBe("");
    expect(answer.headers["access-control-allow-origin"]).toBe("*");
    expect(headerList(answer.headers["access-control-allow-headers"])).toEqual(expect.arrayContaining(["content-type", "content-encoding"]));
    const methods = headerList(answer.headers["access-control-allow-methods"]);
    if (methods.length > 0) expect(methods).toContain("post");
  });

  it("sends Access-Control-Allow-Origin: * on successful ingest answers", async () => {
    const single = await sendJson(`${server.ingestUrl}/ingest`, { apiKey: server.apiKey, event: uniqueName("cors"), distinctId: "u" });
    expectOk(single);
    expect(single.headers["access-control-allow-origin"]).toBe("*");
    const batch = await ingestBatch(server, server.apiKey, []);
    expectOk(batch);
    expect(batch.headers["access-control-allow-origin"]).toBe("*");
  });

  it("sends Access-Control-Allow-Origin: * on every ingest error: 400, 401, 404, 405, 413", async () => {
    const errors = [
      [400, await send(`${server.ingestUrl}/ingest`, { body: "{" })],
      [400, await sendJson(`${server.ingestUrl}/ingest`, { apiKey: server.apiKey, event: "" })],
      [400, await sendJson(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, events: {} })],
      [401, await sendJson(`${server.ingestUrl}/ingest`, { apiKey: "unknown", event: "e", distinctId: "u" })],
      [401, await sendJson(`${server.ingestUrl}/ingest/batch`, { events: [] })],
      [404, await send(`${server.ingestUrl}/nope`)],
      [404, await send(`${server.ingestUrl}/nope`, { method: "OPTIONS", headers: preflightHeaders })],
      [405, await send(`${server.ingestUrl}/ingest`, { method: "GET" })],
      [413, await send(`${server.ingestUrl}/ingest`, { body: paddedJson({ apiKey: server.apiKey }, mebibyte + 1) })],
      [413, await ingestBatch(server, server.apiKey, Array.from({ length: 1001 }, () => ({ event: "e", distinctId: "u" })))],
    ] as const;
    for (const [status, answer] of errors) {
      expect(answer.status, answer.text).toBe(status);
      expect(answer.headers["access-control-allow-origin"], `${status} ${answer.text}`).toBe("*");
    }
  });
});
