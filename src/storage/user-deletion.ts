/**
 * User deletion (a privacy request): every event of one distinctId stored so
 * far leaves the store, from every answer and from disk, before the request is
 * answered. Rows are never masked; they are rewritten away, so no query path,
 * cache or export has a deleted row to skip.
 *
 * First a checkpoint that starts after the request seals every row applied so
 * far and publishes a WAL position past them: no replay can bring them back.
 * Then, with merges held off, each sealed segment of the workspace that holds
 * rows of the user is rewritten without them in the pool (the merge code path,
 * crash-safe the same way: published before the old segment is deleted). Rows
 * of the user acknowledged after the deletion began are new events and stay, as
 * in PostHog and Mixpanel. The distinctId keeps its dictionary id (the text stays
 * in the workspace's user dictionary), and the uuids of deleted events stay in
 * the dedupe set until the next start: a retry of a deleted event within that
 * window is acknowledged and not stored.
 */
import type { Checkpoints } from "./checkpoint.js";
import type { MergeScheduler } from "./merge-scheduler.js";
import { DamagedSegmentError, type SegmentCache } from "./segment-cache.js";
import type { SealedSegment } from "./segments.js";
import type { DayPartition, Workspaces } from "./workspace-store.js";

export interface UserDeletion {
  deletedEvents: number;
  segmentsRewritten: number;
}

/** An operating error: the rows could not be sealed (a failing disk); nothing was deleted, a retry may succeed. */
export class UserDeletionError extends Error {}

/** A rewrite that failed on damage, or after others were done: `deletedEvents` were deleted before it. */
export class UserDeletionInterrupted extends Error {
  constructor(
    readonly failure: Error,
    readonly deletedEvents: number,
  ) {
    super(failure.message);
    this.name = "UserDeletionInterrupted";
  }
}

export interface DeletionUnits {
  workspaces: Workspaces;
  cache: SegmentCache;
  checkpoints: Checkpoints;
  merges: MergeScheduler;
}

export async function deleteUserEvents(units: DeletionUnits, workspaceId: string, distinctId: string): Promise<UserDeletion> {
  const workspace = units.workspaces.byId.get(workspaceId);
  const userId = workspace?.users.idOf(distinctId);
  if (workspace === undefined || userId === undefined) return { deletedEvents: 0, segmentsRewritten: 0 };

  // A checkpoint already under way rotated the WAL before this request: wait it out, then run one of our own.
  while (units.checkpoints.inProgress) await units.checkpoints.inProgress;
  const sealed = await units.checkpoints.checkpoint();
  if (!sealed || units.checkpoints.state !== "durable") {
    throw new UserDeletionError("the user's latest events could not be sealed to disk (see the server log); nothing was deleted, retry later");
  }

  return units.merges.exclusive(async () => {
    // Every segment is read (its checksums verified) before any is rewritten: damage found then fails the request with
    // nothing deleted, where a deletion that met it half way left the days before it done and the rest not.
    const rewrites: Array<{ dayStartMs: number; partition: DayPartition; segment: SealedSegment; rows: number }> = [];
    for (const [dayStartMs, partition] of [...workspace.days]) {
      for (const segment of partition.sealed.slice()) {
        const rows = await rowsOfUser(units.cache, segment, userId);
        if (rows > 0) rewrites.push({ dayStartMs, partition, segment, rows });
      }
    }
    const deletion: UserDeletion = { deletedEvents: 0, segmentsRewritten: 0 };
    for (const { dayStartMs, partition, segment, rows } of rewrites) {
      try {
        await units.merges.replace(workspace, partition, dayStartMs, [segment], segment.layout.rowCount - rows, [userId]);
      } catch (error) {
        // Damage the read did not see (a file queries never load, damage since the segment was loaded), or any failure
        // once a segment was rewritten: the request is half done, and says how far.
        if (error instanceof DamagedSegmentError || deletion.deletedEvents > 0) throw new UserDeletionInterrupted(error as Error, deletion.deletedEvents);
        throw error;
      }
      deletion.deletedEvents += rows;
      deletion.segmentsRewritten++;
    }
    return deletion;
  });
}

/** How many rows of a sealed segment belong to `userId` (its user column, loaded through the cache). */
async function rowsOfUser(cache: SegmentCache, segment: SealedSegment, userId: number): Promise<number> {
  // Another load's admission may drop it from memory before this continues: load until it is there.
  while (segment.memory === undefined) await cache.ensureLoaded(segment);
  const users = new Uint32Array(segment.memory, segment.layout.user.offset, segment.layout.rowCount);
  let count = 0;
  for (let row = 0; row < users.length; row++) if (users[row] === userId) count++;
  return count;
}
