/**
 * `eventide user delete DISTINCT_ID`: deletes every event of one user in a
 * workspace (a privacy request) through the query API's
 * POST /api/v1/users/delete, so the running server — the store's one writer —
 * does it: the events leave every answer and the disk before the command
 * prints. With no server on the data directory, the command starts one of its
 * own for its duration. It authenticates with a temporary token of the
 * workspace (labelled, revoked at the end), so no secret has to be passed.
 */
import { setTimeout as sleep } from "node:timers/promises";

import { createTokenWithId, revokeToken } from "../auth/registry.js";
import type { CliContext } from "../cli.js";
import { CliCommandError } from "../cli/command-errors.js";
import { workspaceOption } from "./export.js";
import { reachServer } from "./server-process.js";

/** A new token reaches a running server within a second (SPEC §0); waiting longer means it looks at another data directory. */
const tokenAcceptanceWaitMs = 10_000;

export async function deleteUserCommand(distinctId: string, { io, dataDir, options }: CliContext): Promise<{ deleted: true; workspaceId: string; distinctId: string; deletedEvents: number }> {
  const workspace = await workspaceOption(dataDir, options.workspace);
  const { url: queryUrl, server } = await reachServer("query", { io, dataDir, options });
  const token = await createTokenWithId(dataDir, workspace.workspaceId, { label: "eventide user delete (temporary)" });
  try {
    const deadlineMs = Date.now() + tokenAcceptanceWaitMs;
    for (;;) {
      let response: Response;
      try {
        response = await fetch(`${queryUrl}/api/v1/users/delete`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${token.token}` },
          body: JSON.stringify({ distinctId }),
        });
      } catch (error) {
        throw new CliCommandError(`no Eventide server answers at ${queryUrl} (${(error as Error).message}); pass --query-url or stop the server so that the command starts its own`);
      }
      const answer = (await response.json().catch(() => undefined)) as { deletedEvents?: number; error?: { message?: string } } | undefined;
      if (response.status === 200) return { deleted: true, workspaceId: workspace.workspaceId, distinctId, deletedEvents: answer!.deletedEvents! };
      // 401: the server has not read the new token yet; 503: starting, or the seal failed (retried until the deadline).
      if ((response.status !== 401 && response.status !== 503) || Date.now() > deadlineMs) {
        throw new CliCommandError(`the server at ${queryUrl} answered ${response.status}: ${answer?.error?.message ?? "no JSON answer"}; nothing is known to be deleted`);
      }
      await sleep(100);
    }
  } finally {
    await revokeToken(dataDir, token.id).catch(() => undefined);
    if (server) await server.stop();
  }
}
