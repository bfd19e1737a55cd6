/**
 * `eventide import FILE`: NDJSON events (the export format) into a workspace,
 * through the ingest API in batches of 1 000. Going through a server, rather
 * than writing the store from here, keeps every ingest rule (validation,
 * limits, cardinality caps, uuid dedupe, durability) in one place and is as
 * fast as ingest itself; the store has one writer, the server. With no server
 * on the data directory, the import starts one of its own for its duration.
 *
 * It ingests with a temporary API key of the workspace (labelled, revoked at
 * the end), so no secret has to be passed. Events with a uuid are stored once
 * however often the file is imported (within the uuid horizon, SPEC §2 and
 * EVENTIDE_UUID_HORIZON_DAYS); export gives every event one.
 */
import { createReadStream, existsSync } from "node:fs";
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";

import { createApiKeyWithId, revokeApiKey } from "../auth/registry.js";
import type { CliContext } from "../cli.js";
import { CliCommandError } from "../cli/command-errors.js";
import { limits } from "../config/limits.js";
import { workspaceOption } from "./export.js";
import { reachServer } from "./server-process.js";

/** Batches sent at once: enough to keep the server's workers busy while one batch travels. */
const batchesInFlightMax = 4;
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

interface Batch {
  body: string[];
  lines: number[];
  bytes: number;
  days: Set<number>;
}

async function postBatch(ingestUrl: string, body: string): Promise<{ status: number; json: any; retryAfterSeconds: number }> {
  const response = await fetch(`${ingestUrl}/ingest/batch`, { method: "POST", headers: { "content-type": "application/json" }, body });
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, json, retryAfterSeconds: Number(response.headers.get("retry-after")) || 1 };
}

export async function importCommand(fileArgument: string, { io, dataDir, options }: CliContext): Promise<ImportSummary> {
  const file = resolve(io.workingDirectory, fileArgument);
  if (!existsSync(file)) throw new CliCommandError(`no file ${file}`);
  const workspace = await workspaceOption(dataDir, options.workspace);

  const { url: ingestUrl, server } = await reachServer("ingest", { io, dataDir, options });

  const key = await createApiKeyWithId(dataDir, workspace.workspaceId, { label: "eventide import (temporary)" });
  const summary: ImportSummary = { workspaceId: workspace.workspaceId, lines: 0, accepted: 0, refused: 0, errors: [] };
  try {
    await awaitKeyAccepted(ingestUrl, key.apiKey);
    const envelopeStart = `{"apiKey":${JSON.stringify(key.apiKey)},"events":[`;
    const inFlight = new Set<Promise<void>>();
    let failure: Error | undefined;
    const send = (batch: Batch) => {
      const sending = sendBatch(ingestUrl, envelopeStart + batch.body.join(",") + "]}", batch.lines, summary).catch((error: Error) => {
        failure ??= error;
      });
      inFlight.add(sending);
      void sending.finally(() => inFlight.delete(sending));
    };
    let batch: Batch = { body: [], lines: [], bytes: 0, days: new Set() };
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
      const bytes = Buffer.byteLength(line) + 1;
      const timestamp = Date.parse(String((event as { timestamp?: unknown }).timestamp ?? ""));
      const day = Number.isNaN(timestamp) ? -1 : Math.floor(timestamp / 86_400_000);
      // A batch holds at most batchEventsMax events, bodyBytes and batchDaysMax days (the server's caps, read from the same settings).
      const full =
        batch.body.length >= limits.batchEventsMax ||
        batch.bytes + bytes + envelopeStart.length + 2 > limits.batchBodyBytesMax ||
        (!batch.days.has(day) && batch.days.size >= limits.batchDaysMax);
      if (full && batch.body.length > 0) {
        send(batch);
        batch = { body: [], lines: [], bytes: 0, days: new Set() };
        while (inFlight.size >= batchesInFlightMax) await Promise.race(inFlight);
      }
      batch.body.push(line);
      batch.lines.push(lineNumber);
      batch.bytes += bytes;
      batch.days.add(day);
    }
    if (batch.body.length > 0 && !failure) send(batch);
    await Promise.all(inFlight);
    if (failure) throw new CliCommandError(`import stopped: ${failure.message} (${summary.accepted} events accepted before; importing the file again is safe for events with a uuid)`);
    return summary;
  } finally {
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

async function sendBatch(ingestUrl: string, body: string, lines: number[], summary: ImportSummary): Promise<void> {
  for (;;) {
    const { status, json, retryAfterSeconds } = await postBatch(ingestUrl, body);
    if (status === 429 || status === 503) {
      await sleep(retryAfterSeconds * 1000);
      continue;
    }
    if (status !== 200) throw new Error(`the server answered ${status}: ${JSON.stringify(json?.error ?? json)}`);
    summary.accepted += json.accepted as number;
    const errors = (json.errors ?? []) as Array<{ index: number; code: string; message: string }>;
    // The server lists at most the first 100 per batch; the rest are counted from `accepted`.
    summary.refused += lines.length - (json.accepted as number);
    for (const error of errors) if (summary.errors.length < errorsReportedMax) summary.errors.push({ line: lines[error.index], code: error.code, message: error.message });
    return;
  }
}
