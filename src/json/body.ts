/**
 * Request body decoding shared by ingest and query: gzip inflated under a hard
 * output cap, UTF-8 checked, JSON parsed into an object. It lives apart from
 * both so that neither owns what the other needs (SPEC §1's body rules).
 */
import { isUtf8 } from "node:buffer";
import { gunzipSync } from "node:zlib";
import type { ServiceError } from "../errors.js";

/** Inflates (when gzip) and parses a body with JSON.parse; a ServiceError result is the rejection. */
export function parseBody(bytes: Uint8Array, gzip: boolean, maxBytes: number): { value: unknown } | ServiceError {
  const plain = plainUtf8Body(bytes, gzip, maxBytes);
  return plain instanceof Uint8Array ? parseJsonObject(plain) : plain;
}

export function parseJsonObject(plain: Uint8Array): { value: unknown } | ServiceError {
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(plain.buffer, plain.byteOffset, plain.byteLength).toString("utf8"));
  } catch {
    return invalidJson;
  }
  return value === null || typeof value !== "object" || Array.isArray(value) ? notAnObject : { value };
}

export const invalidJson: ServiceError = { code: "invalid_json", message: "body is not valid JSON" };
export const notAnObject: ServiceError = { code: "invalid_json", message: "body must be a JSON object" };

/** The body's bytes, inflated when gzip, checked to be UTF-8 and within `maxBytes`. */
export function plainUtf8Body(bytes: Uint8Array, gzip: boolean, maxBytes: number): Uint8Array | ServiceError {
  const plain = inflatedBody(bytes, gzip, maxBytes);
  // Invalid UTF-8 is refused rather than silently replaced, so what is stored is what was sent.
  if (plain instanceof Uint8Array && !isUtf8(plain)) return { code: "invalid_json", message: "body is not valid UTF-8" };
  return plain;
}

/** The body's bytes, inflated when gzip, within `maxBytes` (a msgpack body's strings are checked one by one). */
export function inflatedBody(bytes: Uint8Array, gzip: boolean, maxBytes: number): Uint8Array | ServiceError {
  let plain: Uint8Array = bytes;
  if (gzip) {
    try {
      // maxOutputLength stops inflation at the limit, so a gzip bomb costs at most maxBytes of memory.
      plain = gunzipSync(bytes, { maxOutputLength: maxBytes });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE") {
        return { code: "payload_too_large", message: `body is larger than ${maxBytes} bytes after decompression` };
      }
      return { code: "invalid_json", message: "body is not valid gzip" };
    }
    if (plain.length > maxBytes) {
      return { code: "payload_too_large", message: `body is larger than ${maxBytes} bytes after decompression` };
    }
  }
  return plain;
}
