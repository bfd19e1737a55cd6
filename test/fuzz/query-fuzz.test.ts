/**
 * Property-based tests of the query API against one real server holding a
 * seeded data set: trend, funnel and retention bodies with every field fuzzed
 * (types, dates real and impossible, ops, steps, windows, `__proto__` keys,
 * raw bytes), EVENTIDE_FUZZ_RUNS cases per property (fuzz-support.ts).
 *
 * Each body is judged by a model of SPEC §4 (query-model.ts): an invalid one
 * must be a 400 in SPEC §1's shape naming one of the offending fields, a valid
 * one must answer exactly what the naive reference (test/reference) computes
 * from the same events. No answer may be a 5xx or a dropped connection; how
 * long answers take is printed at the end, not asserted (fuzz-support.ts).
 */
import fc from "fast-check";
import { isDeepStrictEqual } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { referenceFunnel, referenceRetention, referenceTrend, type StoredEvent } from "../reference/reference.js";
import { Random, generateDataset, numericFilterValues, toStoredEvents, toWireEvent, type GeneratedDataset } from "../helpers/random.js";
import { ingestAll, type ServerHandle } from "../helpers/server.js";
import { parseJsonBytes } from "./event-model.js";
import {
  check,
  checkAnswer,
  checkStatus,
  finishFuzzing,
  fuzzParameters,
  fuzzRuns,
  hostileNumberLiterals,
  hostileValues,
  invalidUtf8Sequences,
  nestedJson,
  objectOf,
  oddText,
  preview,
  propertyTimeoutMs,
  request,
  startServerForFuzzing,
  Tally,
  type Answer,
  warmUp,
} from "./fuzz-support.js";
import { expectQuery, type QueryKind } from "./query-model.js";

const dayMs = 86_400_000;
const datasetSeed = 20_250_301;

let server: ServerHandle;
let dataset: GeneratedDataset;
let stored: StoredEvent[];
const tallies = { trend: new Tally(), funnel: new Tally(), retention: new Tally(), auth: new Tally(), deep: new Tally() };

beforeAll(async () => {
  server = await startServerForFuzzing();
  const random = new Random(datasetSeed);
  dataset = generateDataset(random);
  stored = toStoredEvents(dataset.events);
  await ingestAll(server, dataset.events.map((event) => toWireEvent(random, event)));
  await warmUp(server);
});

afterAll(() => finishFuzzing(server, tallies));

// ---------------------------------------------------------------------------
// Generators. Arbitraries that need the data set are built lazily, after beforeAll.

/** Marks a field left out of the body. */
const absent = Symbol("absent");

function bodyOf(fields: Record<string, unknown>): Record<string, unknown> {
  return objectOf(Object.entries(fields).filter(([, value]) => value !== absent));
}

const hostile = fc.constantFrom(...hostileValues);

function field<T>(usual: fc.Arbitrary<T>, usualWeight = 24): fc.Arbitrary<T | unknown> {
  return fc.oneof({ arbitrary: usual, weight: usualWeight }, { arbitrary: hostile, weight: 1 }, { arbitrary: fc.constant(absent), weight: 1 });
}

function optionalField<T>(usual: fc.Arbitrary<T>): fc.Arbitrary<T | unknown> {
  return fc.oneof({ arbitrary: fc.constant(absent), weight: 8 }, { arbitrary: usual, weight: 12 }, { arbitrary: hostile, weight: 1 });
}

function pad(value: number, width = 2): string {
  return String(value).padStart(width, "0");
}

const impossibleDates = [
  "2024-02-30",
  "2023-02-29",
  "2024-2-1",
  "2024-01-01T00:00:00Z",
  " 2024-01-01",
  "2024-01-01 ",
  "",
  "20240101",
  "10000-01-01",
  "-001-01-01",
  "2024-00-10",
  "2024-13-01",
  "2024-01-00",
  "2024-01-32",
  "０２４-01-01",
  "0000-00-00",
  "2024/01/01",
] as const;

function arbitraries() {
  const firstDayMs = dataset.firstDayMs;
  const nearDate = fc.integer({ min: -10, max: dataset.dayCount + 10 }).map((offset) => new Date(firstDayMs + offset * dayMs).toISOString().slice(0, 10));
  const anyDate = fc.record({ year: fc.integer({ min: 0, max: 9999 }), month: fc.integer({ min: 1, max: 12 }), day: fc.integer({ min: 1, max: 31 }) }).map(({ year, month, day }) => `${pad(year, 4)}-${pad(month)}-${pad(day)}`);
  const edgeDate = fc.constantFrom("0000-01-01", "0000-02-29", "1900-02-28", "1970-01-01", "2000-02-29", "9999-12-31", "0099-12-31", "0100-03-01");
  const date = fc.oneof({ arbitrary: nearDate, weight: 20 }, { arbitrary: anyDate, weight: 2 }, { arbitrary: edgeDate, weight: 1 }, { arbitrary: fc.constantFrom(...impossibleDates), weight: 1 });
  /** Usually ordered (dateFrom <= dateTo), sometimes not, sometimes a field is hostile or left out. */
  const dates = fc.tuple(field(date), field(date), fc.integer({ min: 0, max: 4 })).map(([from, to, order]) => {
    if (order > 0 && typeof from === "string" && typeof to === "string" && from > to) return [to, from];
    return [from, to];
  });
  const eventName = fc.oneof({ arbitrary: fc.constantFrom(...dataset.eventNames), weight: 8 }, { arbitrary: oddText, weight: 2 });

  const validFilter = fc.record({
    property: fc.oneof({ arbitrary: fc.constantFrom(...dataset.propertyKeys), weight: 6 }, { arbitrary: oddText, weight: 1 }),
    op: fc.constantFrom("eq", "neq", "contains", "not_contains", "gt", "gte", "lt", "lte", "is_set", "is_not_set"),
    value: fc.oneof(
      { arbitrary: fc.constantFrom(...dataset.filterValues), weight: 6 },
      { arbitrary: fc.constantFrom(...numericFilterValues), weight: 4 },
      { arbitrary: oddText, weight: 2 },
      { arbitrary: fc.constant(absent), weight: 1 },
    ),
  });
  const oddFilter = fc.record({
    property: fc.oneof(fc.constantFrom(...dataset.propertyKeys), hostile, fc.constant(absent)),
    op: fc.oneof(fc.constantFrom("EQ", "=", "", "equals", "is set", "__proto__", "constructor"), oddText, hostile, fc.constant(absent)),
    value: fc.oneof(hostile, fc.constant(absent), fc.constantFrom(...dataset.filterValues)),
  });
  const filter = fc.oneof({ arbitrary: validFilter.map(bodyOf), weight: 20 }, { arbitrary: oddFilter.map(bodyOf), weight: 1 }, { arbitrary: hostile, weight: 1 });
  // Since query API v2 an unknown field refuses the whole body, so most bodies carry none: valid bodies must stay common.
  const unknownFields = fc.oneof(
    { arbitrary: fc.constant([] as Array<[string, unknown]>), weight: 4 },
    { arbitrary: fc.array(fc.tuple(fc.oneof(oddText, fc.constantFrom("__proto__", "constructor", "prototype", "toString")), fc.oneof(hostile, oddText)), { minLength: 1, maxLength: 2 }), weight: 1 },
  );

  // Ranges at the SPEC §6 bounds: exactly 10 000 trend buckets of each size and one more; exactly 1 000 retention periods and one more.
  const day = (base: string, days: number) => new Date(Date.parse(`${base}T00:00:00Z`) + days * dayMs).toISOString().slice(0, 10);
  const trendBounds = fc.constantFrom(
    { dateFrom: "2000-01-01", dateTo: day("2000-01-01", 9999), groupBy: "day" },
    { dateFrom: "2000-01-01", dateTo: day("2000-01-01", 10_000), groupBy: "day" },
    { dateFrom: "2024-01-01", dateTo: day("2024-01-01", 415), groupBy: "hour" },
    { dateFrom: "2024-01-01", dateTo: day("2024-01-01", 416), groupBy: "hour" },
    { dateFrom: "2024-01-03", dateTo: day("2024-01-01", 9999 * 7 + 6), groupBy: "week" },
    { dateFrom: "2024-01-03", dateTo: day("2024-01-01", 10_000 * 7), groupBy: "week" },
    { dateFrom: "2000-01-15", dateTo: "2833-04-01", groupBy: "month" },
    { dateFrom: "2000-01-15", dateTo: "2833-05-01", groupBy: "month" },
  );
  const trendAtBounds = fc.record({ event: eventName, bounds: trendBounds }).map(({ event, bounds }) => ({ event, ...bounds }));
  const retentionAtBounds = fc
    .record({ cohortEvent: eventName, retentionEvent: eventName, windowDays: fc.constantFrom(1, 7, 30), extra: fc.constantFrom(0, 1) })
    .map(({ cohortEvent, retentionEvent, windowDays, extra }) => ({ cohortEvent, retentionEvent, windowDays, dateFrom: "2023-06-01", dateTo: day("2023-06-01", 1000 * windowDays - 1 + extra) }));

  const trendFields = fc
    .record({
      event: field(eventName),
      dates,
      groupBy: optionalField(fc.oneof({ arbitrary: fc.constantFrom("hour", "day", "week", "month"), weight: 24 }, { arbitrary: fc.constantFrom("Day", "year", "minute", "", " day", "HOUR"), weight: 1 }, { arbitrary: oddText, weight: 1 })),
      math: optionalField(fc.oneof({ arbitrary: fc.constantFrom("total", "unique"), weight: 16 }, { arbitrary: fc.constantFrom("Total", "count", "", "sum"), weight: 1 })),
      filters: optionalField(fc.array(filter, { maxLength: 4 })),
      unknown: unknownFields,
    })
    .map(({ event, dates: [dateFrom, dateTo], groupBy, math, filters, unknown }) => objectOf([...Object.entries(bodyOf({ event, dateFrom, dateTo, groupBy, math, filters })), ...unknown]));
  const trend = fc.oneof({ arbitrary: trendFields, weight: 15 }, { arbitrary: trendAtBounds, weight: 1 });

  const steps = fc.oneof(
    { arbitrary: fc.array(eventName, { minLength: 1, maxLength: 20 }), weight: 12 },
    { arbitrary: fc.constantFrom(19, 20, 21).chain((length) => fc.array(eventName, { minLength: length, maxLength: length })), weight: 2 },
    { arbitrary: fc.array(eventName, { minLength: 21, maxLength: 24 }), weight: 1 },
    { arbitrary: fc.constant([]), weight: 1 },
    { arbitrary: fc.array(fc.oneof(eventName, hostile), { minLength: 1, maxLength: 5 }), weight: 1 },
  );
  const funnel = fc
    .record({
      steps: field(steps),
      dates,
      conversionWindow: optionalField(
        fc.oneof(
          { arbitrary: fc.integer({ min: 1, max: 31_536_000 }), weight: 6 },
          { arbitrary: fc.constantFrom(1, 3600, 86_400, 31_536_000, 0, -1, 31_536_001, 1.5, 86_400.0001, Number.MAX_SAFE_INTEGER, 1e21, -0), weight: 2 },
        ),
      ),
      unknown: unknownFields,
    })
    .map(({ steps: chosen, dates: [dateFrom, dateTo], conversionWindow, unknown }) => objectOf([...Object.entries(bodyOf({ steps: chosen, dateFrom, dateTo, conversionWindow })), ...unknown]));

  const retentionFields = fc
    .record({
      cohortEvent: field(eventName),
      retentionEvent: field(eventName),
      dates,
      windowDays: optionalField(fc.oneof({ arbitrary: fc.integer({ min: 1, max: 365 }), weight: 6 }, { arbitrary: fc.constantFrom(1, 7, 30, 365, 0, -7, 366, 7.5, 1e9), weight: 2 })),
      unknown: unknownFields,
    })
    .map(({ cohortEvent, retentionEvent, dates: [dateFrom, dateTo], windowDays, unknown }) => objectOf([...Object.entries(bodyOf({ cohortEvent, retentionEvent, dateFrom, dateTo, windowDays })), ...unknown]));
  const retention = fc.oneof({ arbitrary: retentionFields, weight: 15 }, { arbitrary: retentionAtBounds, weight: 1 });

  return { trend, funnel, retention };
}

/** Textual damage to a serialized body: none usually; else truncation, a flipped byte, invalid UTF-8, a raw number literal, a wrapper. */
const damage = fc.oneof(
  { arbitrary: fc.constant({ kind: "none" as const }), weight: 24 },
  { arbitrary: fc.record({ kind: fc.constant("truncate" as const), at: fc.double({ min: 0, max: 1, noNaN: true }) }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant("flip" as const), at: fc.double({ min: 0, max: 1, noNaN: true }), mask: fc.integer({ min: 1, max: 255 }) }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant("insert" as const), at: fc.double({ min: 0, max: 1, noNaN: true }), bytes: fc.constantFrom(...invalidUtf8Sequences, Uint8Array.of(0)) }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant("literal" as const), field: fc.constantFrom("conversionWindow", "windowDays", "groupBy", "event", "dateFrom"), literal: fc.constantFrom(...hostileNumberLiterals, "1E1", "7.0", "8.64e4") }), weight: 2 },
  { arbitrary: fc.record({ kind: fc.constant("wrap" as const), prefix: fc.constantFrom("", "\ufeff", " ", "["), suffix: fc.constantFrom("", "x", "]", " ") }), weight: 1 },
);
type Damage = typeof damage extends fc.Arbitrary<infer T> ? T : never;

function serialize(body: Record<string, unknown>, change: Damage): Buffer {
  if (change.kind === "literal") {
    const marker = "@@LITERAL@@";
    const text = JSON.stringify(objectOf([...Object.entries(body).filter(([key]) => key !== change.field), [change.field, marker]]));
    return Buffer.from(text.replace(JSON.stringify(marker), change.literal), "utf8");
  }
  const bytes = Buffer.from(JSON.stringify(body), "utf8");
  const at = (fraction: number) => Math.min(bytes.length, Math.floor(fraction * (bytes.length + 1)));
  switch (change.kind) {
    case "none":
      return bytes;
    case "truncate":
      return bytes.subarray(0, at(change.at));
    case "flip": {
      const copy = Buffer.from(bytes);
      copy[Math.min(copy.length - 1, at(change.at))] ^= change.mask;
      return copy;
    }
    case "insert":
      return Buffer.concat([bytes.subarray(0, at(change.at)), change.bytes, bytes.subarray(at(change.at))]);
    case "wrap":
      return Buffer.concat([Buffer.from(change.prefix, "utf8"), bytes, Buffer.from(change.suffix, "utf8")]);
  }
}

// ---------------------------------------------------------------------------
// Checking answers

function query(kind: QueryKind | "internal/test-event", body: Uint8Array, authorization = `Bearer ${server.token}`): Promise<Answer> {
  const path = kind === "internal/test-event" ? "/api/v1/internal/test-event" : `/api/v1/query/${kind}`;
  return request(`${server.queryUrl}${path}`, { body, headers: { authorization, "content-type": "application/json" } });
}

/** The reference's answer, or undefined where it cannot judge (it refuses years 0–99, which the SPEC's calendar allows). */
function referenceAnswer(kind: QueryKind, value: Record<string, unknown>): unknown {
  try {
    switch (kind) {
      case "trend":
        return referenceTrend(stored, value as never);
      case "funnel":
        return referenceFunnel(stored, value as never);
      case "retention":
        return referenceRetention(stored, value as never);
    }
  } catch {
    return undefined;
  }
}

/** The answer's shape when the reference cannot give the exact one. */
function checkShape(kind: QueryKind, body: any, context: string): void {
  const keys = Object.keys(body).join(",");
  const where = () => `${context}\n  answer: ${JSON.stringify(body).slice(0, 300)}`;
  const isCount = (value: unknown) => Number.isInteger(value) && (value as number) >= 0;
  if (kind === "trend") {
    check(keys === "data" && Array.isArray(body.data) && body.data.length >= 1, () => `trend answer shape — ${where()}`);
    let previous = "";
    for (const bucket of body.data) {
      check(Object.keys(bucket).join(",") === "date,count" && isCount(bucket.count) && bucket.date > previous, () => `trend bucket ${JSON.stringify(bucket)} — ${where()}`);
      previous = bucket.date;
    }
  } else if (kind === "funnel") {
    check(keys === "steps" && Array.isArray(body.steps), () => `funnel answer shape — ${where()}`);
    for (const step of body.steps) check(Object.keys(step).join(",") === "event,count,rate" && isCount(step.count), () => `funnel step ${JSON.stringify(step)} — ${where()}`);
  } else {
    check(keys === "cohorts" && Array.isArray(body.cohorts) && body.cohorts.length >= 1, () => `retention answer shape — ${where()}`);
    body.cohorts.forEach((cohort: any, period: number) => {
      check(Object.keys(cohort).join(",") === "cohortDate,total,weeks" && cohort.weeks.length === body.cohorts.length - period && cohort.weeks[0] === cohort.total, () => `cohort ${period} — ${where()}`);
    });
  }
}

async function checkQuery(kind: QueryKind, bytes: Buffer, tally: Tally): Promise<void> {
  const context = `${kind} ${preview(bytes, 1500)}`;
  const parsed = parseJsonBytes(bytes);
  const expectation = parsed.ok ? expectQuery(kind, parsed.value) : ({ valid: false, status: 400, code: "invalid_json", fields: [] } as const);
  const answer = await query(kind, bytes);
  tally.add(`status ${answer.status}${answer.status === 200 ? "" : ` ${answer.body?.error?.code}`}`);
  if (!expectation.valid) {
    tally.add(`invalid: ${expectation.fields[0] ?? "json"}`);
    checkStatus(answer, 400, expectation.code, context);
    const message: string = answer.body.error.message;
    if (expectation.code === "invalid_request") {
      check(expectation.fields.some((name) => message.includes(name)), () => `message ${JSON.stringify(message)} names none of ${expectation.fields.join(", ")} — ${context}`);
    }
    return;
  }
  checkStatus(answer, 200, undefined, context);
  const expected = referenceAnswer(kind, expectation.value);
  if (expected === undefined) {
    tally.add("valid, shape only");
    checkShape(kind, answer.body, context);
    return;
  }
  tally.add("valid, compared with the reference");
  check(isDeepStrictEqual(answer.body, expected), () => `differs from the reference — ${context}\n  answer:   ${answer.text.slice(0, 600)}\n  expected: ${JSON.stringify(expected).slice(0, 600)}`);
}

// ---------------------------------------------------------------------------
// Properties

describe.each(["trend", "funnel", "retention"] as const)("%s bodies with every field fuzzed", (kind) => {
  it(
    `answer 200 exactly as the reference, or 400 naming a bad field; never a 5xx (${fuzzRuns} bodies)`,
    async () => {
      const bodies = arbitraries()[kind];
      await fc.assert(
        fc.asyncProperty(bodies, damage, async (body, change) => {
          await checkQuery(kind, serialize(body, change), tallies[kind]);
        }),
        fuzzParameters(),
      );
      // The generators must keep reaching both sides of the contract.
      expect(tallies[kind].get("status 200")).toBeGreaterThan(fuzzRuns / 10);
      expect(tallies[kind].get("status 400 invalid_request")).toBeGreaterThan(fuzzRuns / 20);
    },
    propertyTimeoutMs(fuzzRuns, 60),
  );
});

describe("Authorization headers", () => {
  const variants = fc.oneof(
    fc.constant({ header: "exact", valid: true as boolean | "either" }),
    fc.record({ header: fc.constantFrom("lower-scheme", "two-spaces", "trailing-space"), valid: fc.constant("either" as const) }),
    fc.record({ header: fc.constantFrom("missing", "empty", "scheme-only", "no-scheme", "basic", "api-key", "near-miss", "doubled", "prefix-only"), valid: fc.constant(false) }),
    fc.record({ header: fc.constant("garbage"), valid: fc.constant(false), text: fc.string({ unit: fc.constantFrom(..."Bearer et_ek_abc=/+-.~\t0123456789"), maxLength: 80 }) }),
  );

  it(`refuse anything but the workspace's token with 401 and WWW-Authenticate, before judging the body (${fuzzRuns} requests)`, async () => {
    await fc.assert(
      fc.asyncProperty(variants, fc.constantFrom("trend", "funnel", "retention", "internal/test-event") as fc.Arbitrary<QueryKind | "internal/test-event">, fc.boolean(), async (variant, kind, goodBody) => {
        const token = server.token;
        const headers: Record<string, string> = {
          exact: `Bearer ${token}`,
          "lower-scheme": `bearer ${token}`,
          "two-spaces": `Bearer  ${token}`,
          "trailing-space": `Bearer ${token} `,
          missing: "",
          empty: "",
          "scheme-only": "Bearer",
          "no-scheme": token,
          basic: `Basic ${Buffer.from(`user:${token}`).toString("base64")}`,
          "api-key": `Bearer ${server.apiKey}`,
          "near-miss": `Bearer ${token.slice(0, -1)}${token.endsWith("A") ? "B" : "A"}`,
          doubled: `Bearer ${token}${token}`,
          "prefix-only": "Bearer et_",
          garbage: (variant as { text?: string }).text ?? "",
        };
        const fields = kind === "trend" ? { event: "x" } : kind === "funnel" ? { steps: ["x"] } : { cohortEvent: "x", retentionEvent: "x" };
        const body = goodBody ? JSON.stringify({ ...fields, dateFrom: "2024-01-01", dateTo: "2024-01-02" }) : "{not json";
        const authorization = headers[variant.header];
        const context = `${kind} with Authorization ${JSON.stringify(authorization.replaceAll(token, "<token>"))}`;
        const answer = await request(`${server.queryUrl}${kind === "internal/test-event" ? "/api/v1/internal/test-event" : `/api/v1/query/${kind}`}`, {
          body,
          headers: variant.header === "missing" ? {} : { authorization },
        });
        tallies.auth.add(`status ${answer.status}`);
        checkAnswer(answer, context);
        if (answer.status === 401 || variant.valid === false) {
          checkStatus(answer, 401, "unauthorized", context);
          check(/^Bearer\b/.test(String(answer.headers["www-authenticate"])), () => `401 without WWW-Authenticate: Bearer — ${context}`);
          return;
        }
        // Accepted: the body is judged next (test-event needs none).
        if (kind === "internal/test-event") checkStatus(answer, 200, undefined, context);
        else checkStatus(answer, goodBody ? 200 : 400, goodBody ? undefined : "invalid_json", context);
      }),
      fuzzParameters(),
    );
  }, propertyTimeoutMs(fuzzRuns, 20));
});

const deepRuns = Math.max(25, Math.ceil(fuzzRuns / 20));

describe("query bodies nested up to the 1 MiB limit", () => {
  it(`are answered: nesting in an unknown field or a known one is a 400 (${deepRuns} bodies)`, async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom("trend", "funnel", "retention") as fc.Arbitrary<QueryKind>,
        fc.constantFrom("array" as const, "object" as const),
        fc.constantFrom("unknown", "known"),
        fc.double({ min: 0, max: 1, noNaN: true }),
        async (kind, shape, where, fraction) => {
          const fields = kind === "trend" ? { event: "view" } : kind === "funnel" ? { steps: ["view"] } : { cohortEvent: "view", retentionEvent: "view" };
          const base = { ...fields, dateFrom: "2024-01-01", dateTo: "2024-01-07" };
          const knownField = kind === "trend" ? "filters" : kind === "funnel" ? "steps" : "windowDays";
          const head = JSON.stringify(base).slice(0, -1);
          const overhead = head.length + 40;
          const deepest = Math.floor((1024 * 1024 - overhead) / (shape === "array" ? 2 : 6));
          const depth = Math.max(1, Math.round(fraction * deepest));
          const body = `${head},${JSON.stringify(where === "unknown" ? "extra" : knownField)}:${nestedJson(depth, shape)}}`;
          const context = `${kind} nested ${depth} levels (${shape}) in ${where === "unknown" ? "an unknown field" : knownField}`;
          const answer = await query(kind, Buffer.from(body));
          tallies.deep.add(`status ${answer.status}`);
          // A one-level array of filters or steps holding `1` is still invalid (not objects, not strings); an unknown field is refused by name (SPEC §7).
          checkStatus(answer, 400, "invalid_request", context);
        },
      ),
      fuzzParameters(deepRuns),
    );
  }, propertyTimeoutMs(deepRuns, 600));
});
