// Over 500 lines: the record format, the file scan and the group-commit writer share one header layout and one durability rule.
/**
 * Write-ahead log with group commit. Every accepted chunk becomes one record;
 * records that arrive while groups are on their way to disk wait and go down
 * together in the next group, so throughput is bounded by bandwidth, not by the
 * disk's fsync rate. A record's promise resolves only after the fdatasync that
 * covers it succeeded: that is the moment ingest may answer 200 (SPEC §2).
 *
 * Record (EWL2): u32 magic, u32 crc32 of header bytes [8, 32), u32 payload
 * bytes, u32 workspace id bytes, u32 crc32(workspace id + payload), u32 zero,
 * f64 synced bytes; then the workspace id (ASCII) padded to 8, then the chunk,
 * padded to 8. "Synced bytes" is how much of the file was fdatasynced when the
 * record's group was started: a damaged byte below it was durable before, so
 * it is corruption, not a torn write (TigerBeetle's rule). Records of the
 * first format (EWL1: magic, payload bytes, crc32, workspace id bytes) are
 * still read; they claim nothing.
 *
 * At start-up a file is scanned past a bad record for later valid ones. Bad
 * bytes that no later record proves durable are a torn tail (at most the
 * groups in flight at the crash, never acknowledged) and are cut off; bad
 * bytes below a later record's synced bytes are corruption, and the server
 * refuses to start until `eventide repair` has moved them aside.
 *
 * One WAL for all workspaces: one fdatasync per group covers every workspace.
 * Files rotate at checkpoints; a file is deleted once a checkpoint has sealed
 * every row it holds into segment files.
 */
import { strict as assert } from "node:assert";
import { closeSync, constants as fsConstants, existsSync, fdatasyncSync, ftruncateSync, fstatSync, openSync, readdirSync, readFileSync, unlinkSync } from "node:fs";
import { fdatasync, writev, writevSync } from "node:fs";
import { unlink } from "node:fs/promises";
import { crc32 } from "node:zlib";
import { limits } from "../config/limits.js";
import { walDirectory, walFilePath } from "./paths.js";
import { injectedFault, injectFault, recordCreate, recordSync } from "./fault-injection.js";
import { walGroupSeconds } from "../metrics.js";
import { fsyncDirectory, fsyncDirectoryInPool, makeDirectoryDurably, readRegularFile } from "./files.js";
import { log } from "../log.js";

const legacyRecordMagic = 0x314c5745; // "EWL1"
const legacyHeaderBytes = 16;
const recordMagic = 0x324c5745; // "EWL2"
const recordHeaderBytes = 32;
/** Header field offsets of an EWL2 record. */
const enum Header {
  Magic = 0,
  HeaderCrc = 4,
  PayloadBytes = 8,
  IdBytes = 12,
  PayloadCrc = 16,
  SyncedBytes = 24,
}
/** Workspace ids are at most 64 ASCII characters (paths.ts). */
const workspaceIdBytesMax = 64;

function align8(value: number): number {
  return (value + 7) & ~7;
}

export interface WalRecord {
  workspaceId: string;
  /** The encoded chunk. */
  payload: Uint8Array;
}

interface PendingGroupEntry {
  /** The record's bytes in order (encodeRecordParts); the first holds its header. */
  parts: readonly Buffer[];
  byteLength: number;
  /** Runs synchronously once the record and every record before it are durable, in WAL order. */
  onDurable: () => void;
  resolve: () => void;
  reject: (error: Error) => void;
}

export class WalUnavailableError extends Error {}

/**
 * Encodes one record. `syncedBytes` is stamped again when the record's group
 * starts (stampSyncedBytes); 0 claims nothing.
 */
export function encodeRecord(workspaceId: string, chunk: Uint8Array, syncedBytes = 0): Buffer {
  const parts = encodeRecordParts(workspaceId, chunk);
  stampSyncedBytes(parts[0], syncedBytes);
  return Buffer.concat(parts);
}

/**
 * One record as the buffers it is written from: the header and workspace id,
 * the chunk itself (not copied), and the padding after it when its length is
 * not a multiple of 8 (a chunk's always is). Copying a batch's chunk of a
 * quarter megabyte into a record of its own cost the main thread a large
 * allocation and a copy per batch.
 */
export function encodeRecordParts(workspaceId: string, chunk: Uint8Array): Buffer[] {
  const idBytes = Buffer.from(workspaceId, "ascii");
  const payloadOffset = align8(recordHeaderBytes + idBytes.length);
  const head = Buffer.alloc(payloadOffset);
  idBytes.copy(head, recordHeaderBytes);
  const payload = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length);
  head.writeUInt32LE(recordMagic, Header.Magic);
  head.writeUInt32LE(chunk.length, Header.PayloadBytes);
  head.writeUInt32LE(idBytes.length, Header.IdBytes);
  // The CRC covers the workspace id and the payload, so a record cannot be misfiled.
  head.writeUInt32LE(crc32(payload, crc32(head.subarray(recordHeaderBytes))), Header.PayloadCrc);
  stampSyncedBytes(head, 0);
  const padding = align8(chunk.length) - chunk.length;
  return padding === 0 ? [head, payload] : [head, payload, Buffer.alloc(padding)];
}

/** Writes a record's synced-bytes claim and the header checksum over it. */
function stampSyncedBytes(record: Buffer, syncedBytes: number): void {
  record.writeDoubleLE(syncedBytes, Header.SyncedBytes);
  record.writeUInt32LE(crc32(record.subarray(Header.PayloadBytes, recordHeaderBytes)), Header.HeaderCrc);
}

/** A valid record found in a file, where it lies and what it claims. */
export interface LocatedWalRecord extends WalRecord {
  start: number;
  end: number;
  /** Bytes of the file that were durable when it was written (0 for EWL1 records: no claim). */
  syncedBytes: number;
}

/** Where a record's parts lie, read from a header that checks out (its own checksum, for EWL2) and fits the file. */
interface RecordFrame {
  /** EWL2 headers carry their own checksum; an EWL1 header is trusted only through its payload's. */
  checkedHeader: boolean;
  headerBytes: number;
  idBytes: number;
  payloadOffset: number;
  payloadEnd: number;
  payloadCrc: number;
  syncedBytes: number;
}

/** The frame of the record at `offset`, when a header is there and its payload ends inside the file; undefined otherwise. */
function frameAt(bytes: Buffer, offset: number): RecordFrame | undefined {
  if (offset + legacyHeaderBytes > bytes.length) return undefined;
  const magic = bytes.readUInt32LE(offset);
  let payloadBytes: number;
  let idBytes: number;
  let payloadCrc: number;
  let headerBytes: number;
  let syncedBytes = 0;
  if (magic === recordMagic) {
    headerBytes = recordHeaderBytes;
    if (offset + headerBytes > bytes.length) return undefined;
    if (crc32(bytes.subarray(offset + Header.PayloadBytes, offset + headerBytes)) !== bytes.readUInt32LE(offset + Header.HeaderCrc)) return undefined;
    payloadBytes = bytes.readUInt32LE(offset + Header.PayloadBytes);
    idBytes = bytes.readUInt32LE(offset + Header.IdBytes);
    payloadCrc = bytes.readUInt32LE(offset + Header.PayloadCrc);
    syncedBytes = bytes.readDoubleLE(offset + Header.SyncedBytes);
    if (!Number.isSafeInteger(syncedBytes) || syncedBytes < 0) return undefined;
  } else if (magic === legacyRecordMagic) {
    headerBytes = legacyHeaderBytes;
    payloadBytes = bytes.readUInt32LE(offset + 4);
    payloadCrc = bytes.readUInt32LE(offset + 8);
    idBytes = bytes.readUInt32LE(offset + 12);
  } else {
    return undefined;
  }
  if (idBytes > workspaceIdBytesMax) return undefined;
  const payloadOffset = offset + align8(headerBytes + idBytes);
  const payloadEnd = payloadOffset + payloadBytes;
  if (payloadEnd > bytes.length) return undefined;
  return { checkedHeader: magic === recordMagic, headerBytes, idBytes, payloadOffset, payloadEnd, payloadCrc, syncedBytes };
}

/** The record at `offset` when it is whole and its checksums match; undefined otherwise. */
function recordAt(bytes: Buffer, offset: number): LocatedWalRecord | undefined {
  const frame = frameAt(bytes, offset);
  if (frame === undefined) return undefined;
  const { headerBytes, idBytes, payloadOffset, payloadEnd, syncedBytes } = frame;
  if (crc32(bytes.subarray(offset + headerBytes, payloadEnd)) !== frame.payloadCrc) return undefined;
  const workspaceId = bytes.toString("ascii", offset + headerBytes, offset + headerBytes + idBytes);
  // Copy so the payload is 8-byte aligned for typed-array views.
  const payload = new Uint8Array(bytes.subarray(payloadOffset, payloadEnd));
  return { workspaceId, payload, start: offset, end: Math.min(payloadOffset + align8(payloadEnd - payloadOffset), bytes.length), syncedBytes };
}

const magicPatterns = [recordMagic, legacyRecordMagic].map((magic) => {
  const pattern = Buffer.alloc(4);
  pattern.writeUInt32LE(magic);
  return pattern;
});

/** The first valid record starting at an 8-aligned offset at or after `from`; records are 8-aligned from the file's start. */
function nextRecord(bytes: Buffer, from: number): LocatedWalRecord | undefined {
  let cursor = align8(from);
  while (cursor < bytes.length) {
    let found = -1;
    for (const pattern of magicPatterns) {
      const at = bytes.indexOf(pattern, cursor);
      if (at >= 0 && (found < 0 || at < found)) found = at;
    }
    if (found < 0) return undefined;
    if (found % 8 === 0) {
      const record = recordAt(bytes, found);
      if (record) return record;
    }
    cursor = align8(found + 1);
  }
  return undefined;
}

/**
 * What start-up makes of a WAL file's bytes:
 *  - intact: every byte belongs to a valid record;
 *  - torn-tail: bad bytes from `offset` that no later record proves durable: cut them;
 *  - corrupt: bad bytes at `offset` below a later record's synced bytes: acknowledged
 *    records lie beyond them, so nothing may be cut; `eventide repair` decides.
 */
export type WalFileState =
  | { kind: "intact" }
  /** `wholeRecord`: the bad bytes start with a whole record (header checksum right, extent inside the file) whose payload is damaged. */
  | { kind: "torn-tail"; offset: number; wholeRecord: boolean }
  | { kind: "corrupt"; offset: number; damagedBytes: number; recordsAfter: number }
  /** A record says more of the file was durable before it was written than lies before it: durable bytes were cut out (the file was truncated, and appended to after). */
  | { kind: "cut"; offset: number; missingBytes: number; recordsAfter: number };

export interface WalFileScan {
  /** Valid records before the first bad byte. */
  records: WalRecord[];
  /** Every valid record, those past bad bytes included (repair keeps them all). */
  allRecords: LocatedWalRecord[];
  /** [start, end) of each run of bad bytes. */
  damaged: Array<{ start: number; end: number }>;
  state: WalFileState;
  /** Byte length of the valid prefix. */
  validBytes: number;
  fileBytes: number;
}

/** Whether a v2 record was written whole at `offset`: its header checksum holds and its payload ends inside the file. */
function wholeRecordAt(bytes: Buffer, offset: number): boolean {
  return frameAt(bytes, offset)?.checkedHeader === true;
}

/** Scans one WAL file: its valid records, its bad runs, and whether they are a torn tail or corruption. */
export function scanWalFile(path: string): WalFileScan {
  const bytes = readRegularFile(path);
  const allRecords: LocatedWalRecord[] = [];
  const damaged: Array<{ start: number; end: number }> = [];
  let offset = 0;
  while (offset < bytes.length) {
    const record = recordAt(bytes, offset);
    if (record) {
      allRecords.push(record);
      offset = record.end;
      continue;
    }
    const next = nextRecord(bytes, offset + 1);
    damaged.push({ start: offset, end: next?.start ?? bytes.length });
    if (next === undefined) break;
    offset = next.start;
  }
  const firstBad = damaged[0]?.start ?? bytes.length;
  const records: WalRecord[] = allRecords.filter((record) => record.end <= firstBad);
  let state: WalFileState = { kind: "intact" };
  if (damaged.length > 0) {
    const after = allRecords.filter((record) => record.start > firstBad);
    // Only a group started after the bad bytes were fdatasynced can claim them: those bytes were durable.
    const proven = after.some((record) => record.syncedBytes > firstBad);
    state = proven
      ? { kind: "corrupt", offset: firstBad, damagedBytes: damaged.reduce((sum, run) => sum + run.end - run.start, 0), recordsAfter: after.length }
      : { kind: "torn-tail", offset: firstBad, wholeRecord: wholeRecordAt(bytes, firstBad) };
  }
  // Each record stamps the bytes durable when its group started, which were all before it: one past its start proves bytes missing.
  const cutAt = allRecords.findIndex((record) => record.syncedBytes > record.start);
  if (cutAt >= 0 && state.kind !== "corrupt" && (state.kind === "intact" || allRecords[cutAt].start < state.offset)) {
    const record = allRecords[cutAt];
    state = { kind: "cut", offset: record.start, missingBytes: record.syncedBytes - record.start, recordsAfter: allRecords.length - cutAt };
  }
  return { records, allRecords, damaged, state, validBytes: firstBad, fileBytes: bytes.length };
}

/**
 * Whether the first record of the WAL file at `path` is a whole EWL2 record
 * once its magic is put back (its header and payload checksums hold): a
 * magic that reads as a newer format there is a damaged byte, not a newer
 * Eventide's record. A newer record format must not pass this check (its
 * header checksum is to cover the magic).
 */
export function firstRecordIsCurrentFormat(path: string): boolean {
  const bytes = Buffer.from(readFileSync(path));
  if (bytes.length < recordHeaderBytes) return false;
  bytes.writeUInt32LE(recordMagic, 0);
  return recordAt(bytes, 0) !== undefined;
}

/** Reads the valid records of one WAL file; returns them and the byte length of the valid prefix. */
export function readWalFile(path: string): { records: WalRecord[]; validBytes: number; fileBytes: number } {
  const { records, validBytes, fileBytes } = scanWalFile(path);
  return { records, validBytes, fileBytes };
}

export function listWalSequences(dataDir: string): number[] {
  // Durably: a WAL directory whose entry a power loss could drop would take every acknowledged record with it.
  makeDirectoryDurably(walDirectory(dataDir));
  return readdirSync(walDirectory(dataDir))
    .filter((name) => /^\d{12}\.wal$/.test(name))
    .map((name) => Number(name.slice(0, 12)))
    .sort((a, b) => a - b);
}

/** Opens (creating when absent) a WAL file for appending; the caller fsyncs the directory. */
function openWalFile(path: string): number {
  const created = !existsSync(path);
  const fd = openSync(path, "a+");
  if (created) recordCreate(path);
  return fd;
}

/**
 * A second descriptor of the same file whose writes return only once durable
 * (O_DSYNC): a write and its data sync in one call, so one pool trip. Opened
 * after `openWalFile`, which creates the file.
 */
function openDurableWriter(path: string): number {
  return openSync(path, fsConstants.O_WRONLY | fsConstants.O_APPEND | fsConstants.O_DSYNC);
}

/**
 * Groups awaiting their sync at once. A second group is written and synced
 * while the first one's fdatasync is still in flight (fdatasync covers the
 * whole file, and the two overlap on the disk: 1.3–1.5× the syncs per second
 * measured here), so a record that arrives during a sync waits for one sync,
 * not for the rest of that one and then its own.
 */
const groupsInFlightMax = 2;

interface GroupInFlight {
  entries: PendingGroupEntry[];
  /** Its bytes in the file: [start, end). */
  start: number;
  end: number;
  /** Written and synced, or failed (error set). */
  done: boolean;
  error: Error | undefined;
}

/** Groups of at least this many bytes are written by the thread pool, not the main thread. */
const poolWriteBytesMin = 64 * 1024;

export class WriteAheadLog {
  private fd: number;
  /** O_DSYNC descriptor of the same file for large groups; undefined when fsync is off. */
  private syncFd: number | undefined;
  private path: string;
  private position: number;
  /** End of the bytes written so far, durable or not; `position` is the end of the durable ones. */
  private writePosition: number;
  private pending: PendingGroupEntry[] = [];
  private pendingBytes = 0;
  /** Written or being written, not yet settled; in file order. */
  private groupsInFlight: GroupInFlight[] = [];
  /** A large group's write is in the pool: the next group's bytes must wait for it. */
  private poolWriteInFlight = false;
  /**
   * Set after a write or fsync failed and the file could not be cut back: the
   * file may hold a partial group past `position`, and since it is opened for
   * appending (O_APPEND ignores write positions) nothing may be written after
   * it. Appends fail until a retried cut-back succeeds (see `append`).
   */
  private broken: Error | undefined;
  private idleWaiters: Array<() => void> = [];

  private constructor(
    private readonly dataDir: string,
    public sequence: number,
    private readonly fsyncEnabled: boolean,
  ) {
    this.path = walFilePath(dataDir, sequence);
    this.fd = openWalFile(this.path);
    this.syncFd = fsyncEnabled ? openDurableWriter(this.path) : undefined;
    this.position = this.writePosition = fstatSync(this.fd).size;
  }

  /** Opens the WAL for appending at `sequence` (a new file when absent). */
  static open(dataDir: string, sequence: number, fsyncEnabled: boolean): WriteAheadLog {
    makeDirectoryDurably(walDirectory(dataDir), fsyncEnabled);
    const log = new WriteAheadLog(dataDir, sequence, fsyncEnabled);
    fsyncDirectory(walDirectory(dataDir));
    return log;
  }

  get queuedBytes(): number {
    return this.pendingBytes;
  }

  get fileBytes(): number {
    return this.position;
  }

  /**
   * Resolves once the record (encodeRecord's, or encodeRecordParts' buffers) is
   * durable; rejects when the write or fsync failed (the record then never counts).
   */
  append(record: Buffer | readonly Buffer[], onDurable: () => void): Promise<void> {
    if (this.broken && !this.repair()) return Promise.reject(new WalUnavailableError(`write-ahead log unavailable: ${this.broken.message}`));
    const parts: readonly Buffer[] = Buffer.isBuffer(record) ? [record] : (record as readonly Buffer[]);
    let byteLength = 0;
    for (const part of parts) byteLength += part.length;
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ parts, byteLength, onDurable, resolve, reject });
      this.pendingBytes += byteLength;
      this.flush();
    });
  }

  /**
   * Cuts the file back to `length` and makes the cut durable, so a group that
   * failed can never be replayed, nor sit between acknowledged records.
   */
  private cutBack(length: number): void {
    ftruncateSync(this.fd, length);
    if (this.fsyncEnabled) {
      fdatasyncSync(this.fd);
      injectFault("wal.fsync", this.path);
      recordSync(this.path, length);
    }
    this.position = this.writePosition = length;
  }

  /** Retries the cut-back that failed when the log broke; true when the log takes writes again. */
  private repair(): boolean {
    if (this.groupsInFlight.length > 0) return false;
    try {
      this.cutBack(this.position);
    } catch (error) {
      this.broken = error as Error;
      return false;
    }
    log.info(`write-ahead log ${this.path} writable again`);
    this.broken = undefined;
    return true;
  }

  /**
   * Starts groups while there is room: at most groupsInFlightMax awaiting
   * their sync, and never while a pool write is still landing (the file is
   * opened for appending, so the next group's bytes must wait for it) or a
   * failed group waits to be cut off.
   */
  private flush(): void {
    if (this.broken) {
      // Nothing may be appended after a partial group that could not be cut off.
      const error = new WalUnavailableError(`write-ahead log unavailable: ${this.broken.message}`);
      for (const entry of this.pending.splice(0)) entry.reject(error);
      this.pendingBytes = 0;
    }
    while (this.pending.length > 0 && this.groupsInFlight.length < groupsInFlightMax && !this.poolWriteInFlight && !this.groupsInFlight.some((group) => group.error)) {
      this.startGroup();
    }
    if (this.pending.length === 0 && this.groupsInFlight.length === 0) for (const waiter of this.idleWaiters.splice(0)) waiter();
  }

  private startGroup(): void {
    // Take what fits in one group; the rest waits for the next.
    let groupBytes = 0;
    let count = 0;
    while (count < this.pending.length && count < 1000) {
      groupBytes += this.pending[count].byteLength;
      count++;
      if (groupBytes >= limits.groupCommitBytesMax) break;
    }
    const group: GroupInFlight = { entries: this.pending.splice(0, count), start: this.writePosition, end: this.writePosition + groupBytes, done: false, error: undefined };
    // Every byte below `position` is durable now: a record of this group that survives proves it.
    for (const entry of group.entries) stampSyncedBytes(entry.parts[0], this.position);
    this.pendingBytes -= groupBytes;
    this.writePosition = group.end;
    this.groupsInFlight.push(group);
    const buffers = group.entries.flatMap((entry) => entry.parts);
    const path = this.path;

    const startedAtMs = performance.now();
    const finished = (error: Error | undefined) => {
      if (error === undefined && this.fsyncEnabled) walGroupSeconds.observe((performance.now() - startedAtMs) / 1000);
      group.done = true;
      group.error = error;
      this.settle();
    };
    const synced = (syncError: Error | null) => finished(syncError ?? (this.fsyncEnabled ? injectedFault("wal.fsync", path) : undefined));
    const written = (writeError: Error | null, bytesWritten: number) => {
      // An injected write fault strikes after the real write, so the cut-back has real bytes to remove.
      const writeFailure = writeError ?? injectedFault("wal.write", path) ?? (bytesWritten !== groupBytes ? new Error(`short write: ${bytesWritten} of ${groupBytes} bytes`) : undefined);
      // Settled on a later turn either way: callers expect append() never to settle synchronously. The
      // fdatasync starts at once (waiting a turn first cost ~0.25 ms per group under load). A group
      // written through the O_DSYNC descriptor is durable already, and this is a later turn: waiting
      // one more cost ~3.5 ms per group under batch load.
      // A failed write is marked at once, so no group starts behind it (it would only be cut off with it).
      if (writeFailure) {
        group.error = writeFailure;
        setImmediate(() => finished(writeFailure));
      } else if (durablyWritten) synced(null);
      else if (this.fsyncEnabled) fdatasync(this.fd, synced);
      else setImmediate(() => synced(null));
    };
    // A small group is written synchronously: into the page cache it takes tens
    // of microseconds, less than a thread-pool round trip and the event-loop
    // wake-up after it, and a group's latency is what single-event clients wait
    // on. A large one (batches) goes to the pool: copying megabytes into the
    // page cache took ~9 % of the main thread under batch load, and the main
    // thread is ingest's one serial stage. It is written through the O_DSYNC
    // descriptor, durable when the write returns: one pool trip, not a write
    // and then an fdatasync, each waiting for the busy main thread to pick up
    // its callback (~5 ms of a ~14 ms group cycle, measured under load).
    const durablyWritten = groupBytes >= poolWriteBytesMin && this.syncFd !== undefined;
    if (groupBytes < poolWriteBytesMin) {
      let bytesWritten = 0;
      let writeError: Error | null = null;
      try {
        bytesWritten = writevSync(this.fd, buffers, group.start);
      } catch (error) {
        writeError = error as Error;
      }
      written(writeError, bytesWritten);
    } else {
      this.poolWriteInFlight = true;
      writev(this.syncFd ?? this.fd, buffers, group.start, (error, bytesWritten) => {
        this.poolWriteInFlight = false;
        written(error, bytesWritten);
        this.flush();
      });
    }
  }

  /**
   * Settles finished groups in the order they were written: a group is
   * acknowledged only after every group before it. A failed group waits until
   * every later one has finished too (a pool write could otherwise land past
   * the cut), then the file is cut back to its start and all of them fail:
   * nothing after a failed group may count.
   */
  private settle(): void {
    const inFlight = this.groupsInFlight;
    while (inFlight.length > 0 && inFlight[0].done && inFlight[0].error === undefined) {
      const group = inFlight.shift()!;
      if (this.fsyncEnabled) recordSync(this.path, group.end);
      this.position = group.end;
      // The next group goes to disk while this one is applied: applying a
      // group of batches takes milliseconds of main thread, and the disk sat
      // idle through them. Its records are applied after these all the same:
      // it completes on a later turn of the event loop.
      this.flush();
      for (const entry of group.entries) {
        entry.onDurable();
        entry.resolve();
      }
    }
    if (inFlight.length > 0 && inFlight[0].error !== undefined && inFlight.every((group) => group.done)) {
      const failed = inFlight.splice(0);
      const error = failed[0].error!;
      const records = failed.reduce((sum, group) => sum + group.entries.length, 0);
      log.error(`write-ahead log ${this.path}: ${error.message}; ${records} records refused`);
      // Cut the file back so a record that was never acknowledged is not replayed half-way
      // through a later group; if even that fails, stop taking writes rather than guess.
      try {
        this.cutBack(failed[0].start);
      } catch (truncateError) {
        this.broken = truncateError as Error;
      }
      for (const group of failed) for (const entry of group.entries) entry.reject(error);
    }
    this.flush();
  }

  /** Resolves when nothing is queued or in flight. */
  idle(): Promise<void> {
    if (this.groupsInFlight.length === 0 && this.pending.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Switches appends to a new file once nothing is queued or in flight and
   * `busy` reports no work of the caller's (durable records still being
   * applied), and runs `atSwitch` in the same synchronous step, so the caller
   * can freeze state that matches the old files exactly. Returns the new
   * file's sequence.
   */
  async rotate(busy: () => Promise<void> | undefined, atSwitch: () => void): Promise<number> {
    // The new file is opened and its name made durable before the old one is let go: if either
    // fails, the log keeps appending to the old file and the checkpoint fails having changed nothing.
    // The directory fsync runs in libuv's pool while appends still go to the old file (on the main
    // thread it held every request 0.5–3 ms per checkpoint); only the switch below is synchronous.
    const sequence = this.sequence + 1;
    const path = walFilePath(this.dataDir, sequence);
    injectFault("wal.rotate", path);
    const fd = openWalFile(path);
    let syncFd: number | undefined;
    try {
      syncFd = this.fsyncEnabled ? openDurableWriter(path) : undefined;
      await fsyncDirectoryInPool(walDirectory(this.dataDir));
    } catch (error) {
      closeSync(fd);
      if (syncFd !== undefined) closeSync(syncFd);
      throw error;
    }
    for (;;) {
      if (this.groupsInFlight.length > 0 || this.pending.length > 0) {
        await this.idle();
        continue;
      }
      const work = busy();
      if (work === undefined) break;
      // A failed apply fails its commit; the rotation only waits for it to end.
      await work.catch(() => {});
    }
    for (const old of [this.fd, this.syncFd]) {
      if (old === undefined) continue;
      try {
        closeSync(old);
      } catch (error) {
        // Every byte of the old file that counts was fdatasynced already; a failed close loses nothing.
        log.error(`closing ${this.path}: ${(error as Error).message}`);
      }
    }
    this.fd = fd;
    this.syncFd = syncFd;
    this.path = path;
    this.sequence = sequence;
    this.position = this.writePosition = fstatSync(fd).size;
    // A partial group that could not be cut off stays behind in the old file, where recovery cuts it.
    this.broken = undefined;
    atSwitch();
    return sequence;
  }

  /** Paths of the WAL files with a sequence below `sequence`: their rows are sealed. */
  private sealedPaths(sequence: number): string[] {
    assert(sequence <= this.sequence);
    return listWalSequences(this.dataDir)
      .filter((existing) => existing < sequence)
      .map((existing) => walFilePath(this.dataDir, existing));
  }

  /** Deletes WAL files with a sequence below `sequence` (their rows are sealed); for start-up, before anything is served. */
  deleteBefore(sequence: number): void {
    for (const path of this.sealedPaths(sequence)) unlinkSync(path);
    fsyncDirectory(walDirectory(this.dataDir));
  }

  /**
   * deleteBefore in libuv's thread pool, for checkpoints while ingest runs:
   * unlinking a sealed WAL file of a few hundred megabytes (its extents freed)
   * and the directory fsync after it held the main thread 65–73 ms per
   * checkpoint under batch ingest, every request waiting. The checkpoint
   * still awaits it (the next one cannot rotate meanwhile); nothing else
   * depends on it: start-up skips the WAL files a checkpoint covers.
   */
  async deleteBeforeInPool(sequence: number): Promise<void> {
    for (const path of this.sealedPaths(sequence)) await unlink(path);
    await fsyncDirectoryInPool(walDirectory(this.dataDir));
  }

  async close(): Promise<void> {
    await this.idle();
    closeSync(this.fd);
    if (this.syncFd !== undefined) closeSync(this.syncFd);
  }
}

/** Cuts a WAL file to its valid prefix (start-up recovery). */
export function truncateWalFile(path: string, validBytes: number): void {
  const fd = openSync(path, "r+");
  try {
    ftruncateSync(fd, validBytes);
    fdatasyncSync(fd);
    recordSync(path, validBytes);
  } finally {
    closeSync(fd);
  }
}

