/**
 * `eventide import FILE`: NDJSON events (the export format) into a workspace,
 * through /ingest/batch. Going through a server, rather than writing the store
 * from here, keeps every ingest rule (validation, limits, cardinality caps,
 * uuid dedupe, durability) in one place; the store has one writer, the
 * server. With no server on the data directory, the import starts one of its
 * own for its duration.
 *
 * To go as fast as ingest, a line's bytes go into the batch body as they are
 * (import-batches.ts): parsing and re-serializing every line cost the import
 * more CPU than the server spent storing it, on the same cores. The server
 * validates each event and names a refused one by its index, which the import
 * maps back to its line.
 *
 * It ingests with a temporary API key of the workspace (labelled, revoked at
 * the end), so no secret has to be passed. Events with a uuid are stored once
 * however often the file is imported (within the uuid horizon, SPEC §2 and
 * EVENTIDE_UUID_HORIZON_DAYS); export gives every event one. An event without
 * one gets a uuid from the import before it is first sent, so a retry within
 * this import never doubles it, though importing the file again does.
 */
import { existsSync } from "node:fs";
import { open } from "node:fs/promises";
import { resolve } from "node:path";
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { createApiKeyWithId, revokeApiKey } from "../auth/registry.js";
import type { CliContext } from "../cli.js";
import { CliCommandError } from "../cli/command-errors.js";
import { limits, tuning } from "../config/limits.js";
import { workspaceOption } from "./export.js";
import { BatchSender, reserializedLine, type LineError } from "./import-batches.js";
import { LineScanner, trimmedLine, type LineDay } from "./ndjson-line.js";
import { reachServer } from "./server-process.js";

/** A new key reaches a running server within a second (SPEC §0); waiting longer means it looks at another data directory. */
const keyAcceptanceWaitMs = 10_000;
/** Errors listed in the summary line (those of the first lines); the rest are counted. */
const errorsReportedMax = 20;
const newline = 0x0a;
/** `{"uuid":"` + a uuid + `"`, put before the members of a line without one. */
const uuidMemberBytes = 9 + 36 + 1;

interface ImportSummary {
  workspaceId: string;
  lines: number;
  accepted: number;
  refused: number;
  errors: LineError[];
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

function dayOf(lineDay: LineDay): number {
  switch (lineDay.kind) {
    case "day":
      return lineDay.day;
    case "receipt":
      return BatchSender.receiptDay();
    case "none":
      return Number.NaN;
  }
}

export async function importCommand(fileArgument: string, { io, dataDir, options }: CliContext): Promise<ImportSummary> {
  const file = resolve(io.workingDirectory, fileArgument);
  if (!existsSync(file)) throw new CliCommandError(`no file ${file}`);
  const workspace = await workspaceOption(dataDir, options.workspace);

  const { url: ingestUrl, server } = await reachServer("ingest", { io, dataDir, options });

  const key = await createApiKeyWithId(dataDir, workspace.workspaceId, { label: "eventide import (temporary)" });
  const summary: ImportSummary = { workspaceId: workspace.workspaceId, lines: 0, accepted: 0, refused: 0, errors: [] };
  let sender: BatchSender | undefined;
  try {
    await awaitKeyAccepted(ingestUrl, key.apiKey);
    sender = new BatchSender(
      ingestUrl,
      key.apiKey,
      { requestsInFlightMax: limits.importRequestsInFlightMax, gzip: !isLoopback(ingestUrl) },
      { accepted: (count) => (summary.accepted += count), refused: (error) => recordError(summary, error) },
    );
    await readLines(file, sender, summary);
    await sender.finish();
    if (sender.failure) throw new CliCommandError(`import stopped: ${sender.failure} (${summary.accepted} events accepted before; importing the file again is safe for events with a uuid)`);
    return summary;
  } finally {
    await revokeApiKey(dataDir, key.id).catch(() => undefined);
    if (server) await server.stop();
  }
}

/**
 * Reads the file in large pieces and hands each line's bytes to the sender:
 * as they are when the line is one object with a uuid, with a uuid put first
 * when it has none (so that a re-send within this import never doubles it),
 * re-serialized from JSON.parse when its outline is unclear. Memory stays
 * within the read buffer (grown only for a line longer than it, up to the
 * largest event a batch carries) and the batches in flight.
 */
async function readLines(file: string, sender: BatchSender, summary: ImportSummary): Promise<void> {
  const scanner = new LineScanner();
  const lineBytesMax = sender.eventBytesMax;
  const handle = await open(file, "r");
  try {
    let buffer = Buffer.allocUnsafe(Math.min(tuning.importReadBytes, lineBytesMax + 1));
    let filled = 0;
    let lineNumber = 0;
    /** Inside a line over the cap, already reported: its bytes are dropped until its end. */
    let skipping = false;
    let atEnd = false;
    while (!atEnd && sender.failure === undefined) {
      const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, null);
      atEnd = bytesRead === 0;
      filled += bytesRead;
      let start = 0;
      for (;;) {
        let end = buffer.indexOf(newline, start);
        if (end < 0 || end >= filled) {
          if (!atEnd || start === filled) break;
          end = filled;
        }
        if (skipping) skipping = false;
        else {
          lineNumber++;
          if (sender.backlogged) await sender.room();
          addLine(buffer, start, end, lineNumber, sender, scanner, summary);
        }
        start = Math.min(end + 1, filled);
        if (start === filled) break;
      }
      if (atEnd) break;
      buffer.copyWithin(0, start, filled);
      filled -= start;
      if (filled < buffer.length) continue;
      if (buffer.length <= lineBytesMax) {
        const grown = Buffer.allocUnsafe(Math.min(buffer.length * 2, lineBytesMax + 1));
        buffer.copy(grown, 0, 0, filled);
        buffer = grown;
        continue;
      }
      if (!skipping) {
        lineNumber++;
        summary.lines++;
        recordError(summary, { line: lineNumber, code: "payload_too_large", message: lineTooLong(lineBytesMax) });
        skipping = true;
      }
      filled = 0;
    }
  } finally {
    await handle.close();
  }
}

function lineTooLong(lineBytesMax: number): string {
  return `the line is over ${lineBytesMax} bytes, the most one batch body carries (EVENTIDE_BATCH_BODY_BYTES_MAX)`;
}

function addLine(buffer: Buffer, start: number, end: number, lineNumber: number, sender: BatchSender, scanner: LineScanner, summary: ImportSummary): void {
  [start, end] = trimmedLine(buffer, start, end);
  if (start === end) return;
  summary.lines++;
  if (!scanner.scan(buffer, start, end)) {
    const result = reserializedLine(buffer.toString("utf8", start, end));
    if ("error" in result) return recordError(summary, { line: lineNumber, ...result.error });
    const json = Buffer.from(result.json);
    // Re-serialized, the line's outline is plain: its day is read as any other line's.
    scanner.scan(json, 0, json.length);
    return addEvent(json, 0, json.length, lineNumber, sender, scanner, summary);
  }
  addEvent(buffer, start, end, lineNumber, sender, scanner, summary);
}

function addEvent(source: Buffer, start: number, end: number, lineNumber: number, sender: BatchSender, scanner: LineScanner, summary: ImportSummary): void {
  const day = dayOf(scanner.day(source));
  if (scanner.uuidFound) {
    if (end - start > sender.eventBytesMax) return recordError(summary, { line: lineNumber, code: "payload_too_large", message: lineTooLong(sender.eventBytesMax) });
    const offset = sender.reserve(end - start, lineNumber, day);
    source.copy(sender.bytes, offset, start, end);
    return;
  }
  // `{"uuid":"…",` and the line's members after its `{`; no comma before an empty object's `}`.
  const separator = scanner.memberCount > 0 ? 1 : 0;
  const eventBytes = uuidMemberBytes + separator + (end - start - 1);
  if (eventBytes > sender.eventBytesMax) return recordError(summary, { line: lineNumber, code: "payload_too_large", message: lineTooLong(sender.eventBytesMax) });
  const offset = sender.reserve(eventBytes, lineNumber, day);
  const target = sender.bytes;
  let at = offset + target.write(`{"uuid":"${randomUUID()}"`, offset, "latin1");
  if (separator > 0) target[at++] = 0x2c;
  source.copy(target, at, start + 1, end);
}

/** Answers come back out of order: the errors kept are those of the first lines. */
function recordError(summary: ImportSummary, error: LineError): void {
  summary.refused++;
  const errors = summary.errors;
  if (errors.length === errorsReportedMax && errors[errors.length - 1].line < error.line) return;
  errors.push(error);
  errors.sort((left, right) => left.line - right.line);
  if (errors.length > errorsReportedMax) errors.pop();
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
