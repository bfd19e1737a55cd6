/**
 * Private ClickHouse servers for the tests and the bench suite: each a
 * `clickhouse-server` process of its own, with its own config file, ports and
 * data directory in a temp directory, stopped (and the directory removed)
 * after. No system service is used. A caller that needs one calls
 * clickhouseBinary() and, when it is undefined, skips with skipNotice()
 * printed loudly. A server still running when this process exits is killed
 * and its directory removed, so an interrupted bench leaves none behind.
 *
 * Estimate: 18.16 starts in ~1–3 s (it answers SELECT 1 once its tables of
 * the system database are attached); its data directory starts at a few MB.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const binaryCandidates = ["/usr/bin/clickhouse-server", "/usr/sbin/clickhouse-server", "/usr/local/bin/clickhouse-server"];

/** EVENTIDE_TEST_CLICKHOUSE_SERVER names the binary, else the first of the usual places that exists. */
export function clickhouseBinary(): string | undefined {
  return process.env.EVENTIDE_TEST_CLICKHOUSE_SERVER ?? binaryCandidates.find((path) => existsSync(path));
}

export function skipNotice(suite: string): string {
  return `\n${"!".repeat(78)}\n!! SKIPPED: ${suite} — no clickhouse-server binary (apt-get install clickhouse-server)\n${"!".repeat(78)}\n`;
}

/** A port free right now (the server binds it a moment later; a collision fails the start loudly). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface ClickHouseHandle {
  /** http://127.0.0.1:PORT */
  httpUrl: string;
  /** The server process's id while it runs (its CPU for the bench). */
  pid(): number | undefined;
  httpPort: number;
  tcpPort: number;
  directory: string;
  /** Runs a statement over HTTP and returns the answer's text. */
  sql(statement: string): Promise<string>;
  /** SIGKILL, wait for the exit. */
  kill(): Promise<void>;
  /** Starts the same server again on the same ports and data. */
  restart(): Promise<void>;
  /** SIGTERM, wait for the exit, remove the directory. */
  stop(): Promise<void>;
}

export interface ClickHouseOptions {
  /** remote_servers: cluster name → the TCP ports of its shards (each on 127.0.0.1). */
  clusters?: Record<string, number[]>;
  tcpPort?: number;
}

function configXml(directory: string, httpPort: number, tcpPort: number, clusters: Record<string, number[]>): string {
  const remoteServers = Object.entries(clusters)
    .map(([name, ports]) => `<${name}>${ports.map((port) => `<shard><replica><host>127.0.0.1</host><port>${port}</port></replica></shard>`).join("")}</${name}>`)
    .join("");
  return `<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>${directory}/server.log</log><errorlog>${directory}/error.log</errorlog></logger>
  <http_port>${httpPort}</http_port>
  <tcp_port>${tcpPort}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>${directory}/data/</path>
  <tmp_path>${directory}/tmp/</tmp_path>
  <user_files_path>${directory}/user_files/</user_files_path>
  <format_schema_path>${directory}/format_schemas/</format_schema_path>
  <users_config>${directory}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <remote_servers>${remoteServers}</remote_servers>
</yandex>
`;
}

const usersXml = `<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
`;

/** Servers started and not yet stopped: killed, and their directories removed, if this process exits first. */
const runningServers = new Map<string, ChildProcess | undefined>();
let exitHookInstalled = false;

function killRunningServers(): void {
  for (const [directory, child] of runningServers) {
    if (child !== undefined && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    rmSync(directory, { recursive: true, force: true });
  }
  runningServers.clear();
}

export async function startClickHouse(options: ClickHouseOptions = {}): Promise<ClickHouseHandle> {
  const binary = clickhouseBinary();
  if (binary === undefined) throw new Error("no clickhouse-server binary");
  const directory = mkdtempSync(join(tmpdir(), "eventide-clickhouse-"));
  mkdirSync(join(directory, "data"));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", killRunningServers);
  }
  runningServers.set(directory, undefined);
  const httpPort = await freePort();
  const tcpPort = options.tcpPort ?? (await freePort());
  writeFileSync(join(directory, "config.xml"), configXml(directory, httpPort, tcpPort, options.clusters ?? {}));
  writeFileSync(join(directory, "users.xml"), usersXml);
  const httpUrl = `http://127.0.0.1:${httpPort}`;
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let output = "";

  const sql = async (statement: string): Promise<string> => {
    const response = await fetch(`${httpUrl}/`, { method: "POST", body: statement });
    const text = await response.text();
    if (!response.ok) throw new Error(`ClickHouse ${response.status}: ${text}`);
    return text;
  };

  const launch = async () => {
    output = "";
    child = spawn(binary, [`--config-file=${join(directory, "config.xml")}`], { cwd: directory, stdio: ["ignore", "pipe", "pipe"] });
    runningServers.set(directory, child);
    child.stdout!.on("data", (data: Buffer) => (output = (output + data.toString()).slice(-4000)));
    child.stderr!.on("data", (data: Buffer) => (output = (output + data.toString()).slice(-4000)));
    const process = child;
    let spawnError: Error | undefined;
    exited = new Promise((resolve) => {
      process.once("exit", () => resolve());
      // A binary that cannot be executed emits this instead of exiting.
      process.once("error", (error) => {
        spawnError = error;
        resolve();
      });
    });
    // Ready when it answers; each try is an HTTP request that fails at once while nothing listens.
    const deadlineMs = performance.now() + 60_000;
    for (;;) {
      if (spawnError !== undefined) throw new Error(`clickhouse-server could not be started (${binary}): ${spawnError.message}`);
      if (process.exitCode !== null || process.signalCode !== null) throw new Error(`clickhouse-server exited at start:\n${output}`);
      try {
        await sql("SELECT 1");
        return;
      } catch {
        if (performance.now() > deadlineMs) throw new Error(`clickhouse-server did not answer within 60 s:\n${output}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  };
  try {
    await launch();
  } catch (error) {
    child?.kill("SIGKILL");
    await exited;
    runningServers.delete(directory);
    rmSync(directory, { recursive: true, force: true });
    throw error;
  }

  return {
    httpUrl,
    pid() {
      return child !== undefined && child.exitCode === null && child.signalCode === null ? child.pid : undefined;
    },
    httpPort,
    tcpPort,
    directory,
    sql,
    async kill() {
      child?.kill("SIGKILL");
      await exited;
    },
    async restart() {
      await launch();
    },
    async stop() {
      if (child !== undefined && child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        await exited;
      }
      runningServers.delete(directory);
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/** EVENTIDE_STORE for a database on a test server. */
export function storeUrl(clickhouse: Pick<ClickHouseHandle, "httpPort">, database: string): string {
  return `clickhouse://127.0.0.1:${clickhouse.httpPort}/${database}`;
}
