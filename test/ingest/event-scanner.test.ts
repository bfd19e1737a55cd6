/**
 * event-scanner.ts reads flat event bodies straight into the chunk and leaves
 * every other body to JSON.parse. Validation must not be able to tell which
 * read a body: for any body the answer and the chunk bytes are those of the
 * JSON.parse path. The generated bodies sit on the scanner's borders — the
 * fields it takes and the ones it leaves, numbers whose printed form differs
 * from their spelling, escapes, repeated and integer-like keys, lengths and
 * sizes at their limits, whitespace — and each test also checks that the
 * scanner really took a good share of them, so it cannot pass by giving up.
 */
import fc from "fast-check";
import { gzipSync } from "node:zlib";
import { beforeEach, describe, expect, it } from "vitest";
import { limits } from "../../src/config/limits.js";
import { ChunkBuilder } from "../../src/storage/chunk-codec.js";
import { scanBody } from "../../src/ingest/event-scanner.js";
import { type IngestParser, type IngestShape, validateBody } from "../../src/ingest/event-validation.js";
import { damaged } from "../helpers/damaged-json.js";

const receivedAtMs = Date.UTC(2024, 4, 1, 12);

function validate(text: string, shape: IngestShape, parser: IngestParser, builder = new ChunkBuilder()) {
  const result = validateBody(Buffer.from(text, "utf8"), false, shape, receivedAtMs, () => ({ builder, chunkIndex: 0 }), parser);
  return { result, chunk: Buffer.from(builder.finish()).toString("hex") };
}

let scannedBodies = 0;
let comparedBodies = 0;

function expectSameAnswer(text: string, shape: IngestShape): void {
  const native = validate(text, shape, "native");
  const auto = validate(text, shape, "auto");
  expect(auto.result).toEqual(native.result);
  expect(auto.chunk).toBe(native.chunk);
  comparedBodies++;
  if (scanBody(Buffer.from(text, "utf8"), shape, receivedAtMs) !== undefined) scannedBodies++;
}

function expectScannedShare(minimum: number): void {
  const [scanned, compared] = [scannedBodies, comparedBodies];
  scannedBodies = 0;
  comparedBodies = 0;
  expect(scanned / compared, `${scanned} of ${compared} bodies scanned`).toBeGreaterThan(minimum);
}

const space = fc.constantFrom("", "", "", "", " ", "\n", "\t", "\r\n  ");
const plainText = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom("signup", "$pageview", "user_1", "Chrome", "/docs", "", "x y", "é", "🚀", "日本") },
  { weight: 2, arbitrary: fc.string({ maxLength: 8 }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 4, unit: "grapheme" }) },
);
/** A string as written: mostly plain, sometimes with escapes (which the scanner leaves to JSON.parse). */
const stringText = fc.oneof(
  { weight: 30, arbitrary: plainText.map((text) => JSON.stringify(text)) },
  { weight: 1, arbitrary: fc.constantFrom('"a\\u0062"', '"\\/"', '"\\n"', '"\\ud800"', '"tab\\there"') },
);
const numberText = fc.oneof(
  fc.integer().map(String),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((value) => JSON.stringify(value)),
  fc.constantFrom("0", "-0", "-0.0", "1.50", "1E2", "1e-7", "1e21", "1e+21", "0.1", "4.99", "100", "999999999999999", "9999999999999999", "-999999999999999", "123456789012345678901234567890", "1e400", "-1e400", "2.5e+3", "0.000001", "5e-324"),
);
const scalarText = fc.oneof({ weight: 3, arbitrary: stringText }, { weight: 3, arbitrary: numberText }, { weight: 1, arbitrary: fc.constantFrom("true", "false", "null") });
const propertyValue = fc.oneof({ weight: 30, arbitrary: scalarText }, { weight: 1, arbitrary: fc.constantFrom("[]", "[1]", '{"a":1}', "{}") });
const propertyKey = fc.oneof(
  { weight: 30, arbitrary: fc.nat(999).map((number) => `"k${number}"`) },
  { weight: 3, arbitrary: fc.constantFrom("country", "plan", "price", "$browser", "path", "a", "b", "", "__proto__", "é", "-1").map((key) => JSON.stringify(key)) },
  { weight: 1, arbitrary: fc.constantFrom('"0"', '"12"', '"1a"', '"01"', '"\\u0061"') },
);
const propertiesText = fc
  .tuple(fc.array(fc.tuple(space, propertyKey, space, space, propertyValue), { maxLength: 7 }), space)
  .map(([members, inner]) => `{${inner}${members.map(([before, key, middle, after, value]) => `${before}${key}${middle}:${after}${value}`).join(",")}}`);
const nameText = fc.oneof(
  { weight: 20, arbitrary: stringText },
  { weight: 1, arbitrary: fc.constantFrom(`"${"x".repeat(limits.eventNameLengthMax)}"`, `"${"x".repeat(limits.eventNameLengthMax + 1)}"`, `"${"🚀".repeat(limits.eventNameLengthMax / 2)}"`, `"${"🚀".repeat(limits.eventNameLengthMax / 2)}x"`, `"${"é".repeat(limits.eventNameLengthMax)}"`, `"${"é".repeat(limits.eventNameLengthMax + 1)}"`) },
  { weight: 1, arbitrary: fc.constantFrom("7", "null", "[]", "true") },
);
const distinctIdText = fc.oneof({ weight: 20, arbitrary: stringText }, { weight: 5, arbitrary: numberText }, { weight: 1, arbitrary: fc.constantFrom("null", "{}", "false", `"${"u".repeat(limits.distinctIdLengthMax + 1)}"`) });
const timestampText = fc.oneof(
  { weight: 20, arbitrary: fc.integer({ min: 0, max: 4_102_444_800_000 }).map((ms) => JSON.stringify(new Date(ms).toISOString())) },
  { weight: 2, arbitrary: fc.constantFrom('"2024-05-01T12:00:00+02:00"', '"2024-05-01 12:00"', '"2024-05-01T12:00:00.123456789Z"', '"2024-02-30T00:00:00Z"', '"1969-12-31T23:59:59Z"', '"2024-05-01T12:00:00"', '"2024-05-01"', '"2024-05-01T24:00:00Z"', "null", "12") },
  // The common length, 24 bytes, is parsed in place: near misses of it.
  { weight: 2, arbitrary: fc.constantFrom('"2024-05-01T12:00:00.0000"', '"2024-05-01T12:00:00.000+"', '"2024-05-01T12:00:00.00\\nZ"', '"2024-05-01T12:00:00.0\\u0030Z"', '"2024-05-01T12:00:00.000Z "', '"2024-05-01T12:00:00.00Z"') },
);
const uuidText = fc.oneof({ weight: 20, arbitrary: fc.uuid().map((uuid) => JSON.stringify(uuid)) }, { weight: 1, arbitrary: fc.constantFrom('"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"', '"not-a-uuid"', "null", "1", '"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1"', '"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111"', '"a0eebc99\\u002d9c0b-4ef8-bb6d-6bb9bd380a11"', '"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1\\u0031"') });

type Member = [string, string];
/** null but one time in twenty. */
const rarely = <T>(arbitrary: fc.Arbitrary<T>) => fc.oneof({ weight: 19, arbitrary: fc.constant(null) }, { weight: 1, arbitrary });
const eventMembers = fc
  .record({
    event: nameText,
    distinctId: distinctIdText,
    timestamp: fc.option(timestampText, { freq: 3 }),
    uuid: fc.option(uuidText, { freq: 3 }),
    properties: fc.option(fc.oneof({ weight: 8, arbitrary: propertiesText }, { weight: 1, arbitrary: fc.constantFrom("null", "[]", "1") }), { freq: 5 }),
    // Now and then a field missing, repeated or unknown: the JSON.parse path decides those.
    // Field names are matched in place by their first byte: names that share it.
    oddity: rarely(
      fc.constantFrom<Member>(['"event"', '"again"'], ['"extra"', "1"], ['"distinctId"', '"second"'], ['"apiKey"', '"k"'], ['"properties"', "{}"], ['"even"', "1"], ['"eventss"', "1"], ['"eventName"', '"x"'], ['"ev\\u0065nt"', '"x"'], ['"uuidx"', "null"], ['"times"', "1"], ['"p"', "1"], ['"d"', "1"]),
    ),
    drop: rarely(fc.constantFrom("event", "distinctId")),
    order: fc.nat(),
  })
  .map(({ event, distinctId, timestamp, uuid, properties, oddity, drop, order }) => {
    const members: Member[] = [];
    if (drop !== "event") members.push(['"event"', event]);
    if (drop !== "distinctId") members.push(['"distinctId"', distinctId]);
    if (timestamp !== null) members.push(['"timestamp"', timestamp]);
    if (uuid !== null) members.push(['"uuid"', uuid]);
    if (properties !== null) members.push(['"properties"', properties]);
    if (oddity !== null) members.push(oddity);
    // A rotation of the fields: clients write them in any order.
    const shift = members.length === 0 ? 0 : order % members.length;
    return [...members.slice(shift), ...members.slice(0, shift)];
  });
const memberText = (members: Member[], spaces: string) => members.map(([key, value]) => `${spaces}${key}${spaces}:${spaces}${value}`).join(",");
const eventText = fc.tuple(eventMembers, space).map(([members, spaces]) => `{${memberText(members, spaces)}}`);
const batchText = fc
  .tuple(fc.array(eventText, { maxLength: 5 }), space, fc.boolean(), rarely(fc.constantFrom<Member>(['"extra"', "1"], ['"apiKey"', '"other"'], ['"apiKey"', "5"])))
  .map(([events, spaces, keyLast, oddity]) => {
    const members: Member[] = [['"apiKey"', '"key"'], ['"events"', `[${spaces}${events.join(`${spaces},`)}${spaces}]`]];
    if (keyLast) members.reverse();
    if (oddity !== null) members.push(oddity);
    return `${spaces}{${memberText(members, spaces)}}${spaces}`;
  });
const singleText = fc.tuple(eventMembers, space, fc.nat()).map(([members, spaces, at]) => {
  members.splice(at % (members.length + 1), 0, ['"apiKey"', '"key"']);
  return `${spaces}{${memberText(members, spaces)}}${spaces}`;
});

describe("the byte scanner of flat events", () => {
  beforeEach(() => {
    scannedBodies = 0;
    comparedBodies = 0;
  });

  it("answers every generated batch exactly as the JSON.parse path does, rows included", () => {
    fc.assert(fc.property(batchText, (text) => expectSameAnswer(text, "batch")), { numRuns: 2000 });
    expectScannedShare(0.15);
  });

  it("answers every generated single event exactly as the JSON.parse path does", () => {
    fc.assert(fc.property(singleText, (text) => expectSameAnswer(text, "single")), { numRuns: 2000 });
    expectScannedShare(0.2);
  });

  it("answers damaged bodies exactly as the JSON.parse path does", () => {
    fc.assert(fc.property(damaged(batchText), (text) => expectSameAnswer(text, "batch")), { numRuns: 1500 });
    fc.assert(fc.property(damaged(singleText), (text) => expectSameAnswer(text, "single")), { numRuns: 1000 });
    expectScannedShare(0.01);
  });

  it("gathers scanned and parsed single events of one key into one chunk as the JSON.parse path does", () => {
    fc.assert(
      fc.property(fc.array(singleText, { minLength: 2, maxLength: 8 }), (texts) => {
        const native = new ChunkBuilder();
        const auto = new ChunkBuilder();
        for (const text of texts) expect(validate(text, "single", "auto", auto).result).toEqual(validate(text, "single", "native", native).result);
        expect(Buffer.from(auto.finish()).toString("hex")).toBe(Buffer.from(native.finish()).toString("hex"));
      }),
      { numRuns: 500 },
    );
  });

  it("answers batches whose events repeat the keys of the event before, with changes, exactly as the JSON.parse path does", () => {
    // As SDKs send them: each event mostly the keys of the one before, in its order, now and
    // then one key dropped or added — which may repeat a key already there, be integer-like,
    // or take the place of a null value — so that one chunk interns each key once.
    const poolKey = fc.oneof(
      { weight: 20, arbitrary: fc.constantFrom('"country"', '"plan"', '"$os"', '"path"', '"plant"', '"pla"', '"é"', '"a"', '"b"', '"c"', '"d"') },
      { weight: 1, arbitrary: fc.constantFrom('"0"', '"count\\u0072y"') },
    );
    const keyList = fc.array(poolKey, { minLength: 1, maxLength: 6 });
    const value = fc.oneof({ weight: 6, arbitrary: plainText.map((text) => JSON.stringify(text)) }, { weight: 2, arbitrary: fc.constantFrom("null", "1", "true", "1e2") });
    const edit = fc.record({ keep: fc.nat(7), insert: fc.option(poolKey, { freq: 3 }), at: fc.nat(7), values: fc.array(value, { minLength: 8, maxLength: 8 }), spaces: space, withProperties: fc.nat(9) });
    const repeatingBatch = fc.tuple(keyList, fc.array(edit, { minLength: 2, maxLength: 8 })).map(([base, edits]) => {
      let keys = base;
      const events = edits.map(({ keep, insert, at, values, spaces, withProperties }) => {
        keys = keys.slice(0, Math.max(1, keys.length - (keep % 2 === 0 ? 0 : keep % keys.length)));
        if (insert !== null) keys = [...keys.slice(0, at % (keys.length + 1)), insert, ...keys.slice(at % (keys.length + 1))];
        const properties = withProperties === 0 ? "" : `,${spaces}"properties":{${keys.map((key, index) => `${key}:${spaces}${values[index % 8]}`).join(",")}}`;
        return `{"event":"e","distinctId":"u"${properties}}`;
      });
      return `{"apiKey":"key","events":[${events.join(",")}]}`;
    });
    fc.assert(fc.property(repeatingBatch, (text) => expectSameAnswer(text, "batch")), { numRuns: 3000 });
    expectScannedShare(0.2);
  });

  it("takes properties up to exactly the size limit and leaves the first byte past it to the JSON.parse path", () => {
    // `{"k":"…"}` is 8 bytes around the value.
    const atLimit = "x".repeat(limits.propertiesBytesMax - 8);
    for (const [value, scanned] of [
      [atLimit, true],
      [`${atLimit}x`, false],
      [`${"é".repeat((limits.propertiesBytesMax - 8) / 2)}`, true],
      [`${"é".repeat((limits.propertiesBytesMax - 8) / 2)}x`, false],
    ] as const) {
      const text = `{"apiKey":"key","events":[{"event":"e","distinctId":"u","properties":{"k":"${value}"}}]}`;
      expectSameAnswer(text, "batch");
      expect(scanBody(Buffer.from(text, "utf8"), "batch", receivedAtMs) !== undefined).toBe(scanned);
    }
    // Printed numbers count as printed: 1e2 is 3 bytes written and "100" stored.
    const padding = "x".repeat(limits.propertiesBytesMax - 8 - 8 - 3);
    for (const number of ["100", "1e2", "1.0e2", "1000"]) {
      expectSameAnswer(`{"apiKey":"key","event":"e","distinctId":"u","properties":{"k":"${padding}","n":${number}}}`, "single");
    }
  });

  it("takes up to 4 096 properties in an event, repeated keys never, and a full batch but not one event more", () => {
    const members = (count: number) => Array.from({ length: count }, (_, index) => `"k${index}":${index % 10}`).join(",");
    for (const count of [4095, 4096, 4097, 6000]) expectSameAnswer(`{"apiKey":"key","event":"e","distinctId":"u","properties":{${members(count)}}}`, "single");
    expect(scanBody(Buffer.from(`{"apiKey":"key","event":"e","distinctId":"u","properties":{${members(4096)}}}`), "single", 0)).toBeDefined();
    expect(scanBody(Buffer.from(`{"apiKey":"key","event":"e","distinctId":"u","properties":{${members(4097)}}}`), "single", 0)).toBeUndefined();
    // A repeated key far from its first place.
    const repeated = `{"apiKey":"key","event":"e","distinctId":"u","properties":{${members(3000)},"k7":"last"}}`;
    expectSameAnswer(repeated, "single");
    expect(scanBody(Buffer.from(repeated), "single", 0)).toBeUndefined();

    const event = '{"event":"e","distinctId":"u","properties":{"a":1}}';
    for (const count of [limits.batchEventsMax, limits.batchEventsMax + 1]) {
      const text = `{"apiKey":"key","events":[${Array.from({ length: count }, () => event).join(",")}]}`;
      expectSameAnswer(text, "batch");
      expect(scanBody(Buffer.from(text), "batch", 0) !== undefined).toBe(count <= limits.batchEventsMax);
    }
  });

  it("reads gzip bodies and bench-shaped batches through the scanner", () => {
    const events = Array.from({ length: 50 }, (_, index) => ({
      event: ["$pageview", "signup", "purchase"][index % 3],
      distinctId: index % 4 === 0 ? index : `user_${index % 7}`,
      timestamp: new Date(Date.UTC(2024, 3, 1) + index * 3_600_000).toISOString(),
      uuid: index % 2 ? `0000000${index % 10}-0000-4000-8000-00000000000${index % 10}` : undefined,
      properties: { price: [4.99, 9, 19.5, 100][index % 4], country: ["US", "DE"][index % 2], paid: index % 3 === 0, note: index % 5 ? null : "x" },
    }));
    const text = JSON.stringify({ apiKey: "key", events });
    expectSameAnswer(text, "batch");
    expect(scanBody(Buffer.from(text), "batch", receivedAtMs)?.eventCount).toBe(50);
    expectScannedShare(0.99);
    const gzipped = gzipSync(text);
    const builders = [new ChunkBuilder(), new ChunkBuilder()];
    const [auto, native] = (["auto", "native"] as const).map((parser, index) =>
      validateBody(gzipped, true, "batch", receivedAtMs, () => ({ builder: builders[index], chunkIndex: 0 }), parser),
    );
    expect(auto).toEqual(native);
    expect(auto).toMatchObject({ kind: "parsed", acceptedCount: 50 });
    expect(Buffer.from(builders[0].finish())).toEqual(Buffer.from(builders[1].finish()));
  });
});
