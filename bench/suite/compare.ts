/**
 * Compare mode: the change of every figure two runs share, matched by key
 * (results.ts), with a verdict that knows which way is better — fewer ms,
 * more events/s — and calls changes inside a threshold noise. Figures only
 * one run has are listed apart, so a changed scenario selection is visible.
 *
 * Estimate: a few hundred figures, a map lookup each.
 */
import { readFileSync } from "node:fs";
import { resultsFormat, type Figure, type SuiteResults } from "./results.js";
import { formatCount, formatMarkdownTable, formatMs, formatTextTable } from "../runner/stats.js";

export interface FigureChange {
  key: string;
  label: string;
  unit: string;
  better: Figure["better"];
  old: number;
  new: number;
  /** (new − old) / old × 100; NaN when old is 0. */
  changePercent: number;
  verdict: "better" | "worse" | "noise";
}

export interface Comparison {
  oldLabel: string;
  newLabel: string;
  thresholdPercent: number;
  changes: FigureChange[];
  onlyOld: Figure[];
  onlyNew: Figure[];
}

export class ResultsFileError extends Error {}

/** Reads a results.json and checks it is one (its format tag and a figures list). */
export function readResultsFile(path: string): SuiteResults {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    throw new ResultsFileError(`cannot read ${path}: ${(error as Error).message}`);
  }
  const candidate = parsed as Partial<SuiteResults>;
  if (candidate?.format !== resultsFormat || !Array.isArray(candidate.figures)) {
    throw new ResultsFileError(`${path} is not a bench suite results file (expected "format": "${resultsFormat}" and a figures list)`);
  }
  return candidate as SuiteResults;
}

export function compareFigures(oldFigures: readonly Figure[], newFigures: readonly Figure[], thresholdPercent: number, labels = { old: "old", new: "new" }): Comparison {
  const oldByKey = new Map(oldFigures.map((figure) => [figure.key, figure]));
  const newKeys = new Set(newFigures.map((figure) => figure.key));
  const changes: FigureChange[] = [];
  const onlyNew: Figure[] = [];
  for (const figure of newFigures) {
    const before = oldByKey.get(figure.key);
    if (before === undefined || typeof before.value !== "number" || typeof figure.value !== "number") {
      onlyNew.push(figure);
      continue;
    }
    const changePercent = before.value === 0 ? Number.NaN : ((figure.value - before.value) / Math.abs(before.value)) * 100;
    const improved = figure.better === "higher" ? figure.value > before.value : figure.value < before.value;
    const verdict = !Number.isFinite(changePercent) ? (figure.value === before.value ? "noise" : improved ? "better" : "worse") : Math.abs(changePercent) < thresholdPercent ? "noise" : improved ? "better" : "worse";
    changes.push({ key: figure.key, label: figure.label, unit: figure.unit, better: figure.better, old: before.value, new: figure.value, changePercent, verdict });
  }
  const onlyOld = oldFigures.filter((figure) => !newKeys.has(figure.key));
  return { oldLabel: labels.old, newLabel: labels.new, thresholdPercent, changes, onlyOld, onlyNew };
}

export function compareResults(oldResults: SuiteResults, newResults: SuiteResults, thresholdPercent: number, labels?: { old: string; new: string }): Comparison {
  return compareFigures(oldResults.figures, newResults.figures, thresholdPercent, labels ?? { old: runLabel(oldResults), new: runLabel(newResults) });
}

function runLabel(results: SuiteResults): string {
  const commit = results.machine.eventideCommit?.slice(0, 8) ?? `v${results.machine.eventideVersion}`;
  return `${results.startedAt.slice(0, 16).replace("T", " ")} (${commit}${results.machine.eventideDirty ? "+" : ""})`;
}

function formatValue(value: number, unit: string): string {
  if (unit === "ms") return `${formatMs(value)} ms`;
  if (unit === "×") return `${value.toFixed(2)}×`;
  if (unit === "%") return `${value.toFixed(1)} %`;
  return `${formatCount(value)} ${unit}`;
}

function formatChange(change: FigureChange): string {
  if (!Number.isFinite(change.changePercent)) return change.verdict === "noise" ? "±0 %" : "n/a";
  return `${change.changePercent >= 0 ? "+" : ""}${change.changePercent.toFixed(1)} %`;
}

const verdictMarks: Record<FigureChange["verdict"], string> = { better: "better", worse: "WORSE", noise: "~" };

function rows(comparison: Comparison): string[][] {
  return comparison.changes.map((change) => [change.label, formatValue(change.old, change.unit), formatValue(change.new, change.unit), formatChange(change), verdictMarks[change.verdict]]);
}

function counts(comparison: Comparison): string {
  const count = (verdict: FigureChange["verdict"]) => comparison.changes.filter((change) => change.verdict === verdict).length;
  return `${comparison.changes.length} figures compared: ${count("better")} better, ${count("worse")} worse, ${count("noise")} within ±${comparison.thresholdPercent} % (noise)`;
}

export function formatComparisonText(comparison: Comparison): string {
  const parts = [`compare: ${comparison.oldLabel} → ${comparison.newLabel}`, counts(comparison)];
  if (comparison.changes.length > 0) parts.push(formatTextTable(["figure", "old", "new", "change", ""], rows(comparison)));
  if (comparison.onlyOld.length > 0) parts.push(`only in the old run: ${comparison.onlyOld.map((figure) => figure.key).join(", ")}`);
  if (comparison.onlyNew.length > 0) parts.push(`only in the new run: ${comparison.onlyNew.map((figure) => figure.key).join(", ")}`);
  return `${parts.join("\n\n")}\n`;
}

export function formatComparisonMarkdown(comparison: Comparison): string {
  const parts = [`# Compare: ${comparison.oldLabel} → ${comparison.newLabel}`, counts(comparison)];
  if (comparison.changes.length > 0) parts.push(formatMarkdownTable(["figure", "old", "new", "change", "verdict"], rows(comparison)));
  if (comparison.onlyOld.length > 0) parts.push(`Only in the old run: ${comparison.onlyOld.map((figure) => `\`${figure.key}\``).join(", ")}`);
  if (comparison.onlyNew.length > 0) parts.push(`Only in the new run: ${comparison.onlyNew.map((figure) => `\`${figure.key}\``).join(", ")}`);
  return `${parts.join("\n\n")}\n`;
}
