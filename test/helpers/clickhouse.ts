/**
 * ClickHouse servers for tests: the process starter is shared with the bench
 * suite (bench/runner/clickhouse-server.ts); this adds the one-server-per-describe
 * lifecycle. A suite that needs one calls clickhouseBinary() and, when it is
 * undefined, skips with skipNotice() printed loudly.
 */
import { afterAll, beforeAll } from "vitest";
import { type ClickHouseHandle, type ClickHouseOptions, startClickHouse } from "../../bench/runner/clickhouse-server.js";

export { type ClickHouseHandle, type ClickHouseOptions, clickhouseBinary, freePort, skipNotice, startClickHouse, storeUrl } from "../../bench/runner/clickhouse-server.js";

/**
 * One ClickHouse server for the enclosing describe: started before its first
 * test, stopped after its last. The handle is filled in when the server has started.
 */
export function clickhousePerSuite(options: ClickHouseOptions = {}): ClickHouseHandle {
  const handle = {} as ClickHouseHandle;
  beforeAll(async () => {
    Object.assign(handle, await startClickHouse(options));
  }, 90_000);
  afterAll(async () => {
    if (handle.stop !== undefined) await handle.stop();
  });
  return handle;
}
