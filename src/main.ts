/**
 * The entry point: loads the process (serve.ts) and turns any failure to
 * start into one JSON log line and exit code 1. Settings are read and checked
 * when their modules load (limits.ts asserts its relations at import), so the
 * process is imported here, inside the catch, rather than statically.
 */
import { errorMessage, log, logLevelFromEnvironment } from "./log.js";

function fail(msg: string, error: unknown): never {
  log.fatal({ err: errorMessage(error) }, msg);
  process.exit(1);
}

if (logLevelFromEnvironment() === undefined) {
  fail("invalid configuration", new Error(`EVENTIDE_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got ${JSON.stringify(process.env.EVENTIDE_LOG_LEVEL)}`));
}
let serve: () => Promise<void>;
try {
  ({ serve } = await import("./serve.js"));
} catch (error) {
  fail("invalid configuration", error);
}
await serve().catch((error: unknown) => fail("failed to start", error));
