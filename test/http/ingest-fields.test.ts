/**
 * SPEC §2 event fields through the real ingest endpoints: what each field
 * accepts and refuses (at exactly its limit and one past), and what is stored,
 * checked by querying it back rather than trusting the 200.
 */
import { describe, expect, it } from "vitest";
import { serverPerFile } from "../helpers/server.js";
import {
  countEvents,
  expectError,
  expectOk,
  ingestBatch,
  ingestOne,
  send,
  sendJson,
  trendData,
  uniqueName,
  utcDate,
} from "../helpers/http.js";

// SPEC §2's whole 1970–9999 range: by default the server refuses timestamps over a day ahead (test/http/cardinality-caps.test.ts).
const server = serverPerFile({ env: { EVENTIDE_TIMESTAMP_FUTURE_DAYS: "0" } });

const day = "2024-05-01";
const at = `${day}T12:00:00Z`;

function ingest(event: Record<string, unknown>) {
  return ingestOne(server, server.apiKey, event);
}

async function expectStoredOnce(event: string, date = day): Promise<void> {
  expect(await countEvents(server, server.token, event, date)).toBe(1);
}

async function expectNotStored(event: string, date = day): Promise<void> {
  expect(await countEvents(server, server.token, event, date)).toBe(0);
}

describe("event", () => {
  it.each([
    ["one character", "a"],
    ["exactly 200 characters", "e".repeat(200)],
    ["200 UTF-16 units of 100 astral characters (400 UTF-8 bytes)", "😀".repeat(100)],
    ["200 two-byte characters", "é".repeat(200)],
  ])("accepts a name of %s and stores it under that exact name", async (_, name) => {
    // Names are shared across tests, so count before and after.
    const before = await countEvents(server, server.token, name, day);
    expectOk(await ingest({ event: name, distinctId: "u", timestamp: at }));
    expect(await countEvents(server, server.token, name, day)).toBe(before + 1);
  });

  it.each([
    ["missing", undefined],
    ["empty", ""],
    ["201 characters", "e".repeat(201)],
    ["201 UTF-16 units (100 astral characters and one more)", `${"😀".repeat(100)}a`],
    ["a number", 5],
    ["null", null],
    ["a boolean", true],
    ["an object", { name: "signup" }],
    ["an array", ["signup"]],
  ])("refuses a name that is %s with 400 invalid_request naming event", async (_, name) => {
    expectError(await ingest({ event: name, distinctId: "u", timestamp: at }), 400, "invalid_request", "event");
  });

  it("stores nothing when the event name is one character too long", async () => {
    const name = uniqueName("long").padEnd(201, "x");
    expectError(await ingest({ event: name, distinctId: "u", timestamp: at }), 400, "invalid_request", "event");
    await expectNotStored(name);
  });
});

describe("distinctId", () => {
  it.each([
    ["one character", "u"],
    ["exactly 200 characters", "d".repeat(200)],
    ["200 UTF-16 units of astral characters", "👤".repeat(100)],
    ["an integer", 5],
    ["zero", 0],
    ["a negative fraction", -3.5],
    ["a large number", 1e21],
  ])("accepts a distinctId that is %s", async (_, distinctId) => {
    const event = uniqueName("distinct-ok");
    expectOk(await ingest({ event, distinctId, timestamp: at }));
    await expectStoredOnce(event);
  });

  it.each([
    ["missing", undefined],
    ["empty", ""],
    ["201 characters", "d".repeat(201)],
    ["null", null],
    ["a boolean", false],
    ["an object", { id: 1 }],
    ["an array", [1]],
  ])("refuses a distinctId that is %s with 400 invalid_request naming distinctId", async (_, distinctId) => {
    const event = uniqueName("distinct-bad");
    expectError(await ingest({ event, distinctId, timestamp: at }), 400, "invalid_request", "distinctId");
    await expectNotStored(event);
  });

  it.each(["1e999", "-1e999"])("refuses the non-finite number %s (JSON.parse makes it Infinity)", async (literal) => {
    const event = uniqueName("distinct-infinite");
    const body = `{"apiKey":${JSON.stringify(server.apiKey)},"event":${JSON.stringify(event)},"distinctId":${literal},"timestamp":"${at}"}`;
    expectError(await send(`${server.ingestUrl}/ingest`, { body }), 400, "invalid_request", "distinctId");
    await expectNotStored(event);
  });

  async function uniqueUsers(distinctIdLiterals: string[]): Promise<{ total: number; unique: number }> {
    const event = uniqueName("same-user");
    const events = distinctIdLiterals.map((literal) => `{"event":${JSON.stringify(event)},"distinctId":${literal},"timestamp":"${at}"}`);
    const body = `{"apiKey":${JSON.stringify(server.apiKey)},"events":[${events.join(",")}]}`;
    expect(expectOk(await send(`${server.ingestUrl}/ingest/batch`, { body }))).toEqual({ ok: true, accepted: distinctIdLiterals.length });
    return {
      total: await countEvents(server, server.token, event, day, day, "total"),
      unique: await countEvents(server, server.token, event, day, day, "unique"),
    };
  }

  it("stores a number as String(n), so 5 and \"5\" are the same user", async () => {
    expect(await uniqueUsers(["5", '"5"'])).toEqual({ total: 2, unique: 1 });
  });

  it("stores 1.50 as \"1.5\", 1e21 as \"1e+21\" and -0 as \"0\"", async () => {
    expect(await uniqueUsers(["1.50", '"1.5"'])).toEqual({ total: 2, unique: 1 });
    expect(await uniqueUsers(["1e21", '"1e+21"'])).toEqual({ total: 2, unique: 1 });
    expect(await uniqueUsers(["-0", '"0"'])).toEqual({ total: 2, unique: 1 });
  });

  it("keeps 5 and \"5.0\" apart, since String(5) is \"5\"", async () => {
    expect(await uniqueUsers(["5", '"5.0"'])).toEqual({ total: 2, unique: 2 });
  });
});

describe("timestamp", () => {
  /** The one hour bucket (of 2024-04-30..2024-05-02) that holds the event. */
  async function hourOf(timestamp: string): Promise<string[]> {
    const event = uniqueName("hour");
    expectOk(await ingest({ event, distinctId: "u", timestamp }));
    const data = await trendData(server, server.token, { event, dateFrom: "2024-04-30", dateTo: "2024-05-02", groupBy: "hour" });
    return data.filter((bucket) => bucket.count !== 0).map((bucket) => `${bucket.date} ×${bucket.count}`);
  }

  it.each([
    ["2024-05-01T12:00:00Z", "2024-05-01 12:00:00"],
    ["2024-05-01T12:00:00z", "2024-05-01 12:00:00"],
    ["2024-05-01T12:00:00+02:00", "2024-05-01 10:00:00"],
    ["2024-05-01T12:00:00-05:30", "2024-05-01 17:00:00"],
    ["2024-05-01T12:00:00.123+02:00", "2024-05-01 10:00:00"],
    ["2024-05-01T12:00:00", "2024-05-01 12:00:00"],
    ["2024-05-01T12:34:56.789", "2024-05-01 12:00:00"],
    ["2024-05-01T23:59:59.999Z", "2024-05-01 23:00:00"],
    ["2024-05-02T01:00:00+02:00", "2024-05-01 23:00:00"],
    ["2024-04-30T22:00:00-05:00", "2024-05-01 03:00:00"],
  ])("stores %s in the UTC hour %s", async (timestamp, hour) => {
    expect(await hourOf(timestamp)).toEqual([`${hour} ×1`]);
  });

  it("keeps milliseconds: 3 600 s + 1 ms falls outside a 3 600 s funnel window, 3 600 s exactly does not", async () => {
    const [first, second] = [uniqueName("ms-first"), uniqueName("ms-second")];
    const events = [
      { event: first, distinctId: "over", timestamp: "2024-05-01T00:00:00.000Z" },
      { event: second, distinctId: "over", timestamp: "2024-05-01T01:00:00.001Z" },
      { event: first, distinctId: "exact", timestamp: "2024-05-01T00:00:00.000Z" },
      { event: second, distinctId: "exact", timestamp: "2024-05-01T01:00:00.000Z" },
      // 02:00:00.500+02:00 is 00:00:00.500Z: the offset and the fraction both count.
      { event: first, distinctId: "offset", timestamp: "2024-05-01T02:00:00.500+02:00" },
      { event: second, distinctId: "offset", timestamp: "2024-05-01T01:00:00.500Z" },
      { event: first, distinctId: "offset-over", timestamp: "2024-05-01T02:00:00.499+02:00" },
      { event: second, distinctId: "offset-over", timestamp: "2024-05-01T01:00:00.500Z" },
    ];
    expect(expectOk(await ingestBatch(server, server.apiKey, events))).toEqual({ ok: true, accepted: events.length });
    const answer = await sendJson(`${server.queryUrl}/api/v1/query/funnel`, { steps: [first, second], dateFrom: day, dateTo: day, conversionWindow: 3600 }, { token: server.token });
    expect(expectOk(answer).steps.map((step: { count: number }) => step.count)).toEqual([4, 2]);
  });

  it.each([
    ["the first millisecond of 1970", "1970-01-01T00:00:00Z", "1970-01-01"],
    ["1969 in its zone but 1970 in UTC", "1969-12-31T23:30:00-01:00", "1970-01-01"],
    ["the last millisecond of 9999", "9999-12-31T23:59:59.999Z", "9999-12-31"],
    ["a leap day", "2024-02-29T12:00:00Z", "2024-02-29"],
  ])("accepts %s (%s) and counts it on %s", async (_, timestamp, date) => {
    const event = uniqueName("edge-year");
    expectOk(await ingest({ event, distinctId: "u", timestamp }));
    await expectStoredOnce(event, date);
  });

  it.each([
    ["February 30", "2024-02-30T12:00:00Z"],
    ["February 29 of a common year", "2023-02-29T12:00:00Z"],
    ["month 13", "2024-13-01T12:00:00Z"],
    ["month 0", "2024-00-10T12:00:00Z"],
    ["day 0", "2024-05-00T12:00:00Z"],
    ["hour 25", "2024-05-01T25:00:00Z"],
    ["minute 60", "2024-05-01T12:60:00Z"],
    ["the last millisecond of 1969", "1969-12-31T23:59:59.999Z"],
    ["1970 in its zone but 1969 in UTC", "1970-01-01T00:30:00+01:00"],
    ["year 0", "0000-01-01T00:00:00Z"],
    ["year 10000", "10000-01-01T00:00:00Z"],
    ["9999 in its zone but 10000 in UTC", "9999-12-31T23:00:00-02:00"],
    ["a word", "yesterday"],
    ["empty", ""],
    ["trailing garbage", "2024-05-01T12:00:00Zjunk"],
    ["a number (epoch milliseconds)", 1714564800000],
    ["a boolean", true],
    ["an object", { iso: "2024-05-01T12:00:00Z" }],
  ])("refuses %s (%j) with 400 invalid_request naming timestamp", async (_, timestamp) => {
    expectError(await ingest({ event: "bad-timestamp", distinctId: "u", timestamp }), 400, "invalid_request", "timestamp");
  });

  it("uses the server's time at receipt when the timestamp is absent", async () => {
    const event = uniqueName("now");
    const beforeMs = Date.now();
    expectOk(await ingest({ event, distinctId: "u" }));
    const afterMs = Date.now();
    const data = await trendData(server, server.token, { event, dateFrom: utcDate(beforeMs), dateTo: utcDate(afterMs), groupBy: "hour" });
    const hours = data.filter((bucket) => bucket.count !== 0);
    expect(hours).toHaveLength(1);
    expect(hours[0].count).toBe(1);
    const hourStartMs = Date.parse(`${hours[0].date.replace(" ", "T")}Z`);
    expect(hourStartMs).toBeGreaterThanOrEqual(Math.floor(beforeMs / 3_600_000) * 3_600_000);
    expect(hourStartMs).toBeLessThanOrEqual(afterMs);
  });
});

describe("properties", () => {
  it.each([
    ["an array", [{ plan: "pro" }]],
    ["an empty array", []],
    ["a string", "plan=pro"],
    ["a number", 5],
    ["a boolean", true],
  ])("refuses properties that are %s with 400 invalid_request naming properties", async (_, properties) => {
    const event = uniqueName("properties-bad");
    expectError(await ingest({ event, distinctId: "u", timestamp: at, properties }), 400, "invalid_request", "properties");
    await expectNotStored(event);
  });

  it("accepts an empty object and nested values", async () => {
    const event = uniqueName("properties-ok");
    expectOk(await ingest({ event, distinctId: "u", timestamp: at, properties: {} }));
    expectOk(await ingest({ event, distinctId: "u", timestamp: at, properties: { cart: { items: [1, 2] }, paid: true, total: 9.5, note: null } }));
    expect(await countEvents(server, server.token, event, day)).toBe(2);
  });

  /** `{"p":"…"}` is 8 bytes of JSON around the string's escaped UTF-8 form. */
  const sizes = [
    ["ASCII", (count: number) => "x".repeat(count - 8)],
    ["two-byte UTF-8 (bytes, not characters, count)", (count: number) => "é".repeat(Math.floor((count - 8) / 2)) + "x".repeat((count - 8) % 2)],
    ["quotes, escaped as two bytes each", (count: number) => '"'.repeat(Math.floor((count - 8) / 2)) + "x".repeat((count - 8) % 2)],
  ] as const;

  it.each(sizes)("accepts properties of exactly 65 536 bytes of compact JSON (%s) and stores them", async (_, valueOfSize) => {
    const event = uniqueName("properties-max");
    const properties = { p: valueOfSize(65_536) };
    expect(Buffer.byteLength(JSON.stringify(properties), "utf8")).toBe(65_536);
    expectOk(await ingest({ event, distinctId: "u", timestamp: at, properties }));
    const data = await trendData(server, server.token, { event, dateFrom: day, dateTo: day, filters: [{ property: "p", op: "eq", value: properties.p }] });
    expect(data).toEqual([{ date: day, count: 1 }]);
  });

  it.each(sizes)("refuses properties of 65 537 bytes of compact JSON (%s)", async (_, valueOfSize) => {
    const event = uniqueName("properties-over");
    const properties = { p: valueOfSize(65_537) };
    expect(Buffer.byteLength(JSON.stringify(properties), "utf8")).toBe(65_537);
    expectError(await ingest({ event, distinctId: "u", timestamp: at, properties }), 400, "invalid_request", "properties");
    await expectNotStored(event);
  });

  it("measures properties compact: whitespace in the request does not count", async () => {
    const event = uniqueName("properties-spaced");
    const value = "x".repeat(65_536 - 8);
    const spaced = `{ "p" :   ${JSON.stringify(value)}   }`;
    const body = `{"apiKey":${JSON.stringify(server.apiKey)},"event":${JSON.stringify(event)},"distinctId":"u","timestamp":"${at}","properties":${spaced}}`;
    expectOk(await send(`${server.ingestUrl}/ingest`, { body }));
    await expectStoredOnce(event);
  });

  it("skips an oversize properties object in a batch and keeps its neighbours", async () => {
    const event = uniqueName("properties-batch");
    const events = [
      { event, distinctId: "a", timestamp: at },
      { event, distinctId: "b", timestamp: at, properties: { p: "x".repeat(65_537 - 8) } },
      { event, distinctId: "c", timestamp: at, properties: { p: "x".repeat(65_536 - 8) } },
    ];
    const body = expectOk(await ingestBatch(server, server.apiKey, events));
    expect(body.accepted).toBe(2);
    expect(body.errors).toEqual([{ index: 1, code: "invalid_request", message: expect.stringContaining("properties") }]);
    expect(await countEvents(server, server.token, event, day)).toBe(2);
  });
});

describe("a deeply nested properties value (30 000 levels in 60 KB, under the 64 KiB limit)", () => {
  const nested = "[".repeat(30_000) + "]".repeat(30_000);
  const rawEvent = (event: string, distinctId: string) => `{"event":${JSON.stringify(event)},"distinctId":"${distinctId}","timestamp":"${at}","properties":{"p":${nested}}}`;

  it("is judged on its own: stored (200) or refused (400), never a 500", async () => {
    const event = uniqueName("deep");
    const answer = await send(`${server.ingestUrl}/ingest`, { body: `{"apiKey":${JSON.stringify(server.apiKey)},${rawEvent(event, "u").slice(1)}` });
    expect([200, 400], answer.text).toContain(answer.status);
    expect(await countEvents(server, server.token, event, day)).toBe(answer.status === 200 ? 1 : 0);
  });

  it("does not fail its neighbours in a batch", async () => {
    const event = uniqueName("deep-neighbours");
    const neighbour = JSON.stringify({ event, distinctId: "a", timestamp: at });
    const body = `{"apiKey":${JSON.stringify(server.apiKey)},"events":[${neighbour},${rawEvent(event, "b")},${neighbour.replace('"a"', '"c"')}]}`;
    const answer = await send(`${server.ingestUrl}/ingest/batch`, { body });
    expect(answer.status, answer.text).toBe(200);
    expect([2, 3]).toContain(answer.body.accepted);
    expect(await countEvents(server, server.token, event, day)).toBe(answer.body.accepted);
  });

  it("does not fail other clients' single events sent at the same moment", async () => {
    const event = uniqueName("deep-bystanders");
    const answers = await Promise.all([
      ...Array.from({ length: 8 }, (_, index) => ingest({ event, distinctId: `before${index}`, timestamp: at })),
      send(`${server.ingestUrl}/ingest`, { body: `{"apiKey":${JSON.stringify(server.apiKey)},${rawEvent(uniqueName("deep-culprit"), "u").slice(1)}` }),
      ...Array.from({ length: 8 }, (_, index) => ingest({ event, distinctId: `after${index}`, timestamp: at })),
    ]);
    const bystanders = answers.filter((_, index) => index !== 8);
    expect(bystanders.map((answer) => answer.status)).toEqual(Array.from({ length: 16 }, () => 200));
    expect(await countEvents(server, server.token, event, day)).toBe(16);
  });
});

describe("an event name holding a lone surrogate (valid JSON, not valid Unicode)", () => {
  it("is refused with 400, or stored under a name that a query for the same string finds", async () => {
    const event = `${uniqueName("lone")}\\ud800`;
    const answer = await send(`${server.ingestUrl}/ingest`, { body: `{"apiKey":${JSON.stringify(server.apiKey)},"event":"${event}","distinctId":"u","timestamp":"${at}"}` });
    expect([200, 400], answer.text).toContain(answer.status);
    const trend = await send(`${server.queryUrl}/api/v1/query/trend`, { token: server.token, body: `{"event":"${event}","dateFrom":"${day}","dateTo":"${day}"}` });
    expect(trend.status).toBe(200);
    expect(trend.body.data[0].count).toBe(answer.status === 200 ? 1 : 0);
  });
});

describe("uuid", () => {
  const uuid = () => crypto.randomUUID();

  it("acknowledges a uuid repeated in one batch, counts it in accepted, and stores it once", async () => {
    const event = uniqueName("uuid-batch");
    const [repeated, other] = [uuid(), uuid()];
    const events = [
      { event, distinctId: "u", timestamp: at, uuid: repeated },
      { event, distinctId: "u", timestamp: at, uuid: other },
      { event, distinctId: "u", timestamp: at, uuid: repeated },
    ];
    expect(expectOk(await ingestBatch(server, server.apiKey, events))).toEqual({ ok: true, accepted: 3 });
    expect(await countEvents(server, server.token, event, day)).toBe(2);
  });

  it("stores nothing new when a whole batch is retried", async () => {
    const event = uniqueName("uuid-retry");
    const events = Array.from({ length: 50 }, (_, index) => ({ event, distinctId: `u${index}`, timestamp: at, uuid: uuid() }));
    expect(expectOk(await ingestBatch(server, server.apiKey, events))).toEqual({ ok: true, accepted: 50 });
    expect(expectOk(await ingestBatch(server, server.apiKey, events))).toEqual({ ok: true, accepted: 50 });
    expect(await countEvents(server, server.token, event, day)).toBe(50);
  });

  it("compares uuids case-insensitively, in a batch and against stored events", async () => {
    const event = uniqueName("uuid-case");
    const id = uuid();
    expect(expectOk(await ingestBatch(server, server.apiKey, [
      { event, distinctId: "u", timestamp: at, uuid: id },
      { event, distinctId: "u", timestamp: at, uuid: id.toUpperCase() },
    ]))).toEqual({ ok: true, accepted: 2 });
    expectOk(await ingest({ event, distinctId: "u", timestamp: at, uuid: id.toUpperCase() }));
    expect(await countEvents(server, server.token, event, day)).toBe(1);
  });

  it("stores a single /ingest retried with the same uuid once, even when the retries race", async () => {
    const event = uniqueName("uuid-single");
    const id = uuid();
    const answers = await Promise.all(Array.from({ length: 8 }, () => ingest({ event, distinctId: "u", timestamp: at, uuid: id })));
    for (const answer of answers) expect(expectOk(answer)).toEqual({ ok: true });
    expectOk(await ingest({ event, distinctId: "u", timestamp: at, uuid: id }));
    expect(await countEvents(server, server.token, event, day)).toBe(1);
  });

  it("stores events without a uuid every time they are sent", async () => {
    const event = uniqueName("uuid-none");
    const body = { event, distinctId: "u", timestamp: at };
    expectOk(await ingest(body));
    expectOk(await ingest(body));
    expect(await countEvents(server, server.token, event, day)).toBe(2);
  });

  it.each([
    ["not a UUID", "not-a-uuid"],
    ["empty", ""],
    ["one hex digit short", "0190a6d4-1234-7abc-89de-0123456789a"],
    ["not hexadecimal", "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"],
    ["a number", 12345],
    ["an object", { uuid: "0190a6d4-1234-7abc-89de-0123456789ab" }],
  ])("refuses a uuid that is %s with 400 invalid_request naming uuid", async (_, value) => {
    const event = uniqueName("uuid-bad");
    expectError(await ingest({ event, distinctId: "u", timestamp: at, uuid: value }), 400, "invalid_request", "uuid");
    await expectNotStored(event);
  });
});

describe("unknown fields", () => {
  it("are ignored on the body, the envelope and each event", async () => {
    const event = uniqueName("unknown-fields");
    expectOk(await sendJson(`${server.ingestUrl}/ingest`, { apiKey: server.apiKey, event, distinctId: "u", timestamp: at, library: "web", $set: { a: 1 } }));
    const batch = await sendJson(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, sentAt: "now", events: [{ event, distinctId: "u", timestamp: at, extra: [1] }] });
    expect(expectOk(batch)).toEqual({ ok: true, accepted: 1 });
    expect(await countEvents(server, server.token, event, day)).toBe(2);
  });
});
