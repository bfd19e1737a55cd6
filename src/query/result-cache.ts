/**
 * A time-limited answer cache bounded in bytes: entries expire after `ttlMs`,
 * and the least recently used go first when the byte budget is exceeded.
 * Keys start with the workspace id, so an answer never crosses workspaces.
 */
export class ResultCache {
  private readonly entries = new Map<string, { body: string; expiresAtMs: number }>();
  private bytes = 0;

  constructor(
    private readonly bytesMax: number,
    private readonly ttlMs: number,
  ) {}

  get(key: string): string | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    this.entries.delete(key);
    if (entry.expiresAtMs <= Date.now()) {
      this.bytes -= 2 * (key.length + entry.body.length);
      return undefined;
    }
    this.entries.set(key, entry);
    return entry.body;
  }

  set(key: string, body: string): void {
    const size = 2 * (key.length + body.length);
    if (size > this.bytesMax) return;
    const previous = this.entries.get(key);
    if (previous) {
      this.entries.delete(key);
      this.bytes -= 2 * (key.length + previous.body.length);
    }
    this.entries.set(key, { body, expiresAtMs: Date.now() + this.ttlMs });
    this.bytes += size;
    for (const [oldKey, entry] of this.entries) {
      if (this.bytes <= this.bytesMax) break;
      this.entries.delete(oldKey);
      this.bytes -= 2 * (oldKey.length + entry.body.length);
    }
  }

  get byteLength(): number {
    return this.bytes;
  }
}
