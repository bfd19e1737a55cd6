/**
 * The only place that knows Piscina. One pool runs every kind of task; its
 * queue is bounded (STYLE rule 7), and a full queue is reported to callers as
 * `PoolSaturatedError`, which ingest answers with 503 + Retry-After.
 */
import { Piscina } from "piscina";
import { limits } from "../config/limits.js";
import type { BarrierTask, BarrierTaskResult, IngestTask, IngestTaskResult, LoadSegmentTask, MergeTask, SealTask } from "./protocol.js";
import type { ParseQueryTask, ParseQueryTaskResult, QueryTask, QueryTaskResult } from "../query/query-protocol.js";
import type { LoadSegmentResult } from "../storage/segment-format.js";

export class PoolSaturatedError extends Error {}

export class WorkerPool {
  private readonly piscina: Piscina;

  constructor(readonly threadCount: number) {
    this.piscina = new Piscina({
      filename: new URL("./worker.js", import.meta.url).href,
      minThreads: threadCount,
      maxThreads: threadCount,
      // A worker holds up to three short tasks (ingest, queries): the next one is
      // already in its port when one ends. With one, a worker sat idle from the
      // end of a task until the main thread had taken its result and posted the
      // next — ~3–5 ms of every ~3 ms batch under load, since the main thread is
      // busy committing. Long tasks (seal, merge, load) run alone: see `runAlone`.
      concurrentTasksPerWorker: 3,
      // The queue bound is applied to ingest only (see `ingest`): a checkpoint's seal
      // tasks and queries must never be refused because ingest filled the queue.
      idleTimeout: Number.MAX_SAFE_INTEGER,
      // Workers must not keep a stopping process alive, and must not die of a big sort.
      resourceLimits: { maxOldGenerationSizeMb: 16 * 1024 },
    });
  }

  get queueSize(): number {
    return this.piscina.queueSize;
  }

  get saturated(): boolean {
    return this.piscina.queueSize >= limits.workerQueueTasksMax;
  }

  private async run<T>(task: unknown, transferList?: ArrayBuffer[]): Promise<T> {
    return (await this.piscina.run(task, transferList ? { transferList } : undefined)) as T;
  }

  /**
   * Runs a long task (hundreds of milliseconds: sealing 2 M rows takes ~1 s)
   * alone on a worker. Piscina's balancer gives a task that carries an abort
   * signal an idle worker and queues nothing behind it; a batch queued behind
   * a seal would wait out the whole seal. The signal is never aborted:
   * aborting would terminate the worker mid-write.
   */
  private async runAlone<T>(task: unknown, transferList?: ArrayBuffer[]): Promise<T> {
    const signal = new AbortController().signal;
    return (await this.piscina.run(task, transferList ? { transferList, signal } : { signal })) as T;
  }

  /**
   * Resolves once every worker has started: has loaded its modules, roaring's
   * native addon among them. A worker terminated while it loads that addon
   * aborts the whole process (a V8 fatal error inside the addon's
   * registration), so the server is announced, and the pool closed, only after
   * this. `threadCount` barrier tasks each hold their worker until all have
   * started; a task that carries an abort signal is given an idle worker of
   * its own (see runAlone), so they take every worker. Rejects when not every
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

  ingest(task: IngestTask): Promise<IngestTaskResult> {
    if (this.saturated) return Promise.reject(new PoolSaturatedError("worker queue is full"));
    return this.run(task, [task.bodies, task.slices.buffer]);
  }

  seal(task: SealTask): Promise<LoadSegmentResult> {
    // Every array of the message was made for it: moved, not copied (a day of 3 M keys copied 48 MB).
    const { packed, keyIds, entryCounts, textCounts, textEnds } = task.properties;
    return this.runAlone(task, [packed, keyIds.buffer, entryCounts.buffer, textCounts.buffer, textEnds.buffer]);
  }

  merge(task: MergeTask): Promise<LoadSegmentResult> {
    return this.runAlone(task);
  }

  load(task: LoadSegmentTask): Promise<LoadSegmentResult> {
    return this.runAlone(task);
  }

  query(task: QueryTask): Promise<QueryTaskResult> {
    return this.run(task);
  }

  parseQuery(task: ParseQueryTask): Promise<ParseQueryTaskResult> {
    return this.run(task, [task.body]);
  }

  async close(): Promise<void> {
    await this.piscina.close({ force: false });
  }
}
