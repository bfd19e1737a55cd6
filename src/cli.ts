/**
 * The `eventide` command (bin/eventide.js is its shim): manages workspaces and
 * credentials in the registry of `EVENTIDE_DATA_DIR` (SPEC §0), safely while the
 * server runs, since the registry serializes writers with its lock and the
 * server polls the file.
 *
 * Every command prints exactly one JSON line on stdout, errors included
 * (`{"error":"…"}`, exit 1), so scripts parse one stream. Commands live in one
 * table: a new one is one more entry. The benchmark suite is not shipped in
 * the command: `npm run bench` is its own entry point.
 */
import { existsSync } from "node:fs";
import { resolve } from "node:path";

import { isRegistryError } from "./auth/registry-error.js";
import { holdLockFile } from "./storage/lock-file.js";
import { createApiKey, createToken, createWorkspace, listWorkspaces, revokeApiKey, revokeToken } from "./auth/registry.js";
import { serverLockPath } from "./storage/paths.js";

export interface CliIo {
  /** Receives one output line, without its newline. */
  writeLine(line: string): void;
  /** Unexpected failures get a stack trace here; the JSON error line still goes to writeLine. */
  writeDiagnostic(text: string): void;
  environment: Readonly<Record<string, string | undefined>>;
  workingDirectory: string;
}

export interface CliContext {
  io: CliIo;
  /** Absolute store root: `EVENTIDE_DATA_DIR` (default ./data) resolved against the working directory, as the server does. */
  dataDir: string;
}

export interface CliCommand {
  /** The words that select the command, e.g. ["workspace", "create"]. */
  words: readonly string[];
  /** Names of the operands, shown in usage; the command takes exactly this many unless `variadic`. */
  operands: readonly string[];
  /** When true, any number of operands at or beyond `operands.length` is accepted (for commands with their own options). */
  variadic?: boolean;
  summary: string;
  /** Returns the value printed as the command's JSON line. */
  run(operands: readonly string[], context: CliContext): Promise<unknown>;
}

/** Thrown by a command for a malformed invocation: printed as an error with the usage text. */
export class CliUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CliUsageError";
  }
}

/** Thrown by a command for an expected failure (a missing file, say): printed as an error, without a stack trace. */
export class CliCommandError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CliCommandError";
  }
}

export const cliCommands: CliCommand[] = [
  {
    words: ["workspace", "create"],
    operands: ["NAME"],
    summary: "create a workspace with one API key and one token",
    run: ([name], { dataDir }) => createWorkspace(dataDir, name),
  },
  {
    words: ["workspace", "list"],
    operands: [],
    summary: "list workspaces",
    run: (_operands, { dataDir }) => listWorkspaces(dataDir),
  },
  {
    words: ["key", "create"],
    operands: ["WORKSPACE"],
    summary: "add an ingest API key to a workspace (id or name)",
    run: ([workspace], { dataDir }) => createApiKey(dataDir, workspace),
  },
  {
    words: ["key", "revoke"],
    operands: ["KEY"],
    summary: "revoke an ingest API key",
    run: ([apiKey], { dataDir }) => revokeApiKey(dataDir, apiKey),
  },
  {
    words: ["token", "create"],
    operands: ["WORKSPACE"],
    summary: "add an access token to a workspace (id or name)",
    run: ([workspace], { dataDir }) => createToken(dataDir, workspace),
  },
  {
    words: ["token", "revoke"],
    operands: ["TOKEN"],
    summary: "revoke an access token",
    run: ([token], { dataDir }) => revokeToken(dataDir, token),
  },
  {
    words: ["repair"],
    operands: [],
    summary: "with the server stopped: move damaged store files aside (into damaged-<time>/), keep every intact record; one JSON line per step on stderr",
    run: (_operands, { dataDir, io }) => runRepair(dataDir, io),
  },

];

/** A live server holds its lock for its whole life: waiting longer than this for it would only delay the refusal. */
const repairLockWaitMs = 1_000;

/**
 * `eventide repair` holds the server's lock: repairing files a running server
 * writes would race it. The storage modules (roaring among them) are loaded
 * only when asked for, so other commands start fast.
 */
async function runRepair(dataDir: string, io: CliIo): Promise<unknown> {
  if (!existsSync(dataDir)) throw new CliCommandError(`no data directory at ${dataDir}`);
  const { repairStore } = await import("./storage/repair.js");
  const lockPath = serverLockPath(dataDir);
  const release = await holdLockFile(lockPath, repairLockWaitMs, (holder) => new CliCommandError(`the data directory ${dataDir} is in use by ${holder}; stop the server first`));
  try {
    const report = repairStore(dataDir, (entry) => io.writeDiagnostic(`${JSON.stringify({ level: "warn", time: new Date().toISOString(), msg: "repair", ...entry })}\n`));
    return { repaired: true, quarantine: report.quarantine ?? null, actions: report.actions };
  } finally {
    await release();
  }
}

export function commandUsage(command: CliCommand): string {
  const variadic = command.variadic ? " [ARGUMENT…]" : "";
  return ["eventide", ...command.words, ...command.operands].join(" ") + variadic;
}

function overallUsage(commands: readonly CliCommand[]): string {
  return `usage: ${commands.map(commandUsage).join(" | ")}`;
}

const helpWords = new Set(["help", "--help", "-h"]);

/** The longest command whose words begin argv, so `bench` and `bench run` could coexist. */
function matchCommand(argv: readonly string[], commands: readonly CliCommand[]): CliCommand | undefined {
  let best: CliCommand | undefined;
  for (const command of commands) {
    const matches = command.words.every((word, index) => argv[index] === word);
    if (matches && (best === undefined || command.words.length > best.words.length)) best = command;
  }
  return best;
}

/**
 * Runs one command and returns the exit code; never throws. Operands are taken
 * literally (a workspace may be named `--x`); only a first argument of
 * help/--help/-h asks for help.
 */
export async function runCli(argv: readonly string[], io: CliIo, commands: readonly CliCommand[] = cliCommands): Promise<number> {
  const printError = (message: string): number => {
    io.writeLine(JSON.stringify({ error: message }));
    return 1;
  };

  if (argv.length > 0 && helpWords.has(argv[0])) {
    io.writeLine(JSON.stringify({ usage: commands.map((command) => ({ command: commandUsage(command), summary: command.summary })) }));
    return 0;
  }
  const command = matchCommand(argv, commands);
  if (command === undefined) {
    const unknown = argv.length === 0 ? "no command given" : `unknown command ${JSON.stringify(argv.join(" "))}`;
    return printError(`${unknown}; ${overallUsage(commands)}`);
  }
  const operands = argv.slice(command.words.length);
  const arityMatches = command.variadic ? operands.length >= command.operands.length : operands.length === command.operands.length;
  if (!arityMatches) return printError(`usage: ${commandUsage(command)}`);

  const dataDir = resolve(io.workingDirectory, io.environment.EVENTIDE_DATA_DIR || "./data");
  try {
    const result = await command.run(operands, { io, dataDir });
    io.writeLine(JSON.stringify(result));
    return 0;
  } catch (error) {
    if (error instanceof CliUsageError) return printError(`${error.message}; usage: ${commandUsage(command)}`);
    if (isRegistryError(error) || error instanceof CliCommandError) return printError(error.message);
    // Unexpected (a full disk, a permission problem): still one JSON line, with the details on stderr.
    io.writeDiagnostic(`${(error as Error)?.stack ?? String(error)}\n`);
    return printError((error as Error)?.message ?? String(error));
  }
}

/** The real process's streams and environment, for bin/eventide.js. */
export function processIo(): CliIo {
  return {
    writeLine: (line) => {
      process.stdout.write(`${line}\n`);
    },
    writeDiagnostic: (text) => {
      process.stderr.write(text);
    },
    environment: process.env,
    workingDirectory: process.cwd(),
  };
}
