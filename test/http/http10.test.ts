/**
 * HTTP/1.0 (SPEC §8). The uWebSockets.js build in use (v20.30) never hands an
 * HTTP/1.0 request to the application: it answers nothing and closes the
 * connection when its idle timer fires (~10 s). Nothing can answer or refuse
 * it from JavaScript, so the README tells proxies to speak HTTP/1.1 upstream.
 * This pins down what a client sees, consistently: no answer, and nothing
 * stored. If a uWS upgrade starts answering, this fails and the docs change.
 */
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countEvents } from "../helpers/http.js";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

let server: ServerHandle;
beforeAll(async () => {
  server = await startServer();
});
afterAll(async () => {
  await server.stop();
  removeDataDir(server.dataDir);
});

/** Writes `request` on a fresh connection; resolves with every byte received once the server closes it. */
function exchange(url: string, request: string): Promise<string> {
  const { port, hostname } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let received = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      received += chunk;
      // An HTTP/1.1 answer on a kept-alive connection: done once its body is in.
      const end = received.indexOf("\r\n\r\n");
      const length = /content-length: (\d+)/i.exec(received)?.[1];
      if (end >= 0 && length !== undefined && received.length >= end + 4 + Number(length)) socket.end();
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(received));
    socket.write(request);
  });
}

function ingestRequest(version: string, body: string): string {
  return `POST /ingest ${version}\r\nHost: eventide\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

describe("HTTP/1.0", () => {
  it("gets no answer and stores nothing, while the same request in HTTP/1.1 is stored", async () => {
    const old = JSON.stringify({ apiKey: server.apiKey, event: "http10", distinctId: "u", timestamp: "2024-03-01T10:00:00Z" });
    const received = await exchange(server.ingestUrl, ingestRequest("HTTP/1.0", old));
    expect(received).toBe("");
    const current = JSON.stringify({ apiKey: server.apiKey, event: "http11", distinctId: "u", timestamp: "2024-03-01T10:00:00Z" });
    const answer = await exchange(server.ingestUrl, ingestRequest("HTTP/1.1", current));
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    expect(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4))).toEqual({ ok: true });
    // Acknowledged events are counted by every query that starts after the answer; the 1.0 one never arrived.
    expect(await countEvents(server, server.token, "http11", "2024-03-01", "2024-03-01")).toBe(1);
    expect(await countEvents(server, server.token, "http10", "2024-03-01", "2024-03-01")).toBe(0);
  }, 60_000);

  it("gets no answer to a GET either, with or without keep-alive", async () => {
    expect(await exchange(server.queryUrl, "GET /health HTTP/1.0\r\nHost: eventide\r\n\r\n")).toBe("");
    expect(await exchange(server.queryUrl, "GET /health HTTP/1.0\r\nHost: eventide\r\nConnection: keep-alive\r\n\r\n")).toBe("");
  }, 60_000);
});
