/**
 * Closed-loop HTTP/1.1 load generator for the ingest benchmarks. It sits in
 * front of the HTTP stage and runs in its own process (`node
 * dist/bench/load/http-load.js …`), so it shares no event loop with the server
 * or with the benchmark driver; it prints one JSON report on stdout.
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
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";

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
}

// ---------------------------------------------------------------------------
// Requests: each body becomes one prebuilt request (head + body in one buffer),
// with the offsets of its uuids so they can be restamped per send.

const uuidKey = Buffer.from('"uuid":"', "latin1");
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
}

function findUuidOffsets(request: Buffer, bodyStart: number): Int32Array {
  const offsets: number[] = [];
  let from = bodyStart;
  for (;;) {
    const at = request.indexOf(uuidKey, from);
    if (at < 0) break;
    const start = at + uuidKey.length;
    from = start;
    if (start + uuidLength >= request.length || request[start + uuidLength] !== 0x22) continue;
    if (request[start + 8] !== 0x2d || request[start + 13] !== 0x2d || request[start + 18] !== 0x2d || request[start + 23] !== 0x2d) continue;
    let hex = true;
    for (let index = 0; index < 8 && hex; index += 1) hex = isHexDigit(request[start + index]);
    for (let index = 9; index < 13 && hex; index += 1) hex = isHexDigit(request[start + index]);
    if (hex) offsets.push(start);
  }
  return Int32Array.from(offsets);
}

export function prepareRequests(options: { host: string; port: number; path: string; bodies: readonly Buffer[]; restampUuids: boolean }): PreparedRequest[] {
  return options.bodies.map((body) => {
    const head = Buffer.from(
      `POST ${options.path} HTTP/1.1\r\nHost: ${options.host}:${options.port}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
      "latin1",
    );
    const bytes = Buffer.concat([head, body]);
    return { bytes, uuidOffsets: options.restampUuids ? findUuidOffsets(bytes, head.length) : new Int32Array(0) };
  });
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
  path: string;
  requests: PreparedRequest[];
  eventsPerBody: number;
  connections: number;
  /** First connection's index among all generator processes, so they start on different bodies. */
  connectionOffset: number;
  warmupMs: number;
  durationMs: number;
  /** Second uuid group written into every uuid, unique per generator process across a benchmark. */
  uuidStamp: number;
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
  bytesSent: number;
  histogram: LatencyHistogram;
  /** Distinct request stamps handed out so far in this process. */
  requestCounter: number;
}

/** A 32-bit mix per uuid position, so the uuids of one request do not share a prefix. */
const positionMix = new Int32Array(1024);
for (let position = 0; position < positionMix.length; position += 1) {
  let value = Math.imul(position + 1, 0x85eb_ca6b);
  value ^= value >>> 13;
  value = Math.imul(value, 0xc2b2_ae35);
  positionMix[position] = value ^ (value >>> 16);
}

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
  private requestIndex: number;
  private sentAtMs = 0;
  private inFlight = false;
  private stopped = false;
  private onIdle: (() => void) | null = null;

  constructor(
    private readonly options: LoadOptions,
    private readonly tally: Tally,
    connectionIndex: number,
  ) {
    this.requestIndex = connectionIndex % options.requests.length;
    let longest = 0;
    for (const request of options.requests) longest = Math.max(longest, request.bytes.length);
    this.scratch = Buffer.allocUnsafe(longest);
  }

  open(): Promise<void> {
    return new Promise((resolveOpen, rejectOpen) => {
      const socket = connect({
        host: this.options.host,
        port: this.options.port,
        noDelay: true,
        // One read buffer per connection, reused for every read: no Buffer per chunk.
        onread: { buffer: this.readBuffer, callback: (length: number, buffer: Uint8Array) => {
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
    this.send();
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

  private send(): void {
    const socket = this.socket;
    if (socket === null || this.stopped) return;
    const requests = this.options.requests;
    const request = requests[this.requestIndex];
    this.requestIndex = this.requestIndex + 1 === requests.length ? 0 : this.requestIndex + 1;
    let bytes = request.bytes;
    const offsets = request.uuidOffsets;
    if (offsets.length > 0) {
      // The shared template is copied first: a queued write keeps a reference to
      // its buffer, so restamping the template in place could corrupt another
      // connection's request still in the kernel queue.
      const scratch = this.scratch;
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
    this.inFlight = true;
    this.state = ParseState.Head;
    this.headLength = 0;
    this.sentAtMs = performance.now();
    if (this.tally.measuring) this.tally.bytesSent += bytes.length;
    socket.write(bytes);
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
        const available = end - offset;
        if (this.headLength + available > headBytesMax) {
          this.tally.protocolErrors += 1;
          this.socket?.destroy();
          return end;
        }
        buffer.copy(this.headBuffer, this.headLength, offset, end);
        const searchFrom = Math.max(0, this.headLength - 3);
        this.headLength += available;
        const headEnd = this.headBuffer.subarray(0, this.headLength).indexOf("\r\n\r\n", searchFrom, "latin1");
        if (headEnd < 0) return end;
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
    if (this.sampleWanted) tally.sampleBodies.set(status, this.sample);
    this.sampleWanted = false;
    this.state = ParseState.Head;
    this.headLength = 0;
    this.inFlight = false;
    if (status >= 200 && status < 300) tally.allOkEvents += this.options.eventsPerBody;
    if (tally.measuring) {
      tally.histogram.record(Math.round((performance.now() - this.sentAtMs) * 1000));
      tally.statusCounts.set(status, (tally.statusCounts.get(status) ?? 0) + 1);
      if (status >= 200 && status < 300) {
        tally.okResponses += 1;
        tally.okEvents += this.options.eventsPerBody;
      }
    }
    if (this.stopped) {
      this.onIdle?.();
      this.onIdle = null;
      return;
    }
    this.send();
  }

  /** A dropped connection is reopened so the loop keeps N requests in flight. */
  private onClose(socket: Socket): void {
    if (socket !== this.socket) return;
    this.socket = null;
    const wasInFlight = this.inFlight;
    this.inFlight = false;
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
        () => this.send(),
        () => {
          this.socket = null;
          this.reconnect();
        },
      );
    }, 10);
  }
}

export interface LoadReport {
  url: string;
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
  requestsPerSecond: number;
  eventsPerSecond: number;
  bytesSentPerSecond: number;
  latencyMs: { p50: number; p90: number; p99: number; max: number; mean: number };
  histogram: { buckets: [number, number][]; sumMicroseconds: number; maxMicroseconds: number };
  /** CPU time of the generator itself; percentOfOneCore near 100 means the generator, not the server, set the pace. */
  cpu: { userMs: number; systemMs: number; percentOfOneCore: number; perProcessPercent: number[] };
  saturated: boolean;
}

/** Above this share of one core the generator's event loop is likely the bottleneck. */
const saturationPercent = 85;

async function runLoadInProcess(options: LoadOptions, waitForGo: () => Promise<void>, onReady: () => void): Promise<LoadReport> {
  const tally: Tally = {
    measuring: false,
    okResponses: 0,
    okEvents: 0,
    allOkEvents: 0,
    statusCounts: new Map(),
    sampleBodies: new Map(),
    socketErrors: 0,
    reconnects: 0,
    protocolErrors: 0,
    bytesSent: 0,
    histogram: new LatencyHistogram(),
    requestCounter: 0,
  };
  const connections = Array.from({ length: options.connections }, (_, index) => new Connection(options, tally, options.connectionOffset + index));
  await Promise.all(connections.map((connection) => connection.open()));
  onReady();
  await waitForGo();
  for (const connection of connections) connection.start();
  await new Promise((resolveWait) => setTimeout(resolveWait, options.warmupMs));
  tally.measuring = true;
  const cpuStart = process.cpuUsage();
  const startMs = performance.now();
  await new Promise((resolveWait) => setTimeout(resolveWait, options.durationMs));
  tally.measuring = false;
  const elapsedMs = performance.now() - startMs;
  const cpu = process.cpuUsage(cpuStart);
  // Let the requests in flight finish (uncounted) so the server sees clean closes, not resets.
  await Promise.race([Promise.all(connections.map((connection) => connection.stop())), new Promise((resolveWait) => setTimeout(resolveWait, 5_000))]);
  for (const connection of connections) connection.close();

  const seconds = elapsedMs / 1000;
  const histogram = tally.histogram;
  const percentOfOneCore = ((cpu.user + cpu.system) / 1000 / elapsedMs) * 100;
  const requests = histogram.totalCount;
  return {
    url: `http://${options.host}:${options.port}${options.path}`,
    processes: 1,
    connections: options.connections,
    warmupSeconds: options.warmupMs / 1000,
    durationSeconds: seconds,
    requests,
    okResponses: tally.okResponses,
    okEvents: tally.okEvents,
    allOkEvents: tally.allOkEvents,
    statusCounts: Object.fromEntries([...tally.statusCounts].map(([status, count]) => [String(status), count])),
    sampleBodies: Object.fromEntries([...tally.sampleBodies].map(([status, body]) => [String(status), body])),
    socketErrors: tally.socketErrors,
    reconnects: tally.reconnects,
    protocolErrors: tally.protocolErrors,
    requestsPerSecond: tally.okResponses / seconds,
    eventsPerSecond: tally.okEvents / seconds,
    bytesSentPerSecond: tally.bytesSent / seconds,
    latencyMs: summarizeLatency(histogram),
    histogram: { buckets: histogram.sparse(), sumMicroseconds: histogram.sumMicroseconds, maxMicroseconds: histogram.maxMicroseconds },
    cpu: { userMs: cpu.user / 1000, systemMs: cpu.system / 1000, percentOfOneCore, perProcessPercent: [percentOfOneCore] },
    saturated: percentOfOneCore > saturationPercent,
  };
}

function summarizeLatency(histogram: LatencyHistogram): LoadReport["latencyMs"] {
  return {
    p50: histogram.percentileMicroseconds(50) / 1000,
    p90: histogram.percentileMicroseconds(90) / 1000,
    p99: histogram.percentileMicroseconds(99) / 1000,
    max: histogram.maxMicroseconds / 1000,
    mean: histogram.totalCount === 0 ? Number.NaN : histogram.sumMicroseconds / histogram.totalCount / 1000,
  };
}

/** Sums the reports of generator processes that ran side by side over the same window. */
export function mergeLoadReports(reports: readonly LoadReport[]): LoadReport {
  if (reports.length === 1) return reports[0];
  const histogram = new LatencyHistogram();
  const statusCounts: Record<string, number> = {};
  const sampleBodies: Record<string, string> = {};
  for (const report of reports) {
    histogram.addSparse(report.histogram.buckets, report.histogram.sumMicroseconds, report.histogram.maxMicroseconds);
    for (const [status, count] of Object.entries(report.statusCounts)) statusCounts[status] = (statusCounts[status] ?? 0) + count;
    Object.assign(sampleBodies, report.sampleBodies);
  }
  const sum = (pick: (report: LoadReport) => number) => reports.reduce((total, report) => total + pick(report), 0);
  const perProcessPercent = reports.flatMap((report) => report.cpu.perProcessPercent);
  return {
    url: reports[0].url,
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
    requestsPerSecond: sum((report) => report.requestsPerSecond),
    eventsPerSecond: sum((report) => report.eventsPerSecond),
    bytesSentPerSecond: sum((report) => report.bytesSentPerSecond),
    latencyMs: summarizeLatency(histogram),
    histogram: { buckets: histogram.sparse(), sumMicroseconds: histogram.sumMicroseconds, maxMicroseconds: histogram.maxMicroseconds },
    cpu: {
      userMs: sum((report) => report.cpu.userMs),
      systemMs: sum((report) => report.cpu.systemMs),
      percentOfOneCore: sum((report) => report.cpu.percentOfOneCore),
      perProcessPercent,
    },
    saturated: perProcessPercent.some((percent) => percent > saturationPercent),
  };
}

// ---------------------------------------------------------------------------
// Driver side: spawn generator processes, start them together, merge reports.

export interface SpawnLoadOptions {
  url: string;
  /** A file of request bodies, one compact JSON document per line. */
  bodiesFile: string;
  eventsPerBody: number;
  connections: number;
  processes?: number;
  warmupSeconds: number;
  durationSeconds: number;
  /** Restamp every `"uuid":"…"` per request so replayed bodies never repeat a uuid (SPEC §2 dedup). */
  restampUuids: boolean;
  /** First of `processes` consecutive uuid stamps (0–65535) reserved for this run. */
  uuidStamp: number;
  /** Called when the generators are told to start; the measurement window opens `warmupSeconds` later. */
  onStart?: () => void;
}

const thisFile = fileURLToPath(import.meta.url);

/** Runs the generator in `processes` child processes, each with its share of the connections, and merges their reports. */
export async function spawnLoad(options: SpawnLoadOptions): Promise<LoadReport> {
  const processes = Math.max(1, Math.min(options.processes ?? 1, options.connections));
  const children = Array.from({ length: processes }, (_, index) => {
    const connections = Math.floor(options.connections / processes) + (index < options.connections % processes ? 1 : 0);
    const args = [
      thisFile,
      "--url", options.url,
      "--bodies", options.bodiesFile,
      "--events-per-body", String(options.eventsPerBody),
      "--connections", String(connections),
      "--connection-offset", String(index * Math.ceil(options.connections / processes)),
      "--warmup-seconds", String(options.warmupSeconds),
      "--duration-seconds", String(options.durationSeconds),
      "--uuid-stamp", String((options.uuidStamp + index) & 0xffff),
      "--wait-for-go",
    ];
    if (!options.restampUuids) args.push("--no-restamp-uuids");
    const child = spawn(process.execPath, args, { stdio: ["pipe", "pipe", "inherit"] });
    const lines = createInterface({ input: child.stdout! });
    const ready = new Promise<void>((resolveReady, rejectReady) => {
      lines.once("line", (line) => (line.trim() === "ready" ? resolveReady() : rejectReady(new Error(`load generator: ${line}`))));
      child.once("exit", (code) => rejectReady(new Error(`load generator exited with ${code} before it was ready`)));
    });
    const report = new Promise<LoadReport>((resolveReport, rejectReport) => {
      let last = "";
      lines.on("line", (line) => {
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
  for (const { child } of children) child.stdin!.end("go\n");
  options.onStart?.();
  return mergeLoadReports(await Promise.all(children.map((child) => child.report)));
}

// ---------------------------------------------------------------------------
// Command line (the child side).

function readBodies(file: string): Buffer[] {
  const content = readFileSync(file);
  const bodies: Buffer[] = [];
  let start = 0;
  while (start < content.length) {
    let end = content.indexOf(0x0a, start);
    if (end < 0) end = content.length;
    if (end > start) bodies.push(Buffer.from(content.subarray(start, end)));
    start = end + 1;
  }
  if (bodies.length === 0) throw new Error(`no bodies in ${file}`);
  return bodies;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      url: { type: "string" },
      bodies: { type: "string" },
      "events-per-body": { type: "string", default: "1" },
      connections: { type: "string", default: "16" },
      "connection-offset": { type: "string", default: "0" },
      "warmup-seconds": { type: "string", default: "1" },
      "duration-seconds": { type: "string", default: "5" },
      "uuid-stamp": { type: "string", default: "0" },
      "no-restamp-uuids": { type: "boolean", default: false },
      "wait-for-go": { type: "boolean", default: false },
    },
  });
  if (values.url === undefined || values.bodies === undefined) {
    process.stderr.write("usage: http-load --url http://host:port/path --bodies FILE [--events-per-body N] [--connections N] [--warmup-seconds S] [--duration-seconds S]\n");
    process.exit(2);
  }
  const url = new URL(values.url);
  const host = url.hostname;
  const port = Number(url.port || 80);
  const bodies = readBodies(resolve(values.bodies));
  const requests = prepareRequests({ host, port, path: url.pathname + url.search, bodies, restampUuids: !values["no-restamp-uuids"] });
  const options: LoadOptions = {
    host,
    port,
    path: url.pathname + url.search,
    requests,
    eventsPerBody: Number(values["events-per-body"]),
    connections: Number(values.connections),
    connectionOffset: Number(values["connection-offset"]),
    warmupMs: Number(values["warmup-seconds"]) * 1000,
    durationMs: Number(values["duration-seconds"]) * 1000,
    uuidStamp: Number(values["uuid-stamp"]) & 0xffff,
  };
  const waitForGo = values["wait-for-go"]
    ? () =>
        new Promise<void>((resolveGo) => {
          const lines = createInterface({ input: process.stdin });
          lines.once("line", () => {
            lines.close();
            resolveGo();
          });
        })
    : () => Promise.resolve();
  const report = await runLoadInProcess(options, waitForGo, () => {
    if (values["wait-for-go"]) process.stdout.write("ready\n");
  });
  process.stdout.write(`${JSON.stringify(report)}\n`);
  process.exit(0);
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === thisFile) {
  main().catch((error: unknown) => {
    process.stderr.write(`http-load: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  });
}
