/**
 * Worker entry (Piscina): one switch over the task union. Workers parse and
 * validate ingest bodies, seal and load segments, and run query kernels; they
 * hold no state of their own except caches of decoded sealed segments.
 */
import { readlinkSync } from "node:fs";
import { getPriority, setPriority } from "node:os";
import { Piscina } from "piscina";
import { limits } from "../config/limits.js";
import { runQueryTask } from "../query/query-worker.js";
import { ingestTaskResult } from "./ingest-task.js";
import { setSealedViewBytesMax } from "../query/segment-views.js";
import { loadSegment } from "../storage/segment-reader.js";
import { SegmentCorruptError, segmentDamageMarker } from "../storage/segment-layout.js";
import { sealSegment } from "../storage/segment-writer.js";
import { mergeSegments } from "../storage/segment-merge.js";
import { unpackPropertyEntries } from "../storage/property-transfer.js";
import { parseQueryBody } from "../query/schemas.js";
import type { WorkerSettings, BarrierTask, IngestTask, SealTask, Task, TaskResult } from "./protocol.js";
import { assertNever } from "../errors.js";
import { log } from "../log.js";

/**
 * Runs this worker thread `steps` nice steps below the main thread (Linux
 * gives each thread its own nice value). The main thread is ingest's one
 * serial stage, and every task it posts wakes a sleeping worker: at equal
 * priority the scheduler often ran the woken worker at once on the main
 * thread's core, so posting a task held the main thread 120–180 µs at 256
 * single-event connections (30–130 µs under other loads); lowered, 7–35 µs.
 * Lower, a worker takes the core when the main thread waits, not the moment
 * it is woken.
 */
function lowerThreadPriority(steps: number): void {
  if (steps === 0 || process.platform !== "linux") return;
  try {
    // "<pid>/task/<tid>": setpriority on a thread id changes that thread alone.
    const threadId = Number(readlinkSync("/proc/thread-self").split("/").pop());
    setPriority(threadId, Math.min(19, getPriority(threadId) + steps));
  } catch (error) {
    log.warn(`worker priority unchanged: ${(error as Error).message}`);
  }
}

lowerThreadPriority(limits.workerNiceSteps);
setSealedViewBytesMax((Piscina.workerData as WorkerSettings).segmentCacheBytesMax);

function runIngest(task: IngestTask): TaskResult {
  const { result, transferList } = ingestTaskResult(task);
  // Piscina's transferable wrapper: the value is posted with its chunks (or the inflated body) moved, not cloned.
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
    // A segment whose rows have no uuid sends no uuid columns: every row reads as without one.
    uuidPresent: task.uuidPresent === undefined ? new Uint8Array(rows) : new Uint8Array(task.uuidPresent, 0, rows),
    uuidBytes: task.uuid === undefined ? new Uint8Array(0) : new Uint8Array(task.uuid, 0, rows * 16),
    properties: unpackPropertyEntries(task.properties),
    fsync: task.fsync,
  });
}

function runBarrier({ started, workers, deadlineMs }: BarrierTask): TaskResult {
  Atomics.add(started, 0, 1);
  Atomics.notify(started, 0);
  for (;;) {
    const count = Atomics.load(started, 0);
    const remainingMs = deadlineMs - Date.now();
    if (count >= workers || remainingMs <= 0) return { kind: "barrier", started: count };
    Atomics.wait(started, 0, count, remainingMs);
  }
}

export default function run(task: Task): TaskResult {
  switch (task.kind) {
    case "ingest":
      return runIngest(task);
    case "seal":
      return runSeal(task);
    case "merge":
      try {
        return mergeSegments(task);
      } catch (error) {
        // A victim's files that fail their checks: marked as a load's are, so the deletion that asked says damage, not a bare error.
        if (error instanceof SegmentCorruptError) throw new Error(`${segmentDamageMarker}${error.message}`);
        throw error;
      }
    case "load-segment":
      try {
        return loadSegment(task.directory);
      } catch (error) {
        // Any failure here is the segment's files' (a bad checksum, EIO): marked so, since an error crosses threads as its message.
        throw new Error(`${segmentDamageMarker}${(error as Error).message}`);
      }
    case "query":
      return runQueryTask(task);
    case "parse-query":
      return { kind: "parse-query", result: parseQueryBody(task.queryKind, new Uint8Array(task.body)) };
    case "barrier":
      return runBarrier(task);
    case "timed":
      task.startedAtMs[0] = Date.now();
      return run(task.task);
    default:
      return assertNever(task);
  }
}
