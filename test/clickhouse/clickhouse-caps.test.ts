/**
 * The per-workspace caps on distinct event names and property keys hold in
 * ClickHouse mode as in the embedded store (test/http/cardinality-caps.test.ts):
 * an event bringing a new name or key past its cap is refused on its own with
 * `invalid_request` naming the field and the setting, the rest of the batch is
 * stored; after a restart the names and keys already in ClickHouse, or still
 * in the outbox waiting for ClickHouse, still count.
 */
import { describe, expect, it } from "vitest";
import { clickhouseBinary, clickhousePerSuite, skipNotice, startClickHouse, storeUrl } from "../helpers/clickhouse.js";
import { expectOk, ingestBatch } from "../helpers/http.js";
import { makeDataDir, removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

const binary = clickhouseBinary();
if (binary === undefined) console.warn(skipNotice("ClickHouse cardinality cap tests"));

const namesMax = 5;
const keysMax = 3;
const timestamp = "2024-05-01T10:00:00Z";

type BatchError = { index: number; code: string; message: string };

/** With both caps full: a new name and a new key are refused per event, an event of a known name and key is stored. */
async function expectCapsFull(server: ServerHandle, knownName: string, knownKey: string): Promise<void> {
  const body = expectOk(
    await ingestBatch(server, server.apiKey, [
      { event: "late", distinctId: "a", timestamp },
      { event: knownName, distinctId: "b", timestamp, properties: { [knownKey]: "known" } },
      { event: knownName, distinctId: "c", timestamp, properties: { k9: "new" } },
    ]),
  );
  expect(body.accepted).toBe(1);
  expect(body.errors.map((error: BatchError) => error.index)).toEqual([0, 2]);
  expect(body.errors[0].message).toMatch(/^event: "late" .*EVENTIDE_WORKSPACE_EVENT_NAMES_MAX/);
  expect(body.errors[1].message).toMatch(/^properties: "k9" .*EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX/);
}

describe.skipIf(binary === undefined)("the cardinality caps over the ClickHouse store", () => {
  const clickhouse = clickhousePerSuite();

  /** The events ClickHouse holds, `name×count` sorted, once it holds `count` rows (the forwarder ships them a moment after the 200s). */
  async function storedOnce(database: string, count: number): Promise<string[]> {
    for (;;) {
      const text = await clickhouse.sql(`SELECT event, count() FROM ${database}.events GROUP BY event ORDER BY event FORMAT TSV`);
      const rows = text.trim() === "" ? [] : text.trim().split("\n").map((line) => line.replace("\t", "×"));
      if (rows.reduce((sum, row) => sum + Number(row.split("×")[1]), 0) >= count) return rows;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  it("refuses per event a new name or key past its cap, stores the rest, and still counts them after a restart", { timeout: 180_000 }, async () => {
    const dataDir = makeDataDir();
    const env = {
      EVENTIDE_STORE: storeUrl(clickhouse, "caps"),
      EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS: "20",
      EVENTIDE_WORKSPACE_EVENT_NAMES_MAX: String(namesMax),
      EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX: String(keysMax),
    };
    let server = await startServer({ dataDir, env, startTimeoutMs: 90_000 });
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    try {
      // Seven new names, then a known one again: the sixth and seventh are past the cap.
      const names = [...Array.from({ length: namesMax + 2 }, (_, index) => `n${index}`), "n0"];
      const byName = expectOk(await ingestBatch(server, server.apiKey, names.map((event, index) => ({ event, distinctId: `u${index}`, timestamp }))));
      expect(byName.accepted).toBe(namesMax + 1);
      expect(byName.errors.map((error: BatchError) => error.index)).toEqual([5, 6]);
      for (const error of byName.errors) {
        expect(error.code).toBe("invalid_request");
        expect(error.message).toMatch(/^event: "n[56]" .*EVENTIDE_WORKSPACE_EVENT_NAMES_MAX/);
      }

      const byKey = expectOk(
        await ingestBatch(server, server.apiKey, [
          { event: "n1", distinctId: "a", timestamp, properties: { k0: 1, k1: 2, k2: 3 } },
          { event: "n1", distinctId: "b", timestamp, properties: { k0: 1, k3: "new" } },
          { event: "n1", distinctId: "c", timestamp, properties: { k1: 1 } },
        ]),
      );
      expect(byKey.accepted).toBe(2);
      expect(byKey.errors).toEqual([{ index: 1, code: "invalid_request", message: expect.stringMatching(/^properties: "k3" .*EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX/) }]);
      expect(await storedOnce("caps", namesMax + 1 + 2)).toEqual(["n0×2", "n1×3", "n2×1", "n3×1", "n4×1"]);
      expect((await clickhouse.sql("SELECT count() FROM caps.events WHERE has(prop_keys, 'k3') FORMAT TSV")).trim()).toBe("0");

      // After a restart the names and keys already stored still count against the caps.
      await server.stop();
      server = await startServer({ dataDir, env, credentials, startTimeoutMs: 90_000 });
      await expectCapsFull(server, "n4", "k2");
      expect(await storedOnce("caps", namesMax + 1 + 2 + 1)).toEqual(["n0×2", "n1×3", "n2×1", "n3×1", "n4×2"]);
    } finally {
      await server.stop();
      removeDataDir(dataDir);
    }
  });

  it("still counts, after a restart, the names and keys acknowledged while ClickHouse was down and not yet forwarded", { timeout: 180_000 }, async () => {
    const dataDir = makeDataDir();
    const down = await startClickHouse();
    const env = { EVENTIDE_STORE: storeUrl(down, "outboxed"), EVENTIDE_WORKSPACE_EVENT_NAMES_MAX: String(namesMax), EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX: String(keysMax) };
    let server = await startServer({ dataDir, env, startTimeoutMs: 90_000 });
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    try {
      await down.kill();
      const events = Array.from({ length: namesMax }, (_, index) => ({ event: `n${index}`, distinctId: "u", timestamp, properties: { [`k${index % keysMax}`]: 1 } }));
      expect(expectOk(await ingestBatch(server, server.apiKey, events))).toEqual({ ok: true, accepted: namesMax });
      await server.stop();
      // ClickHouse is back, but holds none of those rows when Eventide starts: they are in its outbox only.
      await down.restart();
      server = await startServer({ dataDir, env, credentials, startTimeoutMs: 90_000 });
      await expectCapsFull(server, "n0", "k1");
    } finally {
      await server.stop();
      await down.stop();
      removeDataDir(dataDir);
    }
  });
});
