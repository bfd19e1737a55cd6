/**
 * Segment directories a failed checkpoint or merge may have written, kept
 * until they are durably gone. Both must clear them before they publish
 * anything: a checkpoint's higher sequence, or a merge named under the
 * published one, would make start-up adopt them next to the same rows
 * written again.
 */
import { existsSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fsyncDirectory, removeDirectory } from "./files.js";

export class AbandonedSegments {
  private readonly directories: string[] = [];

  constructor(private readonly fsync: boolean) {}

  add(...directories: string[]): void {
    this.directories.push(...directories);
  }

  /** Removes, durably, what failed checkpoints and merges wrote (and their tmp_ forms); throws (keeping the rest listed) when the disk refuses. */
  remove(): void {
    while (this.directories.length > 0) {
      const directory = this.directories[0];
      const parent = dirname(directory);
      removeDirectory(directory);
      rmSync(join(parent, `tmp_${basename(directory)}`), { recursive: true, force: true });
      if (this.fsync && existsSync(parent)) fsyncDirectory(parent);
      this.directories.shift();
    }
  }
}
