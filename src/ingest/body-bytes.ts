/**
 * An ingest body parsed from its UTF-8 bytes, for bodies holding millions of
 * arrays and objects. V8's JSON.parse materialises every one of them (~0.3 µs
 * each here: a 20 MiB batch of nested arrays took 2.6–4.7 s), although nothing
 * but a property's printed text is ever kept. This parser builds only what
 * validation reads — the envelope, the events, their fields and `properties` —
 * and prints each nested property value straight from the bytes, so its cost is
 * a few passes over the bytes whatever they hold.
 *
 * Its answer is JSON.parse's, with four differences validation cannot observe:
 * - objects have no prototype (so `__proto__` stays an own key, as JSON.parse keeps it);
 * - a property value that is an array or object is a PrintedValue holding
 *   JSON.stringify(JSON.parse(its text)), or undefined when that is known to be
 *   longer than the properties limit;
 * - arrays and objects where validation only looks at the type (an array
 *   `properties`, an object `event`, unknown fields) are empty stand-ins;
 * - an `events` array longer than the batch limit keeps its length but only its
 *   first elements.
 * Syntax is checked everywhere, as JSON.parse checks it; the caller has already
 * checked that the bytes are UTF-8.
 */
import { limits } from "../config/limits.js";

/** A nested property value, already printed as JSON.stringify prints it; `text` undefined: too large. */
export class PrintedValue {
  constructor(readonly text: string | undefined) {}
}

export type BodyShape = "batch" | "single";

export type ParsedBody = { kind: "object"; value: Record<string, unknown> } | { kind: "not-object" } | { kind: "syntax-error" };

/** Parses an ingest body (batch or single event) from bytes that are valid UTF-8. */
export function parseBodyBytes(bytes: Uint8Array, shape: BodyShape): ParsedBody {
  const parser = new BodyParser(bytes);
  try {
    parser.skipWhitespace();
    let parsed: ParsedBody;
    if (parser.peek() === openBrace) {
      parsed = { kind: "object", value: parser.parseObject(shape === "batch" ? Level.batchBody : Level.singleBody) };
    } else {
      parser.skipValue();
      parsed = { kind: "not-object" };
    }
    parser.skipWhitespace();
    if (!parser.atEnd()) throw syntaxError;
    return parsed;
  } catch (error) {
    if (error === syntaxError) return { kind: "syntax-error" };
    throw error;
  }
}

/** What validation reads at each level of the body; everything else is only syntax-checked. */
const enum Level {
  batchBody,
  singleBody,
  events,
  event,
  properties,
}

/** Thrown (one shared value, no stack captured) on the first byte JSON.parse would refuse. */
const syntaxError = new Error("JSON syntax error");

const openBrace = 0x7b;
const closeBrace = 0x7d;
const openBracket = 0x5b;
const closeBracket = 0x5d;
const quote = 0x22;
const backslash = 0x5c;
const comma = 0x2c;
const colon = 0x3a;
const minus = 0x2d;
const plus = 0x2b;
const zero = 0x30;
const nine = 0x39;
const point = 0x2e;

/** Fields of an event that validation reads (SPEC §2), and of a body besides them. */
const eventFields = new Set(["event", "distinctId", "timestamp", "properties", "uuid"]);

const emptyArrayStandIn: readonly unknown[] = Object.freeze([]);
const emptyObjectStandIn: object = Object.freeze(Object.create(null) as object);

/** Printed values longer than this make the event's properties too large whatever else they hold. */
const printedBytesMax = limits.propertiesBytesMax;
/**
 * Each array or object prints as at least two bytes, so a value holding more of
 * them than this is longer than the properties limit: it is not printed at all.
 */
const printedContainersMax = Math.floor(limits.propertiesBytesMax / 2);

/** An object whose printed members differ from its written ones: duplicates dropped or keys reordered. */
interface RewrittenObject {
  /** Offset just past the object's closing brace. */
  end: number;
  /** keyStart, keyEnd, valueStart, valueEnd of each member, in printed order. */
  members: number[];
}

/** Members of an open object seen so far, once it has two (most have fewer: they need none of this). */
interface OpenObjectMembers {
  /** JSON.parse's own semantics for member order: key → index of the member kept. */
  indexByKey: Record<string, number>;
  /** keyStart, keyEnd, valueStart, valueEnd, containers, per member as written. */
  spans: number[];
}

/** Printing: a stream copies one value token by token; a rewritten object walks its kept members. */
type PrintFrame = { position: number; depth: number } | { object: RewrittenObject; member: number };

const frameArray = 0;
const frameObject = 1;

class BodyParser {
  private position = 0;
  private readonly text: Buffer;
  // Scan stack, one slot per open container: reused across values, grown by doubling.
  private frameKinds = new Uint8Array(64);
  private frameStarts = new Int32Array(64);
  private frameContainers = new Int32Array(64);
  private frameMemberCounts = new Int32Array(64);
  /** keyStart, keyEnd, valueStart of the member being read; then the first member's spans (5 slots). */
  private frameMembers = new Int32Array(64 * 8);
  private openObjectMembers: Array<OpenObjectMembers | undefined> = [];
  private output = new Uint8Array(1024);
  private outputLength = 0;

  constructor(private readonly bytes: Uint8Array) {
    this.text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  peek(): number {
    return this.position < this.bytes.length ? this.bytes[this.position] : -1;
  }

  atEnd(): boolean {
    return this.position >= this.bytes.length;
  }

  skipWhitespace(): void {
    const bytes = this.bytes;
    let position = this.position;
    while (position < bytes.length) {
      const byte = bytes[position];
      if (byte !== 0x20 && byte !== 0x0a && byte !== 0x0d && byte !== 0x09) break;
      position++;
    }
    this.position = position;
  }

  private expect(byte: number): void {
    this.skipWhitespace();
    if (this.bytes[this.position] !== byte) throw syntaxError;
    this.position++;
  }

  /** An object at one of the levels validation reads; the opening brace is next. */
  parseObject(level: Level): Record<string, unknown> {
    const target = Object.create(null) as Record<string, unknown>;
    this.position++;
    this.skipWhitespace();
    if (this.peek() === closeBrace) {
      this.position++;
      return target;
    }
    for (;;) {
      this.skipWhitespace();
      if (this.peek() !== quote) throw syntaxError;
      const key = this.parseString();
      this.expect(colon);
      this.skipWhitespace();
      const wanted = this.memberLevel(level, key);
      if (wanted === undefined) this.skipValue();
      else if (wanted === "scalar") target[key] = this.parseScalarOrStandIn();
      else if (wanted === "property") target[key] = this.peek() === openBracket || this.peek() === openBrace ? this.printValue() : this.parseScalarOrStandIn();
      else target[key] = this.parseAt(wanted);
      this.skipWhitespace();
      const next = this.bytes[this.position++];
      if (next === closeBrace) return target;
      if (next !== comma) throw syntaxError;
    }
  }

  /**
   * What a member's value is parsed as: a level, a scalar (containers become
   * stand-ins), a property (containers are printed), or nothing (skipped).
   */
  private memberLevel(level: Level, key: string): Level | "scalar" | "property" | undefined {
    switch (level) {
      case Level.batchBody:
        return key === "events" ? Level.events : key === "apiKey" ? "scalar" : undefined;
      case Level.singleBody:
      case Level.event:
        // A single event's fields sit beside its apiKey.
        if (key === "apiKey") return level === Level.singleBody ? "scalar" : undefined;
        return key === "properties" ? Level.properties : eventFields.has(key) ? "scalar" : undefined;
      case Level.properties:
        return "property";
      case Level.events:
        return undefined;
    }
  }

  /** A value read at `level` when it is the container that level expects, else a scalar or stand-in. */
  private parseAt(level: Level): unknown {
    const byte = this.peek();
    if (level === Level.events && byte === openBracket) return this.parseEvents();
    if (level !== Level.events && byte === openBrace) return this.parseObject(level);
    return this.parseScalarOrStandIn();
  }

  /** The events array: its first elements parsed, the rest only counted (more answers 413 anyway). */
  private parseEvents(): unknown[] {
    const events: unknown[] = [];
    let count = 0;
    this.position++;
    this.skipWhitespace();
    if (this.peek() === closeBracket) {
      this.position++;
      return events;
    }
    for (;;) {
      this.skipWhitespace();
      if (count > limits.batchEventsMax) this.skipValue();
      else events.push(this.peek() === openBrace ? this.parseObject(Level.event) : this.parseScalarOrStandIn());
      count++;
      this.skipWhitespace();
      const next = this.bytes[this.position++];
      if (next === closeBracket) break;
      if (next !== comma) throw syntaxError;
    }
    events.length = count;
    return events;
  }

  /** A scalar as JSON.parse reads it; an array or object as an empty stand-in of the same type. */
  private parseScalarOrStandIn(): unknown {
    const byte = this.peek();
    switch (byte) {
      case quote:
        return this.parseString();
      case openBracket:
      case openBrace:
        this.skipValue();
        return byte === openBracket ? emptyArrayStandIn : emptyObjectStandIn;
      case 0x74: // t
        this.literal("true");
        return true;
      case 0x66: // f
        this.literal("false");
        return false;
      case 0x6e: // n
        this.literal("null");
        return null;
      default:
        return this.parseNumber();
    }
  }

  private literal(word: string): void {
    const bytes = this.bytes;
    for (let index = 0; index < word.length; index++) {
      if (bytes[this.position + index] !== word.charCodeAt(index)) throw syntaxError;
    }
    this.position += word.length;
  }

  /** Set by stringEnd: whether the string just scanned holds an escape. */
  private stringEscaped = false;

  /** Offset just past the string token starting at `start` (a quote); throws on bad escapes or raw controls. */
  private stringEnd(start: number): number {
    const bytes = this.bytes;
    let position = start + 1;
    let escaped = false;
    for (;;) {
      if (position >= bytes.length) throw syntaxError;
      const byte = bytes[position];
      if (byte === quote) {
        this.stringEscaped = escaped;
        return position + 1;
      }
      if (byte < 0x20) throw syntaxError;
      if (byte === backslash) {
        escaped = true;
        const next = bytes[position + 1];
        if (next === 0x75) {
          for (let digit = 2; digit < 6; digit++) if (!isHexDigit(bytes[position + digit])) throw syntaxError;
          position += 6;
          continue;
        }
        if (next !== quote && next !== backslash && next !== 0x2f && next !== 0x62 && next !== 0x66 && next !== 0x6e && next !== 0x72 && next !== 0x74) throw syntaxError;
        position += 2;
        continue;
      }
      position++;
    }
  }

  private parseString(): string {
    const start = this.position;
    this.position = this.stringEnd(start);
    return this.decodeString(start, this.position);
  }

  /** The string token just scanned by stringEnd. */
  private decodeString(start: number, end: number): string {
    // Escapes are rare: JSON.parse of the token itself decodes them exactly as it would in place.
    return this.stringEscaped ? (JSON.parse(this.text.toString("utf8", start, end)) as string) : this.text.toString("utf8", start + 1, end - 1);
  }

  /** Offset just past the number token at `start`, checked against JSON's grammar. */
  private numberEnd(start: number): number {
    const bytes = this.bytes;
    let position = start;
    if (bytes[position] === minus) position++;
    if (bytes[position] === zero) {
      position++;
    } else if (bytes[position] > zero && bytes[position] <= nine) {
      while (bytes[position] >= zero && bytes[position] <= nine) position++;
    } else {
      throw syntaxError;
    }
    if (bytes[position] === point) {
      position++;
      if (!(bytes[position] >= zero && bytes[position] <= nine)) throw syntaxError;
      while (bytes[position] >= zero && bytes[position] <= nine) position++;
    }
    if (bytes[position] === 0x65 || bytes[position] === 0x45) {
      position++;
      if (bytes[position] === plus || bytes[position] === minus) position++;
      if (!(bytes[position] >= zero && bytes[position] <= nine)) throw syntaxError;
      while (bytes[position] >= zero && bytes[position] <= nine) position++;
    }
    return position;
  }

  private parseNumber(): number {
    const start = this.position;
    this.position = this.numberEnd(start);
    // The grammar was checked: Number() reads the same value JSON.parse would (both round correctly).
    return Number(this.text.toString("latin1", start, this.position));
  }

  /** Syntax-checks one value and moves past it. */
  skipValue(): void {
    this.scanValue(false);
  }

  /**
   * Checks one value's syntax and moves past it. With `track`, also counts the
   * arrays and objects JSON.parse would keep (duplicate keys drop members) and
   * records every object whose printed members differ from its written ones.
   * Iterative: nesting is as deep as the body is long.
   */
  private scanValue(track: boolean): { containers: number; rewrites: Map<number, RewrittenObject> | undefined } {
    const bytes = this.bytes;
    let rewrites: Map<number, RewrittenObject> | undefined;
    let depth = 0;
    let position = this.position;
    for (;;) {
      // A value starts here.
      while (position < bytes.length && isWhitespace(bytes[position])) position++;
      let byte = bytes[position];
      let valueContainers = 0;
      let valueDone = true;
      if (byte === openBracket || byte === openBrace) {
        this.pushFrame(depth, byte === openBracket ? frameArray : frameObject, position);
        depth++;
        position++;
        while (position < bytes.length && isWhitespace(bytes[position])) position++;
        if (bytes[position] === (byte === openBracket ? closeBracket : closeBrace)) {
          position++;
          depth--;
          valueContainers = 1;
        } else {
          valueDone = false;
          if (byte === openBrace) position = this.scanKey(depth - 1, position);
        }
      } else if (byte === quote) {
        position = this.stringEnd(position);
      } else if (byte === 0x74 || byte === 0x66 || byte === 0x6e) {
        this.position = position;
        this.literal(byte === 0x74 ? "true" : byte === 0x66 ? "false" : "null");
        position = this.position;
      } else {
        position = this.numberEnd(position);
      }
      if (!valueDone) continue;
      // A value ended at `position`: hand it to its container, closing containers as they end.
      for (;;) {
        if (depth === 0) {
          this.position = position;
          return { containers: valueContainers, rewrites };
        }
        const frame = depth - 1;
        if (track) this.addMember(frame, position, valueContainers);
        while (position < bytes.length && isWhitespace(bytes[position])) position++;
        byte = bytes[position++];
        const isArray = this.frameKinds[frame] === frameArray;
        if (byte === comma) {
          while (position < bytes.length && isWhitespace(bytes[position])) position++;
          if (!isArray) position = this.scanKey(frame, position);
          break;
        }
        if (byte !== (isArray ? closeBracket : closeBrace)) throw syntaxError;
        depth--;
        valueContainers = 1 + this.frameContainers[frame];
        if (track && !isArray && this.frameMemberCounts[frame] >= 2) {
          const kept = this.closeObject(frame, position);
          valueContainers = 1 + kept.containers;
          if (kept.rewritten !== undefined) (rewrites ??= new Map()).set(this.frameStarts[frame], kept.rewritten);
        }
      }
    }
  }

  private pushFrame(depth: number, kind: number, start: number): void {
    if (depth === this.frameKinds.length) {
      // Doubling every stack keeps frameMembers at 8 slots per frame.
      this.frameKinds = doubled(this.frameKinds);
      this.frameStarts = doubled(this.frameStarts);
      this.frameContainers = doubled(this.frameContainers);
      this.frameMemberCounts = doubled(this.frameMemberCounts);
      this.frameMembers = doubled(this.frameMembers);
    }
    this.frameKinds[depth] = kind;
    this.frameStarts[depth] = start;
    this.frameContainers[depth] = 0;
    this.frameMemberCounts[depth] = 0;
    this.openObjectMembers[depth] = undefined;
  }

  /** Reads `"key"` and the colon after it; the member's value starts at the returned offset. */
  private scanKey(frame: number, position: number): number {
    const bytes = this.bytes;
    if (bytes[position] !== quote) throw syntaxError;
    const keyEnd = this.stringEnd(position);
    const members = this.frameMembers;
    members[frame * 8] = position;
    members[frame * 8 + 1] = keyEnd;
    position = keyEnd;
    while (position < bytes.length && isWhitespace(bytes[position])) position++;
    if (bytes[position++] !== colon) throw syntaxError;
    while (position < bytes.length && isWhitespace(bytes[position])) position++;
    members[frame * 8 + 2] = position;
    return position;
  }

  /** Records a finished member (or element) of an open container. */
  private addMember(frame: number, valueEnd: number, containers: number): void {
    if (this.frameKinds[frame] === frameArray) {
      this.frameContainers[frame] += containers;
      return;
    }
    const members = this.frameMembers;
    const base = frame * 8;
    const count = this.frameMemberCounts[frame]++;
    if (count === 0) {
      // The first member needs no map: most objects end with one member or none.
      members[base + 3] = members[base];
      members[base + 4] = members[base + 1];
      members[base + 5] = members[base + 2];
      members[base + 6] = valueEnd;
      members[base + 7] = containers;
      this.frameContainers[frame] = containers;
      return;
    }
    let open = this.openObjectMembers[frame];
    if (open === undefined) {
      open = { indexByKey: Object.create(null) as Record<string, number>, spans: [members[base + 3], members[base + 4], members[base + 5], members[base + 6], members[base + 7]] };
      open.indexByKey[this.keyAt(members[base + 3], members[base + 4])] = 0;
      this.openObjectMembers[frame] = open;
    }
    open.spans.push(members[base], members[base + 1], members[base + 2], valueEnd, containers);
    // Assignment to a prototype-less object keeps JSON.parse's rules: a repeated key
    // keeps its first position and takes the last value; array-index keys come first.
    open.indexByKey[this.keyAt(members[base], members[base + 1])] = count;
  }

  private keyAt(start: number, end: number): string {
    this.stringEnd(start);
    return this.decodeString(start, end);
  }

  /** The members an object of two or more keeps, in printed order, and whether that differs from the bytes. */
  private closeObject(frame: number, end: number): { containers: number; rewritten: RewrittenObject | undefined } {
    const open = this.openObjectMembers[frame]!;
    this.openObjectMembers[frame] = undefined;
    const order = Object.keys(open.indexByKey);
    let containers = 0;
    let inOrder = order.length === this.frameMemberCounts[frame];
    for (let index = 0; index < order.length; index++) {
      const member = open.indexByKey[order[index]];
      if (member !== index) inOrder = false;
      containers += open.spans[member * 5 + 4];
    }
    if (inOrder) return { containers, rewritten: undefined };
    const members: number[] = [];
    for (const key of order) {
      const member = open.indexByKey[key];
      members.push(open.spans[member * 5], open.spans[member * 5 + 1], open.spans[member * 5 + 2], open.spans[member * 5 + 3]);
    }
    return { containers, rewritten: { end, members } };
  }

  /** A property's array or object value, printed from the bytes as JSON.stringify(JSON.parse(…)) would. */
  private printValue(): PrintedValue {
    const start = this.position;
    const { containers, rewrites } = this.scanValue(true);
    if (containers > printedContainersMax) return new PrintedValue(undefined);
    const end = this.position;
    const printed = this.print(start, rewrites);
    this.position = end;
    return new PrintedValue(printed);
  }

  /**
   * Prints the value at `start` without whitespace, each scalar in JSON.stringify's
   * form, each rewritten object by its kept members; undefined once the text
   * passes the properties limit. One frame per rewritten object, not per level.
   */
  private print(start: number, rewrites: Map<number, RewrittenObject> | undefined): string | undefined {
    const bytes = this.bytes;
    this.outputLength = 0;
    // A stream frame copies one value token by token; a rewritten frame walks kept members.
    const streams: PrintFrame[] = [{ position: start, depth: 0 }];
    while (streams.length > 0) {
      if (this.outputLength > printedBytesMax) return undefined;
      const frame = streams[streams.length - 1];
      if ("object" in frame) {
        const members = frame.object.members;
        if (frame.member * 4 === members.length) {
          this.emitByte(closeBrace);
          streams.pop();
          // The stream that reached this object ends with it when the object was its whole value.
          const parent = streams[streams.length - 1];
          if (parent !== undefined && "depth" in parent && parent.depth === 0) streams.pop();
          continue;
        }
        const at = frame.member * 4;
        this.emitByte(frame.member === 0 ? openBrace : comma);
        this.emitString(members[at], members[at + 1]);
        this.emitByte(colon);
        frame.member++;
        streams.push({ position: members[at + 2], depth: 0 });
        continue;
      }
      let position = frame.position;
      while (isWhitespace(bytes[position])) position++;
      const byte = bytes[position];
      if (byte === openBrace && rewrites !== undefined && rewrites.has(position)) {
        const object = rewrites.get(position)!;
        frame.position = object.end;
        streams.push({ object, member: 0 });
        continue;
      }
      // Syntax was checked by the scan: tokens only need telling apart. A token at depth 0 is the whole value.
      let valueEnded = true;
      if (byte === openBrace || byte === openBracket) {
        this.emitByte(byte);
        frame.depth++;
        position++;
        valueEnded = false;
      } else if (byte === closeBrace || byte === closeBracket) {
        this.emitByte(byte);
        frame.depth--;
        position++;
      } else if (byte === comma || byte === colon) {
        this.emitByte(byte);
        position++;
        valueEnded = false;
      } else if (byte === quote) {
        const end = this.stringEnd(position);
        this.emitString(position, end);
        position = end;
      } else if (byte === 0x74 || byte === 0x66 || byte === 0x6e) {
        const length = byte === 0x66 ? 5 : 4;
        this.emitBytes(position, position + length);
        position += length;
      } else {
        const end = this.numberEnd(position);
        this.emitNumber(position, end);
        position = end;
      }
      frame.position = position;
      if (valueEnded && frame.depth === 0) streams.pop();
    }
    if (this.outputLength > printedBytesMax) return undefined;
    return Buffer.from(this.output.buffer, 0, this.outputLength).toString("utf8");
  }

  private reserve(extra: number): void {
    if (this.outputLength + extra <= this.output.length) return;
    let length = this.output.length * 2;
    while (length < this.outputLength + extra) length *= 2;
    const grown = new Uint8Array(length);
    grown.set(this.output.subarray(0, this.outputLength));
    this.output = grown;
  }

  private emitByte(byte: number): void {
    this.reserve(1);
    this.output[this.outputLength++] = byte;
  }

  private emitBytes(start: number, end: number): void {
    this.reserve(end - start);
    this.output.set(this.bytes.subarray(start, end), this.outputLength);
    this.outputLength += end - start;
  }

  private emitText(text: string): void {
    this.reserve(text.length * 3);
    this.outputLength += Buffer.from(this.output.buffer, 0, this.output.length).write(text, this.outputLength, "utf8");
  }

  /** A string token as JSON.stringify prints it: unescaped tokens already are; others are decoded and re-escaped. */
  private emitString(start: number, end: number): void {
    this.stringEnd(start);
    if (!this.stringEscaped) this.emitBytes(start, end);
    else this.emitText(JSON.stringify(JSON.parse(this.text.toString("utf8", start, end)) as string));
  }

  /** A number token as JSON.stringify prints it: short plain integers already are. */
  private emitNumber(start: number, end: number): void {
    const bytes = this.bytes;
    const digitsStart = bytes[start] === minus ? start + 1 : start;
    let plainInteger = end - digitsStart <= 15 && (bytes[digitsStart] !== zero || end - start === 1);
    for (let position = digitsStart; plainInteger && position < end; position++) {
      if (bytes[position] < zero || bytes[position] > nine) plainInteger = false;
    }
    if (plainInteger) this.emitBytes(start, end);
    else this.emitText(JSON.stringify(Number(this.text.toString("latin1", start, end))));
  }
}

function isWhitespace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

function doubled<T extends Uint8Array | Int32Array>(array: T): T {
  const grown = new (array.constructor as new (length: number) => T)(array.length * 2);
  grown.set(array);
  return grown;
}

function isHexDigit(byte: number): boolean {
  return (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x46) || (byte >= 0x61 && byte <= 0x66);
}
