/**
 * Settings read from the environment when src/config/limits.ts loads: a bad
 * value stops the start-up with the variable's name, and only the rate limit
 * and the timestamp window take 0, which turns them off.
 */
import { afterEach, expect, it, vi } from "vitest";

const rateLimit = "EVENTIDE_RATE_LIMIT_EVENTS_PER_SECOND";
const batchEvents = "EVENTIDE_BATCH_EVENTS_MAX";

afterEach(() => {
  delete process.env[rateLimit];
  delete process.env[batchEvents];
  vi.resetModules();
});

/** The limits as a fresh start-up would read them from the current environment. */
async function loadLimits() {
  vi.resetModules();
  return (await import("../../src/config/limits.js")).limits;
}

it("reads the rate limit as on by default, off when 0, and as events per second otherwise", async () => {
  expect((await loadLimits()).rateLimitEventsPerSecond).toBe(1_000_000);
  process.env[rateLimit] = "0";
  expect((await loadLimits()).rateLimitEventsPerSecond).toBe(0);
  process.env[rateLimit] = "2500";
  expect((await loadLimits()).rateLimitEventsPerSecond).toBe(2500);
});

it("refuses a negative or fractional rate limit, naming the variable", async () => {
  for (const raw of ["-1", "1.5", "fast"]) {
    process.env[rateLimit] = raw;
    await expect(loadLimits()).rejects.toThrow(`${rateLimit} must be a non-negative integer (0: off), got "${raw}"`);
  }
});

it("refuses 0 for a bound, where it would mean nothing fits, and takes a small one", async () => {
  process.env[batchEvents] = "0";
  await expect(loadLimits()).rejects.toThrow(`${batchEvents} must be a positive integer, got "0"`);
  // Fewer events than the 100 errors a batch answer lists at most: fine, it lists them all.
  process.env[batchEvents] = "5";
  expect((await loadLimits()).batchEventsMax).toBe(5);
});

it("names both variables when two settings contradict each other", async () => {
  process.env.EVENTIDE_INGEST_BODY_BYTES_MAX = String(64 * 1024 * 1024);
  try {
    await expect(loadLimits()).rejects.toThrow("EVENTIDE_INGEST_BODY_BYTES_MAX must not exceed EVENTIDE_BATCH_BODY_BYTES_MAX");
  } finally {
    delete process.env.EVENTIDE_INGEST_BODY_BYTES_MAX;
  }
});

it("derives the segment cache from the memory there is, and splits it so that all threads together stay within it", async () => {
  const { totalmem } = await import("node:os");
  vi.resetModules();
  const module = await import("../../src/config/limits.js");
  expect(module.limits.segmentCacheBytesMax).toBeLessThanOrEqual(totalmem() / 2);
  for (const workers of [1, 2, 7, 64]) {
    expect(module.mainThreadSegmentCacheBytesMax + workers * module.workerSegmentCacheBytesMax(workers)).toBeLessThanOrEqual(module.limits.segmentCacheBytesMax);
  }
});
