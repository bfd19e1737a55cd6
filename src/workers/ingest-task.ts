/**
 * An ingest task's work, as a worker runs it (bodies in, chunks and per-body
 * results out, and what of them it moves back), and the part of it the main
 * thread may run when every worker is held by a query (pool.ts).
 */
import { checkBatchApiKey, scanBodies, validateBodies, type BodyInput, type IngestBodyResult, type KeyedChunk } from "../ingest/event-validation.js";
import { bodyGzipFlag, bodyMsgpackFlag, bodySliceFields, type IngestTask, type IngestTaskResult, type StoredSingleEvent } from "./protocol.js";

function bodiesOf(task: IngestTask): BodyInput[] {
  const bytes = new Uint8Array(task.bodies);
  const slices = task.slices;
  const bodies: BodyInput[] = [];
  for (let at = 0; at < slices.length; at += bodySliceFields) {
    const flags = slices[at + 2];
    bodies.push({ bytes: bytes.subarray(slices[at], slices[at] + slices[at + 1]), gzip: (flags & bodyGzipFlag) !== 0, receivedAtMs: slices[at + 3], format: (flags & bodyMsgpackFlag) !== 0 ? "msgpack" : "json" });
  }
  return bodies;
}

/** Bodies of one task the main thread reads itself while queries hold every worker: at ~3 ns a byte, a few milliseconds. */
const scannedHereBytesMax = 1024 * 1024;

/**
 * The task read by the byte scanners alone, as the main thread may read it:
 * undefined when a body is gzipped (inflating is the client's choice of
 * cost), the task is large, a key is to be checked, or the scanner leaves a
 * body (the general parse's cost per byte is the client's choice too).
 */
export function scannedIngestTaskResult(task: IngestTask): IngestTaskResult | undefined {
  if (task.keyCheck !== undefined) return undefined;
  const bodies = bodiesOf(task);
  let bytes = 0;
  for (const body of bodies) {
    if (body.gzip) return undefined;
    bytes += body.bytes.length;
  }
  if (bytes > scannedHereBytesMax) return undefined;
  const { results, chunks } = scanBodies(bodies, task.shape);
  const taken: IngestBodyResult[] = [];
  for (const result of results) {
    if (result === undefined) return undefined;
    taken.push(result);
  }
  return { kind: "ingest", results: compactResults(task, taken, chunks), chunks };
}

export function ingestTaskResult(task: IngestTask): { result: IngestTaskResult; transferList: ArrayBuffer[] } {
  const bodies = bodiesOf(task);
  if (task.keyCheck !== undefined) {
    const checked = checkBatchApiKey(bodies[0].bytes, bodies[0].gzip, task.keyCheck.kind === "unknown" ? task.keyCheck.apiKey : undefined, bodies[0].format);
    if (checked.kind === "judged") return { result: { kind: "ingest", results: [checked.result], chunks: [] }, transferList: [] };
    const { plain } = checked;
    // An inflated body is moved back whole; copied when it shares its buffer (a body slab goes back to the main thread's pool).
    const plainBody = plain.buffer instanceof ArrayBuffer && plain.byteOffset === 0 && plain.byteLength === plain.buffer.byteLength ? plain.buffer : new Uint8Array(plain).buffer;
    return { result: { kind: "ingest", results: [], chunks: [], keyRead: { apiKey: checked.apiKey, plainBody } }, transferList: [plainBody] };
  }
  const { results, chunks } = validateBodies(bodies, task.shape);
  // Chunks are transferred, not cloned: the main thread writes them to the WAL as they are.
  return { result: { kind: "ingest", results: compactResults(task, results, chunks), chunks }, transferList: chunks.map((keyed) => keyed.chunk) };
}

/** A single-event task's results, each event stored with nothing to report as its bare chunk index. */
function compactResults(task: IngestTask, results: IngestBodyResult[], chunks: readonly KeyedChunk[]): IngestTaskResult["results"] {
  return task.shape === "single" ? results.map((result) => storedSingleEvent(result, chunks) ?? result) : results;
}

/** The chunk index when `result` says exactly what a StoredSingleEvent says; undefined otherwise. */
function storedSingleEvent(result: IngestBodyResult, chunks: readonly KeyedChunk[]): StoredSingleEvent | undefined {
  if (result.kind !== "parsed" || result.error !== undefined || result.errors.length > 0 || result.acceptedCount !== 1 || result.chunkIndex < 0) return undefined;
  return result.apiKey === chunks[result.chunkIndex].apiKey ? result.chunkIndex : undefined;
}
