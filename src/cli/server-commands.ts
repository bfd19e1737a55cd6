/**
 * `eventide init` and `eventide serve`: the two commands that may create a
 * data directory. `serve` is `npm start` under another name: the same server
 * process with the same V8 flags, in the foreground, signals passed on.
 */
import { existsSync } from "node:fs";

import { createDefaultWorkspaceIfEmpty, listWorkspaces, type CreatedWorkspace } from "../auth/registry.js";
import { spawnServer } from "../lifecycle/server-process.js";
import { makeDataDirectoryPrivate } from "../storage/files.js";
import { registryPath } from "../storage/paths.js";
import type { CliContext } from "../cli.js";
import { CliCommandError, CliExit } from "./command-errors.js";

/** Creates the data directory (private, as the server makes it) and its `default` workspace. */
export async function initDataDirectory(dataDir: string): Promise<CreatedWorkspace & { dataDir: string }> {
  if (existsSync(registryPath(dataDir))) {
    const workspaces = await listWorkspaces(dataDir);
    if (workspaces.length > 0) throw new CliCommandError(`${dataDir} is already an Eventide data directory (${workspaces.length} workspace${workspaces.length === 1 ? "" : "s"}); nothing done`);
  }
  makeDataDirectoryPrivate(dataDir);
  const created = await createDefaultWorkspaceIfEmpty(dataDir);
  if (created === undefined) throw new CliCommandError(`${dataDir} got a workspace meanwhile (another eventide process); nothing done`);
  return { dataDir, ...created };
}

/** Runs the server until it exits; SIGTERM and SIGINT reach it (it stops cleanly and exits 0). */
export async function serve({ io, dataDir }: CliContext): Promise<CliExit> {
  const child = spawnServer(io.environment, dataDir, "inherit");
  const forward = (signal: NodeJS.Signals) => () => {
    child.kill(signal);
  };
  const onTerm = forward("SIGTERM");
  const onInt = forward("SIGINT");
  process.on("SIGTERM", onTerm);
  process.on("SIGINT", onInt);
  try {
    const code = await new Promise<number>((resolve, reject) => {
      child.once("error", reject);
      child.once("exit", (exitCode, signal) => resolve(exitCode ?? (signal ? 1 : 0)));
    });
    return new CliExit(code);
  } finally {
    process.off("SIGTERM", onTerm);
    process.off("SIGINT", onInt);
  }
}
