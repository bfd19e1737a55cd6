/**
 * Deleting one user's events (a privacy request), end to end with real
 * servers: once POST /api/v1/users/delete (or `eventide user delete`) answers,
 * every query — trend, unique users, funnel, a retention answer cached before,
 * the listings — answers as a store that never held the user's events, for
 * rows that were sealed and rows still active in memory and in the WAL alike;
 * that stays so after a kill -9 and a restart (no replay brings them back),
 * the user's property values are gone from every file of the data directory,
 * and events of the user sent after the deletion are kept.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { ingestAll, post, serversPerFile, type ServerHandle } from "../helpers/server.js";
import { runEventide, succeeded } from "../helpers/run-eventide.js";

const startServer = serversPerFile("kill");

/** A text only the deleted user's events carry: it must leave the disk with them. */
const secret = "alice-private-7f3a9c";

function events(withAlice: boolean, from: number, to: number): object[] {
  const list: object[] = [];
  for (let index = from; index < to; index++) {
    const user = ["alice", "bob", "carol", "dave"][index % 4];
    if (user === "alice" && !withAlice) continue;
    list.push({
      event: ["signup", "view", "purchase"][index % 3],
      distinctId: user,
      timestamp: `2024-01-${String(1 + (index % 9)).padStart(2, "0")}T${String(index % 24).padStart(2, "0")}:00:00Z`,
      properties: { plan: index % 2 ? "pro" : "free", note: user === "alice" ? `${secret}-${index}` : `n${index % 5}` },
      uuid: `00000000-0000-4000-8000-${String(index).padStart(12, "0")}`,
    });
  }
  return list;
}

const queries: Array<[string, object]> = [
  ["trend", { event: "view", dateFrom: "2024-01-01", dateTo: "2024-01-10" }],
  ["trend", { event: "signup", dateFrom: "2024-01-01", dateTo: "2024-01-10", math: "unique" }],
  ["trend", { event: "purchase", dateFrom: "2024-01-01", dateTo: "2024-01-10", filters: [{ property: "plan", op: "eq", value: "pro" }] }],
  ["funnel", { steps: ["signup", "view", "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-10", conversionWindow: 864_000 }],
  ["retention", { cohortEvent: "signup", retentionEvent: "view", dateFrom: "2024-01-01", dateTo: "2024-01-10", windowDays: 7 }],
];

/** The queries' answers, and the listings' unless `listings` is false (they may lag ingest by up to 60 s, SPEC §7.6; not a deletion). */
async function answers(server: Pick<ServerHandle, "queryUrl" | "token">, listings = true): Promise<unknown[]> {
  const results: unknown[] = [];
  for (const [kind, body] of queries) {
    const response = await post(`${server.queryUrl}/api/v1/query/${kind}`, body, { token: server.token });
    expect(response.status, response.text).toBe(200);
    results.push(response.body);
  }
  for (const listing of listings ? ["events", "properties"] : []) {
    const response = await fetch(`${server.queryUrl}/api/v1/${listing}`, { headers: { authorization: `Bearer ${server.token}` } });
    expect(response.status).toBe(200);
    results.push(await response.json());
  }
  return results;
}

/**
 * Files under `directory` whose bytes contain `text`. The server may remove a
 * temporary file or directory (a rewrite's, a merge's) while this walks: what
 * is gone by the time it is read holds nothing.
 */
function filesHolding(directory: string, text: string): string[] {
  const found: string[] = [];
  for (const name of readdirSync(directory)) {
    const path = join(directory, name);
    try {
      if (statSync(path).isDirectory()) found.push(...filesHolding(path, text));
      else if (readFileSync(path).includes(text)) found.push(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    }
  }
  return found;
}

const deleteUser = (server: Pick<ServerHandle, "queryUrl" | "token">, distinctId: unknown) => post(`${server.queryUrl}/api/v1/users/delete`, { distinctId }, { token: server.token });

describe("user deletion", () => {
  it("takes a user's sealed and active events out of every answer at once, off the disk, and for good across a kill -9", async () => {
    const subject = await startServer();
    const reference = await startServer();
    // The first half is sealed (a clean stop seals every row); the second stays active, in memory and in the WAL.
    await ingestAll(subject, events(true, 0, 400));
    await subject.stop();
    const credentials = { apiKey: subject.apiKey, token: subject.token, workspaceId: subject.workspaceId };
    const restarted = await startServer({ dataDir: subject.dataDir, credentials });
    await ingestAll(restarted, events(true, 400, 800));
    await ingestAll(reference, events(false, 0, 800));
    const expected = await answers(reference);
    // Cached now (retention answers are cached for a minute): the deletion must not leave them served.
    expect(await answers(restarted)).not.toEqual(expected);

    const deletion = await deleteUser(restarted, "alice");
    expect(deletion.status, deletion.text).toBe(200);
    expect(deletion.body).toEqual({ ok: true, deletedEvents: 200 });
    expect(await answers(restarted)).toEqual(expected);
    expect(filesHolding(restarted.dataDir, secret)).toEqual([]);

    // Events of the user sent after the deletion are new events, and kept.
    const later = { event: "view", distinctId: "alice", timestamp: "2024-01-03T05:00:00Z", properties: { plan: "pro" } };
    await ingestAll(restarted, [later]);
    await ingestAll(reference, [later]);
    const expectedLater = await answers(reference, false);
    expect(await answers(restarted, false)).toEqual(expectedLater);

    await restarted.kill();
    const recovered = await startServer({ dataDir: subject.dataDir, credentials });
    expect(await answers(recovered, false)).toEqual(expectedLater);
    expect(filesHolding(recovered.dataDir, secret)).toEqual([]);
    // Deleting again removes only what is left: the one later event.
    expect((await deleteUser(recovered, "alice")).body).toEqual({ ok: true, deletedEvents: 1 });
    expect((await deleteUser(recovered, "nobody")).body).toEqual({ ok: true, deletedEvents: 0 });
  }, 240_000);

  it("refuses a body without a valid distinctId, and an unknown token", async () => {
    const server = await startServer();
    const missing = await post(`${server.queryUrl}/api/v1/users/delete`, {}, { token: server.token });
    expect(missing.status).toBe(400);
    expect(missing.body.error.code).toBe("invalid_request");
    // The query API's wording: the field named, "required", "unknown field", what was expected.
    expect(missing.body.error.message).toBe("distinctId: required");
    const empty = await deleteUser(server, "");
    expect(empty.status).toBe(400);
    expect(empty.body.error.message).toMatch(/^distinctId: expected a non-empty string/);
    const extra = await post(`${server.queryUrl}/api/v1/users/delete`, { distinctId: "a", extra: 1 }, { token: server.token });
    expect(extra.status).toBe(400);
    expect(extra.body.error.message).toBe("extra: unknown field");
    expect((await post(`${server.queryUrl}/api/v1/users/delete`, { distinctId: "a" }, { token: "nope" })).status).toBe(401);
  });

  it("`eventide user delete` deletes through a server of its own when none runs, numbers as String(n)", async () => {
    const server = await startServer();
    await ingestAll(server, [
      { event: "view", distinctId: 42, timestamp: "2024-02-01T00:00:00Z" },
      { event: "view", distinctId: "42", timestamp: "2024-02-02T00:00:00Z" },
      { event: "view", distinctId: "other", timestamp: "2024-02-02T00:00:00Z" },
    ]);
    await server.stop();
    const result = succeeded(await runEventide(["user", "delete", "42", "--data-dir", server.dataDir]));
    expect(result).toMatchObject({ deleted: true, distinctId: "42", deletedEvents: 2, workspaceId: server.workspaceId });
    const again = await startServer({ dataDir: server.dataDir, credentials: { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId } });
    const trend = await post(`${again.queryUrl}/api/v1/query/trend`, { event: "view", dateFrom: "2024-02-01", dateTo: "2024-02-02" }, { token: again.token });
    expect(trend.body.data.map((bucket: { count: number }) => bucket.count)).toEqual([0, 1]);
  }, 120_000);
});
