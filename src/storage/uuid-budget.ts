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

/** The workspaces (a Workspaces, its map by id, or an array of them). */
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
 * Sets that start-up still fills are not turned, and their bytes leave the
 * others at least half the budget (for a moment the two may hold one and a
 * half times it); and a generation a commit still in flight claimed into is
 * left alone (`oldestInFlight`: the least such commit id, Infinity when
 * none): memory may then stay over the budget until that commit is durable.
 */
export function keepUuidsWithinBudget(workspaces: WorkspaceList, oldestInFlight: number, nowMs: number, budget = limits.uuidMemoryBytesMax): void {
  // Sets that start-up still fills are left out of the reckoning: start-up keeps them within the budget, giving way to
  // the others' growth; counted here, their bytes would turn, then empty, the ready sets alone.
  const ready = [...workspaces.values()].filter((workspace) => !workspace.uuidsPending);
  // What start-up holds is left to the ready sets, down to half the budget: together at most one and a half times it.
  const readyBudget = Math.max(budget / 2, budget - (uuidBytes(workspaces) - uuidBytes(ready)));
  if (currentUuidBytes(ready) >= readyBudget / 2) {
    let refused = 0;
    let rememberedSinceMs = -Infinity;
    for (const workspace of ready) {
      if (!workspace.uuids.rotate(nowMs, oldestInFlight)) refused++;
      rememberedSinceMs = Math.max(rememberedSinceMs, workspace.uuids.rememberedSinceMs);
    }
    epochsUnlogged++;
    // One line a minute at most: with many small workspaces, epochs may follow each other quickly.
    if (nowMs - lastLoggedMs < 60_000) return dropOlder(ready, readyBudget, oldestInFlight);
    lastLoggedMs = nowMs;
    log.warn(
      { rememberedSince: new Date(rememberedSinceMs).toISOString(), epochs: epochsUnlogged, setsKeptForCommitsInFlight: refused, budgetBytes: budget },
      "uuid sets at half their memory budget: each begins a new generation, and uuids received before the previous one began are forgotten (a retry of their events would be stored again); EVENTIDE_UUID_MEMORY_BYTES_MAX sets the budget",
    );
    epochsUnlogged = 0;
  }
  dropOlder(ready, readyBudget, oldestInFlight);
}

let lastLoggedMs = -Infinity;
let epochsUnlogged = 0;

/** While the sets exceed `budget`, drops the largest older generations (each refused one skipped). */
function dropOlder(sets: readonly WorkspaceStore[], budget: number, oldestInFlight: number): void {
  let total = uuidBytes(sets);
  if (total <= budget) return;
  const older = sets.filter((workspace) => workspace.uuids.previousByteLength > 0);
  older.sort((left, right) => right.uuids.previousByteLength - left.uuids.previousByteLength);
  for (const workspace of older) {
    if (total <= budget) break;
    const bytes = workspace.uuids.previousByteLength;
    if (workspace.uuids.dropPrevious(oldestInFlight)) total -= bytes;
  }
}
