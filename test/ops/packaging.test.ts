/**
 * Packaging without a container engine: the Dockerfile's own build commands
 * run in a clean copy of what it COPYs, its runtime stage is assembled from
 * what it copies out of the build, the server starts there with the image's
 * environment and command, and the HEALTHCHECK command passes against it (and
 * fails when nothing listens). The systemd unit is checked by
 * `systemd-analyze verify` where that command exists.
 *
 * The install (`npm ci` of every dependency, a native build) takes minutes on a
 * loaded machine, so it runs when EVENTIDE_PACKAGING_INSTALL=1; otherwise the
 * runtime stage gets this checkout's node_modules and dist, and says so.
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, describe, expect, it } from "vitest";
import { repoRoot } from "../helpers/server.js";

interface Stage {
  name: string;
  copies: Array<{ from?: string; source: string; target: string }>;
  runs: string[];
  env: Record<string, string>;
  healthcheck?: string[];
  cmd?: string[];
  user?: string;
}

/** The few Dockerfile instructions this file uses, continuation lines joined. */
function parseDockerfile(text: string): Stage[] {
  const lines = text.replace(/\\\n\s*/g, " ").split("\n").map((line) => line.trim()).filter((line) => line !== "" && !line.startsWith("#"));
  const stages: Stage[] = [];
  for (const line of lines) {
    const [instruction, ...restWords] = line.split(/\s+/);
    const rest = line.slice(instruction.length).trim();
    const stage = stages.at(-1)!;
    switch (instruction.toUpperCase()) {
      case "FROM":
        stages.push({ name: /\bAS\s+(\S+)/i.exec(rest)?.[1] ?? String(stages.length), copies: [], runs: [], env: {} });
        break;
      case "COPY": {
        const from = restWords.find((word) => word.startsWith("--from="))?.slice("--from=".length);
        const paths = restWords.filter((word) => !word.startsWith("--"));
        const target = paths.pop()!;
        for (const source of paths) stage.copies.push({ from, source, target: paths.length > 1 || target.endsWith("/") ? join(target, source) : target });
        break;
      }
      case "RUN":
        stage.runs.push(rest);
        break;
      case "ENV":
        for (const match of rest.matchAll(/(\w+)=(\S+)/g)) stage.env[match[1]] = match[2];
        break;
      case "USER":
        stage.user = rest;
        break;
      case "HEALTHCHECK":
        stage.healthcheck = JSON.parse(rest.slice(rest.indexOf("CMD") + 3).trim());
        break;
      case "CMD":
        stage.cmd = JSON.parse(rest);
        break;
    }
  }
  return stages;
}

const temporary: string[] = [];
afterAll(() => temporary.forEach((path) => rmSync(path, { recursive: true, force: true })));
function temporaryDirectory(label: string): string {
  const path = mkdtempSync(join(tmpdir(), `eventide-${label}-`));
  temporary.push(path);
  return path;
}

/** `/app/x` → `root/x`; relative paths are under /app (the WORKDIR). */
function under(root: string, imagePath: string): string {
  return join(root, imagePath.replace(/^\/app\/?/, "").replace(/^\.\/?/, ""));
}

function runHealthcheck(command: string[], env: Record<string, string>): number {
  expect(command[0]).toBe("node");
  return spawnSync(process.execPath, command.slice(1), { env: { ...process.env, ...env }, timeout: 30_000 }).status ?? -1;
}

describe("the Dockerfile", () => {
  const stages = parseDockerfile(readFileSync(join(repoRoot, "Dockerfile"), "utf8"));
  const [build, runtime] = stages;

  it("builds in two stages, runs as a non-root user with data on /data and listens on every address", () => {
    expect(stages.map((stage) => stage.name)).toEqual(["build", "runtime"]);
    expect(runtime.user).toBe("node");
    expect(runtime.env).toMatchObject({ EVENTIDE_DATA_DIR: "/data", EVENTIDE_HOST: "0.0.0.0" });
    expect(runtime.runs.join(" ")).not.toMatch(/npm (ci|install)/);
    expect(runtime.healthcheck?.join(" ")).toContain("/ready");
    // Every source the build copies exists, and .dockerignore keeps local builds out.
    for (const copy of build.copies) expect(existsSync(join(repoRoot, copy.source)), copy.source).toBe(true);
    const ignored = readFileSync(join(repoRoot, ".dockerignore"), "utf8").split("\n");
    expect(ignored).toEqual(expect.arrayContaining(["node_modules", "dist", "data"]));
  });

  it("runs its own install and start commands, and its HEALTHCHECK passes against the started server", async () => {
    const buildRoot = temporaryDirectory("docker-build");
    for (const copy of build.copies) cpSync(join(repoRoot, copy.source), under(buildRoot, copy.target), { recursive: true });
    const install = process.env.EVENTIDE_PACKAGING_INSTALL === "1";
    for (const command of build.runs) {
      if (!command.startsWith("npm ")) continue; // apt-get needs root and the network of an image build
      if (install) execFileSync("sh", ["-c", command], { cwd: buildRoot, stdio: "inherit", timeout: 15 * 60_000 });
    }
    if (!install) {
      console.warn("packaging test: EVENTIDE_PACKAGING_INSTALL is not 1, so the build stage's npm commands were not run; this checkout's node_modules and dist stand in for their output");
      symlinkSync(join(repoRoot, "node_modules"), join(buildRoot, "node_modules"));
      cpSync(join(repoRoot, "dist"), join(buildRoot, "dist"), { recursive: true });
    }

    const appRoot = temporaryDirectory("docker-runtime");
    for (const copy of runtime.copies) {
      expect(copy.from).toBe("build");
      const target = under(appRoot, copy.target);
      cpSync(under(buildRoot, copy.source), target, { recursive: true, dereference: false });
    }
    if (install) expect(existsSync(join(appRoot, "node_modules", "typescript")), "dev dependencies pruned").toBe(false);
    const dataDir = temporaryDirectory("docker-data");
    const env = { ...runtime.env, EVENTIDE_DATA_DIR: dataDir, EVENTIDE_HOST: "127.0.0.1", EVENTIDE_QUERY_PORT: "0", EVENTIDE_INGEST_PORT: "0", EVENTIDE_WORKERS: "1" };
    const [program, ...args] = runtime.cmd!;
    expect(program).toBe("node");
    const child = spawn(process.execPath, args, { cwd: appRoot, env: { PATH: process.env.PATH!, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr!.on("data", (chunk) => (stderr += chunk));
    try {
      const queryUrl = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).on("line", (line) => {
          const parsed = JSON.parse(line);
          if (parsed.event === "listening") resolve(parsed.queryUrl);
        });
        child.once("exit", (code) => reject(new Error(`exited with ${code}: ${stderr}`)));
        // A start that neither listens nor exits fails here rather than holding the suite.
        setTimeout(() => reject(new Error(`did not listen within 60 s: ${stderr}`)), 60_000).unref();
      });
      const port = new URL(queryUrl).port;
      expect(runHealthcheck(runtime.healthcheck!, { EVENTIDE_QUERY_PORT: port })).toBe(0);
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        await exited;
      }
    }
    // Nothing listens there any more: the same check now fails.
    const closedPort = await new Promise<string>((resolve) => {
      const probe = spawnSync(process.execPath, ["-e", "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})"], { encoding: "utf8" });
      resolve(probe.stdout.trim());
    });
    expect(runHealthcheck(runtime.healthcheck!, { EVENTIDE_QUERY_PORT: closedPort })).toBe(1);
  }, 20 * 60_000);
});

describe("the systemd unit", () => {
  it("passes systemd-analyze verify", (context) => {
    const which = spawnSync("sh", ["-c", "command -v systemd-analyze"], { encoding: "utf8" });
    if (which.status !== 0) {
      console.warn("packaging test: systemd-analyze is not installed; deploy/eventide.service was not verified");
      context.skip();
    }
    const unit = readFileSync(join(repoRoot, "deploy", "eventide.service"), "utf8");
    expect(unit).toMatch(/^ExecStart=\/usr\/bin\/node .*dist\/src\/main\.js$/m);
    // verify checks that ExecStart's program exists: point it at this machine's node.
    const directory = temporaryDirectory("unit");
    const path = join(directory, "eventide.service");
    writeFileSync(path, unit.replace("ExecStart=/usr/bin/node", `ExecStart=${process.execPath}`));
    const verify = spawnSync("systemd-analyze", ["verify", path], { encoding: "utf8" });
    expect(verify.status, verify.stderr).toBe(0);
    expect(verify.stderr.split("\n").filter((line) => line.includes(dirname(path)) || line.includes("eventide.service"))).toEqual([]);
  });
});
