/**
 * Per-workspace ingest rate limits (EVENTIDE_RATE_LIMIT_EVENTS_PER_SECOND, 1 M events per second
 * by default): a token bucket per workspace holding one second of events (at
 * least one full batch), checked on the main thread before a commit. Over the
 * limit, ingest answers 429 `rate_limited` with Retry-After and stores nothing
 * of the refused request; other workspaces are not affected; the bucket refills
 * at the configured rate.
 */
import { expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import { countEvents, elapsedUntil, eventideOk, expectError, ingestBatch, type HttpAnswer } from "../helpers/http.js";

const eventsPerSecond = 2000;
/** The bucket holds one second of events, and never less than a 1 000-event batch. */
const burstEvents = Math.max(eventsPerSecond, 1000);
const day = "2024-12-02";

const server = serverPerFile({ env: { EVENTIDE_RATE_LIMIT_EVENTS_PER_SECOND: String(eventsPerSecond) } });

function batch(event: string, size = 1000): object[] {
  return Array.from({ length: size }, (_, index) => ({ event, distinctId: `u${index}`, timestamp: `${day}T08:00:00Z` }));
}

/**
 * Sends rounds of `batchesPerRound` 1 000-event batches at once until a round
 * holds a refusal; each answer must be 200 (all accepted) or 429.
 * Concurrent, because one batch at a time may never drain the bucket: it
 * refills 2 000 events a second, so on a machine where a round trip takes
 * half a second (parse, fsync) sequential batches get a full refill each and
 * are all accepted. Eight at once need 8 000 events within one round, four
 * times the bucket.
 */
async function sendUntilRefused(event: string, batchesPerRound = 8, roundsMax = 10): Promise<{ accepted: number; refusal: HttpAnswer | undefined }> {
  let accepted = 0;
  let refusal: HttpAnswer | undefined;
  for (let round = 0; round < roundsMax && refusal === undefined; round++) {
    const answers = await Promise.all(Array.from({ length: batchesPerRound }, () => ingestBatch(server, server.apiKey, batch(event))));
    for (const answer of answers) {
      if (answer.status === 200) {
        expect(answer.body).toEqual({ ok: true, accepted: 1000 });
        accepted += 1000;
      } else {
        expect(answer.status, answer.text).toBe(429);
        refusal ??= answer;
      }
    }
  }
  return { accepted, refusal };
}

function expectRateLimited(answer: HttpAnswer): void {
  expectError(answer, 429, "rate_limited");
  expect(answer.headers["retry-after"]).toMatch(/^[1-9]\d*$/);
  expect(answer.headers["access-control-allow-origin"]).toBe("*");
}

it("refuses a workspace over its rate with 429 rate_limited and Retry-After, storing nothing of the refused batch, and leaves other workspaces alone", async () => {
  const other = await eventideOk(server.dataDir, "workspace", "create", "rate-other");
  // Set-up: the new workspace's key must be known before its bucket is tested (an empty batch costs no tokens).
  await elapsedUntil(async () => (await ingestBatch(server, other.apiKey, [])).status === 200, 5000);

  const startedMs = performance.now();
  const { accepted, refusal } = await sendUntilRefused("limited");
  const elapsedSeconds = (performance.now() - startedMs) / 1000;
  expect(refusal, "no batch was refused").toBeDefined();
  expectRateLimited(refusal!);
  // A token bucket never lets more through than its burst plus what it refilled meanwhile (the bucket is
  // checked between the first batch's send and the last one's answer, so that span bounds the refill).
  expect(accepted).toBeGreaterThanOrEqual(burstEvents);
  expect(accepted).toBeLessThanOrEqual(burstEvents + eventsPerSecond * elapsedSeconds);

  // Another workspace has its own bucket.
  expect((await ingestBatch(server, other.apiKey, batch("other-workspace"))).status).toBe(200);

  // Nothing of the refused batch was stored.
  expect(await countEvents(server, server.token, "limited", day)).toBe(accepted);
});

it("accepts the workspace again once the bucket has refilled (after Retry-After)", async () => {
  // Drain, then wait as the answer says (from when every batch of the round was answered: none takes tokens later).
  const { refusal } = await sendUntilRefused("drain");
  expect(refusal, "no batch was refused").toBeDefined();
  expectRateLimited(refusal!);
  const retryAfterSeconds = Number(refusal!.headers["retry-after"]);
  await new Promise((resolve) => setTimeout(resolve, retryAfterSeconds * 1000));
  const after = await ingestBatch(server, server.apiKey, batch("after-wait"));
  expect(after.status, after.text).toBe(200);
  expect(after.body).toEqual({ ok: true, accepted: 1000 });
  expect(await countEvents(server, server.token, "after-wait", day)).toBe(1000);
});
