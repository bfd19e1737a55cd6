/**
 * `eventide import FILE`: NDJSON events (the export format) into a workspace,
 * through the ingest API with the Node client (`eventide/client`), the one
 * that retries with the same uuids and cuts batches at the server's caps.
 * Going through a server, rather than writing the store from here, keeps every
 * ingest rule (validation, limits, cardinality caps, uuid dedupe, durability)
 * in one place and is as fast as ingest itself; the store has one writer, the
 * server. With no server on the data directory, the import starts one of its
 * own for its duration.
 *
 * It ingests with a temporary API key of the workspace (labelled, revoked at
 * the end), so no secret has to be passed. Events with a uuid are stored once
 * however often the file is imported (within the uuid horizon, SPEC §2 and
 * EVENTIDE_UUID_HORIZON_DAYS); export gives every event one. An event without
 * one gets a uuid from the client, so a retry within this import never
 * doubles it, though importing the file again does.
 */
import { createReadStream, existsSync } from "node:fs";
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";

import { createApiKeyWithId, revokeApiKey } from "../auth/registry.js";
import type { CliContext } from "../cli.js";
import { CliCommandError } from "../cli/command-errors.js";
import { EventideClient, type CaptureInput, type DeliveryReport } from "../client/index.js";
import { limits } from "../config/limits.js";
import { workspaceOption } from "./export.js";
import { reachServer } from "./server-process.js";

/** Batches sent at once: enough to keep the server's workers busy while one batch travels. */
const batchesInFlightMax = 4;
/** Events read ahead of their acknowledgement: a few batches per request slot, so reading never waits on one answer. */
const eventsReadAheadMax = 4 * batchesInFlightMax * limits.batchEventsMax;
/** A new key reaches a running server within a second (SPEC §0); waiting longer means it looks at another data directory. */
const keyAcceptanceWaitMs = 10_000;
/** Errors listed in the summary line; the rest are counted. */
const errorsReportedMax = 20;

interface ImportSummary {
  workspaceId: string;
  lines: number;
  accepted: number;
  refused: number;
  errors: Array<{ line: number; code: string; message: string }>;
}

async function postBatch(ingestUrl: string, body: string): Promise<{ status: number }> {
  const response = await fetch(`${ingestUrl}/ingest/batch`, { method: "POST", headers: { "content-type": "application/json" }, body });
  await response.arrayBuffer();
  return { status: response.status };
}

/** Gzip costs both ends CPU and saves nothing on the loopback; over a network it saves ~10× the bytes. */
function isLoopback(url: string): boolean {
  const hostname = new URL(url).hostname;
  return hostname === "localhost" || hostname === "[::1]" || hostname.startsWith("127.");
}

export async function importCommand(fileArgument: string, { io, dataDir, options }: CliContext): Promise<ImportSummary> {
  const file = resolve(io.workingDirectory, fileArgument);
  if (!existsSync(file)) throw new CliCommandError(`no file ${file}`);
  const workspace = await workspaceOption(dataDir, options.workspace);

  const { url: ingestUrl, server } = await reachServer("ingest", { io, dataDir, options });

  const key = await createApiKeyWithId(dataDir, workspace.workspaceId, { label: "eventide import (temporary)" });
  const summary: ImportSummary = { workspaceId: workspace.workspaceId, lines: 0, accepted: 0, refused: 0, errors: [] };
  let client: EventideClient | undefined;
  try {
    await awaitKeyAccepted(ingestUrl, key.apiKey);
    client = new EventideClient({
      apiKey: key.apiKey,
      host: ingestUrl,
      // The server's caps, read from the same settings, so that no batch is refused for its size.
      batchEventsMax: limits.batchEventsMax,
      batchBytesMax: limits.batchBodyBytesMax,
      batchDaysMax: limits.batchDaysMax,
      queueEventsMax: Math.max(eventsReadAheadMax, limits.batchEventsMax),
      requestsInFlightMax: batchesInFlightMax,
      gzip: !isLoopback(ingestUrl),
    });
    const lineOf = new Map<CaptureInput, number>();
    let failure: string | undefined;
    client.on("delivery", (report: DeliveryReport) => {
      summary.accepted += report.accepted.length;
      for (const event of report.accepted) lineOf.delete(event.input);
      for (const event of report.refused) {
        const line = lineOf.get(event.input) ?? 0;
        lineOf.delete(event.input);
        // A refusal of the whole request (a revoked key, a server that never answered) would refuse every later batch too.
        if (event.status !== 200) failure ??= `${event.code}: ${event.message} (line ${line})`;
        recordError(summary, line, event.code, event.message);
      }
    });
    const lines = createInterface({ input: createReadStream(file, { encoding: "utf8" }), crlfDelay: Number.POSITIVE_INFINITY });
    let lineNumber = 0;
    for await (const line of lines) {
      lineNumber++;
      if (failure) break;
      if (line.trim() === "") continue;
      summary.lines++;
      let event: unknown;
      try {
        event = JSON.parse(line);
      } catch {
        recordError(summary, lineNumber, "invalid_json", "not a JSON line");
        continue;
      }
      if (typeof event !== "object" || event === null || Array.isArray(event)) {
        recordError(summary, lineNumber, "invalid_json", "not a JSON object");
        continue;
      }
      // The fields as the file has them: the server validates them, and refuses a line's event alone.
      const { event: name, distinctId, properties, timestamp, uuid } = event as Record<string, any>;
      const input: CaptureInput = { event: name, distinctId, properties, timestamp, uuid };
      lineOf.set(input, lineNumber);
      await client.capture(input);
    }
    await client.flush();
    if (failure) throw new CliCommandError(`import stopped: ${failure} (${summary.accepted} events accepted before; importing the file again is safe for events with a uuid)`);
    return summary;
  } finally {
    await client?.shutdown();
    await revokeApiKey(dataDir, key.id).catch(() => undefined);
    if (server) await server.stop();
  }
}

function recordError(summary: ImportSummary, line: number, code: string, message: string): void {
  summary.refused++;
  if (summary.errors.length < errorsReportedMax) summary.errors.push({ line, code, message });
}

/** An empty batch answers 200 once the server knows the key. */
async function awaitKeyAccepted(ingestUrl: string, apiKey: string): Promise<void> {
  const deadlineMs = Date.now() + keyAcceptanceWaitMs;
  for (;;) {
    let status: number;
    try {
      status = (await postBatch(ingestUrl, JSON.stringify({ apiKey, events: [] }))).status;
    } catch (error) {
      throw new CliCommandError(`no Eventide server answers at ${ingestUrl} (${(error as Error).message}); pass --ingest-url or stop the server so that import starts its own`);
    }
    if (status === 200) return;
    if (status !== 401 && status !== 503) throw new CliCommandError(`the server at ${ingestUrl} answered ${status} to an empty batch`);
    if (Date.now() > deadlineMs) throw new CliCommandError(`the server at ${ingestUrl} does not accept a key of this data directory's workspace: is it running on another data directory?`);
    await sleep(100);
  }
}
