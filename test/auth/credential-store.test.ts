/**
 * The server's credential store on a real registry file: lookups by kind,
 * revocation, live reload within SPEC §0's second, and a bad registry edit that
 * must not lock anyone out. (Changes made by real CLI processes are covered in
 * test/cli.test.ts.)
 */
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";

import { CredentialStore } from "../../src/auth/credential-store.js";
import { RegistryError } from "../../src/auth/registry-error.js";
import { createApiKey, createToken, createWorkspace, revokeApiKey, revokeToken } from "../../src/auth/registry.js";
import { registryPath } from "../../src/storage/paths.js";
import { makeDataDir, removeDataDir } from "../helpers/server.js";
import { elapsedUntil } from "../helpers/http.js";

let dataDir: string;
let store: CredentialStore | undefined;

beforeEach(() => {
  dataDir = makeDataDir("eventide-credentials-");
});

afterEach(() => {
  store?.close();
  store = undefined;
  removeDataDir(dataDir);
});

/**
 * Resolves with the milliseconds it took `condition` to hold, checked every
 * 5 ms from now (called right after the registry write resolved). The check is
 * a lookup in the store itself, so nothing but its own reload stands between
 * the change and the check. Gives up only after 10 s, so that a change seen
 * late fails the caller's 1 s assertion with its real delay.
 */
function msUntil(condition: () => boolean): Promise<number> {
  return elapsedUntil(async () => condition(), 10_000, 5);
}

/** SPEC §0: the running server sees registry changes within 1 s. */
const secondMs = 1_000;

/** Swaps the registry's content in one step, so a poll never sees an in-between file. */
function replaceRegistry(text: string): void {
  const temporary = join(dataDir, "edited.json");
  writeFileSync(temporary, text);
  renameSync(temporary, registryPath(dataDir));
}

describe("credential store", () => {
  it("opens on an empty data dir with no workspaces", async () => {
    store = await CredentialStore.open(dataDir);
    expect(store.workspaceIds()).toEqual([]);
    expect(store.workspaceIdForApiKey("ek_anything")).toBeUndefined();
  });

  it("maps API keys and tokens to their workspace, and never one kind as the other", async () => {
    const acme = await createWorkspace(dataDir, "acme");
    const globex = await createWorkspace(dataDir, "globex");
    store = await CredentialStore.open(dataDir);
    expect(store.workspaceIds().sort()).toEqual([acme.workspaceId, globex.workspaceId].sort());
    expect(store.workspaceIdForApiKey(acme.apiKey)).toBe(acme.workspaceId);
    expect(store.workspaceIdForToken(acme.token)).toBe(acme.workspaceId);
    expect(store.workspaceIdForApiKey(globex.apiKey)).toBe(globex.workspaceId);
    expect(store.workspaceIdForToken(acme.apiKey)).toBeUndefined();
    expect(store.workspaceIdForApiKey(acme.token)).toBeUndefined();
  });

  it("refuses unknown, near-miss, empty, huge and non-string secrets", async () => {
    const acme = await createWorkspace(dataDir, "acme");
    store = await CredentialStore.open(dataDir);
    const nearMiss = acme.apiKey.slice(0, -1) + (acme.apiKey.endsWith("A") ? "B" : "A");
    for (const candidate of [nearMiss, acme.apiKey.slice(0, -1), "", "ek_", `${acme.apiKey} `, "x".repeat(1_000_000)]) {
      expect(store.workspaceIdForApiKey(candidate)).toBeUndefined();
    }
    expect(store.workspaceIdForApiKey(undefined as unknown as string)).toBeUndefined();
    expect(store.workspaceIdForToken(42 as unknown as string)).toBeUndefined();
  });

  it("sees new keys and tokens, and revocations, within one second", async () => {
    const acme = await createWorkspace(dataDir, "acme");
    store = await CredentialStore.open(dataDir);
    const opened = store;

    const { apiKey } = await createApiKey(dataDir, "acme");
    expect(await msUntil(() => opened.workspaceIdForApiKey(apiKey) === acme.workspaceId), "new apiKey seen after (ms)").toBeLessThanOrEqual(secondMs);
    const { token } = await createToken(dataDir, "acme");
    expect(await msUntil(() => opened.workspaceIdForToken(token) === acme.workspaceId), "new token seen after (ms)").toBeLessThanOrEqual(secondMs);

    await revokeApiKey(dataDir, apiKey);
    expect(await msUntil(() => opened.workspaceIdForApiKey(apiKey) === undefined), "apiKey revoke seen after (ms)").toBeLessThanOrEqual(secondMs);
    await revokeToken(dataDir, token);
    expect(await msUntil(() => opened.workspaceIdForToken(token) === undefined), "token revoke seen after (ms)").toBeLessThanOrEqual(secondMs);
    // The other credentials of the workspace are untouched.
    expect(opened.workspaceIdForApiKey(acme.apiKey)).toBe(acme.workspaceId);
    expect(opened.workspaceIdForToken(acme.token)).toBe(acme.workspaceId);
  });

  it("sees a registry created after it opened on an empty data dir", async () => {
    store = await CredentialStore.open(dataDir);
    const opened = store;
    const acme = await createWorkspace(dataDir, "acme");
    expect(await msUntil(() => opened.workspaceIdForApiKey(acme.apiKey) === acme.workspaceId), "new registry seen after (ms)").toBeLessThanOrEqual(secondMs);
    expect(opened.workspaceIds()).toEqual([acme.workspaceId]);
  });

  it("keeps the last good credentials when the registry turns invalid, reports it once, and recovers", async () => {
    const acme = await createWorkspace(dataDir, "acme");
    const goodText = readFileSync(registryPath(dataDir), "utf8");
    const reloadErrors: Error[] = [];
    store = await CredentialStore.open(dataDir, { onReloadError: (error) => reloadErrors.push(error) });
    const opened = store;

    replaceRegistry(goodText.slice(0, goodText.length / 2));
    expect(await msUntil(() => reloadErrors.length > 0), "invalid registry reported after (ms)").toBeLessThanOrEqual(secondMs);
    // Two more polls see the same invalid file: still one report.
    for (let poll = 0; poll < 2; poll++) {
      const checkedAtMs = opened.lastCheckedAtMs;
      await msUntil(() => opened.lastCheckedAtMs > checkedAtMs);
    }
    expect(reloadErrors).toHaveLength(1);
    expect(reloadErrors[0]).toBeInstanceOf(RegistryError);
    expect(opened.workspaceIdForApiKey(acme.apiKey)).toBe(acme.workspaceId);
    expect(opened.workspaceIdForToken(acme.token)).toBe(acme.workspaceId);

    replaceRegistry(goodText);
    const { apiKey } = await createApiKey(dataDir, "acme");
    expect(await msUntil(() => opened.workspaceIdForApiKey(apiKey) === acme.workspaceId), "new apiKey seen after recovery (ms)").toBeLessThanOrEqual(secondMs);
  });

  it("refuses to open on an invalid registry rather than serve without its credentials", async () => {
    writeFileSync(registryPath(dataDir), "not json");
    await expect(CredentialStore.open(dataDir)).rejects.toMatchObject({ code: "registry_invalid" });
  });

  it("creates the default workspace when there is none, usable at once, and only once", async () => {
    store = await CredentialStore.open(dataDir);
    const created = await store.ensureDefaultWorkspace();
    expect(created).toMatchObject({ name: "default", apiKey: expect.stringMatching(/^ek_/), token: expect.stringMatching(/^et_/) });
    expect(store.workspaceIds()).toEqual([created!.workspaceId]);
    expect(store.workspaceIdForApiKey(created!.apiKey)).toBe(created!.workspaceId);
    expect(store.workspaceIdForToken(created!.token)).toBe(created!.workspaceId);
    expect(await store.ensureDefaultWorkspace()).toBeUndefined();

    store.close();
    store = await CredentialStore.open(dataDir);
    expect(await store.ensureDefaultWorkspace()).toBeUndefined();
  });

  it("does not create a default workspace when the registry already has one", async () => {
    await createWorkspace(dataDir, "acme");
    store = await CredentialStore.open(dataDir);
    expect(await store.ensureDefaultWorkspace()).toBeUndefined();
    expect(store.workspaceIds()).toHaveLength(1);
  });
});
