/**
 * The two forms a (workspace, UTC day) segment takes in the store: an active
 * segment, growing in memory as commits are applied, and a sealed segment, its
 * immutable column files (loaded into memory on demand by the segment cache).
 * A checkpoint turns the first into the second; a merge turns several sealed
 * ones into one.
 */
import { strict as assert } from "node:assert";
import { statSync } from "node:fs";
import { ActiveProperties } from "./active-properties.js";
import { SharedColumn } from "./column-builder.js";
import type { ActiveSegmentDescriptor, SealedSegmentDescriptor } from "./segment-descriptor.js";
import type { LoadSegmentResult, SegmentLayout } from "./segment-layout.js";

export const dayMs = 86_400_000;

export function dayLabel(dayStartMs: number): string {
  return new Date(dayStartMs).toISOString().slice(0, 10);
}

/**
 * When a sealed segment was written (sealed, or merged): a time no earlier than
 * the receipt of any of its rows, which the store keeps nowhere else. Its
 * directory's, as the files were created in it just before it was renamed into
 * place; a merge rewrites old rows and so counts them as received anew.
 */
export function writtenAtMs(directory: string): number {
  return statSync(directory).mtimeMs;
}

/** An active segment's uuid columns: per row whether it has a uuid, and its 16 bytes. */
export interface ActiveUuidColumns {
  readonly present: SharedColumn<Uint8Array>;
  readonly bytes: SharedColumn<Uint8Array>;
}

export class ActiveSegment {
  rowCount = 0;
  readonly time = new SharedColumn(Uint32Array, 1);
  readonly user = new SharedColumn(Uint32Array, 1);
  readonly event = new SharedColumn(Uint32Array, 1);
  /**
   * Made at the first row that has a uuid: 17 of a row's 29 column bytes,
   * which events sent without uuids would otherwise allocate, grow and copy
   * for nothing (and leave to the garbage collector of every thread that read
   * them, since they are shared).
   */
  uuids: ActiveUuidColumns | undefined;
  readonly properties = new ActiveProperties();

  constructor(
    readonly key: string,
    readonly dayStartMs: number,
  ) {}

  /** Reserves one row; columns grow by doubling. */
  appendRow(): number {
    const row = this.rowCount++;
    if (row >= this.time.values.length) {
      const rows = this.rowCount;
      this.time.ensureRows(rows);
      this.user.ensureRows(rows);
      this.event.ensureRows(rows);
      this.uuids?.present.ensureRows(rows);
      this.uuids?.bytes.ensureRows(rows);
    }
    return row;
  }

  /** The uuid columns, made (as long as the other columns) when no row had a uuid yet. */
  uuidColumns(): ActiveUuidColumns {
    const capacity = this.time.values.length;
    return (this.uuids ??= { present: new SharedColumn(Uint8Array, 1, capacity), bytes: new SharedColumn(Uint8Array, 16, capacity) });
  }

  /** `withTexts` false: the keys' texts are left out (see ActiveProperties.entries). */
  describe(filterKeyIds: readonly number[], withTexts = true): ActiveSegmentDescriptor {
    const properties: ActiveSegmentDescriptor["properties"] = [];
    for (const keyId of filterKeyIds) {
      const slot = this.properties.slotOf(keyId);
      if (slot >= 0) properties.push(this.properties.entries(slot, withTexts));
    }
    return {
      kind: "active",
      key: this.key,
      dayStartMs: this.dayStartMs,
      rowCount: this.rowCount,
      time: this.time.buffer,
      user: this.user.buffer,
      event: this.event.buffer,
      properties,
    };
  }
}

/** A snapshot met a segment a merge replaced while it waited for it to load: it looks again. */
export class RetiredSegmentError extends Error {}

/** Rows of sealed segments, together. */
export function rowsOf(segments: readonly SealedSegment[]): number {
  let rows = 0;
  for (const segment of segments) rows += segment.layout.rowCount;
  return rows;
}

export class SealedSegment {
  memory: SharedArrayBuffer | undefined;
  /** Set when a merge replaced this segment: it must not be described again. */
  retired = false;
  /** Its uuids are in the workspace's set (new segments: their rows' uuids were claimed at commit), or were written beyond the uuid horizon. */
  uuidsLoaded = true;
  private layoutJson: string | undefined;
  /** Its load in flight; it resolves with the columns, which the cache may already have dropped again. */
  loading: Promise<SharedArrayBuffer> | undefined;
  /** The segment cache's clock when it was last loaded (least recently loaded ones are dropped first). */
  lastUsed = 0;

  constructor(
    readonly key: string,
    readonly directory: string,
    readonly dayStartMs: number,
    public layout: SegmentLayout,
  ) {}

  attach(result: LoadSegmentResult): void {
    this.layout = result.layout;
    this.memory = result.memory;
  }

  /** `memory`: the columns a load gave, when the cache may have dropped them since. */
  describe(memory = this.memory): SealedSegmentDescriptor {
    assert(memory, "segment must be loaded before it is described");
    this.layoutJson ??= JSON.stringify(this.layout);
    return { kind: "sealed", key: this.key, dayStartMs: this.dayStartMs, layoutJson: this.layoutJson, memory };
  }
}
