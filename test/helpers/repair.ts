/**
 * `eventide repair` as an operator runs it (node bin/eventide.js repair) on a
 * stopped server's data directory: the one JSON line it prints on stdout,
 * parsed, and the JSON lines of its steps on stderr.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { repoRoot } from "./server.js";

export interface RepairResult {
  code: number | null;
  output: { repaired?: boolean; quarantine?: string | null; actions?: Array<Record<string, unknown>> } | undefined;
  stderr: string;
}

/** `eventide repair` as an operator runs it, on `dataDir`. */
export function runRepair(dataDir: string): Promise<RepairResult> {
  return new Promise((resolve) => {
    execFile(process.execPath, [join(repoRoot, "bin", "eventide.js"), "repair"], { cwd: repoRoot, env: { ...process.env, EVENTIDE_DATA_DIR: dataDir }, timeout: 60_000 }, (error, stdout, stderr) => {
      let output: RepairResult["output"];
      try {
        output = JSON.parse(stdout);
      } catch {
        output = undefined;
      }
      resolve({ code: error ? (typeof error.code === "number" ? error.code : null) : 0, output, stderr });
    });
  });
}
