/**
 * The one typed thread protocol (STYLE rule 8): every task sent to the Piscina
 * pool and every result it returns is a `kind`-tagged union declared here.
 * Request bodies and encoded chunks cross threads as transferred ArrayBuffers;
 * segment columns as SharedArrayBuffers; nothing large is structured-cloned.
 */
import type { IngestBodyResult, IngestShape, KeyedChunk } from "../ingest/event-validation.js";
import type { ParseQueryTask, ParseQueryTaskResult, QueryTask, QueryTaskResult } from "../query/query-protocol.js";
import type { LoadSegmentResult } from "../storage/segment-format.js";
import type { PropertyEntriesMessage } from "../storage/property-transfer.js";

/** One HTTP body inside a task's shared byte buffer. */
export interface BodySlice {
  offset: number;
  length: number;
  gzip: boolean;
  /** Server time at receipt, for events without a timestamp (SPEC §2). */
  receivedAtMs: number;
}

export interface IngestTask {
  kind: "ingest";
  shape: IngestShape;
  /** Transferred: the bodies of one request, or of many single-event requests gathered together. */
  bodies: ArrayBuffer;
  slices: BodySlice[];
}

export interface IngestTaskResult {
  kind: "ingest";
  results: IngestBodyResult[];
  chunks: KeyedChunk[];
}

export interface SealTask {
  kind: "seal";
  directory: string;
  dayStartMs: number;
  rowCount: number;
  time: SharedArrayBuffer;
  user: SharedArrayBuffer;
  event: SharedArrayBuffer;
  uuidPresent: SharedArrayBuffer;
  uuid: SharedArrayBuffer;
  properties: PropertyEntriesMessage;
  fsync: boolean;
}

export interface MergeTask {
  kind: "merge";
  directories: string[];
  target: string;
  dayStartMs: number;
  fsync: boolean;
}

export interface LoadSegmentTask {
  kind: "load-segment";
  directory: string;
}

export type Task = IngestTask | SealTask | MergeTask | LoadSegmentTask | QueryTask | ParseQueryTask;
export type TaskResult = IngestTaskResult | LoadSegmentResult | QueryTaskResult | ParseQueryTaskResult;

export function assertNever(value: never): never {
  throw new Error(`unhandled variant: ${JSON.stringify(value)}`);
}
