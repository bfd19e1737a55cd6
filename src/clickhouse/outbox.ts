/**
 * The ClickHouse store's write side. A request's chunk is made durable in a
 * WAL of the store's own (the outbox) before the 200, exactly as the embedded
 * store acknowledges; a forwarder then ships the outbox to ClickHouse in large
 * blocks, ClickHouse wanting few big inserts rather than one per request.
 *
 * Exactly once: a block is a run of records of one outbox file, named by the
 * front end, the file and its first record, so a block is the same rows
 * whenever it is rebuilt. Before its INSERT, the forwarder writes durably that
 * the block is under way; after it, that it is done. A start that finds a
 * block under way asks ClickHouse which of the block's (day, shard) parts
 * exist and inserts the others only: an INSERT writes one part per day and
 * shard, each atomically, but several together are not atomic, so a kill in
 * the middle leaves some parts in and some out, and none half.
 *
 * uuid retries: each front end remembers the uuids of the last
 * EVENTIDE_UUID_HORIZON_DAYS (read back from ClickHouse at start) and drops
 * repeats before the outbox, as the embedded store does. Front ends do not
 * share that memory; instead each block, before its INSERT, drops the rows
 * whose uuid ClickHouse already holds from another block within the horizon
 * (uuidsStoredElsewhere). So a uuid sent to two front ends is counted once
 * when one copy's INSERT ends before the other's block is checked — always
 * when the second copy is acknowledged after the first is visible in queries;
 * two copies forwarded at the same moment may both be counted.
 *
 * Cardinality caps (EVENTIDE_WORKSPACE_EVENT_NAMES_MAX, …_PROPERTY_KEYS_MAX):
 * refused as in the embedded store (storage/cardinality.ts), against the
 * names and keys each front end knows: those in ClickHouse at its start, in
 * its outbox, and committed through it since. Front ends do not share them:
 * one learns another's names at its next start.
 */
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import type { ClickHouseSettings } from "../config/config.js";
import { limits } from "../config/limits.js";
import { log } from "../log.js";
import { CardinalityReservations, TextSet } from "../storage/cardinality.js";
import { decodeChunk, filterChunk, type DecodedChunk } from "../storage/chunk-codec.js";
import type { CommitResult } from "../storage/commit.js";
import { makeDirectoryDurably, publishFileAtomically } from "../storage/files.js";
import { clickhouseOutboxDirectory, walFilePath } from "../storage/paths.js";
import { encodeRecord, listWalSequences, scanWalFile, truncateWalFile, WriteAheadLog } from "../storage/wal.js";
import { ClickHouseClient, sqlIdentifier, sqlString } from "./client.js";
import { eventsTable, type SchemaState } from "./schema.js";

interface OutboxRecord {
  sequence: number;
  /** Its place among the file's records. */
  index: number;
  workspaceId: string;
  payload: Uint8Array;
  rowCount: number;
  durableAtMs: number;
}

/** Where forwarding stands: every record before (sequence, index) is in ClickHouse; `underway` is the block being inserted. */
interface ForwardState {
  sequence: number;
  index: number;
  underway: { sequence: number; from: number; to: number } | undefined;
}

/** A workspace's event names and property keys as the caps count them. */
interface WorkspaceTexts {
  names: TextSet;
  keys: TextSet;
  reservations: CardinalityReservations;
}

const stateFileName = "forwarded.json";
const frontEndFileName = "front-end-id";

/** The shard a user's rows go to: FNV-1a of the distinctId's UTF-16 units, so every front end agrees. */
export function shardOf(user: string, shardCount: number): number {
  let hash = 0x811c9dc5;
  for (let index = 0; index < user.length; index++) hash = Math.imul(hash ^ user.charCodeAt(index), 0x01000193) >>> 0;
  return hash % shardCount;
}

function uuidText(bytes: Uint8Array, row: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset + row * 16, 16).toString("hex");
}

/** The UTC day as a number (ClickHouse's Date ends in 2105; SPEC §2 timestamps run to 9999). */
function dayOf(timeMs: number): number {
  return Math.floor(timeMs / 86_400_000);
}

/** One JSONEachRow line per row of the chunk; `keep(day, shard, uuid)` selects the rows to write ('' when the row has no uuid). */
function chunkRows(workspaceId: string, chunk: DecodedChunk, blockId: string, shardCount: number, keep: (day: number, shard: number, uuid: string) => boolean): string[] {
  const keys: string[][] = Array.from({ length: chunk.rowCount }, () => []);
  const values: string[][] = Array.from({ length: chunk.rowCount }, () => []);
  for (let key = 0; key < chunk.keyStrings.length; key++) {
    const name = chunk.string(chunk.keyStrings[key]);
    for (let entry = chunk.entryStarts[key]; entry < chunk.entryStarts[key + 1]; entry++) {
      keys[chunk.entryRows[entry]].push(name);
      values[chunk.entryRows[entry]].push(chunk.string(chunk.entryValues[entry]));
    }
  }
  const lines: string[] = [];
  for (let row = 0; row < chunk.rowCount; row++) {
    const user = chunk.string(chunk.distinctIdString[row]);
    const day = dayOf(chunk.timeMs[row]);
    const shard = shardOf(user, shardCount);
    const uuid = chunk.uuidPresent?.[row] ? uuidText(chunk.uuidBytes!, row) : "";
    if (!keep(day, shard, uuid)) continue;
    lines.push(
      JSON.stringify({
        workspace: workspaceId,
        event: chunk.string(chunk.eventNameString[row]),
        user,
        time_ms: chunk.timeMs[row],
        day,
        uuid,
        prop_keys: keys[row],
        prop_values: values[row],
        block_id: blockId,
        shard,
      }),
    );
  }
  return lines;
}

export class ClickHouseOutbox {
  private readonly queue: OutboxRecord[] = [];
  private queuedRows = 0;
  /** Records made durable in the current file so far: the next one's index. */
  private appendedInFile = 0;
  private readonly claims = new Map<string, { claimedAtMs: number; durable: Promise<void> | undefined }>();
  private readonly texts = new Map<string, WorkspaceTexts>();
  private forwarding: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Rows acknowledged and rows in ClickHouse since start, for figures and tests. */
  rowsAcknowledged = 0;
  rowsForwarded = 0;
  private readonly waiters: Array<() => void> = [];
  private readonly rowsStoredListeners: Array<(workspaceId: string) => void> = [];

  private constructor(
    private readonly directory: string,
    private readonly wal: WriteAheadLog,
    private readonly client: ClickHouseClient,
    private readonly database: string,
    private readonly schema: SchemaState,
    private readonly frontEndId: string,
    private state: ForwardState,
    private readonly insertSettings: Record<string, number>,
  ) {}

  /** Opens the outbox: cuts torn tails, queues what was not forwarded, finishes a block left under way, reads recent uuids back. */
  static async open(dataDir: string, fsync: boolean, settings: ClickHouseSettings, schema: SchemaState): Promise<ClickHouseOutbox> {
    const directory = clickhouseOutboxDirectory(dataDir);
    makeDirectoryDurably(directory, fsync);
    const frontEndPath = join(directory, frontEndFileName);
    if (!existsSync(frontEndPath)) publishFileAtomically(frontEndPath, randomBytes(8).toString("hex"), fsync);
    const frontEndId = readFileSync(frontEndPath, "utf8").trim();
    const statePath = join(directory, stateFileName);
    const state: ForwardState = existsSync(statePath) ? JSON.parse(readFileSync(statePath, "utf8")) : { sequence: 0, index: 0, underway: undefined };
    const sequences = listWalSequences(directory);
    const client = ClickHouseClient.of(settings, limits.clickhouseRequestTimeoutMs);
    // Each start appends to a file of its own: a file's record indexes then never change once written.
    const wal = WriteAheadLog.open(directory, (sequences[sequences.length - 1] ?? 0) + 1, fsync);
    const insertSettings: Record<string, number> = { max_insert_block_size: limits.clickhouseBlockRowsMax * 2 };
    if (settings.cluster !== undefined) insertSettings.insert_distributed_sync = 1;
    const outbox = new ClickHouseOutbox(directory, wal, client, sqlIdentifier(settings.database), schema, frontEndId, state, insertSettings);
    for (const sequence of sequences) {
      const path = walFilePath(directory, sequence);
      if (sequence < state.sequence) {
        unlinkSync(path);
        continue;
      }
      const scan = scanWalFile(path);
      if (scan.validBytes < scan.fileBytes) truncateWalFile(path, scan.validBytes);
      scan.records.forEach((record, index) => {
        const chunk = decodeChunk(record.payload);
        const rowCount = chunk.rowCount;
        outbox.claimUuidsOf(record.workspaceId, chunk, Date.now());
        if (sequence === state.sequence && index < state.index) return;
        outbox.learnTexts(outbox.textsOf(record.workspaceId), chunk);
        outbox.queue.push({ sequence, index, workspaceId: record.workspaceId, payload: record.payload, rowCount, durableAtMs: 0 });
        outbox.queuedRows += rowCount;
      });
    }
    await outbox.readUuidsBack();
    await outbox.readTextsBack();
    return outbox;
  }

  /** Starts forwarding; a block left under way by a crash is finished first. */
  start(): void {
    this.timer = setInterval(() => this.kick(), Math.max(10, Math.floor(limits.clickhouseForwardDelayMs / 4)));
    this.timer.unref();
    this.kick();
  }

  get writeQueueBytes(): number {
    return this.wal.queuedBytes;
  }

  noteIngest(_atMs: number): void {}

  /** `listener` is called with a workspace's id whenever rows of it become visible to queries (live answers). */
  onRowsStored(listener: (workspaceId: string) => void): void {
    this.rowsStoredListeners.push(listener);
  }

  /** Resolves once every record acknowledged so far is in ClickHouse (tests, benchmarks, shutdown). */
  drained(): Promise<void> {
    if (this.queue.length === 0 && this.state.underway === undefined) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Drops rows past a cardinality cap and uuid repeats, then makes the chunk durable in the outbox; resolves when it is (SPEC §2: then the 200). */
  async commit(workspaceId: string, chunkBuffer: ArrayBuffer): Promise<CommitResult> {
    if (this.closed) throw new Error("the ClickHouse outbox is closed");
    let bytes = new Uint8Array(chunkBuffer);
    let chunk = decodeChunk(bytes);
    const texts = this.textsOf(workspaceId);
    // Before the uuids are claimed: a refused row's uuid stays free for a retry.
    const admission = texts.reservations.admit(texts.names, texts.keys, chunk);
    if (admission.keep) {
      bytes = new Uint8Array(filterChunk(chunk, admission.keep));
      chunk = decodeChunk(bytes);
    }
    try {
      const storedCount = await this.commitAdmitted(workspaceId, bytes, chunk);
      if (storedCount > 0) this.learnTexts(texts, chunk);
      return { storedCount, refusals: admission.refusals };
    } finally {
      admission.release();
    }
  }

  /** Drops uuid repeats, then makes the chunk durable in the outbox; resolves to the rows written. */
  private async commitAdmitted(workspaceId: string, bytes: Uint8Array, chunk: DecodedChunk): Promise<number> {
    const nowMs = Date.now();
    const claimed: string[] = [];
    const claimedHere = new Set<string>();
    const awaited = new Set<Promise<void>>();
    if (chunk.uuidPresent !== undefined) {
      const keep = new Uint8Array(chunk.rowCount).fill(1);
      let dropped = 0;
      for (let row = 0; row < chunk.rowCount; row++) {
        if (!chunk.uuidPresent[row]) continue;
        const key = `${workspaceId}:${uuidText(chunk.uuidBytes!, row)}`;
        const claim = this.claims.get(key);
        // A repeat earlier in the same chunk (a batch) counts as stored too (SPEC §2).
        if (claimedHere.has(key) || (claim !== undefined && nowMs - claim.claimedAtMs < limits.uuidHorizonDays * 86_400_000)) {
          keep[row] = 0;
          dropped++;
          if (claim?.durable !== undefined) awaited.add(claim.durable);
          continue;
        }
        claimed.push(key);
        claimedHere.add(key);
      }
      if (dropped > 0) {
        bytes = new Uint8Array(filterChunk(chunk, keep));
        chunk = decodeChunk(bytes);
      }
    }
    if (chunk.rowCount === 0) {
      await Promise.all(awaited);
      return 0;
    }
    const rowCount = chunk.rowCount;
    const payload = bytes;
    const durable = this.wal.append(encodeRecord(workspaceId, bytes), () => {
      this.queue.push({ sequence: this.wal.sequence, index: this.appendedInFile++, workspaceId, payload, rowCount, durableAtMs: Date.now() });
      this.queuedRows += rowCount;
    });
    for (const key of claimed) this.claims.set(key, { claimedAtMs: nowMs, durable });
    try {
      await Promise.all([durable, ...awaited]);
    } catch (error) {
      for (const key of claimed) this.claims.delete(key);
      throw error;
    }
    for (const key of claimed) this.claims.set(key, { claimedAtMs: nowMs, durable: undefined });
    this.rowsAcknowledged += rowCount;
    if (this.queuedRows >= limits.clickhouseBlockRowsMax) this.kick();
    return rowCount;
  }

  private textsOf(workspaceId: string): WorkspaceTexts {
    let texts = this.texts.get(workspaceId);
    if (texts === undefined) {
      texts = { names: new TextSet(), keys: new TextSet(), reservations: new CardinalityReservations() };
      this.texts.set(workspaceId, texts);
    }
    return texts;
  }

  /** Counts the chunk's names and keys as stored (a key only refused rows carried has no entries left). */
  private learnTexts(texts: WorkspaceTexts, chunk: DecodedChunk): void {
    for (let row = 0; row < chunk.rowCount; row++) texts.names.add(chunk.string(chunk.eventNameString[row]));
    for (let key = 0; key < chunk.keyStrings.length; key++) {
      if (chunk.entryStarts[key + 1] > chunk.entryStarts[key]) texts.keys.add(chunk.string(chunk.keyStrings[key]));
    }
  }

  /** The distinct event names and property keys ClickHouse holds per workspace, so the caps count them after a restart. */
  private async readTextsBack(): Promise<void> {
    for (const [workspace, name] of await this.client.rows(`SELECT DISTINCT workspace, event FROM ${this.database}.${eventsTable}`)) {
      this.textsOf(workspace as string).names.add(name as string);
    }
    for (const [workspace, key] of await this.client.rows(`SELECT DISTINCT workspace, arrayJoin(prop_keys) FROM ${this.database}.${eventsTable}`)) {
      this.textsOf(workspace as string).keys.add(key as string);
    }
  }

  private claimUuidsOf(workspaceId: string, chunk: DecodedChunk, nowMs: number): void {
    if (chunk.uuidPresent === undefined) return;
    for (let row = 0; row < chunk.rowCount; row++) {
      if (chunk.uuidPresent[row]) this.claims.set(`${workspaceId}:${uuidText(chunk.uuidBytes!, row)}`, { claimedAtMs: nowMs, durable: undefined });
    }
  }

  /** The uuids ClickHouse stored within the horizon, so a retry after a restart is still recognised. */
  private async readUuidsBack(): Promise<void> {
    const rows = await this.client.rows(
      `SELECT workspace, uuid, toUInt64(max(stored_at)) FROM ${this.database}.${eventsTable} WHERE uuid != '' AND stored_at >= now() - ${limits.uuidHorizonDays * 86_400} GROUP BY workspace, uuid`,
    );
    for (const [workspace, uuid, storedAtSeconds] of rows) {
      this.claims.set(`${workspace as string}:${uuid as string}`, { claimedAtMs: Number(storedAtSeconds) * 1000, durable: undefined });
    }
  }

  private kick(): void {
    if (this.forwarding !== undefined || this.closed) return;
    const nowMs = Date.now();
    for (const [key, claim] of this.claims) {
      // Insertion order is claim order, near enough: stop at the first one inside the horizon.
      if (nowMs - claim.claimedAtMs < limits.uuidHorizonDays * 86_400_000) break;
      this.claims.delete(key);
    }
    const due =
      this.state.underway !== undefined ||
      this.queuedRows >= limits.clickhouseBlockRowsMax ||
      (this.queue.length > 0 && nowMs - this.queue[0].durableAtMs >= limits.clickhouseForwardDelayMs);
    if (!due) return;
    this.forwarding = this.forward().then(
      () => {
        this.forwarding = undefined;
        if (this.queue.length > 0) setImmediate(() => this.kick());
      },
      (error: unknown) => {
        log.error({ err: (error as Error).message }, "forwarding to ClickHouse failed; retrying");
        // Retried on the timer: ClickHouse may be restarting.
        setTimeout(() => (this.forwarding = undefined), limits.clickhouseRetryDelayMs).unref();
      },
    );
  }

  private blockId(sequence: number, from: number): string {
    return `${this.frontEndId}:${sequence}:${from}`;
  }

  private saveState(): void {
    publishFileAtomically(join(this.directory, stateFileName), JSON.stringify(this.state));
  }

  /** Ships one block: the records of one file from the queue's head, up to the row bound. */
  private async forward(): Promise<void> {
    const underway = this.state.underway;
    if (underway !== undefined) {
      await this.insertBlock(underway.sequence, underway.from, this.queue.filter((record) => record.sequence === underway.sequence && record.index < underway.to), true);
    } else {
      const first = this.queue[0];
      if (first === undefined) return;
      const records: OutboxRecord[] = [];
      let rows = 0;
      for (const record of this.queue) {
        if (record.sequence !== first.sequence || (records.length > 0 && rows + record.rowCount > limits.clickhouseBlockRowsMax)) break;
        records.push(record);
        rows += record.rowCount;
      }
      this.state = { sequence: first.sequence, index: first.index, underway: { sequence: first.sequence, from: first.index, to: first.index + records.length } };
      this.saveState();
      await this.insertBlock(first.sequence, first.index, records, false);
    }
    const done = this.state.underway!;
    const shipped = this.queue.splice(0, this.queue.findIndex((record) => record.sequence !== done.sequence || record.index >= done.to) >>> 0);
    const workspaces = new Set<string>();
    for (const record of shipped) {
      this.queuedRows -= record.rowCount;
      this.rowsForwarded += record.rowCount;
      workspaces.add(record.workspaceId);
    }
    for (const workspaceId of workspaces) for (const listener of this.rowsStoredListeners) listener(workspaceId);
    this.state = { sequence: done.sequence, index: done.to, underway: undefined };
    this.saveState();
    // Appends move to a new file now and then, so that shipped files can be deleted while the server runs.
    if (this.wal.fileBytes >= limits.clickhouseOutboxFileBytesMax) await this.wal.rotate(() => undefined, () => (this.appendedInFile = 0));
    if (this.queue.length === 0 || this.queue[0].sequence !== done.sequence) this.dropShippedFiles();
    if (this.queue.length === 0) for (const resolve of this.waiters.splice(0)) resolve();
  }

  /** Files before the one the queue starts in (and not the one being appended to) are wholly in ClickHouse. */
  private dropShippedFiles(): void {
    const next = this.queue[0]?.sequence ?? this.wal.sequence;
    for (const sequence of listWalSequences(this.directory)) {
      if (sequence >= next || sequence >= this.wal.sequence) break;
      unlinkSync(walFilePath(this.directory, sequence));
    }
  }

  /**
   * INSERTs a block's rows. `recovering`: the block may be partly in already
   * (a crash or a failed INSERT), so only its (day, shard) parts that are absent are written.
   */
  private async insertBlock(sequence: number, from: number, records: readonly OutboxRecord[], recovering: boolean): Promise<void> {
    const blockId = this.blockId(sequence, from);
    const chunks = records.map((record) => ({ workspaceId: record.workspaceId, chunk: decodeChunk(record.payload) }));
    let present = new Set<string>();
    if (recovering) {
      const days = new Set<number>();
      for (const { chunk } of chunks) for (let row = 0; row < chunk.rowCount; row++) days.add(dayOf(chunk.timeMs[row]));
      if (days.size === 0) return;
      const found = await this.client.rows(
        `SELECT day, shard FROM ${this.database}.${eventsTable} WHERE day IN (${[...days].join(",")}) AND block_id = ${sqlString(blockId)} GROUP BY day, shard`,
      );
      present = new Set(found.map(([day, shard]) => `${day as number}/${shard as number}`));
    }
    const stored = await this.uuidsStoredElsewhere(chunks, blockId);
    const lines: string[] = [];
    for (const { workspaceId, chunk } of chunks) {
      lines.push(...chunkRows(workspaceId, chunk, blockId, this.schema.shardCount, (day, shard, uuid) => !present.has(`${day}/${shard}`) && !(uuid !== "" && stored.has(`${workspaceId}:${uuid}`))));
      // One record (one request's chunk) at a time: a block of 200 000 rows must not hold the main thread, which answers ingest, for seconds.
      await new Promise((resolve) => setImmediate(resolve));
    }
    if (lines.length === 0) return;
    await this.client.run(`INSERT INTO ${this.database}.${eventsTable} (workspace, event, user, time_ms, day, uuid, prop_keys, prop_values, block_id, shard) FORMAT JSONEachRow`, `${lines.join("\n")}\n`, this.insertSettings);
  }

  /**
   * The block's uuids that ClickHouse already holds from another block (another
   * front end, or this one before its uuid memory was lost) stored within the
   * horizon, as `workspace:uuid`: those rows are not inserted again. Read on
   * the days the block's rows fall on (a retry carries its timestamp).
   */
  private async uuidsStoredElsewhere(chunks: ReadonlyArray<{ workspaceId: string; chunk: DecodedChunk }>, blockId: string): Promise<Set<string>> {
    const uuids = new Set<string>();
    const days = new Set<number>();
    for (const { chunk } of chunks) {
      if (chunk.uuidPresent === undefined) continue;
      for (let row = 0; row < chunk.rowCount; row++) {
        if (!chunk.uuidPresent[row]) continue;
        uuids.add(uuidText(chunk.uuidBytes!, row));
        days.add(dayOf(chunk.timeMs[row]));
      }
    }
    if (uuids.size === 0) return new Set();
    // The uuids travel as a temporary table: a block's 200 000 as literals are past ClickHouse's max_ast_elements.
    const found = await this.client.rowsWith(
      `SELECT workspace, uuid FROM ${this.database}.${eventsTable} WHERE day IN (${[...days].join(",")}) AND uuid IN block_uuids` +
        ` AND block_id != ${sqlString(blockId)} AND stored_at >= now() - ${limits.uuidHorizonDays * 86_400} GROUP BY workspace, uuid`,
      { name: "block_uuids", column: "uuid", values: uuids },
    );
    return new Set(found.map(([workspace, uuid]) => `${workspace as string}:${uuid as string}`));
  }

  /** Stops forwarding (what is left is forwarded at the next start) and closes the outbox WAL. */
  async close(deadlineMs: number): Promise<void> {
    // A last chance to ship what is queued, within the shutdown's time; the rest waits in the outbox.
    const drained = this.drained();
    this.kick();
    await Promise.race([drained, new Promise((resolve) => setTimeout(resolve, Math.max(0, deadlineMs - Date.now())).unref())]);
    this.closed = true;
    clearInterval(this.timer);
    if (this.forwarding !== undefined) await Promise.race([this.forwarding, new Promise((resolve) => setTimeout(resolve, Math.max(0, deadlineMs - Date.now())).unref())]);
    await this.wal.close();
  }
}

