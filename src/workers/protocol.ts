/**
 * The one typed thread protocol (STYLE rule 8): every task sent to the Piscina
 * pool and every result it returns is a `kind`-tagged union declared here.
 * Request bodies and encoded chunks cross threads as transferred ArrayBuffers;
 * segment columns as SharedArrayBuffers; nothing large is structured-cloned.
 */
import type { IngestBodyResult, IngestShape, KeyedChunk } from "../ingest/event-validation.js";
import type { ParseQueryTask, ParseQueryTaskResult, QueryTask, QueryTaskResult, SegmentsMissingResult } from "../query/query-protocol.js";
import type { LoadSegmentResult } from "../storage/segment-layout.js";
import type { PropertyEntriesMessage } from "../storage/property-transfer.js";

/**
 * The bodies of an ingest task inside its byte buffer, four numbers each:
 * offset, length, flags (bodyGzipFlag, bodyMsgpackFlag), and the server time at receipt for events
 * without a timestamp (SPEC §2). One typed array rather than an object per
 * body: a task gathers hundreds of single events, and the main thread, the
 * single-event path's bottleneck, serializes what it posts.
 */
export const bodySliceFields = 4;
/** Flags of a body slice: its bytes are gzip'd; they are msgpack, not JSON. */
export const bodyGzipFlag = 1;
export const bodyMsgpackFlag = 2;

export interface IngestTask {
  kind: "ingest";
  shape: IngestShape;
  /** The bodies of one request, or of many single-event requests gathered together: transferred, or a shared slab (body-slabs.ts) the main thread reuses once the task has answered. */
  bodies: ArrayBuffer | SharedArrayBuffer;
  /** Transferred: bodySliceFields numbers per body (see above). */
  slices: Float64Array<ArrayBuffer>;
  /** Batch: see BatchKeyCheck; absent when the body opens with an apiKey the registry knows. */
  keyCheck?: BatchKeyCheck;
}

/**
 * What the main thread knows of a batch's apiKey before a worker parses it: a
 * key it opens with that the registry does not know, or none read (a gzip body
 * that would not inflate a little, a key written later or with escapes). The
 * worker then checks the body's syntax and reads its apiKey before any parse,
 * so a body with an unknown key is refused for the cost of that alone.
 */
export type BatchKeyCheck = { kind: "unknown"; apiKey: string } | { kind: "unread" };

/**
 * A single event stored in chunk `n` with nothing else to report (no error, one
 * accepted event, its apiKey the chunk's): the common answer, sent as the bare
 * chunk index rather than as an object with a copy of the apiKey.
 */
export type StoredSingleEvent = number;

export interface IngestTaskResult {
  kind: "ingest";
  results: Array<IngestBodyResult | StoredSingleEvent>;
  chunks: KeyedChunk[];
  /**
   * A checked batch (keyCheck) whose apiKey the main thread has yet to judge:
   * results and chunks are empty, and the body comes back inflated
   * (transferred) to be posted again once the key is known.
   */
  keyRead?: { apiKey: string; plainBody: ArrayBuffer };
}

export interface SealTask {
  kind: "seal";
  directory: string;
  dayStartMs: number;
  rowCount: number;
  time: SharedArrayBuffer;
  user: SharedArrayBuffer;
  event: SharedArrayBuffer;
  /** Both absent when no row of the segment has a uuid. */
  uuidPresent: SharedArrayBuffer | undefined;
  uuid: SharedArrayBuffer | undefined;
  properties: PropertyEntriesMessage;
  fsync: boolean;
}

export interface MergeTask {
  kind: "merge";
  directories: string[];
  target: string;
  dayStartMs: number;
  fsync: boolean;
  /** Users whose rows are left out (user deletion). */
  dropUserIds?: readonly number[];
}

export interface LoadSegmentTask {
  kind: "load-segment";
  directory: string;
}

/**
 * Holds its worker until `workers` such tasks have started, or `deadlineMs`
 * (Date.now()) has passed; answers how many had started (WorkerPool.ready).
 */
export interface BarrierTask {
  kind: "barrier";
  /** One Int32: how many barrier tasks have started. */
  started: Int32Array;
  workers: number;
  deadlineMs: number;
}

export interface BarrierTaskResult {
  kind: "barrier";
  started: number;
}

/**
 * A task with a time limit (WorkerPool.runLimited): the worker writes the
 * time it starts `task` into `startedAtMs[0]`, so the limit counts running
 * time only, not the wait in the queue (a query queued behind a replaced
 * worker's start-up is not the query's fault).
 */
export interface TimedTask {
  kind: "timed";
  task: Task;
  startedAtMs: Float64Array<SharedArrayBuffer>;
}

/** Given to every worker when it starts (Piscina's workerData). */
export interface WorkerSettings {
  /** This worker's share of the segment cache budget. */
  segmentCacheBytesMax: number;
}

export type Task = IngestTask | SealTask | MergeTask | LoadSegmentTask | QueryTask | ParseQueryTask | BarrierTask | TimedTask;
export type TaskResult = IngestTaskResult | LoadSegmentResult | QueryTaskResult | SegmentsMissingResult | ParseQueryTaskResult | BarrierTaskResult;

