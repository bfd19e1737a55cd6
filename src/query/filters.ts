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
    case "contains":
      for (let id = 1; id < idEnd; id++) passes[id] = texts[id].includes(target) ? 1 : 0;
      break;
    case "not_contains":
      for (let id = 1; id < idEnd; id++) passes[id] = texts[id].includes(target) ? 0 : 1;
      break;
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
 * (segment, key, op, value) stays right; a dashboard repeating one filtered
 * query over a high-cardinality property (50 k URLs per day) then compiles it
 * once instead of per query. Bounded by bytes, least recently used first out.
 */
export class CompiledFilterCache {
  private readonly entries = new Map<string, { texts: readonly string[]; compiled: CompiledFilter }>();
  private bytes = 0;

  constructor(private readonly bytesMax: number) {}

  compile(segmentKey: string, keyId: number, texts: readonly string[], op: FilterOp, value: string | undefined): CompiledFilter {
    const cacheKey = `${segmentKey}\u0000${keyId}\u0000${op}\u0000${value ?? ""}`;
    const entry = this.entries.get(cacheKey);
    if (entry !== undefined && entry.texts === texts) {
      this.entries.delete(cacheKey);
      this.entries.set(cacheKey, entry);
      return entry.compiled;
    }
    const compiled = compileFilter(texts, op, value);
    if (entry !== undefined) {
      this.entries.delete(cacheKey);
      this.bytes -= entry.compiled.passes.length;
    }
    if (compiled.passes.length <= this.bytesMax) {
      this.entries.set(cacheKey, { texts, compiled });
      this.bytes += compiled.passes.length;
      for (const [oldestKey, oldest] of this.entries) {
        if (this.bytes <= this.bytesMax) break;
        this.entries.delete(oldestKey);
        this.bytes -= oldest.compiled.passes.length;
      }
    }
    return compiled;
  }
}
