/**
 * Shared pieces of the property-based suites (test/fuzz): how many cases a
 * property runs, a keep-alive client over test/helpers/http.ts that treats a
 * dropped connection as a failure, the SPEC §1 answer checks written as plain throws
 * (fast-check shrinks on any exception), and arbitraries for the odd text and
 * odd JSON that hostile clients send.
 *
 * `EVENTIDE_FUZZ_RUNS` sets the cases per property: small by default so that
 * `npm test` stays fast, 10 000 in `npm run test:fuzz`. `EVENTIDE_FUZZ_SEED`
 * replays a failing run (fast-check prints the seed and the shrunk case).
 *
 * No check here bounds how long an answer takes (speed is a benchmark's
 * figure, never a test's assertion): a request that hangs fails the property
 * by its vitest timeout, and the slowest answers of a file are printed at its
 * end (slowestAnswers) beside what `npm run bench:costly` measures.
 */
import fc from "fast-check";
import { Agent } from "node:http";
import { expect } from "vitest";
import { send, type HttpAnswer } from "../helpers/http.js";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

export const fuzzRuns = positiveIntegerFromEnvironment("EVENTIDE_FUZZ_RUNS", 300);
export const fuzzSeed = process.env.EVENTIDE_FUZZ_SEED === undefined || process.env.EVENTIDE_FUZZ_SEED === "" ? undefined : Number(process.env.EVENTIDE_FUZZ_SEED);

function positiveIntegerFromEnvironment(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  return value;
}

/**
 * The server under fuzzing. Checkpoints are pushed out of the run (by time,
 * rows, property values and texts, and WAL bytes): the generators spread events over thousands of UTC days
 * (1970–9999), and a checkpoint sealing thousands of day segments at once
 * currently stalls queries for seconds (reported separately, a storage
 * matter). These suites judge how input is handled, so that stall must not
 * swamp the slowest answers they print. The long run's store (~2 M rows) stays in memory.
 */
export async function startServerForFuzzing(): Promise<ServerHandle> {
  return startServer({
    env: {
      EVENTIDE_CHECKPOINT_INTERVAL_MS: String(24 * 3_600_000),
      EVENTIDE_CHECKPOINT_ROWS_MAX: String(1_000_000_000),
      EVENTIDE_CHECKPOINT_WAL_BYTES_MAX: String(64 * 1024 ** 3),
      EVENTIDE_CHECKPOINT_PROPERTY_ENTRIES_MAX: String(1_000_000_000),
      EVENTIDE_CHECKPOINT_PROPERTY_TEXTS_MAX: String(1_000_000_000),
      // The model is SPEC §2's: timestamps 1970–9999 and no cardinality caps (test/http/cardinality-caps.test.ts tests those).
      EVENTIDE_TIMESTAMP_FUTURE_DAYS: "0",
      EVENTIDE_BATCH_DAYS_MAX: "1000",
      EVENTIDE_WORKSPACE_EVENT_NAMES_MAX: String(1_000_000_000),
      EVENTIDE_WORKSPACE_PROPERTY_KEYS_MAX: String(1_000_000_000),
    },
  });
}

/** One ingest and one query before the properties run, so the first case does not pay for JIT warm-up and first-file creation. */
export async function warmUp(server: ServerHandle): Promise<void> {
  const batch = await request(`${server.ingestUrl}/ingest/batch`, { body: JSON.stringify({ apiKey: server.apiKey, events: [{ event: "warm-up", distinctId: "u" }] }) });
  if (batch.status !== 200) throw new Error(`warm-up ingest answered ${batch.status}: ${batch.text}`);
  const today = new Date().toISOString().slice(0, 10);
  const query = await request(`${server.queryUrl}/api/v1/query/trend`, { body: JSON.stringify({ event: "warm-up", dateFrom: today, dateTo: today }), headers: { authorization: `Bearer ${server.token}` } });
  if (query.status !== 200) throw new Error(`warm-up query answered ${query.status}: ${query.text}`);
}

/** fast-check parameters shared by every property: the run count, and the seed when replaying. */
export function fuzzParameters(numRuns = fuzzRuns): fc.Parameters<unknown> {
  return fuzzSeed === undefined ? { numRuns } : { numRuns, seed: fuzzSeed };
}

/**
 * A vitest timeout for a property of `runs` cases that each cost about
 * `perCaseMs`: the long run (10 000 cases) must not be cut off by the 60 s default.
 */
export function propertyTimeoutMs(runs: number, perCaseMs: number): number {
  return 60_000 + runs * perCaseMs;
}

export type Answer = HttpAnswer;

export interface RawRequest {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
  /** Send with Transfer-Encoding: chunked instead of Content-Length. */
  chunked?: boolean;
}

/**
 * Keep-alive connections, as real clients use: thousands of cases on fresh
 * connections would only measure the TCP handshake. At most a few sockets, so
 * the server sees the cases one after another.
 */
const agent = new Agent({ keepAlive: true, maxSockets: 4 });

export function closeClient(): void {
  agent.destroy();
}

/**
 * One request over the keep-alive agent; resolves with the answer and how long
 * it took, rejects when the connection drops before an answer. A request on a
 * reused socket that the server closed in the meantime (its idle timeout) is
 * retried once on a fresh connection, as Node's documentation advises: that is
 * not a dropped request. A chunked body goes in at least two pieces, so the
 * server really reassembles chunks.
 */
export async function request(url: string, options: RawRequest = {}): Promise<Answer> {
  const bodyBytes = options.body === undefined ? 0 : typeof options.body === "string" ? Buffer.byteLength(options.body) : options.body.length;
  const chunkBytes = options.chunked ? Math.max(1, Math.min(64 * 1024, Math.ceil(bodyBytes / 2))) : undefined;
  const sendOptions = { method: options.method, headers: options.headers, body: options.body, chunkBytes };
  try {
    return await send(url, { ...sendOptions, agent });
  } catch (error) {
    if ((error as { reusedSocket?: boolean }).reusedSocket) return await send(url, sendOptions);
    throw error;
  }
}

/** Thrown by the checks below; the message carries the request's context for the shrunk counterexample. */
export class CheckFailure extends Error {}

export function check(condition: boolean, message: () => string): asserts condition {
  if (!condition) throw new CheckFailure(message());
}

function describeAnswer(answer: Answer): string {
  return `${answer.status} after ${answer.durationMs.toFixed(0)} ms: ${answer.text.slice(0, 300)}`;
}

/**
 * The slowest answers checkAnswer saw in this file, printed by finishFuzzing:
 * how long hostile bodies take is reported, not asserted.
 */
class SlowestAnswers {
  private readonly kept: Array<{ durationMs: number; line: string }> = [];
  /** checkStatus checks an answer that may have been checked already: each counts once. */
  private readonly seen = new WeakSet<Answer>();
  private answers = 0;

  constructor(private readonly keptMax: number) {}

  add(answer: Answer, context: string): void {
    if (this.seen.has(answer)) return;
    this.seen.add(answer);
    this.answers += 1;
    if (this.kept.length === this.keptMax && answer.durationMs <= this.kept[this.kept.length - 1].durationMs) return;
    this.kept.push({ durationMs: answer.durationMs, line: `${answer.durationMs.toFixed(0)} ms, ${answer.status}: ${preview(context.split("\n")[0], 160)}` });
    this.kept.sort((left, right) => right.durationMs - left.durationMs);
    this.kept.length = Math.min(this.kept.length, this.keptMax);
  }

  toString(): string {
    return [`slowest ${this.kept.length} of ${this.answers} answers checked:`, ...this.kept.map(({ line }) => `  ${line}`)].join("\n");
  }
}

const slowestAnswers = new SlowestAnswers(5);

/**
 * What every answer must be, whatever was sent: never a 5xx other than
 * 503 overloaded (with Retry-After), JSON, and an error in SPEC §1's exact
 * shape whenever it is not a 200. Its time is recorded for slowestAnswers.
 */
export function checkAnswer(answer: Answer, context: string): void {
  const where = () => `${context}\n  answer: ${describeAnswer(answer)}`;
  slowestAnswers.add(answer, context);
  check(answer.status === 200 || (answer.status >= 400 && answer.status < 500) || answer.status === 503, () => `unexpected status — ${where()}`);
  check(/^application\/json\b/.test(String(answer.headers["content-type"] ?? "")), () => `not JSON — ${where()}`);
  check(typeof answer.body === "object" && answer.body !== null, () => `body is not a JSON object — ${where()}`);
  if (answer.status === 200) return;
  checkErrorShape(answer, where);
  if (answer.status === 503) {
    check(answer.body.error.code === "overloaded" || answer.body.error.code === "unavailable", () => `503 with an unexpected code — ${where()}`);
    check(/^[1-9]\d*$/.test(String(answer.headers["retry-after"] ?? "")), () => `503 without Retry-After — ${where()}`);
  }
}

function checkErrorShape(answer: Answer, where: () => string): void {
  const body = answer.body;
  check(Object.keys(body).sort().join(",") === "error,ok" && body.ok === false, () => `error body is not {ok:false, error} — ${where()}`);
  check(typeof body.error === "object" && body.error !== null, () => `error is not an object — ${where()}`);
  check(Object.keys(body.error).sort().join(",") === "code,message", () => `error is not {code, message} — ${where()}`);
  check(typeof body.error.code === "string" && typeof body.error.message === "string" && body.error.message.length > 0, () => `error code or message missing — ${where()}`);
}

/** checkAnswer, and the exact status (and code, when given) expected. */
export function checkStatus(answer: Answer, status: number, code: string | readonly string[] | undefined, context: string): void {
  checkAnswer(answer, context);
  const where = () => `${context}\n  answer: ${describeAnswer(answer)}`;
  check(answer.status === status, () => `expected ${status}${code === undefined ? "" : ` ${code}`} — ${where()}`);
  if (code === undefined || status === 200) return;
  const codes = typeof code === "string" ? [code] : code;
  check(codes.includes(answer.body.error.code), () => `expected code ${codes.join(" or ")} — ${where()}`);
}

/** A short readable form of a request body for failure messages. */
export function preview(body: string | Uint8Array, length = 400): string {
  const text = typeof body === "string" ? body : Buffer.from(body).toString("latin1");
  return JSON.stringify(text.length > length ? `${text.slice(0, length)}… (${text.length} chars)` : text);
}

/** Object.fromEntries defines own properties, so `__proto__` and `constructor` become plain keys. */
export function objectOf(entries: ReadonlyArray<readonly [string, unknown]>): Record<string, unknown> {
  return Object.fromEntries(entries);
}

// ---------------------------------------------------------------------------
// Arbitraries

/** Strings that have broken parsers, stores and dictionaries before. */
export const notoriousStrings = [
  "",
  " ",
  "__proto__",
  "constructor",
  "prototype",
  "toString",
  "hasOwnProperty",
  "\u0000",
  "a\u0000b",
  "\u0000\u0000\u0000",
  "\ufeff",
  "\ufeffBOM",
  "\u2028\u2029",
  "\u202etxet lanoitcerid-ib",
  "e\u0301",
  "\u00e9",
  "😀",
  "👨‍👩‍👧‍👦",
  "🏳️‍🌈",
  "𝕏",
  "\ud83d",
  "\ude00",
  "x\udfffy",
  "\ud83d\ude00\ud83d",
  "\"quoted\"",
  "back\\slash",
  "line\nbreak\r\n",
  "tab\there",
  "null",
  "true",
  "false",
  "0",
  "-0",
  "1e400",
  "NaN",
  "Infinity",
  "0x10",
  "1.50",
  "<script>alert(1)</script>",
  "'; DROP TABLE events; --",
  "../../etc/passwd",
  "%00",
  "\u{10FFFF}",
  "\uFFFE\uFFFF",
  "日本語テキスト",
  "ünïcødé 用户",
] as const;

/** Lone surrogates on purpose: a high and a low one next to each other form a valid pair. */
const oddUnit = fc.constantFrom("a", "Z", "0", " ", "\u0000", "\u001f", "\u007f", "\ud800", "\udbff", "\udc00", "\udfff", "😀", "é", "\\", '"', "\n", "\u2028", "\ufeff", "用");

/** Text of every kind: any code point, graphemes, notorious strings, and mixes holding lone surrogates. */
export const oddText: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.string({ unit: "binary", maxLength: 30 }), weight: 4 },
  { arbitrary: fc.string({ unit: "grapheme", maxLength: 12 }), weight: 3 },
  { arbitrary: fc.constantFrom(...notoriousStrings), weight: 2 },
  { arbitrary: fc.string({ unit: oddUnit, maxLength: 12 }), weight: 1 },
);

/** oddText that is not empty, for fields that need at least one character. */
export const oddNonEmptyText: fc.Arbitrary<string> = oddText.filter((text) => text.length > 0);

/** Numbers that survive JSON (no NaN or ±Infinity, which JSON.stringify turns into null). */
export const jsonNumber: fc.Arbitrary<number> = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, -0, 1.5, 1e21, -1e-7, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 2, Number.MAX_VALUE, Number.MIN_VALUE),
);

/** A property value: odd text, numbers, booleans, null, and nested JSON holding odd text. */
export const propertyValue: fc.Arbitrary<unknown> = fc.oneof(
  { arbitrary: oddText, weight: 4 },
  { arbitrary: jsonNumber, weight: 2 },
  { arbitrary: fc.boolean(), weight: 1 },
  { arbitrary: fc.constant(null), weight: 1 },
  { arbitrary: fc.jsonValue({ maxDepth: 3 }), weight: 2 },
  { arbitrary: fc.array(oddText, { maxLength: 3 }), weight: 1 },
);

/** Values of the wrong type for any field, and literals that strain a JSON parser. */
export const hostileValues: readonly unknown[] = [
  null,
  true,
  false,
  0,
  -1,
  1.5,
  Number.MAX_SAFE_INTEGER + 2,
  "",
  "x".repeat(201),
  "x".repeat(5000),
  [],
  [1, 2],
  {},
  { nested: { deeper: [1, "two"] } },
  objectOf([["__proto__", { polluted: true }]]),
  objectOf([["constructor", { prototype: { polluted: true } }]]),
  "__proto__",
  "not-a-date",
  "2024-13-01T00:00:00Z",
  "1969-12-31T23:59:59.999Z",
  "not-a-uuid",
];

/**
 * Raw JSON number literals that JSON.stringify never writes: out of double
 * range (1e400 parses to Infinity), below it (1e-400 parses to 0), and integers
 * past 2^53.
 */
export const hostileNumberLiterals = ["1e400", "-1e400", "1e-400", "123456789012345678901234567890", "-0", "0.0000000000000000000000001", "1E+2", "1.7976931348623157e309"] as const;

/** Bytes that are not UTF-8: a stray continuation, an overlong NUL, a CESU surrogate, a truncated sequence, past U+10FFFF, 0xFF. */
export const invalidUtf8Sequences: readonly Uint8Array[] = [
  Uint8Array.of(0x80),
  Uint8Array.of(0xc0, 0x80),
  Uint8Array.of(0xed, 0xa0, 0x80),
  Uint8Array.of(0xed, 0xbf, 0xbf),
  Uint8Array.of(0xe2, 0x82),
  Uint8Array.of(0xf4, 0x90, 0x80, 0x80),
  Uint8Array.of(0xf8, 0x88, 0x80, 0x80, 0x80),
  Uint8Array.of(0xff),
  Uint8Array.of(0xfe, 0xff),
];

/** `[[[…]]]` or `{"a":{"a":…}}` nested `depth` levels, holding `leaf`. */
export function nestedJson(depth: number, kind: "array" | "object", leaf = "1"): string {
  return kind === "array" ? `${"[".repeat(depth)}${leaf}${"]".repeat(depth)}` : `${'{"a":'.repeat(depth)}${leaf}${"}".repeat(depth)}`;
}

/**
 * Counts of what the cases hit (statuses, codes, verdicts), printed after a
 * suite so that a property that silently stopped reaching its target shows.
 */
export class Tally {
  private readonly counts = new Map<string, number>();

  add(label: string): void {
    this.counts.set(label, (this.counts.get(label) ?? 0) + 1);
  }

  get(label: string): number {
    return this.counts.get(label) ?? 0;
  }

  toString(): string {
    return [...this.counts].sort(([left], [right]) => left.localeCompare(right)).map(([label, value]) => `${label}: ${value}`).join(", ");
  }
}

/**
 * Ends a fuzz file: closes the client, prints what each property reached and
 * the slowest answers, stops the server and fails when it had crashed or
 * logged an unexpected exception (those are logged before a 500).
 */
export async function finishFuzzing(server: ServerHandle | undefined, tallies: Record<string, { toString(): string }>): Promise<void> {
  closeClient();
  for (const [name, tally] of Object.entries(tallies)) console.log(`${name}: ${tally}`);
  console.log(String(slowestAnswers));
  if (!server) return;
  const stillRunning = server.process.exitCode === null && server.process.signalCode === null;
  const stderr = server.stderr();
  await server.stop();
  removeDataDir(server.dataDir);
  expect(stillRunning, stderr).toBe(true);
  expect(stderr).not.toMatch(/internal error|failed unexpectedly|Error:|uncaught/i);
}
