/** Uuids as the set reads them (16 bytes each, end to end), how many of them a set holds, and chunks that carry them. */
import { ChunkBuilder } from "../../src/storage/chunk-codec.js";
import type { UuidSet } from "../../src/storage/uuid-set.js";
import type { Random } from "./random.js";

export function randomUuids(random: Random, count: number): Uint8Array {
  const bytes = new Uint8Array(count * 16);
  for (let index = 0; index < count; index++) bytes.set(Buffer.from(random.uuid().replaceAll("-", ""), "hex"), index * 16);
  return bytes;
}

export function countPresent(set: UuidSet, uuids: Uint8Array): number {
  let present = 0;
  for (let offset = 0; offset < uuids.length; offset += 16) if (set.has(uuids, offset)) present++;
  return present;
}

/** A chunk of "signup" events on one day, a millisecond apart, one per uuid (text form), by `users` distinct users. */
export function uuidChunk(dayStartMs: number, uuids: readonly string[], users = uuids.length): ArrayBuffer {
  const builder = new ChunkBuilder();
  for (const [index, uuid] of uuids.entries()) builder.addRow(dayStartMs + index, "signup", `user-${index % users}`, Buffer.from(uuid.replaceAll("-", ""), "hex"));
  return builder.finish();
}
