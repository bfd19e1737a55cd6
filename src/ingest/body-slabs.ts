/**
 * Reused buffers for large ingest bodies. A fresh buffer per request cost the
 * main thread its pages each time: zero-filled, then faulted in again while
 * the body was copied into it (a 227 KiB batch is 56 page faults, half of the
 * main thread's under batch load). A slab is a SharedArrayBuffer, so a worker
 * reads the body in place and no transfer detaches it; it comes back to the
 * pool once its task has answered, when no thread reads it any more.
 */
import { strict as assert } from "node:assert";
import { limits, tuning } from "../config/limits.js";

export class BodySlabs {
  /** Free slabs by size class: index c holds slabs of slabBytesMin << c bytes. */
  private readonly free: SharedArrayBuffer[][] = [];
  private freeBytes = 0;

  constructor(private readonly freeBytesMax = limits.ingestBodySlabsBytesMax) {}

  /** Whether a body of `bytes` is read into a slab (smaller bodies reuse the heap's pages as they are). */
  static fits(bytes: number): boolean {
    return bytes >= tuning.bodySlabBytesMin && bytes <= tuning.bodySlabBytesMax;
  }

  /** A view of `bytes` bytes at the start of a slab the caller owns until it gives the slab back. */
  take(bytes: number): Uint8Array<SharedArrayBuffer> {
    assert(BodySlabs.fits(bytes), "body size outside the slab classes");
    const sizeClass = Math.max(0, Math.ceil(Math.log2(bytes / tuning.bodySlabBytesMin)));
    const slab = this.free[sizeClass]?.pop();
    if (slab !== undefined) {
      this.freeBytes -= slab.byteLength;
      return new Uint8Array(slab, 0, bytes);
    }
    return new Uint8Array(new SharedArrayBuffer(tuning.bodySlabBytesMin * 2 ** sizeClass), 0, bytes);
  }

  /** Takes a slab back; kept for the next body while the free slabs stay within their budget. */
  give(slab: SharedArrayBuffer): void {
    if (this.freeBytes + slab.byteLength > this.freeBytesMax) return;
    const sizeClass = Math.round(Math.log2(slab.byteLength / tuning.bodySlabBytesMin));
    assert(tuning.bodySlabBytesMin * 2 ** sizeClass === slab.byteLength, "not a slab of this pool");
    (this.free[sizeClass] ??= []).push(slab);
    this.freeBytes += slab.byteLength;
  }

  get freeByteCount(): number {
    return this.freeBytes;
  }
}
