/**
 * The tables Eventide keeps in ClickHouse, created and upgraded by Eventide
 * (`eventide clickhouse init`, and at every start): the events table,
 * partitioned by UTC day (a day number: ClickHouse's Date ends in 2105) and ordered for the queries, and a small table of
 * the schema versions applied. With a cluster, each shard holds its own
 * `events_local` and `events` is a Distributed table over them, sharded by the
 * `shard` column that Eventide fills itself (a hash of the user), so a user's
 * events sit on one shard and the forwarder knows where each row went.
 */
import type { ClickHouseSettings } from "../config/config.js";
import { ClickHouseClient, sqlIdentifier, sqlString } from "./client.js";

/** The table queries and inserts name. */
export const eventsTable = "events";
export const localEventsTable = "events_local";
const versionsTable = "eventide_schema";

/** Columns as every version of the schema has them; a later version adds with ALTER … ADD COLUMN IF NOT EXISTS. */
const eventsColumns = `(
  workspace String,
  event String,
  user String,
  time_ms Int64,
  day UInt32,
  uuid String,
  prop_keys Array(String),
  prop_values Array(String),
  block_id String,
  shard UInt32,
  stored_at DateTime DEFAULT now()
)`;

const mergeTree = "ENGINE = MergeTree PARTITION BY day ORDER BY (workspace, event, user, time_ms) SETTINGS index_granularity = 8192";

/** Schema versions, in order; each statement is idempotent, so a half-applied upgrade is simply applied again. */
const migrations: ReadonlyArray<{ version: number; statements: (database: string, table: string) => string[] }> = [
  { version: 1, statements: (database, table) => [`CREATE TABLE IF NOT EXISTS ${database}.${table} ${eventsColumns} ${mergeTree}`] },
];

export const schemaVersion = migrations[migrations.length - 1].version;

async function migrate(client: ClickHouseClient, database: string, table: string): Promise<number> {
  await client.run(`CREATE DATABASE IF NOT EXISTS ${database}`);
  await client.run(`CREATE TABLE IF NOT EXISTS ${database}.${versionsTable} (version UInt32, applied_at DateTime DEFAULT now()) ENGINE = TinyLog`);
  const applied = Number((await client.rows(`SELECT max(version) FROM ${database}.${versionsTable}`))[0]?.[0] ?? 0);
  for (const migration of migrations) {
    if (migration.version <= applied) continue;
    for (const statement of migration.statements(database, table)) await client.run(statement);
    await client.run(`INSERT INTO ${database}.${versionsTable} (version) VALUES (${migration.version})`);
  }
  return Math.max(applied, schemaVersion);
}

export interface SchemaState {
  /** How many shards rows are spread over (1 without a cluster). */
  shardCount: number;
}

/**
 * Creates or upgrades the tables. Without a cluster: `events` on the server.
 * With one: `events_local` on each shard (EVENTIDE_CLICKHOUSE_SHARD_URLS) and
 * the Distributed `events` on the entry server, whose cluster must list one
 * shard per URL, each of weight 1 (the shard column is taken modulo their count).
 */
export async function initSchema(settings: ClickHouseSettings, timeoutMs: number): Promise<SchemaState> {
  const database = sqlIdentifier(settings.database);
  const entry = ClickHouseClient.of(settings, timeoutMs);
  if (settings.cluster === undefined) {
    await migrate(entry, database, eventsTable);
    return { shardCount: 1 };
  }
  const cluster = sqlIdentifier(settings.cluster);
  const shards = await entry.rows(`SELECT shard_num, any(shard_weight) FROM system.clusters WHERE cluster = ${sqlString(cluster)} GROUP BY shard_num ORDER BY shard_num`);
  if (shards.length === 0) throw new Error(`the ClickHouse server has no cluster ${cluster} in its remote_servers`);
  if (shards.some((shard) => Number(shard[1]) !== 1)) throw new Error(`every shard of the cluster ${cluster} must have weight 1`);
  if (settings.shardUrls.length !== shards.length) {
    throw new Error(`EVENTIDE_CLICKHOUSE_SHARD_URLS lists ${settings.shardUrls.length} shard URLs, the cluster ${cluster} has ${shards.length} shards`);
  }
  for (const url of settings.shardUrls) await migrate(ClickHouseClient.of(settings, timeoutMs, url), database, localEventsTable);
  await entry.run(`CREATE DATABASE IF NOT EXISTS ${database}`);
  await entry.run(`CREATE TABLE IF NOT EXISTS ${database}.${eventsTable} ${eventsColumns} ENGINE = Distributed(${cluster}, ${database}, ${localEventsTable}, shard)`);
  return { shardCount: shards.length };
}
