/**
 * msgpack request bodies (Content-Type: application/msgpack) on the ingest
 * endpoints. A msgpack body is taken when it holds exactly what a JSON body
 * can: nil, booleans, integers, finite floats, UTF-8 strings, arrays, and maps
 * whose keys are strings. It then decodes (msgpackr) to the value JSON.parse
 * would have built from the same data, and every SPEC §2 rule applies to that
 * value unchanged. Anything else — bin, ext (the msgpack timestamp and
 * msgpackr's records and structures among them), a non-string key, NaN or an
 * infinity, invalid UTF-8, trailing bytes — refuses the body as invalid_json.
 *
 * The client chooses these bytes, so they are walked once before msgpackr
 * sees them: iteratively, nesting bounded by msgpackNestingDepthMax (msgpackr
 * decodes recursively), every declared length checked against the bytes
 * left, so a forged count allocates nothing. The decoder runs with records,
 * structures and extensions off.
 */
import { isUtf8 } from "node:buffer";
import { Unpackr } from "msgpackr";
import { limits } from "../config/limits.js";
import type { ServiceError } from "../errors.js";

/** How an ingest body is written: JSON (any content type but msgpack's, SPEC §1) or msgpack. */
export type BodyFormat = "json" | "msgpack";

/** application/msgpack, and the older application/x-msgpack, parameters ignored. */
export function bodyFormatOf(contentType: string): BodyFormat {
  const semicolon = contentType.indexOf(";");
  const mediaType = (semicolon < 0 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase();
  return mediaType === "application/msgpack" || mediaType === "application/x-msgpack" ? "msgpack" : "json";
}

const notAMap: ServiceError = { code: "invalid_json", message: "body must be a msgpack map" };
const refused = (reason: string): ServiceError => ({ code: "invalid_json", message: `body is not valid msgpack of JSON values: ${reason}` });

const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: "number", moreTypes: false, structuredClone: false, bundleStrings: false });

/** The `__proto__` key: JSON.parse makes it an own member, msgpackr renames it, so neither answer would be the other's. */
const protoKey = Buffer.from("__proto__", "latin1");

/** Scratch of the walk: items left in each open container (a map counts keys and values apart). */
let itemsLeft = new Float64Array(limits.msgpackNestingDepthMax + 1);
let isMap = new Uint8Array(limits.msgpackNestingDepthMax + 1);

/**
 * Why `bytes` is not one msgpack value of JSON's data model, or undefined when
 * it is one. Linear in its length; allocates nothing.
 */
export function msgpackRefusal(bytes: Uint8Array): string | undefined {
  if (itemsLeft.length !== limits.msgpackNestingDepthMax + 1) {
    itemsLeft = new Float64Array(limits.msgpackNestingDepthMax + 1);
    isMap = new Uint8Array(limits.msgpackNestingDepthMax + 1);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const end = bytes.length;
  let at = 0;
  let depth = 0;
  itemsLeft[0] = 1;
  isMap[0] = 0;
  for (;;) {
    while (depth >= 0 && itemsLeft[depth] === 0) depth--;
    if (depth < 0) break;
    const isKey = isMap[depth] === 1 && itemsLeft[depth] % 2 === 0;
    itemsLeft[depth]--;
    if (at >= end) return "truncated";
    const token = bytes[at++];
    let stringLength = -1;
    let count = -1;
    let countIsMap = false;
    if (token >= 0xa0 && token <= 0xbf) stringLength = token - 0xa0;
    else if (token === 0xd9 || token === 0xda || token === 0xdb) {
      const width = token === 0xd9 ? 1 : token === 0xda ? 2 : 4;
      if (at + width > end) return "truncated";
      stringLength = width === 1 ? bytes[at] : width === 2 ? view.getUint16(at) : view.getUint32(at);
      at += width;
    }
    if (stringLength >= 0) {
      if (stringLength > end - at) return "truncated";
      if (!utf8(bytes, at, at + stringLength)) return "a string is not valid UTF-8";
      if (isKey && stringLength === protoKey.length && protoKey.equals(bytes.subarray(at, at + stringLength))) return "the key __proto__ is not accepted";
      at += stringLength;
      continue;
    }
    if (isKey) return "a map key is not a string";
    if (token <= 0x7f || token >= 0xe0 || token === 0xc0 || token === 0xc2 || token === 0xc3) continue;
    if (token >= 0x80 && token <= 0x8f) {
      count = token - 0x80;
      countIsMap = true;
    } else if (token >= 0x90 && token <= 0x9f) {
      count = token - 0x90;
    } else {
      switch (token) {
        case 0xca:
        case 0xcb: {
          const width = token === 0xca ? 4 : 8;
          if (at + width > end) return "truncated";
          if (!Number.isFinite(width === 4 ? view.getFloat32(at) : view.getFloat64(at))) return "NaN and infinities are not JSON numbers";
          at += width;
          continue;
        }
        case 0xcc:
        case 0xd0:
          at += 1;
          break;
        case 0xcd:
        case 0xd1:
          at += 2;
          break;
        case 0xce:
        case 0xd2:
          at += 4;
          break;
        case 0xcf:
        case 0xd3:
          at += 8;
          break;
        case 0xdc:
        case 0xde:
          if (at + 2 > end) return "truncated";
          count = view.getUint16(at);
          countIsMap = token === 0xde;
          at += 2;
          break;
        case 0xdd:
        case 0xdf:
          if (at + 4 > end) return "truncated";
          count = view.getUint32(at);
          countIsMap = token === 0xdf;
          at += 4;
          break;
        case 0xc4:
        case 0xc5:
        case 0xc6:
          return "bin values are not accepted (send text as a string)";
        default:
          // 0xc1 is never used; 0xc7–0xc9 and 0xd4–0xd8 are ext types (timestamps, msgpackr records).
          return token === 0xc1 ? "byte 0xc1 is never used" : "ext types are not accepted (send a timestamp as an ISO 8601 string)";
      }
      if (at > end) return "truncated";
      if (count < 0) continue;
    }
    const items = countIsMap ? count * 2 : count;
    // Every item takes at least a byte: a count the bytes left cannot hold is refused before anything is built.
    if (items > end - at) return "truncated";
    if (items === 0) continue;
    if (depth + 1 > limits.msgpackNestingDepthMax) return `nested deeper than ${limits.msgpackNestingDepthMax} maps and arrays (EVENTIDE_MSGPACK_NESTING_DEPTH_MAX)`;
    depth++;
    itemsLeft[depth] = items;
    isMap[depth] = countIsMap ? 1 : 0;
  }
  return at === end ? undefined : "bytes after the value";
}

function utf8(bytes: Uint8Array, start: number, end: number): boolean {
  for (let at = start; at < end; at++) if (bytes[at] >= 0x80) return isUtf8(bytes.subarray(start, end));
  return true;
}

/** Parses an inflated msgpack body into a plain object, as parseJsonObject does a JSON one. */
export function parseMsgpackObject(plain: Uint8Array): { value: unknown } | ServiceError {
  const refusal = msgpackRefusal(plain);
  if (refusal !== undefined) return refused(refusal);
  const value: unknown = unpackr.unpack(plain);
  return value === null || typeof value !== "object" || Array.isArray(value) ? notAMap : { value };
}

/**
 * The apiKey a msgpack batch opens with (see leading-api-key.ts): a map whose
 * first key is `apiKey` and its value a short string. A hint only, as there.
 */
export function leadingMsgpackApiKey(bytes: Uint8Array, keyBytesMax: number): string | undefined {
  let at = 0;
  const token = bytes[at++];
  if (token === 0xde) at += 2;
  else if (token === 0xdf) at += 4;
  else if (!(token >= 0x81 && token <= 0x8f)) return undefined;
  if (bytes[at] !== 0xa6 || Buffer.from(bytes.buffer, bytes.byteOffset + at + 1, Math.min(6, Math.max(0, bytes.length - at - 1))).toString("latin1") !== "apiKey") return undefined;
  at += 7;
  const header = bytes[at++];
  let length: number;
  if (header >= 0xa0 && header <= 0xbf) length = header - 0xa0;
  else if (header === 0xd9 && at < bytes.length) length = bytes[at++];
  else return undefined;
  if (length > keyBytesMax || at + length > bytes.length) return undefined;
  return Buffer.from(bytes.buffer, bytes.byteOffset + at, length).toString("utf8");
}
