/**
 * Dated bench reports: bench/reports/<YYYY-MM-DD>-<bench>.md, a few kilobytes
 * of Markdown that say what ran, on which machine and commit, and what it
 * measured — small enough to commit beside the change they judge. A second
 * run of the same bench on the same day replaces the first (for the
 * micro-benchmarks, its own section of the day's file); the full JSON results
 * stay in the ignored bench/results/.
 *
 * Estimate: one small file write per run.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { machineLine, type MachineInfo } from "./machine.js";

export interface DatedReport {
  repositoryRoot: string;
  /** Short name used in the file name: ingest, query, micro, suite. */
  bench: string;
  /** The commit of a `--server-root` checkout: its figures go to a file of their own, beside this checkout's. */
  serverCommit?: string;
  startedAt: Date;
  machine: MachineInfo;
  /** How the bench was invoked, so a reader can run it again. */
  command: string;
  /** The bench's own Markdown: tables and notes, without a title. */
  body: string;
}

export function reportsDirectory(repositoryRoot: string): string {
  return join(repositoryRoot, "bench", "reports");
}

function reportPath(report: DatedReport): string {
  const directory = reportsDirectory(report.repositoryRoot);
  mkdirSync(directory, { recursive: true });
  const variant = report.serverCommit === undefined ? "" : `-server-${report.serverCommit.slice(0, 12)}`;
  return join(directory, `${report.startedAt.toISOString().slice(0, 10)}-${report.bench}${variant}.md`);
}

function header(report: DatedReport): string {
  return [
    `# Eventide ${report.bench} bench — ${report.startedAt.toISOString().slice(0, 16).replace("T", " ")} UTC`,
    "",
    `- **Machine:** ${machineLine(report.machine)}`,
    `- **Load average at start:** ${report.machine.loadAverageAtStart.join(" / ")} (1, 5, 15 min) on ${report.machine.cores} cores`,
    `- **Command:** \`${report.command}\``,
    "",
  ].join("\n");
}

/** Writes the report and returns its path. */
export function writeDatedReport(report: DatedReport): string {
  const path = reportPath(report);
  writeFileSync(path, `${header(report)}\n${report.body.trimEnd()}\n`);
  return path;
}

const sectionMark = (key: string) => `<!-- section ${key} -->`;

/**
 * One section of a report several processes share (each micro-benchmark runs
 * as its own process): the section named `key` is replaced if the day's file
 * has it, else appended; the header says who wrote last.
 */
export function writeDatedReportSection(report: DatedReport, key: string): string {
  const path = reportPath(report);
  const sections = new Map<string, string>();
  if (existsSync(path)) {
    for (const part of readFileSync(path, "utf8").split(/^(?=<!-- section )/m).slice(1)) {
      const match = /^<!-- section (.+?) -->\n/.exec(part);
      if (match !== null) sections.set(match[1], part.slice(match[0].length).trimEnd());
    }
  }
  sections.set(key, report.body.trimEnd());
  const body = [...sections].map(([name, text]) => `${sectionMark(name)}\n${text}\n`).join("\n");
  writeFileSync(path, `${header(report)}\n${body}`);
  return path;
}
