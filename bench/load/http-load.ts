/**
 * HTTP/1.1 load generator for the benchmarks, closed-loop or open-loop. It
 * sits in front of the HTTP stage and runs in its own process (`node
 * dist/bench/load/http-load.js …`), so it shares no event loop with the server
 * or with the benchmark driver; it prints one JSON report on stdout (and, with
 * --progress-ms, one progress line per interval before it).
 *
 * Closed loop (default): each connection sends its next request when the last
 * one is answered — the server's maximum throughput at that concurrency.
 * Open loop (--rate R): requests are due at fixed times R per second whatever
 * the server does (./open-loop-schedule.ts), and latency counts from the
 * intended send time, so a stall shows up in every request it delayed
 * (coordinated omission handled); the time from the actual send, the service
 * time, is reported beside it.
 *
 * Estimate: a request costs the generator one write syscall, one or two read
 * syscalls and ~1–2 µs of JavaScript (copy a prebuilt request, restamp uuids,
 * find the end of a ~100-byte response) — ~10 µs in all, so one core drives
 * ~100 k small requests/s, above the ~89 k requests/s a bare uWS server
 * answers. A 1 000-event batch is ~235 KB: copying it (~15 µs at ~15 GB/s),
 * restamping 900 uuids (~10 µs) and pushing it through loopback TCP (~50 µs
 * at ~5 GB/s) keep ~1 000 batches/s under half a core, above the ~630 batches/s
 * of the ceiling. When the generator's own CPU use nears one core the report
 * says `saturated`, and `--processes` splits the connections over more
 * generator processes.
 *
 * Why raw sockets: `http.request` and `fetch` allocate a request object, a
 * header map and a stream per request and cost 20–60 µs each, which would
 * make the generator, not the server, the bottleneck.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { pack } from "msgpackr";
import { firstIndexAtOrAfter, OpenLoopDispatcher, processSchedule } from "./open-loop-schedule.js";

// ---------------------------------------------------------------------------
// Latency histogram: log-linear buckets over whole microseconds, 32 linear
// sub-buckets per power of two, so any recorded value is within ~3 % of its
// bucket and the whole table is 864 counters (HdrHistogram's layout, small).

const subBucketBits = 5;
const subBucketCount = 1 << subBucketBits;
const latencyBucketCount = (31 - subBucketBits + 1) * subBucketCount;

export class LatencyHistogram {
  readonly counts = new Float64Array(latencyBucketCount);
  totalCount = 0;
  sumMicroseconds = 0;
  maxMicroseconds = 0;

  static bucketOf(microseconds: number): number {
    const value = microseconds < 1 ? 0 : microseconds > 0x7fff_ffff ? 0x7fff_ffff : microseconds | 0;
    if (value < subBucketCount) return value;
    const magnitude = 31 - Math.clz32(value);
    return (magnitude - subBucketBits + 1) * subBucketCount + ((value >>> (magnitude - subBucketBits)) & (subBucketCount - 1));
  }

  /** The middle of a bucket's range, in microseconds. */
  static valueOf(bucket: number): number {
    if (bucket < subBucketCount) return bucket;
    const magnitude = Math.floor(bucket / subBucketCount) + subBucketBits - 1;
    const sub = bucket % subBucketCount;
    const width = 2 ** (magnitude - subBucketBits);
    return (subBucketCount + sub) * width + (width - 1) / 2;
  }

  record(microseconds: number): void {
    this.counts[LatencyHistogram.bucketOf(microseconds)] += 1;
    this.totalCount += 1;
    this.sumMicroseconds += microseconds;
    if (microseconds > this.maxMicroseconds) this.maxMicroseconds = microseconds;
  }

  percentileMicroseconds(percentile: number): number {
    if (this.totalCount === 0) return Number.NaN;
    const rank = Math.max(1, Math.ceil((percentile / 100) * this.totalCount));
    let seen = 0;
    for (let bucket = 0; bucket < latencyBucketCount; bucket += 1) {
      seen += this.counts[bucket];
      if (seen >= rank) return Math.min(LatencyHistogram.valueOf(bucket), this.maxMicroseconds);
    }
    return this.maxMicroseconds;
  }

  /** Non-empty buckets as [bucket, count] pairs, so reports from several processes can be merged. */
  sparse(): [number, number][] {
    const pairs: [number, number][] = [];
    for (let bucket = 0; bucket < latencyBucketCount; bucket += 1) if (this.counts[bucket] > 0) pairs.push([bucket, this.counts[bucket]]);
    return pairs;
  }

  addSparse(pairs: readonly [number, number][], sumMicroseconds: number, maxMicroseconds: number): void {
    for (const [bucket, count] of pairs) {
      this.counts[bucket] += count;
      this.totalCount += count;
    }
    this.sumMicroseconds += sumMicroseconds;
    if (maxMicroseconds > this.maxMicroseconds) this.maxMicroseconds = maxMicroseconds;
  }

  reset(): void {
    this.counts.fill(0);
    this.totalCount = 0;
    this.sumMicroseconds = 0;
    this.maxMicroseconds = 0;
  }

  toJSON(): SparseHistogram {
    return { buckets: this.sparse(), sumMicroseconds: this.sumMicroseconds, maxMicroseconds: this.maxMicroseconds };
  }

  static fromSparse(histogram: SparseHistogram): LatencyHistogram {
    const result = new LatencyHistogram();
    result.addSparse(histogram.buckets, histogram.sumMicroseconds, histogram.maxMicroseconds);
    return result;
  }
}

export interface SparseHistogram {
  buckets: [number, number][];
  sumMicroseconds: number;
  maxMicroseconds: number;
}

export interface LatencySummary {
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

/** Percentiles of a histogram in milliseconds (NaN when it is empty). */
export function summarizeLatency(histogram: LatencyHistogram): LatencySummary {
  const at = (percentile: number) => histogram.percentileMicroseconds(percentile) / 1000;
  return {
    p50: at(50),
    p90: at(90),
    p95: at(95),
    p99: at(99),
    p999: at(99.9),
    max: histogram.totalCount === 0 ? Number.NaN : histogram.maxMicroseconds / 1000,
    mean: histogram.totalCount === 0 ? Number.NaN : histogram.sumMicroseconds / histogram.totalCount / 1000,
  };
}

// ---------------------------------------------------------------------------
// Requests: each body becomes one prebuilt request (head + body in one buffer),
// with the offsets of its uuids so they can be restamped per send.

const uuidKey = Buffer.from('"uuid":"', "latin1");
/** The same member in msgpack as msgpackr packs it: fixstr "uuid", then a str8 of 36 bytes. */
const msgpackUuidKey = Buffer.from([0xa4, ...Buffer.from("uuid", "latin1"), 0xd9, 36]);
const uuidLength = 36;
/** Two lower-case hex digits per byte value, for restamping without string building. */
const hexPairs = new Uint8Array(512);
for (let value = 0; value < 256; value += 1) {
  const text = value.toString(16).padStart(2, "0");
  hexPairs[value * 2] = text.charCodeAt(0);
  hexPairs[value * 2 + 1] = text.charCodeAt(1);
}

function isHexDigit(byte: number): boolean {
  return (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) || (byte >= 0x41 && byte <= 0x46);
}

interface PreparedRequest {
  bytes: Buffer;
  /** Offset in `bytes` of each uuid's first character. */
  uuidOffsets: Int32Array;
  /** Index into the run's tags: requests of one tag share a histogram (one query kind, say). */
  tag: number;
  /** Events an OK answer acknowledges (1 000 for a full batch, 0 for a query). */
  eventsPerBody: number;
}

function findUuidOffsets(request: Buffer, bodyStart: number, key = uuidKey): Int32Array {
  const offsets: number[] = [];
  let from = bodyStart;
  for (;;) {
    const at = request.indexOf(key, from);
    if (at < 0) break;
    const start = at + key.length;
    from = start;
    if (start + uuidLength > request.length || (key === uuidKey && request[start + uuidLength] !== 0x22)) continue;
    if (request[start + 8] !== 0x2d || request[start + 13] !== 0x2d || request[start + 18] !== 0x2d || request[start + 23] !== 0x2d) continue;
    let hex = true;
    for (let index = 0; index < 8 && hex; index += 1) hex = isHexDigit(request[start + index]);
    for (let index = 9; index < 13 && hex; index += 1) hex = isHexDigit(request[start + index]);
    if (hex) offsets.push(start);
  }
  return Int32Array.from(offsets);
}

export function prepareRequests(options: {
  host: string;
  port: number;
  path: string;
  bodies: readonly Buffer[];
  restampUuids: boolean;
  headers?: Readonly<Record<string, string>>;
  tag?: number;
  eventsPerBody?: number;
}): PreparedRequest[] {
  let extraHeaders = "";
  // A msgpack body names its own content type (and its uuids are found by their msgpack form).
  const msgpack = Object.entries(options.headers ?? {}).some(([name, value]) => name.toLowerCase() === "content-type" && value === "application/msgpack");
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    if (/[\r\n]/.test(name) || /[\r\n]/.test(value)) throw new Error(`header ${JSON.stringify(name)} contains a line break`);
    extraHeaders += `${name}: ${value}\r\n`;
  }
  return options.bodies.map((body) => {
    const head = Buffer.from(
      `POST ${options.path} HTTP/1.1\r\nHost: ${options.host}:${options.port}\r\n${msgpack ? "" : "Content-Type: application/json\r\n"}${extraHeaders}Content-Length: ${body.length}\r\n\r\n`,
      "latin1",
    );
    const bytes = Buffer.concat([head, body]);
    return {
      bytes,
      uuidOffsets: options.restampUuids ? findUuidOffsets(bytes, head.length, msgpack ? msgpackUuidKey : uuidKey) : new Int32Array(0),
      tag: options.tag ?? 0,
      eventsPerBody: options.eventsPerBody ?? 1,
    };
  });
}

/**
 * One line of a requests file (--requests): a request template with its own
 * path, headers and tag, so one generator can mix kinds of request (the
 * queries of the mixed benchmark) and still report each kind on its own.
 */
export interface RequestTemplate {
  tag: string;
  path: string;
  headers?: Record<string, string>;
  /** The body as sent (a JSON document, as text). */
  body: string;
  /** Events an OK answer acknowledges; 0 for queries. */
  eventsPerBody?: number;
}

/** The file format of --requests: one RequestTemplate as JSON per line. */
export function requestsFileText(templates: readonly RequestTemplate[]): string {
  return templates.map((template) => JSON.stringify(template)).join("\n") + "\n";
}

// ---------------------------------------------------------------------------
// Response parsing: status line, Content-Length or chunked framing, nothing else.

const enum ParseState {
  Head,
  FixedBody,
  ChunkSize,
  ChunkSizeLineEnd,
  ChunkData,
  ChunkDataEnd,
  Trailer,
}

const headBytesMax = 16_384;
const sampleBodyBytesMax = 512;

interface LoadOptions {
  host: string;
  port: number;
  requests: PreparedRequest[];
  tags: string[];
  connections: number;
  /** Index of the first template to send, so consecutive runs can ask different questions. */
  requestOffset: number;
  warmupMs: number;
  durationMs: number;
  /** Second uuid group written into every uuid, unique per generator process across a benchmark. */
  uuidStamp: number;
  /** Open loop: the requests per second of all generator processes together; 0 for a closed loop. */
  ratePerSecond: number;
  processIndex: number;
  processCount: number;
  /** Open loop: how long after the window to wait for its late answers before counting them as timed out. */
  drainMs: number;
  /** Emit a progress line this often; 0 for none. */
  progressMs: number;
}

/** Counters of one tag (or of everything), for the whole window and for the current progress interval. */
class TagTally {
  requests = 0;
  okResponses = 0;
  okEvents = 0;
  readonly histogram = new LatencyHistogram();
  intervalCompleted = 0;
  intervalOk = 0;
  intervalOkEvents = 0;
  readonly intervalHistogram = new LatencyHistogram();
}

interface Tally {
  measuring: boolean;
  okResponses: number;
  okEvents: number;
  /** Acknowledged over the whole run, warm-up and drain included: what the server stored. */
  allOkEvents: number;
  statusCounts: Map<number, number>;
  sampleBodies: Map<number, string>;
  socketErrors: number;
  reconnects: number;
  protocolErrors: number;
  /** Open loop: measured requests never answered before the drain deadline. */
  timedOut: number;
  bytesSent: number;
  /** Latency as the run defines it: from the intended send time (open loop) or the actual one (closed loop). */
  histogram: LatencyHistogram;
  /** From the actual send: what the server and the network took, without waiting for a connection. */
  serviceHistogram: LatencyHistogram;
  /** Open loop: how late the generator itself sent a request that had an idle connection waiting for it. */
  schedulerLagHistogram: LatencyHistogram;
  tags: TagTally[];
  /** Distinct request stamps handed out so far in this process. */
  requestCounter: number;
  /** Closed loop: requests sent so far by this process, which picks the next template. */
  sendCounter: number;
  /** Requests sent in the current progress interval. */
  intervalSent: number;
  intervalErrors: number;
}

/** A 32-bit mix per uuid position, so the uuids of one request do not share a prefix. */
const positionMix = new Int32Array(1024);
for (let position = 0; position < positionMix.length; position += 1) {
  let value = Math.imul(position + 1, 0x85eb_ca6b);
  value ^= value >>> 13;
  value = Math.imul(value, 0xc2b2_ae35);
  positionMix[position] = value ^ (value >>> 16);
}

/** What a connection does when it is free: send at once (closed loop) or offer itself to the dispatcher (open loop). */
type ReadyHandler = (connection: Connection) => void;

class Connection {
  private socket: Socket | null = null;
  private readonly readBuffer = Buffer.allocUnsafe(65_536);
  private readonly headBuffer = Buffer.allocUnsafe(headBytesMax);
  private readonly scratch: Buffer;
  private headLength = 0;
  private state = ParseState.Head;
  private status = 0;
  private remaining = 0;
  private sampleWanted = false;
  private sample = "";
  private request: PreparedRequest | null = null;
  private sentAtMs = 0;
  /** Open loop: the intended send time of the request in flight; NaN in a closed loop. */
  private intendedMs = Number.NaN;
  /** Open loop: whether the request in flight was due inside the measurement window. */
  private measuredRequest = false;
  /** When this connection last became free (open loop: separates the generator's lag from queueing). */
  idleSinceMs = 0;
  private inFlight = false;
  private stopped = false;
  private onIdle: (() => void) | null = null;
  onReady: ReadyHandler = (connection) => connection.send();
  /** Called when the socket closes while the connection waits idle (open loop: it must leave the idle list). */
  onDisconnect: (connection: Connection) => void = () => undefined;

  constructor(
    private readonly options: LoadOptions,
    private readonly tally: Tally,
  ) {
    let longest = 0;
    for (const request of options.requests) longest = Math.max(longest, request.bytes.length);
    this.scratch = Buffer.allocUnsafe(longest);
  }

  get busy(): boolean {
    return this.inFlight;
  }

  open(): Promise<void> {
    return new Promise((resolveOpen, rejectOpen) => {
      const socket = connect({
        host: this.options.host,
        port: this.options.port,
        noDelay: true,
        // One read buffer per connection, reused for every read: no Buffer per chunk.
        onread: {
          buffer: this.readBuffer,
          callback: (length: number, buffer: Uint8Array) => {
            this.onRead(length, buffer as Buffer);
            return true; // false would pause reading
          },
        },
      });
      socket.once("connect", () => {
        socket.off("error", rejectOpen);
        socket.on("error", () => {
          this.tally.socketErrors += 1;
        });
        socket.on("close", () => this.onClose(socket));
        resolveOpen();
      });
      socket.once("error", rejectOpen);
      this.socket = socket;
    });
  }

  start(): void {
    this.idleSinceMs = performance.now();
    this.onReady(this);
  }

  /** Stop after the request in flight; resolves once the connection is idle. */
  stop(): Promise<void> {
    this.stopped = true;
    if (!this.inFlight) return Promise.resolve();
    return new Promise((resolveIdle) => {
      this.onIdle = resolveIdle;
    });
  }

  close(): void {
    this.stopped = true;
    this.socket?.destroy();
  }

  /** Open loop: the request in flight, if it is a measured one (for timeouts at the end). */
  measuredPending(): { tag: number; intendedMs: number } | undefined {
    return this.inFlight && this.measuredRequest && this.request !== null ? { tag: this.request.tag, intendedMs: this.intendedMs } : undefined;
  }

  /** Open loop: sends request `index` of the schedule, due at `intendedMs`; false when the connection cannot send. */
  sendScheduled(index: number, intendedMs: number, measured: boolean): boolean {
    this.intendedMs = intendedMs;
    this.measuredRequest = measured;
    return this.send(index);
  }

  /**
   * Sends the process's `sequence`-th request (closed loop: the next of the
   * process's counter). Consecutive sends of all connections and processes
   * walk the templates in order — process p of P takes every P-th, starting at
   * the offset — so n templates are n distinct requests before any repeats
   * (it matters for cached answers). False when the connection cannot send.
   */
  send(sequence = this.tally.sendCounter++): boolean {
    const socket = this.socket;
    if (socket === null || this.stopped) return false;
    const options = this.options;
    const requests = options.requests;
    const request = requests[(options.requestOffset + options.processIndex + sequence * options.processCount) % requests.length];
    let bytes = request.bytes;
    const offsets = request.uuidOffsets;
    if (offsets.length > 0) {
      // The shared template is copied first: a queued write keeps a reference to
      // its buffer, so restamping the template in place could corrupt another
      // connection's request still waiting to be written. The connection's own
      // scratch buffer is free again once the answer came, unless the server
      // answered before reading the whole body (an early error): then copy afresh.
      const scratch = socket.writableLength === 0 ? this.scratch : Buffer.allocUnsafe(request.bytes.length);
      request.bytes.copy(scratch, 0);
      const base = Math.imul(this.tally.requestCounter, 0x9e37_79b1);
      this.tally.requestCounter += 1;
      const stamp = this.options.uuidStamp;
      const stampHigh = (stamp >>> 8) & 0xff;
      const stampLow = stamp & 0xff;
      for (let position = 0; position < offsets.length; position += 1) {
        const at = offsets[position];
        const first = base ^ positionMix[position & 1023];
        let byte = (first >>> 24) & 0xff;
        scratch[at] = hexPairs[byte * 2];
        scratch[at + 1] = hexPairs[byte * 2 + 1];
        byte = (first >>> 16) & 0xff;
        scratch[at + 2] = hexPairs[byte * 2];
        scratch[at + 3] = hexPairs[byte * 2 + 1];
        byte = (first >>> 8) & 0xff;
        scratch[at + 4] = hexPairs[byte * 2];
        scratch[at + 5] = hexPairs[byte * 2 + 1];
        byte = first & 0xff;
        scratch[at + 6] = hexPairs[byte * 2];
        scratch[at + 7] = hexPairs[byte * 2 + 1];
        scratch[at + 9] = hexPairs[stampHigh * 2];
        scratch[at + 10] = hexPairs[stampHigh * 2 + 1];
        scratch[at + 11] = hexPairs[stampLow * 2];
        scratch[at + 12] = hexPairs[stampLow * 2 + 1];
      }
      bytes = scratch.subarray(0, request.bytes.length);
    }
    this.request = request;
    this.inFlight = true;
    this.state = ParseState.Head;
    this.headLength = 0;
    this.sentAtMs = performance.now();
    this.tally.intervalSent += 1;
    if (this.tally.measuring) this.tally.bytesSent += bytes.length;
    socket.write(bytes);
    return true;
  }

  private onRead(length: number, buffer: Buffer): void {
    let offset = 0;
    while (offset < length) {
      if (!this.inFlight) {
        // Bytes nobody asked for: the server answered twice or framing was misread.
        this.tally.protocolErrors += 1;
        this.socket?.destroy();
        return;
      }
      offset = this.consume(buffer, offset, length);
    }
  }

  /** Advances the parser over buffer[offset, end) and returns where it stopped. */
  private consume(buffer: Buffer, offset: number, end: number): number {
    switch (this.state) {
      case ParseState.Head: {
        const available = Math.min(end - offset, headBytesMax - this.headLength);
        if (available === 0) {
          // No end of head within headBytesMax: not an HTTP answer we can frame.
          this.tally.protocolErrors += 1;
          this.socket?.destroy();
          return end;
        }
        buffer.copy(this.headBuffer, this.headLength, offset, offset + available);
        const searchFrom = Math.max(0, this.headLength - 3);
        this.headLength += available;
        const headEnd = this.headBuffer.subarray(0, this.headLength).indexOf("\r\n\r\n", searchFrom, "latin1");
        if (headEnd < 0) return offset + available;
        const consumed = headEnd + 4 - (this.headLength - available);
        this.parseHead(headEnd);
        return offset + consumed;
      }
      case ParseState.FixedBody: {
        const take = Math.min(this.remaining, end - offset);
        if (this.sampleWanted) this.sample += buffer.toString("latin1", offset, offset + Math.min(take, sampleBodyBytesMax));
        this.remaining -= take;
        if (this.remaining === 0) this.complete();
        return offset + take;
      }
      case ParseState.ChunkSize: {
        let at = offset;
        while (at < end) {
          const byte = buffer[at];
          at += 1;
          if (byte === 0x0d) {
            this.state = ParseState.ChunkSizeLineEnd;
            return at;
          }
          const digit = byte <= 0x39 ? byte - 0x30 : (byte | 0x20) - 0x57;
          // Chunk extensions (";…") are ignored by skipping non-hex characters.
          if (digit >= 0 && digit < 16) this.remaining = this.remaining * 16 + digit;
        }
        return at;
      }
      case ParseState.ChunkSizeLineEnd: {
        // Past the "\n" of the size line; a zero size starts the trailer section.
        this.state = this.remaining === 0 ? ParseState.Trailer : ParseState.ChunkData;
        this.headLength = 0;
        return offset + 1;
      }
      case ParseState.ChunkData: {
        const take = Math.min(this.remaining, end - offset);
        if (this.sampleWanted && this.sample.length < sampleBodyBytesMax) this.sample += buffer.toString("latin1", offset, offset + take);
        this.remaining -= take;
        if (this.remaining === 0) this.state = ParseState.ChunkDataEnd;
        return offset + take;
      }
      case ParseState.ChunkDataEnd: {
        // The "\r\n" after a chunk's data; headLength counts its bytes.
        const take = Math.min(2 - this.headLength, end - offset);
        this.headLength += take;
        if (this.headLength === 2) {
          this.state = ParseState.ChunkSize;
          this.remaining = 0;
          this.headLength = 0;
        }
        return offset + take;
      }
      case ParseState.Trailer: {
        // Trailer lines end with an empty line; headLength counts the current line's bytes.
        let at = offset;
        while (at < end) {
          const byte = buffer[at];
          at += 1;
          if (byte === 0x0a) {
            if (this.headLength === 0) {
              this.complete();
              return at;
            }
            this.headLength = 0;
          } else if (byte !== 0x0d) {
            this.headLength += 1;
          }
        }
        return at;
      }
    }
  }

  private parseHead(headEnd: number): void {
    const head = this.headBuffer;
    // "HTTP/1.1 200 OK": the status is always bytes 9–11.
    this.status = (head[9] - 0x30) * 100 + (head[10] - 0x30) * 10 + (head[11] - 0x30);
    const text = head.toString("latin1", 0, headEnd).toLowerCase();
    this.sampleWanted = !this.tally.sampleBodies.has(this.status);
    this.sample = "";
    if (text.includes("\r\ntransfer-encoding: chunked")) {
      this.state = ParseState.ChunkSize;
      this.remaining = 0;
      return;
    }
    const lengthAt = text.indexOf("\r\ncontent-length:");
    const contentLength = lengthAt < 0 ? 0 : Number.parseInt(text.slice(lengthAt + 17, text.indexOf("\r\n", lengthAt + 17) >>> 0), 10);
    this.remaining = Number.isFinite(contentLength) ? contentLength : 0;
    this.state = ParseState.FixedBody;
    if (this.remaining === 0) this.complete();
  }

  private complete(): void {
    const tally = this.tally;
    const status = this.status;
    const request = this.request!;
    if (this.sampleWanted) tally.sampleBodies.set(status, this.sample);
    this.sampleWanted = false;
    this.state = ParseState.Head;
    this.headLength = 0;
    this.inFlight = false;
    const nowMs = performance.now();
    const ok = status >= 200 && status < 300;
    const openLoop = !Number.isNaN(this.intendedMs);
    const latencyMicroseconds = Math.round((nowMs - (openLoop ? this.intendedMs : this.sentAtMs)) * 1000);
    const tag = tally.tags[request.tag];
    if (ok) tally.allOkEvents += request.eventsPerBody;
    tag.intervalCompleted += 1;
    tag.intervalHistogram.record(latencyMicroseconds);
    if (ok) {
      tag.intervalOk += 1;
      tag.intervalOkEvents += request.eventsPerBody;
    } else {
      tally.intervalErrors += 1;
    }
    if (openLoop ? this.measuredRequest : tally.measuring) {
      tally.histogram.record(latencyMicroseconds);
      tally.serviceHistogram.record(Math.round((nowMs - this.sentAtMs) * 1000));
      tally.statusCounts.set(status, (tally.statusCounts.get(status) ?? 0) + 1);
      tag.requests += 1;
      tag.histogram.record(latencyMicroseconds);
      if (ok) {
        tally.okResponses += 1;
        tally.okEvents += request.eventsPerBody;
        tag.okResponses += 1;
        tag.okEvents += request.eventsPerBody;
      }
    }
    this.measuredRequest = false;
    this.request = null;
    if (this.stopped) {
      this.onIdle?.();
      this.onIdle = null;
      return;
    }
    this.idleSinceMs = nowMs;
    this.onReady(this);
  }

  /** A dropped connection is reopened so the loop keeps N requests in flight. */
  private onClose(socket: Socket): void {
    if (socket !== this.socket) return;
    this.socket = null;
    const wasInFlight = this.inFlight;
    this.inFlight = false;
    this.measuredRequest = false;
    this.request = null;
    if (!wasInFlight) this.onDisconnect(this);
    if (this.stopped) {
      this.onIdle?.();
      this.onIdle = null;
      return;
    }
    if (this.tally.measuring) {
      this.tally.reconnects += 1;
      if (wasInFlight) this.tally.socketErrors += 1;
    }
    this.reconnect();
  }

  private reconnect(): void {
    setTimeout(() => {
      if (this.stopped) return;
      this.open().then(
        () => {
          this.idleSinceMs = performance.now();
          this.onReady(this);
        },
        () => {
          this.socket = null;
          this.reconnect();
        },
      );
    }, 10);
  }
}

export interface TagReport {
  requests: number;
  okResponses: number;
  okEvents: number;
  requestsPerSecond: number;
  latencyMs: LatencySummary;
  histogram: SparseHistogram;
}

export interface LoadReport {
  url: string;
  /** `closed`: each connection sends when answered; `open`: requests due at a fixed rate. */
  mode: "closed" | "open";
  /** Open loop: requests per second asked for (all processes); null in a closed loop. */
  targetRate: number | null;
  processes: number;
  connections: number;
  warmupSeconds: number;
  durationSeconds: number;
  requests: number;
  okResponses: number;
  okEvents: number;
  /** Events acknowledged over the whole run (warm-up and drain included), for bytes-stored-per-event. */
  allOkEvents: number;
  statusCounts: Record<string, number>;
  sampleBodies: Record<string, string>;
  socketErrors: number;
  reconnects: number;
  protocolErrors: number;
  /** Open loop: requests due in the window that had no answer by the drain deadline (counted in latency as lower bounds). */
  timedOut: number;
  /** Open loop: the largest number of due requests waiting for a free connection. */
  backlogMax: number;
  requestsPerSecond: number;
  eventsPerSecond: number;
  bytesSentPerSecond: number;
  /** From the intended send time in an open loop, from the actual send in a closed one. */
  latencyMs: LatencySummary;
  /** From the actual send: the server's (and the network's) time alone. */
  serviceLatencyMs: LatencySummary;
  /** Open loop: how late the generator sent requests that had a connection free; large values mean the generator fell behind. */
  schedulerLagMs: LatencySummary;
  histogram: SparseHistogram;
  byTag: Record<string, TagReport>;
  /** CPU time of the generator itself; percentOfOneCore near 100 means the generator, not the server, set the pace. */
  cpu: { userMs: number; systemMs: number; percentOfOneCore: number; perProcessPercent: number[] };
  saturated: boolean;
}

/** One progress interval of one generator process (or of all, merged by spawnLoad). */
export interface LoadProgress {
  type: "progress";
  /** Interval number since the start (0 = the first `progressMs` after "go"). */
  index: number;
  /** End of the interval, ms since the start. */
  elapsedMs: number;
  intervalMs: number;
  /** True when the interval ended inside the measurement window. */
  measuring: boolean;
  sent: number;
  completed: number;
  ok: number;
  okEvents: number;
  errors: number;
  /** Open loop: due requests waiting for a connection at the end of the interval. */
  backlog: number;
  cpuPercent: number;
  histogram: SparseHistogram;
  tags: Record<string, { completed: number; ok: number; histogram: SparseHistogram }>;
}

/** Above this share of one core the generator's event loop is likely the bottleneck. */
export const saturationPercent = 85;
/** Open loop: a p99 scheduler lag above this means the generator did not keep to its schedule. */
export const schedulerLagLimitMs = 5;

function newTally(tagCount: number): Tally {
  return {
    measuring: false,
    okResponses: 0,
    okEvents: 0,
    allOkEvents: 0,
    statusCounts: new Map(),
    sampleBodies: new Map(),
    socketErrors: 0,
    reconnects: 0,
    protocolErrors: 0,
    timedOut: 0,
    bytesSent: 0,
    histogram: new LatencyHistogram(),
    serviceHistogram: new LatencyHistogram(),
    schedulerLagHistogram: new LatencyHistogram(),
    tags: Array.from({ length: tagCount }, () => new TagTally()),
    requestCounter: 0,
    sendCounter: 0,
    intervalSent: 0,
    intervalErrors: 0,
  };
}

function sleep(milliseconds: number): Promise<void> {
  return new Promise((resolveSleep) => setTimeout(resolveSleep, milliseconds));
}

/** Emits one progress line per interval until stopped. */
function startProgress(options: LoadOptions, tally: Tally, startMs: number, backlog: () => number, write: (progress: LoadProgress) => void): () => void {
  if (options.progressMs <= 0) return () => undefined;
  let index = 0;
  let lastMs = startMs;
  let lastCpu = process.cpuUsage();
  const measureFromMs = startMs + options.warmupMs;
  const measureToMs = measureFromMs + options.durationMs;
  const emit = () => {
    const nowMs = performance.now();
    const cpu = process.cpuUsage(lastCpu);
    lastCpu = process.cpuUsage();
    const merged = new LatencyHistogram();
    const tags: LoadProgress["tags"] = {};
    let completed = 0;
    let ok = 0;
    let okEvents = 0;
    tally.tags.forEach((tag, tagIndex) => {
      merged.addSparse(tag.intervalHistogram.sparse(), tag.intervalHistogram.sumMicroseconds, tag.intervalHistogram.maxMicroseconds);
      completed += tag.intervalCompleted;
      ok += tag.intervalOk;
      okEvents += tag.intervalOkEvents;
      if (tally.tags.length > 1) tags[options.tags[tagIndex]] = { completed: tag.intervalCompleted, ok: tag.intervalOk, histogram: tag.intervalHistogram.toJSON() };
      tag.intervalCompleted = 0;
      tag.intervalOk = 0;
      tag.intervalOkEvents = 0;
      tag.intervalHistogram.reset();
    });
    const intervalMs = nowMs - lastMs;
    write({
      type: "progress",
      index,
      elapsedMs: nowMs - startMs,
      intervalMs,
      measuring: nowMs > measureFromMs && nowMs <= measureToMs + options.progressMs / 2,
      sent: tally.intervalSent,
      completed,
      ok,
      okEvents,
      errors: tally.intervalErrors,
      backlog: backlog(),
      cpuPercent: ((cpu.user + cpu.system) / 1000 / intervalMs) * 100,
      histogram: merged.toJSON(),
      tags,
    });
    tally.intervalSent = 0;
    tally.intervalErrors = 0;
    index += 1;
    lastMs = nowMs;
  };
  const timer = setInterval(emit, options.progressMs);
  return () => clearInterval(timer);
}

async function runLoadInProcess(
  options: LoadOptions,
  waitForGo: () => Promise<void>,
  onReady: () => void,
  writeProgress: (progress: LoadProgress) => void,
): Promise<LoadReport> {
  const tally = newTally(options.tags.length);
  const connections = Array.from({ length: options.connections }, () => new Connection(options, tally));
  await Promise.all(connections.map((connection) => connection.open()));
  onReady();
  await waitForGo();
  const goMs = performance.now();
  const openLoop = options.ratePerSecond > 0;
  let backlogMax = 0;
  let elapsedMs = 0;
  /** The time the CPU figure covers (the open loop's drain included). */
  let cpuElapsedMs = 0;
  let cpu: NodeJS.CpuUsage;

  if (!openLoop) {
    const stopProgress = startProgress(options, tally, goMs, () => 0, writeProgress);
    for (const connection of connections) connection.start();
    await sleep(options.warmupMs);
    tally.measuring = true;
    const cpuStart = process.cpuUsage();
    const startMs = performance.now();
    await sleep(options.durationMs);
    tally.measuring = false;
    elapsedMs = performance.now() - startMs;
    cpuElapsedMs = elapsedMs;
    cpu = process.cpuUsage(cpuStart);
    stopProgress();
    // Let the requests in flight finish (uncounted) so the server sees clean closes, not resets.
    await Promise.race([Promise.all(connections.map((connection) => connection.stop())), sleep(5_000)]);
  } else {
    // The schedule starts at "go"; the window covers the requests *due* in
    // [warm-up end, warm-up end + duration), whenever they were sent or answered.
    const schedule = processSchedule(options.ratePerSecond, goMs, options.processIndex, options.processCount);
    const measureFromMs = goMs + options.warmupMs;
    const measureToMs = measureFromMs + options.durationMs;
    const firstMeasured = firstIndexAtOrAfter(schedule, measureFromMs);
    const endIndex = firstIndexAtOrAfter(schedule, measureToMs);
    let timer: NodeJS.Timeout | NodeJS.Immediate | null = null;
    let timerIsImmediate = false;
    const dispatcher = new OpenLoopDispatcher<Connection>(schedule, endIndex, (connection, index, intendedMs, nowMs) => {
      const measured = index >= firstMeasured;
      // Lateness the generator caused: the request was due and this connection was free, yet it left only now.
      if (measured) tally.schedulerLagHistogram.record(Math.round((nowMs - Math.max(intendedMs, connection.idleSinceMs)) * 1000));
      // Idle connections leave the idle list when they close, so this only fails while stopping.
      if (!connection.sendScheduled(index, intendedMs, measured)) tally.socketErrors += 1;
    });
    const arm = (delayMs: number) => {
      if (timer !== null) {
        if (timerIsImmediate) clearImmediate(timer as NodeJS.Immediate);
        else clearTimeout(timer as NodeJS.Timeout);
        timer = null;
      }
      if (delayMs < 0) return;
      // Below a millisecond a timer would fire late anyway: check again on the next turn of the loop.
      timerIsImmediate = delayMs < 1;
      timer = timerIsImmediate ? setImmediate(tick) : setTimeout(tick, delayMs);
    };
    const tick = () => {
      timer = null;
      arm(dispatcher.pump(performance.now()));
    };
    for (const connection of connections) {
      connection.onReady = (ready) => arm(dispatcher.release(ready, performance.now()));
      connection.onDisconnect = (closed) => dispatcher.remove(closed);
    }
    const stopProgress = startProgress(options, tally, goMs, () => dispatcher.backlog(performance.now()), writeProgress);
    for (const connection of connections) connection.idleSinceMs = goMs;
    for (const connection of connections) dispatcher.release(connection, goMs);
    arm(dispatcher.pump(performance.now()));
    await sleep(Math.max(0, measureFromMs - performance.now()));
    tally.measuring = true;
    const cpuStart = process.cpuUsage();
    await sleep(Math.max(0, measureToMs - performance.now()));
    // Late answers to requests due in the window still count: wait for them, up to the drain time.
    const drainDeadlineMs = measureToMs + options.drainMs;
    while (performance.now() < drainDeadlineMs && (!dispatcher.finished || connections.some((connection) => connection.busy))) await sleep(5);
    tally.measuring = false;
    arm(-1);
    elapsedMs = options.durationMs;
    cpuElapsedMs = performance.now() - measureFromMs;
    cpu = process.cpuUsage(cpuStart);
    backlogMax = dispatcher.backlogMax;
    // What never came back: in flight or never sent. Their latency is at least the time until the deadline.
    const nowMs = performance.now();
    const timeOut = (tag: number, intendedMs: number) => {
      const microseconds = Math.round((nowMs - intendedMs) * 1000);
      tally.timedOut += 1;
      tally.histogram.record(microseconds);
      tally.tags[tag].requests += 1;
      tally.tags[tag].histogram.record(microseconds);
    };
    for (const connection of connections) {
      const pending = connection.measuredPending();
      if (pending !== undefined) timeOut(pending.tag, pending.intendedMs);
    }
    for (let index = Math.max(dispatcher.next, firstMeasured); index < endIndex; index += 1) {
      const template = options.requests[(options.requestOffset + options.processIndex + index * options.processCount) % options.requests.length];
      timeOut(template.tag, schedule.startMs + index * schedule.intervalMs);
    }
    stopProgress();
    for (const connection of connections) void connection.stop();
  }
  for (const connection of connections) connection.close();

  const seconds = elapsedMs / 1000;
  const percentOfOneCore = ((cpu.user + cpu.system) / 1000 / cpuElapsedMs) * 100;
  const schedulerLagMs = summarizeLatency(tally.schedulerLagHistogram);
  const byTag: Record<string, TagReport> = {};
  tally.tags.forEach((tag, index) => {
    byTag[options.tags[index]] = {
      requests: tag.requests,
      okResponses: tag.okResponses,
      okEvents: tag.okEvents,
      requestsPerSecond: tag.okResponses / seconds,
      latencyMs: summarizeLatency(tag.histogram),
      histogram: tag.histogram.toJSON(),
    };
  });
  return {
    url: `http://${options.host}:${options.port}`,
    mode: openLoop ? "open" : "closed",
    targetRate: openLoop ? options.ratePerSecond : null,
    processes: 1,
    connections: options.connections,
    warmupSeconds: options.warmupMs / 1000,
    durationSeconds: seconds,
    requests: tally.histogram.totalCount,
    okResponses: tally.okResponses,
    okEvents: tally.okEvents,
    allOkEvents: tally.allOkEvents,
    statusCounts: Object.fromEntries([...tally.statusCounts].map(([status, count]) => [String(status), count])),
    sampleBodies: Object.fromEntries([...tally.sampleBodies].map(([status, body]) => [String(status), body])),
    socketErrors: tally.socketErrors,
    reconnects: tally.reconnects,
    protocolErrors: tally.protocolErrors,
    timedOut: tally.timedOut,
    backlogMax,
    requestsPerSecond: tally.okResponses / seconds,
    eventsPerSecond: tally.okEvents / seconds,
    bytesSentPerSecond: tally.bytesSent / seconds,
    latencyMs: summarizeLatency(tally.histogram),
    serviceLatencyMs: summarizeLatency(tally.serviceHistogram),
    schedulerLagMs,
    histogram: tally.histogram.toJSON(),
    byTag,
    cpu: { userMs: cpu.user / 1000, systemMs: cpu.system / 1000, percentOfOneCore, perProcessPercent: [percentOfOneCore] },
    saturated: percentOfOneCore > saturationPercent || (openLoop && schedulerLagMs.p99 > schedulerLagLimitMs),
  };
}

function mergeSummaries(histograms: readonly SparseHistogram[]): { histogram: LatencyHistogram; summary: LatencySummary } {
  const histogram = new LatencyHistogram();
  for (const part of histograms) histogram.addSparse(part.buckets, part.sumMicroseconds, part.maxMicroseconds);
  return { histogram, summary: summarizeLatency(histogram) };
}

/** Sums the reports of generator processes that ran side by side over the same window. */
export function mergeLoadReports(reports: readonly LoadReport[]): LoadReport {
  if (reports.length === 1) return reports[0];
  const merged = mergeSummaries(reports.map((report) => report.histogram));
  const statusCounts: Record<string, number> = {};
  const sampleBodies: Record<string, string> = {};
  for (const report of reports) {
    for (const [status, count] of Object.entries(report.statusCounts)) statusCounts[status] = (statusCounts[status] ?? 0) + count;
    Object.assign(sampleBodies, report.sampleBodies);
  }
  const sum = (pick: (report: LoadReport) => number) => reports.reduce((total, report) => total + pick(report), 0);
  const perProcessPercent = reports.flatMap((report) => report.cpu.perProcessPercent);
  // Service time and scheduler lag keep no histogram in the report: take the worst process's figures.
  const worst = (pick: (report: LoadReport) => LatencySummary): LatencySummary => {
    const summaries = reports.map(pick);
    const keys = Object.keys(summaries[0]) as (keyof LatencySummary)[];
    return Object.fromEntries(
      keys.map((key) => {
        const values = summaries.map((summary) => summary[key]).filter(Number.isFinite);
        return [key, values.length === 0 ? Number.NaN : Math.max(...values)];
      }),
    ) as unknown as LatencySummary;
  };
  const byTag: Record<string, TagReport> = {};
  for (const tag of Object.keys(reports[0].byTag)) {
    const parts = reports.map((report) => report.byTag[tag]).filter((part) => part !== undefined);
    const tagMerged = mergeSummaries(parts.map((part) => part.histogram));
    byTag[tag] = {
      requests: parts.reduce((total, part) => total + part.requests, 0),
      okResponses: parts.reduce((total, part) => total + part.okResponses, 0),
      okEvents: parts.reduce((total, part) => total + part.okEvents, 0),
      requestsPerSecond: parts.reduce((total, part) => total + part.requestsPerSecond, 0),
      latencyMs: tagMerged.summary,
      histogram: tagMerged.histogram.toJSON(),
    };
  }
  const schedulerLagMs = worst((report) => report.schedulerLagMs);
  return {
    url: reports[0].url,
    mode: reports[0].mode,
    targetRate: reports[0].targetRate,
    processes: sum((report) => report.processes),
    connections: sum((report) => report.connections),
    warmupSeconds: reports[0].warmupSeconds,
    durationSeconds: sum((report) => report.durationSeconds) / reports.length,
    requests: sum((report) => report.requests),
    okResponses: sum((report) => report.okResponses),
    okEvents: sum((report) => report.okEvents),
    allOkEvents: sum((report) => report.allOkEvents),
    statusCounts,
    sampleBodies,
    socketErrors: sum((report) => report.socketErrors),
    reconnects: sum((report) => report.reconnects),
    protocolErrors: sum((report) => report.protocolErrors),
    timedOut: sum((report) => report.timedOut),
    backlogMax: sum((report) => report.backlogMax),
    requestsPerSecond: sum((report) => report.requestsPerSecond),
    eventsPerSecond: sum((report) => report.eventsPerSecond),
    bytesSentPerSecond: sum((report) => report.bytesSentPerSecond),
    latencyMs: merged.summary,
    serviceLatencyMs: worst((report) => report.serviceLatencyMs),
    schedulerLagMs,
    histogram: merged.histogram.toJSON(),
    byTag,
    cpu: {
      userMs: sum((report) => report.cpu.userMs),
      systemMs: sum((report) => report.cpu.systemMs),
      percentOfOneCore: sum((report) => report.cpu.percentOfOneCore),
      perProcessPercent,
    },
    saturated: reports.some((report) => report.saturated),
  };
}

/** Sums one interval's progress from every generator process. */
export function mergeProgress(parts: readonly LoadProgress[]): LoadProgress {
  if (parts.length === 1) return parts[0];
  const histogram = new LatencyHistogram();
  const tags: LoadProgress["tags"] = {};
  for (const part of parts) {
    histogram.addSparse(part.histogram.buckets, part.histogram.sumMicroseconds, part.histogram.maxMicroseconds);
    for (const [name, tag] of Object.entries(part.tags)) {
      const target = (tags[name] ??= { completed: 0, ok: 0, histogram: { buckets: [], sumMicroseconds: 0, maxMicroseconds: 0 } });
      const tagHistogram = LatencyHistogram.fromSparse(target.histogram);
      tagHistogram.addSparse(tag.histogram.buckets, tag.histogram.sumMicroseconds, tag.histogram.maxMicroseconds);
      target.completed += tag.completed;
      target.ok += tag.ok;
      target.histogram = tagHistogram.toJSON();
    }
  }
  const sum = (pick: (part: LoadProgress) => number) => parts.reduce((total, part) => total + pick(part), 0);
  return {
    type: "progress",
    index: parts[0].index,
    elapsedMs: Math.max(...parts.map((part) => part.elapsedMs)),
    intervalMs: sum((part) => part.intervalMs) / parts.length,
    measuring: parts.some((part) => part.measuring),
    sent: sum((part) => part.sent),
    completed: sum((part) => part.completed),
    ok: sum((part) => part.ok),
    okEvents: sum((part) => part.okEvents),
    errors: sum((part) => part.errors),
    backlog: sum((part) => part.backlog),
    cpuPercent: sum((part) => part.cpuPercent),
    histogram: histogram.toJSON(),
    tags,
  };
}

// ---------------------------------------------------------------------------
// Driver side: spawn generator processes, start them together, merge reports.

export interface SpawnLoadOptions {
  /** Base URL (scheme, host, port); with `bodiesFile` also the path every request goes to. */
  url: string;
  /** A file of request bodies, one compact JSON document per line, all sent to `url`. */
  bodiesFile?: string;
  /** Instead of `bodiesFile`: a file of RequestTemplate lines, each with its own path, headers and tag. */
  requestsFile?: string;
  /** Extra request headers for `bodiesFile` requests (an Authorization header, say). */
  headers?: Record<string, string>;
  /** Send each body of `bodiesFile` packed as msgpack (Content-Type: application/msgpack). */
  msgpack?: boolean;
  eventsPerBody?: number;
  connections: number;
  processes?: number;
  warmupSeconds: number;
  durationSeconds: number;
  /** Restamp every `"uuid":"…"` per request so replayed bodies never repeat a uuid (SPEC §2 dedup). */
  restampUuids: boolean;
  /** First of `processes` consecutive uuid stamps (0–65535) reserved for this run. */
  uuidStamp: number;
  /** Open loop at this many requests per second (all processes together); absent or 0: closed loop. */
  rate?: number;
  /** Open loop: how long to wait after the window for answers to requests due in it (default 5 s). */
  drainSeconds?: number;
  /** Which template the first request uses, so consecutive runs ask different questions. */
  requestOffset?: number;
  /** Called when the generators are told to start; the measurement window opens `warmupSeconds` later. */
  onStart?: () => void;
  /** Receives merged progress once per `progressSeconds` (default 1 s) when given. */
  onProgress?: (progress: LoadProgress) => void;
  progressSeconds?: number;
  /** Scheduling priority (nice value) for the generator processes; below 0 needs privileges. */
  nice?: number;
}

const thisFile = fileURLToPath(import.meta.url);
const liveGenerators = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Stops every generator this process started (an interrupted benchmark must not leave load running). */
export function killLoadGenerators(): void {
  for (const child of liveGenerators) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
}

/** Runs the generator in `processes` child processes, each with its share of the connections, and merges their reports. */
export async function spawnLoad(options: SpawnLoadOptions): Promise<LoadReport> {
  if ((options.bodiesFile === undefined) === (options.requestsFile === undefined)) throw new Error("spawnLoad: give exactly one of bodiesFile and requestsFile");
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", killLoadGenerators);
  }
  const processes = Math.max(1, Math.min(options.processes ?? 1, options.connections));
  const progressParts = new Map<number, LoadProgress[]>();
  const takeProgress = (progress: LoadProgress) => {
    if (options.onProgress === undefined) return;
    const parts = progressParts.get(progress.index) ?? [];
    parts.push(progress);
    if (parts.length < processes) {
      progressParts.set(progress.index, parts);
      return;
    }
    progressParts.delete(progress.index);
    options.onProgress(mergeProgress(parts));
  };
  const children = Array.from({ length: processes }, (_, index) => {
    const connections = Math.floor(options.connections / processes) + (index < options.connections % processes ? 1 : 0);
    const args = [
      thisFile,
      "--url", options.url,
      "--connections", String(connections),
      "--request-offset", String(options.requestOffset ?? 0),
      "--warmup-seconds", String(options.warmupSeconds),
      "--duration-seconds", String(options.durationSeconds),
      "--uuid-stamp", String((options.uuidStamp + index) & 0xffff),
      "--process-index", String(index),
      "--process-count", String(processes),
      "--wait-for-go",
    ];
    if (options.bodiesFile !== undefined) args.push("--bodies", options.bodiesFile, "--events-per-body", String(options.eventsPerBody ?? 1));
    if (options.requestsFile !== undefined) args.push("--requests", options.requestsFile);
    for (const [name, value] of Object.entries(options.headers ?? {})) args.push("--header", `${name}: ${value}`);
    if (options.rate !== undefined && options.rate > 0) args.push("--rate", String(options.rate), "--drain-seconds", String(options.drainSeconds ?? 5));
    if (options.onProgress !== undefined) args.push("--progress-ms", String(Math.round((options.progressSeconds ?? 1) * 1000)));
    if (!options.restampUuids) args.push("--no-restamp-uuids");
    if (options.msgpack) args.push("--msgpack");
    // `nice` sets the priority before exec, so every thread node starts inherits it.
    const child =
      options.nice !== undefined && options.nice !== 0
        ? spawn("nice", ["-n", String(options.nice), process.execPath, ...args], { stdio: ["pipe", "pipe", "inherit"] })
        : spawn(process.execPath, args, { stdio: ["pipe", "pipe", "inherit"] });
    liveGenerators.add(child);
    child.once("exit", () => liveGenerators.delete(child));
    // The child may exit before reading "go" (a failed connect): its closed stdin must not crash the driver.
    child.stdin!.on("error", () => undefined);
    const lines = createInterface({ input: child.stdout! });
    const ready = new Promise<void>((resolveReady, rejectReady) => {
      lines.once("line", (line) => (line.trim() === "ready" ? resolveReady() : rejectReady(new Error(`load generator: ${line}`))));
      child.once("exit", (code) => rejectReady(new Error(`load generator exited with ${code} before it was ready`)));
    });
    const report = new Promise<LoadReport>((resolveReport, rejectReport) => {
      let last = "";
      lines.on("line", (line) => {
        if (line.startsWith('{"type":"progress"')) {
          takeProgress(JSON.parse(line) as LoadProgress);
          return;
        }
        if (line.trim() !== "ready") last = line;
      });
      child.once("exit", (code) => {
        if (code !== 0) rejectReport(new Error(`load generator exited with ${code}`));
        else resolveReport(JSON.parse(last) as LoadReport);
      });
    });
    // The report promise can reject before anyone awaits it (a generator failing while others connect).
    report.catch(() => undefined);
    return { child, ready, report };
  });
  try {
    await Promise.all(children.map((child) => child.ready));
  } catch (error) {
    for (const { child } of children) child.kill("SIGKILL");
    throw error;
  }
  // stdin stays open: the child exits when it closes, so a driver that dies takes its generators with it.
  for (const { child } of children) child.stdin!.write("go\n");
  options.onStart?.();
  const reports = await Promise.all(children.map((child) => child.report));
  for (const { child } of children) child.stdin!.end();
  return mergeLoadReports(reports);
}

// ---------------------------------------------------------------------------
// Command line (the child side).

function readLines(file: string): Buffer[] {
  const content = readFileSync(file);
  const lines: Buffer[] = [];
  let start = 0;
  while (start < content.length) {
    let end = content.indexOf(0x0a, start);
    if (end < 0) end = content.length;
    if (end > start) lines.push(Buffer.from(content.subarray(start, end)));
    start = end + 1;
  }
  if (lines.length === 0) throw new Error(`no lines in ${file}`);
  return lines;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      url: { type: "string" },
      bodies: { type: "string" },
      requests: { type: "string" },
      header: { type: "string", multiple: true, default: [] },
      "events-per-body": { type: "string", default: "1" },
      connections: { type: "string", default: "16" },
      "request-offset": { type: "string", default: "0" },
      "warmup-seconds": { type: "string", default: "1" },
      "duration-seconds": { type: "string", default: "5" },
      "uuid-stamp": { type: "string", default: "0" },
      rate: { type: "string", default: "0" },
      "drain-seconds": { type: "string", default: "5" },
      "process-index": { type: "string", default: "0" },
      "process-count": { type: "string", default: "1" },
      "progress-ms": { type: "string", default: "0" },
      "no-restamp-uuids": { type: "boolean", default: false },
      msgpack: { type: "boolean", default: false },
      "wait-for-go": { type: "boolean", default: false },
    },
  });
  if (values.url === undefined || (values.bodies === undefined) === (values.requests === undefined)) {
    process.stderr.write(
      "usage: http-load --url http://host:port/path (--bodies FILE [--events-per-body N] [--header 'Name: value']… | --requests FILE)\n" +
        "  [--connections N] [--warmup-seconds S] [--duration-seconds S] [--rate REQUESTS_PER_SECOND [--drain-seconds S]] [--progress-ms MS]\n",
    );
    process.exit(2);
  }
  const url = new URL(values.url);
  const host = url.hostname;
  const port = Number(url.port || 80);
  const restampUuids = !values["no-restamp-uuids"];
  let requests: PreparedRequest[];
  let tags: string[];
  if (values.bodies !== undefined) {
    const headers: Record<string, string> = {};
    for (const line of values.header) {
      const colon = line.indexOf(":");
      if (colon <= 0) throw new Error(`--header must be "Name: value", got ${line}`);
      headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
    }
    tags = [url.pathname];
    const lines = readLines(resolve(values.bodies));
    if (values.msgpack) headers["Content-Type"] = "application/msgpack";
    requests = prepareRequests({
      host,
      port,
      path: url.pathname + url.search,
      bodies: values.msgpack ? lines.map((line) => pack(JSON.parse(line.toString("utf8")))) : lines,
      restampUuids,
      headers,
      tag: 0,
      eventsPerBody: Number(values["events-per-body"]),
    });
  } else {
    tags = [];
    requests = readLines(resolve(values.requests!)).flatMap((line) => {
      const template = JSON.parse(line.toString("utf8")) as RequestTemplate;
      let tag = tags.indexOf(template.tag);
      if (tag < 0) tag = tags.push(template.tag) - 1;
      return prepareRequests({
        host,
        port,
        path: template.path,
        bodies: [Buffer.from(template.body, "utf8")],
        restampUuids,
        headers: template.headers,
        tag,
        eventsPerBody: template.eventsPerBody ?? 0,
      });
    });
  }
  const rate = Number(values.rate);
  const options: LoadOptions = {
    host,
    port,
    requests,
    tags,
    connections: Number(values.connections),
    requestOffset: Number(values["request-offset"]),
    warmupMs: Number(values["warmup-seconds"]) * 1000,
    durationMs: Number(values["duration-seconds"]) * 1000,
    uuidStamp: Number(values["uuid-stamp"]) & 0xffff,
    ratePerSecond: Number.isFinite(rate) && rate > 0 ? rate : 0,
    processIndex: Number(values["process-index"]),
    processCount: Number(values["process-count"]),
    drainMs: Number(values["drain-seconds"]) * 1000,
    progressMs: Number(values["progress-ms"]),
  };
  const waitForGo = values["wait-for-go"]
    ? () =>
        new Promise<void>((resolveGo) => {
          const lines = createInterface({ input: process.stdin });
          lines.once("line", () => resolveGo());
          // The driver keeps stdin open while it waits for the report: its end means the driver is gone.
          lines.once("close", () => process.exit(3));
        })
    : () => Promise.resolve();
  const report = await runLoadInProcess(
    options,
    waitForGo,
    () => {
      if (values["wait-for-go"]) process.stdout.write("ready\n");
    },
    (progress) => process.stdout.write(`${JSON.stringify(progress)}\n`),
  );
  process.stdout.write(`${JSON.stringify(report)}\n`, () => process.exit(0));
  // Under a driver (--wait-for-go) the driver flags saturation in its table; alone, say it here.
  if (report.saturated && !values["wait-for-go"]) {
    process.stderr.write(`http-load: warning: the generator used ${report.cpu.percentOfOneCore.toFixed(0)} % of a core; it may have set the pace, not the server\n`);
  }
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === thisFile) {
  main().catch((error: unknown) => {
    process.stderr.write(`http-load: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  });
}
