/**
 * Eventide's process: config → the data directory's lock → store recovery →
 * credentials → worker pool → listeners → the first workspace, announced once
 * both listeners are bound → ready. Prints one JSON line per milestone on
 * stdout (SPEC §0) and shuts down cleanly on SIGTERM/SIGINT: stop accepting,
 * answer what is in flight, seal and fsync, exit 0. main.ts loads it.
 */
import { CredentialStore } from "./auth/credential-store.js";
import { holdServerLock } from "./storage/lock-file.js";
import { loadConfig } from "./config/config.js";
import { limits } from "./config/limits.js";
import { startHttp } from "./http/server.js";
import { IngestService } from "./ingest/ingest-service.js";
import { QueryService } from "./query/query-service.js";
import { LiveQueries } from "./query/live-queries.js";
import { serverLockPath } from "./storage/paths.js";
import { makeDataDirectoryPrivate } from "./storage/files.js";
import { Store } from "./storage/store.js";
import { WorkerPool } from "./workers/pool.js";
import { errorMessage, log } from "./log.js";
import { startServiceMetrics } from "./metrics.js";

/** Workers start in well under a second; this only bounds a start-up that would otherwise hang. */
const workerStartTimeoutMs = 60_000;

function printLine(value: object): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/** Set once a signal arrived; start-up checks it between steps and the handler runs once ready. */
let stopRequested: string | undefined;
let stopNow: ((signal: string) => void) | undefined;

// Registered before anything is printed: a signal that arrives during start-up
// must still end in an orderly stop and exit 0, not the default kill.
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.on(signal, () => {
    if (stopNow) stopNow(signal);
    else stopRequested ??= signal;
  });
}

export async function serve(): Promise<void> {
  const config = loadConfig();
  const startedAtMs = Date.now();
  makeDataDirectoryPrivate(config.dataDir);
  const lockPath = serverLockPath(config.dataDir);
  const releaseDataDir = await holdServerLock(
    config.dataDir,
    lockPath,
    (holder) => new Error(`the data directory ${config.dataDir} is in use by ${holder}; stop that server first (if none is running, delete ${lockPath})`),
  );
  const store = Store.open(config.dataDir, config.fsync);
  const credentials = await CredentialStore.open(config.dataDir);

  const pool = new WorkerPool(config.workerCount);
  // Asked first, so its tasks are first in the queue: behind a merge that start-up resumes, the
  // announcement would wait out the merge. A worker still loading roaring when the pool closes
  // aborts the process, so the server is announced only once all have started.
  const workersStarted = pool.ready(workerStartTimeoutMs);
  store.start({
    seal: async (segment, directory) =>
      pool.seal({
        kind: "seal",
        directory,
        dayStartMs: segment.dayStartMs,
        rowCount: segment.rowCount,
        time: segment.time.buffer,
        user: segment.user.buffer,
        event: segment.event.buffer,
        uuidPresent: segment.uuidPresent.buffer,
        uuid: segment.uuid.buffer,
        properties: await segment.properties.pack(),
        fsync: config.fsync,
      }),
    load: (directory) => pool.load({ kind: "load-segment", directory }),
    merge: (directories, target, dayStartMs) => pool.merge({ kind: "merge", directories, target, dayStartMs, fsync: config.fsync }),
  });
  await workersStarted;
  const ingest = new IngestService(pool, store, credentials);
  const query = new QueryService(pool, store);
  const live = new LiveQueries(query, store);
  const http = await startHttp({ config, credentials, ingest, query, live });
  // After both listeners are bound: a start that fails on a port in use must not create
  // (and print, once and for all) credentials of a workspace nobody could reach.
  const created = await credentials.ensureDefaultWorkspace();
  if (created) printLine({ event: "workspace-created", ...created });
  startServiceMetrics({
    writeQueueBytes: () => store.writeQueueBytes,
    workerQueueTasks: () => pool.queueSize,
    segments: () => store.sealedSegmentTotals(),
    retentionCacheBytes: () => query.retentionCacheBytes,
  });
  http.markReady();
  log.info({ startMs: Date.now() - startedAtMs, rowsReplayed: store.rowsApplied, workers: config.workerCount, dataDir: config.dataDir }, "ready");

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    const deadline = setTimeout(() => {
      log.error({ timeoutMs: limits.shutdownTimeoutMs }, "shutdown exceeded its time limit, exiting");
      process.exit(1);
    }, limits.shutdownTimeoutMs);
    deadline.unref();
    try {
      await http.close(limits.shutdownTimeoutMs / 3);
      // Sealing may take what is left but a margin for closing the WAL and the pool; a seal still running then is abandoned.
      const sealDeadlineMs = Date.now() + limits.shutdownTimeoutMs / 3;
      pool.abandonStoreTasksAt(sealDeadlineMs);
      await store.close(sealDeadlineMs);
      credentials.close();
      // Released before the pool closes, so that exit follows the pool's close at once.
      await releaseDataDir();
      await pool.close();
      log.info({ signal }, "stopped");
      process.exit(0);
    } catch (error) {
      log.error({ err: errorMessage(error) }, "shutdown failed");
      process.exit(1);
    }
  };
  stopNow = (signal) => void stop(signal);
  printLine({ event: "listening", queryUrl: http.queryUrl, ingestUrl: http.ingestUrl });
  if (stopRequested) stopNow(stopRequested);
}
