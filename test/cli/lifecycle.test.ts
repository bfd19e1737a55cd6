/**
 * Data lifecycle end to end, with real servers on port 0: export → import into
 * a fresh store answers every query as the original did, and a second import
 * stores nothing; a backup taken under concurrent ingest holds every event
 * acknowledged before it began, and a server starts from it.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { ingestAll, makeDataDir, post, removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";
import { runEventide, succeeded } from "../helpers/run-eventide.js";

let root: string;
let servers: ServerHandle[] = [];

beforeEach(() => {
  root = makeDataDir("eventide-cli-lifecycle-");
});

afterEach(async () => {
  for (const server of servers) await server.stop();
  servers = [];
  removeDataDir(root);
});

const queries: Array<[string, object]> = [
  ["trend", { event: "signup", dateFrom: "2024-01-01", dateTo: "2024-01-14" }],
  ["trend", { event: "view", dateFrom: "2024-01-01", dateTo: "2024-01-14", math: "unique", filters: [{ property: "plan", op: "eq", value: "pro" }] }],
  ["trend", { event: "purchase", dateFrom: "2024-01-01", dateTo: "2024-01-14", filters: [{ property: "price", op: "gt", value: "3" }] }],
  ["trend", { event: "view", dateFrom: "2024-01-01", dateTo: "2024-01-14", groupBy: "hour", filters: [{ property: "flag", op: "eq", value: "true" }] }],
  ["trend", { event: "signup", dateFrom: "2024-01-01", dateTo: "2024-01-14", filters: [{ property: "nested", op: "contains", value: "[2]" }, { property: "text", op: "contains", value: '"quoted", 1' }] }],
  ["funnel", { steps: ["signup", "view", "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-31", conversionWindow: 259_200 }],
  ["retention", { cohortEvent: "signup", retentionEvent: "view", dateFrom: "2024-01-01", dateTo: "2024-01-14", windowDays: 7 }],
];

async function answers(server: Pick<ServerHandle, "queryUrl" | "token">): Promise<unknown[]> {
  const results: unknown[] = [];
  for (const [kind, body] of queries) {
    const response = await post(`${server.queryUrl}/api/v1/query/${kind}`, body, { token: server.token });
    expect(response.status, response.text).toBe(200);
    results.push(response.body);
  }
  return results;
}

/** Events named `event` on 2024-01-01..2024-03-31 (a trend's one total). */
async function eventCount(server: Pick<ServerHandle, "queryUrl" | "token">, event: string): Promise<number> {
  const response = await post(`${server.queryUrl}/api/v1/query/trend`, { event, dateFrom: "2024-01-01", dateTo: "2024-03-31", groupBy: "month" }, { token: server.token });
  expect(response.status, response.text).toBe(200);
  return (response.body.data as Array<{ count: number }>).reduce((sum, bucket) => sum + bucket.count, 0);
}

/** Events over two weeks; a third without uuid, two identical ones among them, properties of every JSON type. */
function knownEvents(): object[] {
  const events: object[] = [];
  for (let index = 0; index < 600; index++) {
    const user = `u${index % 37}`;
    const day = 1 + (index % 14);
    const name = ["signup", "view", "purchase"][index % 3];
    events.push({
      event: name,
      distinctId: index % 5 === 0 ? index % 37 : user,
      timestamp: `2024-01-${String(day).padStart(2, "0")}T${String(index % 24).padStart(2, "0")}:00:00.${String(index % 1000).padStart(3, "0")}Z`,
      properties: { plan: index % 2 ? "pro" : "free", price: index % 7, flag: index % 4 === 0, nested: { a: [index % 3] }, text: `"quoted", ${index % 5}` },
      ...(index % 3 === 0 ? {} : { uuid: `00000000-0000-4000-8000-${String(index).padStart(12, "0")}` }),
    });
  }
  const twin = { event: "view", distinctId: "twin", timestamp: "2024-01-05T10:00:00.000Z", properties: { plan: "pro" } };
  events.push(twin, { ...twin });
  return events;
}

describe("eventide export and import", () => {
  it("round-trips a workspace into a fresh store with the same answers, and a second import stores nothing", async () => {
    const source = await startServer({ dataDir: join(root, "source") });
    servers.push(source);
    await ingestAll(source, knownEvents()).catch((error: Error) => {
      throw new Error(`${error.message}; server: ${source.exitReport()}`);
    });
    const expected = await answers(source);
    const expectedCounts = await Promise.all(["signup", "view", "purchase"].map((event) => eventCount(source, event)));
    expect(expectedCounts.reduce((sum, count) => sum + count, 0)).toBe(602);

    // Exported while the server runs, with rows both in the WAL and (after a checkpoint at stop) sealed.
    const exportFile = join(root, "events.ndjson");
    const exported = succeeded(await runEventide(["export", "--data-dir", source.dataDir, "--output", exportFile]));
    expect(exported.exported).toBe(602);
    const lines = readFileSync(exportFile, "utf8").trim().split("\n").map((line) => JSON.parse(line));
    expect(Object.keys(lines[0]).sort()).toEqual(["distinctId", "event", "properties", "timestamp", "uuid"]);
    expect(new Set(lines.map((line) => line.uuid)).size).toBe(602);
    for (const line of lines) expect(line.timestamp).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);

    const csv = await runEventide(["export", "--data-dir", source.dataDir, "--format", "csv", "--from", "2024-01-02", "--to", "2024-01-02"]);
    expect(csv.code).toBe(0);
    expect(csv.stdout.split("\n")[0]).toBe("event,distinctId,timestamp,uuid,properties");
    expect(csv.stdout.trim().split("\n").length - 1).toBe(lines.filter((line) => line.timestamp.startsWith("2024-01-02")).length);

    const target = join(root, "target");
    const created = succeeded(await runEventide(["init", "--data-dir", target]));
    // No server runs on the target: import starts one of its own.
    const first = succeeded(await runEventide(["import", exportFile, "--data-dir", target]));
    expect(first).toMatchObject({ lines: 602, accepted: 602, refused: 0 });
    succeeded(await runEventide(["import", exportFile, "--data-dir", target]));

    const copy = await startServer({ dataDir: target, credentials: created });
    servers.push(copy);
    expect(await answers(copy)).toEqual(expected);
    expect(await Promise.all(["signup", "view", "purchase"].map((event) => eventCount(copy, event)))).toEqual(expectedCounts);
    // A third import, into the running server, stores nothing new either.
    succeeded(await runEventide(["import", exportFile, "--data-dir", target, "--ingest-url", copy.ingestUrl]));
    expect(await answers(copy)).toEqual(expected);
    expect(await Promise.all(["signup", "view", "purchase"].map((event) => eventCount(copy, event)))).toEqual(expectedCounts);
  });
});

describe("eventide backup", () => {
  it("holds every event acknowledged before it began, taken under concurrent ingest, and a server starts from it", async () => {
    const source = await startServer({ dataDir: join(root, "source"), env: { EVENTIDE_CHECKPOINT_ROWS_MAX: "500" } });
    servers.push(source);
    let batch = 0;
    let stop = false;
    const acknowledged: number[] = [];
    const ingesting = (async () => {
      while (!stop) {
        const index = batch++;
        const events = Array.from({ length: 500 }, (_, row) => ({ event: `batch-${index}`, distinctId: `u${row}`, timestamp: "2024-03-01T12:00:00Z" }));
        await ingestAll(source, events);
        acknowledged.push(index);
      }
    })();
    while (acknowledged.length < 8) await new Promise((resolve) => setTimeout(resolve, 20));
    const before = [...acknowledged];
    const backupDir = join(root, "backup");
    const summary = succeeded(await runEventide(["backup", backupDir, "--data-dir", source.dataDir]));
    stop = true;
    await ingesting;
    expect(summary.backup).toBe(backupDir);
    // The links it copied from are gone from the server's directory (the server's own tmp_ files, such as a checkpoint file being published, may come and go).
    expect(readdirSync(source.dataDir).filter((name) => name.startsWith("tmp_snapshot_"))).toEqual([]);

    const restored = await startServer({ dataDir: backupDir, credentials: { apiKey: source.apiKey, token: source.token, workspaceId: source.workspaceId } });
    servers.push(restored);
    for (const index of before) expect(await eventCount(restored, `batch-${index}`), `batch-${index}`).toBe(500);
    // Nothing torn: a batch is one WAL record, so the copy holds it whole or not at all.
    for (let index = 0; index < batch; index++) expect([0, 500]).toContain(await eventCount(restored, `batch-${index}`));
  });

  it("keeps no backup of a store holding damage, names the file in the data directory and the way out", async () => {
    const source = await startServer({ dataDir: join(root, "source") });
    servers.push(source);
    await ingestAll(source, [{ event: "kept", distinctId: "u1", timestamp: "2024-03-01T12:00:00Z" }]);
    expect(await source.stop()).toBe(0);
    // A bit flipped in a sealed column file since the last start read it.
    const day = join(source.dataDir, "ws", source.workspaceId, "2024-03-01");
    const [segment] = readdirSync(day);
    const file = join(day, segment, "user.u32");
    const bytes = readFileSync(file);
    bytes[0] ^= 0x01;
    writeFileSync(file, bytes);

    const backupDir = join(root, "backup");
    const answer = await runEventide(["backup", backupDir, "--data-dir", source.dataDir]);
    expect(answer.code, answer.stdout).toBe(1);
    expect(answer.stdout + answer.stderr).toContain(file);
    expect(answer.stdout + answer.stderr).toContain("eventide repair");
    expect(existsSync(backupDir) ? readdirSync(backupDir) : [], "no backup is kept").toEqual([]);
    expect(readdirSync(root).filter((name) => name.includes(".tmp-")), "nor its temporary copy").toEqual([]);
  });

  it("keeps no backup when a log file that a later one follows ends in a damaged record, as start-up refuses it; without fsync both cut it", async () => {
    const source = await startServer({ dataDir: join(root, "source") });
    await ingestAll(source, [{ event: "kept", distinctId: "u1", timestamp: "2024-03-01T12:00:00Z" }]);
    // Killed: the event is in the log only, its one record the file's last.
    await source.kill();
    const walDirectory = join(source.dataDir, "wal");
    const [name] = readdirSync(walDirectory);
    const file = join(walDirectory, name);
    const bytes = readFileSync(file);
    bytes[bytes.length - 1] ^= 0x01;
    writeFileSync(file, bytes);
    // A later log file: the log had rotated past the damaged one, so every record in it was durable.
    writeFileSync(join(walDirectory, `${String(Number(name.slice(0, 12)) + 1).padStart(12, "0")}.wal`), "");
    await expect(startServer({ dataDir: source.dataDir, startTimeoutMs: 30_000 })).rejects.toThrow(`corruption in ${file}`);

    const refused = await runEventide(["backup", join(root, "backup"), "--data-dir", source.dataDir]);
    expect(refused.code, refused.stdout).toBe(1);
    expect(refused.stdout + refused.stderr).toContain(file);
    expect(existsSync(join(root, "backup")), "no backup is kept").toBe(false);
    const unsynced = await runEventide(["backup", join(root, "backup-unsynced"), "--data-dir", source.dataDir], { env: { EVENTIDE_FSYNC: "off" } });
    expect(unsynced.code, unsynced.stderr).toBe(0);
  });
});
