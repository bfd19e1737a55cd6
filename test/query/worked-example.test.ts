/**
 * SPEC §5 end to end: the worked example's eight events go in through the real
 * ingest endpoint and every answer of §5 comes back, exactly, from the real
 * query endpoints.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ServerHandle, ingestAll, post, removeDataDir, startServer } from "../helpers/server.js";

const workedExampleEvents = [
  { distinctId: "u1", event: "signup", timestamp: "2024-01-01T10:00:00Z" },
  { distinctId: "u1", event: "view", timestamp: "2024-01-01T11:00:00Z" },
  { distinctId: "u1", event: "purchase", timestamp: "2024-01-03T09:00:00Z" },
  { distinctId: "u2", event: "signup", timestamp: "2024-01-02T08:00:00Z" },
  { distinctId: "u2", event: "purchase", timestamp: "2024-01-02T08:30:00Z" },
  { distinctId: "u3", event: "view", timestamp: "2024-01-09T00:00:00Z" },
  { distinctId: "u3", event: "signup", timestamp: "2024-01-09T01:00:00Z" },
  { distinctId: "u1", event: "view", timestamp: "2024-01-10T12:00:00Z" },
];

let server: ServerHandle | undefined;

beforeAll(async () => {
  server = await startServer();
  await ingestAll(server, workedExampleEvents);
});

afterAll(async () => {
  if (server === undefined) return;
  await server.stop();
  removeDataDir(server.dataDir);
});

async function query(kind: "trend" | "funnel" | "retention", body: object): Promise<unknown> {
  if (server === undefined) throw new Error("the server did not start");
  const response = await post(`${server.queryUrl}/api/v1/query/${kind}`, body, { token: server.token });
  expect(response.status, `${kind} ${JSON.stringify(body)} answered ${response.status} ${response.text}`).toBe(200);
  return response.body;
}

describe("the SPEC §5 worked example, over HTTP", () => {
  it("trend of signup per day over 2024-01-01..2024-01-03 is 1, 1, 0", async () => {
    expect(await query("trend", { event: "signup", dateFrom: "2024-01-01", dateTo: "2024-01-03", groupBy: "day" })).toEqual({
      data: [
        { date: "2024-01-01", count: 1 },
        { date: "2024-01-02", count: 1 },
        { date: "2024-01-03", count: 0 },
      ],
    });
  });

  it("funnel signup → view → purchase in a one-day window is 3, 1, 0", async () => {
    expect(
      await query("funnel", {
        steps: ["signup", "view", "purchase"],
        dateFrom: "2024-01-01",
        dateTo: "2024-01-31",
        conversionWindow: 86_400,
      }),
    ).toEqual({
      steps: [
        { event: "signup", count: 3, rate: 1 },
        { event: "view", count: 1, rate: 1 / 3 },
        { event: "purchase", count: 0, rate: 0 },
      ],
    });
  });

  it("funnel signup → view → purchase in a three-day window is 3, 1, 1", async () => {
    expect(
      await query("funnel", {
        steps: ["signup", "view", "purchase"],
        dateFrom: "2024-01-01",
        dateTo: "2024-01-31",
        conversionWindow: 259_200,
      }),
    ).toEqual({
      steps: [
        { event: "signup", count: 3, rate: 1 },
        { event: "view", count: 1, rate: 1 / 3 },
        { event: "purchase", count: 1, rate: 1 / 3 },
      ],
    });
  });

  it("funnel signup → purchase in a one-day window is 3, 1 (u2), also with the default window", async () => {
    const expected = {
      steps: [
        { event: "signup", count: 3, rate: 1 },
        { event: "purchase", count: 1, rate: 1 / 3 },
      ],
    };
    const range = { dateFrom: "2024-01-01", dateTo: "2024-01-31" };
    expect(await query("funnel", { steps: ["signup", "purchase"], ...range, conversionWindow: 86_400 })).toEqual(expected);
    expect(await query("funnel", { steps: ["signup", "purchase"], ...range })).toEqual(expected);
  });

  it("retention signup → view over two weeks has cohorts {2, [2, 1]} and {1, [1]}", async () => {
    const expected = {
      cohorts: [
        { cohortDate: "2024-01-01", total: 2, weeks: [2, 1] },
        { cohortDate: "2024-01-08", total: 1, weeks: [1] },
      ],
    };
    const body = { cohortEvent: "signup", retentionEvent: "view", dateFrom: "2024-01-01", dateTo: "2024-01-14" };
    expect(await query("retention", { ...body, windowDays: 7 })).toEqual(expected);
    expect(await query("retention", body)).toEqual(expected);
  });
});
