/**
 * The `eventide` command's words, operands and options, read from argv before
 * any command runs (cli.ts dispatches). Options may come before the command
 * (`eventide --data-dir /srv/x workspace list`) or after it; `--` ends them, so
 * a workspace named `--x` is `eventide workspace create -- --x`.
 */

export interface CliOption {
  /** Without the dashes: `data-dir` is `--data-dir`. */
  name: string;
  /** The value's name in help (`DIR`); a flag when absent. */
  value?: string;
  summary: string;
}

/** Options every command takes. */
export const globalOptions: readonly CliOption[] = [
  { name: "data-dir", value: "DIR", summary: "the data directory (overrides EVENTIDE_DATA_DIR; default ./data)" },
  { name: "create", summary: "allow this command to create a data directory that does not exist yet" },
  { name: "help", summary: "show this command's help" },
];

export type OptionValues = Readonly<Record<string, string | true>>;

export class ArgumentError extends Error {}

/**
 * Splits argv into operands and options. `known` lists the options allowed
 * here; a value option takes the next argument or `--name=value`.
 */
export function parseArguments(argv: readonly string[], known: readonly CliOption[]): { operands: string[]; options: OptionValues } {
  const operands: string[] = [];
  const options: Record<string, string | true> = {};
  for (let index = 0; index < argv.length; index++) {
    const argument = argv[index];
    if (argument === "--") {
      operands.push(...argv.slice(index + 1));
      break;
    }
    if (argument === "-h") {
      options.help = true;
      continue;
    }
    if (!argument.startsWith("--") || argument.length === 2) {
      operands.push(argument);
      continue;
    }
    const equals = argument.indexOf("=");
    const name = argument.slice(2, equals < 0 ? undefined : equals);
    const option = known.find((candidate) => candidate.name === name);
    if (option === undefined) throw new ArgumentError(`unknown option --${name}`);
    if (option.value === undefined) {
      if (equals >= 0) throw new ArgumentError(`--${name} takes no value`);
      options[name] = true;
      continue;
    }
    let value: string | undefined;
    if (equals >= 0) value = argument.slice(equals + 1);
    else if (index + 1 < argv.length) value = argv[++index];
    if (value === undefined) throw new ArgumentError(`--${name} needs a value (${option.value})`);
    if (name in options) throw new ArgumentError(`--${name} is given twice`);
    options[name] = value;
  }
  return { operands, options };
}

/** How many leading arguments are global options (with their values), so the command's words start after them. */
export function leadingGlobalOptionCount(argv: readonly string[]): number {
  let index = 0;
  while (index < argv.length) {
    const argument = argv[index];
    if (argument === "-h" || argument === "--help" || argument === "--create") {
      index += 1;
    } else if (argument === "--data-dir") {
      index += 2;
    } else if (argument.startsWith("--data-dir=")) {
      index += 1;
    } else {
      break;
    }
  }
  return Math.min(index, argv.length);
}
