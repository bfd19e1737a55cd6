#!/usr/bin/env node
// The `eventide` command. Plain JavaScript so that `npx eventide` needs no
// TypeScript loader: the command itself is src/cli.ts, compiled to dist/ by
// `npm install` (the `prepare` script) or `npm run build`.
let cli;
try {
  cli = await import("../dist/src/cli.js");
} catch (error) {
  // Only the missing build itself; a missing dependency of a built cli.js keeps its own error.
  if (error?.code !== "ERR_MODULE_NOT_FOUND" || !String(error.message).includes("dist/src/cli.js")) throw error;
}
if (cli === undefined) {
  // Keep the one-JSON-line contract even before the first build.
  process.stdout.write(`${JSON.stringify({ error: "eventide is not built: run `npm install` or `npm run build` first" })}\n`);
  process.exitCode = 1;
} else {
  process.exitCode = await cli.runCli(process.argv.slice(2), cli.processIo());
}
