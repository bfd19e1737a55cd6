/**
 * What the workspace holds (SPEC §7.6): GET /api/v1/events lists every event
 * name with its number of events, GET /api/v1/properties every top-level key
 * set (present and not null) on events of one name, or of all, with counts;
 * both by count descending, then name, both behind the Bearer token. Counted
 * from active segments, then again after a restart from sealed ones.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectError, expectOk, send } from "../helpers/http.js";
import { ingestAll, removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

const events = [
  { event: "view", distinctId: "u1", timestamp: "2024-05-01T10:00:00Z", properties: { page: "/", plan: "pro", note: null } },
  { event: "view", distinctId: "u2", timestamp: "2024-05-02T10:00:00Z", properties: { page: "/a", plan: null } },
  { event: "view", distinctId: "u2", timestamp: "2024-05-03T10:00:00Z", properties: { page: "/b", deep: { x: 1 } } },
  { event: "buy", distinctId: "u1", timestamp: "2024-05-03T11:00:00Z", properties: { plan: "pro", price: 5 } },
  { event: "buy", distinctId: "u3", timestamp: "2024-06-01T11:00:00Z", properties: { price: "7" } },
  { event: "signup", distinctId: "u3", timestamp: "2024-06-01T10:00:00Z" },
  { event: "alpha", distinctId: "u3", timestamp: "2024-06-01T10:00:00Z", properties: { zeta: false } },
];

const expectedEvents = [
  { event: "view", count: 3 },
  { event: "buy", count: 2 },
  { event: "alpha", count: 1 },
  { event: "signup", count: 1 },
];
const expectedViewProperties = [
  { property: "page", count: 3 },
  { property: "deep", count: 1 },
  { property: "plan", count: 1 },
];
const expectedAllProperties = [
  { property: "page", count: 3 },
  { property: "plan", count: 2 },
  { property: "price", count: 2 },
  { property: "deep", count: 1 },
  { property: "zeta", count: 1 },
];

let server: ServerHandle;

beforeAll(async () => {
  server = await startServer();
  await ingestAll(server, events);
});

afterAll(async () => {
  await server.stop();
  removeDataDir(server.dataDir);
});

function listing(path: string, token = server.token) {
  return send(`${server.queryUrl}${path}`, { method: "GET", token });
}

describe("workspace listings", () => {
  it("list event names by count, then name, and the keys set on one event's or all events", async () => {
    expect(expectOk(await listing("/api/v1/events"))).toEqual({ data: expectedEvents });
    expect(expectOk(await listing("/api/v1/properties?event=view"))).toEqual({ data: expectedViewProperties });
    expect(expectOk(await listing("/api/v1/properties"))).toEqual({ data: expectedAllProperties });
    expect(expectOk(await listing("/api/v1/properties?event=never_ingested"))).toEqual({ data: [] });
    expect(expectOk(await listing(`/api/v1/properties?event=${encodeURIComponent("buy")}`))).toEqual({
      data: [
        { property: "price", count: 2 },
        { property: "plan", count: 1 },
      ],
    });
  });

  it("need the Bearer token and a GET", async () => {
    expectError(await listing("/api/v1/events", "not-a-token"), 401, "unauthorized");
    expectError(await listing("/api/v1/properties?event=view", "not-a-token"), 401, "unauthorized");
    const posted = await send(`${server.queryUrl}/api/v1/events`, { method: "POST", token: server.token, body: "{}" });
    expectError(posted, 405, "method_not_allowed");
    expect(posted.headers.allow).toBe("GET");
  });

  it("count sealed segments the same after a restart", async () => {
    const { dataDir, apiKey, token, workspaceId } = server;
    await server.stop();
    server = await startServer({ dataDir, credentials: { apiKey, token, workspaceId } });
    expect(expectOk(await listing("/api/v1/events"))).toEqual({ data: expectedEvents });
    expect(expectOk(await listing("/api/v1/properties?event=view"))).toEqual({ data: expectedViewProperties });
    expect(expectOk(await listing("/api/v1/properties"))).toEqual({ data: expectedAllProperties });
  });
});
