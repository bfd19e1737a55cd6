import fc from "fast-check";

/**
 * The text cut short, or one character replaced or inserted: a character that
 * matters to JSON's grammar or to the number and literal forms the parsers
 * read, so that damage lands where a parser decides something.
 */
export const damaged = (text: fc.Arbitrary<string>) =>
  fc.tuple(text, fc.nat(), fc.constantFrom("cut", "replace", "insert"), fc.constantFrom(..."{}[],:\"\\ 0-.eE+tfn\u0000\u001f".split(""))).map(([body, at, how, character]) => {
    const position = body.length === 0 ? 0 : at % body.length;
    if (how === "cut") return body.slice(0, position);
    if (how === "replace") return body.slice(0, position) + character + body.slice(position + 1);
    return body.slice(0, position) + character + body.slice(position);
  });
