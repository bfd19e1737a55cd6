/**
 * Damage that a torn write cannot explain: bytes the store had made durable
 * (fsynced, or proven durable by a later record) no longer read back. Start-up
 * refuses to serve on such a store rather than cut acknowledged data or
 * renumber dictionary ids, and names the file, the byte offset and the way
 * out: `eventide repair`, which moves the damaged part aside and keeps every
 * intact record around it.
 */
/** An error of a file system call (EIO, EISDIR, ENOENT…): a file that cannot be read is damage as much as a bad checksum. */
export function isFileSystemError(error: unknown): boolean {
  return error instanceof Error && typeof (error as NodeJS.ErrnoException).code === "string" && (error as NodeJS.ErrnoException).syscall !== undefined;
}

export class StoreCorruptionError extends Error {
  constructor(
    readonly path: string,
    /** First damaged byte; undefined when the whole file is unreadable or missing. */
    readonly offset: number | undefined,
    readonly detail: string,
  ) {
    const where = offset === undefined ? path : `${path} at byte ${offset}`;
    super(
      `corruption in ${where}: ${detail}. The server will not start on damaged data. ` +
        "Stop here and copy the data directory if you can, then run `eventide repair` (same EVENTIDE_DATA_DIR): " +
        "it moves the damaged bytes aside into a damaged-<time> directory, keeps every intact record, and says what was lost.",
    );
    this.name = "StoreCorruptionError";
  }
}
