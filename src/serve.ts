/**
 * Eventide's process: config → the data directory's lock → store recovery →
 * credentials → worker pool → listeners → the first workspace, announced once
 * both listeners are bound → ready. Prints one JSON line per milestone on
 * stdout (SPEC §0) and shuts down cleanly on SIGTERM/SIGINT: stop accepting,
 * answer what is in flight, seal and fsync, exit 0. main.ts loads it.
 */
import { CredentialStore } from "./auth/credential-store.js";
import { holdServerLock } from "./storage/lock-file.js";
import { loadConfig, type ClickHouseSettings, type Config, type RetentionPolicy } from "./config/config.js";
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
import { openClickHouseStore } from "./clickhouse/store.js";
import { ClickHouseQueryService } from "./clickhouse/query-service.js";
import { dropExpiredClickHouseDays } from "./clickhouse/deletions.js";
import type { RetentionPass } from "./storage/retention.js";

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

/**
 * Drops expired days now and every retentionCheckIntervalMs: a workspace's own
 * retention from the registry, else EVENTIDE_RETENTION_DAYS.
 */
function startRetention(
  drop: (retentionOf: (workspaceId: string) => RetentionPolicy, nowMs: number) => Promise<RetentionPass>,
  credentials: CredentialStore,
  config: Config,
): NodeJS.Timeout {
  const retentionOf = (workspaceId: string): RetentionPolicy => {
    const own = credentials.retentionOf(workspaceId);
    if (own === undefined) return config.retention;
    return own === "forever" ? { kind: "forever" } : { kind: "days", days: own };
  };
  let running = false;
  const pass = () => {
    if (running) return;
    running = true;
    drop(retentionOf, Date.now())
      .then(
        (dropped) => {
          if (dropped.daysDropped > 0) log.info(dropped, "retention: expired days dropped");
        },
        (error: unknown) => log.error({ err: errorMessage(error) }, "retention: dropping expired days failed; retried at the next check"),
      )
      .finally(() => (running = false));
  };
  pass();
  const timer = setInterval(pass, limits.retentionCheckIntervalMs);
  timer.unref();
  return timer;
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
  // With EVENTIDE_STORE=clickhouse://…, the outbox takes the embedded store's place on the write path.
  const store = config.store.kind === "embedded" ? Store.open(config.dataDir, config.fsync) : undefined;
  const outbox = config.store.kind === "clickhouse" ? await openClickHouseStore(config.dataDir, config.fsync, config.store) : undefined;
  const writes = store ?? outbox!;
  const credentials = await CredentialStore.open(config.dataDir);

  const pool = new WorkerPool(config.workerCount);
  // Asked first, so its tasks are first in the queue: behind a merge that start-up resumes, the
  // announcement would wait out the merge. A worker still loading roaring when the pool closes
  // aborts the process, so the server is announced only once all have started.
  const workersStarted = pool.ready(workerStartTimeoutMs);
  store?.start({
    seal: async (segment, directory) =>
      pool.seal({
        kind: "seal",
        directory,
        dayStartMs: segment.dayStartMs,
        rowCount: segment.rowCount,
        time: segment.time.buffer,
        user: segment.user.buffer,
        event: segment.event.buffer,
        uuidPresent: segment.uuids?.present.buffer,
        uuid: segment.uuids?.bytes.buffer,
        properties: await segment.properties.pack(),
        fsync: config.fsync,
      }),
    load: (directory) => pool.load({ kind: "load-segment", directory }),
    merge: (directories, target, dayStartMs, dropUserIds) => pool.merge({ kind: "merge", directories, target, dayStartMs, fsync: config.fsync, dropUserIds }),
  });
  await workersStarted;
  outbox?.start();
  const ingest = new IngestService(pool, writes, credentials);
  const query = config.store.kind === "clickhouse" ? new ClickHouseQueryService(pool, config.store, () => outbox!.drained()) : new QueryService(pool, store!);
  // Live answers re-run when rows become visible: committed in the embedded store, shipped to ClickHouse.
  const live = new LiveQueries(query, writes);
  const http = await startHttp({ config, credentials, ingest, query, live });
  // After both listeners are bound: a start that fails on a port in use must not create
  // (and print, once and for all) credentials of a workspace nobody could reach.
  const created = await credentials.ensureDefaultWorkspace();
  if (created) printLine({ event: "workspace-created", ...created });
  startServiceMetrics({
    writeQueueBytes: () => writes.writeQueueBytes,
    workerQueueTasks: () => pool.queueSize,
    segments: () => store?.sealedSegmentTotals() ?? { count: 0, bytes: 0 },
    retentionCacheBytes: () => query.retentionCacheBytes,
    uuids: () => store?.uuidTotals(),
  });
  const retentionTimer = startRetention(
    store !== undefined
      ? (retentionOf, nowMs) => store.dropExpiredDays(retentionOf, nowMs)
      : (retentionOf, nowMs) => dropExpiredClickHouseDays(config.store as ClickHouseSettings, credentials.workspaceIds(), retentionOf, nowMs),
    credentials,
    config,
  );
  http.markReady();
  log.info({ startMs: Date.now() - startedAtMs, rowsReplayed: store?.rowsApplied ?? 0, workers: config.workerCount, dataDir: config.dataDir }, "ready");

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    const deadline = setTimeout(() => {
      log.error({ timeoutMs: limits.shutdownTimeoutMs, storeTasks: pool.storeTasksInFlight }, "shutdown exceeded its time limit, exiting");
      // A worker blocked in a read from a hung disk cannot be stopped, and process.exit waits for every thread to stop:
      // then the process kills itself, as a crash would end it (the store recovers from one; the log line above is written).
      if (pool.storeTasksInFlight > 0) process.kill(process.pid, "SIGKILL");
      process.exit(1);
    }, limits.shutdownTimeoutMs);
    deadline.unref();
    try {
      clearInterval(retentionTimer);
      await http.close(limits.shutdownTimeoutMs / 3);
      // Sealing may take what is left but a margin for closing the WAL and the pool; a seal still running then is abandoned.
      const sealDeadlineMs = Date.now() + limits.shutdownTimeoutMs / 3;
      pool.abandonStoreTasksAt(sealDeadlineMs);
      await (store ?? outbox!).close(sealDeadlineMs);
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
