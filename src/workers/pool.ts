/**
 * The only place that knows Piscina. One pool runs every kind of task; its
 * queue is bounded (STYLE rule 7), and a full queue is reported to callers as
 * `PoolSaturatedError`, which ingest answers with 503 + Retry-After.
 */
import { strict as assert } from "node:assert";
import { Piscina } from "piscina";
import { limits, workerSegmentCacheBytesMax } from "../config/limits.js";
import { bodySliceFields, type Task, type TimedTask, type WorkerSettings, type BarrierTask, type BarrierTaskResult, type IngestTask, type IngestTaskResult, type LoadSegmentTask, type MergeTask, type SealTask } from "./protocol.js";
import type { ParseQueryTask, ParseQueryTaskResult, QueryTask, QueryTaskResult, SegmentsMissingResult } from "../query/query-protocol.js";
import { SegmentPostings } from "../query/segment-posting.js";
import { scannedIngestTaskResult } from "./ingest-task.js";
import type { SegmentDescriptor } from "../storage/segment-descriptor.js";
import type { LoadSegmentResult } from "../storage/segment-layout.js";

export class PoolSaturatedError extends Error {}

/** A task ran past its time limit: its worker was terminated and replaced. */
export class PoolTaskTimeoutError extends Error {}

/** Queries holding every worker this long make ingest run on the main thread (see WorkerPool.ingest). */
const queriesHoldWorkersMs = 100;

export class WorkerPool {
  private readonly piscina: Piscina;
  /** Bytes of ingest bodies posted to the pool whose results are not back yet. */
  private ingestBytesQueued = 0;
  /** Seal, merge and load tasks running or queued, so that shutdown can abandon them at its deadline. */
  private readonly storeTasks = new Set<AbortController>();
  /** Set by abandonStoreTasksAt: no store task may outlive it. */
  private storeTaskDeadlineMs = Number.POSITIVE_INFINITY;
  private readonly segmentPostings: SegmentPostings;

  constructor(readonly threadCount: number) {
    this.segmentPostings = new SegmentPostings(workerSegmentCacheBytesMax(threadCount));
    this.piscina = new Piscina({
      filename: new URL("./worker.js", import.meta.url).href,
      minThreads: threadCount,
      maxThreads: threadCount,
      // A worker holds up to three short tasks (ingest, queries): the next one is
      // already in its port when one ends. With one, a worker sat idle from the
      // end of a task until the main thread had taken its result and posted the
      // next — ~3–5 ms of every ~3 ms batch under load, since the main thread is
      // busy committing. Long tasks (seal, merge, load) and queries run alone: see `runLimited`.
      concurrentTasksPerWorker: 3,
      // The queue bound is applied to ingest only (see `ingest`): a checkpoint's seal
      // tasks and queries must never be refused because ingest filled the queue.
      idleTimeout: Number.MAX_SAFE_INTEGER,
      workerData: { segmentCacheBytesMax: workerSegmentCacheBytesMax(threadCount) } satisfies WorkerSettings,
      // Workers must not keep a stopping process alive, and must not die of a big sort.
      resourceLimits: { maxOldGenerationSizeMb: 16 * 1024 },
    });
  }

  /**
   * Threads a query may split over: those not held by a seal, merge or load
   * (running or queued). A shard that waits for such a thread waits out the
   * whole store task, which is slower than its share of the work run in turn.
   */
  get queryThreadCount(): number {
    return Math.max(1, this.threadCount - this.storeTasks.size);
  }

  /** Seals, merges and loads running, queued, or abandoned at a time limit: tasks whose threads may be blocked in the disk. */
  get storeTasksInFlight(): number {
    return this.storeTasks.size + this.storeTasksAbandoned;
  }

  get queueSize(): number {
    return this.piscina.queueSize;
  }

  get saturated(): boolean {
    return this.piscina.queueSize >= limits.workerQueueTasksMax || this.ingestBytesQueued >= limits.workerQueueBytesMax;
  }

  private async run<T>(task: unknown, transferList?: ArrayBuffer[]): Promise<T> {
    return (await this.piscina.run(task, transferList ? { transferList } : undefined)) as T;
  }

  /**
   * Runs a task with a limit on its running time (the wait in the queue is
   * counted only with `countQueued`: see TimedTask), alone on a worker: Piscina's balancer gives
   * a task that carries an abort signal an idle worker and queues nothing
   * behind it, so aborting it — which terminates its worker, and Piscina starts
   * another — takes no other task down. Long tasks want that anyway: a batch
   * queued behind a seal would wait out the whole seal.
   */
  private async runLimited<T>(task: Task, timeoutMs: number, what: string, transferList?: ArrayBuffer[], controller = new AbortController(), countQueued = false): Promise<T> {
    const timed: TimedTask = { kind: "timed", task, startedAtMs: new Float64Array(new SharedArrayBuffer(8)) };
    const submittedAtMs = Date.now();
    // Armed for the whole limit, then again for what is left of it once the task has started (or, countQueued, since it was posted).
    let timer: NodeJS.Timeout;
    const check = () => {
      const fromMs = countQueued ? submittedAtMs : timed.startedAtMs[0];
      const remainingMs = fromMs === 0 ? timeoutMs : fromMs + timeoutMs - Date.now();
      if (remainingMs <= 0) return controller.abort();
      timer = setTimeout(check, remainingMs);
      timer.unref();
    };
    check();
    try {
      const options = transferList ? { transferList, signal: controller.signal } : { signal: controller.signal };
      return (await this.piscina.run(timed, options)) as T;
    } catch (error) {
      if (controller.signal.aborted) throw new PoolTaskTimeoutError(`${what} ran longer than ${Math.max(0, timeoutMs)} ms`);
      throw error;
    } finally {
      clearTimeout(timer!);
    }
  }

  /** As runLimited, never aborted: a worker terminated while it loads roaring's addon aborts the process (see ready). */
  private async runAlone<T>(task: unknown): Promise<T> {
    return (await this.piscina.run(task, { signal: new AbortController().signal })) as T;
  }

  /** A seal, merge or load: bounded by storeTaskTimeoutMs, and by the shutdown deadline once one is set. */
  private async runStoreTask<T>(task: SealTask | MergeTask | LoadSegmentTask, transferList?: ArrayBuffer[]): Promise<T> {
    const controller = new AbortController();
    this.storeTasks.add(controller);
    try {
      const timeoutMs = Math.min(limits.storeTaskTimeoutMs, this.storeTaskDeadlineMs - Date.now());
      return await this.runLimited<T>(task, timeoutMs, `a ${task.kind} task`, transferList, controller);
    } finally {
      this.storeTasks.delete(controller);
      // Its worker was told to stop, but a thread blocked in a read of a hung disk stops only when the read returns.
      if (controller.signal.aborted) this.storeTasksAbandoned++;
    }
  }

  /** Store tasks stopped at their time limit or the shutdown deadline, whose threads may still be blocked in the disk. */
  private storeTasksAbandoned = 0;

  /**
   * Shutdown: every seal, merge and load still running at `deadlineMs` is
   * abandoned (its worker terminated; a half-written segment is a tmp_
   * directory that start-up removes), so a hung disk cannot hold the process
   * past SPEC's 10 s. A checkpoint abandoned so loses nothing: its rows stay
   * in the WAL.
   */
  abandonStoreTasksAt(deadlineMs: number): void {
    this.storeTaskDeadlineMs = deadlineMs;
    setTimeout(() => {
      for (const controller of this.storeTasks) controller.abort();
    }, Math.max(0, deadlineMs - Date.now())).unref();
  }

  /**
   * Resolves once every worker has started: has loaded its modules, roaring's
   * native addon among them. A worker terminated while it loads that addon
   * aborts the whole process (a V8 fatal error inside the addon's
   * registration), so the server is announced, and the pool closed, only after
   * this. `threadCount` barrier tasks each hold their worker until all have
   * started; a task that carries an abort signal is given an idle worker of
   * its own (see runLimited), so they take every worker. Rejects when not every
   * worker started within `timeoutMs`.
   */
  async ready(timeoutMs: number): Promise<void> {
    const started = new Int32Array(new SharedArrayBuffer(4));
    const deadlineMs = Date.now() + timeoutMs;
    const task: BarrierTask = { kind: "barrier", started, workers: this.threadCount, deadlineMs };
    const answers = await Promise.all(Array.from({ length: this.threadCount }, () => this.runAlone<BarrierTaskResult>(task)));
    const fewest = Math.min(...answers.map((answer) => answer.started));
    if (fewest < this.threadCount) throw new Error(`only ${fewest} of ${this.threadCount} workers started within ${timeoutMs} ms`);
  }

  async ingest(task: IngestTask): Promise<IngestTaskResult> {
    if (this.saturated) throw new PoolSaturatedError("worker queue is full");
    // Every worker held by a query for a while (queries run alone on a worker): ingest waited out the slowest
    // of them (a batch waited 60 s behind four long queries), so the main thread reads what its byte scanners take.
    if (this.queriesHoldEveryWorker()) {
      const scanned = scannedIngestTaskResult(task);
      if (scanned !== undefined) return scanned;
    }
    // The bodies' own bytes: a body slab is larger than the body it holds.
    let bytes = 0;
    for (let at = 1; at < task.slices.length; at += bodySliceFields) bytes += task.slices[at];
    this.ingestBytesQueued += bytes;
    try {
      return await this.run<IngestTaskResult>(task, task.bodies instanceof SharedArrayBuffer ? [task.slices.buffer] : [task.bodies, task.slices.buffer]);
    } finally {
      this.ingestBytesQueued -= bytes;
    }
  }

  seal(task: SealTask): Promise<LoadSegmentResult> {
    // Every array of the message was made for it: moved, not copied (a day of 3 M keys copied 48 MB).
    const { packed, keyIds, entryCounts, textCounts, textEnds } = task.properties;
    return this.runStoreTask(task, [packed, keyIds.buffer, entryCounts.buffer, textCounts.buffer, textEnds.buffer]);
  }

  merge(task: MergeTask): Promise<LoadSegmentResult> {
    return this.runStoreTask(task);
  }

  load(task: LoadSegmentTask): Promise<LoadSegmentResult> {
    return this.runStoreTask(task);
  }

  /**
   * Rejects with PoolTaskTimeoutError past EVENTIDE_QUERY_TASK_TIMEOUT_MS from its post (time queued
   * included: behind other long queries a client would otherwise wait for all of them), each post timed alone.
   * Sealed segments posted before go by key (segment-posting.ts); a worker that lacks one gets the task again whole.
   */
  async query(task: QueryTask & { segments: SegmentDescriptor[] }): Promise<QueryTaskResult> {
    const posted = { atMs: Date.now() };
    this.queriesInFlight.add(posted);
    try {
      return await this.queryTask(task);
    } finally {
      this.queriesInFlight.delete(posted);
    }
  }

  /** Query tasks posted and not answered, with when they were posted (in order: a Set iterates in insertion order). */
  private readonly queriesInFlight = new Set<{ atMs: number }>();
  /** Whether queries have held every worker for longer than a query of a dashboard takes. */
  private queriesHoldEveryWorker(): boolean {
    if (this.queriesInFlight.size < this.threadCount) return false;
    let held = 0;
    const sinceMs = Date.now() - queriesHoldWorkersMs;
    for (const posted of this.queriesInFlight) if (posted.atMs <= sinceMs) held++;
    return held >= this.threadCount;
  }

  private async queryTask(task: QueryTask & { segments: SegmentDescriptor[] }): Promise<QueryTaskResult> {
    const compact: QueryTask = { ...task, segments: this.segmentPostings.compact(task.segments) };
    const first = await this.runLimited<QueryTaskResult | SegmentsMissingResult>(compact, limits.queryTaskTimeoutMs, "a query task", undefined, undefined, true);
    if (first.kind === "query") {
      this.segmentPostings.notePosted(compact.segments);
      return first;
    }
    const whole = await this.runLimited<QueryTaskResult | SegmentsMissingResult>(task, limits.queryTaskTimeoutMs, "a query task", undefined, undefined, true);
    assert(whole.kind === "query", "a task posted with every segment whole lacks none");
    this.segmentPostings.notePosted(task.segments);
    // The worker that lacked them may not be the one that took them now: the next task posts them whole again.
    this.segmentPostings.forget(task.segments, first.keys);
    return whole;
  }

  parseQuery(task: ParseQueryTask): Promise<ParseQueryTaskResult> {
    return this.run(task, [task.body]);
  }

  async close(): Promise<void> {
    await this.piscina.close({ force: false });
  }
}
