/**
 * The uuid sets' memory budget (limits.uuidMemoryBytesMax). A set holds the
 * uuids of one or two horizons (uuid-set.ts), and a busy store receives far
 * more in that time than memory holds: at 10 000 events a second, a week of
 * uuids is over 10 GiB. Without a bound a client sending fresh uuids, or an
 * honest backfill, grows the process until the system kills it, and a
 * restart reloads the same uuids and dies again. So sets begin a new
 * generation early when memory runs short, and the retry window is then what
 * the budget holds (the gauge eventide_uuid_window_seconds says how long).
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

/**
 * After `claimed`'s set grew: it begins a new generation once its current
 * one holds half the budget, so its two stay within the budget; and while
 * all sets together exceed it, the largest older generation among them is
 * dropped. A set still filling after start-up is left alone, and so is a
 * generation a commit still in flight claimed into (`oldestInFlight`: the
 * least such commit id, Infinity when none); memory may then stay over the
 * budget until that commit is durable.
 */
export function keepUuidsWithinBudget(workspaces: WorkspaceList, claimed: WorkspaceStore, oldestInFlight: number, nowMs: number, budget = limits.uuidMemoryBytesMax): void {
  if (!claimed.uuidsPending && claimed.uuids.currentByteLength >= budget / 2) rotate(claimed, oldestInFlight, nowMs);
  if (uuidBytes(workspaces) <= budget) return;
  let largest: WorkspaceStore | undefined;
  for (const workspace of workspaces.values()) {
    if (workspace.uuidsPending || workspace.uuids.previousByteLength === 0) continue;
    if (largest === undefined || workspace.uuids.previousByteLength > largest.uuids.previousByteLength) largest = workspace;
  }
  if (largest !== undefined) rotate(largest, oldestInFlight, nowMs);
}

function rotate(workspace: WorkspaceStore, oldestInFlight: number, nowMs: number): void {
  if (!workspace.uuids.rotate(nowMs, oldestInFlight)) return;
  log.warn(
    { workspace: workspace.id, rememberedSince: new Date(workspace.uuids.rememberedSinceMs).toISOString(), budgetBytes: limits.uuidMemoryBytesMax },
    "uuid set at its memory budget: uuids received before rememberedSince are forgotten (a retry of their events would be stored again); EVENTIDE_UUID_MEMORY_BYTES_MAX sets the budget",
  );
}
