/**
 * What the bench suite knows about the machine it runs on: the hardware and
 * software a reader needs to judge the figures (CPU model, cores, memory, Node,
 * the Eventide commit), and CPU meters over Linux /proc that split one step's
 * CPU time between the server, the load generator, the suite itself and
 * everything else ("others") — on a shared box the last one says how noisy a
 * figure is.
 *
 * Estimate: one meter sample reads /proc/stat and one /proc/<pid>/stat per
 * process (~20 µs each); a step samples twice, a soak once per second.
 */
import { execFileSync } from "node:child_process";
import { lstatSync, readdirSync, readFileSync } from "node:fs";
import { availableParallelism, cpus, loadavg, release, totalmem, type } from "node:os";
import { join, resolve } from "node:path";

export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memoryGiB: number;
  node: string;
  os: string;
  /** `git rev-parse HEAD` of the Eventide checkout the suite belongs to, when it is one. */
  eventideCommit: string | null;
  /** Uncommitted changes to tracked files when the commit was read. */
  eventideDirty: boolean | null;
  eventideVersion: string;
  loadAverageAtStart: number[];
}

export function machineInfo(repositoryRoot: string): MachineInfo {
  let eventideCommit: string | null = null;
  let eventideDirty: boolean | null = null;
  try {
    const git = (args: string[]) => execFileSync("git", ["-C", repositoryRoot, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], timeout: 5_000 }).trim();
    eventideCommit = git(["rev-parse", "HEAD"]);
    eventideDirty = git(["status", "--porcelain", "--untracked-files=no"]) !== "";
  } catch {
    // Not a git checkout (an installed package): the version below still identifies it.
  }
  let eventideVersion = "unknown";
  try {
    eventideVersion = String((JSON.parse(readFileSync(join(repositoryRoot, "package.json"), "utf8")) as { version?: unknown }).version ?? "unknown");
  } catch {
    // Reported as unknown.
  }
  return {
    cpuModel: cpus()[0]?.model.trim() ?? "unknown",
    cores: availableParallelism(),
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    os: `${type()} ${release()}`,
    eventideCommit,
    eventideDirty,
    eventideVersion,
    loadAverageAtStart: loadavg().map((value) => Math.round(value * 100) / 100),
  };
}

/** One line for a report: hardware, Node, OS and the Eventide commit the figures belong to. */
export function machineLine(machine: MachineInfo): string {
  const commit = machine.eventideCommit === null ? `v${machine.eventideVersion}` : `${machine.eventideCommit.slice(0, 12)}${machine.eventideDirty ? " (with uncommitted changes)" : ""}`;
  return `${machine.cpuModel}, ${machine.cores} cores, ${machine.memoryGiB} GiB, Node ${machine.node}, ${machine.os}; Eventide ${commit}`;
}

const clockTicksPerSecond = 100;

/** utime + stime of every thread of a process, in milliseconds; NaN when unreadable (not Linux, or gone). */
export function processCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Fields 14 and 15 of stat; after the ")" the list starts at field 3.
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicksPerSecond;
  } catch {
    return Number.NaN;
  }
}

/** Busy CPU time of the whole machine (all cores), in milliseconds. */
export function machineBusyCpuMs(): number {
  try {
    const fields = readFileSync("/proc/stat", "latin1").split("\n", 1)[0].trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal: busy is everything but idle and iowait.
    const total = fields.slice(0, 8).reduce((sum, value) => sum + value, 0);
    return ((total - fields[3] - fields[4]) * 1000) / clockTicksPerSecond;
  } catch {
    return Number.NaN;
  }
}

/** A field of /proc/<pid>/status in bytes (VmRSS, VmHWM); NaN when unreadable. */
export function processMemoryBytes(pid: number, field: "VmRSS" | "VmHWM"): number {
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "latin1"));
    return match ? Number(match[1]) * 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** CPU use over one interval, each in percent of one core (a 2-core machine has 200 %). */
export interface CpuShare {
  /** The server's threads; NaN when its pid is unknown (an external server without --server-pid). */
  serverPercent: number;
  /** The suite's own process (the driver; DuckDB when it runs). */
  driverPercent: number;
  /** Everything the machine did beyond the server, the suite and the generator (filled in by the caller who knows the generator's share). */
  machinePercent: number;
}

/** Samples CPU counters at start and reads the shares at the end. */
export class CpuMeter {
  private readonly startMs = performance.now();
  private readonly machineStartMs = machineBusyCpuMs();
  private readonly serverStartMs: number[];
  private readonly driverStart = process.cpuUsage();

  constructor(private readonly serverPids: readonly number[]) {
    this.serverStartMs = serverPids.map(processCpuMs);
  }

  read(): CpuShare {
    const elapsedMs = performance.now() - this.startMs;
    const serverMs = this.serverPids.reduce((sum, pid, index) => sum + processCpuMs(pid) - this.serverStartMs[index], 0);
    const driver = process.cpuUsage(this.driverStart);
    return {
      serverPercent: this.serverPids.length === 0 ? Number.NaN : (serverMs / elapsedMs) * 100,
      driverPercent: ((driver.user + driver.system) / 1000 / elapsedMs) * 100,
      machinePercent: ((machineBusyCpuMs() - this.machineStartMs) / elapsedMs) * 100,
    };
  }
}

/**
 * What the rest of the machine used: machine busy time minus everything the
 * suite accounts for. With an unknown server pid the server is in "others".
 */
export function othersPercent(share: CpuShare, generatorPercent: number): number {
  const known = (Number.isFinite(share.serverPercent) ? share.serverPercent : 0) + share.driverPercent + (Number.isFinite(generatorPercent) ? generatorPercent : 0);
  return Math.max(0, share.machinePercent - known);
}

/** What a directory tree weighs: bytes as written (apparent) and as allocated on disk, and its file count. */
export function directoryBytes(root: string): { apparentBytes: number; allocatedBytes: number; files: number } {
  let apparentBytes = 0;
  let allocatedBytes = 0;
  let files = 0;
  const stack = [root];
  while (stack.length > 0) {
    const directory = stack.pop()!;
    for (const entry of readdirSync(directory, { withFileTypes: true })) {
      const path = join(directory, entry.name);
      if (entry.isDirectory()) {
        stack.push(path);
        continue;
      }
      const stats = lstatSync(path);
      apparentBytes += stats.size;
      allocatedBytes += stats.blocks * 512;
      files += 1;
    }
  }
  return { apparentBytes, allocatedBytes, files };
}

/**
 * The command line for a report: a `--server-root` checkout is named by its
 * commit, not by where it sits on this machine.
 */
export function commandLine(prefix: string, serverRoot: string | undefined, serverMachine: MachineInfo): string {
  const commit = serverCommitOf(serverRoot, serverMachine);
  const named = `<checkout at ${commit?.slice(0, 12)}>`;
  const args = process.argv.slice(2).map((arg) => {
    if (serverRoot === undefined) return arg;
    if (arg.startsWith("--server-root=")) return `--server-root=${named}`;
    return resolve(arg) === serverRoot ? named : arg;
  });
  return `${prefix} ${args.join(" ")}`.trimEnd();
}

/** The commit a `--server-root` checkout's figures belong to; undefined when the server is this checkout's. */
export function serverCommitOf(serverRoot: string | undefined, serverMachine: MachineInfo): string | undefined {
  if (serverRoot === undefined) return undefined;
  return serverMachine.eventideCommit ?? `v${serverMachine.eventideVersion}`;
}
