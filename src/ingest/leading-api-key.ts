/**
 * The apiKey a batch body opens with, found on the main thread in a few bytes
 * so that an unknown key is known before a worker parses 20 MiB (SDKs and
 * SPEC's own example write `{"apiKey":"…",` first). Only the plain form is
 * read — no escapes, at most leadingApiKeyBytesMax bytes; anything else is
 * left to the worker. What this finds is a hint: JSON.parse keeps the last of
 * duplicate members, so the worker confirms the key after checking the
 * body's syntax (event-validation.ts).
 */

/** Longer keys than this are not looked for here (ours are 43 characters). */
const leadingApiKeyBytesMax = 256;
const prefix = Buffer.from('"apiKey"', "latin1");

function skipWhitespace(bytes: Uint8Array, position: number): number {
  while (position < bytes.length && (bytes[position] === 0x20 || bytes[position] === 0x0a || bytes[position] === 0x0d || bytes[position] === 0x09)) position++;
  return position;
}

/** The string value of the body's first member when that is a plainly written `apiKey`; undefined otherwise. */
export function leadingApiKey(bytes: Uint8Array): string | undefined {
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
