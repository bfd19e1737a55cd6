/**
 * The V8 flags of the server (src/config/node-flags.ts) are written twice: in
 * that module, which the tests and benchmarks spawn the server with, and in
 * package.json's `start` script, which users run. They must stay the same.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { serverNodeFlags } from "../src/config/node-flags.js";
import { repoRoot } from "./helpers/server.js";

describe("server V8 flags", () => {
  it("are the ones npm start passes", () => {
    const manifest = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { scripts: Record<string, string> };
    expect(manifest.scripts.start).toBe(["node", ...serverNodeFlags, "dist/src/main.js"].join(" "));
  });

  it("are accepted by this node", () => {
    const run = spawnSync(process.execPath, [...serverNodeFlags, "-e", ""], { encoding: "utf8" });
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
  });
});
