/**
 * The `eventide` command's help, in plain text for people: `eventide --help`
 * lists every command, `eventide help COMMAND` (or `COMMAND --help`) one.
 * Built from the command table, so a new command documents itself.
 */
import { globalOptions, type CliOption } from "./arguments.js";

/** What help needs of a command; cli.ts's CliCommand extends it. */
export interface HelpEntry {
  /** The words that select the command, e.g. ["workspace", "create"]. */
  words: readonly string[];
  /** Names of the operands, shown in usage; the command takes exactly this many unless `variadic`. */
  operands: readonly string[];
  /** When true, the arguments after the words are passed as they are, options included (for commands with their own options). */
  variadic?: boolean;
  summary: string;
  /** More for `eventide help COMMAND`. */
  description?: string;
  /** Options of this command besides the global ones. */
  options?: readonly CliOption[];
}

const environmentVariables: ReadonlyArray<readonly [string, string]> = [
  ["EVENTIDE_DATA_DIR", "the data directory (default ./data, resolved against the working directory)"],
  ["EVENTIDE_HOST", "serve: the listen address (default 127.0.0.1)"],
  ["EVENTIDE_QUERY_PORT", "serve: the query API's port (default 8080)"],
  ["EVENTIDE_INGEST_PORT", "serve: the ingest API's port (default 8081); import sends to it"],
  ["EVENTIDE_INGEST_URL", "import: a running server's ingest URL (default http://EVENTIDE_HOST:EVENTIDE_INGEST_PORT)"],
  ["EVENTIDE_WORKERS", "serve: worker threads (default: CPU cores)"],
  ["EVENTIDE_LOG_LEVEL", "serve: log level (default info)"],
];

export function commandSynopsis(command: HelpEntry): string {
  const options = (command.options?.length ?? 0) > 0 ? " [OPTIONS]" : "";
  const variadic = command.variadic ? " [ARGUMENT…]" : "";
  return ["eventide", ...command.words, ...command.operands].join(" ") + options + variadic;
}

function optionLines(options: readonly CliOption[]): string[] {
  const labels = options.map((option) => `--${option.name}${option.value ? ` ${option.value}` : ""}`);
  const width = Math.max(...labels.map((label) => label.length));
  return options.map((option, index) => `  ${labels[index].padEnd(width)}  ${option.summary}`);
}

function environmentLines(): string[] {
  const width = Math.max(...environmentVariables.map(([name]) => name.length));
  return environmentVariables.map(([name, summary]) => `  ${name.padEnd(width)}  ${summary}`);
}

export function overallHelp(commands: readonly HelpEntry[], version: string): string {
  const synopses = commands.map(commandSynopsis);
  const width = Math.max(...synopses.map((synopsis) => synopsis.length));
  return [
    `eventide ${version}: self-hosted product analytics`,
    "",
    "Usage: eventide [--data-dir DIR] COMMAND [OPERANDS] [OPTIONS]",
    "",
    "Commands:",
    ...commands.map((command, index) => `  ${synopses[index].padEnd(width)}  ${command.summary}`),
    "",
    "Options of every command:",
    ...optionLines([...globalOptions, { name: "version", summary: "print the version" }]),
    "",
    "Environment:",
    ...environmentLines(),
    "",
    "Every command but serve, export (to stdout) and help prints one JSON line on stdout;",
    "errors are {\"error\":\"…\"} with exit status 1. Notes go to stderr.",
    "`eventide help COMMAND` shows one command's options.",
    "",
  ].join("\n");
}

export function commandHelp(command: HelpEntry): string {
  return [
    `Usage: ${commandSynopsis(command)}`,
    "",
    command.summary,
    ...(command.description ? ["", command.description] : []),
    "",
    "Options:",
    ...optionLines([...(command.options ?? []), ...globalOptions]),
    "",
    "Environment:",
    ...environmentLines(),
    "",
  ].join("\n");
}
