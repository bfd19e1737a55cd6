/**
 * How an active segment's property entries cross to the worker that seals
 * them (built by ActiveProperties.pack). Posting a SharedArrayBuffer handle
 * costs tens of microseconds, and a day can hold a million keys: sent as
 * handles, or as an object and an array of texts per key, one seal task held
 * the main thread for seconds. So per-key figures travel as typed arrays,
 * texts joined into a few long strings, entries of keys with few of them copied into one
 * transferred buffer, and only keys with many entries, whose handles are few,
 * as shared buffers.
 */
import type { PropertyEntries } from "./segment-writer.js";

/** Every array in it is made for the message and transferred with it (pool.ts). */
export interface PropertyEntriesMessage {
  keyIds: Uint32Array<ArrayBuffer>;
  entryCounts: Uint32Array<ArrayBuffer>;
  /** Per key, how many texts it has (ids 1, 2, …): the next textCounts[key] texts. */
  textCounts: Uint32Array<ArrayBuffer>;
  /** The texts, in key order, joined into parts: part p holds the next partTextCounts[p] texts. */
  textParts: string[];
  partTextCounts: number[];
  /** Each text's end within its part, in UTF-16 units. */
  textEnds: Uint32Array<ArrayBuffer>;
  /** Rows then value ids of every packed key, in key order. Transferred. */
  packed: ArrayBuffer;
  /** The keys that are not packed: their own buffers, entries from offset 0. */
  shared: Array<{ slot: number; rows: SharedArrayBuffer; valueIds: SharedArrayBuffer }>;
}

export function unpackPropertyEntries(message: PropertyEntriesMessage): PropertyEntries[] {
  const packed = new Uint32Array(message.packed);
  const sharedBySlot = new Map(message.shared.map((shared) => [shared.slot, shared]));
  const allTexts: string[] = [];
  for (let part = 0, text = 0; part < message.textParts.length; part++) {
    const joined = message.textParts[part];
    let start = 0;
    for (let index = 0; index < message.partTextCounts[part]; index++, text++) {
      allTexts.push(joined.slice(start, message.textEnds[text]));
      start = message.textEnds[text];
    }
  }
  const properties: PropertyEntries[] = [];
  let cursor = 0;
  let textCursor = 0;
  for (let slot = 0; slot < message.keyIds.length; slot++) {
    const entryCount = message.entryCounts[slot];
    const shared = sharedBySlot.get(slot);
    let rows: Uint32Array;
    let valueIds: Uint32Array;
    if (shared) {
      rows = new Uint32Array(shared.rows, 0, entryCount);
      valueIds = new Uint32Array(shared.valueIds, 0, entryCount);
    } else {
      rows = packed.subarray(cursor, cursor + entryCount);
      valueIds = packed.subarray(cursor + entryCount, cursor + entryCount * 2);
      cursor += entryCount * 2;
    }
    const texts = [""];
    for (let id = 0; id < message.textCounts[slot]; id++) texts.push(allTexts[textCursor + id]);
    textCursor += message.textCounts[slot];
    properties.push({ keyId: message.keyIds[slot], rows, valueIds, texts });
  }
  return properties;
}
