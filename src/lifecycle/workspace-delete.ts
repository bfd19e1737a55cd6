/**
 * `eventide workspace delete WORKSPACE --yes`: removes the workspace's
 * credentials and every event it holds. Refused while a server holds the data
 * directory: the server keeps the workspace's rows in memory and in its WAL,
 * and would write them again; so the command takes the server's own lock for
 * its duration, and no server can start meanwhile.
 *
 * Rows still in the WAL (a server that was killed rather than stopped) would
 * come back at the next start's replay, so they are sealed first by starting
 * and cleanly stopping a server (a clean stop seals every row). Then the
 * workspace's directory is renamed to a name recovery ignores and removed, and
 * last the registry forgets the workspace: a crash in between leaves a
 * workspace without events, which a second delete finishes.
 */
import { existsSync, readdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";

import { holdServerLock } from "../storage/lock-file.js";
import { findWorkspaceSummary, removeWorkspace } from "../auth/registry.js";
import type { CliContext } from "../cli.js";
import { CliCommandError, CliUsageError } from "../cli/command-errors.js";
import { forgetWorkspace } from "../storage/checkpoint-file.js";
import { fsyncDirectory } from "../storage/files.js";
import { serverLockPath, walDirectory, workspaceDirectory, workspacesDirectory } from "../storage/paths.js";
import { readWalFile } from "../storage/wal.js";
import { startPrivateServer } from "./server-process.js";
import { checkpointSequenceOf } from "./snapshot.js";

function lockDataDir(dataDir: string): Promise<() => Promise<void>> {
  return holdServerLock(
    dataDir,
    serverLockPath(dataDir),
    (holder) => new CliCommandError(`a server is running on ${dataDir} (${holder}): stop it first; workspace delete is refused while a server holds the data directory`),
  );
}

/** Whether WAL files a restart would replay hold rows of the workspace. */
function walHoldsWorkspace(dataDir: string, workspaceId: string): boolean {
  const wal = walDirectory(dataDir);
  if (!existsSync(wal)) return false;
  const checkpointSequence = checkpointSequenceOf(dataDir);
  for (const name of readdirSync(wal)) {
    if (!/^\d{12}\.wal$/.test(name) || Number(name.slice(0, 12)) < checkpointSequence) continue;
    if (readWalFile(join(wal, name)).records.some((record) => record.workspaceId === workspaceId)) return true;
  }
  return false;
}

export async function deleteWorkspaceCommand(workspaceArgument: string, { io, dataDir, options }: CliContext): Promise<{ deleted: true; workspaceId: string; name: string }> {
  const workspace = await findWorkspaceSummary(dataDir, workspaceArgument);
  if (options.yes !== true) throw new CliUsageError(`deleting workspace ${JSON.stringify(workspace.name)} removes every event it holds; add --yes to confirm`);
  let release = await lockDataDir(dataDir);
  try {
    if (walHoldsWorkspace(dataDir, workspace.workspaceId)) {
      await release();
      io.writeDiagnostic("eventide: the write-ahead log holds rows of this workspace; starting and stopping the server once to seal them\n");
      const server = await startPrivateServer(io.environment, dataDir, io.writeDiagnostic);
      await server.stop();
      release = await lockDataDir(dataDir);
      if (walHoldsWorkspace(dataDir, workspace.workspaceId)) throw new CliCommandError("the write-ahead log still holds rows of this workspace (the server's final checkpoint failed; see its log); nothing deleted");
    }
    const directory = workspaceDirectory(dataDir, workspace.workspaceId);
    if (existsSync(directory)) {
      // Not a workspace id, so recovery skips it if the removal below is cut short.
      const doomed = join(workspacesDirectory(dataDir), `tmp_deleted_${workspace.workspaceId}`);
      rmSync(doomed, { recursive: true, force: true });
      renameSync(directory, doomed);
      fsyncDirectory(workspacesDirectory(dataDir));
      // A crash before this line leaves a start refused for the missing directory: running the delete again finishes it.
      forgetWorkspace(dataDir, workspace.workspaceId);
      rmSync(doomed, { recursive: true, force: true });
    } else {
      forgetWorkspace(dataDir, workspace.workspaceId);
    }
    await removeWorkspace(dataDir, workspace.workspaceId);
    return { deleted: true, workspaceId: workspace.workspaceId, name: workspace.name };
  } finally {
    await release();
  }
}
