/**
 * The registry module on real files in a temporary data dir: what each
 * operation writes, what it refuses, and that only hashes reach the disk.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import {
  createApiKey,
  createDefaultWorkspaceIfEmpty,
  createToken,
  createWorkspace,
  listWorkspaces,
  readRegistry,
  RegistryError,
  revokeApiKey,
  revokeToken,
  workspaceNameLengthMax,
} from "../../src/auth/registry.js";
import { secretHash } from "../../src/auth/secrets.js";
import { isWorkspaceId, registryPath } from "../../src/storage/paths.js";
import { makeDataDir, removeDataDir } from "../helpers/server.js";

let root: string;
let dataDir: string;

beforeEach(() => {
  root = makeDataDir("eventide-registry-");
  // A data dir that does not exist yet: every writing operation must create it.
  dataDir = join(root, "nested", "data");
});

afterEach(() => {
  removeDataDir(root);
});

async function expectRegistryError(promise: Promise<unknown>, code: RegistryError["code"]): Promise<RegistryError> {
  const error = await promise.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(RegistryError);
  expect((error as RegistryError).code).toBe(code);
  return error as RegistryError;
}

describe("registry", () => {
  it("lists no workspaces in a data dir that does not exist", async () => {
    expect(await listWorkspaces(dataDir)).toEqual([]);
  });

  it("creates a workspace with an id, one API key and one token, creating the data dir", async () => {
    const created = await createWorkspace(dataDir, "Acme Inc. 🚀");
    expect(isWorkspaceId(created.workspaceId)).toBe(true);
    expect(created.name).toBe("Acme Inc. 🚀");
    expect(created.apiKey).toMatch(/^ek_[A-Za-z0-9_-]{43}$/);
    expect(created.token).toMatch(/^et_[A-Za-z0-9_-]{43}$/);

    const listed = await listWorkspaces(dataDir);
    expect(listed).toEqual([{ workspaceId: created.workspaceId, name: "Acme Inc. 🚀", createdAt: expect.any(String) }]);
    expect(new Date(listed[0].createdAt).toISOString()).toBe(listed[0].createdAt);
  });

  it("stores only SHA-256 hashes of the secrets", async () => {
    const created = await createWorkspace(dataDir, "acme");
    const text = readFileSync(registryPath(dataDir), "utf8");
    expect(text).not.toContain(created.apiKey);
    expect(text).not.toContain(created.token);
    const registry = await readRegistry(dataDir);
    expect(registry.workspaces[0].apiKeys).toEqual([{ id: expect.stringMatching(/^key_[0-9a-f]+$/), hash: secretHash(created.apiKey), createdAt: expect.any(String) }]);
    expect(registry.workspaces[0].tokens).toEqual([{ id: expect.stringMatching(/^tok_[0-9a-f]+$/), hash: secretHash(created.token), createdAt: expect.any(String) }]);
  });

  it("refuses a taken name, and a name equal to another workspace's id", async () => {
    const first = await createWorkspace(dataDir, "acme");
    const taken = await expectRegistryError(createWorkspace(dataDir, "acme"), "name_taken");
    expect(taken.message).toContain("acme");
    const idTaken = await expectRegistryError(createWorkspace(dataDir, first.workspaceId), "name_taken");
    expect(idTaken.message).toBe(`"${first.workspaceId}" is the id of workspace "acme"; names and ids must differ`);
    expect(await listWorkspaces(dataDir)).toHaveLength(1);
  });

  it("accepts names of 1 and 100 characters and refuses empty or longer names", async () => {
    await createWorkspace(dataDir, "x");
    await createWorkspace(dataDir, "n".repeat(workspaceNameLengthMax));
    await expectRegistryError(createWorkspace(dataDir, ""), "invalid_name");
    await expectRegistryError(createWorkspace(dataDir, "n".repeat(workspaceNameLengthMax + 1)), "invalid_name");
    // Names never become paths, so path-like text is just a name.
    await createWorkspace(dataDir, "../../etc/passwd");
    expect((await listWorkspaces(dataDir)).map((workspace) => workspace.name)).toEqual(["x", "n".repeat(100), "../../etc/passwd"]);
  });

  it("adds keys and tokens to a workspace named by id or by name", async () => {
    const created = await createWorkspace(dataDir, "acme");
    const { apiKey } = await createApiKey(dataDir, "acme");
    const { token } = await createToken(dataDir, created.workspaceId);
    expect(apiKey).toMatch(/^ek_/);
    expect(token).toMatch(/^et_/);
    const registry = await readRegistry(dataDir);
    expect(registry.workspaces[0].apiKeys.map((credential) => credential.hash)).toEqual([secretHash(created.apiKey), secretHash(apiKey)]);
    expect(registry.workspaces[0].tokens.map((credential) => credential.hash)).toEqual([secretHash(created.token), secretHash(token)]);
  });

  it("refuses credentials for an unknown workspace", async () => {
    await createWorkspace(dataDir, "acme");
    await expectRegistryError(createApiKey(dataDir, "nope"), "workspace_not_found");
    await expectRegistryError(createToken(dataDir, "nope"), "workspace_not_found");
  });

  it("revokes by marking, succeeds again on a second revoke, and refuses unknown secrets", async () => {
    const created = await createWorkspace(dataDir, "acme");
    expect(await revokeApiKey(dataDir, created.apiKey)).toEqual({ revoked: true });
    expect(await revokeToken(dataDir, created.token)).toEqual({ revoked: true });
    const registry = await readRegistry(dataDir);
    const revokedAt = registry.workspaces[0].apiKeys[0].revokedAt;
    expect(typeof revokedAt).toBe("string");
    expect(typeof registry.workspaces[0].tokens[0].revokedAt).toBe("string");

    expect(await revokeApiKey(dataDir, created.apiKey)).toEqual({ revoked: true });
    expect((await readRegistry(dataDir)).workspaces[0].apiKeys[0].revokedAt).toBe(revokedAt);

    await expectRegistryError(revokeApiKey(dataDir, "ek_unknown"), "unknown_api_key");
    await expectRegistryError(revokeToken(dataDir, "et_unknown"), "unknown_token");
  });

  it("does not revoke a token as an API key or an API key as a token, and says which command to use", async () => {
    const created = await createWorkspace(dataDir, "acme");
    const asKey = await expectRegistryError(revokeApiKey(dataDir, created.token), "unknown_api_key");
    expect(asKey.message).toContain("token revoke");
    expect(asKey.message).not.toContain(created.token);
    const asToken = await expectRegistryError(revokeToken(dataDir, created.apiKey), "unknown_token");
    expect(asToken.message).toContain("key revoke");
    const registry = await readRegistry(dataDir);
    expect(registry.workspaces[0].apiKeys[0].revokedAt).toBeUndefined();
    expect(registry.workspaces[0].tokens[0].revokedAt).toBeUndefined();
  });

  it("creates the default workspace only when there is none", async () => {
    const created = await createDefaultWorkspaceIfEmpty(dataDir);
    expect(created?.name).toBe("default");
    expect(await createDefaultWorkspaceIfEmpty(dataDir)).toBeUndefined();
    expect(await listWorkspaces(dataDir)).toHaveLength(1);
  });

  it("serializes many writers in one process without losing any", async () => {
    await createWorkspace(dataDir, "acme");
    const keys = await Promise.all(Array.from({ length: 20 }, () => createApiKey(dataDir, "acme")));
    const names = await Promise.all(Array.from({ length: 10 }, (_, index) => createWorkspace(dataDir, `w${index}`)));
    const registry = await readRegistry(dataDir);
    expect(registry.workspaces).toHaveLength(11);
    expect(registry.workspaces[0].apiKeys).toHaveLength(21);
    expect(new Set(registry.workspaces[0].apiKeys.map((credential) => credential.hash))).toEqual(
      new Set([registry.workspaces[0].apiKeys[0].hash, ...keys.map(({ apiKey }) => secretHash(apiKey))]),
    );
    expect(names.map((created) => created.name).sort()).toEqual(Array.from({ length: 10 }, (_, index) => `w${index}`).sort());
  });

  it("leaves only the registry behind: no temporaries, no lock", async () => {
    await createWorkspace(dataDir, "acme");
    await createApiKey(dataDir, "acme");
    expect(readdirSync(dataDir)).toEqual(["_registry.json"]);
  });

  it("sweeps a crashed writer's temporary on the next write", async () => {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(join(dataDir, "tmp_registry_99999_abandoned.json"), "{half");
    await createWorkspace(dataDir, "acme");
    expect(readdirSync(dataDir)).toEqual(["_registry.json"]);
  });

  it("refuses to read or overwrite a registry that is not valid", async () => {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(registryPath(dataDir), '{"version":1,"workspaces":[{"workspaceId":"nope"');
    await expectRegistryError(listWorkspaces(dataDir), "registry_invalid");
    await expectRegistryError(createWorkspace(dataDir, "acme"), "registry_invalid");
    expect(readFileSync(registryPath(dataDir), "utf8")).toBe('{"version":1,"workspaces":[{"workspaceId":"nope"');

    writeFileSync(registryPath(dataDir), JSON.stringify({ version: 1, workspaces: [{ workspaceId: "UPPER", name: "x" }] }));
    const invalid = await expectRegistryError(listWorkspaces(dataDir), "registry_invalid");
    expect(invalid.message).toContain("workspaces.0");
  });

  it("keeps fields it does not know, for registries written by a newer version", async () => {
    await createWorkspace(dataDir, "acme");
    const registry = JSON.parse(readFileSync(registryPath(dataDir), "utf8"));
    registry.futureField = { kept: true };
    registry.workspaces[0].plan = "pro";
    writeFileSync(registryPath(dataDir), JSON.stringify(registry));
    await createApiKey(dataDir, "acme");
    const rewritten = JSON.parse(readFileSync(registryPath(dataDir), "utf8"));
    expect(rewritten.futureField).toEqual({ kept: true });
    expect(rewritten.workspaces[0].plan).toBe("pro");
  });
});
