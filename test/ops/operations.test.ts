/**
 * SPEC §8 through HTTP against the real server: /health and /ready on both
 * listeners, Prometheus /metrics and its off switch, the OpenAPI document
 * against the routes the server answers, JSON logs without secrets, and
 * start-up failures (bad settings, a port in use) as one JSON line and exit 1.
 */
import { spawn } from "node:child_process";
import { createServer, type AddressInfo, type Server as NetServer } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { routes } from "../../src/http/routes.js";
import { serverNodeFlags } from "../../src/config/node-flags.js";
import { elapsedUntil, expectError, expectOk, ingestBatch, ingestOne, send, sendJson } from "../helpers/http.js";
import { mainScript, makeDataDir, removeDataDir, repoRoot, serversPerFile, type ServerHandle } from "../helpers/server.js";

const get = { method: "GET" };
const start = serversPerFile("stop");

/** A sample's value in Prometheus text: `name{labels} value`; 0 when absent. */
function sample(text: string, series: string): number {
  for (const line of text.split("\n")) if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  return 0;
}

async function metricsText(server: ServerHandle): Promise<string> {
  const answer = await send(`${server.queryUrl}/metrics`, get);
  expect(answer.status).toBe(200);
  expect(answer.headers["content-type"]).toMatch(/^text\/plain/);
  return answer.text;
}

describe("operations endpoints", () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await start();
  });

  it("answers /health and /ready with 200 {ok:true} on both listeners, without credentials", async () => {
    for (const base of [server.queryUrl, server.ingestUrl]) {
      for (const path of ["/health", "/ready"]) {
        const answer = await send(`${base}${path}`, get);
        expect(answer.status, `${base}${path}`).toBe(200);
        expect(answer.body).toEqual({ ok: true });
      }
    }
    expect((await send(`${server.ingestUrl}/health`, get)).headers["access-control-allow-origin"]).toBe("*");
    expectError(await send(`${server.queryUrl}/health`, { method: "POST", body: "{}" }), 405, "method_not_allowed");
  });

  it("serves /metrics and /openapi.json on the query listener only", async () => {
    expectError(await send(`${server.ingestUrl}/metrics`, get), 404, "not_found");
    expectError(await send(`${server.ingestUrl}/openapi.json`, get), 404, "not_found");
    expect((await send(`${server.queryUrl}/openapi.json`, get)).status).toBe(200);
  });

  it("counts requests by route and status, events accepted and refused one by one, and labels unknown paths 'unknown'", async () => {
    const before = await metricsText(server);
    expectOk(await ingestOne(server, server.apiKey, { event: "m", distinctId: "u1" }));
    expectError(await ingestOne(server, server.apiKey, { event: "m" }), 400, "invalid_request");
    const batch = expectOk(await ingestBatch(server, server.apiKey, [{ event: "m", distinctId: "u" }, { distinctId: "u" }, { event: "m", distinctId: 2 }, 7]));
    expect(batch.accepted).toBe(2);
    // Refused whole: counted as requests only.
    expectError(await ingestOne(server, "ek_wrong", { event: "m", distinctId: "u1" }), 401, "unauthorized");
    expectError(await ingestBatch(server, server.apiKey, "not an array" as unknown as unknown[]), 400, "invalid_request");
    const probe = `/no-such-path-${Date.now()}`;
    expectError(await send(`${server.queryUrl}${probe}`, get), 404, "not_found");
    const after = await metricsText(server);

    const delta = (series: string) => sample(after, series) - sample(before, series);
    expect(delta("eventide_events_accepted_total")).toBe(3);
    expect(delta('eventide_events_refused_total{code="invalid_request"}')).toBe(3);
    expect(delta('eventide_http_requests_total{route="ingest",status="200"}')).toBe(1);
    expect(delta('eventide_http_requests_total{route="ingest",status="400"}')).toBe(1);
    expect(delta('eventide_http_requests_total{route="ingest",status="401"}')).toBe(1);
    expect(delta('eventide_http_requests_total{route="ingest_batch",status="200"}')).toBe(1);
    expect(delta('eventide_http_requests_total{route="ingest_batch",status="400"}')).toBe(1);
    expect(delta('eventide_http_requests_total{route="unknown",status="404"}')).toBe(1);
    expect(after).not.toContain(probe);
    expect(sample(after, 'eventide_http_request_duration_seconds_count{route="ingest"}')).toBeGreaterThanOrEqual(3);
    expect(sample(after, "eventide_wal_fsync_duration_seconds_count")).toBeGreaterThan(0);
    for (const name of ["eventide_write_queue_bytes", "eventide_worker_queue_tasks", "eventide_segments", "eventide_segment_bytes", "eventide_retention_cache_bytes", "process_resident_memory_bytes", "nodejs_heap_size_used_bytes"]) {
      expect(after, name).toMatch(new RegExp(`^${name} \\d`, "m"));
    }
    // Every route label is a route's name or "unknown": a fixed set whatever clients send.
    const names = new Set<string>([...routes.map((route) => route.name), "unknown"]);
    for (const match of after.matchAll(/^eventide_http_requests_total\{route="([^"]*)"/gm)) expect(names).toContain(match[1]);
  });

  it("counts retention cache hits and misses", async () => {
    const query = { cohortEvent: "m", retentionEvent: "m", dateFrom: "2024-01-01", dateTo: "2024-01-07" };
    const before = await metricsText(server);
    expectOk(await sendJson(`${server.queryUrl}/api/v1/query/retention`, query, { token: server.token }));
    expectOk(await sendJson(`${server.queryUrl}/api/v1/query/retention`, query, { token: server.token }));
    const after = await metricsText(server);
    const delta = (series: string) => sample(after, series) - sample(before, series);
    expect(delta('eventide_retention_cache_lookups_total{result="miss"}')).toBe(1);
    expect(delta('eventide_retention_cache_lookups_total{result="hit"}')).toBe(1);
  });

  it("turns /metrics off with EVENTIDE_METRICS=off", async () => {
    const quiet = await start({ env: { EVENTIDE_METRICS: "off" } });
    expectError(await send(`${quiet.queryUrl}/metrics`, get), 404, "not_found");
    expect((await send(`${quiet.queryUrl}/health`, get)).status).toBe(200);
  });
});

/** Runs the server until it exits by itself; for start-ups that must fail. */
function runToExit(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [...serverNodeFlags, mainScript], {
    cwd: repoRoot,
    env: { ...process.env, EVENTIDE_HOST: "127.0.0.1", EVENTIDE_QUERY_PORT: "0", EVENTIDE_INGEST_PORT: "0", EVENTIDE_WORKERS: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (chunk) => (stdout += chunk));
  child.stderr!.on("data", (chunk) => (stderr += chunk));
  const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  return new Promise((resolve) =>
    child.once("close", (code) => {
      clearTimeout(killer);
      resolve({ code, stdout, stderr });
    }),
  );
}

function jsonLines(text: string): Array<Record<string, unknown>> {
  return text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const parsed = JSON.parse(line) as Record<string, unknown>;
      expect(typeof parsed.level, line).toBe("string");
      expect(typeof parsed.time, line).toBe("string");
      expect(typeof parsed.msg, line).toBe("string");
      return parsed;
    });
}

describe("start-up failures", () => {
  const dataDirs: string[] = [];
  afterAll(() => dataDirs.forEach(removeDataDir));
  const dataDir = () => {
    const directory = makeDataDir("eventide-ops-");
    dataDirs.push(directory);
    return directory;
  };

  for (const [name, value] of [
    ["EVENTIDE_WORKERS", "many"],
    ["EVENTIDE_BATCH_EVENTS_MAX", "0"],
    ["EVENTIDE_QUERY_PORT", "99999"],
    ["EVENTIDE_LOG_LEVEL", "loud"],
    ["EVENTIDE_METRICS", "maybe"],
  ] as const) {
    it(`reports a bad ${name} as one JSON line naming it, without a stack trace, and exits 1`, async () => {
      const run = await runToExit({ EVENTIDE_DATA_DIR: dataDir(), [name]: value });
      expect(run.code).toBe(1);
      expect(run.stdout).toBe("");
      const lines = jsonLines(run.stderr);
      expect(lines).toHaveLength(1);
      expect(lines[0].level).toBe("fatal");
      expect(JSON.stringify(lines[0])).toContain(name);
      expect(run.stderr).not.toMatch(/\n\s+at /);
    });
  }

  it("prints first-start credentials only once both listeners are bound: a port in use creates no workspace", async () => {
    const blocker: NetServer = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    const port = (blocker.address() as AddressInfo).port;
    const directory = dataDir();
    try {
      const run = await runToExit({ EVENTIDE_DATA_DIR: directory, EVENTIDE_INGEST_PORT: String(port) });
      expect(run.code).toBe(1);
      expect(run.stdout).not.toContain("workspace-created");
      const lines = jsonLines(run.stderr);
      expect(lines.at(-1)!.level).toBe("fatal");
      expect(JSON.stringify(lines.at(-1))).toContain(String(port));
    } finally {
      blocker.close();
    }
    // The credentials were not lost: the next start on free ports creates and prints them.
    const next = await start({ dataDir: directory });
    expect(next.stdoutLines[0]).toContain('"workspace-created"');
    expectOk(await ingestOne(next, next.apiKey, { event: "after", distinctId: "u" }));
  });
});

describe("logs", () => {
  it("writes JSON lines with level, time and msg; one per request at debug, 4xx at info; never a key or token sent", async () => {
    const server = await start({ env: { EVENTIDE_LOG_LEVEL: "debug" } });
    const wrongKey = "ek_thisIsAWrongKeyThatMustNotBeLogged0123456789";
    const wrongToken = "et_thisIsAWrongTokenThatMustNotBeLogged0123456789";
    expectOk(await ingestOne(server, server.apiKey, { event: "logged", distinctId: "u" }));
    expectOk(await ingestBatch(server, server.apiKey, [{ event: "logged", distinctId: "u" }, {}]));
    expectError(await ingestOne(server, wrongKey, { event: "logged", distinctId: "u" }), 401, "unauthorized");
    expectError(await ingestBatch(server, wrongKey, [{ event: "logged", distinctId: "u" }]), 401, "unauthorized");
    expectError(await ingestOne(server, server.apiKey, { event: "logged", distinctId: { apiKey: server.apiKey } }), 400, "invalid_request");
    expectOk(await sendJson(`${server.queryUrl}/api/v1/query/trend`, { event: "logged", dateFrom: "2024-01-01", dateTo: "2024-01-02" }, { token: server.token }));
    expectError(await sendJson(`${server.queryUrl}/api/v1/query/trend`, { event: "logged", dateFrom: "2024-01-01" }, { token: server.token }), 400, "invalid_request");
    expectError(await sendJson(`${server.queryUrl}/api/v1/query/trend`, {}, { token: wrongToken }), 401, "unauthorized");
    expectOk(await send(`${server.queryUrl}/api/v1/internal/test-event`, { method: "POST", token: server.token }));
    expectError(await send(`${server.queryUrl}/nowhere?apiKey=${server.apiKey}&token=${server.token}`), 404, "not_found");
    const requestCount = 10;
    // The server writes each line before its answer, but this process reads the pipe when it gets to it.
    const requestLines = () => jsonLines(server.stderr()).filter((line) => line.msg === "request").length;
    await elapsedUntil(async () => requestLines() >= requestCount, 10_000).catch(() => undefined);
    const lines = jsonLines(server.stderr());
    const requests = lines.filter((line) => line.msg === "request");
    expect(requests).toHaveLength(requestCount);
    for (const line of requests) {
      const status = line.status as number;
      expect(line.level, JSON.stringify(line)).toBe(status >= 500 ? "error" : status >= 400 ? "info" : "debug");
    }
    for (const secret of [server.apiKey, server.token, wrongKey, wrongToken]) expect(server.stderr()).not.toContain(secret);
  });

  it("logs nothing per request at the default level but refusals", async () => {
    const server = await start({ env: { EVENTIDE_LOG_LEVEL: undefined } });
    expectOk(await ingestOne(server, server.apiKey, { event: "quiet", distinctId: "u" }));
    expectError(await ingestOne(server, "ek_wrong", { event: "quiet", distinctId: "u" }), 401, "unauthorized");
    await elapsedUntil(async () => jsonLines(server.stderr()).some((line) => line.msg === "request"), 10_000).catch(() => undefined);
    const requests = jsonLines(server.stderr()).filter((line) => line.msg === "request");
    expect(requests.map((line) => line.status)).toEqual([401]);
  });
});
