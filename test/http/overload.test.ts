/**
 * SPEC §1 503 overloaded: a saturated server refuses with Retry-After rather
 * than buffering, and a refused batch stores nothing. The default queue (256
 * tasks) is too deep to fill from a test, so this server runs one worker with a
 * one-task queue (EVENTIDE_WORKER_QUEUE_TASKS_MAX); the answer's rules are the
 * same at any depth.
 */
import { expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import { countEvents, expectError, ingestBatch, type HttpAnswer } from "../helpers/http.js";

const server = serverPerFile({ workers: 1, env: { EVENTIDE_WORKER_QUEUE_TASKS_MAX: "1" } });

const day = "2024-10-01";

it("refuses work beyond the queue with 503 overloaded and Retry-After, storing nothing of a refused batch", async () => {
  const requestCount = 60;
  const perRequest = 1000;
  const answers: HttpAnswer[] = await Promise.all(
    Array.from({ length: requestCount }, (_, index) =>
      ingestBatch(
        server,
        server.apiKey,
        Array.from({ length: perRequest }, (_, row) => ({ event: `load-${index}`, distinctId: `u${row}`, timestamp: `${day}T00:00:00Z`, properties: { row } })),
      ),
    ),
  );
  let refused = 0;
  for (let index = 0; index < requestCount; index++) {
    const answer = answers[index];
    const stored = await countEvents(server, server.token, `load-${index}`, day);
    if (answer.status === 200) {
      expect(answer.body).toEqual({ ok: true, accepted: perRequest });
      expect(stored).toBe(perRequest);
    } else {
      refused++;
      expectError(answer, 503, "overloaded");
      expect(answer.headers["retry-after"]).toMatch(/^[1-9]\d*$/);
      expect(answer.headers["access-control-allow-origin"]).toBe("*");
      expect(stored, `batch ${index} was refused`).toBe(0);
    }
  }
  expect(refused).toBeGreaterThan(0);
  expect(refused).toBeLessThan(requestCount);
});
