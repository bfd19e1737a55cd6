/**
 * The process log: JSON lines on stderr with `level`, `time` and `msg` (SPEC §8),
 * written synchronously so that the last lines before an exit are never lost.
 * Every layer may log (it sits at the root, beside the error catalog); what is
 * logged never holds a request's body or headers, so no secret can reach it.
 */
import pino from "pino";

/** Pino's own level names; `silent` turns logging off. */
const levels = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
type Level = (typeof levels)[number];

/** EVENTIDE_LOG_LEVEL, or undefined when it names no level (main reports that as a configuration error). */
export function logLevelFromEnvironment(): Level | undefined {
  const raw = (process.env.EVENTIDE_LOG_LEVEL ?? "").trim().toLowerCase();
  if (raw === "") return "info";
  return (levels as readonly string[]).includes(raw) ? (raw as Level) : undefined;
}

export const log = pino(
  {
    level: logLevelFromEnvironment() ?? "info",
    // `level` as its name, not pino's number; no pid/hostname on every line.
    formatters: { level: (label) => ({ level: label }) },
    base: undefined,
    timestamp: pino.stdTimeFunctions.isoTime,
    messageKey: "msg",
  },
  pino.destination({ dest: 2, sync: true }),
);

/** An error's message, for the `err` field of a line: its stack only where a programmer needs it. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
