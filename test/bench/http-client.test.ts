/**
 * The benches' HTTP client against a real Eventide: a keep-alive socket the
 * server closed for idleness while the client's event loop was busy (as when
 * the query bench computes its reference answers) is still in the agent's
 * pool when the next request goes out. Sent over it, a request fails with
 * ECONNRESET; an idempotent one is sent again on a new socket.
 *
 * The client's busy time is not a guess: the main thread blocks in
 * Atomics.wait until the server has closed the pooled connections.
 */
import { Worker } from "node:worker_threads";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keepAliveAgent, post } from "../../bench/runner/http-client.js";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";

/** uWS checks idle timeouts on a timer of this period, so a connection opened one period later is closed in a later sweep. */
const uwsTimeoutTickMs = 4_000;

/**
 * Blocks this thread, as the query bench's synchronous reference answers do,
 * until the server has closed for idleness the connections last used before
 * the call. A worker thread opens a connection of its own one uWS timeout tick
 * later and wakes this thread when the server closes it: by then the older
 * connections, due a sweep earlier, are closed too.
 */
function blockUntilServerClosesIdleConnections(serverUrl: string): Worker {
  const signal = new Int32Array(new SharedArrayBuffer(4));
  const { hostname, port } = new URL(serverUrl);
  const worker = new Worker(
    `const { workerData } = require("node:worker_threads");
     setTimeout(() => {
       const socket = require("node:net").connect(Number(workerData.port), workerData.hostname);
       socket.resume();
       socket.on("close", () => { Atomics.store(workerData.signal, 0, 1); Atomics.notify(workerData.signal, 0); });
     }, workerData.delayMs);`,
    { eval: true, workerData: { signal, hostname, port, delayMs: uwsTimeoutTickMs + 500 } },
  );
  while (Atomics.load(signal, 0) === 0) Atomics.wait(signal, 0, 0);
  // The caller terminates the worker: awaiting that here would let the event loop see the closes.
  return worker;
}

describe("bench HTTP client over idle keep-alive connections", () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer();
  });
  afterAll(async () => {
    await server.stop();
    removeDataDir(server.dataDir);
  });

  it("retries an idempotent query once when its reused idle socket was reset, and fails a non-idempotent one", async () => {
    const url = `${server.queryUrl}/api/v1/query/trend`;
    const body = JSON.stringify({ event: "$pageview", dateFrom: "2024-01-01", dateTo: "2024-01-02" });
    const headers = { authorization: `Bearer ${server.token}` };
    const once = keepAliveAgent(1);
    const retrying = keepAliveAgent(1);
    try {
      expect((await post(once, url, body, { headers })).status).toBe(200);
      expect((await post(retrying, url, body, { headers, idempotent: true })).status).toBe(200);

      const watcher = blockUntilServerClosesIdleConnections(server.queryUrl);
      // Both calls start before the event loop runs again: each agent still holds its closed socket.
      const settled = Promise.allSettled([post(once, url, body, { headers }), post(retrying, url, body, { headers, idempotent: true })]);
      await watcher.terminate();
      const [notRetried, retried] = await settled;
      expect(notRetried.status === "rejected" && String(notRetried.reason)).toMatch(/reused idle socket was reset/);
      expect(retried.status === "fulfilled" || String(retried.reason.stack)).toBe(true);
      const answer = (retried as PromiseFulfilledResult<Awaited<ReturnType<typeof post>>>).value;
      expect(answer.status).toBe(200);
      expect(answer.retriedAfterIdleReset).toBe(true);
      expect(JSON.parse(answer.text)).toHaveProperty("data");
    } finally {
      once.destroy();
      retrying.destroy();
    }
  }, 60_000);
});
