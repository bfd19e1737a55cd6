/**
 * SPEC §0 and §2 (durability) over the process's life: the start-up lines, a
 * store that already has a workspace, SIGTERM/SIGINT that exit 0 after
 * answering what is in flight, and events acknowledged before a clean stop or
 * a kill -9 still counted after the restart.
 */
import { utimesSync, writeFileSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { serverLockPath } from "../../src/storage/paths.js";
import { makeDataDir, removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";
import {
  aroundToday,
  countEvents,
  eventideOk,
  expectError,
  expectOk,
  ingestBatch,
  ingestOne,
  send,
  trendData,
  type HttpAnswer,
} from "../helpers/http.js";

const day = "2024-09-01";
const at = `${day}T10:00:00Z`;
const urlPattern = /^http:\/\/127\.0\.0\.1:(\d+)$/;

const servers: ServerHandle[] = [];
const dataDirs: string[] = [];

async function start(options: Parameters<typeof startServer>[0] = {}): Promise<ServerHandle> {
  const server = await startServer(options);
  servers.push(server);
  return server;
}

function freshDataDir(): string {
  const dataDir = makeDataDir("eventide-http-lifecycle-");
  dataDirs.push(dataDir);
  return dataDir;
}

/** A port no socket holds right now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

function credentialsOf(server: ServerHandle) {
  return { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
}

function exitCodeOf(server: ServerHandle): Promise<number | null> {
  if (server.process.exitCode !== null || server.process.signalCode !== null) return Promise.resolve(server.process.exitCode);
  return new Promise((resolve) => server.process.once("exit", (code) => resolve(code)));
}

afterEach(async () => {
  for (const server of servers.splice(0)) await server.kill();
  for (const dataDir of dataDirs.splice(0)) removeDataDir(dataDir);
});

describe("start-up on an empty store", () => {
  // Shared by this block's tests, so kept out of the per-test cleanup.
  const dataDir = makeDataDir("eventide-http-lifecycle-");
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({ dataDir });
  });
  afterAll(async () => {
    await server?.kill();
    removeDataDir(dataDir);
  });

  it("prints workspace-created with the default workspace's credentials, then listening, and nothing else", async () => {
    const lines = server.stdoutLines.map((line) => JSON.parse(line));
    expect(lines).toHaveLength(2);
    const [created, listening] = lines;
    expect(Object.keys(created).sort()).toEqual(["apiKey", "event", "name", "token", "workspaceId"]);
    expect(created.event).toBe("workspace-created");
    expect(created.name).toBe("default");
    for (const field of ["apiKey", "token", "workspaceId"]) {
      expect(created[field]).toBeTypeOf("string");
      expect(created[field].length).toBeGreaterThan(0);
    }
    expect(created.apiKey).not.toBe(created.token);
    expect(Object.keys(listening).sort()).toEqual(["event", "ingestUrl", "queryUrl"]);
    expect(listening.event).toBe("listening");
  });

  it("binds free ports for port 0 and prints them, and both listeners answer there", async () => {
    const queryPort = Number(urlPattern.exec(server.queryUrl)?.[1]);
    const ingestPort = Number(urlPattern.exec(server.ingestUrl)?.[1]);
    expect(queryPort).toBeGreaterThan(0);
    expect(ingestPort).toBeGreaterThan(0);
    expect(queryPort).not.toBe(ingestPort);
    expectOk(await ingestBatch(server, server.apiKey, []));
    expectError(await send(`${server.queryUrl}/api/v1/query/trend`, { body: "{}" }), 401, "unauthorized");
  });

  it("prints credentials that work: the apiKey ingests, the token queries the same workspace, the CLI lists it", async () => {
    expectOk(await ingestOne(server, server.apiKey, { event: "first", distinctId: "u", timestamp: at }));
    expect(await countEvents(server, server.token, "first", day)).toBe(1);
    const list = await eventideOk(server.dataDir, "workspace", "list");
    expect(list.map((workspace: { name: string; workspaceId: string }) => [workspace.name, workspace.workspaceId])).toEqual([["default", server.workspaceId]]);
  });
});

describe("start-up on a store that has a workspace", () => {
  it("prints no workspace-created when the store already has a workspace made by the CLI", async () => {
    const dataDir = freshDataDir();
    const acme = await eventideOk(dataDir, "workspace", "create", "acme");
    const server = await start({ dataDir, credentials: acme });
    const lines = server.stdoutLines.map((line) => JSON.parse(line));
    expect(lines.map((line) => line.event)).toEqual(["listening"]);
    expectOk(await ingestOne(server, acme.apiKey, { event: "acme-event", distinctId: "u", timestamp: at }));
    expect(await countEvents(server, acme.token, "acme-event", day)).toBe(1);
    const list = await eventideOk(dataDir, "workspace", "list");
    expect(list.map((workspace: { name: string }) => workspace.name)).toEqual(["acme"]);
  });
});

describe("stopping and restarting", () => {
  it("exits 0 on SIGTERM, prints no workspace-created on the next start, and still counts every acknowledged event", async () => {
    const dataDir = freshDataDir();
    const first = await start({ dataDir });
    const uuid = crypto.randomUUID();
    expectOk(await ingestOne(first, first.apiKey, { event: "kept", distinctId: "a", timestamp: at }));
    expect(expectOk(await ingestBatch(first, first.apiKey, [
      { event: "kept", distinctId: "b", timestamp: at, uuid },
      { event: "kept", distinctId: "c", timestamp: "2024-09-02T00:00:00Z" },
    ]))).toEqual({ ok: true, accepted: 2 });
    const testEvent = expectOk(await send(`${first.queryUrl}/api/v1/internal/test-event`, { token: first.token }));
    // SPEC's 10 s is the server's own shutdown deadline (limits.shutdownTimeoutMs, asserted at load), not timed here.
    expect(await first.stop(), first.exitReport()).toBe(0);

    const second = await start({ dataDir, credentials: credentialsOf(first) });
    expect(second.stdoutLines.map((line) => JSON.parse(line).event)).toEqual(["listening"]);
    expect(second.stdoutLines.join("\n")).not.toContain(first.apiKey);
    expect(await countEvents(second, first.token, "kept", day)).toBe(2);
    expect(await countEvents(second, first.token, "kept", "2024-09-02")).toBe(1);
    const [dateFrom, dateTo] = aroundToday();
    const hours = await trendData(second, first.token, { event: "test_event", dateFrom, dateTo, groupBy: "hour" });
    expect(hours.filter((bucket) => bucket.count !== 0)).toEqual([{ date: `${testEvent.timestamp.slice(0, 13)}:00:00`, count: 1 }]);

    // The uuid survives the restart: a retry is still acknowledged and not stored again.
    expect(expectOk(await ingestBatch(second, first.apiKey, [{ event: "kept", distinctId: "b", timestamp: at, uuid: uuid.toUpperCase() }]))).toEqual({ ok: true, accepted: 1 });
    expect(await countEvents(second, first.token, "kept", day)).toBe(2);
    expect(await second.stop(), second.exitReport()).toBe(0);
  });

  it("exits 0 on a SIGTERM sent as soon as it prints listening (four starts)", async () => {
    const exits: Array<{ code: number | null; signal: NodeJS.Signals | null }> = [];
    for (let attempt = 0; attempt < 4; attempt++) {
      const server = await start({ dataDir: freshDataDir() });
      const code = await server.stop();
      exits.push({ code, signal: server.process.signalCode });
    }
    expect(exits).toEqual(Array.from({ length: 4 }, () => ({ code: 0, signal: null })));
  });

  it("exits 0 on SIGINT too, keeping acknowledged events", async () => {
    const dataDir = freshDataDir();
    const first = await start({ dataDir });
    expectOk(await ingestOne(first, first.apiKey, { event: "interrupted", distinctId: "a", timestamp: at }));
    const exited = exitCodeOf(first);
    first.process.kill("SIGINT");
    expect(await exited).toBe(0);
    const second = await start({ dataDir, credentials: credentialsOf(first) });
    expect(await countEvents(second, first.token, "interrupted", day)).toBe(1);
  });

  it("keeps every acknowledged event through kill -9", async () => {
    const dataDir = freshDataDir();
    const first = await start({ dataDir });
    const events = Array.from({ length: 300 }, (_, index) => ({ event: "crash", distinctId: `u${index}`, timestamp: at }));
    expect(expectOk(await ingestBatch(first, first.apiKey, events))).toEqual({ ok: true, accepted: 300 });
    expectOk(await ingestOne(first, first.apiKey, { event: "crash", distinctId: "single", timestamp: at }));
    await first.kill();
    const second = await start({ dataDir, credentials: credentialsOf(first) });
    expect(await countEvents(second, first.token, "crash", day)).toBe(301);
  });

  it("refuses to start on a data directory a running server uses, and starts once that server is gone, even killed", async () => {
    const dataDir = freshDataDir();
    const first = await start({ dataDir });
    expectOk(await ingestOne(first, first.apiKey, { event: "owned", distinctId: "u", timestamp: at }));
    const refused = await startServer({ dataDir, credentials: credentialsOf(first) }).then(
      () => "started",
      (error: Error) => error.message,
    );
    expect(refused).toMatch(/exited with 1 before listening/);
    expect(refused).toContain(`data directory ${dataDir} is in use by process ${first.process.pid}`);
    // The refused start changed nothing: the first server goes on, then a kill -9 leaves a stale lock that the next start breaks.
    expectOk(await ingestOne(first, first.apiKey, { event: "owned", distinctId: "u", timestamp: at }));
    await first.kill();
    const second = await start({ dataDir, credentials: credentialsOf(first) });
    expect(await countEvents(second, first.token, "owned", day)).toBe(2);
    await second.kill();
    // A kill between creating the lock file and writing its owner leaves it empty: broken once it is old enough.
    const lockPath = serverLockPath(dataDir);
    writeFileSync(lockPath, "");
    utimesSync(lockPath, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
    const third = await start({ dataDir, credentials: credentialsOf(first) });
    expect(await countEvents(third, first.token, "owned", day)).toBe(2);
  });

  it("refuses to start on a port another server listens on, rather than share its connections", async () => {
    // A fixed port: Linux shares a port through SO_REUSEPORT only when the first socket asked for it by number, not for port 0.
    const ingestPort = String(await freePort());
    const first = await start({ dataDir: freshDataDir(), env: { EVENTIDE_INGEST_PORT: ingestPort } });
    expect(first.ingestUrl).toBe(`http://127.0.0.1:${ingestPort}`);
    const refused = await startServer({ dataDir: freshDataDir(), env: { EVENTIDE_INGEST_PORT: ingestPort } }).then(
      () => "started",
      (error: Error) => error.message,
    );
    expect(refused).toMatch(/exited with 1 before listening/);
    expect(refused).toContain(`cannot listen on 127.0.0.1:${ingestPort}`);
    // Every request still reaches the first server.
    for (let index = 0; index < 20; index++) expectOk(await ingestOne(first, first.apiKey, { event: "port", distinctId: "u", timestamp: at }));
    expect(await countEvents(first, first.token, "port", day)).toBe(20);
  });

  it("answers or refuses what is in flight at SIGTERM: what was acknowledged is counted after restart, what was refused is not", async () => {
    const dataDir = freshDataDir();
    const first = await start({ dataDir });
    // 40 batches in flight when the signal comes, and 10 more sent just after it.
    const requestCount = 50;
    const earlyCount = 40;
    const perRequest = 250;
    const outcomes: Array<HttpAnswer | Error> = new Array(requestCount);
    const exited = exitCodeOf(first);
    const sendBatch = async (index: number) => {
      const events = Array.from({ length: perRequest }, (_, row) => ({ event: `flight-${index}`, distinctId: `u${row}`, timestamp: at }));
      try {
        outcomes[index] = await ingestBatch(first, first.apiKey, events);
      } catch (error) {
        outcomes[index] = error as Error;
      }
    };
    let late: Promise<unknown> | undefined;
    await Promise.all(
      Array.from({ length: earlyCount }, async (_, index) => {
        await sendBatch(index);
        if (late === undefined) {
          first.process.kill("SIGTERM");
          late = Promise.all(Array.from({ length: requestCount - earlyCount }, (_, offset) => sendBatch(earlyCount + offset)));
        }
      }),
    );
    await late;
    expect(await exited).toBe(0);

    const second = await start({ dataDir, credentials: credentialsOf(first) });
    let acknowledged = 0;
    for (let index = 0; index < requestCount; index++) {
      const outcome = outcomes[index];
      const stored = await countEvents(second, first.token, `flight-${index}`, day);
      if (outcome instanceof Error) {
        // Refused at connect: never sent. Cut off later: stored whole or not at all.
        if ((outcome as NodeJS.ErrnoException).code === "ECONNREFUSED") expect(stored).toBe(0);
        else expect([0, perRequest]).toContain(stored);
      } else if (outcome.status === 200) {
        acknowledged++;
        expect(outcome.body).toEqual({ ok: true, accepted: perRequest });
        expect(stored, `request ${index} was acknowledged`).toBe(perRequest);
      } else {
        expectError(outcome, 503, ["unavailable", "overloaded"]);
        expect(stored, `request ${index} was refused with ${outcome.status}`).toBe(0);
      }
    }
    expect(acknowledged).toBeGreaterThanOrEqual(1);
  });
});
