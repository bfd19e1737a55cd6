/**
 * Every bound of the service, in one place, units last (TigerBeetle's
 * constants.zig habit). The SPEC §6 limits are settings: each can be overridden
 * by an environment variable listed in docs/configuration.md; relations between them are
 * asserted when this module loads, so a bad override fails at start-up rather
 * than in the middle of a request.
 */
import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { totalmem } from "node:os";

/** `minimum` is 1 for every bound; 0 only where it means "off". */
function integerFromEnvironment(name: string, fallback: number, minimum = 1): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  const wanted = minimum === 0 ? "a non-negative integer (0: off)" : "a positive integer";
  assert(Number.isSafeInteger(value) && value >= minimum, `${name} must be ${wanted}, got ${JSON.stringify(raw)}`);
  return value;
}

const mebibyte = 1024 * 1024;

/**
 * The memory this process may use: the machine's, or less when a cgroup
 * (a container's memory limit) says so. cgroup v2 writes "max" for no limit,
 * v1 a huge number; either way the smaller of the two figures wins.
 */
function memoryBytesAvailable(): number {
  let bytes = totalmem();
  for (const path of ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]) {
    try {
      const limit = Number(readFileSync(path, "utf8").trim());
      if (Number.isSafeInteger(limit) && limit > 0) bytes = Math.min(bytes, limit);
    } catch {
      // No such cgroup file: not in a container, or another cgroup version.
    }
  }
  return bytes;
}

/** The soft limit on open files (/proc/self/limits), or undefined where it cannot be read. */
function openFilesMax(): number | undefined {
  try {
    const line = readFileSync("/proc/self/limits", "utf8").split("\n").find((text) => text.startsWith("Max open files"));
    const soft = Number(line?.split(/\s{2,}/)[1]);
    return Number.isSafeInteger(soft) && soft > 0 ? soft : undefined;
  } catch {
    return undefined;
  }
}

/** Descriptors kept for the store, the workers and libuv when the open-files limit bounds requests in flight. */
const reservedFileDescriptors = 256;

export const limits = Object.freeze({
  // SPEC §6 — request limits.
  batchEventsMax: integerFromEnvironment("EVENTIDE_BATCH_EVENTS_MAX", 1000),
  ingestBodyBytesMax: integerFromEnvironment("EVENTIDE_INGEST_BODY_BYTES_MAX", mebibyte),
  batchBodyBytesMax: integerFromEnvironment("EVENTIDE_BATCH_BODY_BYTES_MAX", 20 * mebibyte),
  queryBodyBytesMax: integerFromEnvironment("EVENTIDE_QUERY_BODY_BYTES_MAX", mebibyte),
  propertiesBytesMax: integerFromEnvironment("EVENTIDE_PROPERTIES_BYTES_MAX", 65_536),
  eventNameLengthMax: integerFromEnvironment("EVENTIDE_EVENT_NAME_LENGTH_MAX", 200),
  distinctIdLengthMax: integerFromEnvironment("EVENTIDE_DISTINCT_ID_LENGTH_MAX", 200),
  funnelStepsMax: integerFromEnvironment("EVENTIDE_FUNNEL_STEPS_MAX", 20),
  trendBucketsMax: integerFromEnvironment("EVENTIDE_TREND_BUCKETS_MAX", 10_000),
  retentionPeriodsMax: integerFromEnvironment("EVENTIDE_RETENTION_PERIODS_MAX", 1000),
  /**
   * Points one trend answer may hold: buckets × series (a breakdown's series are its
   * breakdownLimit, "other" and the total). Buckets and breakdownLimit are each bounded,
   * their product was not: 10 000 hourly buckets × 1 000 values built a 410 MB answer,
   * ~5 s of the main thread. A trend without breakdown is never over it.
   */
  trendPointsMax: integerFromEnvironment("EVENTIDE_TREND_POINTS_MAX", 100_000),
  /** Counts one retention answer may hold: each series' cohorts × their periods (a triangle), as trendPointsMax; 1 000 periods without breakdown are 500 500. */
  retentionCellsMax: integerFromEnvironment("EVENTIDE_RETENTION_CELLS_MAX", 2_000_000),
  batchErrorsReportedMax: 100,
  /** Maps and arrays nested in a msgpack body: its decoder recurses, and a worker's stack holds ~5× this. */
  msgpackNestingDepthMax: integerFromEnvironment("EVENTIDE_MSGPACK_NESTING_DEPTH_MAX", 1000),
  funnelWindowSecondsMax: 31_536_000,
  retentionWindowDaysMax: 365,

  // Write path: how much may wait for the disk before ingest answers 503.
  writeQueueBytesMax: integerFromEnvironment("EVENTIDE_WRITE_QUEUE_BYTES_MAX", 256 * mebibyte),
  workerQueueTasksMax: integerFromEnvironment("EVENTIDE_WORKER_QUEUE_TASKS_MAX", 256),
  /** Ingest bodies handed to the pool and not yet parsed: 256 tasks of 20 MiB bodies would otherwise hold 5 GiB. */
  workerQueueBytesMax: integerFromEnvironment("EVENTIDE_WORKER_QUEUE_BYTES_MAX", 256 * mebibyte),
  /** How much lower than the main thread worker threads run (nice steps, Linux); 0 keeps them equal. See worker.ts. */
  workerNiceSteps: integerFromEnvironment("EVENTIDE_WORKER_NICE", 10, 0),
  /** Reused body buffers kept free for the next large ingest bodies (body-slabs.ts); 0 keeps none. 64 connections of 1 000-event batches use ~16 MiB. */
  ingestBodySlabsBytesMax: integerFromEnvironment("EVENTIDE_INGEST_BODY_SLABS_BYTES_MAX", 64 * mebibyte, 0),
  /** Single events gathered into one pool task (a task costs ~80 µs, an event ~2 µs), or validated together on the main thread. */
  singleEventsPerTaskMax: 512,
  /**
   * Single-event bodies up to this size, not gzipped, are read on the main
   * thread by the byte scanner (ingest-service.ts): a worker's round trip costs
   * a gathered event far more time than its parse. Larger or gzipped bodies,
   * and those the scanner leaves, go to the pool.
   */
  singleEventInlineBytesMax: 4096,
  /** Request log lines per second (refusals at info, 5xx at error, all at debug); the rest is counted in one line. An overload answers thousands of 503s a second, and each line is a synchronous write. 0: no cap. */
  logRequestLinesPerSecondMax: integerFromEnvironment("EVENTIDE_LOG_REQUEST_LINES_PER_SECOND_MAX", 100, 0),
  /** One WAL write + fdatasync carries at most this much. */
  groupCommitBytesMax: 32 * mebibyte,
  retryAfterSeconds: 1,
  /**
   * Per-workspace ingest rate limit (a token bucket, checked on the main thread
   * before a chunk is committed); 0 turns it off. The default is above what one
   * box ingests (~500 k events/s), so a load test is never throttled, while one
   * workspace on a larger box stays bounded. Over the limit, ingest answers 429
   * rate_limited with Retry-After and stores nothing.
   */
  rateLimitEventsPerSecond: integerFromEnvironment("EVENTIDE_RATE_LIMIT_EVENTS_PER_SECOND", 1_000_000, 0),

  // Cardinality: what one client with the public ingest key can make the store keep. Over a cap an event
  // is refused on its own (a per-event invalid_request); the rest of its batch is stored.
  /** Oldest accepted timestamp, in days before receipt; 0 keeps SPEC's floor (1970) so backfills of any age work. */
  timestampPastDays: integerFromEnvironment("EVENTIDE_TIMESTAMP_PAST_DAYS", 0, 0),
  /**
   * Latest accepted timestamp, in days after receipt; 0 (the default) keeps the contract's ceiling
   * (year 9999). Production stores should set 1: no client sends events from years ahead.
   */
  timestampFutureDays: integerFromEnvironment("EVENTIDE_TIMESTAMP_FUTURE_DAYS", 0, 0),
  /** Distinct UTC days in one batch: each is an active segment and a sealed segment's files; a quarter's backfill in random order fits. */
  batchDaysMax: integerFromEnvironment("EVENTIDE_BATCH_DAYS_MAX", 100),
  /** Distinct event names a workspace keeps (Mixpanel's soft limit is 5 000, Amplitude's 2 000): names live in memory for good. */
  workspaceEventNamesMax: integerFromEnvironment("EVENTIDE_WORKSPACE_EVENT_NAMES_MAX", 10_000),
  /** Distinct property keys a workspace keeps; keys, like names, live in memory for good. */
  workspacePropertyKeysMax: integerFromEnvironment("EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX", 50_000),

  // Store: a checkpoint seals every active segment once the WAL holds this many rows or bytes.
  checkpointRowsMax: integerFromEnvironment("EVENTIDE_CHECKPOINT_ROWS_MAX", 2_000_000),
  checkpointWalBytesMax: integerFromEnvironment("EVENTIDE_CHECKPOINT_WAL_BYTES_MAX", 512 * mebibyte),
  /** …or this many property values (entries), or new distinct property texts, bounding the memory active segments hold. */
  checkpointPropertyEntriesMax: integerFromEnvironment("EVENTIDE_CHECKPOINT_PROPERTY_ENTRIES_MAX", 16_000_000),
  checkpointPropertyTextsMax: integerFromEnvironment("EVENTIDE_CHECKPOINT_PROPERTY_TEXTS_MAX", 2_000_000),
  /** …or this many active segments (one per workspace and day touched): batches spread over many days cannot pile up memory. */
  checkpointActiveSegmentsMax: integerFromEnvironment("EVENTIDE_CHECKPOINT_ACTIVE_SEGMENTS_MAX", 4096),
  /** Active rows are sealed at least this often, so restarts replay little. */
  checkpointIntervalMs: integerFromEnvironment("EVENTIDE_CHECKPOINT_INTERVAL_MS", 60_000),
  /** …and once ingest has paused this long: sealed rows answer queries far faster than active ones. */
  checkpointIdleMs: integerFromEnvironment("EVENTIDE_CHECKPOINT_IDLE_MS", 5_000),
  /**
   * A uuid is remembered (a retry of its event acknowledged, not stored again) for at least
   * this many days after its event was received, at most twice that; like Amplitude's 7-day
   * insert_id window, it keeps the uuid set's memory to what a few days of ingest bring.
   */
  uuidHorizonDays: integerFromEnvironment("EVENTIDE_UUID_HORIZON_DAYS", 7),
  /**
   * …within this many bytes for all workspaces' uuid sets: a set begins a new generation early
   * when memory runs short, and the retry window shrinks to what this holds (uuid-budget.ts).
   */
  uuidMemoryBytesMax: integerFromEnvironment("EVENTIDE_UUID_MEMORY_BYTES_MAX", Math.max(64 * mebibyte, Math.floor(memoryBytesAvailable() / 4))),
  /**
   * A uuid claim that would sit further than this from its home slot doubles its table
   * instead: under the keyed hash the longest walk among millions of random uuids is ~50
   * slots, and a bound keeps a lookup's walk short whatever uuids clients choose.
   */
  uuidProbeSlotsMax: 128,
  /** Days larger than this are left as several segments rather than rewritten whole: a merge holds a worker for its whole day. */
  mergeRowsMax: 20_000_000,
  /**
   * While ingest is busy, a day is merged only once it holds this many sealed segments: merging at
   * every checkpoint rewrote a day's rows again and again (work quadratic in them, taken from the
   * workers that parse ingest), while a query pays little for a few more segments.
   */
  busyMergeSegmentsMin: 8,
  /** After a failed checkpoint the next waits this long: a full or failing disk is not asked again on every commit. */
  checkpointRetryDelayMs: 1_000,
  /** A chunk with more property keys, or entries, than these is applied in slices: at once it could hold the main thread for a second. */
  applyAtOnceKeysMax: 4_096,
  applyAtOnceEntriesMax: 65_536,
  /** Longest the main thread applies one chunk without letting other work run. */
  applySliceMs: 8,
  /** Keys, and entries, applied between looks at the clock: reading it per key would cost more than the key. */
  applyClockKeys: 256,
  applyClockEntries: 16_384,
  /** A query's snapshot looks again this many times when merges keep retiring a segment it waits for; more means a bug. */
  snapshotAttemptsMax: 3,

  // Queries.
  /** Decoded sealed segments kept in memory by all threads together (main half, workers the other): half the memory by default. */
  segmentCacheBytesMax: integerFromEnvironment("EVENTIDE_SEGMENT_CACHE_BYTES_MAX", Math.floor(memoryBytesAvailable() / 2)),
  /**
   * Per worker thread: indexes of active segments kept between queries (rows by event, users by event, filtered
   * columns; ~5 bytes a row plus 4 per filtered key). 64 MiB covers a checkpoint's 2 M rows with room to spare.
   */
  activeIndexBytesMax: integerFromEnvironment("EVENTIDE_ACTIVE_INDEX_BYTES_MAX", 64 * mebibyte),
  /** One query task longer than this has its worker replaced and the query answers 503: a worker is not held for minutes. */
  /** A ClickHouse request (an INSERT of a block, a query) that takes longer is abandoned: a block is retried, a query answers 503. */
  clickhouseRequestTimeoutMs: integerFromEnvironment("EVENTIDE_CLICKHOUSE_REQUEST_TIMEOUT_MS", 60_000),
  /** Rows per INSERT at most: ClickHouse wants few large inserts, and a block must stay one block on its side (max_insert_block_size). */
  clickhouseBlockRowsMax: integerFromEnvironment("EVENTIDE_CLICKHOUSE_BLOCK_ROWS_MAX", 200_000),
  /** An acknowledged event waits at most this long in the outbox for more to share its INSERT: the visibility delay's main part. */
  clickhouseForwardDelayMs: integerFromEnvironment("EVENTIDE_CLICKHOUSE_FORWARD_DELAY_MS", 1000),
  /** The ClickHouse outbox's file is rotated past this size; a file is deleted once all its events are in ClickHouse. */
  clickhouseOutboxFileBytesMax: integerFromEnvironment("EVENTIDE_CLICKHOUSE_OUTBOX_FILE_BYTES_MAX", 64 * mebibyte),
  /** After a failed INSERT (ClickHouse down or restarting), the forwarder tries again this much later. */
  clickhouseRetryDelayMs: integerFromEnvironment("EVENTIDE_CLICKHOUSE_RETRY_DELAY_MS", 1000),
  /** A trend whose buckets need a slot table longer than this (a long range in a zone with DST) is answered from selected rows: the table is a literal in the SQL. */
  clickhouseBucketSlotsMax: integerFromEnvironment("EVENTIDE_CLICKHOUSE_BUCKET_SLOTS_MAX", 100_000),
  /** A gt/gte/lt/lte filter on a property with more distinct numeric texts in the range takes the row path: the passing texts are a literal in the SQL. */
  clickhouseComparisonTextsMax: integerFromEnvironment("EVENTIDE_CLICKHOUSE_COMPARISON_TEXTS_MAX", 10_000),
  /** An ordered funnel with more steps that repeat an earlier step's event takes the row path: each adds two sorts per entry, and past this the SQL is slower than selecting the rows. */
  clickhouseFunnelRepeatedStepsMax: integerFromEnvironment("EVENTIDE_CLICKHOUSE_FUNNEL_REPEATED_STEPS_MAX", 4, 0),
  /** A strict or unordered funnel with more steps takes the row path: strict's SQL reads steps² shifted group arrays per entry, slower than selecting the rows past this. */
  clickhouseFunnelSqlStepsMax: integerFromEnvironment("EVENTIDE_CLICKHOUSE_FUNNEL_SQL_STEPS_MAX", 10),
  /** A funnel whose SQL has more SELECT levels per user takes the row path: ClickHouse refuses subqueries nested past its max_subquery_depth (100 by default). */
  clickhouseFunnelSqlLevelsMax: integerFromEnvironment("EVENTIDE_CLICKHOUSE_FUNNEL_SQL_LEVELS_MAX", 96),
  queryTaskTimeoutMs: integerFromEnvironment("EVENTIDE_QUERY_TASK_TIMEOUT_MS", 30_000),
  /** How often expired days are looked for (EVENTIDE_RETENTION_DAYS, per-workspace retention): a day expires once a day, so an hour's lag is a few percent of it. */
  retentionCheckIntervalMs: integerFromEnvironment("EVENTIDE_RETENTION_CHECK_INTERVAL_MS", 3_600_000),
  /** A seal, merge or segment load longer than this is abandoned (its worker replaced); a checkpoint retries later. */
  storeTaskTimeoutMs: integerFromEnvironment("EVENTIDE_STORE_TASK_TIMEOUT_MS", 300_000),
  /**
   * A SPEC §7 query reading at least this many rows runs in user shards over the pool (when its
   * shards' answers merge): below it one task answers sooner than a fan-out costs (~1 ms a task).
   */
  rowsQueryShardRowsMin: integerFromEnvironment("EVENTIDE_ROWS_QUERY_SHARD_ROWS_MIN", 1_000_000),
  /** Filters in one query: a dashboard uses a handful. */
  queryFiltersMax: integerFromEnvironment("EVENTIDE_QUERY_FILTERS_MAX", 100),
  /** Characters of all filter values of one query together. */
  queryFilterValueCharactersMax: integerFromEnvironment("EVENTIDE_QUERY_FILTER_VALUE_CHARACTERS_MAX", 64 * 1024),
  retentionCacheBytesMax: integerFromEnvironment("EVENTIDE_RETENTION_CACHE_BYTES_MAX", 64 * mebibyte),
  retentionCacheTtlMs: 60_000,
  /** SPEC §7.6: listings of event names and property keys may lag the newest events by up to 60 s, so one answer per workspace serves that long. */
  workspaceListingCacheTtlMs: integerFromEnvironment("EVENTIDE_WORKSPACE_LISTING_CACHE_TTL_MS", 60_000),
  /** A listing names every event or key of a workspace: a few MB for the capped key count; beyond this budget the oldest go. */
  workspaceListingCacheBytesMax: integerFromEnvironment("EVENTIDE_WORKSPACE_LISTING_CACHE_BYTES_MAX", 32 * mebibyte),

  // Live queries: subscriptions over a WebSocket on the query listener (src/http/live-socket.ts).
  /** Open live sockets on the query listener: each holds a descriptor, a buffer and its subscriptions; more are refused 503 at the upgrade. */
  liveSocketsMax: integerFromEnvironment("EVENTIDE_LIVE_SOCKETS_MAX", 1000),
  /** Live subscriptions one access token holds over all its sockets: a dashboard tab holds one per view, and each re-runs its query as events arrive. */
  liveSubscriptionsPerTokenMax: integerFromEnvironment("EVENTIDE_LIVE_SUBSCRIPTIONS_PER_TOKEN_MAX", 20),
  /** A subscribed query is re-run at most once per this long, however fast events arrive: a busy workspace costs one query a second per subscription. */
  liveRefreshIntervalMs: integerFromEnvironment("EVENTIDE_LIVE_REFRESH_INTERVAL_MS", 1000),
  /** Unsent bytes a live socket may hold; past them its updates are skipped (the latest one is sent once it drains), not buffered. */
  liveSocketBufferedBytesMax: integerFromEnvironment("EVENTIDE_LIVE_SOCKET_BUFFERED_BYTES_MAX", mebibyte),
  /** One message from a live client: a subscription carries one query body, a few hundred bytes; each is parsed on the main thread. */
  liveMessageBytesMax: integerFromEnvironment("EVENTIDE_LIVE_MESSAGE_BYTES_MAX", 64 * 1024),
  /** A live socket that has not sent its token this long after opening is closed: unauthenticated sockets count against liveSocketsMax. */
  liveAuthTimeoutMs: integerFromEnvironment("EVENTIDE_LIVE_AUTH_TIMEOUT_MS", 10_000),
  /** A subscription's id, chosen by the client to match answers to queries. */
  liveSubscriptionIdLengthMax: 64,

  // Credentials written by the CLI reach the running server within this long (SPEC: 1 s).
  registryPollIntervalMs: 250,
  /** A registry that cannot be read for this long may hide revocations: credentials are then refused with 503 until it reads again. */
  registryStaleMsMax: integerFromEnvironment("EVENTIDE_REGISTRY_STALE_MS_MAX", 2_000),
  /** A registry read still in flight after this long is a hung disk (refused as above); shorter, it may just be a starved machine. */
  registryReadHangMsMax: integerFromEnvironment("EVENTIDE_REGISTRY_READ_HANG_MS_MAX", 15_000),
  /** `eventide import`: batches posted at once, as many as the ingest bench's batch load uses; each holds its body (~250 KiB for 1 000 exported events). */
  importRequestsInFlightMax: integerFromEnvironment("EVENTIDE_IMPORT_REQUESTS_IN_FLIGHT_MAX", 16),
  /** A key's or token's label (`--label`): a note for lists, typed on command lines. */
  credentialLabelLengthMax: integerFromEnvironment("EVENTIDE_CREDENTIAL_LABEL_LENGTH_MAX", 100),
  shutdownTimeoutMs: 9_000,
  /**
   * Requests whose headers have arrived and whose answer has not been sent,
   * on both listeners together; more are answered 503 overloaded and their
   * connection closed. Each holds a connection, so the default stays below
   * the open-files limit: at that limit the listener's accept fails with
   * EMFILE on every turn of the event loop, spinning the main thread, and the
   * registry can no longer be read.
   */
  httpRequestsInFlightMax: integerFromEnvironment("EVENTIDE_HTTP_REQUESTS_IN_FLIGHT_MAX", Math.max(64, (openFilesMax() ?? 4096) - reservedFileDescriptors)),
  /**
   * Open descriptors of the process (connections, idle keep-alive ones too, plus files) above which
   * both listeners stop accepting, so the kernel refuses new connections instead of accept spinning
   * on EMFILE; they accept again below 90 % of it, once idle connections have timed out (10 s).
   */
  httpDescriptorsOpenMax: integerFromEnvironment("EVENTIDE_HTTP_DESCRIPTORS_OPEN_MAX", Math.max(128, (openFilesMax() ?? 4096) - reservedFileDescriptors), 16),
  /** How often open descriptors are counted: uWS has no HTTP connection open/close hook to count them by. */
  httpDescriptorsSampleIntervalMs: 250,
  /** Slow or idle HTTP clients are cut off after this long without progress. */
  idleTimeoutSeconds: 10,
  /** Browsers and CDNs keep /sdk.js this long: an upgraded snippet reaches every page within the hour. */
  sdkCacheSeconds: 3600,
});

/**
 * The rate limiter's bucket holds one second of events, but never less than a
 * full batch: a bucket smaller than the largest valid batch would refuse that
 * batch forever, however long its client waited.
 */
/**
 * The segment cache's one budget, split so that all threads together stay
 * within it: the main thread (the store's loaded segments) keeps half, and the
 * workers' caches of views share the other half. A worker's view may keep a
 * segment's memory alive after the store let it go, so the halves can hold
 * different segments and are counted apart.
 */
export const mainThreadSegmentCacheBytesMax = Math.floor(limits.segmentCacheBytesMax / 2);
export function workerSegmentCacheBytesMax(workerCount: number): number {
  return Math.floor((limits.segmentCacheBytesMax - mainThreadSegmentCacheBytesMax) / workerCount);
}

export const rateLimitBurstEvents = Math.max(limits.rateLimitEventsPerSecond, limits.batchEventsMax);

assert(limits.ingestBodyBytesMax <= limits.batchBodyBytesMax, "EVENTIDE_INGEST_BODY_BYTES_MAX must not exceed EVENTIDE_BATCH_BODY_BYTES_MAX");
assert(limits.propertiesBytesMax < limits.ingestBodyBytesMax, "EVENTIDE_PROPERTIES_BYTES_MAX must be below EVENTIDE_INGEST_BODY_BYTES_MAX");
assert(limits.groupCommitBytesMax <= limits.writeQueueBytesMax, `EVENTIDE_WRITE_QUEUE_BYTES_MAX must be at least ${limits.groupCommitBytesMax} (one WAL group)`);
assert(limits.msgpackNestingDepthMax <= 4000, "EVENTIDE_MSGPACK_NESTING_DEPTH_MAX must be at most 4 000 (msgpack decoding recurses on a worker's stack)");
assert(limits.workerNiceSteps <= 19, "EVENTIDE_WORKER_NICE must be 0–19");
assert(limits.registryPollIntervalMs * 2 < 1000, "credential changes must reach the server within 1 s");
assert(limits.busyMergeSegmentsMin >= 2, "a merge needs at least two segments");
assert(limits.applyClockKeys <= limits.applyAtOnceKeysMax && limits.applyClockEntries <= limits.applyAtOnceEntriesMax, "a sliced apply looks at the clock within its first slice");
assert(limits.clickhouseFunnelSqlStepsMax <= limits.funnelStepsMax, "EVENTIDE_CLICKHOUSE_FUNNEL_SQL_STEPS_MAX must be at most EVENTIDE_FUNNEL_STEPS_MAX");
assert(limits.clickhouseFunnelRepeatedStepsMax < limits.funnelStepsMax, "EVENTIDE_CLICKHOUSE_FUNNEL_REPEATED_STEPS_MAX must be below EVENTIDE_FUNNEL_STEPS_MAX (step 1 repeats none)");
assert(limits.clickhouseBucketSlotsMax <= 1_000_000, "EVENTIDE_CLICKHOUSE_BUCKET_SLOTS_MAX must be at most 1 000 000: the bucket table is a literal in a SELECT of at most 16 MiB");
assert(limits.shutdownTimeoutMs < 10_000, "SPEC: exit within 10 s of SIGTERM");
assert(limits.workspaceListingCacheTtlMs <= 60_000, "SPEC §7.6: EVENTIDE_WORKSPACE_LISTING_CACHE_TTL_MS must be at most 60 000 (listings lag by at most 60 s)");
assert(limits.httpDescriptorsSampleIntervalMs < limits.idleTimeoutSeconds * 1000, "open descriptors are counted more often than idle connections time out");
assert(limits.registryStaleMsMax > limits.registryPollIntervalMs, `EVENTIDE_REGISTRY_STALE_MS_MAX must exceed the registry poll interval (${limits.registryPollIntervalMs} ms)`);
assert(limits.liveMessageBytesMax <= limits.queryBodyBytesMax, "EVENTIDE_LIVE_MESSAGE_BYTES_MAX must not exceed EVENTIDE_QUERY_BODY_BYTES_MAX: a live message carries one query body");

/**
 * Tuning of the hot loops that parse bodies and seal segments. Not settings (no
 * environment variable): each changes only how fast a result comes, never the
 * result or a byte on disk, and the tests compare the outputs either way.
 */
export const tuning = Object.freeze({
  /** Row sort digits of at most this many bits: 2 048 places written at once stay in the caches and the TLB. */
  rowSortDigitBitsMax: 11,
  /** Property entry sort digits: 2 048 buckets, few enough places written at once to stay in cache. */
  entrySortDigitBits: 11,
  /** An object with up to this many members is checked for duplicate and index keys pairwise, allocating nothing. */
  objectMembersComparedPairwiseMax: 16,
  /** …and with plain keys of this many bytes in all: longer keys are hashed instead. */
  objectKeyBytesComparedPairwiseMax: 256,
  /** Index keys of one object up to this many are sorted by insertion; more, natively. */
  indexKeysInsertionSortedMax: 16,
  /** The first members of `properties` whose values are scanned tracked once; past them values are tracked when built. */
  propertiesTrackedMembersMax: 4096,
  /** Keys grouped by one hash table at a time: a table for this many fits in the CPU's caches. */
  keyTablePartitionMembersTarget: 4096,
  /** `eventide import` reads its file in pieces of this size (a longer line grows the buffer up to one batch body). */
  importReadBytes: 1024 * 1024,
  /** An event with more properties is left to the JSON.parse path: the fast scan's duplicate table (64 KiB) stays in cache. */
  scannedEventPropertiesMax: 4096,
  /** Ingest bodies (and gathered single events) of at least this many bytes are read into reused slabs; smaller ones reuse the heap's pages anyway. */
  bodySlabBytesMin: 64 * 1024,
  /** …and of at most this many: a rare 20 MiB body is not worth keeping its slab. */
  bodySlabBytesMax: 4 * 1024 * 1024,
});
assert(tuning.rowSortDigitBitsMax <= 16 && tuning.entrySortDigitBits <= 16, "radix digits index a counts table of 2^bits entries");
assert(tuning.indexKeysInsertionSortedMax >= 1 && tuning.objectMembersComparedPairwiseMax >= 1, "pairwise paths need room for one member");
