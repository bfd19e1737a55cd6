/**
 * SPEC §2 Durability on a failing disk: damage a torn write cannot explain is
 * corruption, and the server refuses to start on it rather than cut
 * acknowledged data or renumber names (TigerBeetle's rule). `eventide repair`
 * moves the damaged part aside, keeps every intact record around it, and the
 * server starts again.
 *
 * The two scenarios a failing disk showed: one byte flipped in the second of
 * five acknowledged WAL records (the restart used to keep record 1 and cut
 * 3–5), and one byte flipped in the first block of `_events.dict` (both
 * blocks used to be dropped, and a new name took id 0: a trend answered 2
 * where 1 was true).
 */
import { existsSync, readdirSync, readFileSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { walFilePath } from "../../src/storage/paths.js";
import { encodeRecord, readWalFile } from "../../src/storage/wal.js";
import { dayMs, isoDay, isoTime, sumCounts, trend } from "../helpers/events.js";
import { runRepair } from "../helpers/repair.js";
import { type ServerHandle, ingestAll } from "../helpers/server.js";
import { storeRestarts } from "../helpers/stopped-store.js";

/** Rows stay in the WAL: no idle or timed checkpoint seals them before the kill. */
const walOnly = { EVENTIDE_CHECKPOINT_IDLE_MS: "600000", EVENTIDE_CHECKPOINT_INTERVAL_MS: "600000" };
const timeMs = Date.UTC(2024, 6, 1, 12);
const range = { dateFrom: isoDay(timeMs - dayMs), dateTo: isoDay(timeMs + dayMs), groupBy: "day" as const };

const { newDataDir, start, refusal } = storeRestarts("eventide-corruption-", walOnly);

async function count(server: ServerHandle, event: string): Promise<number> {
  return sumCounts(await trend(server, { event, ...range }));
}

function walFile(dataDir: string): string {
  const names = readdirSync(join(dataDir, "wal")).filter((name) => name.endsWith(".wal")).sort();
  expect(names).toHaveLength(1);
  return join(dataDir, "wal", names[0]);
}

describe("a byte flipped in the second of five acknowledged WAL records", () => {
  it("refuses the start naming the file and the offset; repair keeps records 1, 3, 4 and 5", async () => {
    const dataDir = newDataDir();
    let server = await start(dataDir);
    // One request each, each acknowledged before the next: five records, five groups.
    for (let index = 0; index < 5; index++) await ingestAll(server, [{ event: "signup", distinctId: `user-${index}`, timestamp: isoTime(timeMs + index) }]);
    expect(await count(server, "signup")).toBe(5);
    await server.kill();

    const path = walFile(dataDir);
    const { records } = readWalFile(path);
    expect(records).toHaveLength(5);
    const firstBytes = encodeRecord(records[0].workspaceId, records[0].payload).length;
    const second = { start: firstBytes, end: firstBytes + encodeRecord(records[1].workspaceId, records[1].payload).length };
    const bytes = readFileSync(path);
    bytes[second.end - 12] ^= 0x04; // inside the payload
    writeFileSync(path, bytes);
    const sizeBefore = bytes.length;

    const refused = await refusal(dataDir);
    expect(refused, "the server must refuse to start").toBeDefined();
    expect(refused).toContain(`corruption in ${path} at byte ${second.start}`);
    expect(refused).toContain("eventide repair");
    expect(statSync(path).size, "nothing is cut while refusing").toBe(sizeBefore);

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.output?.repaired).toBe(true);
    const rewritten = repair.output?.actions?.find((action) => action.action === "wal-rewritten");
    expect(rewritten).toMatchObject({ file: path, recordsKept: 4, recordsKeptAfterDamage: 3 });
    // Every step is also a JSON line on stderr (beside the one line naming the data directory), and the damaged bytes are kept aside.
    for (const line of repair.stderr.trim().split("\n").filter((line) => !line.startsWith("eventide: data directory "))) expect(() => JSON.parse(line)).not.toThrow();
    expect(readFileSync(rewritten!.copy as string).equals(bytes)).toBe(true);

    server = await start(dataDir, server);
    expect(await count(server, "signup")).toBe(4);
    // The repaired file takes appends, which survive the next crash.
    await ingestAll(server, [{ event: "signup", distinctId: "user-after", timestamp: isoTime(timeMs) }]);
    await server.kill();
    server = await start(dataDir, server);
    expect(await count(server, "signup")).toBe(5);
    expect(await server.stop()).toBe(0);
  });
});

describe("a byte flipped in the last record of a WAL file that a later file follows", () => {
  it("refuses the start (the log had rotated past it: it was durable, not torn); repair keeps the records before it", async () => {
    const dataDir = newDataDir();
    let server = await start(dataDir);
    for (let index = 0; index < 3; index++) await ingestAll(server, [{ event: "signup", distinctId: `user-${index}`, timestamp: isoTime(timeMs + index) }]);
    await server.kill();

    // The state a crash leaves between a rotation and the checkpoint that would have deleted the old file.
    const path = walFile(dataDir);
    const sequence = Number(/(\d+)\.wal$/.exec(path)![1]);
    writeFileSync(walFilePath(dataDir, sequence + 1), Buffer.alloc(0));
    const { records } = readWalFile(path);
    expect(records).toHaveLength(3);
    const lastStart = records.slice(0, 2).reduce((sum, record) => sum + encodeRecord(record.workspaceId, record.payload).length, 0);
    const bytes = readFileSync(path);
    bytes[bytes.length - 12] ^= 0x04; // inside the last record's payload
    writeFileSync(path, bytes);

    const refused = await refusal(dataDir);
    expect(refused, "the server must refuse to start").toBeDefined();
    expect(refused).toContain(`corruption in ${path} at byte ${lastStart}`);
    expect(refused).toContain("eventide repair");
    expect(statSync(path).size, "nothing is cut while refusing").toBe(bytes.length);

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.output?.actions?.find((action) => action.action === "wal-rewritten")).toMatchObject({ file: path, recordsKept: 2, recordsKeptAfterDamage: 0 });
    server = await start(dataDir, server);
    expect(await count(server, "signup")).toBe(2);
    expect(await server.stop()).toBe(0);
  });
});

describe("a live WAL file cut back under the running server", () => {
  it("refuses the next start (a later record proves the cut bytes were durable); repair keeps every record left and says so", async () => {
    const dataDir = newDataDir();
    let server = await start(dataDir);
    for (let index = 0; index < 2; index++) await ingestAll(server, [{ event: "before", distinctId: `user-${index}`, timestamp: isoTime(timeMs + index) }]);
    const path = walFile(dataDir);
    const { records } = readWalFile(path);
    expect(records).toHaveLength(2);
    // The file loses its second record; the writer appends at the new end (O_APPEND), so the next record lands there.
    const firstBytes = encodeRecord(records[0].workspaceId, records[0].payload).length;
    truncateSync(path, firstBytes);
    await ingestAll(server, [{ event: "after", distinctId: "user-2", timestamp: isoTime(timeMs + 2) }]);
    await server.kill();

    const refused = await refusal(dataDir, server);
    expect(refused, "the server must refuse to start rather than serve without an acknowledged event").toBeDefined();
    expect(refused).toContain(`corruption in ${path} at byte ${firstBytes}`);
    expect(refused).toContain("bytes missing");

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.output?.actions).toContainEqual(expect.objectContaining({ action: "wal-rewritten", file: path, recordsKept: 2 }));
    server = await start(dataDir, server);
    expect(await count(server, "before")).toBe(1);
    expect(await count(server, "after")).toBe(1);
    expect(await server.stop()).toBe(0);
  });
});

describe("a byte flipped in the first block of _events.dict", () => {
  it("refuses the start instead of renumbering names; repair moves the dependent segments aside and says so", async () => {
    const dataDir = newDataDir();
    let server = await start(dataDir);
    await ingestAll(server, [{ event: "first name", distinctId: "a", timestamp: isoTime(timeMs) }]);
    expect(await server.stop()).toBe(0); // sealed: block 1 holds "first name"
    server = await start(dataDir, server);
    await ingestAll(server, [{ event: "second name", distinctId: "b", timestamp: isoTime(timeMs) }]);
    expect(await server.stop()).toBe(0); // block 2 holds "second name"

    const path = join(dataDir, "ws", server.workspaceId, "_events.dict");
    const bytes = readFileSync(path);
    bytes[16 + 4 + 2] ^= 0x01; // a letter of "first name"
    writeFileSync(path, bytes);

    const refused = await refusal(dataDir, server);
    expect(refused, "the server must refuse to start").toBeDefined();
    expect(refused).toContain(`corruption in ${path} at byte 0`);
    expect(statSync(path).size).toBe(bytes.length);

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    const actions = repair.output?.actions ?? [];
    expect(actions.find((action) => action.action === "dictionary-cut")).toMatchObject({ file: path, offset: 0, idsKept: 0 });
    const movedAside = actions.filter((action) => action.action === "segment-moved-aside");
    expect(movedAside.length, "both sealed segments use event ids the dictionary lost").toBe(2);
    for (const action of movedAside) expect(existsSync(action.movedTo as string)).toBe(true);

    server = await start(dataDir, server);
    await ingestAll(server, [{ event: "third name", distinctId: "c", timestamp: isoTime(timeMs) }]);
    // No name answers for another's rows: the lost ones count nothing, the new one counts itself.
    expect(await count(server, "third name")).toBe(1);
    expect(await count(server, "first name")).toBe(0);
    expect(await count(server, "second name")).toBe(0);
    expect(await server.stop()).toBe(0);
  });
});

describe("eventide repair on a healthy store", () => {
  it("refuses while the server runs, and once it is stopped changes nothing and says so", async () => {
    const dataDir = newDataDir();
    let server = await start(dataDir);
    await ingestAll(server, [{ event: "kept", distinctId: "a", timestamp: isoTime(timeMs) }]);
    const whileRunning = await runRepair(dataDir);
    expect(whileRunning.code).toBe(1);
    expect(JSON.stringify(whileRunning.output)).toContain("stop the server first");
    await server.kill();

    const repair = await runRepair(dataDir);
    expect(repair.code, repair.stderr).toBe(0);
    expect(repair.output).toEqual({ repaired: true, quarantine: null, actions: [{ action: "nothing-to-repair" }] });
    expect(readdirSync(dataDir).filter((name) => name.startsWith("damaged-"))).toEqual([]);
    server = await start(dataDir, server);
    expect(await count(server, "kept")).toBe(1);
    expect(await server.stop()).toBe(0);
  });
});
