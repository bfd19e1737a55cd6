/** Uuids as the set reads them (16 bytes each, end to end), and how many of them a set holds. */
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
