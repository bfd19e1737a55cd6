/**
 * Many distinct property keys must cost memory and files in proportion to the
 * values stored, not to keys × rows. Events here carry 10 keys each, drawn
 * from 24 000 distinct ones, all on one day: a dense column per key (as
 * Eventide first stored them) would take 24 000 keys × 24 000 rows × 4 bytes
 * = 2.3 GB in the active segment and as many files as keys when sealed.
 * Answers are checked against counts kept on the client side, over active
 * rows, sealed rows, and after a restart.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countEvents, ingestBatch, trendData } from "../helpers/http.js";
import { Random } from "../helpers/random.js";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

const keyCount = 24_000;
const eventCount = 24_000;
const keysPerEvent = 10;
const day = "2024-08-14";
const env = { EVENTIDE_CHECKPOINT_IDLE_MS: "500" };

let server: ServerHandle;
/** How many events set each key, and how many set it to 7. */
const setCount = new Uint32Array(keyCount);
const sevenCount = new Uint32Array(keyCount);

function mebibytes(field: "VmRSS" | "VmHWM"): number {
  const status = readFileSync(`/proc/${server.process.pid}/status`, "utf8");
  return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)![1]) / 1024;
}

function filesUnder(directory: string): number {
  let count = 0;
  for (const entry of readdirSync(directory, { withFileTypes: true })) count += entry.isDirectory() ? filesUnder(join(directory, entry.name)) : 1;
  return count;
}

async function keyCounts(key: number): Promise<{ set: number; seven: number }> {
  const token = server.token;
  const [set] = await trendData(server, token, { event: "wide", dateFrom: day, dateTo: day, filters: [{ property: `key-${key}`, op: "is_set" }] });
  const [seven] = await trendData(server, token, { event: "wide", dateFrom: day, dateTo: day, filters: [{ property: `key-${key}`, op: "eq", value: "7" }] });
  return { set: set.count, seven: seven.count };
}

async function expectCountsAgree(context: string): Promise<void> {
  expect(await countEvents(server, server.token, "wide", day), context).toBe(eventCount);
  const random = new Random(99);
  for (let probe = 0; probe < 40; probe++) {
    const key = random.integer(0, keyCount - 1);
    expect(await keyCounts(key), `${context}: key-${key}`).toEqual({ set: setCount[key], seven: sevenCount[key] });
  }
}

beforeAll(async () => {
  server = await startServer({ env });
});

afterAll(async () => {
  await server?.stop();
  if (server) removeDataDir(server.dataDir);
});

/**
 * The second test may wait 30 s for the idle seal, then stops (up to 10 s) and starts (up to 20 s) the server,
 * with 81 queries before and after: past vitest's 60 s default on a slow machine, where a bare timeout would hide
 * which step ran long. Both tests get this much.
 */
const testTimeoutMs = 120_000;

describe("many distinct property keys", () => {
  let baselineMebibytes = 0;

  it("are ingested without memory growing with keys × rows", async () => {
    baselineMebibytes = mebibytes("VmRSS");
    const random = new Random(7);
    for (let start = 0; start < eventCount; start += 1000) {
      const events = [];
      for (let row = start; row < start + 1000; row++) {
        const properties: Record<string, number> = {};
        for (let pick = 0; pick < keysPerEvent; pick++) {
          const key = random.integer(0, keyCount - 1);
          if (`key-${key}` in properties) continue;
          const value = random.integer(0, 9);
          properties[`key-${key}`] = value;
          setCount[key]++;
          if (value === 7) sevenCount[key]++;
        }
        events.push({ event: "wide", distinctId: `user-${row % 3000}`, timestamp: `${day}T${String(row % 24).padStart(2, "0")}:00:00Z`, properties });
      }
      const answer = await ingestBatch(server, server.apiKey, events);
      expect(answer.status, answer.text).toBe(200);
    }
    await expectCountsAgree("active rows");
    const growth = mebibytes("VmHWM") - baselineMebibytes;
    // Dense columns would need > 2 GB; entries need ~240 000 × 16 bytes plus dictionaries.
    expect(growth, `peak RSS grew ${growth.toFixed(0)} MiB`).toBeLessThan(400);
  }, testTimeoutMs);

  it("are sealed into a handful of files, and answer the same sealed and after a restart", async () => {
    // Idle sealing: the checkpoint runs 0.5 s after the last ingest.
    const deadline = Date.now() + 30_000;
    while (!readdirSync(server.dataDir, { recursive: true }).some((name) => String(name).endsWith("properties.bin"))) {
      expect(Date.now(), "no segment was sealed within 30 s").toBeLessThan(deadline);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await expectCountsAgree("sealed rows");
    expect(filesUnder(server.dataDir)).toBeLessThan(200);
    const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
    expect(await server.stop(), server.exitReport()).toBe(0);
    server = await startServer({ dataDir: server.dataDir, credentials, env });
    await expectCountsAgree("after a restart");
    expect(mebibytes("VmHWM"), "peak RSS after the restart").toBeLessThan(baselineMebibytes + 400);
  }, testTimeoutMs);
});
