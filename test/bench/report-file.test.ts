/**
 * Dated bench reports: one file per bench and day under bench/reports/, with
 * the machine and the command on top; the micro-benchmarks, one process per
 * script, each own a section of the day's file that a rerun replaces.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { machineInfo } from "../../bench/runner/machine.js";
import { writeDatedReport, writeDatedReportSection, type DatedReport } from "../../bench/runner/report-file.js";

describe("dated bench reports", () => {
  const root = mkdtempSync(join(tmpdir(), "eventide-report-file-"));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  const report = (bench: string, body: string): DatedReport => ({
    repositoryRoot: root,
    bench,
    startedAt: new Date(Date.UTC(2026, 10, 27, 12, 34)),
    machine: machineInfo(root),
    command: `npm run bench:${bench} -- --events 1000`,
    body,
  });

  it("writes bench/reports/<day>-<bench>.md with the machine, the commit and the command above the body", () => {
    const path = writeDatedReport(report("query", "| query | ms |\n| --- | ---: |\n| trend | 1.5 |"));
    expect(path).toBe(join(root, "bench", "reports", "2026-11-27-query.md"));
    const text = readFileSync(path, "utf8");
    expect(text.split("\n")[0]).toBe("# Eventide query bench — 2026-11-27 12:34 UTC");
    expect(text).toContain(`- **Machine:** ${machineInfo(root).cpuModel}, ${machineInfo(root).cores} cores`);
    expect(text).toContain("Node " + process.version);
    expect(text).toContain("- **Command:** `npm run bench:query -- --events 1000`");
    expect(text.trimEnd().endsWith("| trend | 1.5 |")).toBe(true);
  });

  it("replaces a micro-benchmark's own section on a rerun and keeps the others in order", () => {
    writeDatedReportSection(report("micro", "## wal: first run"), "wal");
    writeDatedReportSection(report("micro", "## codec: only run"), "codec");
    const path = writeDatedReportSection(report("micro", "## wal: second run"), "wal");
    const text = readFileSync(path, "utf8");
    expect(text).not.toContain("first run");
    expect(text.indexOf("## wal: second run")).toBeGreaterThan(0);
    expect(text.indexOf("## wal: second run")).toBeLessThan(text.indexOf("## codec: only run"));
    expect(text.match(/^# Eventide micro bench/gm)).toHaveLength(1);
  });
});
