/**
 * The ClickHouse store as serve.ts and the CLI open it: the tables are
 * created or upgraded first (every start: a new Eventide brings its schema
 * along), then the outbox is opened and finishes what the last run left.
 */
import type { ClickHouseSettings } from "../config/config.js";
import { limits } from "../config/limits.js";
import { ClickHouseOutbox } from "./outbox.js";
import { initSchema, type SchemaState } from "./schema.js";

export async function openClickHouseStore(dataDir: string, fsync: boolean, settings: ClickHouseSettings): Promise<ClickHouseOutbox> {
  const schema = await initSchema(settings, limits.clickhouseRequestTimeoutMs);
  return ClickHouseOutbox.open(dataDir, fsync, settings, schema);
}

/** `eventide clickhouse init`: creates or upgrades the tables and says what it found. */
export async function initClickHouse(settings: ClickHouseSettings): Promise<SchemaState> {
  return initSchema(settings, limits.clickhouseRequestTimeoutMs);
}
