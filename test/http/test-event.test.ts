/**
 * SPEC §3 `POST /api/v1/internal/test-event`: one `test_event` by user
 * `test_event` at server time, answered with its id and a UTC timestamp
 * `YYYY-MM-DD HH:MM:SS.mmm`, and visible to the very next trend query.
 */
import { describe, expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import { aroundToday, countEvents, expectError, expectOk, ingestOne, send, trendData } from "../helpers/http.js";

const server = serverPerFile();

const path = "/api/v1/internal/test-event";
const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const timestampPattern = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$/;

function testEvent(options: { body?: string; headers?: Record<string, string> } = {}) {
  return send(`${server.queryUrl}${path}`, { token: server.token, ...options });
}

describe("test-event", () => {
  it("answers 200 {ok, eventId, timestamp} with a UUID and the server's UTC time to the millisecond", async () => {
    const beforeMs = Date.now();
    const body = expectOk(await testEvent());
    const afterMs = Date.now();
    expect(Object.keys(body).sort()).toEqual(["eventId", "ok", "timestamp"]);
    expect(body.ok).toBe(true);
    expect(body.eventId).toMatch(uuidPattern);
    expect(body.timestamp).toMatch(timestampPattern);
    const timeMs = Date.parse(`${body.timestamp.replace(" ", "T")}Z`);
    expect(timeMs).toBeGreaterThanOrEqual(beforeMs - 1000);
    expect(timeMs).toBeLessThanOrEqual(afterMs + 1000);
  });

  it("gives every test event its own id", async () => {
    const first = expectOk(await testEvent());
    const second = expectOk(await testEvent());
    expect(first.eventId).not.toBe(second.eventId);
  });

  it("needs no body, and ignores an empty JSON object", async () => {
    expectOk(await send(`${server.queryUrl}${path}`, { token: server.token }));
    expectOk(await send(`${server.queryUrl}${path}`, { token: server.token, body: "{}", headers: { "content-type": "application/json" } }));
  });

  it("is visible to the very next trend of test_event, in the hour of its timestamp", async () => {
    const [dateFrom, dateTo] = aroundToday();
    const before = await trendData(server, server.token, { event: "test_event", dateFrom, dateTo, groupBy: "hour" });
    const { timestamp } = expectOk(await testEvent());
    const after = await trendData(server, server.token, { event: "test_event", dateFrom, dateTo, groupBy: "hour" });
    const hour = `${timestamp.slice(0, 13)}:00:00`;
    const changed = after.filter((bucket, index) => bucket.count !== before[index].count);
    expect(changed).toEqual([{ date: hour, count: (before.find((bucket) => bucket.date === hour)?.count ?? -1) + 1 }]);
  });

  it("is counted on the day of its timestamp", async () => {
    const { timestamp } = expectOk(await testEvent());
    const date = timestamp.slice(0, 10);
    expect(await countEvents(server, server.token, "test_event", date)).toBeGreaterThanOrEqual(1);
  });

  it("is done by the user test_event: one unique user however many test events, until someone else sends one", async () => {
    const range = aroundToday();
    expectOk(await testEvent());
    expectOk(await testEvent());
    expect(await countEvents(server, server.token, "test_event", ...range, "unique")).toBe(1);
    expectOk(await ingestOne(server, server.apiKey, { event: "test_event", distinctId: "test_event" }));
    expect(await countEvents(server, server.token, "test_event", ...range, "unique")).toBe(1);
    expectOk(await ingestOne(server, server.apiKey, { event: "test_event", distinctId: "someone-else" }));
    expect(await countEvents(server, server.token, "test_event", ...range, "unique")).toBe(2);
  });

  it("answers 401 with WWW-Authenticate: Bearer without a token, or with an unknown one, and stores nothing", async () => {
    const range = aroundToday();
    const before = await countEvents(server, server.token, "test_event", ...range);
    for (const answer of [await send(`${server.queryUrl}${path}`), await send(`${server.queryUrl}${path}`, { token: "et_nope" })]) {
      expectError(answer, 401, "unauthorized");
      expect(answer.headers["www-authenticate"]).toMatch(/^Bearer\b/);
    }
    expect(await countEvents(server, server.token, "test_event", ...range)).toBe(before);
  });

  it("answers 405 to a GET", async () => {
    expectError(await send(`${server.queryUrl}${path}`, { method: "GET", token: server.token }), 405, "method_not_allowed");
  });
});
