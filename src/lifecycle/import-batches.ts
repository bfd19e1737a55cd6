/**
 * The sending half of `eventide import`: NDJSON lines' bytes copied as they
 * are into /ingest/batch bodies, cut at the server's caps (events, body
 * bytes, distinct UTC days), several requests in flight, and every answer
 * mapped back to the file's line numbers. Every event carries a uuid before
 * its batch is first sent (the reader adds one where a line has none), so any
 * batch or part of one can be sent again without storing an event twice: a
 * retry after no answer, the events after the last of the 100 errors an
 * answer names, the rest of a batch the server refused whole.
 *
 * A batch refused whole with 400 holds a line the server's JSON reader
 * refused (the reader checks only a line's outline): its lines are then
 * parsed here one by one, the unreadable ones reported, the rest sent again
 * re-serialized.
 */
import { strict as assert } from "node:assert";
import { randomUUID } from "node:crypto";
import { Agent, request, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { gzip as gzipCallback, constants as zlibConstants } from "node:zlib";
import { promisify } from "node:util";

import { limits } from "../config/limits.js";

const gzip = promisify(gzipCallback);
const dayMs = 86_400_000;

/** A batch without an answer for this long (retries included) stops the import: as long as a server's restart may take (startPrivateServer waits as long). */
const deliveryWindowMs = 120_000;
/** One request unanswered this long is abandoned and sent again. */
const requestTimeoutMs = 60_000;
const retryDelayBaseMs = 100;
const retryDelayMaxMs = 10_000;
/** A new batch's buffer; it doubles as lines arrive, and a settled batch's buffer is reused. */
const batchInitialBytes = 256 * 1024;

export interface LineError {
  line: number;
  code: string;
  message: string;
}

export interface BatchSenderEvents {
  accepted(count: number): void;
  refused(error: LineError): void;
}

/** A line re-serialized from its parsed fields (the path for lines the outline check cannot vouch for), or why it cannot be sent. */
export function reserializedLine(text: string): { json: string } | { error: { code: string; message: string } } {
  let event: unknown;
  try {
    event = JSON.parse(text);
  } catch {
    return { error: { code: "invalid_json", message: "not a JSON line" } };
  }
  if (typeof event !== "object" || event === null || Array.isArray(event)) return { error: { code: "invalid_json", message: "not a JSON object" } };
  // The fields as the file has them: the server validates them, and refuses a line's event alone.
  const { event: name, distinctId, properties, timestamp, uuid } = event as Record<string, unknown>;
  return { json: JSON.stringify({ event: name, distinctId, properties, timestamp, uuid: uuid ?? randomUUID() }) };
}

/** One request's body: the envelope's head, the lines separated by commas, and `]}` once sealed. */
class Batch {
  bytes: Buffer;
  length: number;
  /** Where each event's bytes start; each ends one byte (its comma) before the next one's start, the last at contentEnd. */
  readonly starts: number[] = [];
  readonly lineNumbers: number[] = [];
  readonly days: number[] = [];
  /** Its lines were re-serialized after the server refused it whole: a second refusal is the server's last word. */
  reparsed = false;

  constructor(private readonly head: Buffer) {
    this.bytes = Buffer.allocUnsafe(Math.max(batchInitialBytes, head.length * 2));
    this.length = this.head.copy(this.bytes, 0);
  }

  get count(): number {
    return this.starts.length;
  }

  reset(): void {
    this.length = this.head.length;
    this.starts.length = 0;
    this.lineNumbers.length = 0;
    this.days.length = 0;
    this.reparsed = false;
  }

  /** Bytes of the body once `eventBytes` more are added and it is sealed. */
  bytesWith(eventBytes: number): number {
    return this.length + (this.count > 0 ? 1 : 0) + eventBytes + 2;
  }

  /** Whether an event of `day` (NaN: none) keeps the batch within the days cap. */
  admitsDay(day: number): boolean {
    return Number.isNaN(day) || this.days.includes(day) || this.days.length < limits.batchDaysMax;
  }

  /** Room for `eventBytes` more and the sealing `]}`; returns where the event starts. */
  open(eventBytes: number, lineNumber: number, day: number): number {
    const needed = this.bytesWith(eventBytes);
    if (needed > this.bytes.length) {
      const grown = Buffer.allocUnsafe(Math.max(needed, this.bytes.length * 2));
      this.bytes.copy(grown, 0, 0, this.length);
      this.bytes = grown;
    }
    if (this.count > 0) this.bytes[this.length++] = 0x2c;
    this.starts.push(this.length);
    this.lineNumbers.push(lineNumber);
    if (!Number.isNaN(day) && !this.days.includes(day)) this.days.push(day);
    const start = this.length;
    this.length += eventBytes;
    return start;
  }

  /** The event's bytes, without its separating comma. */
  event(index: number): Buffer {
    const end = index + 1 < this.count ? this.starts[index + 1] - 1 : this.length;
    return this.bytes.subarray(this.starts[index], end);
  }

  body(): Buffer {
    this.bytes[this.length] = 0x5d;
    this.bytes[this.length + 1] = 0x7d;
    return this.bytes.subarray(0, this.length + 2);
  }
}

interface Answer {
  status: number;
  retryAfterMs: number;
  json: any;
}

export class BatchSender {
  private readonly head: Buffer;
  private readonly agent: Agent;
  private readonly url: URL;
  private current: Batch;
  private sealed: Batch | undefined;
  private readonly free: Batch[] = [];
  private inFlight = 0;
  private roomWaiter: (() => void) | undefined;
  private idleWaiter: (() => void) | undefined;
  /** Why the import stops: a refusal that every later batch would meet too. */
  failure: string | undefined;

  constructor(
    ingestUrl: string,
    apiKey: string,
    private readonly options: { requestsInFlightMax: number; gzip: boolean },
    private readonly events: BatchSenderEvents,
  ) {
    this.head = Buffer.from(`{"apiKey":${JSON.stringify(apiKey)},"events":[`);
    this.url = new URL("/ingest/batch", ingestUrl);
    const AgentOfScheme = this.url.protocol === "https:" ? HttpsAgent : Agent;
    this.agent = new AgentOfScheme({ keepAlive: true, maxSockets: options.requestsInFlightMax });
    this.current = new Batch(this.head);
  }

  /** The largest event a batch can carry. */
  get eventBytesMax(): number {
    return limits.batchBodyBytesMax - this.head.length - 2;
  }

  /** A sealed batch waits for a request slot: the reader should await `room()` before adding more. */
  get backlogged(): boolean {
    return this.sealed !== undefined;
  }

  room(): Promise<void> {
    if (this.sealed === undefined || this.failure !== undefined) return Promise.resolve();
    return new Promise((resolve) => (this.roomWaiter = resolve));
  }

  /**
   * Space for one event of `eventBytes` from line `lineNumber`, on UTC day `day` (NaN: none),
   * in the batch being filled; the caller writes the event's bytes at the returned offset of `bytes`.
   * The batch before it is sealed and sent when this one would not fit.
   */
  reserve(eventBytes: number, lineNumber: number, day: number): number {
    const batch = this.current;
    if (batch.count > 0 && (batch.count >= limits.batchEventsMax || batch.bytesWith(eventBytes) > limits.batchBodyBytesMax || !batch.admitsDay(day))) this.seal();
    return this.current.open(eventBytes, lineNumber, day);
  }

  /** The buffer `reserve` returned an offset into (it may move when the batch grows). */
  get bytes(): Buffer {
    return this.current.bytes;
  }

  /** Today's day, the day of events stored at their time of receipt. */
  static receiptDay(): number {
    return Math.floor(Date.now() / dayMs);
  }

  /** Sends what is left and resolves once every batch is answered for good. */
  async finish(): Promise<void> {
    await this.room();
    if (this.current.count > 0 && this.failure === undefined) this.seal();
    await this.room();
    if (this.inFlight > 0) await new Promise<void>((resolve) => (this.idleWaiter = resolve));
    this.agent.destroy();
  }

  private seal(): void {
    assert(this.sealed === undefined, "the reader awaits room() while a sealed batch waits");
    this.sealed = this.current;
    this.current = this.free.pop() ?? new Batch(this.head);
    this.dispatch();
  }

  private dispatch(): void {
    if (this.failure !== undefined) {
      this.sealed = undefined;
      this.roomWaiter?.();
      return;
    }
    if (this.sealed === undefined || this.inFlight >= this.options.requestsInFlightMax) return;
    const batch = this.sealed;
    this.sealed = undefined;
    this.inFlight++;
    const waiter = this.roomWaiter;
    this.roomWaiter = undefined;
    waiter?.();
    void this.deliver(batch)
      .catch((error: unknown) => {
        this.failure ??= `client error: ${(error as Error).message}`;
      })
      .finally(() => {
        this.inFlight--;
        batch.reset();
        this.free.push(batch);
        this.dispatch();
        if (this.inFlight === 0 && this.sealed === undefined) this.idleWaiter?.();
      });
  }

  /** Sends one batch, and what of it needs sending again, until every event is answered for good. */
  private async deliver(first: Batch): Promise<void> {
    let batch: Batch | undefined = first;
    while (batch !== undefined && batch.count > 0 && this.failure === undefined) {
      const answer = await this.post(batch);
      if (answer === undefined) return;
      batch = answer.status === 200 ? this.settled(batch, answer.json) : answer.status === 400 && !batch.reparsed ? this.reparsed(batch) : this.refusedWhole(batch, answer);
    }
  }

  /** Reports a 200's accepted and refused events; returns the events after the last of a full list of errors, whose fate it does not tell. */
  private settled(batch: Batch, json: any): Batch | undefined {
    const errors: Array<{ index: number; code: string; message: string }> = Array.isArray(json.errors) ? json.errors : [];
    for (const error of errors) this.events.refused({ line: batch.lineNumbers[error.index] ?? 0, code: error.code, message: error.message });
    if (errors.length < limits.batchErrorsReportedMax) {
      this.events.accepted(batch.count - errors.length);
      return undefined;
    }
    const told = errors[errors.length - 1].index + 1;
    this.events.accepted(told - errors.length);
    const rest = new Batch(this.head);
    for (let index = told; index < batch.count; index++) this.copyEvent(rest, batch.event(index), batch.lineNumbers[index]);
    rest.reparsed = batch.reparsed;
    return rest;
  }

  /** The batch's lines parsed one by one: the unreadable ones reported, the others re-serialized into a batch sent again. */
  private reparsed(batch: Batch): Batch {
    const again = new Batch(this.head);
    again.reparsed = true;
    for (let index = 0; index < batch.count; index++) {
      const line = batch.lineNumbers[index];
      const result = reserializedLine(batch.event(index).toString("utf8"));
      if ("error" in result) this.events.refused({ line, ...result.error });
      else this.copyEvent(again, Buffer.from(result.json), line);
    }
    return again;
  }

  private refusedWhole(batch: Batch, answer: Answer): undefined {
    const error = answer.json?.error;
    const lines = batch.count === 1 ? `line ${batch.lineNumbers[0]}` : `lines ${batch.lineNumbers[0]}–${batch.lineNumbers[batch.count - 1]}`;
    this.failure ??= `${error?.code ?? `status ${answer.status}`}: ${error?.message ?? "no reason given"} (${answer.status}, ${lines})`;
    return undefined;
  }

  private copyEvent(target: Batch, event: Buffer, lineNumber: number): void {
    // A part of a batch that was within the caps is within them again; its days are not needed.
    const offset = target.open(event.length, lineNumber, Number.NaN);
    event.copy(target.bytes, offset);
  }

  /** Posts the batch until an answer that is not worth waiting out comes; undefined once the import has failed. */
  private async post(batch: Batch): Promise<Answer | undefined> {
    const plain = batch.body();
    const body = this.options.gzip ? await gzip(plain, { level: zlibConstants.Z_BEST_SPEED }) : plain;
    const firstSentMs = Date.now();
    for (let attempt = 0; ; attempt++) {
      const outcome = await this.postOnce(body);
      if ("status" in outcome && outcome.status === 200 && outcome.json?.ok === true) return outcome;
      if ("status" in outcome && outcome.status !== 200 && outcome.status !== 408 && outcome.status !== 429 && outcome.status < 500) return outcome;
      const reason = "status" in outcome ? `status ${outcome.status}` : outcome.networkError;
      if (Date.now() - firstSentMs > deliveryWindowMs) {
        this.failure ??= `no answer within ${deliveryWindowMs} ms for lines ${batch.lineNumbers[0]}–${batch.lineNumbers[batch.count - 1]} (last: ${reason}); they may or may not be stored`;
        return undefined;
      }
      if (this.failure !== undefined) return undefined;
      const backoffMs = Math.random() * Math.min(retryDelayMaxMs, retryDelayBaseMs * 2 ** attempt);
      await new Promise((resolve) => setTimeout(resolve, Math.max("status" in outcome ? outcome.retryAfterMs : 0, backoffMs)));
    }
  }

  private postOnce(body: Buffer): Promise<Answer | { networkError: string }> {
    return new Promise((resolve) => {
      const headers: Record<string, string | number> = { "content-type": "application/json", "content-length": body.length };
      if (this.options.gzip) headers["content-encoding"] = "gzip";
      const send = this.url.protocol === "https:" ? httpsRequest : request;
      const outgoing = send(this.url, { method: "POST", agent: this.agent, headers }, (response: IncomingMessage) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("error", (error) => resolve({ networkError: error.message }));
        response.on("end", () => {
          let json: any;
          try {
            json = JSON.parse(Buffer.concat(chunks).toString("utf8"));
          } catch {
            json = undefined;
          }
          resolve({ status: response.statusCode ?? 0, retryAfterMs: retryAfterMs(response.headers["retry-after"]), json });
        });
      });
      outgoing.setTimeout(requestTimeoutMs, () => outgoing.destroy(new Error(`no answer within ${requestTimeoutMs} ms`)));
      outgoing.on("error", (error: NodeJS.ErrnoException) => resolve({ networkError: `${error.code ?? ""} ${error.message}`.trim() }));
      outgoing.end(body);
    });
  }
}

/** Retry-After in seconds; 0 when absent or not a number. */
function retryAfterMs(header: string | undefined): number {
  const seconds = Number(header);
  return header !== undefined && Number.isFinite(seconds) ? Math.max(0, seconds * 1000) : 0;
}
