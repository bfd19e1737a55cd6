/**
 * What ingest's byte scanners share: the scratch a scanned body's events are
 * recorded in (each string a byte range of the body, hashed while scanned),
 * the per-event duplicate-key check of properties, and the append of those
 * events to a chunk. event-scanner.ts reads JSON bodies into it,
 * msgpack-event-scanner.ts msgpack ones; both append alike, so a chunk cannot
 * tell which format its events arrived in.
 */
import { limits, tuning } from "../config/limits.js";
import { bytesEqual, type ChunkBuilder } from "../storage/chunk-codec.js";
import { BatchDays, timestampWindowError } from "./batch-cardinality.js";
import { doubled } from "../json/bytes.js";

/**
 * Past this many properties in one event, the duplicate check would need a
 * larger table: the object path reads it. Within 64 KiB of properties an event
 * holds at most ~13 k, and SDK events a few dozen.
 */
export const propertiesScannedMax = tuning.scannedEventPropertiesMax;

/** What the scan of one body found; valid until the next scan. */
export interface ScannedBody {
  apiKey: string;
  eventCount: number;
  /** Appends the scanned events to `builder`; called once, before the next scan. */
  appendTo(builder: ChunkBuilder): void;
}

/** Value kinds of a scanned property (and what a scanner's number reader found). */
export const enum ValueKind {
  /** The text is valueStart..valueEnd of the body. */
  Bytes = 0,
  /** The text is printedTexts[valueStart] (a number String() prints otherwise, or a literal the body does not spell). */
  Printed = 1,
  /** Not set. */
  Null = 2,
  /** Not a value the scanner takes (not valid, or a number not finite): the object path reads the body. */
  Unscannable = 3,
}

/**
 * Top-level and event fields, one bit each. A const enum, so that `switch`
 * compares small integer constants; a lookup by field name in an object went
 * megamorphic in the event loop and showed in worker profiles.
 */
export const enum Field {
  ApiKey = 1,
  Events = 2,
  Event = 4,
  DistinctId = 8,
  Timestamp = 16,
  Uuid = 32,
  Properties = 64,
}

const emptyBytes = new Uint8Array(0);
const emptyBuffer = Buffer.alloc(0);

/**
 * One per scanner and worker, reused for every body: its scratch arrays are
 * sized by the largest body seen, so a steady stream of batches allocates
 * nothing but the apiKey string and the odd printed number.
 */
export abstract class ScannedEvents implements ScannedBody {
  protected source: Uint8Array = emptyBytes;
  private sourceText: Buffer = emptyBuffer;
  protected at = 0;
  protected end = 0;

  apiKey = "";
  eventCount = 0;

  // Per event.
  protected timeMs = new Float64Array(limits.batchEventsMax);
  protected nameStart = new Int32Array(limits.batchEventsMax);
  protected nameEnd = new Int32Array(limits.batchEventsMax);
  protected nameHash = new Uint32Array(limits.batchEventsMax);
  /** distinctId: a byte range, or (idStart < 0) printedTexts[-idStart - 1]. */
  protected idStart = new Int32Array(limits.batchEventsMax);
  protected idEnd = new Int32Array(limits.batchEventsMax);
  protected idHash = new Uint32Array(limits.batchEventsMax);
  protected hasUuid = new Uint8Array(limits.batchEventsMax);
  protected uuids = new Uint8Array(16 * limits.batchEventsMax);
  protected firstProperty = new Int32Array(limits.batchEventsMax + 1);

  // Per property, all events in a row.
  protected keyStart = new Int32Array(1024);
  protected keyEnd = new Int32Array(1024);
  protected keyHash = new Uint32Array(1024);
  protected valueKind = new Int32Array(1024);
  protected valueStart = new Int32Array(1024);
  protected valueEnd = new Int32Array(1024);
  protected valueHash = new Uint32Array(1024);
  protected propertyCount = 0;
  protected printedTexts: string[] = [];

  /** The duplicate-key check of one event's properties: a stamped open-addressing table of property numbers. */
  private readonly keySlots = new Int32Array(propertiesScannedMax * 2);
  private readonly keySlotStamps = new Int32Array(propertiesScannedMax * 2);
  protected keyStamp = 0;
  protected readonly batchDays = new BatchDays();

  /** The string (or number) just scanned: bytes [stringStart, stringEnd), and hashBytes of them when interned. */
  protected stringStart = 0;
  protected stringEnd = 0;
  protected stringHash = 0;

  /**
   * Scans one event at `at` into slot eventCount. Returns the apiKey when
   * `withApiKey` (required then), "" otherwise; undefined to give up.
   */
  protected abstract event(receivedAtMs: number, withApiKey: boolean): string | undefined;

  protected scanSingle(receivedAtMs: number): boolean {
    // The event's own fields and the apiKey share one object.
    const apiKey = this.event(receivedAtMs, true);
    if (apiKey === undefined) return false;
    this.apiKey = apiKey;
    return true;
  }

  /** The string just scanned is the event's name (when 1…eventNameLengthMax units long). */
  protected takeName(event: number): boolean {
    if (!this.utf16LengthWithin(this.stringStart, this.stringEnd, limits.eventNameLengthMax)) return false;
    this.nameStart[event] = this.stringStart;
    this.nameEnd[event] = this.stringEnd;
    this.nameHash[event] = this.stringHash;
    return true;
  }

  /** The string just scanned is the event's distinctId (when 1…distinctIdLengthMax units long). */
  protected takeDistinctId(event: number): boolean {
    if (!this.utf16LengthWithin(this.stringStart, this.stringEnd, limits.distinctIdLengthMax)) return false;
    this.idStart[event] = this.stringStart;
    this.idEnd[event] = this.stringEnd;
    this.idHash[event] = this.stringHash;
    return true;
  }

  /**
   * Ends the scan of event slot `event`, whose fields `seen` were read: false
   * when a required one is missing or the event is over a cardinality bound
   * (the object path refuses it and says why).
   */
  protected closeEvent(event: number, seen: number, withApiKey: boolean, timeMs: number, receivedAtMs: number): boolean {
    const required = Field.Event | Field.DistinctId | (withApiKey ? Field.ApiKey : 0);
    if ((seen & required) !== required) return false;
    if (timestampWindowError(timeMs, receivedAtMs) !== undefined || (!withApiKey && !this.batchDays.admit(timeMs))) return false;
    this.timeMs[event] = timeMs;
    this.eventCount = event + 1;
    this.firstProperty[event + 1] = this.propertyCount;
    return true;
  }

  /** Starts the scan of a body: nothing of the last one is kept. */
  protected begin(source: Uint8Array): void {
    // A Buffer (an inflated body) is read through a plain Uint8Array view: one element kind keeps the scanner's loads monomorphic.
    this.source = source instanceof Buffer ? new Uint8Array(source.buffer, source.byteOffset, source.byteLength) : source;
    // Made when a text is decoded (textOf): most single events need none.
    this.sourceText = emptyBuffer;
    this.at = 0;
    this.end = source.length;
    this.eventCount = 0;
    this.propertyCount = 0;
    this.batchDays.reset();
    if (this.printedTexts.length !== 0) this.printedTexts.length = 0;
    this.firstProperty[0] = 0;
  }

  /** The text of source[start, end) in `encoding`. */
  protected textOf(start: number, end: number, encoding: "utf8" | "latin1"): string {
    if (this.sourceText === emptyBuffer) this.sourceText = Buffer.from(this.source.buffer, this.source.byteOffset, this.source.byteLength);
    return this.sourceText.toString(encoding, start, end);
  }

  /**
   * The apiKey at source[start, end). A task's single events mostly share one
   * key: when its bytes are those of the last key, that string is returned
   * again rather than decoded, and finding the key's chunk builder reuses its
   * hash.
   */
  protected apiKeyOf(start: number, end: number): string {
    const length = end - start;
    if (length === this.lastApiKeyLength && bytesEqual(this.lastApiKeyBytes, 0, this.source, start, length)) return this.lastApiKey;
    const apiKey = this.textOf(start, end, "utf8");
    if (length <= this.lastApiKeyBytes.length) {
      this.lastApiKeyBytes.set(this.source.subarray(start, end));
      this.lastApiKeyLength = length;
      this.lastApiKey = apiKey;
    }
    return apiKey;
  }

  private readonly lastApiKeyBytes = new Uint8Array(128);
  private lastApiKeyLength = -1;
  private lastApiKey = "";

  /** Drops the body, which may be 20 MiB, rather than hold it until the next one. */
  protected release(): void {
    this.source = emptyBytes;
    this.sourceText = emptyBuffer;
  }

  appendTo(builder: ChunkBuilder): void {
    const source = this.source;
    const eventCount = this.eventCount;
    builder.reserve(eventCount, this.firstProperty[eventCount]);
    for (let event = 0; event < eventCount; event++) {
      const name = builder.internBytes(source, this.nameStart[event], this.nameEnd[event], this.nameHash[event]);
      const idStart = this.idStart[event];
      const distinctId = idStart >= 0 ? builder.internBytes(source, idStart, this.idEnd[event], this.idHash[event]) : builder.intern(this.printedTexts[-idStart - 1]);
      const row = builder.addInternedRow(this.timeMs[event], name, distinctId, this.hasUuid[event] === 1 ? this.uuids : undefined, event * 16);
      for (let property = this.firstProperty[event]; property < this.firstProperty[event + 1]; property++) {
        const kind = this.valueKind[property];
        if (kind === ValueKind.Null) continue;
        const key = builder.internBytes(source, this.keyStart[property], this.keyEnd[property], this.keyHash[property]);
        const text =
          kind === ValueKind.Bytes
            ? builder.internBytes(source, this.valueStart[property], this.valueEnd[property], this.valueHash[property])
            : builder.intern(this.printedTexts[this.valueStart[property]]);
        builder.addInternedProperty(row, key, text);
      }
    }
    this.release();
  }

  /** Records a property key in this event's table; false when the event already has it. */
  protected claimKey(property: number, keyStart: number, keyEnd: number, hash: number, stamp: number): boolean {
    const slots = this.keySlots;
    const stamps = this.keySlotStamps;
    const mask = slots.length - 1;
    const length = keyEnd - keyStart;
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      if (stamps[slot] !== stamp) {
        stamps[slot] = stamp;
        slots[slot] = property;
        return true;
      }
      const other = slots[slot];
      if (this.keyHash[other] === hash && this.keyEnd[other] - this.keyStart[other] === length && bytesEqual(this.source, this.keyStart[other], this.source, keyStart, length)) {
        return false;
      }
    }
  }

  protected growProperties(): void {
    this.keyStart = doubled(this.keyStart);
    this.keyEnd = doubled(this.keyEnd);
    this.keyHash = doubled(this.keyHash);
    this.valueKind = doubled(this.valueKind);
    this.valueStart = doubled(this.valueStart);
    this.valueEnd = doubled(this.valueEnd);
    this.valueHash = doubled(this.valueHash);
  }

  /**
   * True when the valid UTF-8 of source[start, end) is 1…`max` UTF-16 units
   * long: a unit per byte that starts a character, two for a four-byte one;
   * only texts longer than `max` bytes need counting.
   */
  protected utf16LengthWithin(start: number, end: number, max: number): boolean {
    const bytes = end - start;
    if (bytes < 1) return false;
    if (bytes <= max) return true;
    let units = 0;
    for (let at = start; at < end; at++) {
      const byte = this.source[at];
      if ((byte & 0xc0) !== 0x80) units += byte >= 0xf0 ? 2 : 1;
    }
    return units <= max;
  }
}
