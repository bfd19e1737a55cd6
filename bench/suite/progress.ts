/**
 * The suite's voice on the terminal while it runs: which step runs, step n of
 * N, elapsed against the planned total, and the step's current rate and
 * latency, so a 10-minute run is never silent. On a TTY one status line is
 * redrawn in place; elsewhere (CI logs, a pipe) a status line is printed every
 * `quietSeconds`, and step results always get a line of their own.
 *
 * Estimate: one write per progress sample (once a second), negligible.
 */
import { formatDuration } from "../runner/stats.js";

export interface ProgressSink {
  write(text: string): void;
  isTTY: boolean;
}

export class Progress {
  private readonly startMs = performance.now();
  private stepIndex = 0;
  private stepLabel = "";
  private stepStartMs = 0;
  private stepPlannedSeconds = 0;
  private statusShown = false;
  private lastPrintedMs = 0;
  private plannedRemainingSeconds: number;

  constructor(
    private readonly sink: ProgressSink,
    private readonly stepCount: number,
    plannedTotalSeconds: number,
    private readonly quietSeconds = 10,
  ) {
    this.plannedRemainingSeconds = plannedTotalSeconds;
  }

  get elapsedSeconds(): number {
    return (performance.now() - this.startMs) / 1000;
  }

  /** A line that stays (a heading, a step result, a warning). */
  log(text: string): void {
    this.clearStatus();
    this.sink.write(`${text}\n`);
  }

  startStep(label: string, plannedSeconds: number): void {
    this.stepIndex += 1;
    this.stepLabel = label;
    this.stepStartMs = performance.now();
    this.stepPlannedSeconds = plannedSeconds;
    this.lastPrintedMs = 0;
    this.status("starting");
  }

  /** Ends the step with a result line; the plan shrinks by what the step was planned to take. */
  endStep(result: string): void {
    this.plannedRemainingSeconds = Math.max(0, this.plannedRemainingSeconds - this.stepPlannedSeconds);
    this.log(`  ${this.stepLabel}: ${result}`);
  }

  /** Redraws (TTY) or, now and then, prints the status line with `detail` (the current rate, say). */
  status(detail: string): void {
    const nowMs = performance.now();
    const stepSeconds = (nowMs - this.stepStartMs) / 1000;
    const estimatedTotal = this.elapsedSeconds + Math.max(0, this.plannedRemainingSeconds - Math.min(stepSeconds, this.stepPlannedSeconds));
    const line =
      `[${this.stepIndex}/${this.stepCount} ${formatDuration(this.elapsedSeconds)} of ~${formatDuration(estimatedTotal)}] ` +
      `${this.stepLabel} · ${stepSeconds.toFixed(0)}/${this.stepPlannedSeconds.toFixed(0)} s${detail === "" ? "" : ` · ${detail}`}`;
    if (this.sink.isTTY) {
      const columns = (process.stdout.columns ?? 120) - 1;
      this.sink.write(`\r\u001b[2K${line.length > columns ? `${line.slice(0, columns - 1)}…` : line}`);
      this.statusShown = true;
      return;
    }
    if (this.lastPrintedMs === 0 || nowMs - this.lastPrintedMs >= this.quietSeconds * 1000) {
      this.lastPrintedMs = nowMs;
      this.sink.write(`${line}\n`);
    }
  }

  private clearStatus(): void {
    if (this.statusShown) this.sink.write("\r\u001b[2K");
    this.statusShown = false;
  }

  finish(): void {
    this.clearStatus();
  }
}
