/**
 * Runs `node bin/eventide.js` as users do (the compiled dist/), without
 * EVENTIDE_DATA_DIR unless given, and parses its one stdout JSON line.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";

import { repoRoot } from "./server.js";

export const binScript = join(repoRoot, "bin", "eventide.js");

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The stdout parsed as one JSON value; undefined when it is not. */
  output: any;
}

export function runEventide(args: string[], options: { dataDir?: string; cwd?: string; env?: Record<string, string> } = {}): Promise<CliResult> {
  const env: NodeJS.ProcessEnv = { ...process.env, EVENTIDE_WORKER_NICE: "0", EVENTIDE_WORKERS: "2", ...options.env };
  delete env.EVENTIDE_DATA_DIR;
  if (options.dataDir !== undefined) env.EVENTIDE_DATA_DIR = options.dataDir;
  return new Promise((resolve) => {
    execFile(process.execPath, [binScript, ...args], { cwd: options.cwd ?? repoRoot, env, timeout: 120_000, maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : null) : 0;
      let output: unknown;
      try {
        output = JSON.parse(stdout);
      } catch {
        output = undefined;
      }
      resolve({ code, stdout, stderr, output });
    });
  });
}

/** Exit 0 and one JSON line; returns it. */
export function succeeded(result: CliResult): any {
  if (result.code !== 0 || result.output === undefined || result.stdout.slice(0, -1).includes("\n")) {
    throw new Error(`eventide failed (${result.code}): ${result.stdout} ${result.stderr}`);
  }
  return result.output;
}
