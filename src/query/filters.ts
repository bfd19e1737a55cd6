/**
 * Property filters (SPEC §4), compiled once per segment against the segment's
 * dictionary of property texts. A kernel then decides a row with one array
 * load, passes[valueIds[row]], instead of comparing strings per row: a
 * dictionary has far fewer entries than the rows that point into it.
 *
 * The store keeps every property value as its SPEC text (String(n) for numbers,
 * "true"/"false", JSON for objects and arrays), so numeric-ness is a property
 * of the text: String(n) of a finite number always matches numericPattern,
 * booleans and JSON never do.
 */

import type { PropertyColumn } from "./segment-view.js";

export type FilterOp = "eq" | "neq" | "contains" | "not_contains" | "gt" | "gte" | "lt" | "lte" | "is_set" | "is_not_set";
export const filterOps = [
  "eq",
  "neq",
  "contains",
  "not_contains",
  "gt",
  "gte",
  "lt",
  "lte",
  "is_set",
  "is_not_set",
] as const satisfies readonly FilterOp[];

/** Ops whose `value` may be left out (SPEC §4). */
export function filterOpTakesValue(op: FilterOp): boolean {
  return op !== "is_set" && op !== "is_not_set";
}

/** A filter as the kernels receive it: the property name already resolved to a workspace key id. */
export interface FilterPlan {
  /** undefined: the property name was never ingested, so it is not set on any row. */
  keyId: number | undefined;
  op: FilterOp;
  /** undefined only for is_set / is_not_set. */
  value: string | undefined;
}

export const numericPattern = /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/;

/**
 * Sets numbers[id] for each id in [from, texts.length) to the text's number,
 * NaN when it does not count: a string counts only when it matches
 * numericPattern and its value is finite ("1e400" does not; SPEC §7.4).
 */
export function parseTextNumbers(texts: readonly string[], from: number, numbers: Float64Array): void {
  for (let id = Math.max(1, from); id < texts.length; id++) {
    const text = texts[id];
    const number = numericPattern.test(text) ? Number(text) : NaN;
    numbers[id] = Number.isFinite(number) ? number : NaN;
  }
}

/** What a filter answers for a row where the property is not set (absent or null). */
export function filterPassesNotSet(op: FilterOp): boolean {
  return op === "neq" || op === "not_contains" || op === "is_not_set";
}

export interface CompiledFilter {
  /** passes[id] is 1 when a row with value id `id` passes; passes[0] is the "not set" answer. */
  passes: Uint8Array;
  /** Number of ids that pass: 0 lets a kernel skip the segment, passes.length lets it skip the filter. */
  passingCount: number;
}

/**
 * Evaluate a filter on every entry of one property dictionary (texts[0] is
 * unused: id 0 means "not set"). `value` is required unless the op is
 * is_set / is_not_set; the request schema guarantees it.
 */
export function compileFilter(texts: readonly string[], op: FilterOp, value: string | undefined): CompiledFilter {
  const passes = new Uint8Array(Math.max(1, texts.length));
  passes[0] = filterPassesNotSet(op) ? 1 : 0;
  const idEnd = texts.length;
  const target = value ?? "";
  switch (op) {
    case "eq":
      for (let id = 1; id < idEnd; id++) passes[id] = texts[id] === target ? 1 : 0;
      break;
    case "neq":
      for (let id = 1; id < idEnd; id++) passes[id] = texts[id] === target ? 0 : 1;
      break;
    case "contains": {
      const contains = substringFinder(target);
      for (let id = 1; id < idEnd; id++) passes[id] = contains(texts[id]) ? 1 : 0;
      break;
    }
    case "not_contains": {
      const contains = substringFinder(target);
      for (let id = 1; id < idEnd; id++) passes[id] = contains(texts[id]) ? 0 : 1;
      break;
    }
    case "gt":
    case "gte":
    case "lt":
    case "lte":
      // A value that is not a number text makes every comparison false (SPEC: "value matches that pattern too").
      if (numericPattern.test(target)) compileComparison(passes, texts, op, Number(target));
      break;
    case "is_set":
      passes.fill(1, 1);
      break;
    case "is_not_set":
      break;
  }
  let passingCount = 0;
  for (let id = 0; id < passes.length; id++) passingCount += passes[id];
  return { passes, passingCount };
}

/** Patterns up to this many code units are found by String.prototype.includes. */
const builtinSearchUnitsMax = 32;

/**
 * A test for `pattern` within a text, as String.prototype.includes (UTF-16
 * code units). A client chooses both the pattern (up to 64 KiB of filter
 * text) and the texts (property values up to 64 KiB): V8's search took 22 ms
 * a text for a long periodic pattern over a periodic text, and a query with
 * ten such filters held a worker past its time limit. Longer patterns go by
 * Knuth–Morris–Pratt, linear in the text whatever both hold.
 */
export function substringFinder(pattern: string): (text: string) => boolean {
  const length = pattern.length;
  if (length <= builtinSearchUnitsMax) return (text) => text.includes(pattern);
  // fallback[i]: the length of the longest proper border of pattern[0, i).
  const fallback = new Int32Array(length + 1);
  fallback[0] = -1;
  for (let index = 0, border = -1; index < length; index++) {
    while (border >= 0 && pattern.charCodeAt(border) !== pattern.charCodeAt(index)) border = fallback[border];
    fallback[index + 1] = ++border;
  }
  return (text) => {
    if (text.length < length) return false;
    let matched = 0;
    for (let index = 0; index < text.length; index++) {
      const unit = text.charCodeAt(index);
      while (matched >= 0 && pattern.charCodeAt(matched) !== unit) matched = fallback[matched];
      if (++matched === length) return true;
    }
    return false;
  };
}

function compileComparison(passes: Uint8Array, texts: readonly string[], op: "gt" | "gte" | "lt" | "lte", bound: number): void {
  for (let id = 1; id < texts.length; id++) {
    const text = texts[id];
    if (!numericPattern.test(text)) continue;
    const number = Number(text);
    let holds: boolean;
    switch (op) {
      case "gt":
        holds = number > bound;
        break;
      case "gte":
        holds = number >= bound;
        break;
      case "lt":
        holds = number < bound;
        break;
      case "lte":
        holds = number <= bound;
        break;
    }
    passes[id] = holds ? 1 : 0;
  }
}

/**
 * Compiled filters of sealed segments, kept across queries by this thread. A
 * sealed segment's dictionary never changes, so a pass table compiled for
 * (dictionary, op, value) stays right; a dashboard repeating one filtered
 * query over a high-cardinality property (50 k URLs per day) then compiles it
 * once instead of per query. Found by the dictionary's own texts array (one
 * per sealed column for as long as the worker keeps its view) and a key per
 * filter made once per task, so a query over 90 segments builds no string
 * per segment. Bounded by bytes: past the bound, the least recently used
 * tables go until a quarter of it is free, so the scan that picks them is rare.
 */
export class CompiledFilterCache {
  private readonly dictionaries = new Map<readonly string[], Map<string, { compiled: CompiledFilter; usedAt: number }>>();
  private bytes = 0;
  private uses = 0;

  constructor(private readonly bytesMax: number) {}

  compile(texts: readonly string[], filter: FilterPlan): CompiledFilter {
    const key = filterKeyOf(filter);
    let filters = this.dictionaries.get(texts);
    const entry = filters?.get(key);
    if (entry !== undefined) {
      entry.usedAt = ++this.uses;
      return entry.compiled;
    }
    const compiled = compileFilter(texts, filter.op, filter.value);
    if (compiled.passes.length > this.bytesMax) return compiled;
    if (filters === undefined) this.dictionaries.set(texts, (filters = new Map()));
    filters.set(key, { compiled, usedAt: ++this.uses });
    this.bytes += compiled.passes.length;
    if (this.bytes > this.bytesMax) this.evict();
    return compiled;
  }

  private evict(): void {
    const entries: Array<{ texts: readonly string[]; key: string; usedAt: number; bytes: number }> = [];
    for (const [texts, filters] of this.dictionaries) for (const [key, { compiled, usedAt }] of filters) entries.push({ texts, key, usedAt, bytes: compiled.passes.length });
    entries.sort((left, right) => left.usedAt - right.usedAt);
    for (const { texts, key, bytes } of entries) {
      if (this.bytes <= (this.bytesMax * 3) / 4) break;
      const filters = this.dictionaries.get(texts)!;
      filters.delete(key);
      if (filters.size === 0) this.dictionaries.delete(texts);
      this.bytes -= bytes;
    }
  }
}

/** A filter's op and value as one string, made once per FilterPlan object (one per task). */
const filterKeys = new WeakMap<FilterPlan, string>();

function filterKeyOf(filter: FilterPlan): string {
  let key = filterKeys.get(filter);
  if (key === undefined) filterKeys.set(filter, (key = `${filter.op}\u0000${filter.value ?? ""}`));
  return key;
}

/**
 * Each text's number (NaN when it does not count), once per column: a sealed
 * segment's column is one object for as long as the worker keeps its view, so
 * the texts are not parsed again by every query. An active one is new per
 * task, and its numbers come from the worker's index (column.numbers).
 */
const numbersOfColumn = new WeakMap<PropertyColumn, Float64Array>();

export function numbersOf(column: PropertyColumn): Float64Array {
  if (column.numbers !== undefined) return column.numbers();
  let numbers = numbersOfColumn.get(column);
  if (numbers !== undefined) return numbers;
  numbers = new Float64Array(Math.max(1, column.texts.length)).fill(NaN);
  parseTextNumbers(column.texts, 1, numbers);
  numbersOfColumn.set(column, numbers);
  return numbers;
}
