/**
 * SPEC §2 Durability on a disk that flips bits: after a kill -9, or a kill -9
 * and a simulated power loss (test/helpers/power-loss.ts), one random bit of
 * one random file of the store is flipped — a WAL file, a dictionary, a
 * segment column file, a segment's `_meta.json` or `_checkpoint.json` — and
 * the server is started on it. Exactly one of these must follow:
 *
 *  - the start is refused with a corruption message naming the file (or its
 *    segment); `eventide repair` then exits 0, the server starts, and every
 *    batch counts either exactly or, lost and reported by repair, 0;
 *  - the server starts and counts every acknowledged event exactly;
 *  - the flip hit the WAL's last records, which no later record proves
 *    durable (a torn write looks the same): the server cuts them and logs the
 *    cut, naming the file — loud, and only what could have been in flight.
 *
 * Never a silent loss, never a wrong count. Every batch has its own event
 * name, day, users and property key, so one trend query reads one batch's
 * count, and a renumbered dictionary would show as a name counting another's
 * rows. EVENTIDE_BIT_FLIP_CYCLES sets the cycles (default 8; `npm run
 * test:crash` runs 200), EVENTIDE_CRASH_SEED replays a run.
 */
import { cpSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { dayMs, isoDay, isoTime, sendBatch, sumCounts, trend } from "../helpers/events.js";
import { losePower } from "../helpers/power-loss.js";
import { Random } from "../helpers/random.js";
import { type ServerHandle, ingestAll, makeDataDir, removeDataDir, startServer } from "../helpers/server.js";
import { runRepair } from "../helpers/repair.js";

const cycleCount = Number(process.env.EVENTIDE_BIT_FLIP_CYCLES ?? 8);
const seed = Number(process.env.EVENTIDE_CRASH_SEED ?? (Date.now() ^ (process.pid << 13)) >>> 0);
/** Flips tried on each store before a new one is built. */
const cyclesPerBase = 5;
const firstDayMs = Date.UTC(2024, 0, 1);

const directories: string[] = [];
const servers: ServerHandle[] = [];

afterAll(async () => {
  for (const server of servers) await server.kill();
  for (const directory of directories) removeDataDir(directory);
});

function newDirectory(prefix: string): string {
  const directory = makeDataDir(prefix);
  directories.push(directory);
  return directory;
}

interface Base {
  dataDir: string;
  credentials: { apiKey: string; token: string; workspaceId: string };
  /** Per batch name: its day and the count every start must give (acknowledged: its size). */
  expected: Map<string, { dayMs: number; count: number; acknowledged: boolean }>;
  damage: string;
}

function batchEvents(name: string, dayStartMs: number, size: number): object[] {
  return Array.from({ length: size }, (_, index) => ({
    event: name,
    distinctId: `${name}-user-${index}`,
    timestamp: isoTime(dayStartMs + index * 1000),
    properties: { [`key of ${name}`]: `value ${index % 3}` },
  }));
}

async function counts(server: ServerHandle, names: Map<string, { dayMs: number }>): Promise<Map<string, number>> {
  const result = new Map<string, number>();
  for (const [name, { dayMs: day }] of names) result.set(name, sumCounts(await trend(server, { event: name, dateFrom: isoDay(day), dateTo: isoDay(day), groupBy: "day" })));
  return result;
}

/**
 * A store killed while ingesting, with sealed segments, dictionaries and WAL
 * records; every other one also loses power. Its counts are read on a copy, so
 * each flip starts from the same files.
 */
async function buildBase(random: Random, round: number): Promise<Base> {
  const dataDir = newDirectory("eventide-bit-flip-base-");
  const journalPath = join(newDirectory("eventide-bit-flip-journal-"), "sync-journal");
  const env = { EVENTIDE_CHECKPOINT_ROWS_MAX: String(random.integer(150, 600)), EVENTIDE_CHECKPOINT_INTERVAL_MS: "600000", EVENTIDE_CHECKPOINT_IDLE_MS: "600000", EVENTIDE_SYNC_JOURNAL: journalPath };
  const server = await startServer({ dataDir, workers: 1, env });
  servers.push(server);
  const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
  const expected: Base["expected"] = new Map();
  const batchCount = random.integer(6, 12);
  for (let batch = 0; batch < batchCount; batch++) {
    const name = `round ${round} batch ${batch}`;
    const day = firstDayMs + (round * 20 + batch) * dayMs;
    const size = random.integer(20, 160);
    await ingestAll(server, batchEvents(name, day, size));
    expected.set(name, { dayMs: day, count: size, acknowledged: true });
  }
  // In flight at the kill: stored whole or not at all, never acknowledged.
  const inFlight = Array.from({ length: 2 }, (_, index) => {
    const name = `round ${round} in flight ${index}`;
    const day = firstDayMs + (round * 20 + batchCount + index) * dayMs;
    expected.set(name, { dayMs: day, count: -1, acknowledged: false });
    return sendBatch(server.ingestUrl, server.apiKey, batchEvents(name, day, random.integer(20, 100)));
  });
  await new Promise((resolve) => setTimeout(resolve, random.integer(0, 20)));
  await server.kill();
  for (const [index, outcome] of (await Promise.all(inFlight)).entries()) {
    // Acknowledged just before the kill: it must count from now on.
    if (outcome.kind === "acknowledged") expected.get(`round ${round} in flight ${index}`)!.acknowledged = true;
  }
  const powerLoss = round % 2 === 1;
  if (powerLoss) losePower(journalPath, random);

  // What a start on the undamaged files counts, read on a copy.
  const copy = newDirectory("eventide-bit-flip-check-");
  cpSync(dataDir, copy, { recursive: true });
  const check = await startServer({ dataDir: copy, workers: 1, credentials, env: { EVENTIDE_CHECKPOINT_INTERVAL_MS: "600000", EVENTIDE_CHECKPOINT_IDLE_MS: "600000" } });
  servers.push(check);
  for (const [name, count] of await counts(check, expected)) {
    const entry = expected.get(name)!;
    if (entry.acknowledged && entry.count >= 0) expect(count, `${name} before any flip`).toBe(entry.count);
    entry.count = count;
  }
  await check.kill();
  removeDataDir(copy);
  return { dataDir, credentials, expected, damage: powerLoss ? "kill -9 and power loss" : "kill -9" };
}

type FileKind = "wal" | "dictionary" | "segment column" | "segment meta" | "checkpoint";
const fileKinds: readonly FileKind[] = ["wal", "dictionary", "segment column", "segment meta", "checkpoint"];

/** Every non-empty file of the store by kind (tmp_ leftovers and unpublished segments included: start-up must cope). */
function storeFiles(dataDir: string): Map<FileKind, string[]> {
  const files = new Map<FileKind, string[]>();
  const add = (kind: FileKind, path: string) => {
    if (statSync(path).size === 0) return;
    files.set(kind, [...(files.get(kind) ?? []), path]);
  };
  if (existsSync(join(dataDir, "_checkpoint.json"))) add("checkpoint", join(dataDir, "_checkpoint.json"));
  for (const name of readdirSync(join(dataDir, "wal"))) add("wal", join(dataDir, "wal", name));
  for (const workspace of readdirSync(join(dataDir, "ws"))) {
    const workspaceDirectory = join(dataDir, "ws", workspace);
    for (const entry of readdirSync(workspaceDirectory)) {
      const path = join(workspaceDirectory, entry);
      if (entry.endsWith(".dict")) add("dictionary", path);
      if (!/^\d{4}-\d{2}-\d{2}$/.test(entry)) continue;
      for (const segment of readdirSync(path)) {
        for (const file of readdirSync(join(path, segment))) add(file === "_meta.json" ? "segment meta" : "segment column", join(path, segment, file));
      }
    }
  }
  return files;
}

interface Figures {
  cycles: number;
  byKind: Record<string, number>;
  refused: number;
  repaired: number;
  /** Acknowledged events lost by a repair, by the kind of file it repaired (a damaged segment's rows, a damaged dictionary's segments, a damaged WAL record). */
  lostReported: Record<string, number>;
  startedExact: number;
  tailCutsLogged: number;
  /** Acknowledged events in WAL records cut as a torn tail, each cut logged. */
  lostInLoggedTailCuts: number;
  silentLosses: number;
  wrongAnswers: number;
}

describe(`single bit flips in every kind of store file (${cycleCount} cycles, seed ${seed})`, () => {
  it("refuses to start or counts every acknowledged event: never a silent loss, never a wrong answer", async () => {
    const random = new Random(seed);
    const figures: Figures = { cycles: 0, byKind: {}, refused: 0, repaired: 0, lostReported: {}, startedExact: 0, tailCutsLogged: 0, lostInLoggedTailCuts: 0, silentLosses: 0, wrongAnswers: 0 };
    const failures: string[] = [];
    let base: Base | undefined;
    for (let cycle = 0; cycle < cycleCount && failures.length === 0; cycle++) {
      if (cycle % cyclesPerBase === 0) {
        if (base) removeDataDir(base.dataDir);
        base = await buildBase(random, cycle / cyclesPerBase);
      }
      const { credentials, expected } = base!;
      const dataDir = newDirectory("eventide-bit-flip-");
      cpSync(base!.dataDir, dataDir, { recursive: true });
      const files = storeFiles(dataDir);
      // Every kind in turn, so a short run covers them all.
      const wanted = fileKinds[cycle % fileKinds.length];
      const kind = files.has(wanted) ? wanted : random.pick([...files.keys()]);
      const path = random.pick(files.get(kind)!);
      const bytes = readFileSync(path);
      const offset = random.integer(0, bytes.length - 1);
      const bit = random.integer(0, 7);
      bytes[offset] ^= 1 << bit;
      writeFileSync(path, bytes);
      figures.byKind[kind] = (figures.byKind[kind] ?? 0) + 1;
      const where = `cycle ${cycle} (${base!.damage}): bit ${bit} of byte ${offset} of ${path.slice(dataDir.length + 1)} (${bytes.length} bytes)`;

      const env = { EVENTIDE_CHECKPOINT_INTERVAL_MS: "600000", EVENTIDE_CHECKPOINT_IDLE_MS: "600000" };
      let server: ServerHandle | undefined;
      let refusal: string | undefined;
      try {
        server = await startServer({ dataDir, workers: 1, credentials, env });
        servers.push(server);
      } catch (error) {
        refusal = (error as Error).message;
      }
      let reportedLoss = false;
      let repairedKinds = "";
      if (refusal !== undefined) {
        figures.refused++;
        const segment = path.slice(0, path.lastIndexOf("/"));
        const named = refusal.includes(`corruption in ${path}`) || (kind.startsWith("segment") && refusal.includes(`corruption in ${segment}`));
        if (!named) {
          failures.push(`${where}: the start was refused without naming the damaged file: ${refusal.slice(-1500)}`);
          break;
        }
        const repair = await runRepair(dataDir);
        if (repair.code !== 0) {
          failures.push(`${where}: repair exited ${repair.code}: ${repair.stderr.slice(-1500)}`);
          break;
        }
        figures.repaired++;
        const repairActions = (repair.output?.actions ?? []).map((action) => action.action as string);
        repairedKinds = [...new Set(repairActions)].sort().join("+");
        // A rebuilt checkpoint alone loses nothing: its segments' rows are in the WAL files it keeps.
        reportedLoss = repairActions.some((action) => ["segment-moved-aside", "dictionary-cut", "wal-rewritten"].includes(action));
        try {
          server = await startServer({ dataDir, workers: 1, credentials, env });
          servers.push(server);
        } catch (error) {
          failures.push(`${where}: the start after repair failed: ${(error as Error).message.slice(-1500)}`);
          break;
        }
      }
      const cutLine = refusal === undefined ? server!.stderr().split("\n").find((line) => line.includes(`"msg":"write-ahead log torn tail cut","file":"${path}"`)) : undefined;
      const tailCut = cutLine !== undefined;
      // A cut starts at the damaged record at the latest: nothing before the flipped byte may go.
      if (cutLine !== undefined && (JSON.parse(cutLine) as { offset: number }).offset > offset) failures.push(`${where}: cut past the flipped byte: ${cutLine}`);
      let exact = true;
      for (const [name, count] of await counts(server!, expected)) {
        const entry = expected.get(name)!;
        if (count === entry.count) continue;
        exact = false;
        if (count !== 0) {
          figures.wrongAnswers++;
          failures.push(`${where}: ${name} counted ${count}, ${entry.count} before the flip`);
        } else if (!entry.acknowledged) {
          // Never acknowledged: stored whole or not at all is all it was promised.
        } else if (reportedLoss) {
          figures.lostReported[repairedKinds] = (figures.lostReported[repairedKinds] ?? 0) + entry.count;
        } else if (tailCut) {
          figures.lostInLoggedTailCuts += entry.count;
        } else {
          figures.silentLosses += entry.count;
          failures.push(`${where}: ${name}'s ${entry.count} acknowledged events were lost without a word; server stderr: ${server!.stderr().slice(-1500)}`);
        }
      }
      if (tailCut) figures.tailCutsLogged++;
      if (refusal === undefined && exact) figures.startedExact++;
      const code = await server!.stop();
      if (code !== 0) failures.push(`${where}: graceful stop exited ${code}: ${server!.stderr().slice(-800)}`);
      figures.cycles++;
      removeDataDir(dataDir);
    }
    console.log(
      `bit-flip-cycles: ${figures.cycles} cycles (${Object.entries(figures.byKind).map(([kind, count]) => `${kind} ${count}`).join(", ")}): ` +
        `${figures.refused} starts refused naming the file, all ${figures.repaired} repaired (acknowledged events reported lost by repair: ${Object.entries(figures.lostReported).map(([kinds, events]) => `${events} by ${kinds}`).join(", ") || "none"}), ` +
        `${figures.startedExact} started counting every event exactly, ${figures.tailCutsLogged} WAL tail cuts logged (${figures.lostInLoggedTailCuts} acknowledged events in them); ` +
        `${figures.silentLosses} lost silently, 0 silent truncation${figures.silentLosses ? " violated" : ""}, ${figures.wrongAnswers} wrong answers (seed ${seed})`,
    );
    expect(failures, `seed ${seed}`).toEqual([]);
    expect(figures).toMatchObject({ cycles: cycleCount, silentLosses: 0, wrongAnswers: 0 });
  }, 60_000 + cycleCount * 15_000);
});
