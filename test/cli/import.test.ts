/**
 * `eventide import` line by line, against a real server on port 0: every
 * refused line is named by its number (lines it cannot read, lines the server
 * refuses, a line over the batch body cap, a run of refusals longer than one
 * answer lists) while its neighbours are stored; batches are cut at the
 * server's caps (body bytes, distinct days) so no event is refused for its
 * batch; a line without uuid is stored once though its batch is sent again.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { startFaultProxy } from "../helpers/proxy.js";
import { runEventide, succeeded } from "../helpers/run-eventide.js";
import { post, serversPerFile, type ServerHandle } from "../helpers/server.js";

const startServer = serversPerFile();

/** Small caps, on the server and the import alike: 1 MiB bodies (the smallest a batch may have), two days per batch. */
const caps = { EVENTIDE_BATCH_BODY_BYTES_MAX: String(1024 * 1024), EVENTIDE_BATCH_DAYS_MAX: "2" };

async function eventCount(server: ServerHandle, event: string): Promise<number> {
  const response = await post(`${server.queryUrl}/api/v1/query/trend`, { event, dateFrom: "2024-01-01", dateTo: "2024-01-31", groupBy: "month" }, { token: server.token });
  expect(response.status, response.text).toBe(200);
  return (response.body.data as Array<{ count: number }>).reduce((sum, bucket) => sum + bucket.count, 0);
}

function uuidOf(index: number): string {
  return `00000000-0000-4000-8000-${String(index).padStart(12, "0")}`;
}

/** A valid event on one of ten days, the days interleaved so that a batch not cut at the days cap would hold all ten. */
function goodEvent(index: number, name = "ok", extra: object = {}): string {
  const day = String(1 + (index % 10)).padStart(2, "0");
  return JSON.stringify({ event: name, distinctId: `u${index % 7}`, timestamp: `2024-01-${day}T12:00:00.000Z`, properties: { n: index }, uuid: uuidOf(index), ...extra });
}

describe("eventide import", () => {
  it("names every refused line, stores its neighbours, cuts batches at the caps, and a second import stores only the lines without uuid again", async () => {
    const server = await startServer({ env: caps });
    const lines: string[] = [];
    const expectedErrors: Array<{ line: number; code: string }> = [];
    let good = 0;
    const add = (line: string, error?: string) => {
      lines.push(line);
      if (error !== undefined) expectedErrors.push({ line: lines.length, code: error });
    };
    for (let index = 0; index < 40; index++) add(goodEvent(index)), good++;
    add("");
    add("not json at all", "invalid_json");
    add('{"event":"ok","distinctId":"u1","properties":{"n":1},"uuid":"' + uuidOf(9000) + '","x":tru}', "invalid_json");
    add("[1,2]", "invalid_json");
    add('{"event":"ok","distinctId":"u1"} {"event":"ok","distinctId":"u2"}', "invalid_json");
    add(JSON.stringify({ event: "ok", distinctId: "", timestamp: "2024-01-03T00:00:00Z", uuid: uuidOf(9001) }), "invalid_request");
    add(goodEvent(9002, "big", { properties: { blob: "x".repeat(1024 * 1024) } }), "payload_too_large");
    add(JSON.stringify({ event: "ok", distinctId: "u3", timestamp: "2024-01-04T00:00:00Z", properties: { blob: "y".repeat(70_000) }, uuid: uuidOf(9003) }), "invalid_request");
    // Escaped keys are read as JSON reads them: this is the uuid, not a second member beside one the import adds.
    add(`{"event":"escaped","distinctId":"u4","timestamp":"2024-01-05T00:00:00Z","u\\u0075id":"${uuidOf(9004)}"}`);
    add(`${JSON.stringify({ event: "nouuid", distinctId: "u5", timestamp: "2024-01-06T08:00:00+02:00" })}\r`);
    add(JSON.stringify({ event: "nouuid", distinctId: 42, timestamp: "2024-01-07T00:00:00Z" }));
    // Sixty events of ~60 KiB: more than one 1 MiB body holds.
    for (let index = 100; index < 160; index++) add(goodEvent(index, "wide", { properties: { blob: "w".repeat(60_000) } }));
    // More refusals in one batch than one answer lists (100), with valid events among and after them.
    for (let index = 200; index < 500; index++) {
      if (index % 2 === 0) add(JSON.stringify({ event: "ok", timestamp: "2024-01-08T00:00:00Z", uuid: uuidOf(index) }), "invalid_request");
      else add(goodEvent(index)), good++;
    }
    for (let index = 500; index < 520; index++) add(goodEvent(index)), good++;
    const file = join(server.dataDir, "events.ndjson");
    // The last line has no newline.
    writeFileSync(file, lines.join("\n"));

    const first = succeeded(await runEventide(["import", file, "--data-dir", server.dataDir, "--ingest-url", server.ingestUrl], { env: caps }));
    const nonBlank = lines.filter((line) => line.trim() !== "").length;
    expect(first).toMatchObject({ lines: nonBlank, accepted: nonBlank - expectedErrors.length, refused: expectedErrors.length });
    // The first 20 refused lines, in line order, whatever order their batches were answered in.
    expect(first.errors.map(({ line, code }: { line: number; code: string }) => ({ line, code }))).toEqual(expectedErrors.slice(0, 20));
    expect(first.errors.find((error: { line: number }) => error.line === 46).message).toMatch(/distinctId/);
    expect(await eventCount(server, "ok")).toBe(good);
    expect(await eventCount(server, "wide")).toBe(60);
    expect(await eventCount(server, "escaped")).toBe(1);
    expect(await eventCount(server, "nouuid")).toBe(2);
    expect(await eventCount(server, "big")).toBe(0);

    const second = succeeded(await runEventide(["import", file, "--data-dir", server.dataDir, "--ingest-url", server.ingestUrl], { env: caps }));
    expect(second).toMatchObject({ lines: nonBlank, refused: expectedErrors.length });
    expect(await eventCount(server, "ok")).toBe(good);
    expect(await eventCount(server, "wide")).toBe(60);
    expect(await eventCount(server, "escaped")).toBe(1);
    // Documented: a line without uuid gets a new one on every import.
    expect(await eventCount(server, "nouuid")).toBe(4);
  });

  it("stores a line without uuid once when its batch is sent again after the answer was lost", async () => {
    const server = await startServer();
    const lines = Array.from({ length: 2500 }, (_, index) => JSON.stringify({ event: "retried", distinctId: `u${index % 13}`, timestamp: "2024-01-09T10:00:00Z", properties: { n: index } }));
    const file = join(server.dataDir, "no-uuids.ndjson");
    writeFileSync(file, `${lines.join("\n")}\n`);
    // The answers to the first two batches of events (not the empty ones by which the import waits for its key) are lost after the server stored them.
    let eventBatches = 0;
    const proxy = await startFaultProxy(server.ingestUrl, (_index, contentLength) => (contentLength > 10_000 && eventBatches++ < 2 ? "lose-answer" : "forward"));
    try {
      const summary = succeeded(await runEventide(["import", file, "--data-dir", server.dataDir, "--ingest-url", proxy.url]));
      expect(summary).toMatchObject({ lines: 2500, accepted: 2500, refused: 0 });
      // Three batches, two of them sent twice.
      expect(eventBatches).toBeGreaterThanOrEqual(5);
    } finally {
      await proxy.close();
    }
    expect(await eventCount(server, "retried")).toBe(2500);
  });
});
