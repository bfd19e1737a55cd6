/**
 * The `eventide` command as users run it: real `node bin/eventide.js` processes
 * (the compiled dist/, built by `npm test` before vitest runs) on temporary data
 * dirs. Checks SPEC §0: one JSON line per command, errors as `{"error":"…"}`
 * with exit 1, secrets that are random and never stored in plain text, writers
 * that never lose each other's changes, and a running server's credential store
 * that sees CLI changes within a second.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";

import { CredentialStore } from "../src/auth/credential-store.js";
import { secretHash } from "../src/auth/secrets.js";
import { runCli, type CliCommand, type CliIo } from "../src/cli.js";
import { isWorkspaceId, registryLockPath, registryPath } from "../src/storage/paths.js";
import { runEventide, type CliResult } from "./helpers/run-eventide.js";
import { makeDataDir, removeDataDir, repoRoot } from "./helpers/server.js";
import { elapsedUntil } from "./helpers/http.js";

const secretPattern = /^(ek|et)_[A-Za-z0-9_-]+$/;

/** Every stdout is exactly one line of JSON. */
function expectOneJsonLine(result: CliResult): void {
  expect(result.stdout.endsWith("\n")).toBe(true);
  expect(result.stdout.slice(0, -1)).not.toContain("\n");
  expect(result.output).toBeDefined();
}

function expectSuccess(result: CliResult): any {
  // Commands that change the data directory name it on stderr; nothing else goes there.
  expect(result.stderr.replace(/^eventide: data directory .*\n/, "")).toBe("");
  expect(result.code).toBe(0);
  expectOneJsonLine(result);
  return result.output;
}

function expectFailure(result: CliResult, messagePart?: string): string {
  expect(result.code).toBe(1);
  expectOneJsonLine(result);
  expect(Object.keys(result.output)).toEqual(["error"]);
  expect(typeof result.output.error).toBe("string");
  if (messagePart !== undefined) expect(result.output.error).toContain(messagePart);
  return result.output.error;
}

/** Every file under `directory`, read as bytes, so secrets can be searched for. */
function filesUnder(directory: string): { path: string; content: Buffer }[] {
  const files: { path: string; content: Buffer }[] = [];
  for (const name of readdirSync(directory)) {
    const path = join(directory, name);
    if (statSync(path).isDirectory()) files.push(...filesUnder(path));
    else files.push({ path, content: readFileSync(path) });
  }
  return files;
}

/**
 * Milliseconds until `condition` holds, checked every 5 ms from now (called
 * right after the CLI answered, so its write is done). The check is a lookup
 * in the store this process opened: no request, so nothing but the store's own
 * reload stands between the change and the check. Gives up only after 10 s, so
 * that a change seen late fails the caller's 1 s assertion with its real delay.
 */
function msUntil(condition: () => boolean): Promise<number> {
  return elapsedUntil(async () => condition(), 10_000, 5);
}

let dataDir: string;

beforeAll(() => {
  if (!existsSync(join(repoRoot, "dist", "src", "cli.js"))) {
    throw new Error("dist/src/cli.js is missing: run `npx tsc -p tsconfig.json` (npm test does) before these tests");
  }
});

beforeEach(() => {
  dataDir = makeDataDir("eventide-cli-");
});

afterEach(() => {
  removeDataDir(dataDir);
});

describe("eventide workspace", () => {
  it("creates a workspace and prints its id, name, API key and token", async () => {
    const output = expectSuccess(await runEventide(["workspace", "create", "Acme Inc."], { dataDir }));
    expect(Object.keys(output)).toEqual(["workspaceId", "name", "apiKey", "token"]);
    expect(isWorkspaceId(output.workspaceId)).toBe(true);
    expect(output.name).toBe("Acme Inc.");
    expect(output.apiKey).toMatch(/^ek_/);
    expect(output.token).toMatch(/^et_/);
  });

  it("lists workspaces with id, name and creation time", async () => {
    expect(expectSuccess(await runEventide(["workspace", "list"], { dataDir }))).toEqual([]);
    const acme = expectSuccess(await runEventide(["workspace", "create", "acme"], { dataDir }));
    const globex = expectSuccess(await runEventide(["workspace", "create", "globex"], { dataDir }));
    const listed = expectSuccess(await runEventide(["workspace", "list"], { dataDir }));
    expect(listed).toEqual([
      { workspaceId: acme.workspaceId, name: "acme", createdAt: expect.any(String) },
      { workspaceId: globex.workspaceId, name: "globex", createdAt: expect.any(String) },
    ]);
    for (const workspace of listed) expect(new Date(workspace.createdAt).toISOString()).toBe(workspace.createdAt);
  });

  it("refuses a taken name with an error line and exit 1", async () => {
    expectSuccess(await runEventide(["workspace", "create", "acme"], { dataDir }));
    expectFailure(await runEventide(["workspace", "create", "acme"], { dataDir }), "acme");
    expect(expectSuccess(await runEventide(["workspace", "list"], { dataDir }))).toHaveLength(1);
  });

  it("refuses an empty or over-long name", async () => {
    expectFailure(await runEventide(["workspace", "create", ""], { dataDir }), "1–100");
    expectFailure(await runEventide(["workspace", "create", "n".repeat(101)], { dataDir }), "1–100");
  });

  it("uses ./data under the working directory when EVENTIDE_DATA_DIR is not set", async () => {
    const created = expectSuccess(await runEventide(["workspace", "create", "acme", "--create"], { cwd: dataDir }));
    expect(JSON.parse(readFileSync(join(dataDir, "data", "_registry.json"), "utf8")).workspaces[0].workspaceId).toBe(created.workspaceId);
  });
});

describe("eventide key and token", () => {
  it("creates API keys and tokens for a workspace named by name or by id", async () => {
    const acme = expectSuccess(await runEventide(["workspace", "create", "acme"], { dataDir }));
    const byName = expectSuccess(await runEventide(["key", "create", "acme"], { dataDir }));
    expect(Object.keys(byName)).toEqual(["apiKey"]);
    expect(byName.apiKey).toMatch(/^ek_/);
    const byId = expectSuccess(await runEventide(["token", "create", acme.workspaceId], { dataDir }));
    expect(Object.keys(byId)).toEqual(["token"]);
    expect(byId.token).toMatch(/^et_/);

    const registry = JSON.parse(readFileSync(registryPath(dataDir), "utf8"));
    expect(registry.workspaces[0].apiKeys.map((credential: { hash: string }) => credential.hash)).toContain(secretHash(byName.apiKey));
    expect(registry.workspaces[0].tokens.map((credential: { hash: string }) => credential.hash)).toContain(secretHash(byId.token));
  });

  it("refuses to create credentials for an unknown workspace", async () => {
    expectFailure(await runEventide(["key", "create", "nope"], { dataDir }), "nope");
    expectFailure(await runEventide(["token", "create", "nope"], { dataDir }), "nope");
  });

  it("revokes keys and tokens, and refuses unknown ones with exit 1", async () => {
    const acme = expectSuccess(await runEventide(["workspace", "create", "acme"], { dataDir }));
    expect(expectSuccess(await runEventide(["key", "revoke", acme.apiKey], { dataDir }))).toEqual({ revoked: true });
    expect(expectSuccess(await runEventide(["token", "revoke", acme.token], { dataDir }))).toEqual({ revoked: true });

    expectFailure(await runEventide(["key", "revoke", "ek_never-issued"], { dataDir }));
    expectFailure(await runEventide(["token", "revoke", "et_never-issued"], { dataDir }));
    // A key is not a token: revoking it with the other command is an unknown secret.
    const globex = expectSuccess(await runEventide(["workspace", "create", "globex"], { dataDir }));
    const error = expectFailure(await runEventide(["token", "revoke", globex.apiKey], { dataDir }));
    expect(error).not.toContain(globex.apiKey);
    expectFailure(await runEventide(["key", "revoke", globex.token], { dataDir }));
  });
});

describe("eventide secrets", () => {
  it("are random, at least 128 bits, and distinct", async () => {
    const secrets: string[] = [];
    const acme = expectSuccess(await runEventide(["workspace", "create", "acme"], { dataDir }));
    secrets.push(acme.apiKey, acme.token);
    secrets.push(expectSuccess(await runEventide(["key", "create", "acme"], { dataDir })).apiKey);
    secrets.push(expectSuccess(await runEventide(["token", "create", "acme"], { dataDir })).token);
    for (const secret of secrets) {
      expect(secret).toMatch(secretPattern);
      const randomBytes = Buffer.from(secret.slice(3), "base64url");
      expect(randomBytes.length * 8).toBeGreaterThanOrEqual(128);
    }
    expect(new Set(secrets).size).toBe(secrets.length);
  });

  it("never appear in plain text in the data dir, which holds their SHA-256 hashes only", async () => {
    const secrets: string[] = [];
    const acme = expectSuccess(await runEventide(["workspace", "create", "acme"], { dataDir }));
    secrets.push(acme.apiKey, acme.token);
    secrets.push(expectSuccess(await runEventide(["key", "create", "acme"], { dataDir })).apiKey);
    secrets.push(expectSuccess(await runEventide(["token", "create", acme.workspaceId], { dataDir })).token);
    expectSuccess(await runEventide(["key", "revoke", secrets[2]], { dataDir }));

    const files = filesUnder(dataDir);
    expect(files.map((file) => file.path)).toEqual([registryPath(dataDir)]);
    for (const { content } of files) {
      for (const secret of secrets) {
        expect(content.includes(secret)).toBe(false);
        // Not even the random part without its prefix.
        expect(content.includes(secret.slice(3))).toBe(false);
        expect(content.includes(Buffer.from(secret.slice(3), "base64url"))).toBe(false);
      }
    }
    const registry = JSON.parse(readFileSync(registryPath(dataDir), "utf8"));
    const hashes = registry.workspaces.flatMap((workspace: any) => [...workspace.apiKeys, ...workspace.tokens].map((credential) => credential.hash));
    expect(hashes.sort()).toEqual(secrets.map(secretHash).sort());
    for (const workspace of registry.workspaces) {
      for (const credential of [...workspace.apiKeys, ...workspace.tokens]) {
        expect(Object.keys(credential).every((key) => ["hash", "id", "label", "createdAt", "revokedAt"].includes(key))).toBe(true);
        expect(credential.hash).toMatch(/^[0-9a-f]{64}$/);
      }
    }
  });
});

describe("eventide usage", () => {
  it("answers a missing, unknown or malformed command with a usage error and exit 1", async () => {
    expectFailure(await runEventide([], { dataDir }), "usage: ");
    expectFailure(await runEventide(["frobnicate"], { dataDir }), "usage: ");
    expectFailure(await runEventide(["workspace"], { dataDir }), "workspace create NAME");
    expectFailure(await runEventide(["workspace", "create"], { dataDir }), "usage: eventide workspace create NAME");
    expectFailure(await runEventide(["workspace", "create", "two", "words"], { dataDir }), "usage: eventide workspace create NAME");
    expectFailure(await runEventide(["key", "revoke"], { dataDir }), "usage: eventide key revoke KEY");
    expectFailure(await runEventide(["workspace", "create", "--unknown-option", "x"], { dataDir }), "unknown option --unknown-option");
    expect(filesUnder(dataDir)).toEqual([]);
  });

  it("takes a workspace name that looks like an option after --", async () => {
    expect(expectSuccess(await runEventide(["workspace", "create", "--", "--x"], { dataDir })).name).toBe("--x");
  });

  it("prints the commands on help, as text, and exits 0", async () => {
    const result = await runEventide(["--help"], { dataDir });
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("eventide token revoke TOKEN");
  });

  it("reports an invalid registry as an error line instead of overwriting it", async () => {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(registryPath(dataDir), "{oops");
    expectFailure(await runEventide(["workspace", "create", "acme"], { dataDir }), "_registry.json");
    expect(readFileSync(registryPath(dataDir), "utf8")).toBe("{oops");
  });
});

describe("eventide with other writers", () => {
  it("loses no update when 10 workspace creates and 10 key creates run in parallel", async () => {
    expectSuccess(await runEventide(["workspace", "create", "shared"], { dataDir }));
    const results = await Promise.all([
      ...Array.from({ length: 10 }, (_, index) => runEventide(["workspace", "create", `parallel-${index}`], { dataDir })),
      ...Array.from({ length: 10 }, () => runEventide(["key", "create", "shared"], { dataDir })),
    ]);
    const outputs = results.map(expectSuccess);

    const listed = expectSuccess(await runEventide(["workspace", "list"], { dataDir }));
    expect(listed.map((workspace: { name: string }) => workspace.name).sort()).toEqual(
      ["shared", ...Array.from({ length: 10 }, (_, index) => `parallel-${index}`)].sort(),
    );
    const registry = JSON.parse(readFileSync(registryPath(dataDir), "utf8"));
    const shared = registry.workspaces.find((workspace: { name: string }) => workspace.name === "shared");
    const sharedHashes = new Set(shared.apiKeys.map((credential: { hash: string }) => credential.hash));
    expect(sharedHashes.size).toBe(11);
    for (const output of outputs.slice(10)) expect(sharedHashes.has(secretHash(output.apiKey))).toBe(true);

    // Atomic writes and the lock leave nothing behind.
    expect(readdirSync(dataDir)).toEqual(["_registry.json"]);
  }, 240_000);

  it("breaks a lock left by a killed writer, even when several writers find it at once", async () => {
    const killed = spawnSync(process.execPath, ["-e", ""]);
    writeFileSync(registryLockPath(dataDir), JSON.stringify({ pid: killed.pid, host: hostname(), nonce: "killed", acquiredAt: new Date().toISOString() }));
    const results = await Promise.all(Array.from({ length: 6 }, (_, index) => runEventide(["workspace", "create", `after-crash-${index}`], { dataDir })));
    results.forEach(expectSuccess);
    expect(expectSuccess(await runEventide(["workspace", "list"], { dataDir }))).toHaveLength(6);
    expect(readdirSync(dataDir)).toEqual(["_registry.json"]);
  });

  it("reaches an open credential store within one second: a new key, a revoke, and never a key as a token", async () => {
    const acme = expectSuccess(await runEventide(["workspace", "create", "acme"], { dataDir }));
    const store = await CredentialStore.open(dataDir);
    try {
      expect(store.workspaceIdForApiKey(acme.apiKey)).toBe(acme.workspaceId);

      const { apiKey } = expectSuccess(await runEventide(["key", "create", "acme"], { dataDir }));
      expect(await msUntil(() => store.workspaceIdForApiKey(apiKey) === acme.workspaceId), "new apiKey seen after (ms)").toBeLessThanOrEqual(1_000);
      expect(store.workspaceIdForToken(apiKey)).toBeUndefined();

      const { token } = expectSuccess(await runEventide(["token", "create", "acme"], { dataDir }));
      expect(await msUntil(() => store.workspaceIdForToken(token) === acme.workspaceId), "new token seen after (ms)").toBeLessThanOrEqual(1_000);
      expect(store.workspaceIdForApiKey(token)).toBeUndefined();

      expectSuccess(await runEventide(["key", "revoke", apiKey], { dataDir }));
      expect(await msUntil(() => store.workspaceIdForApiKey(apiKey) === undefined), "apiKey revoke seen after (ms)").toBeLessThanOrEqual(1_000);
      expectSuccess(await runEventide(["token", "revoke", token], { dataDir }));
      expect(await msUntil(() => store.workspaceIdForToken(token) === undefined), "token revoke seen after (ms)").toBeLessThanOrEqual(1_000);
      expect(store.workspaceIdForApiKey(acme.apiKey)).toBe(acme.workspaceId);

      const globex = expectSuccess(await runEventide(["workspace", "create", "globex"], { dataDir }));
      expect(await msUntil(() => store.workspaceIds().includes(globex.workspaceId)), "new workspace seen after (ms)").toBeLessThanOrEqual(1_000);
    } finally {
      store.close();
    }
  });
});

describe("runCli", () => {
  function memoryIo(environment: Record<string, string> = {}): CliIo & { lines: string[]; diagnostics: string[] } {
    const lines: string[] = [];
    const diagnostics: string[] = [];
    return {
      lines,
      diagnostics,
      writeLine: (line) => lines.push(line),
      writeDiagnostic: (text) => diagnostics.push(text),
      environment,
      workingDirectory: dataDir,
    };
  }

  it("dispatches a command added to the table, with its operands and data dir", async () => {
    const bench: CliCommand = {
      words: ["bench"],
      operands: [],
      variadic: true,
      dataDir: "any",
      summary: "run a benchmark",
      run: async (operands, context) => ({ operands, dataDir: context.dataDir }),
    };
    const io = memoryIo({ EVENTIDE_DATA_DIR: "store" });
    expect(await runCli(["bench", "--events", "10"], io, [bench])).toBe(0);
    expect(io.lines.map((line) => JSON.parse(line))).toEqual([{ operands: ["--events", "10"], dataDir: join(dataDir, "store") }]);
  });

  it("prints an unexpected failure as one error line, with the stack on the diagnostic stream", async () => {
    const broken: CliCommand = {
      words: ["broken"],
      operands: [],
      dataDir: "any",
      summary: "fails",
      run: async () => {
        throw new Error("disk on fire");
      },
    };
    const io = memoryIo();
    expect(await runCli(["broken"], io, [broken])).toBe(1);
    expect(io.lines).toEqual(['{"error":"disk on fire"}']);
    expect(io.diagnostics.join("")).toContain("disk on fire");
  });
});
