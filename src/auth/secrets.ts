/**
 * Credentials at their smallest: how an API key or access token is minted and
 * how it is hashed for storage. The registry (registry.ts) stores only the
 * hashes; the server's credential store (credential-store.ts) hashes each
 * presented secret and looks the hash up.
 */
import { createHash, randomBytes } from "node:crypto";

export type SecretKind = "apiKey" | "token";

/**
 * A prefix tells the kinds apart at a glance (and in a leaked log line), the way
 * GitHub's `ghp_` and Stripe's `sk_` do: `ek_` is an ingest API key, `et_` an
 * access token for the query API.
 */
export const secretPrefixes: Readonly<Record<SecretKind, string>> = Object.freeze({
  apiKey: "ek_",
  token: "et_",
});

/** 32 random bytes = 256 bits, well past SPEC §0's 128-bit floor. */
export const secretEntropyBytes = 32;

/** Base64url of 32 bytes is 43 characters; anything much longer is not ours and is not worth hashing. */
export const secretLengthMax = 128;

export function newSecret(kind: SecretKind): string {
  return secretPrefixes[kind] + randomBytes(secretEntropyBytes).toString("base64url");
}

/**
 * SHA-256 hex of the whole secret, prefix included. A fast unsalted hash is the
 * right tool here, unlike for passwords: every secret carries 256 bits from
 * crypto.randomBytes, so there is no dictionary to try and brute force over the
 * hash is as hopeless as over the secret itself. Being fast and deterministic is
 * what lets the server find a credential by a single Map lookup on every request.
 */
export function secretHash(secret: string): string {
  return createHash("sha256").update(secret, "utf8").digest("hex");
}

/** The kind a secret claims by its prefix, so a misplaced one gets a helpful error. */
export function claimedSecretKind(secret: string): SecretKind | undefined {
  if (secret.startsWith(secretPrefixes.apiKey)) return "apiKey";
  if (secret.startsWith(secretPrefixes.token)) return "token";
  return undefined;
}
