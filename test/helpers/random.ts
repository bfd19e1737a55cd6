/**
 * Seeded randomness for the conformance and differential suites: a small PRNG
 * (mulberry32) whose seed every failing test prints, and a generator of event
 * data sets shaped to hit the engine's edges — a month boundary, timestamps
 * shared by several events, events on exact day and hour boundaries and at the
 * last millisecond of a day, follow-ups exactly one window apart (and one
 * millisecond more), and properties of every JSON kind, including
 * numeric-looking strings and keys such as `__proto__`.
 */
import type { StoredEvent } from "../reference/reference.js";

const dayMs = 86_400_000;
const hourMs = 3_600_000;

/** mulberry32: 32 bits of state, good enough for test data and trivially reproducible. */
export class Random {
  readonly seed: number;
  private state: number;

  constructor(seed: number) {
    this.seed = seed >>> 0;
    this.state = this.seed;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let value = this.state;
    value = Math.imul(value ^ (value >>> 15), value | 1);
    value ^= value + Math.imul(value ^ (value >>> 7), value | 61);
    return ((value ^ (value >>> 14)) >>> 0) / 4_294_967_296;
  }

  /** Uniform integer in [minimum, maximum], both included. */
  integer(minimum: number, maximum: number): number {
    return minimum + Math.floor(this.next() * (maximum - minimum + 1));
  }

  chance(probability: number): boolean {
    return this.next() < probability;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error("pick from an empty list");
    return items[Math.floor(this.next() * items.length)];
  }

  /** Fisher–Yates, in place; returns the same array. */
  shuffle<T>(items: T[]): T[] {
    for (let index = items.length - 1; index > 0; index--) {
      const other = Math.floor(this.next() * (index + 1));
      const kept = items[index];
      items[index] = items[other];
      items[other] = kept;
    }
    return items;
  }

  /** A random version-4-shaped UUID drawn from this generator (crypto.randomUUID is not seeded). */
  uuid(): string {
    const hex = (count: number): string => {
      let text = "";
      for (let index = 0; index < count; index++) text += this.integer(0, 15).toString(16);
      return text;
    };
    return `${hex(8)}-${hex(4)}-4${hex(3)}-${this.pick(["8", "9", "a", "b"])}${hex(3)}-${hex(12)}`;
  }
}

/**
 * Seeds for a randomized suite: `fixed` plus one fresh seed per run, unless the
 * environment variable `name` lists them (`EVENTIDE_TEST_SEEDS=12,34`), which is
 * how a printed failing seed is replayed.
 */
export function seedsFromEnvironment(name: string, fixed: readonly number[]): number[] {
  const raw = process.env[name];
  if (raw !== undefined && raw.trim() !== "") {
    return raw.split(",").map((part) => {
      const seed = Number(part.trim());
      if (!Number.isInteger(seed) || seed < 0 || seed > 0xffff_ffff) throw new Error(`${name}: not a 32-bit seed: ${part}`);
      return seed;
    });
  }
  return [...fixed, (Date.now() ^ (process.pid << 16)) >>> 0];
}

/** Own-property assignment that also works for `__proto__` (a plain `object[key] = …` would set the prototype). */
export function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

// ---------------------------------------------------------------------------
// Data sets

/** An event as generated: the canonical values the store should end up with. */
export interface GeneratedEvent {
  event: string;
  /** Canonical (stored) distinctId; numeric-looking ones may travel as JSON numbers. */
  distinctId: string;
  timestampMs: number;
  properties?: Record<string, unknown>;
  uuid?: string;
}

/** An event as sent to `/ingest` or `/ingest/batch`. */
export interface WireEvent {
  event: string;
  distinctId: string | number;
  timestamp: string;
  properties?: Record<string, unknown>;
  uuid?: string;
}

export interface GeneratedDataset {
  seed: number;
  events: GeneratedEvent[];
  /** UTC midnight of the first day with data. */
  firstDayMs: number;
  dayCount: number;
  eventNames: string[];
  propertyKeys: string[];
  /** Texts worth filtering on: the texts of generated values plus a few tricky ones. */
  filterValues: string[];
  userIds: string[];
}

export interface DatasetOptions {
  /** Give about half the events a uuid (needed to send idempotent duplicates). */
  uuids?: boolean;
}

const eventNamePool = [
  "signup",
  "view",
  "purchase",
  "click",
  "share",
  "logout",
  "page view",
  "constructor",
  "__proto__",
  "Émoji 🎉",
] as const;

const propertyKeyPool = [
  "plan",
  "price",
  "amount",
  "flag",
  "meta",
  "tags",
  "note",
  "__proto__",
  "constructor",
  "toString",
  "empty",
  "n",
] as const;

const stringValues = [
  "free",
  "pro",
  "Pro",
  "enterprise",
  "10",
  "9",
  "10.0",
  "2.5e3",
  "2.5E3",
  "-0",
  "0",
  " 5",
  "5 ",
  "1e5",
  "1E-2",
  "-3.25",
  "007",
  "+5",
  ".5",
  "1.",
  "0x10",
  "Infinity",
  "NaN",
  "1e400",
  "abc",
  "",
  'a"b',
  "ünï",
  "🎉 party",
  "null",
  "true",
  "[1,2]",
  '{"a":1}',
] as const;

const numberValues = [
  0,
  -0,
  1,
  5,
  9,
  10,
  10.5,
  -3,
  -3.25,
  2500,
  0.1,
  0.30000000000000004,
  1e21,
  123_456_789_012_345,
  Number.MAX_SAFE_INTEGER,
  -1e-7,
  2.5e-7,
  1e5,
  100,
] as const;

/** Extra filter values: boundaries of the numeric pattern and texts no value has. */
const extraFilterValues = ["", "0", "-0", "5", "10", "1e3", "2500", "-3", " 5", "abc", "1e400", "-1e400", "true", "null", "x"];

/** Values for gt, gte, lt and lte: mostly numeric, so that the comparison decides, with a few the pattern refuses. */
export const numericFilterValues = [
  "0",
  "-0",
  "1",
  "4",
  "5",
  "6",
  "9",
  "10",
  "10.5",
  "100",
  "2500",
  "1e3",
  "2.5E3",
  "-3",
  "-3.25",
  "0.1",
  "2.5e-7",
  "1e21",
  "9007199254740991",
  "1e400",
  "-1e400",
  " 5",
  "+5",
  ".5",
  "abc",
];

function randomValue(random: Random, depth = 0): unknown {
  const kind = random.integer(0, 9);
  if (kind <= 3) return random.pick(stringValues);
  if (kind <= 6) return random.pick(numberValues);
  if (kind === 7) return random.chance(0.5);
  if (kind === 8) return null;
  if (depth >= 2) return random.pick([{}, [], { a: 1 }, [1, 2]]);
  if (random.chance(0.5)) {
    const length = random.integer(0, 3);
    const array: unknown[] = [];
    for (let index = 0; index < length; index++) array.push(randomValue(random, depth + 1));
    return array;
  }
  const object: Record<string, unknown> = {};
  for (const key of ["a", "b", "1", "__proto__"]) {
    if (random.chance(0.4)) setOwn(object, key, randomValue(random, depth + 1));
  }
  return object;
}

/** Values for a key lean towards one kind, so filters on it are meaningful, but any kind may appear. */
function valueForKey(random: Random, key: string): unknown {
  if (random.chance(0.3)) return randomValue(random);
  switch (key) {
    case "plan":
      return random.pick(["free", "pro", "Pro", "enterprise", ""]);
    case "price":
    case "amount":
    case "n":
      // Half numbers, half strings: numeric ones, and ones that Number() parses but the SPEC's pattern refuses.
      return random.chance(0.5)
        ? random.pick(numberValues)
        : random.pick(["10", "9", "2.5e3", "-0", "1e400", "-3.25", "007", "5", " 5", "5 ", "+5", ".5", "1.", "0x10", "Infinity", "1e5", "abc"]);
    case "flag":
      return random.pick([true, false, null, "true"]);
    default:
      return randomValue(random);
  }
}

function randomProperties(random: Random, keys: readonly string[]): Record<string, unknown> | undefined {
  const roll = random.next();
  if (roll < 0.1) return undefined;
  const properties: Record<string, unknown> = {};
  if (roll < 0.15) return properties;
  for (const key of keys) {
    if (random.chance(0.45)) setOwn(properties, key, valueForKey(random, key));
  }
  return properties;
}

/** The text a filter sees for a value (SPEC §4), for collecting filter values. */
function valueText(value: unknown): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value);
}

const followUpDelaysMs = [0, 0, 1, 999, 1000, 1001, 60_000, hourMs, hourMs + 1, dayMs, dayMs + 1, 3 * dayMs, 3 * dayMs + 1, 7 * dayMs];

/**
 * 40–60 days starting between mid-November and late February (so across at
 * least one month boundary, sometimes the new year or 29 February), 20–40
 * users of very different activity, 4–6 event names.
 */
export function generateDataset(random: Random, options: DatasetOptions = {}): GeneratedDataset {
  const firstDayMs = Date.UTC(2023, 10, 15) + random.integer(0, 100) * dayMs;
  const dayCount = random.integer(40, 60);
  const endMs = firstDayMs + dayCount * dayMs;

  const eventNames: string[] = random.shuffle<string>([...eventNamePool]).slice(0, random.integer(4, 6));
  const propertyKeys: string[] = random.shuffle<string>([...propertyKeyPool]).slice(0, random.integer(6, propertyKeyPool.length));

  const userCount = random.integer(20, 40);
  const userIds: string[] = [];
  for (let index = 0; index < userCount; index++) {
    // A few ids travel as JSON numbers too, and a few are awkward strings.
    const special = ["1003", "2.5", "-7", "__proto__", "constructor", "ünïcødé 用户"];
    userIds.push(index < special.length && random.chance(0.7) ? special[index] : `u${index}`);
  }

  const events: GeneratedEvent[] = [];
  const randomTimeMs = (): number => firstDayMs + Math.floor(random.next() * (endMs - firstDayMs));
  const randomDayMs = (): number => firstDayMs + random.integer(0, dayCount - 1) * dayMs;
  for (const distinctId of userIds) {
    const eventCount = random.pick([1, 2, 5, 10, 30, 60, 100, 150]);
    let previous: GeneratedEvent | undefined;
    for (let index = 0; index < eventCount; index++) {
      let timestampMs: number;
      const roll = random.next();
      if (previous !== undefined && roll < 0.35) {
        timestampMs = previous.timestampMs + random.pick(followUpDelaysMs);
      } else if (roll < 0.45) {
        timestampMs = randomDayMs();
      } else if (roll < 0.53) {
        timestampMs = randomDayMs() + random.integer(0, 23) * hourMs;
      } else if (roll < 0.57) {
        timestampMs = randomDayMs() + dayMs - 1;
      } else if (roll < 0.62 && events.length > 0) {
        timestampMs = random.pick(events).timestampMs;
      } else {
        timestampMs = randomTimeMs();
      }
      // Follow-ups usually take the next name, so funnels get deep.
      const name =
        previous !== undefined && random.chance(0.5)
          ? eventNames[(eventNames.indexOf(previous.event) + 1) % eventNames.length]
          : eventNames[Math.min(Math.floor(random.next() * random.next() * eventNames.length * 1.5), eventNames.length - 1)];
      const generated: GeneratedEvent = { event: name, distinctId, timestampMs };
      const properties = randomProperties(random, propertyKeys);
      if (properties !== undefined) generated.properties = properties;
      if (options.uuids && random.chance(0.5)) generated.uuid = random.uuid();
      events.push(generated);
      previous = random.chance(0.8) ? generated : previous;
    }
  }

  const texts = new Set<string>(extraFilterValues);
  for (const generated of events) {
    if (generated.properties === undefined) continue;
    for (const key of Object.keys(generated.properties)) {
      const text = valueText(Object.getOwnPropertyDescriptor(generated.properties, key)?.value);
      if (text !== undefined && text.length <= 60) texts.add(text);
    }
  }
  return { seed: random.seed, events, firstDayMs, dayCount, eventNames, propertyKeys, filterValues: [...texts], userIds };
}

/** What the store should hold for these events: distinctIds as strings, properties as JSON carries them. */
export function toStoredEvents(events: readonly GeneratedEvent[]): StoredEvent[] {
  return events.map((generated) => ({
    event: generated.event,
    distinctId: generated.distinctId,
    timestampMs: generated.timestampMs,
    // A round trip through JSON is exactly what ingest sees: -0 becomes 0, key order is JSON's.
    properties: generated.properties === undefined ? undefined : (JSON.parse(JSON.stringify(generated.properties)) as Record<string, unknown>),
  }));
}

function pad(value: number, width = 2): string {
  return String(value).padStart(width, "0");
}

/** One of the ISO 8601 spellings SPEC §2 accepts for the same instant. */
export function formatTimestamp(random: Random, timestampMs: number): string {
  const iso = new Date(timestampMs).toISOString();
  const wholeSecond = timestampMs % 1000 === 0;
  switch (random.integer(0, 4)) {
    case 0:
      return iso;
    case 1:
      // Without a zone the time is UTC.
      return wholeSecond && random.chance(0.5) ? iso.slice(0, 19) : iso.slice(0, 23);
    case 2:
      return wholeSecond ? `${iso.slice(0, 19)}Z` : iso;
    case 3: {
      const offsetMinutes = random.pick([-480, -210, 60, 120, 330, 840]);
      const local = new Date(timestampMs + offsetMinutes * 60_000).toISOString().slice(0, wholeSecond ? 19 : 23);
      const sign = offsetMinutes < 0 ? "-" : "+";
      const absolute = Math.abs(offsetMinutes);
      return `${local}${sign}${pad(Math.floor(absolute / 60))}:${pad(absolute % 60)}`;
    }
    default:
      return `${iso.slice(0, 23)}+00:00`;
  }
}

/** How an event travels: a random timestamp spelling, numeric-looking distinctIds sometimes as numbers. */
export function toWireEvent(random: Random, generated: GeneratedEvent): WireEvent {
  const asNumber = Number(generated.distinctId);
  const distinctId =
    generated.distinctId.trim() !== "" && String(asNumber) === generated.distinctId && random.chance(0.5) ? asNumber : generated.distinctId;
  const wire: WireEvent = { event: generated.event, distinctId, timestamp: formatTimestamp(random, generated.timestampMs) };
  if (generated.properties !== undefined) wire.properties = generated.properties;
  if (generated.uuid !== undefined) wire.uuid = random.chance(0.5) ? generated.uuid.toUpperCase() : generated.uuid;
  return wire;
}
