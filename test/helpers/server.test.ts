/**
 * The tests' server helper bounds a start with a timer that kills a server
 * that never listened. Once a server listens, that timer must be gone: a
 * server killed mid-test by its own start timer looks like a crash.
 */
import { describe, expect, it } from "vitest";
import { ingestAll, serversPerFile, startServer } from "../helpers/server.js";

const start = serversPerFile();

describe("test server helper", () => {
  it("leaves a server that listened running past its start timeout", async () => {
    const startTimeoutMs = 15_000;
    const server = await start({ startTimeoutMs });
    // The scenario is the wait itself: the start timer would have fired by now.
    await new Promise((resolve) => setTimeout(resolve, startTimeoutMs + 500));
    expect(server.process.exitCode).toBe(null);
    await ingestAll(server, [{ event: "view", distinctId: "u1", timestamp: "2024-01-01T00:00:00Z" }]);
  });

  it("refuses a server that did not listen in time, and says so", async () => {
    await expect(startServer({ startTimeoutMs: 1 })).rejects.toThrow(/did not listen within 1 ms/);
  });
});
