/**
 * Reusable working memory for the query kernels, one set per thread (each
 * worker thread has its own module instance). A kernel over a 5 M-row shard
 * needs per-user and per-row arrays of megabytes; allocating them per query
 * costs page faults and GC pauses comparable to the scan itself, so they are
 * kept and grown by doubling. Kernels run synchronously and never nest, so a
 * buffer is never used by two kernels at once; each buffer has one role.
 */

function grownLength(current: number, needed: number): number {
  let length = Math.max(current, 1024);
  while (length < needed) length *= 2;
  return length;
}

/**
 * Per-user marks that need no clearing between queries: a query claims a fresh
 * range of mark values [base, base + markCount), and every value left by an
 * earlier query is below base, so it reads as "unmarked". The array is zeroed
 * only when mark values would pass 2^31.
 */
export class EpochMarks {
  values: Int32Array = new Int32Array(0);
  private nextMark = 1;

  claim(markCount: number): number {
    if (this.nextMark + markCount >= 0x7fff_ffff) {
      this.values.fill(0);
      this.nextMark = 1;
    }
    const base = this.nextMark;
    this.nextMark += markCount;
    return base;
  }

  /** Called from a loop when an index reaches past the end; keeps the marks already written. */
  grow(lengthMin: number): Int32Array {
    const values = new Int32Array(grownLength(this.values.length, lengthMin));
    values.set(this.values);
    this.values = values;
    return values;
  }
}

/** An Int32Array whose contents are preserved on growth (zero where new). */
export class GrowableInt32 {
  values: Int32Array = new Int32Array(0);

  grow(lengthMin: number): Int32Array {
    const values = new Int32Array(grownLength(this.values.length, lengthMin));
    values.set(this.values);
    this.values = values;
    return values;
  }
}

/** A Uint32Array whose contents are preserved on growth (zero where new). */
export class GrowableUint32 {
  values: Uint32Array = new Uint32Array(0);

  grow(lengthMin: number): Uint32Array {
    const values = new Uint32Array(grownLength(this.values.length, lengthMin));
    values.set(this.values);
    this.values = values;
    return values;
  }
}

/** A Float64Array whose contents are preserved on growth (zero where new). */
export class GrowableFloat64 {
  values: Float64Array = new Float64Array(0);

  grow(lengthMin: number): Float64Array {
    const values = new Float64Array(grownLength(this.values.length, lengthMin));
    values.set(this.values);
    this.values = values;
    return values;
  }
}

/** Buffers whose contents do not survive a request for more length. */
export class ScratchUint32 {
  private values: Uint32Array = new Uint32Array(0);

  get(lengthMin: number): Uint32Array {
    if (this.values.length < lengthMin) this.values = new Uint32Array(grownLength(this.values.length, lengthMin));
    return this.values;
  }
}

export class ScratchInt32 {
  private values: Int32Array = new Int32Array(0);

  get(lengthMin: number): Int32Array {
    if (this.values.length < lengthMin) this.values = new Int32Array(grownLength(this.values.length, lengthMin));
    return this.values;
  }
}

export class ScratchFloat64 {
  private values: Float64Array = new Float64Array(0);

  get(lengthMin: number): Float64Array {
    if (this.values.length < lengthMin) this.values = new Float64Array(grownLength(this.values.length, lengthMin));
    return this.values;
  }
}
