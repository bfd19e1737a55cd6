/**
 * Worker side of segment sharing: turns the descriptors a query task carries
 * into SegmentViews over the shared bytes. Sealed segments are immutable, so
 * their views — parsed layout, decoded dictionaries, deserialized bitmaps —
 * are cached per worker under the segment key and reused by later queries.
 * Active segments change with every ingest, so their views are built per task.
 */
import roaring from "roaring";
import { limits } from "../config/limits.js";
import type { ActiveSegmentDescriptor, PostedSegment, SealedSegmentDescriptor, SegmentDescriptor } from "../storage/segment-descriptor.js";
import type { SegmentLayout } from "../storage/segment-layout.js";
import { denseValueIds, PropertyDirectory } from "../storage/segment-reader.js";
import { storedValueCountsAt, storedValueCountsIndex } from "../storage/value-counts-index.js";
import { ActiveIndex, ActiveIndexCache, dayOfKey } from "./active-index.js";
import { lowerBound } from "./kernels/rows.js";
import { presetValueCounts } from "./kernels/value-counts.js";
import type { PropertyColumn, SegmentView } from "./segment-view.js";

const { RoaringBitmap32 } = roaring;
type Bitmap = InstanceType<typeof RoaringBitmap32>;

class SealedView implements SegmentView {
  readonly key: string;
  readonly dayStartMs: number;
  readonly rowCount: number;
  readonly timeOffsetMs: Uint32Array;
  readonly userIds: Uint32Array;
  readonly eventRowStart: Uint32Array;
  readonly eventIds = undefined;
  readonly eventRows = () => undefined;
  readonly eventValueCounts = () => undefined;
  readonly partUsers = () => undefined;
  readonly partValueUsers = () => undefined;
  /** Shared column bytes plus the dense columns this worker built from sparse keys. */
  memoryBytes: number;
  private readonly properties = new Map<number, PropertyColumn>();
  private readonly directory: PropertyDirectory;
  private readonly bitmaps = new Map<number, Bitmap | undefined>();
  private readonly bitmapEnds: Uint32Array;

  constructor(
    descriptor: SealedSegmentDescriptor,
    private readonly layout: SegmentLayout,
    private readonly memory: SharedArrayBuffer,
    /** Told of bytes the view allocates after it was built, for the cache's budget. */
    private readonly onGrow: (bytes: number) => void = () => {},
  ) {
    this.key = descriptor.key;
    this.dayStartMs = descriptor.dayStartMs;
    this.rowCount = layout.rowCount;
    this.memoryBytes = layout.memoryBytes;
    this.timeOffsetMs = new Uint32Array(memory, layout.time.offset, layout.rowCount);
    this.userIds = new Uint32Array(memory, layout.user.offset, layout.rowCount);
    this.eventRowStart = new Uint32Array(memory, layout.eventStart.offset, layout.eventCount + 1);
    this.bitmapEnds = new Uint32Array(memory, layout.bitmapEnds.offset, layout.eventCount);
    this.directory = new PropertyDirectory(layout, memory);
  }

  property(keyId: number): PropertyColumn | undefined {
    const cached = this.properties.get(keyId);
    if (cached) return cached;
    const property = this.directory.find(keyId);
    if (!property) return undefined;
    // A sparse key is expanded to a dense column once per worker: kernels read
    // value ids by row. Its bytes count against the view cache's budget.
    const valueIds = denseValueIds(property, this.rowCount);
    if (property.rows !== undefined) {
      this.memoryBytes += valueIds.byteLength;
      this.onGrow(valueIds.byteLength);
    }
    const column = { valueIds, texts: property.texts() };
    // Counts the seal stored are read in place (format 3); other columns' are built at first use.
    const stored = this.layout.valueCounts === undefined ? -1 : storedValueCountsIndex(this.layout.valueCounts.keys, keyId);
    if (stored >= 0) presetValueCounts(valueIds, storedValueCountsAt(this.layout.valueCounts!.keys, stored, this.memory));
    this.properties.set(keyId, column);
    return column;
  }

  rowsWithProperty(keyId: number, start: number, end: number): number {
    const property = this.directory.find(keyId);
    if (property === undefined) return 0;
    const { rows, values } = property;
    if (rows !== undefined) return lowerBound(rows, end) - lowerBound(rows, start);
    let count = 0;
    for (let row = start; row < end; row++) if (values[row] !== 0) count++;
    return count;
  }

  userBitmap(eventId: number): Bitmap | undefined {
    if (eventId >= this.layout.eventCount) return undefined;
    if (this.bitmaps.has(eventId)) return this.bitmaps.get(eventId);
    let bitmap: Bitmap | undefined;
    const start = eventId === 0 ? 0 : this.bitmapEnds[eventId - 1];
    const end = this.bitmapEnds[eventId];
    if (end > start) {
      // Copy out of shared memory: the addon wants an ordinary buffer.
      const bytes = Buffer.from(new Uint8Array(this.memory, this.layout.bitmaps.offset + start, end - start));
      bitmap = RoaringBitmap32.deserialize(bytes, true);
      // Sealing run-optimizes for size on disk; in memory, ORs of many days
      // (funnel entry sets, retention periods) run ~3× faster over array and
      // bitset containers than over run containers (measured on 90 days of 1 M users).
      bitmap.removeRunCompression();
    }
    this.bitmaps.set(eventId, bitmap);
    return bitmap;
  }
}

/**
 * An active segment's view for one task. Its event rows, user sets and
 * property columns come from the index `indexOf` gives at first use, which
 * outlives the task in a worker (the main thread's views, which only plan
 * shards, never ask for one).
 */
export function activeView(descriptor: ActiveSegmentDescriptor, indexOf: () => ActiveIndex): SegmentView {
  let index: ActiveIndex | undefined;
  const indexed = () => (index ??= indexOf());
  const rows = descriptor.rowCount;
  const properties = new Map<number, PropertyColumn | undefined>();
  const column = (keyId: number): PropertyColumn | undefined => {
    if (properties.has(keyId)) return properties.get(keyId);
    const property = descriptor.properties.find((candidate) => candidate.keyId === keyId);
    const built = property === undefined ? undefined : indexed().column(descriptor, property);
    properties.set(keyId, built);
    return built;
  };
  return {
    key: descriptor.key,
    dayStartMs: descriptor.dayStartMs,
    rowCount: rows,
    timeOffsetMs: new Uint32Array(descriptor.time, 0, rows),
    userIds: new Uint32Array(descriptor.user, 0, rows),
    eventRowStart: undefined,
    eventIds: new Uint32Array(descriptor.event, 0, rows),
    eventRows: (eventId) => indexed().eventRows(descriptor, eventId),
    property: column,
    rowsWithProperty: (keyId, start, end) => {
      const valueIds = column(keyId)?.valueIds;
      let count = 0;
      if (valueIds !== undefined) for (let row = start; row < end; row++) if (valueIds[row] !== 0) count++;
      return count;
    },
    userBitmap: (eventId) => indexed().userBitmap(descriptor, eventId),
    eventValueCounts: (eventId, keyId, userHi) => {
      const valueIds = column(keyId)?.valueIds;
      return valueIds === undefined ? undefined : indexed().eventValueCounts(descriptor, eventId, keyId, valueIds, userHi);
    },
    partUsers: (eventId, lowMs, highMs) => indexed().partUsers(descriptor, eventId, lowMs, highMs),
    partValueUsers: (eventId, keyId, lowMs, highMs) => {
      const valueIds = column(keyId)?.valueIds;
      return valueIds === undefined ? undefined : indexed().partValueUsers(descriptor, eventId, keyId, valueIds, lowMs, highMs);
    },
  };
}

/** Least recently used sealed views, bounded by the bytes they keep alive. */
const sealedViews = new Map<string, SealedView>();
let sealedViewBytes = 0;
/** This thread's share of the segment cache; the pool sets each worker's (limits.ts splits the budget). */
let sealedViewBytesMax = limits.segmentCacheBytesMax;

export function setSealedViewBytesMax(bytes: number): void {
  sealedViewBytesMax = bytes;
}

/** This thread's indexes of active segments (active-index.ts). */
const activeIndexes = new ActiveIndexCache(limits.activeIndexBytesMax);

/** The cached view of `key`, now the most recently used; undefined when this thread holds none. */
function cachedSealedView(key: string): SealedView | undefined {
  const cached = sealedViews.get(key);
  if (cached) {
    sealedViews.delete(key);
    sealedViews.set(key, cached);
  }
  return cached;
}

function sealedView(descriptor: SealedSegmentDescriptor): SealedView {
  const cached = cachedSealedView(descriptor.key);
  if (cached) return cached;
  const layout = JSON.parse(descriptor.layoutJson) as SegmentLayout;
  const view = new SealedView(descriptor, layout, descriptor.memory, (bytes) => (sealedViewBytes += bytes));
  sealedViews.set(descriptor.key, view);
  sealedViewBytes += view.memoryBytes;
  for (const [key, victim] of sealedViews) {
    if (sealedViewBytes <= sealedViewBytesMax) break;
    if (victim === view) continue;
    sealedViews.delete(key);
    sealedViewBytes -= victim.memoryBytes;
  }
  return view;
}

/** Views of a task's segments; `missing` lists the referenced sealed ones this thread holds no view of. */
export function segmentViews(posted: readonly PostedSegment[]): { kind: "views"; views: SegmentView[] } | { kind: "missing"; keys: string[] } {
  // References first: a task this thread cannot answer builds nothing.
  const missing: string[] = [];
  for (const segment of posted) if (typeof segment === "string" && !sealedViews.has(segment)) missing.push(segment);
  if (missing.length > 0) return { kind: "missing", keys: missing };
  const activeKeys = new Set<string>();
  const days = new Set<string>();
  for (const segment of posted) {
    days.add(dayOfKey(typeof segment === "string" ? segment : segment.key));
    if (typeof segment !== "string" && segment.kind === "active") activeKeys.add(segment.key);
  }
  activeIndexes.trim(activeKeys, days);
  // Views named by key are taken before any whole descriptor is admitted, which could push them out of the cache.
  const views: Array<SegmentView | undefined> = posted.map((segment) => (typeof segment === "string" ? cachedSealedView(segment)! : undefined));
  for (let index = 0; index < posted.length; index++) {
    const segment = posted[index];
    if (typeof segment === "string") continue;
    views[index] = segment.kind === "sealed" ? sealedView(segment) : activeView(segment, () => activeIndexes.get(segment.key));
  }
  return { kind: "views", views: views as SegmentView[] };
}

/**
 * Views of a snapshot on the thread that owns the segments (the main thread,
 * which plans shards by reading row runs). There a sealed segment's memory is
 * one object for as long as the store keeps it loaded, so views are cached
 * weakly under it: a view never keeps memory alive that the store let go.
 */
const ownedViews = new WeakMap<SharedArrayBuffer, SealedView>();

export function ownedSegmentViews(descriptors: readonly SegmentDescriptor[]): SegmentView[] {
  return descriptors.map((descriptor) => {
    if (descriptor.kind === "active") return activeView(descriptor, () => new ActiveIndex(descriptor.key));
    let view = ownedViews.get(descriptor.memory);
    if (view === undefined || view.key !== descriptor.key) {
      view = new SealedView(descriptor, JSON.parse(descriptor.layoutJson) as SegmentLayout, descriptor.memory);
      ownedViews.set(descriptor.memory, view);
    }
    return view;
  });
}
