/**
 * Merging the kernels' per-shard partial results on the thread that answers.
 * Shards hold disjoint users, so every count of a query is the sum of its
 * shards' counts, distinct-user counts included.
 */

/** Element-wise sum of equally long partials; a length mismatch is a programmer error. */
export function sumPartials(partials: readonly Float64Array[]): Float64Array {
  const total = new Float64Array(partials.length === 0 ? 0 : partials[0].length);
  for (const partial of partials) {
    if (partial.length !== total.length) throw new Error(`partial of length ${partial.length}, expected ${total.length}`);
    for (let index = 0; index < total.length; index++) total[index] += partial[index];
  }
  return total;
}
