/**
 * linearJson prints deep property values in linear time; it must print exactly
 * what JSON.stringify prints for anything JSON.parse can produce: key order
 * (integer-like keys first), duplicate keys, `__proto__` as an own key, string
 * escapes, number forms, and nesting deeper than JSON.stringify can recurse.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { linearJson } from "../../src/ingest/event-validation.js";

const oddKey = fc.oneof(fc.string(), fc.constantFrom("__proto__", "constructor", "0", "10", "2", "-1", "01", "4294967294", "4294967295", "toJSON", ""));
const oddScalar = fc.oneof(
  fc.string(),
  fc.string({ unit: "grapheme" }),
  fc.constantFrom("\u0000", "\u001f", '"', "\\", "\u2028", "</script>"),
  fc.double(),
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
);
/** JSON text (not values), so duplicate keys and number spellings reach JSON.parse as a client sends them. */
const jsonText = fc.letrec<{ value: string; scalar: string; array: string; object: string }>((tie) => ({
  value: fc.oneof({ depthSize: "small" }, tie("scalar"), tie("array"), tie("object")),
  scalar: fc.oneof(oddScalar.map((value) => JSON.stringify(value)), fc.constantFrom("1e400", "-0", "1.50", "1E2", "0.000001", "123456789012345678901234567890")),
  array: fc.array(tie("value"), { maxLength: 5 }).map((items) => `[${items.join(",")}]`),
  object: fc.array(fc.tuple(oddKey, tie("value")), { maxLength: 5 }).map((entries) => `{${entries.map(([key, value]) => `${JSON.stringify(key)}:${value}`).join(",")}}`),
})).value;

describe("linearJson", () => {
  it("prints what JSON.stringify prints for any parsed JSON container", () => {
    fc.assert(
      fc.property(jsonText, (text) => {
        const parsed: unknown = JSON.parse(text);
        if (parsed === null || typeof parsed !== "object") return;
        expect(linearJson(parsed)).toBe(JSON.stringify(parsed));
      }),
      { numRuns: 3000 },
    );
  });

  it("prints nesting deeper than JSON.stringify can, exactly", () => {
    const depth = 200_000;
    const text = `${'[{"a":'.repeat(depth)}1${"}]".repeat(depth)}`;
    const parsed = JSON.parse(text) as object;
    expect(() => JSON.stringify(parsed)).toThrow(RangeError);
    expect(linearJson(parsed)).toBe(text);
  });

  it("matches JSON.stringify on nested values a few thousand levels deep, mixed with siblings", () => {
    const text = `{"x":[${"[".repeat(3000)}"deep",{"k":-0}${"]".repeat(3000)},[],{}],"0":true,"__proto__":{"b":[1,2.5e-7]}}`;
    const parsed = JSON.parse(text) as object;
    expect(linearJson(parsed)).toBe(JSON.stringify(parsed));
  });
});
