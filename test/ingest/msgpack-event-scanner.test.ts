/**
 * msgpack-event-scanner.ts reads flat msgpack event bodies straight into the
 * chunk and leaves every other body to msgpackr. Validation must not be able
 * to tell which read a body: for any body the answer and the chunk bytes are
 * those of the msgpackr path, and, when msgpackr takes the body, those of the
 * same value sent as JSON. The bodies are encoded here, not by msgpackr, so
 * that they use every width msgpack allows for a string, number, map or array
 * (a str32 of three bytes, an int64 of 5, a map16 of two entries) and hold
 * what msgpackr would never write: repeated and non-string keys, invalid
 * UTF-8, bin, ext, NaN, bytes after the value, and damage anywhere. Each test
 * also checks that the scanner really took a good share of them, so it cannot
 * pass by giving up.
 */
import fc from "fast-check";
import { pack, Unpackr } from "msgpackr";
import { gzipSync } from "node:zlib";
import { beforeEach, describe, expect, it } from "vitest";
import { limits } from "../../src/config/limits.js";
import { ChunkBuilder } from "../../src/storage/chunk-codec.js";
import { scanMsgpackBody } from "../../src/ingest/msgpack-event-scanner.js";
import { type IngestParser, type IngestShape, validateBody } from "../../src/ingest/event-validation.js";

const receivedAtMs = Date.UTC(2024, 4, 1, 12);

function validate(bytes: Uint8Array, shape: IngestShape, parser: IngestParser, builder = new ChunkBuilder(), gzip = false) {
  const result = validateBody(bytes, gzip, shape, receivedAtMs, () => ({ builder, chunkIndex: 0 }), parser);
  return { result, chunk: Buffer.from(builder.finish()).toString("hex") };
}

/** As the service's decoder reads a body msgpack-body.ts let through (the JSON twin is built from its value). */
const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: true, int64AsType: "number", moreTypes: false, structuredClone: false, bundleStrings: false });

let scannedBodies = 0;
let comparedBodies = 0;
let jsonTwins = 0;

function expectSameAnswer(bytes: Uint8Array, shape: IngestShape): void {
  const scanned = validate(bytes, shape, "msgpack");
  const decoded = validate(bytes, shape, "msgpackr");
  const label = Buffer.from(bytes).toString("hex").slice(0, 400);
  expect(scanned.result, label).toEqual(decoded.result);
  expect(scanned.chunk, label).toBe(decoded.chunk);
  comparedBodies++;
  if (scanMsgpackBody(bytes, shape, receivedAtMs) !== undefined) scannedBodies++;
  // The same value as JSON, whenever msgpack-body.ts took the body as a map.
  if (decoded.result.kind === "rejected" && decoded.result.error.code === "invalid_json") return;
  const json = validate(Buffer.from(JSON.stringify(unpackr.unpack(bytes)), "utf8"), shape, "auto");
  expect(scanned.result, label).toEqual(json.result);
  expect(scanned.chunk, label).toBe(json.chunk);
  jsonTwins++;
}

function expectScannedShare(minimum: number): void {
  const [scanned, compared] = [scannedBodies, comparedBodies];
  scannedBodies = 0;
  comparedBodies = 0;
  expect(scanned / compared, `${scanned} of ${compared} bodies scanned`).toBeGreaterThan(minimum);
}

// ---- A msgpack writer that picks any width the format allows ----

/** A msgpack value to write: `wide` chooses a wider header than needed (0: the narrowest). */
type Node =
  | { kind: "string"; text: string; wide: number }
  | { kind: "raw-string"; bytes: Uint8Array }
  | { kind: "integer"; value: number; format: IntegerFormat }
  | { kind: "float32" | "float64"; value: number }
  | { kind: "nil" }
  | { kind: "boolean"; value: boolean }
  | { kind: "array"; items: Node[]; wide: number }
  | { kind: "map"; entries: Array<[Node, Node]>; wide: number }
  | { kind: "bytes"; bytes: Uint8Array };

type IntegerFormat = "narrowest" | "uint8" | "uint16" | "uint32" | "uint64" | "int8" | "int16" | "int32" | "int64";

function sizedHeader(out: number[], length: number, wide: number, fixBase: number, fixMax: number, codes: readonly [number | undefined, number, number]): void {
  const options: Array<() => void> = [];
  if (length <= fixMax) options.push(() => out.push(fixBase + length));
  if (codes[0] !== undefined && length <= 0xff) options.push(() => out.push(codes[0]!, length));
  if (length <= 0xffff) options.push(() => out.push(codes[1], length >> 8, length & 0xff));
  options.push(() => out.push(codes[2], (length >>> 24) & 0xff, (length >> 16) & 0xff, (length >> 8) & 0xff, length & 0xff));
  options[Math.min(wide, options.length - 1)]();
}

function pushBytes(out: number[], bytes: Uint8Array): void {
  for (const byte of bytes) out.push(byte);
}

/** The format msgpackr picks for an integer. */
function narrowestFormat(value: number): IntegerFormat | "fix" {
  if (value >= -32 && value <= 127) return "fix";
  if (value >= 0) return value <= 0xff ? "uint8" : value <= 0xffff ? "uint16" : value <= 0xffffffff ? "uint32" : "uint64";
  return value >= -128 ? "int8" : value >= -32768 ? "int16" : value >= -(2 ** 31) ? "int32" : "int64";
}

function writeInteger(out: number[], value: number, format: IntegerFormat): void {
  const buffer = Buffer.alloc(8);
  const fits = (min: number, max: number) => value >= min && value <= max;
  switch (format === "narrowest" ? narrowestFormat(value) : format) {
    case "fix":
      return void out.push(value & 0xff);
    case "uint8":
      if (!fits(0, 0xff)) break;
      return void out.push(0xcc, value);
    case "uint16":
      if (!fits(0, 0xffff)) break;
      buffer.writeUInt16BE(value);
      return pushBytes(out, Uint8Array.of(0xcd, ...buffer.subarray(0, 2)));
    case "uint32":
      if (!fits(0, 0xffffffff)) break;
      buffer.writeUInt32BE(value);
      return pushBytes(out, Uint8Array.of(0xce, ...buffer.subarray(0, 4)));
    case "uint64":
      if (value < 0) break;
      buffer.writeBigUInt64BE(BigInt(value));
      return pushBytes(out, Uint8Array.of(0xcf, ...buffer));
    case "int8":
      if (!fits(-128, 127)) break;
      return void out.push(0xd0, value & 0xff);
    case "int16":
      if (!fits(-32768, 32767)) break;
      buffer.writeInt16BE(value);
      return pushBytes(out, Uint8Array.of(0xd1, ...buffer.subarray(0, 2)));
    case "int32":
      if (!fits(-(2 ** 31), 2 ** 31 - 1)) break;
      buffer.writeInt32BE(value);
      return pushBytes(out, Uint8Array.of(0xd2, ...buffer.subarray(0, 4)));
  }
  if (value >= 2 ** 63) {
    buffer.writeBigUInt64BE(BigInt(value));
    return pushBytes(out, Uint8Array.of(0xcf, ...buffer));
  }
  buffer.writeBigInt64BE(BigInt(value));
  pushBytes(out, Uint8Array.of(0xd3, ...buffer));
}

function write(out: number[], node: Node): void {
  switch (node.kind) {
    case "string": {
      const bytes = Buffer.from(node.text, "utf8");
      sizedHeader(out, bytes.length, node.wide, 0xa0, 31, [0xd9, 0xda, 0xdb]);
      return pushBytes(out, bytes);
    }
    case "raw-string":
      sizedHeader(out, node.bytes.length, 0, 0xa0, 31, [0xd9, 0xda, 0xdb]);
      return pushBytes(out, node.bytes);
    case "integer":
      return writeInteger(out, node.value, node.format);
    case "float32": {
      const buffer = Buffer.alloc(4);
      buffer.writeFloatBE(node.value);
      return pushBytes(out, Uint8Array.of(0xca, ...buffer));
    }
    case "float64": {
      const buffer = Buffer.alloc(8);
      buffer.writeDoubleBE(node.value);
      return pushBytes(out, Uint8Array.of(0xcb, ...buffer));
    }
    case "nil":
      return void out.push(0xc0);
    case "boolean":
      return void out.push(node.value ? 0xc3 : 0xc2);
    case "array":
      sizedHeader(out, node.items.length, node.wide, 0x90, 15, [undefined, 0xdc, 0xdd]);
      for (const item of node.items) write(out, item);
      return;
    case "map":
      sizedHeader(out, node.entries.length, node.wide, 0x80, 15, [undefined, 0xde, 0xdf]);
      for (const [key, value] of node.entries) {
        write(out, key);
        write(out, value);
      }
      return;
    case "bytes":
      return pushBytes(out, node.bytes);
  }
}

function encode(node: Node): Uint8Array {
  const out: number[] = [];
  write(out, node);
  return Uint8Array.from(out);
}

// ---- Generated bodies ----

/** Mostly the narrowest header, now and then a wider one. */
const wide = fc.oneof({ weight: 6, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.nat(3) });
const stringNode = (text: fc.Arbitrary<string>): fc.Arbitrary<Node> => fc.tuple(text, wide).map(([value, width]) => ({ kind: "string", text: value, wide: width }));
const name = (text: string): Node => ({ kind: "string", text, wide: 0 });

const plainText = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom("signup", "$pageview", "user_1", "Chrome", "/docs", "", "x y", "é", "🚀", "日本") },
  { weight: 2, arbitrary: fc.string({ maxLength: 8 }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 4, unit: "grapheme" }) },
  // What JSON.stringify escapes, which counts toward the properties' size.
  { weight: 1, arbitrary: fc.constantFrom('say "hi"', "back\\slash", "line\nfeed", "tab\t", "\u0001", "\u001f\u007f", "\u2028") },
);
const invalidUtf8 = fc.constantFrom(Uint8Array.of(0xc3, 0x28), Uint8Array.of(0xed, 0xa0, 0x80), Uint8Array.of(0xff), Uint8Array.of(0x61, 0xe2, 0x82), Uint8Array.of(0xc0, 0xaf));
const textNode = fc.oneof({ weight: 40, arbitrary: stringNode(plainText) }, { weight: 1, arbitrary: invalidUtf8.map((bytes): Node => ({ kind: "raw-string", bytes })) });

const integerFormat = fc.constantFrom<IntegerFormat>("narrowest", "narrowest", "narrowest", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64");
const integerValue = fc.oneof(
  fc.integer({ min: -40, max: 200 }),
  fc.integer(),
  fc.constantFrom(0, -1, -33, -129, 128, 255, 256, 40000, -40000, 65535, 65536, 2 ** 31 - 1, -(2 ** 31), 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1, 2 ** 53 + 2, -(2 ** 53) - 2, 2 ** 63, 2 ** 64 - 2 ** 11, -(2 ** 63)),
  fc.maxSafeInteger(),
);
const numberNode: fc.Arbitrary<Node> = fc.oneof(
  { weight: 4, arbitrary: fc.tuple(integerValue, integerFormat).map(([value, format]): Node => ({ kind: "integer", value, format })) },
  { weight: 2, arbitrary: fc.double().map((value): Node => ({ kind: "float64", value })) },
  { weight: 1, arbitrary: fc.float().map((value): Node => ({ kind: "float32", value })) },
  { weight: 1, arbitrary: fc.constantFrom(0.1, 4.99, -0, 1e21, 1e-7, 5e-324, 2.5).map((value): Node => ({ kind: "float64", value })) },
);
const nil: Node = { kind: "nil" };
const bin: Node = { kind: "bytes", bytes: Uint8Array.of(0xc4, 0x02, 0x01, 0x02) };
const ext: Node = { kind: "bytes", bytes: Uint8Array.of(0xd6, 0xff, 0x00, 0x00, 0x00, 0x01) };
const nested = fc.constantFrom<Node>({ kind: "array", items: [], wide: 0 }, { kind: "array", items: [name("a")], wide: 0 }, { kind: "map", entries: [[name("a"), nil]], wide: 0 }, { kind: "map", entries: [], wide: 1 });
const oddValue = fc.constantFrom<Node>(bin, ext, { kind: "bytes", bytes: Uint8Array.of(0xc1) });

const propertyValue = fc.oneof(
  { weight: 12, arbitrary: textNode },
  { weight: 8, arbitrary: numberNode },
  { weight: 3, arbitrary: fc.constantFrom<Node>(nil, { kind: "boolean", value: true }, { kind: "boolean", value: false }) },
  { weight: 1, arbitrary: nested },
  { weight: 1, arbitrary: oddValue },
);
const propertyKey = fc.oneof(
  { weight: 30, arbitrary: stringNode(fc.nat(99).map((number) => `k${number}`)) },
  { weight: 4, arbitrary: stringNode(fc.constantFrom("country", "plan", "price", "$browser", "a", "b", "", "é", "-1", 'q"uote', "new\nline")) },
  { weight: 1, arbitrary: stringNode(fc.constantFrom("0", "12", "1a", "01", "__proto__", "__proto_")) },
  { weight: 1, arbitrary: fc.constantFrom<Node>({ kind: "integer", value: 1, format: "narrowest" }, nil, { kind: "raw-string", bytes: Uint8Array.of(0xc3, 0x28) }) },
);
const propertiesNode = fc.tuple(fc.array(fc.tuple(propertyKey, propertyValue), { maxLength: 7 }), wide).map(([entries, width]): Node => ({ kind: "map", entries, wide: width }));

const nameNode = fc.oneof(
  { weight: 20, arbitrary: textNode },
  { weight: 1, arbitrary: stringNode(fc.constantFrom("x".repeat(limits.eventNameLengthMax), "x".repeat(limits.eventNameLengthMax + 1), "🚀".repeat(limits.eventNameLengthMax / 2), `${"🚀".repeat(limits.eventNameLengthMax / 2)}x`, "é".repeat(limits.eventNameLengthMax), "é".repeat(limits.eventNameLengthMax + 1))) },
  { weight: 1, arbitrary: fc.constantFrom<Node>(nil, { kind: "integer", value: 7, format: "narrowest" }, { kind: "array", items: [], wide: 0 }, { kind: "boolean", value: true }) },
);
const distinctIdNode = fc.oneof(
  { weight: 20, arbitrary: textNode },
  { weight: 6, arbitrary: numberNode },
  { weight: 1, arbitrary: fc.constantFrom<Node>(nil, { kind: "map", entries: [], wide: 0 }, { kind: "boolean", value: false }, name("u".repeat(limits.distinctIdLengthMax + 1)), bin) },
);
const timestampNode = fc.oneof(
  { weight: 20, arbitrary: stringNode(fc.integer({ min: 0, max: 4_102_444_800_000 }).map((ms) => new Date(ms).toISOString())) },
  {
    weight: 3,
    arbitrary: fc.constantFrom<Node>(
      name("2024-05-01T12:00:00+02:00"),
      name("2024-05-01 12:00"),
      name("2024-05-01T12:00:00.123456789Z"),
      name("2024-02-30T00:00:00Z"),
      name("1969-12-31T23:59:59Z"),
      name("2024-05-01T12:00:00"),
      name("2024-05-01"),
      name("2024-05-01T12:00:00.000Z "),
      name("2024-05-01T12:00:00.0\"0Z"),
      nil,
      { kind: "integer", value: 1714564800000, format: "narrowest" },
      ext,
    ),
  },
);
const uuidNode = fc.oneof(
  { weight: 20, arbitrary: stringNode(fc.uuid()) },
  { weight: 1, arbitrary: fc.constantFrom<Node>(name("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"), name("not-a-uuid"), nil, { kind: "integer", value: 1, format: "narrowest" }, name("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1"), name("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111"), name("a0eebc999c0b4ef8bb6d6bb9bd380a11")) },
);

type Entry = [Node, Node];
/** null but one time in twenty. */
const rarely = <T>(arbitrary: fc.Arbitrary<T>) => fc.oneof({ weight: 19, arbitrary: fc.constant(null) }, { weight: 1, arbitrary });
const eventEntries = fc
  .record({
    event: nameNode,
    distinctId: distinctIdNode,
    timestamp: fc.option(timestampNode, { freq: 3 }),
    uuid: fc.option(uuidNode, { freq: 3 }),
    properties: fc.option(fc.oneof({ weight: 8, arbitrary: propertiesNode }, { weight: 1, arbitrary: fc.constantFrom<Node>(nil, { kind: "array", items: [], wide: 0 }, { kind: "integer", value: 1, format: "narrowest" }, name("text")) }), { freq: 5 }),
    // Now and then a field missing, repeated or unknown, or a key that is not a string: the msgpackr path decides those.
    oddity: rarely(
      fc.constantFrom<Entry>(
        [name("event"), name("again")],
        [name("extra"), { kind: "integer", value: 1, format: "narrowest" }],
        [name("distinctId"), name("second")],
        [name("apiKey"), name("k")],
        [name("properties"), { kind: "map", entries: [], wide: 0 }],
        [name("even"), nil],
        [name("eventss"), nil],
        [name("uuidx"), nil],
        [name("distinctIt"), nil],
        [name("propertiez"), nil],
        [{ kind: "integer", value: 5, format: "narrowest" }, nil],
        [nil, nil],
        [name("__proto__"), nil],
      ),
    ),
    drop: rarely(fc.constantFrom("event", "distinctId")),
    order: fc.nat(),
    width: wide,
  })
  .map(({ event, distinctId, timestamp, uuid, properties, oddity, drop, order, width }) => {
    const entries: Entry[] = [];
    if (drop !== "event") entries.push([name("event"), event]);
    if (drop !== "distinctId") entries.push([name("distinctId"), distinctId]);
    if (timestamp !== null) entries.push([name("timestamp"), timestamp]);
    if (uuid !== null) entries.push([name("uuid"), uuid]);
    if (properties !== null) entries.push([name("properties"), properties]);
    if (oddity !== null) entries.push(oddity);
    // A rotation of the fields: clients write them in any order.
    const shift = entries.length === 0 ? 0 : order % entries.length;
    return { entries: [...entries.slice(shift), ...entries.slice(0, shift)], width };
  });
const eventNode = eventEntries.map(({ entries, width }): Node => ({ kind: "map", entries, wide: width }));
const apiKey = name("ek_sample");

const batchNode = fc
  .tuple(fc.array(fc.oneof({ weight: 30, arbitrary: eventNode }, { weight: 1, arbitrary: fc.constantFrom<Node>(nil, name("text"), { kind: "array", items: [], wide: 0 }) }), { maxLength: 5 }), wide, fc.boolean(), rarely(fc.constantFrom<Entry>([name("extra"), nil], [name("apiKey"), name("other")], [name("apiKey"), nil], [name("events"), { kind: "array", items: [], wide: 0 }])), wide)
  .map(([events, arrayWidth, keyLast, oddity, mapWidth]): Node => {
    const entries: Entry[] = [
      [name("apiKey"), apiKey],
      [name("events"), { kind: "array", items: events, wide: arrayWidth }],
    ];
    if (keyLast) entries.reverse();
    if (oddity !== null) entries.push(oddity);
    return { kind: "map", entries, wide: mapWidth };
  });
const singleNode = fc.tuple(eventEntries, fc.nat(), rarely(fc.constantFrom<Node>(nil, { kind: "integer", value: 5, format: "narrowest" }))).map(([{ entries, width }, at, oddKey]): Node => {
  entries.splice(at % (entries.length + 1), 0, [name("apiKey"), oddKey ?? apiKey]);
  return { kind: "map", entries, wide: width };
});

/** The bytes cut short, one byte replaced or inserted, or one more value after the body. */
const damaged = (node: fc.Arbitrary<Node>) =>
  fc.tuple(node, fc.nat(), fc.constantFrom("cut", "replace", "insert", "append"), fc.constantFrom(0x00, 0x7f, 0x80, 0x81, 0x90, 0xa0, 0xa5, 0xc0, 0xc1, 0xc3, 0xca, 0xcb, 0xd9, 0xdc, 0xde, 0xdf, 0xe0, 0xff)).map(([body, at, how, byte]) => {
    const bytes = encode(body);
    const position = bytes.length === 0 ? 0 : at % bytes.length;
    switch (how) {
      case "cut":
        return bytes.subarray(0, position);
      case "replace": {
        const copy = Uint8Array.from(bytes);
        copy[position] = byte;
        return copy;
      }
      case "insert":
        return Uint8Array.from([...bytes.subarray(0, position), byte, ...bytes.subarray(position)]);
      default:
        return Uint8Array.from([...bytes, byte]);
    }
  });

describe("the byte scanner of flat msgpack events", () => {
  beforeEach(() => {
    scannedBodies = 0;
    comparedBodies = 0;
    jsonTwins = 0;
  });

  it("answers every generated batch exactly as the msgpackr path and the same batch in JSON do, rows included", () => {
    fc.assert(fc.property(batchNode, (node) => expectSameAnswer(encode(node), "batch")), { numRuns: 2500 });
    expect(jsonTwins).toBeGreaterThan(1000);
    expectScannedShare(0.15);
  });

  it("answers every generated single event exactly as the msgpackr path and the same event in JSON do", () => {
    fc.assert(fc.property(singleNode, (node) => expectSameAnswer(encode(node), "single")), { numRuns: 2500 });
    expectScannedShare(0.2);
  });

  it("answers damaged bodies exactly as the msgpackr path does", () => {
    fc.assert(fc.property(damaged(batchNode), (bytes) => expectSameAnswer(bytes, "batch")), { numRuns: 2000 });
    fc.assert(fc.property(damaged(singleNode), (bytes) => expectSameAnswer(bytes, "single")), { numRuns: 1500 });
    // Damage to msgpack mostly breaks its structure: a few in a thousand still scan.
    expectScannedShare(0.001);
  });

  it("gathers scanned and decoded single events of one key into one chunk as the msgpackr path does", () => {
    fc.assert(
      fc.property(fc.array(singleNode, { minLength: 2, maxLength: 8 }), (nodes) => {
        const decoded = new ChunkBuilder();
        const scanned = new ChunkBuilder();
        for (const node of nodes) expect(validate(encode(node), "single", "msgpack", scanned).result).toEqual(validate(encode(node), "single", "msgpackr", decoded).result);
        expect(Buffer.from(scanned.finish()).toString("hex")).toBe(Buffer.from(decoded.finish()).toString("hex"));
      }),
      { numRuns: 500 },
    );
  });

  it("takes properties up to exactly the size limit, escapes counted as JSON.stringify writes them, and leaves the first byte past it", () => {
    // `{"k":"…"}` is 8 bytes around the value; a `"` in it is written `\"`, a \u0001 `\u0001`.
    const atLimit = "x".repeat(limits.propertiesBytesMax - 8);
    for (const [value, scanned] of [
      [atLimit, true],
      [`${atLimit}x`, false],
      [`${atLimit.slice(2)}"`, true],
      [`${atLimit.slice(1)}"`, false],
      [`${atLimit.slice(6)}\u0001`, true],
      [`${atLimit.slice(5)}\u0001`, false],
      ["é".repeat((limits.propertiesBytesMax - 8) / 2), true],
      [`${"é".repeat((limits.propertiesBytesMax - 8) / 2)}x`, false],
    ] as const) {
      const bytes = pack({ apiKey: "key", events: [{ event: "e", distinctId: "u", properties: { k: value } }] });
      expectSameAnswer(bytes, "batch");
      expect(scanMsgpackBody(bytes, "batch", receivedAtMs) !== undefined, value.slice(-3)).toBe(scanned);
    }
    // Keys are counted escaped too, and numbers as printed: 1e21 is stored as "1e+21".
    const padding = "x".repeat(limits.propertiesBytesMax - 8 - 10 - 5);
    for (const number of [100, 1e21, 1.5, -0]) expectSameAnswer(pack({ apiKey: "key", event: "e", distinctId: "u", properties: { k: padding, 'n"': number } }), "single");
    // A nil is `null` in JSON: `,"n":null` is 9 bytes.
    for (const extra of [0, 1]) {
      const bytes = pack({ apiKey: "key", event: "e", distinctId: "u", properties: { k: "x".repeat(limits.propertiesBytesMax - 8 - 9 + extra), n: null } });
      expectSameAnswer(bytes, "single");
      expect(scanMsgpackBody(bytes, "single", receivedAtMs) !== undefined).toBe(extra === 0);
    }
  });

  it("takes up to 4 096 properties in an event, repeated keys never, and a full batch but not one event more", () => {
    const properties = (count: number) => Object.fromEntries(Array.from({ length: count }, (_, index) => [`k${index}`, index % 10]));
    for (const count of [4095, 4096, 4097]) expectSameAnswer(pack({ apiKey: "key", event: "e", distinctId: "u", properties: properties(count) }), "single");
    expect(scanMsgpackBody(pack({ apiKey: "key", event: "e", distinctId: "u", properties: properties(4096) }), "single", receivedAtMs)).toBeDefined();
    expect(scanMsgpackBody(pack({ apiKey: "key", event: "e", distinctId: "u", properties: properties(4097) }), "single", receivedAtMs)).toBeUndefined();
    // A repeated key far from its first place: msgpackr keeps the last value, at the first place.
    const entries: Entry[] = [...Array.from({ length: 3000 }, (_, index): Entry => [name(`k${index}`), name("v")]), [name("k7"), name("last")]];
    const repeated = encode({ kind: "map", entries: [[name("apiKey"), name("key")], [name("event"), name("e")], [name("distinctId"), name("u")], [name("properties"), { kind: "map", entries, wide: 0 }]], wide: 0 });
    expectSameAnswer(repeated, "single");
    expect(scanMsgpackBody(repeated, "single", receivedAtMs)).toBeUndefined();

    const event = { event: "e", distinctId: "u", properties: { a: 1 } };
    for (const count of [limits.batchEventsMax, limits.batchEventsMax + 1]) {
      const bytes = pack({ apiKey: "key", events: Array.from({ length: count }, () => event) });
      expectSameAnswer(bytes, "batch");
      expect(scanMsgpackBody(bytes, "batch", receivedAtMs) !== undefined).toBe(count <= limits.batchEventsMax);
    }
  });

  it("reads gzip bodies and bench-shaped batches, as msgpackr packs them, through the scanner", () => {
    const events = Array.from({ length: 50 }, (_, index) => ({
      event: ["$pageview", "signup", "purchase"][index % 3],
      distinctId: index % 4 === 0 ? index : `user_${index % 7}`,
      timestamp: new Date(Date.UTC(2024, 3, 1) + index * 3_600_000).toISOString(),
      // Absent rather than undefined: msgpackr packs undefined as an ext, which is refused.
      ...(index % 2 ? { uuid: `0000000${index % 10}-0000-4000-8000-00000000000${index % 10}` } : {}),
      properties: { price: [4.99, 9, 19.5, 100][index % 4], country: ["US", "DE"][index % 2], paid: index % 3 === 0, note: index % 5 ? null : "x" },
    }));
    const bytes = pack({ apiKey: "key", events });
    expectSameAnswer(bytes, "batch");
    expect(scanMsgpackBody(bytes, "batch", receivedAtMs)?.eventCount).toBe(50);
    expectScannedShare(0.99);
    const gzipped = gzipSync(bytes);
    const [scanned, decoded] = (["msgpack", "msgpackr"] as const).map((parser) => validate(gzipped, "batch", parser, new ChunkBuilder(), true));
    expect(scanned).toEqual(decoded);
    expect(scanned.result).toMatchObject({ kind: "parsed", acceptedCount: 50 });
  });
});
