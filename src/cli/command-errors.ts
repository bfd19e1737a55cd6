/**
 * How a command ends other than by returning its JSON value: the dispatcher
 * (cli.ts) prints these as `{"error":"…"}` lines, or, for CliExit, nothing.
 */

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

/** Returned by a command that printed its own output (serve, export to stdout): exit with `code`, print no JSON line. */
export class CliExit {
  constructor(readonly code: number) {}
}
