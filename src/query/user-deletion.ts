/**
 * POST {base_url}/api/v1/users/delete: deletes every event of one distinctId
 * in the token's workspace (a privacy request, as PostHog's "delete person
 * with events" and Mixpanel's GDPR deletion). The body is checked here; the
 * store does the deletion (storage/user-deletion.ts).
 */
import { z } from "zod";
import { limits } from "../config/limits.js";
import type { ServiceError } from "../errors.js";
import { parseBody } from "../json/body.js";
import { firstIssue, messageOr } from "./schemas.js";

const distinctIdExpected = `expected a non-empty string of at most ${limits.distinctIdLengthMax} characters, or a finite number`;

export const userDeletionSchema = z.strictObject({
  distinctId: z
    .union([z.string().min(1, { error: distinctIdExpected }).max(limits.distinctIdLengthMax, { error: distinctIdExpected }), z.number().refine(Number.isFinite, { error: distinctIdExpected })], { error: messageOr(distinctIdExpected) })
    .describe("the user's id as ingested: a string, or a number (stored as String(n))"),
});

/** The distinctId a deletion body names, as the store keeps it (numbers as String(n)). */
export function parseUserDeletionBody(bytes: Uint8Array): { ok: true; distinctId: string } | { ok: false; error: ServiceError } {
  const parsed = parseBody(bytes, false, limits.queryBodyBytesMax);
  if (!("value" in parsed)) return { ok: false, error: parsed };
  const checked = userDeletionSchema.safeParse(parsed.value);
  if (!checked.success) return { ok: false, error: { code: "invalid_request", message: firstIssue(checked.error).message } };
  return { ok: true, distinctId: String(checked.data.distinctId) };
}
