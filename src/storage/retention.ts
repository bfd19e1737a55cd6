/**
 * Retention: whole UTC days older than a workspace's retention period are
 * dropped — their sealed segments deleted (the merge scheduler's deletion
 * path: renamed away, removed, the day directory fsync'd), the day directory
 * removed once empty. A day expires when its last millisecond is more than the
 * period old, so "30 days" keeps the last 30 full days and today. Rows of an
 * expired day still active in memory (an old timestamp ingested just now) go
 * with the first pass after a checkpoint sealed them.
 */
import { rmdirSync } from "node:fs";
import type { RetentionPolicy } from "../config/config.js";
import { errorCode } from "./lock-file.js";
import type { MergeScheduler } from "./merge-scheduler.js";
import { dayDirectory } from "./paths.js";
import { dayLabel, dayMs, rowsOf } from "./segments.js";
import type { Workspaces } from "./workspace-store.js";

export interface RetentionPass {
  daysDropped: number;
  rowsDropped: number;
}

/** Whether the UTC day starting at `dayStartMs` is past `retention` at `nowMs`. */
export function dayExpired(dayStartMs: number, retention: RetentionPolicy, nowMs: number): boolean {
  return retention.kind === "days" && dayStartMs + dayMs + retention.days * dayMs <= nowMs;
}

export async function dropExpiredDays(dataDir: string, workspaces: Workspaces, merges: MergeScheduler, retentionOf: (workspaceId: string) => RetentionPolicy, nowMs: number): Promise<RetentionPass> {
  return merges.exclusive(async () => {
    const pass: RetentionPass = { daysDropped: 0, rowsDropped: 0 };
    for (const workspace of [...workspaces.values()]) {
      const retention = retentionOf(workspace.id);
      for (const [dayStartMs, partition] of [...workspace.days]) {
        if (!dayExpired(dayStartMs, retention, nowMs) || partition.sealed.length === 0) continue;
        const rows = rowsOf(partition.sealed);
        await merges.replace(workspace, partition, dayStartMs, partition.sealed.slice(), 0);
        pass.daysDropped++;
        pass.rowsDropped += rows;
        // A checkpoint may have sealed a late row of the day while this pass waited: the next pass takes it.
        if (partition.sealed.length > 0 || partition.sealing.length > 0 || (partition.active?.rowCount ?? 0) > 0) continue;
        workspace.days.delete(dayStartMs);
        try {
          rmdirSync(dayDirectory(dataDir, workspace.id, dayLabel(dayStartMs)));
        } catch (error) {
          // A checkpoint sealing a late row of the day meanwhile: the next pass takes it.
          if (errorCode(error) !== "ENOTEMPTY" && errorCode(error) !== "ENOENT") throw error;
        }
      }
    }
    return pass;
  });
}
