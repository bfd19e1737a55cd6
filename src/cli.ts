/**
 * The `eventide` command (bin/eventide.js is its shim): a dispatcher over one
 * table of commands. Workspaces and credentials live in the registry of the
 * data directory (SPEC §0), safely while the server runs, since the registry
 * serializes writers with its lock and the server polls the file; data
 * lifecycle commands (export, import, backup, workspace delete) live in
 * src/lifecycle/, argument reading and help in src/cli/.
 *
 * Every command prints exactly one JSON line on stdout, errors included
 * (`{"error":"…"}`, exit 1), so scripts parse one stream; notes for people go
 * to stderr. The exceptions are for people: `--help` and `--version` print
 * text, `serve` is the server, and `export` without `--output` streams its
 * data to stdout. A command that changes the data directory names it on
 * stderr first, and no command but `serve` and `init` creates a data
 * directory unless `--create` says so: a CLI run from the wrong folder used to
 * make a fresh ./data there and print keys the running server never accepts.
 */
import { existsSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import type { Writable } from "node:stream";

import { isRegistryError } from "./auth/registry-error.js";
import { createApiKey, createToken, createWorkspace, listCredentials, listWorkspaces, revokeApiKey, revokeToken, setWorkspaceRetention } from "./auth/registry.js";
import { parseRetention } from "./config/config.js";
import { ArgumentError, globalOptions, leadingGlobalOptionCount, parseArguments, type CliOption, type OptionValues } from "./cli/arguments.js";
import { CliCommandError, CliExit, CliUsageError } from "./cli/command-errors.js";
import { commandHelp, commandSynopsis, overallHelp, type HelpEntry } from "./cli/help.js";
import { holdLockFile } from "./storage/lock-file.js";
import { serverLockPath } from "./storage/paths.js";

export { CliCommandError, CliExit, CliUsageError } from "./cli/command-errors.js";

export interface CliIo {
  /** Receives one output line, without its newline. */
  writeLine(line: string): void;
  /** Unexpected failures get a stack trace here; the JSON error line still goes to writeLine. Long-running commands (import, export) report progress here too. */
  writeDiagnostic(text: string): void;
  /** Where `export` streams its data when no --output is given (stdout); absent, --output is needed. */
  dataOutput?: Writable;
  /** Receives text for people (help, version) as it is; writeLine is used when absent. */
  writeText?(text: string): void;
  environment: Readonly<Record<string, string | undefined>>;
  workingDirectory: string;
}

export interface CliContext {
  io: CliIo;
  /** Absolute store root: `--data-dir`, else `EVENTIDE_DATA_DIR` (default ./data), resolved against the working directory, as the server does. */
  dataDir: string;
  /** The command's options as given (`--label x` is `{ label: "x" }`, a flag is `true`). */
  options: OptionValues;
}

/**
 * How a command treats the data directory. `existing` (the default): the
 * directory must exist, unless `--create` is given; `any`: the
 * command does not care or creates it itself (serve, init).
 */
export type DataDirUse = "existing" | "any";

/** A command: what help shows of it (HelpEntry), and how it runs. */
export interface CliCommand extends HelpEntry {
  dataDir?: DataDirUse;
  /** Whether it changes the data directory: the directory is then named on stderr first. */
  changes?: boolean;
  /** Returns the value printed as the command's JSON line, or a CliExit to print nothing. */
  run(operands: readonly string[], context: CliContext): Promise<unknown>;
}


const workspaceSelectOption: CliOption = { name: "workspace", value: "WORKSPACE", summary: "the workspace (id or name); optional when there is only one" };
const labelOption: CliOption = { name: "label", value: "TEXT", summary: "a note shown by `key list` / `token list`" };

// Lifecycle commands are imported when run: the store's readers (roaring among them) would slow every credential command's start.
export const cliCommands: CliCommand[] = [
  {
    words: ["workspace", "create"],
    operands: ["NAME"],
    summary: "create a workspace with one API key and one token",
    changes: true,
    run: ([name], { dataDir }) => createWorkspace(dataDir, name),
  },
  {
    words: ["workspace", "list"],
    operands: [],
    summary: "list workspaces",
    run: (_operands, { dataDir }) => listWorkspaces(dataDir),
  },
  {
    words: ["workspace", "delete"],
    operands: ["WORKSPACE"],
    summary: "delete a workspace: its credentials and every event it holds (the server must be stopped)",
    description:
      "Refused while a server runs on the data directory: a running server keeps the workspace's rows in memory and in its\n" +
      "write-ahead log. Stop the server, delete, start it again. Needs --yes.",
    options: [{ name: "yes", summary: "confirm: the events cannot be recovered (except from a backup)" }],
    changes: true,
    run: async ([workspace], context) => (await import("./lifecycle/workspace-delete.js")).deleteWorkspaceCommand(workspace, context),
  },
  {
    words: ["workspace", "retention"],
    operands: ["WORKSPACE", "DAYS"],
    summary: "keep a workspace's events DAYS whole days (older days are dropped, files removed), forever, or default",
    description:
      "DAYS is a whole number of days (at least 1), forever, or default (the server's EVENTIDE_RETENTION_DAYS, itself forever\n" +
      "when unset). A running server applies it within its next retention check (EVENTIDE_RETENTION_CHECK_INTERVAL_MS).",
    changes: true,
    run: ([workspace, days], { dataDir }) => {
      const retention = days === "default" ? "default" : parseRetention(days);
      if (retention === undefined) throw new CliUsageError(`DAYS must be a whole number of days (at least 1), forever or default, got ${JSON.stringify(days)}`);
      return setWorkspaceRetention(dataDir, workspace, typeof retention === "string" ? retention : retention.kind === "forever" ? "forever" : retention.days);
    },
  },
  {
    words: ["key", "create"],
    operands: ["WORKSPACE"],
    summary: "add an ingest API key to a workspace (id or name)",
    options: [labelOption],
    changes: true,
    run: ([workspace], { dataDir, options }) => createApiKey(dataDir, workspace, { label: stringOption(options, "label") }),
  },
  {
    words: ["key", "list"],
    operands: ["WORKSPACE"],
    summary: "list a workspace's API keys by id and label (never the keys themselves)",
    run: ([workspace], { dataDir }) => listCredentials(dataDir, workspace, "apiKey"),
  },
  {
    words: ["key", "revoke"],
    operands: ["KEY"],
    summary: "revoke an ingest API key, given the key or its id (key_…)",
    changes: true,
    run: ([apiKey], { dataDir }) => revokeApiKey(dataDir, apiKey),
  },
  {
    words: ["token", "create"],
    operands: ["WORKSPACE"],
    summary: "add an access token to a workspace (id or name)",
    options: [labelOption],
    changes: true,
    run: ([workspace], { dataDir, options }) => createToken(dataDir, workspace, { label: stringOption(options, "label") }),
  },
  {
    words: ["token", "list"],
    operands: ["WORKSPACE"],
    summary: "list a workspace's access tokens by id and label (never the tokens themselves)",
    run: ([workspace], { dataDir }) => listCredentials(dataDir, workspace, "token"),
  },
  {
    words: ["token", "revoke"],
    operands: ["TOKEN"],
    summary: "revoke an access token, given the token or its id (tok_…)",
    changes: true,
    run: ([token], { dataDir }) => revokeToken(dataDir, token),
  },
  {
    words: ["init"],
    operands: [],
    summary: "create a data directory and its default workspace; prints the workspace's credentials",
    dataDir: "any",
    changes: true,
    run: async (_operands, { dataDir }) => (await import("./cli/server-commands.js")).initDataDirectory(dataDir),
  },
  {
    words: ["serve"],
    operands: [],
    summary: "run the server (as npm start); creates the data directory on first start",
    dataDir: "any",
    run: async (_operands, context) => (await import("./cli/server-commands.js")).serve(context),
  },
  {
    words: ["clickhouse", "init"],
    operands: [],
    summary: "create or upgrade the ClickHouse store's tables (EVENTIDE_STORE=clickhouse://…); the server also does it at start",
    dataDir: "any",
    run: async () => {
      const { storeFromEnvironment } = await import("./config/config.js");
      const settings = storeFromEnvironment();
      if (settings.kind !== "clickhouse") throw new CliUsageError("EVENTIDE_STORE must name a ClickHouse store: clickhouse://HOST:PORT/DATABASE");
      const { initClickHouse } = await import("./clickhouse/store.js");
      const { schemaVersion } = await import("./clickhouse/schema.js");
      const { shardCount } = await initClickHouse(settings);
      return { database: settings.database, cluster: settings.cluster ?? null, shards: shardCount, schemaVersion };
    },
  },
  {
    words: ["export"],
    operands: [],
    summary: "write a workspace's events as NDJSON or CSV (to stdout, or --output FILE)",
    description:
      "Reads a consistent snapshot of the data directory (sealed segments and the write-ahead log), whether or not a server runs.\n" +
      "Each event: event, distinctId, timestamp (ISO 8601, ms, Z), properties, uuid. An event stored without a uuid gets one\n" +
      "derived from its place in the store, so importing the same file twice stores it once.",
    options: [
      workspaceSelectOption,
      { name: "format", value: "FORMAT", summary: "ndjson (default) or csv" },
      { name: "from", value: "DATE", summary: "first day (YYYY-MM-DD, UTC), inclusive" },
      { name: "to", value: "DATE", summary: "last day (YYYY-MM-DD, UTC), inclusive" },
      { name: "output", value: "FILE", summary: "write to FILE (atomically) and print a JSON summary, instead of streaming to stdout" },
    ],
    run: async (_operands, context) => (await import("./lifecycle/export.js")).exportCommand(context),
  },
  {
    words: ["import"],
    operands: ["FILE"],
    summary: "ingest an NDJSON file (the export format) into a workspace, in batches of 1 000",
    description:
      "Sends the events through the ingest API, so every ingest rule holds (validation, limits, uuid dedupe): to the running\n" +
      "server (--ingest-url, EVENTIDE_INGEST_URL, or EVENTIDE_HOST:EVENTIDE_INGEST_PORT), or, when no server holds the data\n" +
      "directory, to a server of its own started for the import. Events with a uuid are stored once however often imported.",
    options: [
      workspaceSelectOption,
      { name: "ingest-url", value: "URL", summary: "the running server's ingest URL" },
    ],
    changes: true,
    run: async ([file], context) => (await import("./lifecycle/import.js")).importCommand(file, context),
  },
  {
    words: ["user", "delete"],
    operands: ["DISTINCT_ID"],
    summary: "delete every event of one user (a privacy request): gone from every answer and from disk when it returns",
    description:
      "Goes through the running server's POST /api/v1/users/delete (--query-url, EVENTIDE_QUERY_URL, or\n" +
      "EVENTIDE_HOST:EVENTIDE_QUERY_PORT), or, when no server holds the data directory, a server of its own. Events of the\n" +
      "user that arrive after the deletion are kept, as new events.",
    options: [
      workspaceSelectOption,
      { name: "query-url", value: "URL", summary: "the running server's query URL" },
    ],
    changes: true,
    run: async ([distinctId], context) => (await import("./lifecycle/user-delete.js")).deleteUserCommand(distinctId, context),
  },
  {
    words: ["backup"],
    operands: ["DIR"],
    summary: "copy the data directory to DIR (new or empty), consistently, while the server runs",
    description:
      "Every event acknowledged before the backup started is in the copy. To restore: stop the server, move the\n" +
      "data directory aside, move DIR into its place, start the server (it replays the copied write-ahead log).",
    run: async ([target], context) => (await import("./lifecycle/backup.js")).backupCommand(target, context),
  },
  {
    words: ["repair"],
    operands: [],
    summary: "with the server stopped: move damaged store files aside (into damaged-<time>/), keep every intact record; one JSON line per step on stderr",
    changes: true,
    run: (_operands, { dataDir, io }) => runRepair(dataDir, io),
  },
];

function stringOption(options: OptionValues, name: string): string | undefined {
  const value = options[name];
  return typeof value === "string" ? value : undefined;
}

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
  const { NewerFormatError } = await import("./storage/format-versions.js");
  const release = await holdLockFile(serverLockPath(dataDir), repairLockWaitMs, (holder) => new CliCommandError(`the data directory ${dataDir} is in use by ${holder}; stop the server first`));
  try {
    const report = repairStore(dataDir, (entry) => io.writeDiagnostic(`${JSON.stringify({ level: "warn", time: new Date().toISOString(), msg: "repair", ...entry })}\n`));
    return { repaired: true, quarantine: report.quarantine ?? null, actions: report.actions };
  } catch (error) {
    if (error instanceof NewerFormatError) throw new CliCommandError(`nothing repaired: ${error.message}`);
    throw error;
  } finally {
    await release();
  }
}

export function commandUsage(command: CliCommand): string {
  return commandSynopsis(command);
}

function overallUsage(): string {
  return "usage: eventide COMMAND …; run `eventide --help` for the commands";
}

/** package.json's version: from dist/src/ when built, from src/ under the tests. */
export function eventideVersion(): string {
  for (const relative of ["../../package.json", "../package.json"]) {
    const path = new URL(relative, import.meta.url);
    if (!existsSync(path)) continue;
    const manifest = JSON.parse(readFileSync(path, "utf8")) as { name?: string; version?: string };
    if (manifest.name === "eventide" && typeof manifest.version === "string") return manifest.version;
  }
  return "unknown";
}

/** The longest command whose words begin argv, so `bench` and `bench run` could coexist. */
function matchCommand(argv: readonly string[], commands: readonly CliCommand[]): CliCommand | undefined {
  let best: CliCommand | undefined;
  for (const command of commands) {
    const matches = command.words.every((word, index) => argv[index] === word);
    if (matches && (best === undefined || command.words.length > best.words.length)) best = command;
  }
  return best;
}

/** Commands whose first words are these (`workspace` → the workspace commands), for help on a partial command. */
function commandsStartingWith(words: readonly string[], commands: readonly CliCommand[]): CliCommand[] {
  return commands.filter((command) => words.every((word, index) => command.words[index] === word));
}

/**
 * Runs one command and returns the exit code; never throws. Options may stand
 * before or after the command's words; `--` ends them.
 */
export async function runCli(argv: readonly string[], io: CliIo, commands: readonly CliCommand[] = cliCommands): Promise<number> {
  const printError = (message: string): number => {
    io.writeLine(JSON.stringify({ error: message }));
    return 1;
  };
  const printText = (text: string): number => {
    if (io.writeText) io.writeText(text);
    else io.writeLine(text.replace(/\n$/, ""));
    return 0;
  };

  const leading = leadingGlobalOptionCount(argv);
  const words = argv.slice(leading);
  if (words[0] === "--version" || words[0] === "-V" || (words[0] === "version" && words.length === 1)) return printText(`eventide ${eventideVersion()}\n`);
  const wantsOverallHelp = words.length === 0 ? argv.some((argument) => argument === "--help" || argument === "-h") : words[0] === "--help" || words[0] === "-h";
  if (wantsOverallHelp || (words[0] === "help" && words.length === 1)) return printText(overallHelp(commands, eventideVersion()));
  if (words[0] === "help") {
    const asked = matchCommand(words.slice(1), commands);
    if (asked !== undefined && asked.words.length === words.length - 1) return printText(commandHelp(asked));
    const family = commandsStartingWith(words.slice(1), commands);
    if (family.length > 0) return printText(family.map(commandHelp).join("\n"));
    return printError(`no command ${JSON.stringify(words.slice(1).join(" "))}; ${overallUsage()}`);
  }

  const command = matchCommand(words, commands);
  if (command === undefined) {
    const family = words.length > 0 ? commandsStartingWith(words, commands) : [];
    if (family.length > 0) return printError(`usage: ${family.map(commandUsage).join(" | ")}`);
    const unknown = words.length === 0 ? "no command given" : `unknown command ${JSON.stringify(words.join(" "))}`;
    return printError(`${unknown}; ${overallUsage()}`);
  }

  let operands: string[];
  let options: OptionValues;
  try {
    const leadingOptions = parseArguments(argv.slice(0, leading), globalOptions).options;
    if (command.variadic) {
      operands = words.slice(command.words.length);
      options = leadingOptions;
    } else {
      const parsed = parseArguments(words.slice(command.words.length), [...globalOptions, ...(command.options ?? [])]);
      for (const name of Object.keys(parsed.options)) if (name in leadingOptions) throw new ArgumentError(`--${name} is given twice`);
      operands = parsed.operands;
      options = { ...leadingOptions, ...parsed.options };
    }
  } catch (error) {
    if (error instanceof ArgumentError) return printError(`${error.message}; usage: ${commandUsage(command)}`);
    throw error;
  }
  if (options.help === true) return printText(commandHelp(command));
  const arityMatches = command.variadic ? operands.length >= command.operands.length : operands.length === command.operands.length;
  if (!arityMatches) return printError(`usage: ${commandUsage(command)}`);

  const dataDirOption = typeof options["data-dir"] === "string" ? options["data-dir"] : undefined;
  if (dataDirOption === "") return printError("--data-dir needs a directory");
  const dataDir = resolve(io.workingDirectory, dataDirOption || io.environment.EVENTIDE_DATA_DIR || "./data");
  // A missing directory, not one without a registry: a fresh clone's data/ (committed empty) is a data directory to be.
  if ((command.dataDir ?? "existing") === "existing" && !existsSync(dataDir)) {
    if (options.create !== true || !command.changes) return printError(missingDataDirectory(dataDir, command));
  }
  try {
    if (command.changes) io.writeDiagnostic(`eventide: data directory ${dataDir}\n`);
    const result = await command.run(operands, { io, dataDir, options });
    if (result instanceof CliExit) return result.code;
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

function missingDataDirectory(dataDir: string, command: CliCommand): string {
  const where = `no data directory ${dataDir} (it does not exist)`;
  const elsewhere = "pass --data-dir DIR or set EVENTIDE_DATA_DIR to use the server's";
  if (!command.changes) return `${where}; ${elsewhere}`;
  return `${where}; ${elsewhere}, run \`eventide init\` to create one there, or add --create`;
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
    dataOutput: process.stdout,
    writeText: (text) => {
      process.stdout.write(text);
    },
    environment: process.env,
    workingDirectory: process.cwd(),
  };
}
