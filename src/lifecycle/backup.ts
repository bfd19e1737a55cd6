/**
 * `eventide backup DIR`: a consistent copy of the data directory that a server
 * starts from, taken while the server runs (snapshot.ts says why it is
 * consistent). Restore: stop the server, move the data directory aside, move
 * DIR into its place, start the server; it replays the copied WAL. The copy is
 * checked as start-up would check it before it is kept (verify-copy.ts).
 */
import { existsSync, readdirSync, renameSync, rmdirSync, rmSync } from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import { randomBytes } from "node:crypto";

import type { CliContext } from "../cli.js";
import { CliCommandError } from "../cli/command-errors.js";
import { copySnapshot, linkSnapshot, removeSnapshot, type SnapshotSummary } from "./snapshot.js";
import { firstDamage } from "./verify-copy.js";
import { fsyncFromEnvironment } from "../config/config.js";

export async function backupCommand(targetArgument: string, { io, dataDir }: CliContext): Promise<SnapshotSummary & { backup: string; dataDir: string }> {
  const target = resolve(io.workingDirectory, targetArgument);
  if (target === dataDir || target.startsWith(`${dataDir}/`)) throw new CliCommandError(`the backup ${target} must lie outside the data directory ${dataDir}`);
  if (existsSync(target) && readdirSync(target).length > 0) throw new CliCommandError(`${target} is not empty; a backup goes into a new or empty directory`);
  if (!existsSync(dirname(target))) throw new CliCommandError(`${dirname(target)} does not exist`);
  // Copied beside the target and renamed into place: a backup that stopped half-way never looks like a backup.
  const temporary = join(dirname(target), `.${basename(target)}.tmp-${randomBytes(4).toString("hex")}`);
  io.writeDiagnostic(`eventide: backing up ${dataDir} to ${target}\n`);
  let snapshot: string | undefined;
  try {
    const linked = linkSnapshot(dataDir);
    snapshot = linked.directory;
    copySnapshot(snapshot, temporary);
    const damage = firstDamage(temporary, fsyncFromEnvironment());
    if (damage !== undefined) {
      const original = join(dataDir, relative(temporary, damage.path));
      throw new CliCommandError(
        `the data directory holds damage (${original}: ${damage.detail.replaceAll(temporary, dataDir)}), so no backup was kept: a backup of it would fail at the restore. Stop the server, run \`eventide repair\`, start it and back up again`,
      );
    }
    const summary = linked.summary;
    // An empty target directory (checked above) gives way to the copy.
    if (existsSync(target)) rmdirSync(target);
    renameSync(temporary, target);
    return { backup: target, dataDir, ...summary };
  } finally {
    if (snapshot !== undefined) removeSnapshot(snapshot);
    rmSync(temporary, { recursive: true, force: true });
  }
}
