/**
 * The server's view of the registry: http/ asks it which workspace an ingest API
 * key or a Bearer token opens. It holds an in-memory snapshot built from
 * `_registry.json` and polls the file, so credentials created or revoked by the
 * `eventide` CLI while the server runs take effect within a second (SPEC §0)
 * without a restart and without the CLI having to talk to the server.
 */
import { open, stat, type FileHandle } from "node:fs/promises";
import type { BigIntStats } from "node:fs";

import { limits } from "../config/limits.js";
import { registryPath } from "../storage/paths.js";
import { errorCode } from "../storage/lock-file.js";
import { createDefaultWorkspaceIfEmpty, emptyRegistry, parseRegistry, type CreatedWorkspace, type RegistryDocument } from "./registry.js";
import { secretHash, secretLengthMax } from "./secrets.js";
import { log } from "../log.js";

export type { CreatedWorkspace } from "./registry.js";

export interface CredentialStoreOptions {
  /** Told once per unreadable version of the registry; defaults to a JSON line on stderr. */
  onReloadError?: (error: Error) => void;
}

/** Only live (unrevoked) credentials are in the maps: a revoked secret is simply not found. */
interface CredentialSnapshot {
  workspaceIdByApiKeyHash: Map<string, string>;
  workspaceIdByTokenHash: Map<string, string>;
  workspaceIds: string[];
  /** Workspaces whose registry entry sets a retention of their own. */
  retentionByWorkspaceId: Map<string, number | "forever">;
}

function snapshotOf(registry: RegistryDocument): CredentialSnapshot {
  const workspaceIdByApiKeyHash = new Map<string, string>();
  const workspaceIdByTokenHash = new Map<string, string>();
  for (const workspace of registry.workspaces) {
    for (const apiKey of workspace.apiKeys) {
      if (apiKey.revokedAt === undefined) workspaceIdByApiKeyHash.set(apiKey.hash, workspace.workspaceId);
    }
    for (const token of workspace.tokens) {
      if (token.revokedAt === undefined) workspaceIdByTokenHash.set(token.hash, workspace.workspaceId);
    }
  }
  const retentionByWorkspaceId = new Map<string, number | "forever">();
  for (const workspace of registry.workspaces) if (workspace.retention !== undefined) retentionByWorkspaceId.set(workspace.workspaceId, workspace.retention);
  return {
    workspaceIdByApiKeyHash,
    workspaceIdByTokenHash,
    workspaceIds: registry.workspaces.map((workspace) => workspace.workspaceId),
    retentionByWorkspaceId,
  };
}

/**
 * Writers replace the registry by rename, so a new version is a new inode; size
 * and nanosecond times catch the rare reuse of the old inode number.
 */
function fileSignature(stats: BigIntStats): string {
  return `${stats.dev}:${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}`;
}

function reportReloadError(error: Error): void {
  log.error({ event: "registry-reload-failed", message: error.message }, "the registry could not be reloaded");
}

export class CredentialStore {
  private readonly dataDir: string;
  private readonly onReloadError: (error: Error) => void;
  private snapshot: CredentialSnapshot = snapshotOf(emptyRegistry());
  /** Signature of the file the snapshot came from; undefined before any registry file was read. */
  private loadedSignature: string | undefined;
  /** Signature of the last version that failed to parse, so one bad file is reported once, not four times a second. */
  private failedSignature: string | undefined;
  private pollTimer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
  /** When the read in flight began; undefined while none is. */
  private refreshStartedMs: number | undefined;
  /** An unexpected poll failure (say, EACCES) is reported when it first appears, not on every tick. */
  private pollErrorMessage: string | undefined;
  /** When the last successful check of the file began: the snapshot is known to hold no revocation older than this. */
  private checkedAtMs = Date.now();
  private staleReported = false;

  private constructor(dataDir: string, options: CredentialStoreOptions) {
    this.dataDir = dataDir;
    this.onReloadError = options.onReloadError ?? reportReloadError;
  }

  /**
   * Loads the registry (none yet is an empty store; an invalid one throws
   * RegistryError, since serving without the credentials it holds would lock
   * every client out) and starts polling it.
   */
  static async open(dataDir: string, options: CredentialStoreOptions = {}): Promise<CredentialStore> {
    const store = new CredentialStore(dataDir, options);
    await store.refresh({ throwOnInvalid: true });
    store.pollTimer = setInterval(() => {
      void store.poll();
    }, limits.registryPollIntervalMs);
    // Polling alone must never keep the process alive (tests, CLI tools embedding the store, shutdown).
    store.pollTimer.unref();
    return store;
  }

  /**
   * Hashes the candidate and looks the hash up: no stored secret is ever compared
   * with the candidate, so response times reveal nothing about how close a guess was.
   */
  workspaceIdForApiKey(apiKey: string): string | undefined {
    if (typeof apiKey !== "string" || apiKey.length > secretLengthMax) return undefined;
    return this.snapshot.workspaceIdByApiKeyHash.get(secretHash(apiKey));
  }

  /** Separate map from API keys: an ingest key never opens the query API, and a token never ingests. */
  workspaceIdForToken(token: string): string | undefined {
    if (typeof token !== "string" || token.length > secretLengthMax) return undefined;
    return this.snapshot.workspaceIdByTokenHash.get(secretHash(token));
  }

  /** When the last poll of the registry file ended without a read error (an invalid file it keeps skipping counts). */
  get lastCheckedAtMs(): number {
    return this.checkedAtMs;
  }

  /**
   * True when the registry could not be read (EMFILE, EIO) for more than
   * registryStaleMsMax, or one read has hung for more than registryReadHangMsMax:
   * the snapshot may still hold a secret the CLI has revoked since, so the HTTP
   * layer refuses credentials with 503 rather than accept them. Polling goes
   * on, and the first good read ends it.
   */
  get stale(): boolean {
    const nowMs = Date.now();
    if (this.pollErrorMessage !== undefined && nowMs - this.checkedAtMs > limits.registryStaleMsMax) return true;
    // A read merely slow (threads busy with fsyncs, a main thread starved on a loaded machine) is not a failing one.
    return this.refreshStartedMs !== undefined && nowMs - this.refreshStartedMs > limits.registryReadHangMsMax;
  }

  /** The workspace's own retention from the registry (whole days, or "forever"); undefined when it sets none. */
  retentionOf(workspaceId: string): number | "forever" | undefined {
    return this.snapshot.retentionByWorkspaceId.get(workspaceId);
  }

  workspaceIds(): string[] {
    return [...this.snapshot.workspaceIds];
  }

  /**
   * SPEC §0: a server that finds no workspace at all creates one named `default`
   * and returns its credentials (for the caller to print once); otherwise
   * undefined. The decision is re-made under the registry lock against the file,
   * and the snapshot is reloaded before returning so the new credentials work at once.
   */
  async ensureDefaultWorkspace(): Promise<CreatedWorkspace | undefined> {
    if (this.snapshot.workspaceIds.length > 0) return undefined;
    const created = await createDefaultWorkspaceIfEmpty(this.dataDir);
    await this.refresh({ throwOnInvalid: true, force: true });
    return created;
  }

  close(): void {
    if (this.pollTimer !== undefined) clearInterval(this.pollTimer);
    this.pollTimer = undefined;
  }

  private async poll(): Promise<void> {
    // A slow disk must not pile up overlapping reloads.
    if (this.refreshing !== undefined) {
      if (this.stale) this.reportStale(`a registry read has not ended for ${limits.registryReadHangMsMax} ms; credentials are refused (503) until it does`);
      return;
    }
    const startedMs = Date.now();
    try {
      await this.refresh({ throwOnInvalid: false });
      this.pollErrorMessage = undefined;
      this.checkedAtMs = startedMs;
      if (this.staleReported) log.info({ event: "registry-readable", message: "credentials are accepted again" }, "registry readable");
      this.staleReported = false;
    } catch (error) {
      const message = (error as Error).message;
      if (message !== this.pollErrorMessage) this.onReloadError(error as Error);
      this.pollErrorMessage = message;
      if (this.stale) this.reportStale(`the registry has not been readable for ${limits.registryStaleMsMax} ms; credentials are refused (503) until it is: ${message}`);
    }
  }

  private reportStale(message: string): void {
    if (this.staleReported) return;
    this.staleReported = true;
    log.error({ event: "registry-stale", message }, "registry stale");
  }

  private async refresh(options: { throwOnInvalid: boolean; force?: boolean }): Promise<void> {
    while (this.refreshing !== undefined) await this.refreshing;
    this.refreshStartedMs = Date.now();
    const running = this.reload(options);
    this.refreshing = running.then(
      () => undefined,
      () => undefined,
    );
    try {
      await running;
    } finally {
      this.refreshing = undefined;
      this.refreshStartedMs = undefined;
    }
  }

  private async reload(options: { throwOnInvalid: boolean; force?: boolean }): Promise<void> {
    const path = registryPath(this.dataDir);
    // The cheap check first: one stat per poll while nothing changes.
    try {
      const signature = fileSignature(await stat(path, { bigint: true }));
      if (!options.force && (signature === this.loadedSignature || signature === this.failedSignature)) return;
    } catch (error) {
      // No registry yet (fresh data dir), or it was deleted: keep what we have rather than lock everyone out.
      if (errorCode(error) === "ENOENT") return;
      throw error;
    }

    // Read through one descriptor so the signature and the text belong to the same file version.
    let handle: FileHandle;
    try {
      handle = await open(path, "r");
    } catch (error) {
      if (errorCode(error) === "ENOENT") return;
      throw error;
    }
    try {
      const signature = fileSignature(await handle.stat({ bigint: true }));
      const text = await handle.readFile("utf8");
      let registry: RegistryDocument;
      try {
        registry = parseRegistry(text, path);
      } catch (error) {
        // Keep the last good snapshot: a bad edit must not drop every credential of a running server.
        if (options.throwOnInvalid) throw error;
        if (signature !== this.failedSignature) this.onReloadError(error as Error);
        this.failedSignature = signature;
        return;
      }
      this.snapshot = snapshotOf(registry);
      this.loadedSignature = signature;
      this.failedSignature = undefined;
    } finally {
      await handle.close();
    }
  }
}
