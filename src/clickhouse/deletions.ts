/**
 * Deleting rows from the ClickHouse store: a user's (POST /api/v1/users/delete)
 * and a workspace's days past its retention. For a user the outbox is drained
 * first (a deletion covers every event acknowledged before it), then each
 * table that holds rows (the server's, or every shard's local one) runs an
 * ALTER … DELETE mutation, awaited until ClickHouse reports it done, so no
 * answer after the reply counts the user. Rows go from disk as ClickHouse
 * rewrites the parts the mutation names.
 */
import type { ClickHouseSettings } from "../config/config.js";
import { limits } from "../config/limits.js";
import { ClickHouseClient, ClickHouseError, sqlIdentifier, sqlString } from "./client.js";
import type { RetentionPolicy } from "../config/config.js";
import type { RetentionPass } from "../storage/retention.js";
import { eventsTable, localEventsTable } from "./schema.js";

/** How often a pending mutation is asked after; it rewrites parts, which takes a while on large days. */
const mutationPollMs = 100;

/** The tables that hold rows: the server's, or every shard's local one (a mutation does not pass through Distributed). */
function rowTables(settings: ClickHouseSettings): { client: ClickHouseClient; table: string }[] {
  const timeoutMs = limits.clickhouseRequestTimeoutMs;
  return settings.cluster === undefined
    ? [{ client: ClickHouseClient.of(settings, timeoutMs), table: eventsTable }]
    : settings.shardUrls.map((url) => ({ client: ClickHouseClient.of(settings, timeoutMs, url), table: localEventsTable }));
}

/** Deletes the rows `where` names from every table holding rows, and waits until ClickHouse has; resolves to their count. */
async function deleteRows(settings: ClickHouseSettings, where: string): Promise<number> {
  const database = sqlIdentifier(settings.database);
  const targets = rowTables(settings);
  let deleted = 0;
  for (const { client, table } of targets) {
    const [[count]] = await client.rows(`SELECT count() FROM ${database}.${table} WHERE ${where}`);
    if (Number(count) === 0) continue;
    deleted += Number(count);
    await client.run(`ALTER TABLE ${database}.${table} DELETE WHERE ${where}`);
  }
  const deadlineMs = Date.now() + limits.clickhouseRequestTimeoutMs;
  for (const { client, table } of targets) {
    for (;;) {
      const [[pending]] = await client.rows(`SELECT count() FROM system.mutations WHERE database = ${sqlString(database)} AND table = ${sqlString(table)} AND is_done = 0`);
      if (Number(pending) === 0) break;
      if (Date.now() > deadlineMs) throw new ClickHouseError(`a deletion's mutation on ${database}.${table} was not done within ${limits.clickhouseRequestTimeoutMs} ms`, undefined);
      await new Promise((resolve) => setTimeout(resolve, mutationPollMs));
    }
  }
  return deleted;
}

export async function deleteClickHouseUser(
  settings: ClickHouseSettings,
  drained: () => Promise<void>,
  workspaceId: string,
  distinctId: string,
): Promise<{ deletedEvents: number }> {
  await drained();
  return { deletedEvents: await deleteRows(settings, `workspace = ${sqlString(workspaceId)} AND user = ${sqlString(distinctId)}`) };
}

/** Every workspace's whole UTC days past its retention (as the embedded store's dayExpired counts them) leave ClickHouse. */
export async function dropExpiredClickHouseDays(
  settings: ClickHouseSettings,
  workspaceIds: readonly string[],
  retentionOf: (workspaceId: string) => RetentionPolicy,
  nowMs: number,
): Promise<RetentionPass> {
  const pass: RetentionPass = { daysDropped: 0, rowsDropped: 0 };
  for (const workspaceId of workspaceIds) {
    const retention = retentionOf(workspaceId);
    if (retention.kind !== "days") continue;
    // Day d has expired once (d + 1 + days) whole days have passed since the epoch.
    const lastExpiredDay = Math.floor(nowMs / 86_400_000) - 1 - retention.days;
    if (lastExpiredDay < 0) continue;
    const rows = await deleteRows(settings, `workspace = ${sqlString(workspaceId)} AND day <= ${lastExpiredDay}`);
    if (rows > 0) pass.daysDropped++;
    pass.rowsDropped += rows;
  }
  return pass;
}
