/**
 * The upgrade path, on data directories written by released formats:
 * test/fixtures/format-2/data (segment format 2 — two merged days and one
 * sealed day —, WAL records EWL2 holding rows never checkpointed, dictionary
 * blocks DIC1, `_checkpoint.json` format 1, registry version 1) and
 * test/fixtures/format-3/data (the same, with segment format 3: stored value
 * counts). Every later version must start on each and answer these queries as
 * they were answered when format-2 was made (format-2/answers.json); a format
 * change that breaks this needs an upgrade of its own. And every file kind a
 * newer version might write is refused with a message that says so, and left
 * as it is (no WAL tail cut).
 *
 * format-2 was made by ingesting 340 events in three runs of the server: two
 * stopped cleanly (sealed, then merged per day), the last killed, so its 40
 * events are in the WAL only. format-3 holds the same 340 events (exported
 * from format-2 with `eventide export`), ingested the same way in three runs
 * of 150, 150 and 40 events. EVENTIDE_RECORD_FORMAT_ANSWERS=1 rewrites
 * answers.json from the current code (only when making a new fixture).
 */
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { encodeLayout, type SegmentLayout } from "../../src/storage/segment-layout.js";
import { makeDataDir, post, removeDataDir, repoRoot, serversPerFile, startServer as startOnce } from "../helpers/server.js";
import { runEventide, succeeded } from "../helpers/run-eventide.js";

const startServer = serversPerFile();
const fixtures = ["format-2", "format-3"].map((name) => join(repoRoot, "test", "fixtures", name));
/** The newest fixture, for the refusals. */
const fixture = fixtures[fixtures.length - 1];
const workspaceOf = (fixtureRoot: string) => readdirSync(join(fixtureRoot, "data", "ws"))[0];
const workspaceId = workspaceOf(fixture);
const answersPath = join(fixtures[0], "answers.json");

const queries: Array<[string, object]> = [
  ["trend", { event: "view", dateFrom: "2024-03-01", dateTo: "2024-03-03" }],
  ["trend", { event: "signup", dateFrom: "2024-03-01", dateTo: "2024-03-03", math: "unique", groupBy: "hour" }],
  ["trend", { event: "purchase", dateFrom: "2024-03-01", dateTo: "2024-03-03", filters: [{ property: "country", op: "eq", value: "日本" }] }],
  ["trend", { event: "view", dateFrom: "2024-03-01", dateTo: "2024-03-03", breakdown: "plan" }],
  ["funnel", { steps: ["signup", "view", "purchase"], dateFrom: "2024-03-01", dateTo: "2024-03-03", conversionWindow: 86_400 }],
  ["retention", { cohortEvent: "signup", retentionEvent: "view", dateFrom: "2024-03-01", dateTo: "2024-03-03", windowDays: 1 }],
];

const copies: string[] = [];
afterAll(() => {
  for (const copy of copies) removeDataDir(copy);
});

/** A copy of a fixture's data directory, with a token of its workspace. */
async function fixtureCopy(fixtureRoot = fixture): Promise<{ dataDir: string; token: string }> {
  const root = makeDataDir("eventide-format-");
  copies.push(root);
  const dataDir = join(root, "data");
  cpSync(join(fixtureRoot, "data"), dataDir, { recursive: true });
  const { token } = succeeded(await runEventide(["token", "create", workspaceOf(fixtureRoot), "--data-dir", dataDir]));
  return { dataDir, token };
}

describe("data directory formats", () => {
  it.each(fixtures.map((root) => [root.slice(root.lastIndexOf("format-")), root]))("a server started on the %s fixture answers as when format-2 was made", async (_name, fixtureRoot) => {
    const { dataDir, token } = await fixtureCopy(fixtureRoot);
    const server = await startServer({ dataDir, credentials: { apiKey: "unused", token, workspaceId: workspaceOf(fixtureRoot) } });
    const answers: unknown[] = [];
    for (const [kind, body] of queries) {
      const response = await post(`${server.queryUrl}/api/v1/query/${kind}`, body, { token });
      expect(response.status, response.text).toBe(200);
      answers.push(response.body);
    }
    const events = await fetch(`${server.queryUrl}/api/v1/events`, { headers: { authorization: `Bearer ${token}` } });
    answers.push(await events.json());
    if (process.env.EVENTIDE_RECORD_FORMAT_ANSWERS === "1" && fixtureRoot === fixtures[0]) writeFileSync(answersPath, `${JSON.stringify(answers, null, 1)}\n`);
    expect(answers).toEqual(JSON.parse(readFileSync(answersPath, "utf8")));
    // 300 sealed events and 40 replayed from the WAL.
    expect((answers[answers.length - 1] as { data: Array<{ count: number }> }).data.reduce((sum, entry) => sum + entry.count, 0)).toBe(340);
  }, 120_000);

  const newer: Array<[string, (dataDir: string) => string, RegExp]> = [
    [
      "a segment",
      (dataDir) => {
        const day = join(dataDir, "ws", workspaceId, "2024-03-02");
        const meta = join(day, readdirSync(day)[0], "_meta.json");
        const text = readFileSync(meta, "utf8");
        const layout = JSON.parse(text.slice(0, text.lastIndexOf(',"crc32":')) + "}") as SegmentLayout;
        writeFileSync(meta, encodeLayout({ ...layout, format: 4 }));
        return meta;
      },
      /segment format 4; this version reads up to 3/,
    ],
    // A newer format's first record or block does not read as one of this version's (its checksum covers its magic).
    ["a write-ahead log file", (dataDir) => patchMagic(join(dataDir, "wal", readdirSync(join(dataDir, "wal"))[0]), "EWL3", true), /write-ahead log record format 3; this version reads up to 2/],
    ["a dictionary", (dataDir) => patchMagic(join(dataDir, "ws", workspaceId, "_users.dict"), "DIC2", true), /dictionary format 2; this version reads up to 1/],
    // A newer checkpoint's checksum covers its format, so it does not check out as this version's.
    ["_checkpoint.json", (dataDir) => patchJson(join(dataDir, "_checkpoint.json"), { format: 3, crc32: 12345 }), /checkpoint format 3; this version reads up to 2/],
    ["the registry", (dataDir) => patchJson(join(dataDir, "_registry.json"), { version: 2 }), /registry format 2; this version reads up to 1/],
  ];

  for (const [what, patch, message] of newer) {
    it(`refuses to start on ${what} written by a newer version, naming it, and leaves it as it is`, async () => {
      const { dataDir } = await fixtureCopy();
      const path = patch(dataDir);
      const before = readFileSync(path);
      const start = startOnce({ dataDir, startTimeoutMs: 30_000 });
      await expect(start).rejects.toThrow(message);
      await expect(start).rejects.toThrow(/written by a newer Eventide/);
      expect(existsSync(path) && readFileSync(path).equals(before)).toBe(true);
      // Repair reads the store's files, not the registry: it refuses them rather than move them aside as damage.
      if (what !== "the registry") {
        const repair = await runEventide(["repair", "--data-dir", dataDir]);
        expect(repair.code).toBe(1);
        expect(repair.output.error).toMatch(message);
        expect(readFileSync(path).equals(before)).toBe(true);
      }
    }, 60_000);
  }
});

describe("a flipped bit in a format digit", () => {
  const flips: Array<[string, (dataDir: string) => string]> = [
    // "EWL2" → "EWL6" and "DIC1" → "DIC5": bit 2 of byte 3.
    ["a write-ahead log record's", (dataDir) => patchMagic(join(dataDir, "wal", readdirSync(join(dataDir, "wal"))[0]), "EWL6")],
    ["a dictionary block's", (dataDir) => patchMagic(join(dataDir, "ws", workspaceId, "_users.dict"), "DIC5")],
    // "format":1 → "format":5, the same bit of the checkpoint's digit.
    ["the checkpoint's", (dataDir) => patchJson(join(dataDir, "_checkpoint.json"), { format: 5 })],
  ];
  it.each(flips)("in %s is damage, not a newer version: its file is named as corrupt, or the damage is cut as a torn tail", async (_what, patch) => {
    const { dataDir } = await fixtureCopy();
    const path = patch(dataDir);
    let refusal = "";
    try {
      const server = await startOnce({ dataDir, startTimeoutMs: 30_000 });
      await server.stop();
    } catch (error) {
      refusal = (error as Error).message;
    }
    expect(refusal).not.toMatch(/written by a newer Eventide/);
    if (refusal !== "") expect(refusal).toContain(`corruption in ${path}`);
  }, 60_000);
});

/** Replaces the first 4 bytes (a record or block magic) of `path`, and with `newHeader` the 4 after them (a WAL record's header checksum); returns it. */
function patchMagic(path: string, magic: string, newHeader = false): string {
  const bytes = readFileSync(path);
  bytes.write(magic, 0, "latin1");
  if (newHeader) bytes.writeUInt32LE((bytes.readUInt32LE(4) ^ 0x5a5a5a5a) >>> 0, 4);
  writeFileSync(path, bytes);
  return path;
}

/** Sets top-level fields of the JSON file at `path`; returns it. */
function patchJson(path: string, fields: Record<string, unknown>): string {
  writeFileSync(path, JSON.stringify({ ...JSON.parse(readFileSync(path, "utf8")), ...fields }));
  return path;
}
