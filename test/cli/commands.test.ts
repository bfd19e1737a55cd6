/**
 * The `eventide` command as a self-hoster meets it: help and version in plain
 * text, the data directory it uses named and never created by accident, keys
 * and tokens listed and revoked by id, workspaces deleted only while no server
 * holds the data directory.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { secretHash } from "../../src/auth/secrets.js";
import { registryPath } from "../../src/storage/paths.js";
import { ingestAll, makeDataDir, post, removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";
import { binScript, runEventide, succeeded } from "../helpers/run-eventide.js";

let root: string;
let servers: ServerHandle[] = [];

beforeEach(() => {
  root = makeDataDir("eventide-cli-commands-");
});

afterEach(async () => {
  for (const server of servers) await server.stop();
  servers = [];
  removeDataDir(root);
});

describe("eventide help and version", () => {
  it("prints plain-text help listing commands, options and environment variables", async () => {
    for (const args of [["--help"], ["-h"], ["help"]]) {
      const result = await runEventide(args, { cwd: root });
      expect(result.code).toBe(0);
      expect(result.output).toBeUndefined();
      expect(result.stdout).toContain("Usage: eventide");
      expect(result.stdout).toContain("key list WORKSPACE");
      expect(result.stdout).toContain("--data-dir DIR");
      expect(result.stdout).toContain("EVENTIDE_DATA_DIR");
    }
    const one = await runEventide(["help", "export"], { cwd: root });
    expect(one.code).toBe(0);
    expect(one.stdout).toContain("--format FORMAT");
    const asOption = await runEventide(["key", "create", "--help"], { cwd: root });
    expect(asOption.stdout).toContain("--label TEXT");
    expect(readdirSync(root)).toEqual([]);
  });

  it("prints the version of package.json", async () => {
    const { version } = JSON.parse(readFileSync(join(import.meta.dirname, "..", "..", "package.json"), "utf8"));
    const result = await runEventide(["--version"], { cwd: root });
    expect(result.code).toBe(0);
    expect(result.stdout).toBe(`eventide ${version}\n`);
  });
});

describe("eventide and its data directory", () => {
  it("refuses to create a missing data directory, naming where it looked, unless --create or init", async () => {
    const refused = await runEventide(["workspace", "create", "acme"], { cwd: root });
    expect(refused.code).toBe(1);
    expect(Object.keys(refused.output)).toEqual(["error"]);
    expect(refused.output.error).toContain(join(root, "data"));
    expect(existsSync(join(root, "data"))).toBe(false);
    expect((await runEventide(["key", "list", "acme"], { cwd: root })).code).toBe(1);
    expect(existsSync(join(root, "data"))).toBe(false);

    const created = await runEventide(["workspace", "create", "acme", "--create"], { cwd: root });
    expect(succeeded(created).name).toBe("acme");
    expect(created.stderr).toContain(`data directory ${join(root, "data")}`);
    expect(existsSync(registryPath(join(root, "data")))).toBe(true);
    // An existing directory without a registry (a fresh clone's data/) is used as SPEC §0 says.
    const bare = join(root, "bare");
    mkdirSync(bare);
    expect(succeeded(await runEventide(["workspace", "list"], { dataDir: bare }))).toEqual([]);
  });

  it("takes --data-dir before or after the command, over EVENTIDE_DATA_DIR", async () => {
    const chosen = join(root, "chosen");
    const initialized = succeeded(await runEventide(["init", "--data-dir", chosen], { dataDir: join(root, "env") }));
    expect(initialized).toMatchObject({ dataDir: chosen, name: "default" });
    expect(existsSync(join(root, "env"))).toBe(false);
    expect(succeeded(await runEventide(["--data-dir", chosen, "workspace", "list"])).map((workspace: { name: string }) => workspace.name)).toEqual(["default"]);
    expect((await runEventide(["init", "--data-dir", chosen])).code).toBe(1);
  });
});

describe("eventide serve", () => {
  it("runs the server on the data directory it names, creating it, and stops cleanly on SIGTERM", async () => {
    const dataDir = join(root, "served");
    const env: NodeJS.ProcessEnv = { ...process.env, EVENTIDE_QUERY_PORT: "0", EVENTIDE_INGEST_PORT: "0", EVENTIDE_WORKERS: "1", EVENTIDE_WORKER_NICE: "0" };
    delete env.EVENTIDE_DATA_DIR;
    const child = spawn(process.execPath, [binScript, "serve", "--data-dir", dataDir], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    const listening = await new Promise<{ queryUrl: string }>((resolve, reject) => {
      createInterface({ input: child.stdout! }).on("line", (line) => {
        const parsed = JSON.parse(line);
        if (parsed.event === "listening") resolve(parsed);
      });
      void exited.then((code) => reject(new Error(`serve exited with ${code}`)));
    });
    expect(listening.queryUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(existsSync(registryPath(dataDir))).toBe(true);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  });
});

describe("eventide key and token ids", () => {
  it("lists keys and tokens by id and label, never the secret, and revokes by id", async () => {
    const dataDir = join(root, "data");
    const workspace = succeeded(await runEventide(["init"], { dataDir }));
    const { apiKey } = succeeded(await runEventide(["key", "create", "default", "--label", "web app"], { dataDir }));
    succeeded(await runEventide(["token", "create", "default", "--label=dashboard"], { dataDir }));
    const keys = succeeded(await runEventide(["key", "list", "default"], { dataDir }));
    expect(keys).toHaveLength(2);
    expect(keys[1]).toMatchObject({ label: "web app", revokedAt: null });
    expect(keys[0].id).toMatch(/^key_[0-9a-f]{16}$/);
    expect(JSON.stringify(keys)).not.toContain(apiKey);
    expect(JSON.stringify(keys)).not.toContain(secretHash(apiKey));
    const tokens = succeeded(await runEventide(["token", "list", workspace.workspaceId], { dataDir }));
    expect(tokens.map((token: { label: string | null }) => token.label)).toEqual([null, "dashboard"]);

    expect(succeeded(await runEventide(["key", "revoke", keys[1].id], { dataDir }))).toEqual({ revoked: true });
    expect(succeeded(await runEventide(["key", "list", "default"], { dataDir }))[1].revokedAt).toEqual(expect.any(String));
    // A token id is not a key id.
    expect((await runEventide(["key", "revoke", tokens[1].id], { dataDir })).code).toBe(1);
    expect(succeeded(await runEventide(["token", "revoke", tokens[1].id], { dataDir }))).toEqual({ revoked: true });
  });

  it("derives stable ids for credentials of a registry written before ids, without rewriting it", async () => {
    const dataDir = join(root, "data");
    succeeded(await runEventide(["init"], { dataDir }));
    const registry = JSON.parse(readFileSync(registryPath(dataDir), "utf8"));
    for (const credential of [...registry.workspaces[0].apiKeys, ...registry.workspaces[0].tokens]) delete credential.id;
    const legacy = `${JSON.stringify(registry, null, 2)}\n`;
    writeFileSync(registryPath(dataDir), legacy);
    const first = succeeded(await runEventide(["key", "list", "default"], { dataDir }));
    expect(first[0].id).toBe(`key_${registry.workspaces[0].apiKeys[0].hash.slice(0, 16)}`);
    expect(succeeded(await runEventide(["key", "list", "default"], { dataDir }))).toEqual(first);
    expect(readFileSync(registryPath(dataDir), "utf8")).toBe(legacy);
    expect(succeeded(await runEventide(["key", "revoke", first[0].id], { dataDir }))).toEqual({ revoked: true });
    expect(JSON.parse(readFileSync(registryPath(dataDir), "utf8")).workspaces[0].apiKeys[0].hash).toBe(registry.workspaces[0].apiKeys[0].hash);
  });
});

describe("eventide workspace delete", () => {
  it("is refused while a server holds the data directory, and then removes credentials and events", async () => {
    const dataDir = join(root, "data");
    const server = await startServer({ dataDir });
    servers.push(server);
    const other = succeeded(await runEventide(["workspace", "create", "doomed"], { dataDir }));
    // The server reads the new key at its next registry poll (within a second).
    for (let waitedMs = 0; waitedMs < 10_000; waitedMs += 50) {
      if ((await post(`${server.ingestUrl}/ingest/batch`, { apiKey: other.apiKey, events: [] })).status === 200) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await ingestAll({ ingestUrl: server.ingestUrl, apiKey: other.apiKey }, [{ event: "x", distinctId: "u", timestamp: "2024-05-01T00:00:00Z" }]);
    await ingestAll(server, [{ event: "kept", distinctId: "u", timestamp: "2024-05-01T00:00:00Z" }]);

    expect((await runEventide(["workspace", "delete", "doomed"], { dataDir })).output.error).toContain("--yes");
    const refused = await runEventide(["workspace", "delete", "doomed", "--yes"], { dataDir });
    expect(refused.code).toBe(1);
    expect(refused.output.error).toContain("stop it first");

    // Killed, not stopped: its rows are still in the write-ahead log, which the delete seals first.
    await server.kill();
    const deleted = succeeded(await runEventide(["workspace", "delete", "doomed", "--yes"], { dataDir }));
    expect(deleted).toEqual({ deleted: true, workspaceId: other.workspaceId, name: "doomed" });
    expect(existsSync(join(dataDir, "ws", other.workspaceId))).toBe(false);
    expect(succeeded(await runEventide(["workspace", "list"], { dataDir })).map((workspace: { name: string }) => workspace.name)).toEqual(["default"]);

    const restarted = await startServer({ dataDir, credentials: { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId } });
    servers.push(restarted);
    expect(existsSync(join(dataDir, "ws", other.workspaceId))).toBe(false);
    expect((await post(`${restarted.ingestUrl}/ingest`, { apiKey: other.apiKey, event: "x", distinctId: "u" })).status).toBe(401);
    const kept = await post(`${restarted.queryUrl}/api/v1/query/trend`, { event: "kept", dateFrom: "2024-05-01", dateTo: "2024-05-01" }, { token: server.token });
    expect(kept.body.data).toEqual([{ date: "2024-05-01", count: 1 }]);
  });
});
