/**
 * Commit: the write path's last step on the main thread. A worker's encoded
 * chunk passes the cardinality caps, claims its rows' uuids (dropping repeats
 * of stored or in-flight events), is appended to the WAL, and — once its group
 * is fdatasync'd — applied to active segments before the caller is answered,
 * so a query started after the answer counts its rows (read-your-writes).
 */
import { strict as assert } from "node:assert";
import { decodeChunk, filterChunk, type DecodedChunk } from "./chunk-codec.js";
import type { Applier } from "./apply.js";
import type { RowRefusal } from "./cardinality.js";
import { keepUuidsWithinBudget } from "./uuid-budget.js";
import { uuidClaimedNow } from "./uuid-set.js";
import { encodeRecordParts, type WriteAheadLog } from "./wal.js";
import type { Workspaces, WorkspaceStore } from "./workspace-store.js";

export interface CommitResult {
  /** Rows stored (uuid repeats of earlier events removed). */
  storedCount: number;
  /** Rows refused by a cardinality cap, in row order (rows of the chunk as committed). */
  refusals: RowRefusal[];
}

export class Committer {
  private commitSequence = 0;
  /** Commits that claimed uuids and are not yet durable, by commit id. */
  private readonly commitsInFlight = new Map<number, Promise<void>>();

  constructor(
    private readonly workspaces: Workspaces,
    private readonly wal: WriteAheadLog,
    private readonly applier: Applier,
    private readonly isClosed: () => boolean,
    /** Called after each durable commit with rows (activity, and the checkpoint triggers). */
    private readonly onDurable: () => void,
  ) {}

  /**
   * Makes a worker's chunk durable and visible. Resolves after the fdatasync of
   * its group and after its rows are applied, so a query that starts after the
   * resolution counts them. Rejects when the disk failed; nothing is then stored.
   */
  async commit(workspaceId: string, chunkBuffer: ArrayBuffer): Promise<CommitResult> {
    assert(!this.isClosed(), "store is closed");
    const workspace = this.workspaces.open(workspaceId);
    let bytes = new Uint8Array(chunkBuffer);
    let chunk = decodeChunk(bytes);
    // Dedupe needs every stored uuid: right after start-up the set may still be filling.
    if (chunk.uuidPresent && workspace.uuidsPending) await workspace.uuidsReady;
    assert(!this.isClosed(), "store is closed");
    const commitId = ++this.commitSequence;
    workspace.uuids.advance(Date.now(), this.oldestCommitInFlight());

    // Before the uuids are claimed: a refused row's uuid stays free for a retry.
    const admission = workspace.cardinality.admit(workspace.events, workspace.keys, chunk);
    if (admission.keep) {
      bytes = new Uint8Array(filterChunk(chunk, admission.keep));
      chunk = decodeChunk(bytes);
    }

    // Claim uuids now, so a concurrent retry of the same events is recognised
    // while this one is still on its way to disk. A repeat of a uuid whose
    // commit is still in flight waits for that commit — and fails with it —
    // before it may be acknowledged.
    // Claimed uuids stay in the original chunk's bytes; only their offsets are kept.
    const claimedUuids: number[] = [];
    const originalUuidBytes = chunk.uuidBytes;
    const awaitedCommits = new Set<Promise<void>>();
    if (chunk.uuidPresent) {
      let keep: Uint8Array | undefined;
      const uuidBytes = chunk.uuidBytes!;
      const setBytesBefore = workspace.uuids.byteLength;
      const hashes = workspace.uuids.prefetchHomes(uuidBytes, chunk.uuidPresent, chunk.rowCount);
      for (let row = 0; row < chunk.rowCount; row++) {
        if (!chunk.uuidPresent[row]) continue;
        const owner = hashes === undefined ? workspace.uuids.claim(uuidBytes, row * 16, commitId) : workspace.uuids.claimHashed(uuidBytes, row * 16, commitId, hashes[row]);
        if (owner === uuidClaimedNow) {
          claimedUuids.push(row * 16);
          continue;
        }
        keep ??= new Uint8Array(chunk.rowCount).fill(1);
        keep[row] = 0;
        const inFlight = this.commitsInFlight.get(owner);
        if (inFlight) awaitedCommits.add(inFlight);
      }
      if (keep) {
        bytes = new Uint8Array(filterChunk(chunk, keep));
        chunk = decodeChunk(bytes);
      }
      // Only a table that grew can take memory past the budget. This commit is not in flight yet, but its claims are.
      if (workspace.uuids.byteLength > setBytesBefore) keepUuidsWithinBudget(this.workspaces, Math.min(this.oldestCommitInFlight(), commitId), Date.now());
    }
    try {
      const durable = chunk.rowCount === 0 ? Promise.resolve() : this.appendAndApply(workspace, chunk, bytes, originalUuidBytes, claimedUuids, commitId);
      await Promise.all([durable, ...awaitedCommits]);
    } finally {
      admission.release();
    }
    return { storedCount: chunk.rowCount, refusals: admission.refusals };
  }

  /** The least id of a commit that claimed uuids and is not yet durable; Infinity when none. */
  oldestCommitInFlight(): number {
    // Ids enter the map in increasing order, and it iterates in insertion order.
    for (const commitId of this.commitsInFlight.keys()) return commitId;
    return Infinity;
  }

  private appendAndApply(
    workspace: WorkspaceStore,
    chunk: DecodedChunk,
    bytes: Uint8Array,
    uuidBytes: Uint8Array | undefined,
    claimedUuids: number[],
    commitId: number,
  ): Promise<void> {
    const record = encodeRecordParts(workspace.id, bytes);
    // A uuid's owner id stays in the set after its commit is durable; the
    // owner is "in flight" exactly while it is in commitsInFlight.
    let applied: Promise<void> | undefined;
    // The WAL calls back (in WAL order) before it resolves: `applied` is known by the time this runs on.
    const durable = this.wal.append(record, () => (applied = this.applier.applyDurable(workspace, chunk))).then(() => applied);
    if (claimedUuids.length > 0) this.commitsInFlight.set(commitId, durable);
    const settled = durable.then(
      () => {
        this.commitsInFlight.delete(commitId);
        this.onDurable();
      },
      (error: unknown) => {
        this.commitsInFlight.delete(commitId);
        for (const offset of claimedUuids) workspace.uuids.delete(uuidBytes!, offset, commitId);
        throw error;
      },
    );
    return settled;
  }
}
