/**
 * File primitives with the durability rules of the store: atomic publish
 * (write tmp_…, fsync, rename, fsync the directory) and directory fsync.
 */
import { closeSync, fsyncSync, openSync, renameSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";

export function fsyncDirectory(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

export function writeFileDurably(path: string, data: Uint8Array | string, fsync = true): void {
  const fd = openSync(path, "w");
  try {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
    if (fsync) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Replaces `path` atomically: readers see the old file or the new one, never a mix. */
export function publishFileAtomically(path: string, data: Uint8Array | string, fsync = true): void {
  const temporary = join(dirname(path), `tmp_${basename(path)}.${process.pid}`);
  writeFileDurably(temporary, data, fsync);
  renameSync(temporary, path);
  if (fsync) fsyncDirectory(dirname(path));
}
