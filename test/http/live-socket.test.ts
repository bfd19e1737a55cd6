/**
 * The live socket (GET /api/v1/live on the query listener) against the real
 * server: the token in the first message, subscriptions that answer what POST
 * answers for the same body (errors included), a pushed update after an
 * ingest, at most one push per interval under a stream of ingests, nothing
 * after unsubscribe or close, the caps on sockets and subscriptions, and a
 * slow client whose updates are skipped rather than buffered.
 */
import { describe, expect, it } from "vitest";
import { eventideOk, expectError, expectOk, ingestOne, send, sendJson, uniqueName } from "../helpers/http.js";
import { LiveClient, type LiveMessage } from "../helpers/live-client.js";
import { serversPerFile, type ServerHandle } from "../helpers/server.js";

const start = serversPerFile();
const day = "2024-05-01";
const trendOf = (event: string) => ({ event, dateFrom: day, dateTo: day });
const totalOf = (answer: any): number => answer.data.reduce((sum: number, point: { count: number }) => sum + point.count, 0);
const isAnswer = (id: string, total?: number) => (message: LiveMessage) => message.type === "answer" && message.id === id && (total === undefined || totalOf(message.answer) === total);
const isError = (id?: string) => (message: LiveMessage) => message.type === "error" && message.id === id;

/** SPEC §1's error shape, carried in a message beside its type (and subscription id). */
function expectErrorMessage(message: LiveMessage, code: string): void {
  expect(message.type).toBe("error");
  expect(message.ok).toBe(false);
  expect(Object.keys(message.error!).sort()).toEqual(["code", "message"]);
  expect(message.error!.code, message.error!.message).toBe(code);
  expect(message.error!.message.length).toBeGreaterThan(0);
}

async function ingest(server: ServerHandle, event: string, count = 1): Promise<void> {
  for (let index = 0; index < count; index++) expectOk(await ingestOne(server, server.apiKey, { event, distinctId: `u${index}`, timestamp: `${day}T10:00:00Z` }));
}

describe("the live socket", () => {
  let server: ServerHandle;
  const main = async () => (server ??= await start({ env: { EVENTIDE_LIVE_SUBSCRIPTIONS_PER_TOKEN_MAX: "3" } }));

  it("answers a GET without an upgrade with SPEC §1's error, on the query listener only", async () => {
    await main();
    expectError(await send(`${server.queryUrl}/api/v1/live`, { method: "GET" }), 400, "invalid_request", "WebSocket");
    expectError(await send(`${server.ingestUrl}/api/v1/live`, { method: "GET" }), 404, "not_found");
  });

  it("refuses a wrong token: an unauthorized error, then the socket closes with 1008", async () => {
    await main();
    const client = (await LiveClient.open(server.queryUrl)) as LiveClient;
    client.send({ type: "auth", token: "et_this-token-does-not-exist" });
    expectErrorMessage(await client.next(isError()), "unauthorized");
    expect(await client.closed).toBe(1008);
  });

  it("refuses a subscription sent before the token, and closes", async () => {
    await main();
    const client = (await LiveClient.open(server.queryUrl)) as LiveClient;
    client.subscribe("a", "trend", trendOf("x"));
    expectErrorMessage(await client.next(isError()), "unauthorized");
    expect(await client.closed).toBe(1008);
    expect(client.answers("a")).toEqual([]);
  });

  it("answers a subscription with what POST answers for the same body, then pushes the new count after an ingest", async () => {
    await main();
    const event = uniqueName("live");
    await ingest(server, event, 2);
    const client = await LiveClient.signedIn(server.queryUrl, server.token);
    const query = { ...trendOf(event), groupBy: "hour" };
    client.subscribe("a", "trend", query);
    const first = await client.next(isAnswer("a"));
    expect(first.answer).toEqual(expectOk(await sendJson(`${server.queryUrl}/api/v1/query/trend`, query, { token: server.token })));
    expect(totalOf(first.answer)).toBe(2);
    await ingest(server, event);
    const pushed = await client.next(isAnswer("a", 3));
    expect(pushed.answer).toEqual(expectOk(await sendJson(`${server.queryUrl}/api/v1/query/trend`, query, { token: server.token })));
    await client.close();
  });

  it("refuses an invalid query with the error POST gives it, and keeps the socket", async () => {
    await main();
    const client = await LiveClient.signedIn(server.queryUrl, server.token);
    const cases: Array<[string, string, unknown]> = [
      ["trend", "/api/v1/query/trend", { event: "e", dateFrom: day }],
      ["trend", "/api/v1/query/trend", { ...trendOf("e"), groupBy: "fortnight" }],
      ["funnel", "/api/v1/query/funnel", { steps: "a", dateFrom: day, dateTo: day }],
      ["retention", "/api/v1/query/retention", { cohortEvent: "a", retentionEvent: "b", dateFrom: day, dateTo: "2024-04-01" }],
      ["trend", "/api/v1/query/trend", [1, 2]],
      ["trend", "/api/v1/query/trend", { ...trendOf("e"), unknownField: 1 }],
    ];
    for (const [index, [kind, path, query]] of cases.entries()) {
      const id = `bad-${index}`;
      client.subscribe(id, kind, query);
      const refused = await client.next((message) => message.id === id);
      const posted = await sendJson(`${server.queryUrl}${path}`, query, { token: server.token });
      expect(posted.status, JSON.stringify(query)).toBe(400);
      expectErrorMessage(refused, posted.body.error.code);
      expect(refused.error).toEqual(posted.body.error);
    }
    // Refused subscriptions are not kept: the token's three are all still free.
    for (const id of ["ok-1", "ok-2", "ok-3"]) client.subscribe(id, "trend", trendOf("e"));
    for (const id of ["ok-1", "ok-2", "ok-3"]) await client.next(isAnswer(id));
    await client.close();
  });

  it("answers messages it cannot read with SPEC §1's errors, and keeps the socket", async () => {
    await main();
    const client = await LiveClient.signedIn(server.queryUrl, server.token);
    const cases: Array<[string, string]> = [
      ["not json", "invalid_json"],
      ["[]", "invalid_json"],
      [JSON.stringify({ type: "watch" }), "invalid_request"],
      [JSON.stringify({ type: "subscribe", id: "a", kind: "cohorts", query: trendOf("e") }), "invalid_request"],
      [JSON.stringify({ type: "subscribe", id: "", kind: "trend", query: trendOf("e") }), "invalid_request"],
      [JSON.stringify({ type: "unsubscribe", id: "never" }), "invalid_request"],
    ];
    for (const [text, code] of cases) {
      const from = client.messages.length;
      client.send(text);
      expectErrorMessage(await client.next((message) => message.type === "error", from), code);
    }
    client.subscribe("still-open", "trend", trendOf("e"));
    await client.next(isAnswer("still-open"));
    await client.close();
  });

  it("pushes at most once per second per subscription under a stream of ingests, and ends with the latest count", async () => {
    await main();
    const event = uniqueName("stream");
    const client = await LiveClient.signedIn(server.queryUrl, server.token);
    const subscribedAtMs = Date.now();
    client.subscribe("s", "trend", trendOf(event));
    await client.next(isAnswer("s", 0));
    const ingests = 60;
    await ingest(server, event, ingests);
    await client.next(isAnswer("s", ingests));
    const lastAnswerAtMs = Date.now();
    // Runs start at least 1 s apart (server clock = this clock) between the subscription and the last answer.
    const pushes = client.answers("s").length - 1;
    expect(pushes).toBeGreaterThanOrEqual(1);
    expect(pushes, `${pushes} pushes in ${lastAnswerAtMs - subscribedAtMs} ms`).toBeLessThanOrEqual(Math.floor((lastAnswerAtMs - subscribedAtMs) / 1000));
    await client.close();
  });

  it("stops a subscription on unsubscribe, and frees a token's subscriptions when its socket closes", async () => {
    await main();
    const event = uniqueName("stop");
    const first = await LiveClient.signedIn(server.queryUrl, server.token);
    for (const id of ["gone", "kept", "third"]) first.subscribe(id, "trend", trendOf(event));
    for (const id of ["gone", "kept", "third"]) await first.next(isAnswer(id, 0));
    first.send({ type: "unsubscribe", id: "gone" });
    await first.next((message) => message.type === "unsubscribed" && message.id === "gone");
    // Both were due at the same moments: two pushes of "kept" leave no room for a late one of "gone".
    await ingest(server, event);
    await first.next(isAnswer("kept", 1));
    await ingest(server, event);
    await first.next(isAnswer("kept", 2));
    expect(first.answers("gone").map(totalOf)).toEqual([0]);

    // The token holds 3 (EVENTIDE_LIVE_SUBSCRIPTIONS_PER_TOKEN_MAX here): "gone" freed one, and a second socket of the same token takes it.
    const second = await LiveClient.signedIn(server.queryUrl, server.token);
    second.subscribe("fourth", "trend", trendOf(event));
    await second.next(isAnswer("fourth"));
    second.subscribe("fifth", "trend", trendOf(event));
    expectErrorMessage(await second.next(isError("fifth")), "rate_limited");
    await first.close();
    second.subscribe("sixth", "trend", trendOf(event));
    expect((await second.next((message) => message.id === "sixth")).type).toBe("answer");
    await second.close();
  });

  it("does not push an answer that did not change (events the query does not count)", async () => {
    await main();
    const counted = uniqueName("counted");
    const other = uniqueName("other");
    const client = await LiveClient.signedIn(server.queryUrl, server.token);
    client.subscribe("same", "trend", trendOf(other));
    client.subscribe("moving", "trend", trendOf(counted));
    await client.next(isAnswer("same", 0));
    await client.next(isAnswer("moving", 0));
    // Each ingest re-runs both: "moving" changes, "same" answers what it answered.
    await ingest(server, counted);
    await client.next(isAnswer("moving", 1));
    await ingest(server, counted);
    await client.next(isAnswer("moving", 2));
    expect(client.answers("same").map(totalOf)).toEqual([0]);
    await client.close();
  });

  it("closes a socket whose token is revoked", async () => {
    await main();
    const { token } = await eventideOk(server.dataDir, "token", "create", "default");
    const event = uniqueName("revoked");
    // A new token reaches the server within a second: signing in is retried until it does.
    let client: LiveClient | undefined;
    for (let attempt = 0; client === undefined; attempt++) {
      client = await LiveClient.signedIn(server.queryUrl, token).catch((error: Error) => {
        if (attempt === 100) throw error;
        return new Promise<undefined>((wake) => setTimeout(() => wake(undefined), 50));
      });
    }
    client.subscribe("r", "trend", trendOf(event));
    await client.next(isAnswer("r"));
    await eventideOk(server.dataDir, "token", "revoke", token);
    // The server reads the registry within a second; each ingest re-runs the query, which checks the token first.
    let closed = false;
    void client.closed.then(() => (closed = true));
    for (let attempt = 0; attempt < 300 && !closed; attempt++) {
      await ingest(server, event);
      await Promise.race([client.closed, new Promise((wake) => setTimeout(wake, 100))]);
    }
    expect(await client.closed).toBe(1008);
    expectErrorMessage(await client.next(isError()), "unauthorized");
  });
});

describe("the live socket's bounds", () => {
  it("refuses a socket past EVENTIDE_LIVE_SOCKETS_MAX with 503 overloaded, and closes one that sends no token in time", async () => {
    const server = await start({ env: { EVENTIDE_LIVE_SOCKETS_MAX: "2", EVENTIDE_LIVE_AUTH_TIMEOUT_MS: "300" } });
    const first = await LiveClient.signedIn(server.queryUrl, server.token);
    const silent = (await LiveClient.open(server.queryUrl)) as LiveClient;
    expect(silent).toBeInstanceOf(LiveClient);
    const refused = await LiveClient.open(server.queryUrl);
    expect(refused).not.toBeInstanceOf(LiveClient);
    const { status, body } = refused as { status: number; body: any };
    expect(status).toBe(503);
    expect(body).toEqual({ ok: false, error: { code: "overloaded", message: expect.stringContaining("EVENTIDE_LIVE_SOCKETS_MAX") } });
    // The silent one is closed after its 300 ms, which frees its place.
    expect(await silent.closed).toBe(1008);
    expectErrorMessage(await silent.next(isError()), "unauthorized");
    const third = await LiveClient.signedIn(server.queryUrl, server.token);
    await third.close();
    await first.close();
  });

  it("closes its live sockets with 1001 when the server stops, and still exits 0", async () => {
    const server = await start();
    const client = await LiveClient.signedIn(server.queryUrl, server.token);
    client.subscribe("a", "trend", trendOf("e"));
    await client.next(isAnswer("a"));
    expect(await server.stop()).toBe(0);
    expect(await client.closed).toBe(1001);
  });

  it("skips the updates of a client that does not read, and sends it the latest once it reads again", async () => {
    // Every ingest may re-run the query (1 ms interval); each answer is 10 series of 9 984 hours, ~3.6 MB, so the
    // kernel's socket buffers (a few MB on loopback) fill within a few and the server's own then holds the rest.
    const server = await start({ env: { EVENTIDE_LIVE_REFRESH_INTERVAL_MS: "1", EVENTIDE_LIVE_SOCKET_BUFFERED_BYTES_MAX: "1024" } });
    const event = uniqueName("slow");
    const eventOf = (index: number) => ({ event, distinctId: "u", timestamp: "2023-06-01T10:00:00Z", properties: { v: `k${index % 10}` } });
    const seeded = 10;
    for (let index = 0; index < seeded; index++) expectOk(await ingestOne(server, server.apiKey, eventOf(index)));
    // 8 values, "other" and the total: 99 840 points, within the answer limit (EVENTIDE_TREND_POINTS_MAX).
    const query = { event, dateFrom: "2023-01-01", dateTo: "2024-02-20", groupBy: "hour", breakdown: "v", breakdownLimit: 8 };
    const client = await LiveClient.signedIn(server.queryUrl, server.token);
    client.subscribe("big", "trend", query);
    await client.next(isAnswer("big", seeded));
    client.socket.pause();
    const ingests = 40;
    for (let index = 0; index < ingests; index++) expectOk(await ingestOne(server, server.apiKey, eventOf(index)));
    client.socket.resume();
    await client.next(isAnswer("big", seeded + ingests));
    const pushes = client.answers("big").length - 1;
    // A server that buffered every update would send one per ingest.
    expect(pushes, `${pushes} pushes for ${ingests} ingests`).toBeLessThan(ingests / 2);
    await client.close();
  });
});
