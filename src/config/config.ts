/**
 * Process configuration: environment → one frozen object, read once at start.
 * Limits live in limits.ts; this file holds where and how the process runs.
 */
import { availableParallelism } from "node:os";
import { resolve } from "node:path";

function portFromEnvironment(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new Error(`${name} must be a port number 0–65535, got ${JSON.stringify(raw)}`);
  return port;
}

function switchFromEnvironment(name: string, fallback: boolean): boolean {
  const raw = (process.env[name] ?? "").trim().toLowerCase();
  if (raw === "") return fallback;
  if (raw === "on") return true;
  if (raw === "off") return false;
  throw new Error(`${name} must be on or off, got ${JSON.stringify(process.env[name])}`);
}

/** How long a workspace's events are kept: forever, or whole UTC days (older days are dropped, files removed). */
export type RetentionPolicy = { kind: "forever" } | { kind: "days"; days: number };

/** A retention given as text: "forever", or a whole number of days, at least 1. Undefined when the text is neither. */
export function parseRetention(text: string): RetentionPolicy | undefined {
  const trimmed = text.trim().toLowerCase();
  if (trimmed === "forever") return { kind: "forever" };
  const days = Number(trimmed);
  return /^\d+$/.test(trimmed) && Number.isSafeInteger(days) && days >= 1 ? { kind: "days", days } : undefined;
}

function retentionFromEnvironment(name: string): RetentionPolicy {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === "") return { kind: "forever" };
  const retention = parseRetention(raw);
  if (retention === undefined) throw new Error(`${name} must be a whole number of days (at least 1) or forever, got ${JSON.stringify(raw)}`);
  return retention;
}

export interface Config {
  host: string;
  queryPort: number;
  ingestPort: number;
  dataDir: string;
  workerCount: number;
  /** fsync can be turned off only for throw-away benchmarks; the default keeps SPEC §2. */
  fsync: boolean;
  /** GET /metrics on the query listener; EVENTIDE_METRICS=off for a listener that must not expose figures. */
  metrics: boolean;
  /** Where events are stored: the embedded store (default) or a ClickHouse server or cluster. */
  store: StoreSettings;
  /** EVENTIDE_RETENTION_DAYS: every workspace's retention unless the registry sets its own (`eventide workspace retention`). */
  retention: RetentionPolicy;
}

export interface ClickHouseSettings {
  kind: "clickhouse";
  /** http://HOST:PORT of the server (or the cluster's entry server) Eventide talks to. */
  url: string;
  database: string;
  user: string;
  password: string;
  /** A cluster of the server's remote_servers: writes and queries go through a Distributed table over its shards. */
  cluster: string | undefined;
  /** Each shard's http://HOST:PORT, where `eventide clickhouse init` creates the shard's own table. */
  shardUrls: string[];
}

export type StoreSettings = { kind: "embedded" } | ClickHouseSettings;

/** EVENTIDE_STORE: empty or `embedded`, or clickhouse://[USER[:PASSWORD]@]HOST:PORT/DATABASE. */
export function storeFromEnvironment(): StoreSettings {
  const raw = (process.env.EVENTIDE_STORE ?? "").trim();
  if (raw === "" || raw === "embedded") return { kind: "embedded" };
  const expected = `EVENTIDE_STORE must be embedded or clickhouse://[USER[:PASSWORD]@]HOST:PORT/DATABASE, got ${JSON.stringify(raw)}`;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(expected);
  }
  const database = decodeURIComponent(url.pathname.replace(/^\//, ""));
  if (url.protocol !== "clickhouse:" || url.hostname === "" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(database)) throw new Error(expected);
  const cluster = process.env.EVENTIDE_CLICKHOUSE_CLUSTER || undefined;
  if (cluster !== undefined && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(cluster)) throw new Error(`EVENTIDE_CLICKHOUSE_CLUSTER must be a plain name, got ${JSON.stringify(cluster)}`);
  const shardUrls = (process.env.EVENTIDE_CLICKHOUSE_SHARD_URLS ?? "").split(",").map((text) => text.trim()).filter((text) => text !== "");
  return {
    kind: "clickhouse",
    url: `http://${url.port === "" ? `${url.hostname}:8123` : url.host}`,
    database,
    user: process.env.EVENTIDE_CLICKHOUSE_USER ?? (decodeURIComponent(url.username) || "default"),
    password: process.env.EVENTIDE_CLICKHOUSE_PASSWORD ?? decodeURIComponent(url.password),
    cluster,
    shardUrls,
  };
}

/** EVENTIDE_FSYNC: on unless `off` (a throw-away benchmark's setting). */
export function fsyncFromEnvironment(): boolean {
  return process.env.EVENTIDE_FSYNC !== "off";
}

export function loadConfig(): Config {
  const workersRaw = process.env.EVENTIDE_WORKERS;
  const workerCount = workersRaw ? Number(workersRaw) : availableParallelism();
  if (!Number.isInteger(workerCount) || workerCount < 1 || workerCount > 256) {
    throw new Error(`EVENTIDE_WORKERS must be an integer 1–256, got ${JSON.stringify(workersRaw)}`);
  }
  return Object.freeze({
    host: process.env.EVENTIDE_HOST || "127.0.0.1",
    queryPort: portFromEnvironment("EVENTIDE_QUERY_PORT", 8080),
    ingestPort: portFromEnvironment("EVENTIDE_INGEST_PORT", 8081),
    dataDir: resolve(process.env.EVENTIDE_DATA_DIR || "./data"),
    workerCount,
    fsync: fsyncFromEnvironment(),
    metrics: switchFromEnvironment("EVENTIDE_METRICS", true),
    store: storeFromEnvironment(),
    retention: retentionFromEnvironment("EVENTIDE_RETENTION_DAYS"),
  });
}
