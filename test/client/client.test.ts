/**
 * The Node client against the real server: every event it reports delivered
 * is stored exactly once, through a kill -9 and restart in the middle of a
 * stream, through 503s and a lost answer; refusals are reported per event and
 * never retried; a full queue pushes back.
 *
 * "Stored once" is read from trend queries: each event has its own
 * distinctId under an event name of its own test, so `total` counts stored
 * events and `unique` equal to `total` shows none was stored twice.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventideClient, type DeliveryReport } from "../../src/client/index.js";
import { aroundToday, countEvents, uniqueName } from "../helpers/http.js";
import { startFaultProxy, startTcpRelay } from "../helpers/proxy.js";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

interface Tally {
  accepted: Set<string>;
  refused: Map<string, string>;
}

function tally(client: EventideClient): Tally {
  const result: Tally = { accepted: new Set(), refused: new Map() };
  client.on("delivery", (report: DeliveryReport) => {
    for (const event of report.accepted) {
      expect(result.accepted.has(event.uuid), `uuid ${event.uuid} reported twice`).toBe(false);
      result.accepted.add(event.uuid);
    }
    for (const event of report.refused) result.refused.set(event.uuid, event.code);
  });
  return result;
}

async function storedCounts(server: Pick<ServerHandle, "queryUrl" | "token">, name: string): Promise<{ total: number; unique: number }> {
  const [dateFrom, dateTo] = aroundToday();
  return {
    total: await countEvents(server, server.token, name, dateFrom, dateTo, "total"),
    unique: await countEvents(server, server.token, name, dateFrom, dateTo, "unique"),
  };
}

describe("Node client against a server killed with -9 and restarted mid-stream", () => {
  it("stores each of 100 000 events exactly once and reports every one accepted", { timeout: 240_000 }, async () => {
    let server = await startServer({ workers: 2 });
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    let serverPort: number | undefined = Number(new URL(server.ingestUrl).port);
    // The relay lets the restarted server take a new port while the client keeps one address.
    const relay = await startTcpRelay(() => serverPort);
    const client = new EventideClient({ apiKey: server.apiKey, host: relay.url, retryDelayMaxMs: 500, requestsInFlightMax: 3 });
    const seen = tally(client);
    const name = uniqueName("client-crash");
    const eventCount = 100_000;
    let restarted: Promise<void> | undefined;
    client.on("delivery", () => {
      if (restarted !== undefined || seen.accepted.size < 30_000) return;
      restarted = (async () => {
        // The kill comes once the server has stored a batch whose answer the client never got: only its uuids keep the re-send from being stored again.
        await relay.swallowAnswers();
        serverPort = undefined;
        await server.kill();
        relay.resetAll();
        relay.passAnswers();
        server = await startServer({ dataDir: server.dataDir, credentials, workers: 2 });
        serverPort = Number(new URL(server.ingestUrl).port);
      })();
    });
    try {
      for (let index = 0; index < eventCount; index++) {
        await client.capture({ event: name, distinctId: `user-${index}`, properties: { index } });
      }
      await client.shutdown();
      expect(restarted, "the server was killed during the stream").toBeDefined();
      await restarted;
      expect(seen.refused.size, JSON.stringify([...seen.refused].slice(0, 5))).toBe(0);
      expect(seen.accepted.size).toBe(eventCount);
      expect(client.stats().retries, "the kill made the client retry").toBeGreaterThan(0);
      expect(await storedCounts(server, name)).toEqual({ total: eventCount, unique: eventCount });
    } finally {
      await relay.close();
      await server.stop();
      removeDataDir(server.dataDir);
    }
  });
});

describe("Node client against one server", () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({ workers: 2 });
  });
  afterAll(async () => {
    await server.stop();
    removeDataDir(server.dataDir);
  });

  it("retries 503s and a lost answer with the same uuids: each event is stored once", async () => {
    // Batch requests: the first is stored but its answer lost, the second refused, then all forwarded.
    const proxy = await startFaultProxy(server.ingestUrl, (index) => (index === 0 ? "lose-answer" : index === 1 ? "refuse" : "forward"));
    const client = new EventideClient({ apiKey: server.apiKey, host: proxy.url, requestsInFlightMax: 1, batchEventsMax: 500 });
    const seen = tally(client);
    const name = uniqueName("client-503");
    try {
      for (let index = 0; index < 1_200; index++) await client.capture({ event: name, distinctId: `user-${index}` });
      await client.shutdown();
      expect(seen.accepted.size).toBe(1_200);
      expect(client.stats().retries).toBe(2);
      expect(proxy.batchRequests()).toBe(5);
      expect(await storedCounts(server, name)).toEqual({ total: 1_200, unique: 1_200 });
    } finally {
      await proxy.close();
    }
  });

  it("reports refused events one by one and stores their neighbours", async () => {
    const client = new EventideClient({ apiKey: server.apiKey, host: server.ingestUrl });
    const seen = tally(client);
    const name = uniqueName("client-refused");
    const uuids: string[] = [];
    for (let index = 0; index < 250; index++) {
      // Every other event is invalid: more refusals than one answer names (100), so the unnamed tail is sent again.
      const uuid = crypto.randomUUID();
      uuids.push(uuid);
      await client.capture({ event: index % 2 === 0 ? name : "", distinctId: `user-${index}`, uuid });
    }
    await client.shutdown();
    expect(seen.accepted.size).toBe(125);
    expect(seen.refused.size).toBe(125);
    for (let index = 0; index < 250; index++) {
      if (index % 2 === 0) expect(seen.accepted.has(uuids[index])).toBe(true);
      else expect(seen.refused.get(uuids[index])).toBe("invalid_request");
    }
    expect(client.stats().retries).toBe(0);
    expect(await storedCounts(server, name)).toEqual({ total: 125, unique: 125 });
  });

  it("cuts batches at the server's distinct-days cap, so a backfill over 150 days is stored whole", async () => {
    const client = new EventideClient({ apiKey: server.apiKey, host: server.ingestUrl });
    const seen = tally(client);
    const name = uniqueName("client-days");
    const dayMs = 86_400_000;
    const todayMs = Math.floor(Date.now() / dayMs) * dayMs;
    for (let day = 0; day < 150; day++) await client.capture({ event: name, distinctId: `user-${day}`, timestamp: new Date(todayMs - day * dayMs + 3_600_000) });
    await client.shutdown();
    expect(seen.refused).toEqual(new Map());
    expect(seen.accepted.size).toBe(150);
    const [, dateTo] = aroundToday();
    const total = await countEvents(server, server.token, name, new Date(todayMs - 160 * dayMs).toISOString().slice(0, 10), dateTo, "total");
    expect(total).toBe(150);
  });

  it("refuses every event of a batch with an unknown API key, without retrying", async () => {
    const client = new EventideClient({ apiKey: "not-a-key", host: server.ingestUrl });
    const seen = tally(client);
    for (let index = 0; index < 10; index++) await client.capture({ event: "unauthorized", distinctId: `user-${index}` });
    await client.shutdown();
    expect([...seen.refused.values()]).toEqual(Array(10).fill("unauthorized"));
    expect(client.stats()).toMatchObject({ accepted: 0, refused: 10, retries: 0, queued: 0 });
  });

  it("pushes back when the queue is full: tryCapture returns false, drain follows, capture waits", async () => {
    const client = new EventideClient({ apiKey: server.apiKey, host: server.ingestUrl, queueEventsMax: 50, batchEventsMax: 50, flushIntervalMs: 60_000 });
    const seen = tally(client);
    const name = uniqueName("client-full");
    for (let index = 0; index < 50; index++) expect(client.tryCapture({ event: name, distinctId: `user-${index}` })).toBe(true);
    const drained = new Promise((resolve) => client.once("drain", resolve));
    expect(client.tryCapture({ event: name, distinctId: "refused-for-now" })).toBe(false);
    expect(client.stats().queued).toBe(50);
    await drained;
    // capture() waits for room rather than growing the queue.
    const waits = Array.from({ length: 60 }, (_, index) => client.capture({ event: name, distinctId: `late-${index}` }));
    expect(client.stats().queued).toBeLessThanOrEqual(50);
    await Promise.all(waits);
    await client.shutdown();
    expect(seen.accepted.size).toBe(110);
    expect(await storedCounts(server, name)).toEqual({ total: 110, unique: 110 });
  });
});
