/**
 * Servers started and stopped on one data directory, as the damage suites do:
 * each start keeps the first one's credentials, a refused start resolves with
 * its message, and everything is killed and removed after the file's tests.
 */
import { join } from "node:path";
import { afterAll, expect } from "vitest";
import { dayMs, isoDay, isoTime } from "./events.js";
import { type ServerHandle, ingestAll, makeDataDir, removeDataDir, startServer } from "./server.js";

export interface StoreRestarts {
  newDataDir(): string;
  /** A server on `dataDir` with `previous`'s credentials (new ones when absent). */
  start(dataDir: string, previous?: ServerHandle): Promise<ServerHandle>;
  /** The message a start that must fail failed with; undefined when it started. */
  refusal(dataDir: string, previous?: ServerHandle): Promise<string | undefined>;
}

export function storeRestarts(prefix: string, env: Record<string, string> = {}): StoreRestarts {
  const directories: string[] = [];
  const servers: ServerHandle[] = [];
  afterAll(async () => {
    for (const server of servers) await server.kill();
    for (const directory of directories) removeDataDir(directory);
  });
  const start = async (dataDir: string, previous?: ServerHandle): Promise<ServerHandle> => {
    const credentials = previous ? { apiKey: previous.apiKey, token: previous.token, workspaceId: previous.workspaceId } : undefined;
    const server = await startServer({ dataDir, credentials, workers: 1, env });
    servers.push(server);
    return server;
  };
  return {
    newDataDir() {
      const dataDir = makeDataDir(prefix);
      directories.push(dataDir);
      return dataDir;
    },
    start,
    refusal: (dataDir, previous) =>
      start(dataDir, previous).then(
        () => undefined,
        (error: Error) => error.message,
      ),
  };
}

/**
 * Two days of `view` events from `firstDayMs` (3 on the first by u0–u2, 2 on
 * the second by v0–v1), sealed by a clean stop: the stopped server and the two
 * day directories.
 */
export async function sealedTwoDays(restarts: StoreRestarts, firstDayMs: number): Promise<{ dataDir: string; server: ServerHandle; dayPaths: string[] }> {
  const dataDir = restarts.newDataDir();
  const server = await restarts.start(dataDir);
  await ingestAll(server, [
    ...[0, 1, 2].map((index) => ({ event: "view", distinctId: `u${index}`, timestamp: isoTime(firstDayMs + index) })),
    ...[0, 1].map((index) => ({ event: "view", distinctId: `v${index}`, timestamp: isoTime(firstDayMs + dayMs + index) })),
  ]);
  expect(await server.stop()).toBe(0);
  const workspace = join(dataDir, "ws", server.workspaceId);
  return { dataDir, server, dayPaths: [isoDay(firstDayMs), isoDay(firstDayMs + dayMs)].map((day) => join(workspace, day)) };
}
