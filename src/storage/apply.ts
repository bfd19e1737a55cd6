/**
 * Apply: a durable chunk's rows go into the active segments of their
 * (workspace, UTC day), on the main thread and in WAL order, so dictionary ids
 * are assigned the same way again when recovery replays the WAL. Commit calls
 * it once the chunk's WAL group is durable, recovery for every replayed record.
 * A chunk with many new property keys is applied in slices, with the event
 * loop free in between.
 */
import { limits } from "../config/limits.js";
import { ActiveProperties, ValueIdCache, valueIdUnknown } from "./active-properties.js";
import type { DecodedChunk } from "./chunk-codec.js";
import { dayMs, type ActiveSegment } from "./segments.js";
import type { WorkspaceStore } from "./workspace-store.js";

/** A chunk string whose event or user id is not looked up yet (dictionary ids start at 0). */
const idNotInterned = -1;

/** Where each row of a chunk being applied went. */
interface AppliedRows {
  rowSegment: ActiveSegment[];
  rowIndex: Uint32Array;
  textsAdded: number;
}

/** What applies added to active segments since the last checkpoint froze them; each bounds the memory they hold (Checkpoints.due). */
export class ActiveGrowth {
  rows = 0;
  propertyEntries = 0;
  propertyTexts = 0;

  reset(): void {
    this.rows = 0;
    this.propertyEntries = 0;
    this.propertyTexts = 0;
  }
}

export class Applier {
  /** Rows applied since start, for figures. */
  rowsApplied = 0;
  readonly growth = new ActiveGrowth();
  /** Scratch of the apply loop; applies of different chunks may interleave (slices), but each run of a key starts afresh. */
  private readonly valueIdCache = new ValueIdCache();

  /**
   * Applies a durable chunk: at once when it is small and nothing of its
   * workspace is still being applied, else chained after that in slices of at
   * most `applySliceMs`, with the event loop free in between. A batch may bring
   * a million property keys never seen before, a second of main-thread work
   * that other clients would wait out. Until a slice-applied chunk is done,
   * later commits of the same workspace wait for it (ids are assigned in WAL
   * order, so that replay assigns the same ones), and a checkpoint does not
   * freeze segments (its rows must be in them); other workspaces go on.
   * Returns the promise of a chained apply, or undefined when it is done.
   */
  applyDurable(workspace: WorkspaceStore, chunk: DecodedChunk): Promise<void> | undefined {
    const large = chunk.keyStrings.length > limits.applyAtOnceKeysMax || chunk.entryRows.length > limits.applyAtOnceEntriesMax;
    if (workspace.applying === undefined && !large) {
      this.apply(workspace, chunk);
      return undefined;
    }
    const applied = (workspace.applying ?? Promise.resolve())
      .then(() => this.applyInSlices(workspace, chunk))
      .catch((error: unknown) => {
        // As when an apply at once throws inside the WAL's callback: the process stops rather than
        // serve from memory that no longer matches the WAL, which the next start replays.
        setImmediate(() => {
          throw error;
        });
        throw error;
      });
    workspace.applying = applied;
    const clear = () => {
      if (workspace.applying === applied) workspace.applying = undefined;
    };
    applied.then(clear, clear);
    return applied;
  }

  private async applyInSlices(workspace: WorkspaceStore, chunk: DecodedChunk): Promise<void> {
    const rows = this.applyRows(workspace, chunk);
    let key = 0;
    for (;;) {
      key = this.applyKeys(workspace, chunk, rows, key, performance.now() + limits.applySliceMs);
      if (key === chunk.keyStrings.length) break;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    this.countApplied(chunk, rows.textsAdded);
  }

  /** Appends a decoded chunk's rows to the active segments of their days (main thread, WAL order), at once. */
  apply(workspace: WorkspaceStore, chunk: DecodedChunk): void {
    const rows = this.applyRows(workspace, chunk);
    this.applyKeys(workspace, chunk, rows, 0, Number.POSITIVE_INFINITY);
    this.countApplied(chunk, rows.textsAdded);
  }

  /** Appends a chunk's rows, not yet their properties; returns where each row went. */
  private applyRows(workspace: WorkspaceStore, chunk: DecodedChunk): AppliedRows {
    const { rowCount, stringCount } = chunk;
    // Each distinct string of the chunk is looked up once.
    const eventIdOfString = new Int32Array(stringCount).fill(idNotInterned);
    const userIdOfString = new Int32Array(stringCount).fill(idNotInterned);
    const rowSegment = new Array<ActiveSegment>(rowCount);
    const rowIndex = new Uint32Array(rowCount);
    let segment: ActiveSegment | undefined;
    const uuidPresent = chunk.uuidPresent;
    const { stringBytes, stringEnds } = chunk;
    // Rows go to a segment in runs (a batch's events mostly share a day), each run's uuids copied at once.
    let runStart = 0;
    let runHasUuid = false;
    for (let row = 0; row < rowCount; row++) {
      const timeMs = chunk.timeMs[row];
      const dayStartMs = timeMs - (timeMs % dayMs);
      if (segment === undefined || segment.dayStartMs !== dayStartMs) {
        if (runHasUuid) copyUuids(segment!, chunk, runStart, row, rowIndex[runStart]);
        segment = workspace.activeSegment(dayStartMs);
        runStart = row;
        runHasUuid = false;
      }
      const nameString = chunk.eventNameString[row];
      let eventId = eventIdOfString[nameString];
      if (eventId === idNotInterned) eventId = eventIdOfString[nameString] = workspace.events.internUtf8(stringBytes, stringEnds[nameString], stringEnds[nameString + 1]);
      const distinctString = chunk.distinctIdString[row];
      let userId = userIdOfString[distinctString];
      if (userId === idNotInterned) userId = userIdOfString[distinctString] = workspace.users.internUtf8(stringBytes, stringEnds[distinctString], stringEnds[distinctString + 1]);
      const target = segment.appendRow();
      segment.time.values[target] = timeMs - dayStartMs;
      segment.user.values[target] = userId;
      segment.event.values[target] = eventId;
      if (uuidPresent !== undefined && uuidPresent[row] === 1) runHasUuid = true;
      rowSegment[row] = segment;
      rowIndex[row] = target;
    }
    if (runHasUuid) copyUuids(segment!, chunk, runStart, rowCount, rowIndex[runStart]);
    return { rowSegment, rowIndex, textsAdded: 0 };
  }

  /** Applies the chunk's property keys from `firstKey` until done or past `deadline`; returns the next key. */
  private applyKeys(workspace: WorkspaceStore, chunk: DecodedChunk, rows: AppliedRows, firstKey: number, deadline: number): number {
    const { rowSegment, rowIndex } = rows;
    const keyCount = chunk.keyStrings.length;
    let key = firstKey;
    let keysSinceClock = 0;
    let entriesSinceClock = 0;
    const valueIds = this.valueIdCache.reserve(chunk.stringCount);
    while (key < keyCount) {
      const keyString = chunk.keyStrings[key];
      const keyId = workspace.keys.internUtf8(chunk.stringBytes, chunk.stringEnds[keyString], chunk.stringEnds[keyString + 1]);
      // A key's entries are in row order, so mostly in one day's segment: its slot is looked up once per run.
      let properties: ActiveProperties | undefined;
      let slot = 0;
      for (let entry = chunk.entryStarts[key]; entry < chunk.entryStarts[key + 1]; entry++) {
        const row = chunk.entryRows[entry];
        const rowProperties = rowSegment[row].properties;
        if (rowProperties !== properties) {
          properties = rowProperties;
          slot = properties.slotFor(keyId);
          valueIds.forget();
        }
        // A value repeats across the rows of a chunk ("US" in a third of them): its id is looked up
        // once per run of the key, then read from the cache by its chunk string index.
        const valueString = chunk.entryValues[entry];
        let valueId = valueIds.get(valueString);
        if (valueId === valueIdUnknown) {
          valueId = properties.valueIdOf(slot, chunk.string(valueString));
          rows.textsAdded += properties.textWasNew;
          valueIds.set(valueString, valueId);
        }
        properties.append(slot, rowIndex[row], valueId);
      }
      entriesSinceClock += chunk.entryStarts[key + 1] - chunk.entryStarts[key];
      key++;
      if (++keysSinceClock >= limits.applyClockKeys || entriesSinceClock >= limits.applyClockEntries) {
        if (performance.now() > deadline) break;
        keysSinceClock = 0;
        entriesSinceClock = 0;
      }
    }
    return key;
  }

  private countApplied(chunk: DecodedChunk, textsAdded: number): void {
    this.rowsApplied += chunk.rowCount;
    this.growth.rows += chunk.rowCount;
    this.growth.propertyEntries += chunk.entryRows.length;
    this.growth.propertyTexts += textsAdded;
  }
}

/**
 * Copies the uuid columns of chunk rows [start, end), appended to `segment`
 * from row `target` on, in one copy each (a row without a uuid is zeros in
 * the chunk, as in the segment): one copy per run, not a byte loop per row.
 */
function copyUuids(segment: ActiveSegment, chunk: DecodedChunk, start: number, end: number, target: number): void {
  const uuids = segment.uuidColumns();
  uuids.present.values.set(chunk.uuidPresent!.subarray(start, end), target);
  uuids.bytes.values.set(chunk.uuidBytes!.subarray(start * 16, end * 16), target * 16);
}
