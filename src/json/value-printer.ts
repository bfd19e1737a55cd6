/**
 * The printer of the ingest body parser: a property value that is an array or
 * object printed straight from the body's bytes as
 * JSON.stringify(JSON.parse(its text)) prints it — no whitespace, each scalar
 * in JSON.stringify's form, each object by the plan the value scan recorded
 * (value-scan.ts) — and given up once it passes its byte budget.
 */
import { Byte, skipWhitespaceAt } from "./bytes.js";
import type { ByteScanner } from "./byte-scanner.js";
import { ByteSink, writeCanonicalString } from "./object-keys.js";
import { ObjectPlan, printedContainersMax, rewriteHeaderSlots, rewriteMemberSlots, type ValueScan } from "./value-scan.js";

/**
 * A nested property value, already printed as JSON.stringify prints it.
 * `text` is undefined when the value is too large: it holds more arrays and
 * objects than the limit allows (`tooManyContainers`, decided before printing,
 * as validation decides it for a parsed value), or it would print past what
 * the limit leaves beside the event's other values.
 */
export class PrintedValue {
  constructor(
    readonly text: string | undefined,
    readonly tooManyContainers = false,
  ) {}
}

/** Printing: a stream copies one value token by token; a rewritten object walks its kept members. */
type PrintFrame = { position: number; depth: number } | { rewrite: number; member: number };

export class ValuePrinter {
  /** The text being printed; printed bytes are counted by its length. */
  readonly output = new ByteSink();

  constructor(
    private readonly scanner: ByteScanner,
    private readonly scan: ValueScan,
  ) {}

  /**
   * A property's array or object value at `start`, scanned tracked (it keeps
   * `containers`), printed from the bytes as JSON.stringify(JSON.parse(…))
   * would, unless it is longer than `budget` bytes (what the properties limit
   * leaves once other values are printed).
   */
  printValue(start: number, containers: number, budget: number): PrintedValue {
    if (containers > printedContainersMax) return new PrintedValue(undefined, true);
    return new PrintedValue(budget < 0 ? undefined : this.print(start, budget));
  }

  /**
   * Prints the value at `start` without whitespace, each scalar in JSON.stringify's
   * form, each rewritten object by its kept members; undefined once the text
   * passes `budget` bytes. One frame per rewritten object, not per level.
   */
  private print(start: number, budget: number): string | undefined {
    const bytes = this.scanner.bytes;
    this.output.length = 0;
    // A stream frame copies one value token by token; a rewritten frame walks kept members.
    const streams: PrintFrame[] = [{ position: start, depth: 0 }];
    while (streams.length > 0) {
      if (this.output.length > budget) return undefined;
      const frame = streams[streams.length - 1];
      if ("rewrite" in frame) {
        const arena = this.scan.rewriteArena;
        if (frame.member === arena[frame.rewrite + 1]) {
          this.emitByte(Byte.CloseBrace);
          streams.pop();
          // The stream that reached this object ends with it when the object was its whole value.
          const parent = streams[streams.length - 1];
          if (parent !== undefined && "depth" in parent && parent.depth === 0) streams.pop();
          continue;
        }
        const at = frame.rewrite + rewriteHeaderSlots + frame.member * rewriteMemberSlots;
        this.emitByte(frame.member === 0 ? Byte.OpenBrace : Byte.Comma);
        this.emitString(arena[at], this.scanner.stringEnd(arena[at]));
        this.emitByte(Byte.Colon);
        frame.member++;
        streams.push({ position: arena[at + 1], depth: 0 });
        continue;
      }
      let position = frame.position;
      position = skipWhitespaceAt(bytes, position);
      const byte = bytes[position];
      const rewrite = byte === Byte.OpenBrace ? this.scan.planOf(position, budget - this.output.length) : ObjectPlan.AsWritten;
      if (rewrite === ObjectPlan.TooLong) return undefined;
      if (rewrite >= 0) {
        frame.position = this.scan.rewriteArena[rewrite];
        streams.push({ rewrite, member: 0 });
        continue;
      }
      // Syntax was checked by the scan: tokens only need telling apart. A token at depth 0 is the whole value.
      let valueEnded = true;
      if (byte === Byte.OpenBrace || byte === Byte.OpenBracket) {
        this.emitByte(byte);
        frame.depth++;
        position++;
        valueEnded = false;
      } else if (byte === Byte.CloseBrace || byte === Byte.CloseBracket) {
        this.emitByte(byte);
        frame.depth--;
        position++;
      } else if (byte === Byte.Comma || byte === Byte.Colon) {
        this.emitByte(byte);
        position++;
        valueEnded = false;
      } else if (byte === Byte.Quote) {
        const end = this.scanner.stringEnd(position);
        this.emitString(position, end);
        position = end;
      } else if (byte === Byte.LowerT || byte === Byte.LowerF || byte === Byte.LowerN) {
        const length = byte === Byte.LowerF ? 5 : 4;
        this.emitBytes(position, position + length);
        position += length;
      } else {
        const end = this.scanner.numberEnd(position);
        this.emitNumber(position, end);
        position = end;
      }
      frame.position = position;
      if (valueEnded && frame.depth === 0) streams.pop();
    }
    if (this.output.length > budget) return undefined;
    return Buffer.from(this.output.bytes.buffer, 0, this.output.length).toString("utf8");
  }

  private emitByte(byte: number): void {
    this.output.reserve(1);
    this.output.bytes[this.output.length++] = byte;
  }

  private emitBytes(start: number, end: number): void {
    this.output.reserve(end - start);
    this.output.bytes.set(this.scanner.bytes.subarray(start, end), this.output.length);
    this.output.length += end - start;
  }

  private emitText(text: string): void {
    const output = this.output;
    output.reserve(text.length * 3);
    output.length += Buffer.from(output.bytes.buffer, 0, output.bytes.length).write(text, output.length, "utf8");
  }

  /** A string token as JSON.stringify prints it: unescaped tokens already are; escaped ones are rewritten. */
  private emitString(start: number, end: number): void {
    this.scanner.stringEnd(start);
    if (!this.scanner.stringEscaped) {
      this.emitBytes(start, end);
      return;
    }
    this.emitByte(Byte.Quote);
    writeCanonicalString(this.scanner.bytes, start, end, this.output);
    this.emitByte(Byte.Quote);
  }

  /** A number token as JSON.stringify prints it: short plain integers already are. */
  private emitNumber(start: number, end: number): void {
    const bytes = this.scanner.bytes;
    const digitsStart = bytes[start] === Byte.Minus ? start + 1 : start;
    let plainInteger = end - digitsStart <= 15 && (bytes[digitsStart] !== Byte.Zero || end - start === 1);
    for (let position = digitsStart; plainInteger && position < end; position++) {
      if (bytes[position] < Byte.Zero || bytes[position] > Byte.Nine) plainInteger = false;
    }
    if (plainInteger) this.emitBytes(start, end);
    else this.emitText(JSON.stringify(Number(this.scanner.text.toString("latin1", start, end))));
  }
}
