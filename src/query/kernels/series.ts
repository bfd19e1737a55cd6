/**
 * Breakdown series (SPEC §7.3): which values are listed, in which order, and
 * the group each value's rows or users go to. Group 0 is always the whole
 * answer (§4's fields over everything), groups 1…L the listed values in rank
 * order, and group L + 1 `breakdownOther` (every value left out).
 */
import { compareValues } from "./event-rows.js";

export interface SeriesGroups {
  /** Listed value ids in rank order (0 is "not set"). */
  listed: number[];
  /** Group of each value id: 1 + rank when listed, else otherGroup. */
  groupOfValue: Int32Array;
  otherGroup: number;
  /** Whether some value with weight was left out. */
  hasOther: boolean;
  groupCount: number;
}

/**
 * Ranks values by weight (descending), ties by value with "not set" last,
 * and keeps the first `limit`. Values of weight 0 are not series: nothing of
 * them was counted.
 */
export function rankSeries(weights: Float64Array, present: Uint8Array, valueTexts: readonly string[], limit: number): SeriesGroups {
  const candidates: number[] = [];
  for (let value = 0; value < present.length; value++) if (present[value] === 1) candidates.push(value);
  candidates.sort((left, right) => weights[right] - weights[left] || compareValues(valueTexts, left, right, false));
  const listed = candidates.slice(0, limit);
  const otherGroup = listed.length + 1;
  const groupOfValue = new Int32Array(valueTexts.length).fill(otherGroup);
  for (let rank = 0; rank < listed.length; rank++) groupOfValue[listed[rank]] = rank + 1;
  return { listed, groupOfValue, otherGroup, hasOther: candidates.length > listed.length, groupCount: otherGroup + 1 };
}

/** The value of a listed id as answered: its text, or null for "not set". */
export function valueOf(valueTexts: readonly string[], id: number): string | null {
  return id === 0 ? null : valueTexts[id];
}
