/**
 * An ingest task's work, as a worker runs it and as the main thread runs it
 * when every worker is held by a query (pool.ts): bodies in, chunks and
 * per-body results out, and what of them a worker would move back.
 */
import { checkBatchApiKey, validateBodies, type BodyInput, type IngestBodyResult, type KeyedChunk } from "../ingest/event-validation.js";
import { bodyGzipFlag, bodyMsgpackFlag, bodySliceFields, type IngestTask, type IngestTaskResult, type StoredSingleEvent } from "./protocol.js";

export function ingestTaskResult(task: IngestTask): { result: IngestTaskResult; transferList: ArrayBuffer[] } {
  const bytes = new Uint8Array(task.bodies);
  const slices = task.slices;
  const bodies: BodyInput[] = [];
  for (let at = 0; at < slices.length; at += bodySliceFields) {
    const flags = slices[at + 2];
    bodies.push({ bytes: bytes.subarray(slices[at], slices[at] + slices[at + 1]), gzip: (flags & bodyGzipFlag) !== 0, receivedAtMs: slices[at + 3], format: (flags & bodyMsgpackFlag) !== 0 ? "msgpack" : "json" });
  }
  if (task.keyCheck !== undefined) {
    const checked = checkBatchApiKey(bodies[0].bytes, bodies[0].gzip, task.keyCheck.kind === "unknown" ? task.keyCheck.apiKey : undefined, bodies[0].format);
    if (checked.kind === "judged") return { result: { kind: "ingest", results: [checked.result], chunks: [] }, transferList: [] };
    const { plain } = checked;
    // An inflated body is moved back whole; copied when it shares its buffer (a body slab goes back to the main thread's pool).
    const plainBody = plain.buffer instanceof ArrayBuffer && plain.byteOffset === 0 && plain.byteLength === plain.buffer.byteLength ? plain.buffer : new Uint8Array(plain).buffer;
    return { result: { kind: "ingest", results: [], chunks: [], keyRead: { apiKey: checked.apiKey, plainBody } }, transferList: [plainBody] };
  }
  const { results, chunks } = validateBodies(bodies, task.shape);
  const compact = task.shape === "single" ? results.map((result) => storedSingleEvent(result, chunks) ?? result) : results;
  // Chunks are transferred, not cloned: the main thread writes them to the WAL as they are.
  return { result: { kind: "ingest", results: compact, chunks }, transferList: chunks.map((keyed) => keyed.chunk) };
}

/** The chunk index when `result` says exactly what a StoredSingleEvent says; undefined otherwise. */
function storedSingleEvent(result: IngestBodyResult, chunks: readonly KeyedChunk[]): StoredSingleEvent | undefined {
  if (result.kind !== "parsed" || result.error !== undefined || result.errors.length > 0 || result.acceptedCount !== 1 || result.chunkIndex < 0) return undefined;
  return result.apiKey === chunks[result.chunkIndex].apiKey ? result.chunkIndex : undefined;
}
