/**
 * Main-thread side of ingest: hands bodies to the pool, checks the apiKey the
 * worker found, commits the valid rows and builds the answer. Single-event
 * requests are gathered: every body that arrives before the next turn of the
 * event loop is validated in one go and committed as one chunk per key. Small
 * plain ones are validated here, larger or gzipped ones in one pool task: a
 * worker's round trip costs tens of microseconds of this thread and hundreds of
 * latency, an event's parse a few.
 */
import { limits, rateLimitBurstEvents } from "../config/limits.js";
import type { CredentialStore } from "../auth/credential-store.js";
import type { ServiceError, ServiceReply } from "../errors.js";
import type { RowRefusal } from "../storage/cardinality.js";
import type { Store } from "../storage/store.js";
import { PoolSaturatedError, type WorkerPool } from "../workers/pool.js";
import { bodyGzipFlag, bodyMsgpackFlag, bodySliceFields, type BatchKeyCheck, type IngestTaskResult, type StoredSingleEvent } from "../workers/protocol.js";
import { ChunkBuilder } from "../storage/chunk-codec.js";
import { scanSingleBodies, type EventError, type IngestBodyResult, type IngestShape } from "./event-validation.js";
import { leadingApiKey } from "./leading-api-key.js";
import type { BodyFormat } from "../json/msgpack-body.js";
import { BodySlabs } from "./body-slabs.js";
import { eventsAccepted, eventsRefused } from "../metrics.js";
import { log } from "../log.js";

/** Ingest's constant answer comes encoded: uWS sends a Uint8Array's bytes as they are, where it would convert a string on every call. */
export type IngestReply = ServiceReply<string | Uint8Array>;

const singleStored: IngestReply = { ok: true, body: new Uint8Array(Buffer.from(`{"ok":true}`)) };
const overloaded: ServiceError = { code: "overloaded", message: "server is saturated, retry later" };
const unauthorized: ServiceError = { code: "unauthorized", message: "apiKey: missing or unknown" };
const rateLimited: ServiceError = {
  code: "rate_limited",
  message: `workspace is over its ingest rate limit of ${limits.rateLimitEventsPerSecond} events per second; nothing was stored, retry later`,
};

/**
 * Per-workspace token buckets (EVENTIDE_RATE_LIMIT_EVENTS_PER_SECOND). Each
 * bucket refills continuously at the rate and holds at most
 * rateLimitBurstEvents; a chunk is stored only when the bucket holds all of its
 * rows, so a refused request stores nothing (chunks are all-or-nothing; single
 * events with one key gathered into one task share a chunk, so they pass or are
 * refused together). One entry per workspace that ever ingested: bounded by the
 * registry.
 */
class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; updatedAtMs: number }>();

  constructor(
    private readonly eventsPerSecond: number,
    private readonly burstEvents: number,
  ) {}

  take(workspaceId: string, events: number, nowMs: number): boolean {
    let bucket = this.buckets.get(workspaceId);
    if (bucket === undefined) {
      bucket = { tokens: this.burstEvents, updatedAtMs: nowMs };
      this.buckets.set(workspaceId, bucket);
    }
    const elapsedMs = Math.max(0, nowMs - bucket.updatedAtMs);
    bucket.tokens = Math.min(this.burstEvents, bucket.tokens + (elapsedMs * this.eventsPerSecond) / 1000);
    bucket.updatedAtMs = nowMs;
    if (bucket.tokens < events) return false;
    bucket.tokens -= events;
    return true;
  }
}

/** SPEC §2's per-event message for a row a cardinality cap refused. */
function refusalMessage({ status, text }: RowRefusal): string {
  switch (status) {
    case "event_names_full":
      return `event: ${JSON.stringify(text)} would be a new event name past the workspace's ${limits.workspaceEventNamesMax} (EVENTIDE_WORKSPACE_EVENT_NAMES_MAX)`;
    case "property_keys_full":
      return `properties: ${JSON.stringify(text)} would be a new property key past the workspace's ${limits.workspacePropertyKeysMax} (EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX)`;
  }
}

/** What became of a task's chunk: refused whole, or committed with some rows refused by a cap. */
type ChunkOutcome = { kind: "failed"; error: ServiceError } | { kind: "committed"; refusals: RowRefusal[] };
const committedWhole: ChunkOutcome = { kind: "committed", refusals: [] };

function bodyFlags(gzip: boolean, format: BodyFormat): number {
  return (gzip ? bodyGzipFlag : 0) | (format === "msgpack" ? bodyMsgpackFlag : 0);
}

/** Rows in a chunk: the second u32 of its header (chunk-codec.ts documents the layout). */
function chunkRowCount(chunk: ArrayBuffer): number {
  return new Uint32Array(chunk, 0, 2)[1];
}

interface GatheredBody {
  bytes: Uint8Array;
  gzip: boolean;
  format: BodyFormat;
  receivedAtMs: number;
  onReply: (reply: IngestReply) => void;
}

/** Answers every gathered body with the error a failed task or commit gives them all. */
function failBodies(bodies: readonly GatheredBody[], error: unknown): void {
  const reply: IngestReply = error instanceof PoolSaturatedError ? { ok: false, error: overloaded } : { ok: false, error: { code: "internal_error", message: "internal error" } };
  if (!(error instanceof PoolSaturatedError)) log.error({ err: error }, "ingest task failed");
  for (const body of bodies) body.onReply(reply);
}

/**
 * The answers of gathered single events whose row a cardinality cap refused,
 * by body index. A body stored in chunk c holds the next row of c: each
 * accepted single event added one row to its key's chunk, in body order.
 */
function refusalsOfSingles(results: ReadonlyArray<IngestBodyResult | StoredSingleEvent>, chunkOutcome: readonly ChunkOutcome[]): Map<number, IngestReply> {
  const answers = new Map<number, IngestReply>();
  const nextRow = new Uint32Array(chunkOutcome.length);
  const refusedRows = chunkOutcome.map((outcome) => (outcome.kind === "committed" && outcome.refusals.length > 0 ? new Map(outcome.refusals.map((refusal) => [refusal.row, refusal])) : undefined));
  for (let index = 0; index < results.length; index++) {
    const body = results[index];
    const chunkIndex = typeof body === "number" ? body : body.kind === "parsed" && body.error === undefined ? body.chunkIndex : -1;
    if (chunkIndex < 0) continue;
    const refusal = refusedRows[chunkIndex]?.get(nextRow[chunkIndex]++);
    if (refusal !== undefined) answers.set(index, { ok: false, error: { code: "invalid_request", message: refusalMessage(refusal) } });
  }
  return answers;
}

export class IngestService {
  /** Single events for the pool: gzipped, or larger than limits.singleEventInlineBytesMax. */
  private gathered: GatheredBody[] = [];
  private gatheredBytes = 0;
  private gatherScheduled = false;
  /** Single events validated on this thread at the end of the turn (validateGatheredHere). */
  private gatheredHere: GatheredBody[] = [];
  private gatheredHereScheduled = false;
  /** Single-event tasks posted and not yet back from the pool. */
  private singleTasksInFlight = 0;
  /** undefined when rate limiting is off (the default). */
  private readonly rateLimiter = limits.rateLimitEventsPerSecond > 0 ? new RateLimiter(limits.rateLimitEventsPerSecond, rateLimitBurstEvents) : undefined;
  private readonly slabs = new BodySlabs();

  /** A reused buffer to read a large body into (body-slabs.ts); undefined for other sizes. batch gives it back. */
  readonly reusedBodyBuffer = (bytes: number): Uint8Array | undefined => (BodySlabs.fits(bytes) ? this.slabs.take(bytes) : undefined);

  constructor(
    private readonly pool: WorkerPool,
    /** The embedded store, or any store that commits chunks as it does (the ClickHouse store's outbox). */
    private readonly store: Pick<Store, "commit" | "writeQueueBytes" | "noteIngest">,
    private readonly credentials: CredentialStore,
  ) {}

  private saturated(): boolean {
    return this.pool.saturated || this.store.writeQueueBytes >= limits.writeQueueBytesMax;
  }

  /**
   * One /ingest/batch body; `body` is transferred to the pool, or, in a body
   * slab, read there and the slab reused once its task has answered. Unless it opens
   * with a key the registry knows, its syntax is checked and its key read
   * before it is parsed (BatchKeyCheck): an unknown key in 20 MiB costs that
   * check, not a parse. A known key read there sends the body back to the pool.
   */
  async batch(body: Uint8Array, gzip: boolean, receivedAtMs: number, format: BodyFormat = "json"): Promise<IngestReply> {
    let result: IngestTaskResult | { kind: "refused"; reply: IngestReply };
    try {
      this.store.noteIngest(receivedAtMs);
      if (this.saturated()) return { ok: false, error: overloaded };
      const openingApiKey = leadingApiKey(body, gzip, format);
      const keyCheck: BatchKeyCheck | undefined =
        openingApiKey === undefined ? { kind: "unread" } : this.credentials.workspaceIdForApiKey(openingApiKey) === undefined ? { kind: "unknown", apiKey: openingApiKey } : undefined;
      result = await this.batchTask(body, gzip, format, receivedAtMs, keyCheck);
    } finally {
      // The task has answered (or never left): no worker reads the slab any more. A keyRead body came back in a buffer of its own.
      if (body.buffer instanceof SharedArrayBuffer) this.slabs.give(body.buffer);
    }
    if (result.kind !== "ingest") return result.reply;
    if (result.keyRead !== undefined) {
      if (this.credentials.workspaceIdForApiKey(result.keyRead.apiKey) === undefined) return { ok: false, error: unauthorized };
      result = await this.batchTask(new Uint8Array(result.keyRead.plainBody), false, format, receivedAtMs, undefined);
      if (result.kind !== "ingest") return result.reply;
    }
    const [replies] = await this.finish(result, "batch");
    return replies;
  }

  private async batchTask(body: Uint8Array, gzip: boolean, format: BodyFormat, receivedAtMs: number, keyCheck: BatchKeyCheck | undefined): Promise<IngestTaskResult | { kind: "refused"; reply: IngestReply }> {
    try {
      const slices = Float64Array.of(body.byteOffset, body.byteLength, bodyFlags(gzip, format), receivedAtMs);
      return await this.pool.ingest({ kind: "ingest", shape: "batch", bodies: body.buffer as ArrayBuffer | SharedArrayBuffer, slices, keyCheck });
    } catch (error) {
      if (error instanceof PoolSaturatedError) return { kind: "refused", reply: { ok: false, error: overloaded } };
      throw error;
    }
  }

  /**
   * One /ingest body, gathered with the others of this turn of the event loop;
   * `onReply` is called once with the answer. A small plain body is validated
   * here at the end of the turn (validateGatheredHere). A gzipped or larger
   * one goes to the pool: at low load its task leaves at the end of the turn;
   * under load — every worker already parsing single events — bodies wait for
   * the next task to come back instead, so posting tasks does not crowd out
   * HTTP. A callback rather than a promise: the main thread is the
   * single-event path's bottleneck, and two promises and their reactions per
   * request were work it need not do.
   */
  single(bytes: Uint8Array, gzip: boolean, receivedAtMs: number, onReply: (reply: IngestReply) => void, format: BodyFormat = "json"): void {
    this.store.noteIngest(receivedAtMs);
    if (!gzip && bytes.length <= limits.singleEventInlineBytesMax) {
      // No pool task: only the write queue can be full.
      if (this.store.writeQueueBytes >= limits.writeQueueBytesMax) return onReply({ ok: false, error: overloaded });
      this.gatheredHere.push({ bytes, gzip, format, receivedAtMs, onReply });
      if (this.gatheredHere.length >= limits.singleEventsPerTaskMax) this.validateGatheredHere();
      else if (!this.gatheredHereScheduled) {
        this.gatheredHereScheduled = true;
        setImmediate(() => this.validateGatheredHere());
      }
      return;
    }
    this.gatherForPool({ bytes, gzip, format, receivedAtMs, onReply });
  }

  /** Gathers a single event into the next pool task. */
  private gatherForPool(body: GatheredBody): void {
    if (this.saturated()) return body.onReply({ ok: false, error: overloaded });
    this.gathered.push(body);
    this.gatheredBytes += body.bytes.length;
    if (this.gathered.length >= limits.singleEventsPerTaskMax) this.dispatchGathered();
    else if (!this.gatherScheduled && this.singleTasksInFlight < this.pool.threadCount) {
      this.gatherScheduled = true;
      setImmediate(() => this.dispatchGathered());
    }
  }

  /**
   * Validates the small plain single events gathered this turn, here, and
   * commits them: the hand-off to a worker and its wake-up cost more, in this
   * thread's time and in latency, than the few microseconds of parsing it
   * would move away (docs/decisions.md, "Threads and ingest"). Only the byte
   * scanners read them here; a body they leave, whose parse may cost more per
   * byte, goes to a worker after all.
   */
  private validateGatheredHere(): void {
    this.gatheredHereScheduled = false;
    const gathered = this.gatheredHere;
    if (gathered.length === 0) return;
    this.gatheredHere = [];
    let scanned: ReturnType<typeof scanSingleBodies>;
    try {
      scanned = scanSingleBodies(gathered);
    } catch (error) {
      return failBodies(gathered, error);
    }
    const bodies: GatheredBody[] = [];
    const results: IngestBodyResult[] = [];
    for (let index = 0; index < gathered.length; index++) {
      const taken = scanned.results[index];
      if (taken === undefined) this.gatherForPool(gathered[index]);
      else {
        bodies.push(gathered[index]);
        results.push(taken);
      }
    }
    if (bodies.length > 0) this.commitSingles({ kind: "ingest", results, chunks: scanned.chunks }, bodies);
  }

  /** Commits gathered single events' chunks and answers each body (results[i] is bodies[i]'s). */
  private commitSingles(result: IngestTaskResult, bodies: readonly GatheredBody[]): void {
    this.finish(result, "single").then(
      (replies) => {
        for (let index = 0; index < bodies.length; index++) bodies[index].onReply(replies[index]);
      },
      (error: unknown) => failBodies(bodies, error),
    );
  }

  private dispatchGathered(): void {
    this.gatherScheduled = false;
    const bodies = this.gathered;
    if (bodies.length === 0) return;
    this.singleTasksInFlight++;
    this.gathered = [];
    const view = BodySlabs.fits(this.gatheredBytes) ? this.slabs.take(this.gatheredBytes) : new Uint8Array(this.gatheredBytes);
    this.gatheredBytes = 0;
    const slices = new Float64Array(bodies.length * bodySliceFields);
    let offset = 0;
    for (let index = 0; index < bodies.length; index++) {
      const body = bodies[index];
      view.set(body.bytes, offset);
      const at = index * bodySliceFields;
      slices[at] = offset;
      slices[at + 1] = body.bytes.length;
      slices[at + 2] = bodyFlags(body.gzip, body.format);
      slices[at + 3] = body.receivedAtMs;
      offset += body.bytes.length;
    }
    const taskBack = () => {
      this.singleTasksInFlight--;
      if (view.buffer instanceof SharedArrayBuffer) this.slabs.give(view.buffer);
      // What gathered while the workers were busy leaves now, and is parsed while this task commits.
      if (!this.gatherScheduled && this.gathered.length > 0) this.dispatchGathered();
    };
    this.pool.ingest({ kind: "ingest", shape: "single", bodies: view.buffer, slices }).then(
      (result) => {
        taskBack();
        this.commitSingles(result, bodies);
      },
      (error: unknown) => {
        taskBack();
        failBodies(bodies, error);
      },
    );
  }

  /** Checks keys, commits each chunk once, and answers every body of the task. */
  private async finish(result: IngestTaskResult, shape: IngestShape): Promise<IngestReply[]> {
    const chunkOutcome = await Promise.all(
      result.chunks.map(async ({ apiKey, chunk }): Promise<ChunkOutcome> => {
        const workspaceId = this.credentials.workspaceIdForApiKey(apiKey);
        if (workspaceId === undefined) return { kind: "failed", error: unauthorized };
        if (chunk.byteLength === 0) return committedWhole;
        // Checked on the main thread, the single writer, so buckets need no locks; before the commit, so a refused chunk stores nothing.
        if (this.rateLimiter !== undefined && !this.rateLimiter.take(workspaceId, chunkRowCount(chunk), Date.now())) return { kind: "failed", error: rateLimited };
        try {
          const { refusals } = await this.store.commit(workspaceId, chunk);
          return refusals.length === 0 ? committedWhole : { kind: "committed", refusals };
        } catch (error) {
          log.error({ err: (error as Error).message }, "ingest commit failed");
          return { kind: "failed", error: { code: "unavailable", message: "events could not be stored durably; nothing was stored, retry later" } };
        }
      }),
    );
    const refusedSingles = shape === "single" && chunkOutcome.some((outcome) => outcome.kind === "committed" && outcome.refusals.length > 0) ? refusalsOfSingles(result.results, chunkOutcome) : undefined;
    if (refusedSingles !== undefined) eventsRefused.inc({ code: "invalid_request" }, refusedSingles.size);
    return result.results.map((body, index) => refusedSingles?.get(index) ?? this.reply(body, shape, chunkOutcome));
  }

  private reply(body: IngestBodyResult | StoredSingleEvent, shape: IngestShape, chunkOutcome: ChunkOutcome[]): IngestReply {
    // Its chunk's key was checked right before the commit (finish).
    if (typeof body === "number") {
      const outcome = chunkOutcome[body];
      if (outcome.kind !== "committed") return { ok: false, error: outcome.error };
      eventsAccepted.inc();
      return singleStored;
    }
    if (body.kind === "rejected") return { ok: false, error: body.error };
    if (body.apiKey === undefined) return { ok: false, error: unauthorized };
    // A body with committed rows had its key checked right before the commit (finish, via chunkOutcome).
    // Checking it again here would answer 401 for rows already stored when a revoke lands during the fsync.
    if (body.chunkIndex < 0 && this.credentials.workspaceIdForApiKey(body.apiKey) === undefined) return { ok: false, error: unauthorized };
    if (body.error) {
      // A single request's body is its event; a batch refused whole (envelope, size) counts only as a request.
      if (shape === "single" && body.error.code === "invalid_request") eventsRefused.inc({ code: body.error.code });
      return { ok: false, error: body.error };
    }
    let errors = body.errors;
    let refusedCount = body.refusedCount ?? 0;
    let acceptedCount = body.acceptedCount;
    if (body.chunkIndex >= 0) {
      const outcome = chunkOutcome[body.chunkIndex];
      if (outcome.kind === "failed") return { ok: false, error: outcome.error };
      if (outcome.refusals.length > 0 && shape === "batch") {
        // A batch's chunk is its own: its rows are its accepted events, in order.
        const refused = outcome.refusals.map((refusal): EventError => ({ index: body.eventIndexOfRow?.[refusal.row] ?? refusal.row, code: "invalid_request", message: refusalMessage(refusal) }));
        errors = [...errors, ...refused].sort((left, right) => left.index - right.index).slice(0, limits.batchErrorsReportedMax);
        acceptedCount -= refused.length;
        refusedCount += refused.length;
      }
    }
    // Counted per request, not per event: one increment for a batch of 1 000.
    eventsAccepted.inc(acceptedCount);
    if (refusedCount > 0) eventsRefused.inc({ code: "invalid_request" }, refusedCount);
    if (shape === "single") return singleStored;
    const answer: { ok: true; accepted: number; errors?: EventError[] } = { ok: true, accepted: acceptedCount };
    if (errors.length > 0) answer.errors = errors;
    return { ok: true, body: JSON.stringify(answer) };
  }

  /** SPEC §3: one `test_event` stored at server time; answers with its uuid and timestamp. */
  async testEvent(workspaceId: string): Promise<IngestReply> {
    if (this.store.writeQueueBytes >= limits.writeQueueBytesMax) return { ok: false, error: overloaded };
    const timeMs = Date.now();
    const eventId = crypto.randomUUID();
    const builder = new ChunkBuilder();
    builder.addRow(timeMs, "test_event", "test_event", Buffer.from(eventId.replaceAll("-", ""), "hex"));
    try {
      const { refusals } = await this.store.commit(workspaceId, builder.finish());
      if (refusals.length > 0) return { ok: false, error: { code: "invalid_request", message: refusalMessage(refusals[0]) } };
    } catch (error) {
      log.error({ err: (error as Error).message }, "test-event commit failed");
      return { ok: false, error: { code: "unavailable", message: "event could not be stored durably, retry later" } };
    }
    const timestamp = new Date(timeMs).toISOString().replace("T", " ").slice(0, 23);
    return { ok: true, body: JSON.stringify({ ok: true, eventId, timestamp }) };
  }
}
