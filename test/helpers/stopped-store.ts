/**
 * Servers started and stopped on one data directory, as the damage suites do:
 * each start keeps the first one's credentials, a refused start resolves with
 * its message, and everything is killed and removed after the file's tests.
 */
import { afterAll } from "vitest";
import { type ServerHandle, makeDataDir, removeDataDir, startServer } from "./server.js";

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
