/**
 * Per-workspace caps on distinct event names and property keys
 * (limits.workspaceEventNamesMax, workspacePropertyKeysMax), checked when a
 * chunk is committed, on the main thread that owns the dictionaries. Names and
 * keys stay in memory for good, so one client with the public ingest key could
 * otherwise grow them without end. A row bringing a name or key over its cap
 * is refused whole (an acknowledged event is never silently cut); the others
 * are stored.
 *
 * A name enters the dictionary only when its chunk is applied, after the WAL's
 * fsync: until then it is reserved here, so that commits in flight together
 * cannot pass the cap together. The names and keys already stored are any
 * KnownTexts: the embedded store's dictionaries, or the ClickHouse store's TextSets.
 */
import { limits } from "../config/limits.js";
import type { DecodedChunk } from "./chunk-codec.js";

/** The names or keys a workspace already holds, as the caps read them (a Dictionary is one). */
export interface KnownTexts {
  readonly size: number;
  /** Whether the UTF-8 text `source[start, end)` is one of them. */
  containsUtf8(source: Uint8Array, start: number, end: number): boolean;
}

/** KnownTexts held as a set of strings, for a store without dictionaries of its own (ClickHouse). */
export class TextSet implements KnownTexts {
  private readonly texts = new Set<string>();

  get size(): number {
    return this.texts.size;
  }

  containsUtf8(source: Uint8Array, start: number, end: number): boolean {
    return this.texts.has(Buffer.from(source.buffer, source.byteOffset + start, end - start).toString("utf8"));
  }

  add(text: string): void {
    this.texts.add(text);
  }
}

/** Why a row was refused; the values never change (SPEC §2 per-event errors are built from them). */
export type RowRefusalStatus = "event_names_full" | "property_keys_full";

export interface RowRefusal {
  row: number;
  status: RowRefusalStatus;
  /** The name or key that did not fit. */
  text: string;
}

export interface CardinalityAdmission {
  /** keep[row] is 0 for a refused row; undefined when every row is admitted. */
  keep: Uint8Array | undefined;
  /** In row order. */
  refusals: RowRefusal[];
  /** Drops the reservations this chunk made; call once it was applied, or failed. */
  release(): void;
}

const unseen = 0;
const admitted = 1;
const refused = 2;
const noRelease = () => {};

export class CardinalityReservations {
  private readonly names = new Set<string>();
  private readonly keys = new Set<string>();

  admit(events: KnownTexts, keys: KnownTexts, chunk: DecodedChunk): CardinalityAdmission {
    const reservedNames: string[] = [];
    const reservedKeys: string[] = [];
    const refusals: RowRefusal[] = [];
    let keep: Uint8Array | undefined;
    const verdicts = new Uint8Array(chunk.stringCount);
    for (let row = 0; row < chunk.rowCount; row++) {
      const name = chunk.eventNameString[row];
      if (verdicts[name] === unseen) verdicts[name] = this.verdict(events, this.names, limits.workspaceEventNamesMax, chunk, name, reservedNames);
      if (verdicts[name] === admitted) continue;
      keep ??= new Uint8Array(chunk.rowCount).fill(1);
      keep[row] = 0;
      refusals.push({ row, status: "event_names_full", text: chunk.string(name) });
    }
    let keyRefused = false;
    for (let key = 0; key < chunk.keyStrings.length; key++) {
      const start = chunk.entryStarts[key];
      const end = chunk.entryStarts[key + 1];
      // A key only rows already refused carry takes no room.
      let carried = false;
      for (let entry = start; entry < end && !carried; entry++) carried = keep === undefined || keep[chunk.entryRows[entry]] === 1;
      if (!carried) continue;
      const text = chunk.keyStrings[key];
      if (this.verdict(keys, this.keys, limits.workspacePropertyKeysMax, chunk, text, reservedKeys) === admitted) continue;
      keyRefused = true;
      keep ??= new Uint8Array(chunk.rowCount).fill(1);
      for (let entry = start; entry < end; entry++) {
        const row = chunk.entryRows[entry];
        if (keep[row] === 0) continue;
        keep[row] = 0;
        refusals.push({ row, status: "property_keys_full", text: chunk.string(text) });
      }
    }
    if (keyRefused) refusals.sort((left, right) => left.row - right.row);
    const release =
      reservedNames.length + reservedKeys.length === 0
        ? noRelease
        : () => {
            for (const name of reservedNames) this.names.delete(name);
            for (const key of reservedKeys) this.keys.delete(key);
          };
    return { keep, refusals, release };
  }

  /** Whether string `index` of the chunk is, or may become, one of the dictionary's texts; reserves it when new. */
  private verdict(dictionary: KnownTexts, reserved: Set<string>, max: number, chunk: DecodedChunk, index: number, reservedHere: string[]): number {
    if (dictionary.containsUtf8(chunk.stringBytes, chunk.stringEnds[index], chunk.stringEnds[index + 1])) return admitted;
    const text = chunk.string(index);
    if (reserved.has(text)) return admitted;
    // Between its apply and its release a text is counted twice: for a moment the cap errs on the side of refusing.
    if (dictionary.size + reserved.size >= max) return refused;
    reserved.add(text);
    reservedHere.push(text);
    return admitted;
  }
}
