/**
 * `eventide export`: a workspace's events as NDJSON (the format `import`
 * reads) or CSV, streamed. Reads a snapshot of the data directory, made of
 * hard links (instant, no copy) in a private directory inside it, so a running
 * server's checkpoints and merges cannot delete a file mid-read; the server is
 * never asked anything and needs not run. The snapshot is removed at the end
 * (a killed export's is removed by the next snapshot).
 */
import { randomBytes } from "node:crypto";
import { createWriteStream, existsSync, renameSync, rmSync } from "node:fs";
import { resolve } from "node:path";
import type { Writable } from "node:stream";

import { findWorkspaceSummary, listWorkspaces } from "../auth/registry.js";
import type { CliContext } from "../cli.js";
import { CliCommandError, CliExit, CliUsageError } from "../cli/command-errors.js";
import { readWorkspaceEvents, type ExportedEvent } from "./event-reader.js";
import { linkSnapshot, removeSnapshot } from "./snapshot.js";

const dayMs = 86_400_000;
/** Output is handed to the stream in pieces of about this size: few writes, little held. */
const outputPieceBytes = 256 * 1024;

export type ExportFormat = "ndjson" | "csv";

/** The workspace named by --workspace, or the only one. */
export async function workspaceOption(dataDir: string, given: string | true | undefined): Promise<{ workspaceId: string; name: string }> {
  if (typeof given === "string") return findWorkspaceSummary(dataDir, given);
  const workspaces = await listWorkspaces(dataDir);
  if (workspaces.length === 1) return workspaces[0];
  throw new CliUsageError(`--workspace is needed: the data directory holds ${workspaces.length} workspaces`);
}

function dateOption(value: string | true | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const match = typeof value === "string" ? /^(\d{4})-(\d{2})-(\d{2})$/.exec(value) : null;
  const ms = match ? Date.parse(`${value}T00:00:00Z`) : Number.NaN;
  if (!match || Number.isNaN(ms) || new Date(ms).toISOString().slice(0, 10) !== value) throw new CliUsageError(`--${name} must be a date YYYY-MM-DD`);
  return ms;
}

function csvField(text: string): string {
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

const csvHeader = "event,distinctId,timestamp,uuid,properties\n";

function formatEvent(event: ExportedEvent, format: ExportFormat): string {
  if (format === "ndjson") return `${JSON.stringify(event)}\n`;
  return `${[event.event, event.distinctId, event.timestamp, event.uuid, JSON.stringify(event.properties)].map(csvField).join(",")}\n`;
}

async function writePiece(output: Writable, piece: string): Promise<void> {
  if (output.write(piece)) return;
  await new Promise<void>((resolveDrain, reject) => {
    const onError = (error: Error) => reject(error);
    output.once("error", onError);
    output.once("drain", () => {
      output.off("error", onError);
      resolveDrain();
    });
  });
}

export async function exportCommand({ io, dataDir, options }: CliContext): Promise<unknown> {
  const format = options.format ?? "ndjson";
  if (format !== "ndjson" && format !== "csv") throw new CliUsageError("--format must be ndjson or csv");
  const fromMs = dateOption(options.from, "from") ?? 0;
  const toDayMs = dateOption(options.to, "to");
  const toMs = toDayMs === undefined ? Number.POSITIVE_INFINITY : toDayMs + dayMs;
  if (toMs <= fromMs) throw new CliUsageError("--from must not be after --to");
  const workspace = await workspaceOption(dataDir, options.workspace);
  const outputPath = typeof options.output === "string" ? resolve(io.workingDirectory, options.output) : undefined;
  if (outputPath === undefined && io.dataOutput === undefined) throw new CliUsageError("--output FILE is needed here");

  let snapshotDir: string | undefined;
  const temporaryOutput = outputPath === undefined ? undefined : `${outputPath}.tmp-${randomBytes(4).toString("hex")}`;
  let count = 0;
  try {
    const { directory, summary: snapshot } = linkSnapshot(dataDir, workspace.workspaceId);
    snapshotDir = directory;
    io.writeDiagnostic(`eventide: exporting workspace ${workspace.name} from ${dataDir} (${snapshot.segments} segments, ${snapshot.walFiles} log files)\n`);
    const output: Writable = temporaryOutput === undefined ? io.dataOutput! : createWriteStream(temporaryOutput, { mode: 0o600 });
    let piece = format === "csv" ? csvHeader : "";
    for (const event of readWorkspaceEvents(snapshotDir, workspace.workspaceId, fromMs, toMs)) {
      piece += formatEvent(event, format);
      count++;
      if (piece.length >= outputPieceBytes) {
        await writePiece(output, piece);
        piece = "";
      }
    }
    if (piece.length > 0) await writePiece(output, piece);
    if (temporaryOutput === undefined) {
      io.writeDiagnostic(`${JSON.stringify({ exported: count, workspaceId: workspace.workspaceId, format })}\n`);
      return new CliExit(0);
    }
    await new Promise<void>((resolveClose, reject) => output.end((error?: Error | null) => (error ? reject(error) : resolveClose())));
    renameSync(temporaryOutput, outputPath!);
    return { exported: count, workspaceId: workspace.workspaceId, format, file: outputPath };
  } catch (error) {
    if (error instanceof CliUsageError) throw error;
    if ((error as NodeJS.ErrnoException).code === "EPIPE") return new CliExit(1);
    throw error instanceof CliCommandError ? error : new CliCommandError(`export failed after ${count} events: ${(error as Error).message}`);
  } finally {
    if (snapshotDir !== undefined) removeSnapshot(snapshotDir);
    if (temporaryOutput !== undefined && existsSync(temporaryOutput)) rmSync(temporaryOutput, { force: true });
  }
}
