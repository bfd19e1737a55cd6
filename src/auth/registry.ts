/**
 * The credential registry: `<data>/_registry.json`, the one file that says which
 * workspaces exist and which API keys and tokens open them. The `eventide` CLI
 * (cli.ts) changes it, the server reads it through credential-store.ts.
 *
 * Secrets are shown once, when they are created, and stored only as SHA-256
 * hashes (secrets.ts says why a fast hash is right). Every change is a
 * read-modify-write under the registry lock (registry-lock.ts), published
 * atomically: write `tmp_…`, fsync, rename over the registry, fsync the
 * directory. A reader therefore sees the old file or the new one, never a mix,
 * and a crash at any point leaves one of the two.
 */
import { randomBytes } from "node:crypto";
import { mkdir, open, readdir, readFile, rename, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { z } from "zod";

import { limits } from "../config/limits.js";
import { isWorkspaceId, registryPath } from "../storage/paths.js";
import { RegistryError } from "./registry-error.js";
import { errorCode } from "../storage/lock-file.js";
import { withRegistryLock, type RegistryLockOptions } from "./registry-lock.js";
import { claimedSecretKind, newSecret, secretHash, type SecretKind } from "./secrets.js";

export { RegistryError, isRegistryError, type RegistryErrorCode } from "./registry-error.js";

export const registryFormatVersion = 1;
/** Names are shown in lists and typed on command lines; they never become paths, so any text is allowed. */
export const workspaceNameLengthMax = 100;
/** 8 random bytes as hex: 16 characters that match paths.ts's workspace id pattern. */
const workspaceIdBytes = 8;
/** Registry temporaries are only ever written under the lock, so any found by a lock holder are a crashed writer's. */
const registryTemporaryPrefix = "tmp_registry_";

// Objects are loose so that a registry written by a newer version keeps the fields this one does not know.
const credentialSchema = z.looseObject({
  hash: z.string().regex(/^[0-9a-f]{64}$/, "a SHA-256 hex hash"),
  /** Names the credential in lists and revokes without its secret; registries written before ids existed get one derived from the hash on load. */
  id: z.string().optional(),
  label: z.string().optional(),
  createdAt: z.string(),
  revokedAt: z.string().optional(),
});

const workspaceSchema = z.looseObject({
  workspaceId: z.string().refine(isWorkspaceId, "a workspace id ([a-z0-9]{8,64})"),
  name: z.string().min(1).max(workspaceNameLengthMax),
  createdAt: z.string(),
  apiKeys: z.array(credentialSchema),
  tokens: z.array(credentialSchema),
  /** Whole days of events kept ("forever": all); absent, the server's EVENTIDE_RETENTION_DAYS applies. */
  retention: z.union([z.int().min(1), z.literal("forever")]).optional(),
});

const registrySchema = z
  .looseObject({
    version: z.literal(registryFormatVersion),
    workspaces: z.array(workspaceSchema),
  })
  .superRefine((registry, context) => {
    // Two workspaces with one id would make every credential lookup ambiguous.
    const seen = new Set<string>();
    for (const workspace of registry.workspaces) {
      if (seen.has(workspace.workspaceId)) {
        context.addIssue({ code: "custom", message: `workspace id ${workspace.workspaceId} appears twice` });
      }
      seen.add(workspace.workspaceId);
    }
  });

export type RegistryCredential = z.infer<typeof credentialSchema>;
export type RegistryWorkspace = z.infer<typeof workspaceSchema>;
export type RegistryDocument = z.infer<typeof registrySchema>;

export interface WorkspaceSummary {
  workspaceId: string;
  name: string;
  createdAt: string;
}

export interface CreatedWorkspace {
  workspaceId: string;
  name: string;
  apiKey: string;
  token: string;
}

export interface RegistryOptions {
  lock?: RegistryLockOptions;
}

export function emptyRegistry(): RegistryDocument {
  return { version: registryFormatVersion, workspaces: [] };
}

/** Parses registry text; a file that is not a registry is an operating error, never silently treated as empty. */
export function parseRegistry(text: string, source: string): RegistryDocument {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new RegistryError("registry_invalid", `${source} is not valid JSON: ${(error as Error).message}`);
  }
  const version = (value as { version?: unknown } | null)?.version;
  if (typeof version === "number" && version > registryFormatVersion) {
    throw new RegistryError("registry_invalid", `${source}: written by a newer Eventide (registry format ${version}; this version reads up to ${registryFormatVersion}). Run that version (or newer) on this data directory, or restore a backup taken with this one`);
  }
  const parsed = registrySchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue && issue.path.length > 0 ? ` at ${issue.path.join(".")}` : "";
    throw new RegistryError("registry_invalid", `${source} is not a valid registry${where}: ${issue?.message ?? "unknown problem"}`);
  }
  for (const workspace of parsed.data.workspaces) {
    for (const apiKey of workspace.apiKeys) apiKey.id ??= derivedCredentialId("apiKey", apiKey.hash);
    for (const token of workspace.tokens) token.id ??= derivedCredentialId("token", token.hash);
  }
  return parsed.data;
}

/** Id prefixes, distinct from the secrets' (`ek_`, `et_`), so an id is never mistaken for a secret. */
const credentialIdPrefixes: Readonly<Record<SecretKind, string>> = Object.freeze({ apiKey: "key_", token: "tok_" });
/** 8 bytes as hex after the prefix: unique among a workspace's few credentials, short enough to type. */
const credentialIdHexLength = 16;

/**
 * The id of a credential stored before ids existed: its hash's prefix. Stable
 * across loads, so a list shows the same id until the registry is next written
 * (which then stores it); the secret itself is never rewritten.
 */
function derivedCredentialId(kind: SecretKind, hash: string): string {
  return credentialIdPrefixes[kind] + hash.slice(0, credentialIdHexLength);
}

function newCredentialId(kind: SecretKind): string {
  return credentialIdPrefixes[kind] + randomBytes(credentialIdHexLength / 2).toString("hex");
}

/** A credential's record as the CLI lists it: never its secret, nor its hash. */
export interface CredentialSummary {
  id: string;
  label: string | null;
  createdAt: string;
  revokedAt: string | null;
}

/** The registry on disk; a data dir without one (a fresh install) has no workspaces. */
export async function readRegistry(dataDir: string): Promise<RegistryDocument> {
  const path = registryPath(dataDir);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if (errorCode(error) === "ENOENT") return emptyRegistry();
    throw error;
  }
  return parseRegistry(text, path);
}

export async function listWorkspaces(dataDir: string): Promise<WorkspaceSummary[]> {
  const registry = await readRegistry(dataDir);
  return registry.workspaces.map(({ workspaceId, name, createdAt }) => ({ workspaceId, name, createdAt }));
}

export async function createWorkspace(dataDir: string, name: string, options: RegistryOptions = {}): Promise<CreatedWorkspace> {
  checkWorkspaceName(name);
  return updateRegistry(dataDir, options, (registry) => addWorkspace(registry, name));
}

/**
 * The server's first start: creates the `default` workspace only if the registry
 * holds none, deciding under the lock so that a CLI racing the start cannot
 * leave two first workspaces.
 */
export async function createDefaultWorkspaceIfEmpty(dataDir: string, options: RegistryOptions = {}): Promise<CreatedWorkspace | undefined> {
  return updateRegistry(dataDir, options, (registry) => (registry.workspaces.length === 0 ? addWorkspace(registry, "default") : undefined));
}

export interface CredentialOptions extends RegistryOptions {
  label?: string;
}

export async function createApiKey(dataDir: string, workspaceIdOrName: string, options: CredentialOptions = {}): Promise<{ apiKey: string }> {
  const { secret: apiKey } = await addSecret(dataDir, workspaceIdOrName, "apiKey", options);
  return { apiKey };
}

export async function createToken(dataDir: string, workspaceIdOrName: string, options: CredentialOptions = {}): Promise<{ token: string }> {
  const { secret: token } = await addSecret(dataDir, workspaceIdOrName, "token", options);
  return { token };
}

/** An API key and its id, for tools that must revoke it again (import's temporary key). */
export async function createApiKeyWithId(dataDir: string, workspaceIdOrName: string, options: CredentialOptions = {}): Promise<{ apiKey: string; id: string; workspaceId: string }> {
  const { secret: apiKey, id, workspaceId } = await addSecret(dataDir, workspaceIdOrName, "apiKey", options);
  return { apiKey, id, workspaceId };
}

/** A token and its id, for tools that must revoke it again (user delete's temporary token). */
export async function createTokenWithId(dataDir: string, workspaceIdOrName: string, options: CredentialOptions = {}): Promise<{ token: string; id: string; workspaceId: string }> {
  const { secret: token, id, workspaceId } = await addSecret(dataDir, workspaceIdOrName, "token", options);
  return { token, id, workspaceId };
}

/** A workspace's keys or tokens, oldest first, revoked ones included (marked). */
export async function listCredentials(dataDir: string, workspaceIdOrName: string, kind: SecretKind): Promise<CredentialSummary[]> {
  const workspace = findWorkspace(await readRegistry(dataDir), workspaceIdOrName);
  return credentialsOfKind(workspace, kind).map((credential) => ({
    id: credential.id!,
    label: credential.label ?? null,
    createdAt: credential.createdAt,
    revokedAt: credential.revokedAt ?? null,
  }));
}

/** The workspace an id or name names, as stored. */
export async function findWorkspaceSummary(dataDir: string, workspaceIdOrName: string): Promise<WorkspaceSummary> {
  const { workspaceId, name, createdAt } = findWorkspace(await readRegistry(dataDir), workspaceIdOrName);
  return { workspaceId, name, createdAt };
}

/** Sets a workspace's retention (whole days, or "forever"), or with "default" removes it so the server's EVENTIDE_RETENTION_DAYS applies. */
export async function setWorkspaceRetention(dataDir: string, workspaceIdOrName: string, retention: number | "forever" | "default", options: RegistryOptions = {}): Promise<{ workspaceId: string; retention: number | "forever" | "default" }> {
  return updateRegistry(dataDir, options, (registry) => {
    const workspace = findWorkspace(registry, workspaceIdOrName);
    if (retention === "default") delete workspace.retention;
    else workspace.retention = retention;
    return { workspaceId: workspace.workspaceId, retention };
  });
}

/** Removes a workspace and every credential of it from the registry (its data is the caller's: lifecycle/workspace-delete.ts). */
export async function removeWorkspace(dataDir: string, workspaceIdOrName: string, options: RegistryOptions = {}): Promise<WorkspaceSummary> {
  return updateRegistry(dataDir, options, (registry) => {
    const workspace = findWorkspace(registry, workspaceIdOrName);
    registry.workspaces.splice(registry.workspaces.indexOf(workspace), 1);
    return { workspaceId: workspace.workspaceId, name: workspace.name, createdAt: workspace.createdAt };
  });
}

export async function revokeApiKey(dataDir: string, apiKey: string, options: RegistryOptions = {}): Promise<{ revoked: true }> {
  return revokeSecret(dataDir, apiKey, "apiKey", options);
}

export async function revokeToken(dataDir: string, token: string, options: RegistryOptions = {}): Promise<{ revoked: true }> {
  return revokeSecret(dataDir, token, "token", options);
}

function checkCredentialLabel(label: string | undefined): void {
  if (label !== undefined && (label.length < 1 || label.length > limits.credentialLabelLengthMax)) {
    throw new RegistryError("invalid_name", `a label must be 1–${limits.credentialLabelLengthMax} characters`);
  }
}

function checkWorkspaceName(name: string): void {
  if (typeof name !== "string" || name.length < 1 || name.length > workspaceNameLengthMax) {
    throw new RegistryError("invalid_name", `workspace name must be 1–${workspaceNameLengthMax} characters`);
  }
}

function addWorkspace(registry: RegistryDocument, name: string): CreatedWorkspace {
  checkWorkspaceName(name);
  // A name equal to another workspace's id would make `key create WORKSPACE` ambiguous, so ids and names share one namespace.
  const clash = registry.workspaces.find((workspace) => workspace.name === name || workspace.workspaceId === name);
  if (clash !== undefined) {
    const message = clash.name === name ? `a workspace named ${JSON.stringify(name)} already exists` : `${JSON.stringify(name)} is the id of workspace ${JSON.stringify(clash.name)}; names and ids must differ`;
    throw new RegistryError("name_taken", message);
  }
  let workspaceId: string;
  do {
    workspaceId = randomBytes(workspaceIdBytes).toString("hex");
  } while (registry.workspaces.some((workspace) => workspace.workspaceId === workspaceId || workspace.name === workspaceId));

  const apiKey = newSecret("apiKey");
  const token = newSecret("token");
  const createdAt = new Date().toISOString();
  registry.workspaces.push({
    workspaceId,
    name,
    createdAt,
    apiKeys: [{ hash: secretHash(apiKey), id: newCredentialId("apiKey"), createdAt }],
    tokens: [{ hash: secretHash(token), id: newCredentialId("token"), createdAt }],
  });
  return { workspaceId, name, apiKey, token };
}

/** An exact id wins over a name, and the two never collide (see addWorkspace). */
function findWorkspace(registry: RegistryDocument, workspaceIdOrName: string): RegistryWorkspace {
  const workspace =
    registry.workspaces.find((candidate) => candidate.workspaceId === workspaceIdOrName) ??
    registry.workspaces.find((candidate) => candidate.name === workspaceIdOrName);
  if (workspace === undefined) {
    throw new RegistryError("workspace_not_found", `no workspace has the id or name ${JSON.stringify(workspaceIdOrName)}`);
  }
  return workspace;
}

function credentialsOfKind(workspace: RegistryWorkspace, kind: SecretKind): RegistryCredential[] {
  return kind === "apiKey" ? workspace.apiKeys : workspace.tokens;
}

async function addSecret(dataDir: string, workspaceIdOrName: string, kind: SecretKind, options: CredentialOptions): Promise<{ secret: string; id: string; workspaceId: string }> {
  checkCredentialLabel(options.label);
  return updateRegistry(dataDir, options, (registry) => {
    const workspace = findWorkspace(registry, workspaceIdOrName);
    const credentials = credentialsOfKind(workspace, kind);
    const secret = newSecret(kind);
    let id: string;
    do id = newCredentialId(kind);
    while (credentials.some((credential) => credential.id === id));
    credentials.push({ hash: secretHash(secret), id, ...(options.label === undefined ? {} : { label: options.label }), createdAt: new Date().toISOString() });
    return { secret, id, workspaceId: workspace.workspaceId };
  });
}

/**
 * Revoking marks the credential instead of deleting it, so the registry keeps a
 * record of what existed. Revoking an already revoked secret succeeds again
 * (the secret is known, and retrying a revoke should be harmless); a secret that
 * was never issued, or is of the other kind, is an error.
 */
async function revokeSecret(dataDir: string, secret: string, kind: SecretKind, options: RegistryOptions): Promise<{ revoked: true }> {
  const hash = secretHash(secret);
  return updateRegistry(dataDir, options, (registry) => {
    for (const workspace of registry.workspaces) {
      // An id (key_…, tok_…) or the secret itself: ids and secrets have different prefixes, so one never matches the other.
      const credential = credentialsOfKind(workspace, kind).find((candidate) => candidate.id === secret || candidate.hash === hash);
      if (credential === undefined) continue;
      credential.revokedAt ??= new Date().toISOString();
      return { revoked: true as const };
    }
    // The secret itself is never echoed: error lines end up in logs and terminals' scrollback.
    const claimed = claimedSecretKind(secret);
    if (kind === "apiKey") {
      const hint = claimed === "token" ? " (this looks like an access token: use `token revoke`)" : "";
      throw new RegistryError("unknown_api_key", `unknown API key or key id${hint}`);
    }
    const hint = claimed === "apiKey" ? " (this looks like an ingest API key: use `key revoke`)" : "";
    throw new RegistryError("unknown_token", `unknown access token or token id${hint}`);
  });
}

/**
 * The one way the registry changes: under the lock, read the current file,
 * apply `change` to it, and publish the result if anything changed. `change`
 * throws RegistryError to refuse, in which case nothing is written.
 */
async function updateRegistry<T>(dataDir: string, options: RegistryOptions, change: (registry: RegistryDocument) => T): Promise<T> {
  // Private like everything in it (the server makes it 0700 too: storage/files.ts).
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  return withRegistryLock(
    dataDir,
    async () => {
      await removeAbandonedTemporaries(dataDir);
      const registry = await readRegistry(dataDir);
      const before = serializeRegistry(registry);
      const result = change(registry);
      const after = serializeRegistry(registry);
      if (after !== before) await writeRegistryAtomically(dataDir, after);
      return result;
    },
    options.lock,
  );
}

function serializeRegistry(registry: RegistryDocument): string {
  // Indented: the file is small and a person debugging a deployment should be able to read it.
  return `${JSON.stringify(registry, null, 2)}\n`;
}

async function writeRegistryAtomically(dataDir: string, text: string): Promise<void> {
  const target = registryPath(dataDir);
  const directory = dirname(target);
  // paths.ts names the registry but no temporary for it; the temporary sits beside its target so that rename stays atomic.
  const temporary = join(directory, `${registryTemporaryPrefix}${process.pid}_${randomBytes(6).toString("hex")}.json`);
  try {
    // 0o600: hashes are not secrets, but nobody else on the machine needs to read who has which credential.
    const handle = await open(temporary, "wx", 0o600);
    try {
      await handle.writeFile(text, "utf8");
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, target);
  } catch (error) {
    await unlink(temporary).catch(() => undefined);
    throw error;
  }
  // The rename is durable only once the directory entry is.
  const directoryHandle = await open(directory, "r");
  try {
    await directoryHandle.sync();
  } finally {
    await directoryHandle.close();
  }
}

/** Called under the lock: no live writer can own a registry temporary at this moment. */
async function removeAbandonedTemporaries(dataDir: string): Promise<void> {
  const directory = dirname(registryPath(dataDir));
  let names: string[];
  try {
    names = await readdir(directory);
  } catch {
    return;
  }
  for (const name of names) {
    if (name.startsWith(registryTemporaryPrefix)) await unlink(join(directory, name)).catch(() => undefined);
  }
}
