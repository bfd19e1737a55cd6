/**
 * The uuid sets' memory budget (limits.uuidMemoryBytesMax). A set holds the
 * uuids of one or two horizons (uuid-set.ts), and a busy store receives far
 * more in that time than memory holds: at 10 000 events a second, a week of
 * uuids is over 10 GiB. Without a bound a client sending fresh uuids, or an
 * honest backfill, grows the process until the system kills it, and a
 * restart reloads the same uuids and dies again. So the sets begin new
 * generations early when memory runs short, and the retry window is then
 * what the budget holds (the gauge eventide_uuid_window_seconds says how
 * long).
 *
 * One epoch for all workspaces: once the sets' current generations together
 * hold half the budget, every set begins a new one and drops its older one,
 * so each remembers the uuids received since the same moment, and the two
 * generations of all sets stay within the budget.
 */
import { limits } from "../config/limits.js";
import { log } from "../log.js";
import type { WorkspaceStore } from "./workspace-store.js";

/** The workspaces (a Workspaces, or its map by id). */
type WorkspaceList = { values(): IterableIterator<WorkspaceStore> };

/** Bytes of every workspace's uuid set. */
export function uuidBytes(workspaces: WorkspaceList): number {
  let bytes = 0;
  for (const workspace of workspaces.values()) bytes += workspace.uuids.byteLength;
  return bytes;
}

/** Bytes of every workspace's current generation. */
export function currentUuidBytes(workspaces: WorkspaceList): number {
  let bytes = 0;
  for (const workspace of workspaces.values()) bytes += workspace.uuids.currentByteLength;
  return bytes;
}

/**
 * After a set grew: a new epoch once the current generations hold half the
 * budget; then, while the sets still exceed it (a generation that a commit
 * in flight holds was kept), the largest older generations are dropped.
 * Nothing while start-up still fills a set; and a generation a commit still
 * in flight claimed into is left alone
 * (`oldestInFlight`: the least such commit id, Infinity when none): memory
 * may then stay over the budget until that commit is durable.
 */
export function keepUuidsWithinBudget(workspaces: WorkspaceList, oldestInFlight: number, nowMs: number, budget = limits.uuidMemoryBytesMax): void {
  // While start-up still fills a set it keeps within the budget itself, and a turn now would count its uuids against
  // the others' and drop theirs.
  for (const workspace of workspaces.values()) if (workspace.uuidsPending) return;
  if (currentUuidBytes(workspaces) >= budget / 2) {
    let refused = 0;
    let rememberedSinceMs = -Infinity;
    for (const workspace of workspaces.values()) {
      if (!workspace.uuids.rotate(nowMs, oldestInFlight)) refused++;
      rememberedSinceMs = Math.max(rememberedSinceMs, workspace.uuids.rememberedSinceMs);
    }
    log.warn(
      { rememberedSince: new Date(rememberedSinceMs).toISOString(), setsKeptForCommitsInFlight: refused, budgetBytes: budget },
      "uuid sets at half their memory budget: each begins a new generation, and uuids received before the previous one began are forgotten (a retry of their events would be stored again); EVENTIDE_UUID_MEMORY_BYTES_MAX sets the budget",
    );
  }
  let total = uuidBytes(workspaces);
  if (total <= budget) return;
  const older = [...workspaces.values()].filter((workspace) => workspace.uuids.previousByteLength > 0);
  older.sort((left, right) => right.uuids.previousByteLength - left.uuids.previousByteLength);
  for (const workspace of older) {
    if (total <= budget) break;
    const bytes = workspace.uuids.previousByteLength;
    if (workspace.uuids.dropPrevious(oldestInFlight)) total -= bytes;
  }
}
