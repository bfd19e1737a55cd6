/**
 * body-bytes.ts parses value-heavy ingest bodies without JSON.parse; validation
 * must not be able to tell: for any body, valid or not, the answer (accepted
 * count, per-event errors, rejection) and the chunk of rows built from it are
 * byte-identical to what the JSON.parse path produces. Bodies are generated as
 * JSON text, so duplicate keys, number spellings, escapes and whitespace reach
 * both parsers as a client sends them, then some are cut or have a byte changed.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ChunkBuilder } from "../../src/storage/chunk-codec.js";
import { type IngestParser, type IngestShape, validateBody } from "../../src/ingest/event-validation.js";
import { limits } from "../../src/config/limits.js";
import { damaged } from "../helpers/damaged-json.js";

function validate(text: string | Uint8Array, shape: IngestShape, parser: IngestParser) {
  const builder = new ChunkBuilder();
  const bytes = typeof text === "string" ? Buffer.from(text, "utf8") : text;
  const result = validateBody(bytes, false, shape, Date.UTC(2024, 4, 1, 12), () => ({ builder, chunkIndex: 0 }), parser);
  return { result, chunk: Buffer.from(builder.finish()).toString("hex") };
}

/** Events stored by the comparisons so far: the generators must reach rows, not only refusals. */
let acceptedEventCount = 0;

function expectSameAnswer(text: string | Uint8Array, shape: IngestShape): void {
  const native = validate(text, shape, "native");
  const bytes = validate(text, shape, "bytes");
  expect(bytes.result).toEqual(native.result);
  expect(bytes.chunk).toBe(native.chunk);
  if (native.result.kind === "parsed") acceptedEventCount += native.result.acceptedCount;
}

const whitespace = fc.constantFrom("", "", "", " ", "\n", "\t", "\r\n  ");
const oddKey = fc.oneof(fc.string({ maxLength: 6 }), fc.constantFrom("__proto__", "constructor", "0", "10", "2", "-1", "01", "4294967294", "4294967295", "toJSON", "", "a", "b"));
/** A key as written: sometimes spelled with escapes, which JSON.parse treats as the same key. */
const keyText = fc.oneof(
  oddKey.map((key) => JSON.stringify(key)),
  fc.constantFrom('"\\u0061"', '"\\u005f_proto__"', '"\\ud800"', '"\\/"', '"a\\u0000"', '"\\u0031\\u0030"'),
);
const scalarText = fc.oneof(
  fc.oneof(fc.string(), fc.string({ unit: "grapheme" }), fc.double(), fc.integer(), fc.boolean(), fc.constant(null)).map((value) => JSON.stringify(value)),
  fc.constantFrom("1e400", "-1e400", "-0", "0", "1.50", "1E2", "1e-7", "0.000001", "123456789012345678901234567890", "999999999999999", "9999999999999999", "-12", "2.5e+3"),
  fc.constantFrom('"\\u0000"', '"\\ud83d\\ude80"', '"\\udc00x"', '"\\"\\\\\\/\\b\\f\\n\\r\\t"', '"\u2028 é 🚀"', '"\u007f"'),
);
const jsonText = fc.letrec<{ value: string; array: string; object: string }>((tie) => ({
  value: fc.oneof({ depthSize: "small" }, scalarText, tie("array"), tie("object")),
  array: fc.tuple(fc.array(fc.tuple(whitespace, tie("value"), whitespace), { maxLength: 5 }), whitespace).map(([items, inner]) => `[${inner}${items.map(([before, item, after]) => before + item + after).join(",")}]`),
  object: fc
    .array(fc.tuple(whitespace, keyText, whitespace, tie("value")), { maxLength: 6 })
    .map((entries) => `{${entries.map(([before, key, middle, value]) => `${before}${key}${middle}:${value}`).join(",")}}`),
})).value;

const uuidText = fc.oneof(fc.uuid().map((uuid) => JSON.stringify(uuid)), fc.constant('"not-a-uuid"'));
const timestampText = fc.oneof(fc.constantFrom('"2024-05-01T12:00:00Z"', '"2024-05-01T12:00:00.123+02:00"', '"2024-02-30T00:00:00Z"', '"1969-12-31T23:59:59Z"', "12"), jsonText);
/** An event's members, right or wrong, repeated or not, among unknown ones. */
const eventMember = fc.oneof(
  fc.tuple(fc.constant('"event"'), fc.oneof(fc.constantFrom('"signup"', '"page view"', '""', `"${"x".repeat(201)}"`, '"\\ud800"'), jsonText)),
  fc.tuple(fc.constant('"distinctId"'), fc.oneof(fc.constantFrom('"user-1"', "7", "-0", "1e400", "null", '"\\udfff"'), jsonText)),
  fc.tuple(fc.constant('"timestamp"'), timestampText),
  fc.tuple(fc.constant('"properties"'), fc.oneof(jsonText.filter((text) => text.startsWith("{")), jsonText)),
  fc.tuple(fc.constant('"uuid"'), fc.oneof(uuidText, jsonText)),
  fc.tuple(keyText, jsonText),
);
/** Nested property values, where the printing differs most from parsing: objects holding objects, duplicates, index keys. */
const propertiesText = fc
  .array(fc.tuple(keyText, fc.oneof(jsonText, jsonText.map((value) => `{"1":${value},"b":[${value}],"b":{"0":${value}}}`))), { maxLength: 4 })
  .map((entries) => `{${entries.map(([key, value]) => `${key}:${value}`).join(",")}}`);
const eventText = fc.oneof(
  // Mostly valid events, so that rows and their printed properties are compared, not only errors.
  { weight: 3, arbitrary: fc.tuple(propertiesText, fc.array(fc.tuple(whitespace, eventMember), { maxLength: 2 })).map(([properties, members]) => `{"event":"signup","distinctId":"user-1","properties":${properties}${members.map(([space, [key, value]]) => `,${space}${key}:${value}`).join("")}}`) },
  { weight: 1, arbitrary: fc.array(fc.tuple(whitespace, eventMember), { minLength: 1, maxLength: 7 }).map((members) => `{${members.map(([space, [key, value]]) => `${space}${key}:${value}`).join(",")}}`) },
  { weight: 1, arbitrary: jsonText },
);
const batchText = fc
  .tuple(fc.array(eventText, { maxLength: 6 }), fc.array(fc.tuple(keyText, jsonText), { maxLength: 2 }), whitespace)
  .map(([events, extra, space]) => `${space}{"apiKey":"key",${extra.map(([key, value]) => `${key}:${value},`).join("")}"events":[${events.join(`,${space}`)}]}${space}`);
const singleText = fc.oneof(
  fc.tuple(propertiesText, fc.array(fc.tuple(whitespace, eventMember), { maxLength: 2 })).map(([properties, members]) => `{"apiKey":"key","event":"signup","distinctId":7,"properties":${properties}${members.map(([space, [key, value]]) => `,${space}${key}:${value}`).join("")}}`),
  fc.array(fc.tuple(whitespace, eventMember), { maxLength: 7 }).map((members) => `{"apiKey":"key"${members.map(([space, [key, value]]) => `,${space}${key}:${value}`).join("")}}`),
);

/** Values written as the deepest bodies are: runs of brackets around values, with objects of scalars among them. */
const nestingText = fc.letrec<{ value: string; run: string; object: string }>((tie) => ({
  value: fc.oneof({ depthSize: "small" }, scalarText, tie("run"), tie("object")),
  run: fc
    .tuple(fc.nat(40), fc.array(tie("value"), { maxLength: 3 }), whitespace)
    .map(([depth, items, space]) => `${"[".repeat(depth + 1)}${space}${items.join(",")}${"]".repeat(depth + 1)}`),
  object: fc.array(fc.tuple(fc.constantFrom('"a"', '"0"', '"1"', '"b"'), tie("value")), { maxLength: 4 }).map((entries) => `{${entries.map(([key, value]) => `${key}:${value}`).join(",")}}`),
})).value;
/** One closing bracket or brace swapped for the other. */
const misclosed = (text: fc.Arbitrary<string>) =>
  fc.tuple(text, fc.nat()).map(([body, pick]) => {
    const closers = [...body.matchAll(/[\]}]/g)].map((match) => match.index);
    if (closers.length === 0) return body;
    const at = closers[pick % closers.length];
    return body.slice(0, at) + (body[at] === "]" ? "}" : "]") + body.slice(at + 1);
  });
const nestingBatchText = fc
  .tuple(nestingText, nestingText)
  .map(([extra, value]) => `{"apiKey":"key","extra":${extra},"events":[{"event":"signup","distinctId":"user-1","properties":{"v":${value}}}]}`);

describe("parsing ingest bodies from bytes", () => {
  it("answers every generated batch exactly as JSON.parse does, rows included", () => {
    acceptedEventCount = 0;
    fc.assert(fc.property(batchText, (text) => expectSameAnswer(text, "batch")), { numRuns: 1500 });
    expect(acceptedEventCount, "events stored from 1 500 generated batches").toBeGreaterThan(600);
  });

  it("answers every generated single event exactly as JSON.parse does", () => {
    acceptedEventCount = 0;
    fc.assert(fc.property(singleText, (text) => expectSameAnswer(text, "single")), { numRuns: 1500 });
    expect(acceptedEventCount, "events stored from 1 500 generated single events").toBeGreaterThan(150);
  });

  it("refuses exactly the damaged bodies JSON.parse refuses, with the same answer", () => {
    fc.assert(
      fc.property(damaged(batchText), (text) => expectSameAnswer(text, "batch")),
      { numRuns: 1500 },
    );
    fc.assert(
      fc.property(damaged(singleText), (text) => expectSameAnswer(text, "single")),
      { numRuns: 500 },
    );
  });

  it("reads runs of brackets, closed right or wrong, and objects of scalars inside them as JSON.parse does", () => {
    acceptedEventCount = 0;
    fc.assert(fc.property(nestingBatchText, (text) => expectSameAnswer(text, "batch")), { numRuns: 1000 });
    expect(acceptedEventCount, "events stored from 1 000 generated nestings").toBeGreaterThan(500);
    fc.assert(fc.property(damaged(nestingBatchText), (text) => expectSameAnswer(text, "batch")), { numRuns: 1000 });
    fc.assert(fc.property(misclosed(nestingBatchText), (text) => expectSameAnswer(text, "batch")), { numRuns: 1000 });
  });

  it("answers bodies that are not objects, empty, or only whitespace as JSON.parse does", () => {
    for (const text of ["", " ", "[]", "[1,2]", '"apiKey"', "null", "1", "{}", "{} {}", "{}x", "\ufeff{}", '{"apiKey":"key","events":[]} ', '{"apiKey":"key","events":[],}']) {
      expectSameAnswer(text, "batch");
      expectSameAnswer(text, "single");
    }
  });

  it("counts an events array past the batch limit without reading the rest, as JSON.parse counts it", () => {
    const events = Array.from({ length: limits.batchEventsMax + 5 }, (_, index) => (index % 3 ? '{"event":"a","distinctId":"u"}' : "[[1]]"));
    expectSameAnswer(`{"apiKey":"key","events":[${events.join(",")}]}`, "batch");
    expectSameAnswer(`{"apiKey":"key","events":[${events.slice(0, limits.batchEventsMax).join(",")}]}`, "batch");
    expectSameAnswer(`{"apiKey":"key","events":[${events.join(",")},]}`, "batch");
  });

  it("prints nested values at and around the properties limit as JSON.stringify does", () => {
    const half = limits.propertiesBytesMax / 2;
    const values = [
      `[${"[],".repeat(half - 2)}[]]`, // half - 1 arrays inside one: exactly `half` containers
      `[${"[],".repeat(half - 1)}[]]`, // one container too many: refused unprinted
      `{"a":[${"[],".repeat(half)}[]],"a":1}`, // too many containers, but a later duplicate drops them
      // The same, among more members than are compared pairwise, and under an escaped key.
      `{"a":[${"[],".repeat(half)}[]],${Array.from({ length: 20 }, (_, index) => `"k${index}":[]`).join(",")},"a":1}`,
      `{"\u0061":[${"[],".repeat(half)}[]],"b":[],"a":1}`,
      `[{"a":[${"[],".repeat(half / 2)}[]],"a":1},{"a":[${"[],".repeat(half / 2)}[]],"b":[],"a":1}]`,
      `{"b":1,"1":[${"[],".repeat(half)}[]],"1":{"x":[2, 3]},"0":"zero"}`,
      `"${"é".repeat(half - 20)}"`,
      `["${"x".repeat(limits.propertiesBytesMax - 14)}"]`,
      `["${"x".repeat(limits.propertiesBytesMax)}"]`,
      `${"[".repeat(20_000)}${"]".repeat(20_000)}`,
      `${'{"k":'.repeat(5000)}1${"}".repeat(5000)}`,
      `${'{"b":0,"1":'.repeat(3000)}1${"}".repeat(3000)}`,
      `[${'{"1":0,"0":0,"1":{"b":[],"a":{}}},'.repeat(2000)}{}]`,
      `{${Array.from({ length: 40 }, (_, index) => `"${(index * 7) % 23}":${index}`).join(",")}}`, // past the plain-key path: many members
      `{"a\\u0062":1,"ab":2,"b":3,"\\u0030":4}`,
    ];
    for (const value of values) {
      expectSameAnswer(`{"apiKey":"key","events":[{"event":"a","distinctId":"u","properties":{"v":${value}}}]}`, "batch");
      expectSameAnswer(`{"apiKey":"key","event":"a","distinctId":"u","properties":{"v":${value},"w":2}}`, "single");
      // A later key's own error wins over a value printed past the limit, as when JSON.parse built it.
      expectSameAnswer(`{"apiKey":"key","event":"a","distinctId":"u","properties":{"v":${value},"w":"\\ud800"}}`, "single");
      expectSameAnswer(`{"apiKey":"key","event":"a","distinctId":"u","properties":{"v":${value},"\\udc00":1}}`, "single");
    }
  });

  it("tells keys apart as JSON.parse does however they are spelled, in objects of any size", () => {
    // Few distinct code units, each written raw or escaped in every way JSON allows, so that
    // differently spelled keys often decode to the same string and must be counted as one.
    const unit = fc.constantFrom(0x61, 0x22, 0x5c, 0x2f, 0x0a, 0x08, 0x01, 0xe9, 0x2028, 0xd83d, 0xde00, 0xdbff, 0xdfff, 0x30, 0x31, 0x39, 0x7f);
    const spelledUnit = fc.tuple(unit, fc.nat()).map(([code, choice]) => {
      const hex = code.toString(16).padStart(4, "0");
      const short = ({ 0x22: '\\"', 0x5c: "\\\\", 0x2f: "\\/", 0x0a: "\\n", 0x08: "\\b" } as Record<number, string>)[code];
      const raw = code >= 0x20 && code !== 0x22 && code !== 0x5c && (code < 0xd800 || code > 0xdfff) ? String.fromCharCode(code) : undefined;
      const spellings = [`\\u${hex}`, `\\u${hex.toUpperCase()}`, ...(short === undefined ? [] : [short]), ...(raw === undefined ? [] : [raw, raw])];
      return spellings[choice % spellings.length];
    });
    const spelledKey = fc.array(fc.oneof(spelledUnit, fc.constantFrom("🚀", "\\ud83d\\ude80")), { maxLength: 3 }).map((units) => `"${units.join("")}"`);
    const objectText = fc
      .array(fc.tuple(spelledKey, fc.oneof(scalarText, jsonText)), { minLength: 1, maxLength: 60 })
      .map((members) => `{${members.map(([key, value]) => `${key}:${value}`).join(",")}}`);
    fc.assert(
      fc.property(objectText, (object) => {
        expectSameAnswer(`{"apiKey":"key","event":"a","distinctId":"u","properties":{"v":${object}}}`, "single");
        expectSameAnswer(`{"apiKey":"key","event":"a","distinctId":"u","properties":${object}}`, "single");
      }),
      { numRuns: 600 },
    );
  });

  it("answers properties with more keys than can print within the limit as JSON.parse does", () => {
    const keys = (count: number, spell: (index: number) => string) => Array.from({ length: count }, (_, index) => spell(index));
    const printable = Array.from({ length: 95 }, (_, index) => String.fromCharCode(0x20 + index)).filter((character) => character !== '"' && character !== "\\");
    const plain = keys(20_000, (index) => `"k${index}":${index}`);
    const tooManyContainers = `[${"[],".repeat(limits.propertiesBytesMax / 2)}[]]`;
    const withMember = (members: string[], at: number, member: string) => [...members.slice(0, at), member, ...members.slice(at)];
    const propertiesCases = [
      plain,
      withMember(plain, 15_000, '"\\ud800":1'),
      withMember(plain, 15_000, '"s":"\\udc00"'),
      withMember(plain, 15_000, `"deep":${tooManyContainers}`),
      withMember(withMember(plain, 18_000, '"\\ud800":1'), 15_000, '"s":"\\udc00"'),
      // A refusing member dropped by a later duplicate, and a fine one made refusing by one.
      withMember(withMember(plain, 19_000, '"s":1'), 15_000, '"s":"\\udc00"'),
      withMember(plain, 19_000, '"k3":"\\udc00"'),
      // Index keys print first: the last one written is read first.
      [...keys(20_000, (index) => `"${20_000 - index}":1`), '"5":"\\udfff"'],
      [...keys(12_000, (index) => `"${(index * 7919) % 12_000}":${index}`), ...keys(12_000, (index) => `"x${index % 9000}":${index}`)],
      // Fewer keys than could print: stored, in JSON.parse's order, duplicates dropped.
      [...keys(3_000, (index) => `"${(index * 7) % 1000}":${index}`), ...keys(3_000, (index) => `"\\u0061${index % 2000}":"${index}"`)],
      // Past the first 4 096 members values are scanned again when printed; an index key among
      // them prints first, before the earlier values whose objects print rewritten.
      [`"a":{"1":[0],"0":{"y":1,"x":2,"y":3}}`, ...keys(5_000, (index) => `"k${index.toString(36)}":0`), `"7":{"1":{"b":0,"a":1},"0":2}`],
      // As many two-letter keys as there are, which print within the limit.
      keys(93 * 93, (index) => `"${printable[Math.floor(index / 93)]}${printable[index % 93]}":0`),
      // More members than could print, but fewer keys: stored, each key with its last value.
      keys(20_000, (index) => `"k${index % 5_000}":${index}`),
      keys(20_000, (index) => `"${(index * 7) % 4_000}":${index}`),
      keys(2_000, (index) => `"${(index * 2_654_435_761) % 4_294_967_296}":${index}`), // index keys up to 2³² − 1, which is not one
      // Values printed past the limit together; a later member's own refusal still wins.
      [`"a":["${"x".repeat(40_000)}"]`, `"b":["${"y".repeat(40_000)}"]`, '"c":"\\ud800"'],
      [`"a":["${"x".repeat(40_000)}"]`, `"b":["${"y".repeat(40_000)}"]`, `"c":${tooManyContainers}`],
      [`"a":["${"x".repeat(40_000)}"]`, `"b":["${"y".repeat(40_000)}"]`, '"c":[1]'],
      [`"a":["${"x".repeat(30_000)}"]`, `"b":["${"y".repeat(30_000)}"]`, '"c":[1]'],
    ];
    for (const members of propertiesCases) {
      expectSameAnswer(`{"apiKey":"key","event":"a","distinctId":"u","properties":{${members.join(",")}}}`, "single");
      expectSameAnswer(`{"apiKey":"key","events":[{"event":"a","distinctId":"u","properties":{"v":{${members.join(",")}}}}]}`, "batch");
    }
  });

  it("keeps scratch sized for every object, whichever kind of object grew it first", () => {
    // An object of 65 members holding arrays, one key repeated, grows the duplicate finder's
    // scratch; a larger properties object read next must find all of its own sized too.
    const nested = `{"a":[],${Array.from({ length: 64 }, (_, index) => `"b${index}":[]`).join(",")},"a":[]}`;
    // Alone, such an object was refused as too large (its kept members read from stale scratch).
    expectSameAnswer(`{"apiKey":"key","event":"e","distinctId":"u","properties":{"v":{${Array.from({ length: 65 }, (_, index) => `"k${index}":[]`).join(",")},"k0":1}}}`, "single");
    for (const count of [65, 100, 128, 129]) {
      const properties = `{"v":${nested},${Array.from({ length: count }, (_, index) => `"p${index}":${index}`).join(",")}}`;
      expectSameAnswer(`{"apiKey":"key","event":"e","distinctId":"u","properties":${properties}}`, "single");
      expectSameAnswer(`{"apiKey":"key","events":[{"event":"e","distinctId":"u","properties":{"w":${nested}}},{"event":"e","distinctId":"u","properties":${properties}}]}`, "batch");
    }
  });

  it("reads non-ASCII text and escapes in every field as JSON.parse does", () => {
    const text = '{"apiKey":"k\\u0065y","events":[{"ev\\u0065nt":"名前 🛒","distinctId":"\\u00fcber","properties":{"\\u00e9":"\\ud83d\\ude80","x":["\\u2028",{"\\u0031":1,"0":0}]}}]}';
    expectSameAnswer(text, "batch");
    expectSameAnswer(new Uint8Array([...Buffer.from('{"apiKey":"key","event":"'), 0xff, ...Buffer.from('","distinctId":"u"}')]), "single");
  });
});
