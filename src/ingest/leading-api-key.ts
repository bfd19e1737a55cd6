/**
 * The apiKey a batch body opens with, found on the main thread in a few bytes
 * so that an unknown key is known before a worker parses 20 MiB (SDKs and
 * SPEC's own example write `{"apiKey":"…",` first; a gzip body's opening is
 * inflated for it). Only the plain form is read — no escapes, at most
 * leadingApiKeyBytesMax bytes; a body whose key is not read here has it read
 * by a worker before any parse (BatchKeyCheck). A key found here is a hint:
 * JSON.parse keeps the last of duplicate members, so an unknown one is
 * confirmed after the body's syntax is checked (checkBatchApiKey).
 */

import { constants, gunzipSync } from "node:zlib";
import { leadingMsgpackApiKey, type BodyFormat } from "../json/msgpack-body.js";

/** Longer keys than this are not looked for here (ours are 43 characters). */
const leadingApiKeyBytesMax = 256;
const prefix = Buffer.from('"apiKey"', "latin1");

function skipWhitespace(bytes: Uint8Array, position: number): number {
  while (position < bytes.length && (bytes[position] === 0x20 || bytes[position] === 0x0a || bytes[position] === 0x0d || bytes[position] === 0x09)) position++;
  return position;
}

/**
 * A gzip body's opening is inflated from at most this much of it into at most
 * inflatedPrefixBytesMax, in small chunks so that a bomb stops there: ~10 µs
 * for an ordinary batch, ~60 µs for a bomb. (A prefix that inflates past the
 * cap is left to the worker, as any body whose key is not read here.)
 */
const gzipPrefixBytesMax = 256;
const inflatedPrefixBytesMax = 4096;
const inflateChunkBytes = 1024;

/** The string value of the body's first member when that is a plainly written `apiKey`; undefined otherwise. */
export function leadingApiKey(body: Uint8Array, gzip: boolean, format: BodyFormat = "json"): string | undefined {
  const plainLeadingApiKey = format === "msgpack" ? (bytes: Uint8Array) => leadingMsgpackApiKey(bytes, leadingApiKeyBytesMax) : plainLeadingJsonApiKey;
  if (!gzip) return plainLeadingApiKey(body);
  let prefix: Buffer;
  try {
    // Z_SYNC_FLUSH: a truncated stream inflates as far as it goes instead of failing.
    prefix = gunzipSync(body.subarray(0, gzipPrefixBytesMax), { finishFlush: constants.Z_SYNC_FLUSH, chunkSize: inflateChunkBytes, maxOutputLength: inflatedPrefixBytesMax });
  } catch {
    // Corrupt, or more than the prefix: the worker reads it and says which.
    return undefined;
  }
  return plainLeadingApiKey(prefix);
}

function plainLeadingJsonApiKey(bytes: Uint8Array): string | undefined {
  let position = skipWhitespace(bytes, 0);
  if (bytes[position] !== 0x7b) return undefined;
  position = skipWhitespace(bytes, position + 1);
  for (let index = 0; index < prefix.length; index++) if (bytes[position + index] !== prefix[index]) return undefined;
  position = skipWhitespace(bytes, position + prefix.length);
  if (bytes[position] !== 0x3a) return undefined;
  position = skipWhitespace(bytes, position + 1);
  if (bytes[position] !== 0x22) return undefined;
  const start = position + 1;
  const limit = Math.min(bytes.length, start + leadingApiKeyBytesMax);
  for (let end = start; end < limit; end++) {
    const byte = bytes[end];
    if (byte === 0x22) return Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString("utf8");
    if (byte === 0x5c || byte < 0x20) return undefined;
  }
  return undefined;
}
