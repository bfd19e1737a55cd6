/**
 * How an active segment's property entries cross to the worker that seals
 * them. Posting a SharedArrayBuffer handle costs tens of microseconds, and a
 * day can hold 30 000 keys with two buffers each: sent as handles, one seal
 * task held the main thread for over a second. So keys with few entries are
 * copied into one transferred buffer (a memcpy each), and only keys with many
 * entries, whose handles are few, travel as shared buffers.
 */
import { strict as assert } from "node:assert";
import type { PropertyEntries } from "./segment-format.js";

/** Keys with at least this many entries travel as shared handles (at most entries / this many handles). */
const sharedEntriesMin = 1 << 16;

/**
 * One active key's entries: entryCount u32s of `rows` (ascending) from byte
 * `rowsOffset`, and of `valueIds` from `valueIdsOffset` (small keys share
 * buffers, store.ts PropertyArena).
 */
export interface ActivePropertyEntries {
  keyId: number;
  entryCount: number;
  rows: SharedArrayBuffer;
  rowsOffset: number;
  valueIds: SharedArrayBuffer;
  valueIdsOffset: number;
  texts: string[];
}

export interface PropertyEntriesMessage {
  keyIds: number[];
  entryCounts: number[];
  texts: string[][];
  /** Rows then value ids of every packed key, in key order. Transferred. */
  packed: ArrayBuffer;
  /** Per key: its shared buffers (entries from offset 0: only keys past an arena slot are shared), or null when packed. */
  shared: Array<{ rows: SharedArrayBuffer; valueIds: SharedArrayBuffer } | null>;
}

export function packPropertyEntries(properties: readonly ActivePropertyEntries[]): PropertyEntriesMessage {
  let packedEntries = 0;
  for (const property of properties) if (property.entryCount < sharedEntriesMin) packedEntries += property.entryCount;
  const packed = new Uint32Array(packedEntries * 2);
  const message: PropertyEntriesMessage = { keyIds: [], entryCounts: [], texts: [], packed: packed.buffer, shared: [] };
  let cursor = 0;
  for (const property of properties) {
    message.keyIds.push(property.keyId);
    message.entryCounts.push(property.entryCount);
    message.texts.push(property.texts);
    if (property.entryCount >= sharedEntriesMin) {
      assert(property.rowsOffset === 0 && property.valueIdsOffset === 0, "a key this large has buffers of its own");
      message.shared.push({ rows: property.rows, valueIds: property.valueIds });
      continue;
    }
    message.shared.push(null);
    packed.set(new Uint32Array(property.rows, property.rowsOffset, property.entryCount), cursor);
    packed.set(new Uint32Array(property.valueIds, property.valueIdsOffset, property.entryCount), cursor + property.entryCount);
    cursor += property.entryCount * 2;
  }
  return message;
}

export function unpackPropertyEntries(message: PropertyEntriesMessage): PropertyEntries[] {
  const packed = new Uint32Array(message.packed);
  const properties: PropertyEntries[] = [];
  let cursor = 0;
  for (let index = 0; index < message.keyIds.length; index++) {
    const entryCount = message.entryCounts[index];
    const shared = message.shared[index];
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
    properties.push({ keyId: message.keyIds[index], rows, valueIds, texts: message.texts[index] });
  }
  return properties;
}
