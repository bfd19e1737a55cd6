/**
 * The Node client (`eventide/client`), at the start of an event's path on a
 * server: capture → a bounded queue → gzip batches → POST /ingest/batch →
 * a delivery report per event. Every event carries a uuid from the moment it
 * is captured, and every re-send (a retry, a request that died on a reused
 * keep-alive socket, the unknown tail of a batch) reuses it, so the server
 * stores each event once however often it arrives. Bounds are options with
 * defaults here: this module runs in users' processes, not in the server.
 */
import { EventEmitter } from "node:events";
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { randomUUID } from "node:crypto";
import { gzip as gzipCallback, constants as zlibConstants } from "node:zlib";
import { promisify } from "node:util";

const gzip = promisify(gzipCallback);

export interface EventideClientOptions {
  apiKey: string;
  /** The ingest URL, e.g. `http://127.0.0.1:8081`. */
  host: string;
  /** Events per request: the server takes at most 1 000 (default 1 000). */
  batchEventsMax?: number;
  /** Bytes of one request's JSON before compression: the server takes at most 20 MiB (default 20 MiB). */
  batchBytesMax?: number;
  /** Distinct UTC days of event timestamps in one request: the server takes at most 100 by default (EVENTIDE_BATCH_DAYS_MAX; default 100). */
  batchDaysMax?: number;
  /** How long a batch that is not full waits for more events (default 200 ms). */
  flushIntervalMs?: number;
  /** Events captured and not yet settled; beyond it capture() waits and tryCapture() returns false (default 10 000). */
  queueEventsMax?: number;
  /** …and their JSON bytes (default 64 MiB). */
  queueBytesMax?: number;
  /** Requests on their way at once (default 2). */
  requestsInFlightMax?: number;
  /** Compress request bodies (Content-Encoding: gzip; default true). */
  gzip?: boolean;
  /** A request unanswered for this long is abandoned and retried (default 30 000 ms). */
  requestTimeoutMs?: number;
  retryDelayBaseMs?: number;
  /** The longest wait between two attempts, unless the server's Retry-After asks for more (default 30 000 ms). */
  retryDelayMaxMs?: number;
  /** An event still unacknowledged this long after its batch was first sent is reported refused with `delivery_timeout` (default 10 min). */
  deliveryTimeoutMs?: number;
  /** Idle keep-alive sockets are closed after this long, before the server's own 10 s cut can race a new request (default 4 000 ms). */
  socketIdleMs?: number;
}

export interface CaptureInput {
  event: string;
  distinctId: string | number;
  properties?: Record<string, unknown>;
  /** Defaults to the time of capture (not of sending), so a retried event keeps its time. */
  timestamp?: Date | string;
  /** Defaults to a random UUID; give your own to make re-captures of the same event idempotent too. */
  uuid?: string;
}

export interface AcceptedEvent {
  uuid: string;
  input: CaptureInput;
}

export interface RefusedEvent {
  uuid: string;
  input: CaptureInput;
  /**
   * The server's code (`invalid_request`, `unauthorized`, `payload_too_large`, …), or
   * `delivery_timeout` when no answer came in time: such an event may or may not be stored,
   * and capturing it again with the same uuid within the server's 7-day uuid horizon is safe.
   */
  code: string;
  message: string;
  /** The HTTP status of the answer that refused it: 200 when the server refused this event alone (its neighbours may be stored), 0 when no answer came or the client refused it itself. */
  status: number;
}

/** What one answer settled: emitted as the client's `delivery` event. */
export interface DeliveryReport {
  accepted: AcceptedEvent[];
  refused: RefusedEvent[];
}

export interface EventideClientStats {
  /** Captured and not yet settled (queued, or in a request on its way). */
  queued: number;
  /** Captures waiting for room in the queue. */
  waiting: number;
  accepted: number;
  refused: number;
  /** Requests sent again (the same events, the same uuids). */
  retries: number;
}

interface Entry {
  uuid: string;
  input: CaptureInput;
  json: string;
  bytes: number;
  /** UTC day of the timestamp (days since 1970), or NaN when it does not parse: the server refuses those itself. */
  day: number;
  /** Order of capture: a flush waits for the entries captured before it. */
  sequence: number;
}

interface Refusal {
  entry: Entry;
  code: string;
  message: string;
  status: number;
}

interface FlushWaiter {
  beforeSequence: number;
  remaining: number;
  resolve(): void;
}

/** A failure worth another attempt: the events may or may not be stored, and their uuids make a re-send safe. */
interface RetryLater {
  retryAfterMs: number;
  reason: string;
  /** The request died on a kept-alive socket the server had closed: it never reached the server. */
  staleSocket: boolean;
}

const defaults = {
  batchEventsMax: 1000,
  batchBytesMax: 20 * 1024 * 1024,
  batchDaysMax: 100,
  flushIntervalMs: 200,
  queueEventsMax: 10_000,
  queueBytesMax: 64 * 1024 * 1024,
  requestsInFlightMax: 2,
  gzip: true,
  requestTimeoutMs: 30_000,
  retryDelayBaseMs: 100,
  retryDelayMaxMs: 30_000,
  deliveryTimeoutMs: 600_000,
  socketIdleMs: 4_000,
};
/** The server names at most this many refused events per answer; events after the last one named are sent again. */
const batchErrorsReportedMax = 100;
const dayMs = 86_400_000;
const retryableNetworkCodes = new Set(["ECONNRESET", "ECONNREFUSED", "EPIPE", "ETIMEDOUT", "ECONNABORTED", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN", "request_timeout"]);

/**
 * Back-pressure works like a Node stream with a hard bound: `capture()` returns a
 * promise that resolves once the event is in the queue (at once while there is
 * room), and `tryCapture()` returns false without taking the event when the
 * queue is full, with `drain` emitted once there is room again. Neither waits
 * for delivery: `delivery` events report each event's outcome, and `flush()` /
 * `shutdown()` resolve once every event captured before them is settled.
 */
export class EventideClient extends EventEmitter {
  private readonly options: Required<EventideClientOptions>;
  private readonly endpoint: URL;
  private readonly agent: HttpAgent;
  private readonly envelopeHead: string;
  private pending: Entry[] = [];
  private pendingBytes = 0;
  /** Captured and not settled: pending plus in requests. */
  private unsettledEvents = 0;
  private unsettledBytes = 0;
  private readonly roomWaiters: Array<{ entry: Entry; resolve(): void }> = [];
  private readonly flushWaiters: FlushWaiter[] = [];
  private requestsInFlight = 0;
  private lingerTimer: NodeJS.Timeout | undefined;
  private lingerDue = false;
  private flushing = 0;
  private nextSequence = 0;
  private drainOwed = false;
  private closed = false;
  private readonly counters = { accepted: 0, refused: 0, retries: 0 };

  constructor(options: EventideClientOptions) {
    super();
    if (typeof options?.apiKey !== "string" || typeof options.host !== "string") throw new TypeError("EventideClient: apiKey and host are required strings");
    this.options = { ...defaults, ...options };
    if (this.options.batchEventsMax > this.options.queueEventsMax) throw new RangeError("EventideClient: batchEventsMax must not exceed queueEventsMax");
    this.endpoint = new URL("/ingest/batch", this.options.host);
    const Agent = this.endpoint.protocol === "https:" ? HttpsAgent : HttpAgent;
    this.agent = new Agent({ keepAlive: true, maxSockets: this.options.requestsInFlightMax, timeout: this.options.socketIdleMs });
    this.envelopeHead = `{"apiKey":${JSON.stringify(this.options.apiKey)},"events":[`;
  }

  /** Resolves once the event is queued, waiting while the queue is full. */
  capture(input: CaptureInput): Promise<void> {
    const entry = this.entry(input);
    if (this.roomWaiters.length === 0 && this.hasRoom(entry)) {
      this.admit(entry);
      return Promise.resolve();
    }
    return new Promise((resolve) => this.roomWaiters.push({ entry, resolve }));
  }

  /** Queues the event and returns true, or returns false (the event not taken) when the queue is full; `drain` follows. */
  tryCapture(input: CaptureInput): boolean {
    const entry = this.entry(input);
    if (this.roomWaiters.length > 0 || !this.hasRoom(entry)) {
      this.drainOwed = true;
      return false;
    }
    this.admit(entry);
    return true;
  }

  /** Sends what is queued without waiting for full batches; resolves once every event captured before the call is settled. */
  flush(): Promise<void> {
    const beforeSequence = this.nextSequence;
    const remaining = this.unsettledEvents + this.roomWaiters.length;
    if (remaining === 0) return Promise.resolve();
    this.flushing++;
    this.pump();
    return new Promise((resolve) => this.flushWaiters.push({ beforeSequence, remaining, resolve: () => (this.flushing--, resolve()) }));
  }

  /** Refuses further captures, delivers (or reports) everything captured, and closes the connections. */
  async shutdown(): Promise<void> {
    this.closed = true;
    await this.flush();
    this.agent.destroy();
  }

  stats(): EventideClientStats {
    return { queued: this.unsettledEvents, waiting: this.roomWaiters.length, ...this.counters };
  }

  private entry(input: CaptureInput): Entry {
    if (this.closed) throw new Error("EventideClient: capture after shutdown()");
    const uuid = input.uuid ?? randomUUID();
    const timeMs = input.timestamp === undefined ? Date.now() : input.timestamp instanceof Date ? input.timestamp.getTime() : Date.parse(input.timestamp);
    const timestamp = input.timestamp instanceof Date || input.timestamp === undefined ? new Date(timeMs).toISOString() : input.timestamp;
    const json = JSON.stringify({ event: input.event, distinctId: input.distinctId, properties: input.properties, timestamp, uuid });
    return { uuid, input, json, bytes: Buffer.byteLength(json) + 1, day: Math.floor(timeMs / dayMs), sequence: this.nextSequence++ };
  }

  private hasRoom(entry: Entry): boolean {
    // An event larger than the whole byte budget is let in alone, so it is reported rather than waiting forever.
    if (this.unsettledEvents === 0) return true;
    return this.unsettledEvents < this.options.queueEventsMax && this.unsettledBytes + entry.bytes <= this.options.queueBytesMax;
  }

  private admit(entry: Entry): void {
    this.unsettledEvents++;
    this.unsettledBytes += entry.bytes;
    if (this.envelopeHead.length + entry.bytes + 2 > this.options.batchBytesMax) {
      this.settle([], [{ entry, code: "payload_too_large", message: `event is ${entry.bytes} bytes; a batch holds at most ${this.options.batchBytesMax}`, status: 0 }]);
      return;
    }
    this.pending.push(entry);
    this.pendingBytes += entry.bytes;
    this.pump();
  }

  /** Starts requests while there are slots and batches worth sending: full ones, or any once the linger time passed or a flush asks. */
  private pump(): void {
    while (this.requestsInFlight < this.options.requestsInFlightMax && this.pending.length > 0) {
      const full = this.pending.length >= this.options.batchEventsMax || this.envelopeHead.length + this.pendingBytes >= this.options.batchBytesMax;
      if (!full && this.flushing === 0 && !this.lingerDue) {
        this.lingerTimer ??= setTimeout(() => {
          this.lingerTimer = undefined;
          this.lingerDue = true;
          this.pump();
        }, this.options.flushIntervalMs);
        return;
      }
      this.sendBatch(this.takeBatch());
    }
  }

  private takeBatch(): Entry[] {
    if (this.lingerTimer !== undefined) clearTimeout(this.lingerTimer);
    this.lingerTimer = undefined;
    this.lingerDue = false;
    let bytes = this.envelopeHead.length + 2;
    let count = 0;
    const days: number[] = [];
    while (count < this.pending.length && count < this.options.batchEventsMax && bytes + this.pending[count].bytes <= this.options.batchBytesMax) {
      const day = this.pending[count].day;
      // A linear search over at most batchDaysMax days; an unparsable timestamp (NaN) is the server's to refuse and takes no day.
      if (!Number.isNaN(day) && !days.includes(day)) {
        if (days.length >= this.options.batchDaysMax) break;
        days.push(day);
      }
      bytes += this.pending[count].bytes;
      count++;
    }
    const batch = this.pending.splice(0, count);
    for (const entry of batch) this.pendingBytes -= entry.bytes;
    return batch;
  }

  /** Events back to the front of the queue, for a split batch or the unknown tail of an answer. */
  private requeue(entries: Entry[]): void {
    this.pending.unshift(...entries);
    for (const entry of entries) this.pendingBytes += entry.bytes;
  }

  private sendBatch(batch: Entry[]): void {
    if (batch.length === 0) return;
    this.requestsInFlight++;
    this.deliver(batch)
      .catch((error: unknown) => {
        // A bug in this module, not an operating error: report the events rather than hold them forever.
        const message = error instanceof Error ? error.message : String(error);
        this.settle([], batch.map((entry) => ({ entry, code: "client_error", message, status: 0 })));
      })
      .finally(() => {
        this.requestsInFlight--;
        this.pump();
      });
  }

  /** Sends one batch until it is answered for good, then settles its events. */
  private async deliver(batch: Entry[]): Promise<void> {
    const text = this.envelopeHead + batch.map((entry) => entry.json).join(",") + "]}";
    const body = this.options.gzip ? await gzip(text, { level: zlibConstants.Z_BEST_SPEED }) : Buffer.from(text, "utf8");
    const firstSentMs = Date.now();
    let attempt = 0;
    for (;;) {
      const outcome = await this.post(body);
      if (!("retryAfterMs" in outcome)) return this.applyAnswer(batch, outcome.status, outcome.body);
      if (Date.now() - firstSentMs > this.options.deliveryTimeoutMs) {
        const message = `not acknowledged within ${this.options.deliveryTimeoutMs} ms (last: ${outcome.reason}); it may or may not be stored`;
        return this.settle([], batch.map((entry) => ({ entry, code: "delivery_timeout", message, status: 0 })));
      }
      this.counters.retries++;
      // The server closed an idle kept-alive socket just as it was reused: the request never arrived, so go again at once.
      if (outcome.staleSocket && attempt === 0) continue;
      const backoffMs = Math.random() * Math.min(this.options.retryDelayMaxMs, this.options.retryDelayBaseMs * 2 ** attempt);
      attempt++;
      await new Promise((resolve) => setTimeout(resolve, Math.max(outcome.retryAfterMs, backoffMs)));
    }
  }

  private applyAnswer(batch: Entry[], status: number, body: any): void {
    if (status === 200 && body?.ok === true) {
      const refused = new Map<number, { code: string; message: string; status: number }>();
      for (const error of body.errors ?? []) refused.set(error.index, { code: error.code, message: error.message, status });
      // The server lists the first 100 refusals only: past the last one listed, which events were stored is unknown, so they go again.
      const listed = body.errors?.length ?? 0;
      const knownCount = listed >= batchErrorsReportedMax && body.accepted + listed < batch.length ? body.errors[listed - 1].index + 1 : batch.length;
      const accepted: Entry[] = [];
      const refusedEntries: Refusal[] = [];
      for (let index = 0; index < knownCount; index++) {
        const error = refused.get(index);
        if (error === undefined) accepted.push(batch[index]);
        else refusedEntries.push({ entry: batch[index], ...error });
      }
      if (knownCount < batch.length) this.requeue(batch.slice(knownCount));
      return this.settle(accepted, refusedEntries);
    }
    const code = typeof body?.error?.code === "string" ? body.error.code : `http_${status}`;
    const message = typeof body?.error?.message === "string" ? body.error.message : `status ${status}`;
    // A server configured with a lower body limit: halves are new requests, not a retry of the refused one.
    if (status === 413 && code === "payload_too_large" && batch.length > 1) {
      const half = batch.length >> 1;
      this.requeue(batch.slice(half));
      this.requeue(batch.slice(0, half));
      return;
    }
    this.settle([], batch.map((entry) => ({ entry, code, message, status })));
  }

  /** One POST; resolves with the final answer, or with how long to wait before another attempt. */
  private post(body: Buffer): Promise<{ status: number; body: any } | RetryLater> {
    return new Promise((resolve) => {
      const headers: Record<string, string> = { "content-type": "application/json", "content-length": String(body.length) };
      if (this.options.gzip) headers["content-encoding"] = "gzip";
      const send = this.endpoint.protocol === "https:" ? httpsRequest : httpRequest;
      let settled = false;
      const finish = (value: { status: number; body: any } | RetryLater) => {
        if (settled) return;
        settled = true;
        resolve(value);
      };
      const request = send(this.endpoint, { method: "POST", headers, agent: this.agent }, (response: IncomingMessage) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("error", (error) => finish({ retryAfterMs: 0, reason: error.message, staleSocket: false }));
        response.on("end", () => {
          const status = response.statusCode ?? 0;
          let parsed: any;
          try {
            parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"));
          } catch {
            parsed = undefined;
          }
          if (status === 408 || status === 429 || status >= 500) {
            finish({ retryAfterMs: retryAfterMs(response.headers["retry-after"]), reason: `status ${status}`, staleSocket: false });
          } else if (status === 200 && parsed?.ok !== true) {
            // A 200 whose body did not arrive whole: the events' fate is unknown.
            finish({ retryAfterMs: 0, reason: "unreadable answer", staleSocket: false });
          } else finish({ status, body: parsed });
        });
      });
      request.setTimeout(this.options.requestTimeoutMs, () => request.destroy(Object.assign(new Error("request timed out"), { code: "request_timeout" })));
      request.on("error", (error: NodeJS.ErrnoException) => {
        const code = error.code ?? "";
        // Anything else (a bad URL, TLS misconfiguration) would fail the same way again.
        const retryable = retryableNetworkCodes.has(code) || code.startsWith("UND_ERR") || request.reusedSocket;
        if (retryable) finish({ retryAfterMs: 0, reason: `${code} ${error.message}`, staleSocket: request.reusedSocket });
        else finish({ status: 0, body: { error: { code: code || "network_error", message: error.message } } });
      });
      request.end(body);
    });
  }

  private settle(accepted: Entry[], refused: Refusal[]): void {
    const settledEntries = [...accepted, ...refused.map((item) => item.entry)];
    for (const entry of settledEntries) {
      this.unsettledEvents--;
      this.unsettledBytes -= entry.bytes;
    }
    this.counters.accepted += accepted.length;
    this.counters.refused += refused.length;
    this.emit("delivery", {
      accepted: accepted.map((entry) => ({ uuid: entry.uuid, input: entry.input })),
      refused: refused.map(({ entry, code, message, status }) => ({ uuid: entry.uuid, input: entry.input, code, message, status })),
    } satisfies DeliveryReport);
    this.admitWaiters();
    for (let index = this.flushWaiters.length - 1; index >= 0; index--) {
      const waiter = this.flushWaiters[index];
      for (const entry of settledEntries) if (entry.sequence < waiter.beforeSequence) waiter.remaining--;
      if (waiter.remaining > 0) continue;
      this.flushWaiters.splice(index, 1);
      waiter.resolve();
    }
  }

  private admitWaiters(): void {
    while (this.roomWaiters.length > 0 && this.hasRoom(this.roomWaiters[0].entry)) {
      const waiter = this.roomWaiters.shift()!;
      this.admit(waiter.entry);
      waiter.resolve();
    }
    if (this.drainOwed && this.roomWaiters.length === 0 && this.unsettledEvents < this.options.queueEventsMax) {
      this.drainOwed = false;
      this.emit("drain");
    }
  }
}

/** Retry-After in seconds or as an HTTP date; 0 when absent. */
function retryAfterMs(header: string | undefined): number {
  if (header === undefined) return 0;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const dateMs = Date.parse(header);
  return Number.isFinite(dateMs) ? Math.max(0, dateMs - Date.now()) : 0;
}
