/**
 * Worker entry (Piscina): one switch over the task union. Workers parse and
 * validate ingest bodies, seal and load segments, and run query kernels; they
 * hold no state of their own except caches of decoded sealed segments.
 */
import { Piscina } from "piscina";
import { validateBodies } from "../ingest/event-validation.js";
import { runQueryTask } from "../query/query-worker.js";
import { loadSegment, sealSegment } from "../storage/segment-format.js";
import { mergeSegments } from "../storage/segment-merge.js";
import { unpackPropertyEntries } from "../storage/property-transfer.js";
import { parseQueryBody } from "../query/schemas.js";
import { assertNever, type IngestTask, type SealTask, type Task, type TaskResult } from "./protocol.js";

function runIngest(task: IngestTask): TaskResult {
  const bytes = new Uint8Array(task.bodies);
  const bodies = task.slices.map((slice) => ({
    bytes: bytes.subarray(slice.offset, slice.offset + slice.length),
    gzip: slice.gzip,
    receivedAtMs: slice.receivedAtMs,
  }));
  const { results, chunks } = validateBodies(bodies, task.shape);
  // Chunks are transferred, not cloned: the main thread writes them to the WAL as they are.
  const result: TaskResult = { kind: "ingest", results, chunks };
  const transferList = chunks.map((keyed) => keyed.chunk);
  // Piscina's transferable wrapper: the value is posted with its chunks moved, not cloned.
  return Piscina.move({ [Piscina.transferableSymbol]: transferList, [Piscina.valueSymbol]: result } as never) as unknown as TaskResult;
}

function runSeal(task: SealTask) {
  const rows = task.rowCount;
  return sealSegment({
    directory: task.directory,
    dayStartMs: task.dayStartMs,
    rowCount: rows,
    timeOffsetMs: new Uint32Array(task.time, 0, rows),
    userIds: new Uint32Array(task.user, 0, rows),
    eventIds: new Uint32Array(task.event, 0, rows),
    uuidPresent: new Uint8Array(task.uuidPresent, 0, rows),
    uuidBytes: new Uint8Array(task.uuid, 0, rows * 16),
    properties: unpackPropertyEntries(task.properties),
    fsync: task.fsync,
  });
}

export default function run(task: Task): TaskResult {
  switch (task.kind) {
    case "ingest":
      return runIngest(task);
    case "seal":
      return runSeal(task);
    case "merge":
      return mergeSegments(task);
    case "load-segment":
      return loadSegment(task.directory);
    case "query":
      return runQueryTask(task);
    case "parse-query":
      return { kind: "parse-query", result: parseQueryBody(task.queryKind, new Uint8Array(task.body)) };
    default:
      return assertNever(task);
  }
}
