/**
 * HTTP helpers for every suite that talks to a real server: raw requests
 * through node:http, so a test controls the method, every header,
 * Content-Length versus chunked bodies, and still sees the answer when the
 * server refuses a large body early and closes the connection while the client
 * is writing (the fuzz suites add keep-alive and timing on top). Also: the
 * error-shape assertion of SPEC §1, trend counting for "was it stored?"
 * checks, the `eventide` CLI, and polling for changes the server must see
 * within a bound.
 */
import { request as httpRequest, type Agent, type IncomingHttpHeaders } from "node:http";
import { expect } from "vitest";
import { runEventide, type CliResult } from "./run-eventide.js";
import type { ServerHandle } from "./server.js";

export const mebibyte = 1024 * 1024;

export interface HttpAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
  /** The body parsed as JSON; undefined when it is not JSON. */
  body: any;
  /** From the start of the request to the end of the answer. */
  durationMs: number;
}

export interface SendOptions {
  method?: string;
  headers?: Record<string, string>;
  /** Bearer token for the query API. */
  token?: string;
  /** Raw body bytes; sent as is. */
  body?: string | Uint8Array;
  /** Send the body with Transfer-Encoding: chunked (no Content-Length), in pieces of this many bytes. */
  chunkBytes?: number;
  /** A keep-alive agent to reuse connections; by default each request has a connection of its own. */
  agent?: Agent;
}

/**
 * One request on its own connection. Resolves with the answer even when the
 * server answers before the body is fully sent and closes the socket (a 413
 * refused on Content-Length): write errors after the answer are expected then.
 * A connection error before any answer rejects, with `reusedSocket` set when
 * the request went out on a kept-alive socket (which the server may have
 * closed in the meantime).
 */
export function send(url: string, options: SendOptions = {}): Promise<HttpAnswer> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  const body = options.body === undefined ? undefined : typeof options.body === "string" ? Buffer.from(options.body, "utf8") : Buffer.from(options.body);
  if (body !== undefined && options.chunkBytes === undefined) headers["content-length"] = String(body.length);
  // A large body announces itself with Expect: 100-continue, as curl does, so a
  // server that refuses on Content-Length answers before the body is written and
  // the answer cannot be lost to a write error on the socket it closes.
  const expectContinue = body !== undefined && options.chunkBytes === undefined && body.length > 64 * 1024;
  if (expectContinue) headers.expect = "100-continue";
  const startedMs = performance.now();
  return new Promise((resolve, reject) => {
    let answered = false;
    const request = httpRequest(url, { method: options.method ?? "POST", headers, agent: options.agent ?? false }, (response) => {
      answered = true;
      const chunks: Buffer[] = [];
      let settled = false;
      const finish = () => {
        if (settled) return;
        settled = true;
        const text = Buffer.concat(chunks).toString("utf8");
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = undefined;
        }
        resolve({ status: response.statusCode ?? 0, headers: response.headers, text, body: parsed, durationMs: performance.now() - startedMs });
      };
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", finish);
      response.on("close", finish);
      response.on("error", finish);
    });
    request.on("error", (error) => {
      if (!answered) reject(Object.assign(error, { reusedSocket: request.reusedSocket }));
    });
    if (body === undefined) {
      request.end();
    } else if (expectContinue) {
      let sent = false;
      const sendBody = () => {
        if (sent || answered || request.destroyed) return;
        sent = true;
        request.end(body);
      };
      request.on("continue", sendBody);
      request.flushHeaders();
      // A server that ignores Expect gets the body anyway after a short wait (curl waits 1 s).
      setTimeout(sendBody, 300).unref();
    } else if (options.chunkBytes === undefined) {
      request.end(body);
    } else {
      // One piece per turn of the event loop, so an early answer is read (and
      // writing stops) before the server closes the connection under a write.
      const piece = options.chunkBytes;
      let offset = 0;
      const writeMore = () => {
        if (answered || request.destroyed) return;
        if (offset >= body.length) return void request.end();
        const next = body.subarray(offset, offset + piece);
        offset += next.length;
        if (request.write(next)) setImmediate(writeMore);
        else request.once("drain", () => setImmediate(writeMore));
      };
      writeMore();
    }
  });
}

/** POST a JSON value. */
export function sendJson(url: string, value: unknown, options: Omit<SendOptions, "body"> = {}): Promise<HttpAnswer> {
  return send(url, { ...options, headers: { "content-type": "application/json", ...options.headers }, body: JSON.stringify(value) });
}

/**
 * SPEC §1: every error is `{"ok":false,"error":{"code","message"}}` with a JSON
 * content type. `code` may list the codes the SPEC leaves open; `field`, when
 * given, must appear in the message.
 */
export function expectError(answer: HttpAnswer, status: number, code: string | string[], field?: string | RegExp): void {
  const context = `${answer.status} ${answer.text.slice(0, 300)}`;
  expect(answer.status, context).toBe(status);
  expect(answer.headers["content-type"], context).toMatch(/^application\/json\b/);
  expect(answer.body, context).toBeTypeOf("object");
  expect(Object.keys(answer.body).sort(), context).toEqual(["error", "ok"]);
  expect(answer.body.ok, context).toBe(false);
  expect(Object.keys(answer.body.error).sort(), context).toEqual(["code", "message"]);
  if (typeof code === "string") expect(answer.body.error.code, context).toBe(code);
  else expect(code, context).toContain(answer.body.error.code);
  expect(answer.body.error.message, context).toBeTypeOf("string");
  expect(answer.body.error.message.length, context).toBeGreaterThan(0);
  if (typeof field === "string") expect(answer.body.error.message, context).toContain(field);
  else if (field !== undefined) expect(answer.body.error.message, context).toMatch(field);
}

export function expectOk(answer: HttpAnswer): any {
  expect(answer.status, answer.text.slice(0, 500)).toBe(200);
  expect(answer.headers["content-type"]).toMatch(/^application\/json\b/);
  return answer.body;
}

/** A JSON object serialized to exactly `totalBytes` bytes by padding an ignored `pad` field (SPEC §1: unknown fields are ignored). */
export function paddedJson(value: Record<string, unknown>, totalBytes: number): string {
  const bare = JSON.stringify({ ...value, pad: "" });
  const missing = totalBytes - Buffer.byteLength(bare, "utf8");
  if (missing < 0) throw new Error(`cannot pad ${bare.length} bytes down to ${totalBytes}`);
  const text = JSON.stringify({ ...value, pad: "x".repeat(missing) });
  expect(Buffer.byteLength(text, "utf8")).toBe(totalBytes);
  return text;
}

let nameCounter = 0;
/** An event name no other test of this process uses, so tests can share one server. */
export function uniqueName(label: string): string {
  nameCounter += 1;
  return `${label}-${nameCounter}-${Math.random().toString(36).slice(2, 8)}`;
}

export type Server = Pick<ServerHandle, "queryUrl" | "ingestUrl" | "apiKey" | "token">;

export function ingestOne(server: Pick<Server, "ingestUrl">, apiKey: string, event: Record<string, unknown>): Promise<HttpAnswer> {
  return sendJson(`${server.ingestUrl}/ingest`, { apiKey, ...event });
}

export function ingestBatch(server: Pick<Server, "ingestUrl">, apiKey: string, events: unknown[]): Promise<HttpAnswer> {
  return sendJson(`${server.ingestUrl}/ingest/batch`, { apiKey, events });
}

export interface TrendQuery {
  event: string;
  dateFrom: string;
  dateTo: string;
  groupBy?: string;
  math?: string;
  filters?: unknown[];
}

/** The `data` of a trend query that must succeed. */
export async function trendData(server: Pick<Server, "queryUrl">, token: string, query: TrendQuery): Promise<Array<{ date: string; count: number }>> {
  const answer = await sendJson(`${server.queryUrl}/api/v1/query/trend`, query, { token });
  expect(answer.status, answer.text.slice(0, 300)).toBe(200);
  return answer.body.data;
}

/** Total (or unique) count of `event` over a date range. */
export async function countEvents(
  server: Pick<Server, "queryUrl">,
  token: string,
  event: string,
  dateFrom: string,
  dateTo = dateFrom,
  math: "total" | "unique" = "total",
): Promise<number> {
  const data = await trendData(server, token, { event, dateFrom, dateTo, math });
  return data.reduce((sum, bucket) => sum + bucket.count, 0);
}

/** `YYYY-MM-DD` of the UTC day holding timeMs. */
export function utcDate(timeMs: number): string {
  return new Date(timeMs).toISOString().slice(0, 10);
}

/** Yesterday..tomorrow (UTC): holds every event stamped with the server's time during the test, even across midnight. */
export function aroundToday(): [string, string] {
  const nowMs = Date.now();
  return [utcDate(nowMs - 86_400_000), utcDate(nowMs + 86_400_000)];
}

export function addDays(date: string, days: number): string {
  return utcDate(Date.parse(`${date}T00:00:00Z`) + days * 86_400_000);
}

/** `node bin/eventide.js ARGS` against a data directory (a running server's, usually). */
export function eventide(dataDir: string, ...args: string[]): Promise<CliResult> {
  return runEventide(args, { dataDir });
}

/** Runs the CLI and returns its one JSON line, failing the test unless it exits 0. */
export async function eventideOk(dataDir: string, ...args: string[]): Promise<any> {
  const result = await eventide(dataDir, ...args);
  expect(result.code, `${args.join(" ")}: ${result.stdout}${result.stderr}`).toBe(0);
  return result.output;
}

/**
 * Polls `condition` until it holds and returns how long that took; fails when it
 * still does not hold after `deadlineMs`.
 */
export async function elapsedUntil(condition: () => Promise<boolean>, deadlineMs: number, intervalMs = 25): Promise<number> {
  const startMs = Date.now();
  for (;;) {
    if (await condition()) return Date.now() - startMs;
    if (Date.now() - startMs > deadlineMs) throw new Error(`condition did not hold within ${deadlineMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

export interface SeenTiming {
  /** From `sinceMs` to when the earliest probe that saw the change was sent (negative: sent before `sinceMs`). */
  sentAfterMs: number;
  /** From `sinceMs` to that probe's answer. */
  answeredAfterMs: number;
  /** Probes sent in all. */
  probes: number;
}

/** One line for assertion messages and logs. */
export function describeSeen(timing: SeenTiming): string {
  return `first probe that saw it was sent ${Math.round(timing.sentAfterMs)} ms and answered ${Math.round(timing.answeredAfterMs)} ms after the change (${timing.probes} probes)`;
}

/**
 * How soon after `sinceMs` (a `performance.now()` reading) the server shows a
 * change (a figure to log, not to assert), measured so that a slow machine
 * counts against it as little as it can. `probe`
 * resolves true once the change shows, false while it does not; it throws on
 * any other answer. A probe goes out every `intervalMs` whether or not the
 * earlier ones have been answered (at most `inFlightMax` at once: 50 × 20 ms
 * keep probes going out through answers up to a second slow), and what
 * counts is when the earliest probe that saw the change was *sent*: a probe
 * sent at 900 ms that is answered at 1 100 ms shows the server had the change
 * once it took that request in, and how long its answer then took on a loaded
 * machine says nothing about the change. Waiting for each answer before
 * sending the next probe would instead add a whole round trip of lag, and
 * answers that wait for an fsync can take most of a second there. Probes that
 * are cheap for the server (no write, no worker) keep send and check close.
 *
 * Gives up `giveUpAfterMs` after `sinceMs`: a change not seen by then fails.
 */
export async function timeUntilSeen(
  probe: () => Promise<boolean>,
  options: { sinceMs: number; giveUpAfterMs?: number; intervalMs?: number; inFlightMax?: number },
): Promise<SeenTiming> {
  const { sinceMs, giveUpAfterMs = 10_000, intervalMs, inFlightMax } = options;
  let seen: { sentMs: number; answeredMs: number } | undefined;
  let probes = 0;
  // Probes sent earlier may still be on their way when one sees it, and may have seen it too: sendOpenLoop waits for them.
  await sendOpenLoop(
    async (sentMs) => {
      probes++;
      const shows = await probe();
      if (shows && (seen === undefined || sentMs < seen.sentMs)) seen = { sentMs, answeredMs: performance.now() };
    },
    () => seen === undefined && performance.now() - sinceMs <= giveUpAfterMs,
    { intervalMs, inFlightMax },
  );
  if (seen === undefined) throw new Error(`the change did not show within ${giveUpAfterMs} ms (${probes} probes)`);
  const { sentMs, answeredMs } = seen as { sentMs: number; answeredMs: number };
  return { sentAfterMs: sentMs - sinceMs, answeredAfterMs: answeredMs - sinceMs, probes };
}

/**
 * Calls `send` every `intervalMs` (with the `performance.now()` of the call)
 * without waiting for earlier calls to finish, at most `inFlightMax` at once,
 * while `goOn()` holds; then waits for every call. The first call that throws
 * stops the sending, and its error is thrown once the rest are done.
 */
export async function sendOpenLoop(
  send: (sentMs: number) => Promise<void>,
  goOn: () => boolean,
  { intervalMs = 20, inFlightMax = 50 }: { intervalMs?: number; inFlightMax?: number } = {},
): Promise<void> {
  let failure: { error: unknown } | undefined;
  const inFlight = new Set<Promise<void>>();
  while (failure === undefined && goOn()) {
    if (inFlight.size >= inFlightMax) {
      await Promise.race(inFlight);
      continue;
    }
    const running: Promise<void> = send(performance.now()).catch((error: unknown) => {
      failure ??= { error };
    });
    inFlight.add(running);
    void running.finally(() => inFlight.delete(running));
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  await Promise.all(inFlight);
  if (failure !== undefined) throw failure.error;
}
