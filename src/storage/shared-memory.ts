/**
 * Every SharedArrayBuffer of the store comes from `sharedBuffer`, because V8
 * does not count shared memory when it decides to collect: an ordinary
 * ArrayBuffer that becomes garbage adds to the external memory that triggers
 * a collection, a SharedArrayBuffer does not. Active columns grow by doubling
 * and are dropped whole at every checkpoint, so a long load left most of
 * its resident memory in dropped shared buffers, waiting for a collection
 * that the small JS heap never asked for.
 *
 * So for each `balloonBytes` of shared memory a thread allocates, it also
 * allocates, and drops at once, an ordinary ArrayBuffer of that size: V8
 * counts it, and runs its usual (incremental, mostly concurrent) collection
 * as it would for that much ordinary memory, which frees the dropped shared
 * buffers too. The balloon is never touched: a large zero-filled allocation
 * is mapped lazily, so it costs address space, not resident memory.
 */

/** Shared bytes allocated between two balloons: large enough that the balloon is mapped, not carved from the heap. */
const balloonBytes = 64 * 1024 * 1024;
/** One balloon allocation at most this large (an ArrayBuffer's length is bounded). */
const balloonBytesMax = 1024 * 1024 * 1024;

let allocatedSinceBalloon = 0;

export function sharedBuffer(byteLength: number): SharedArrayBuffer {
  const buffer = new SharedArrayBuffer(byteLength);
  allocatedSinceBalloon += byteLength;
  if (allocatedSinceBalloon >= balloonBytes) {
    // Allocated only to be counted by the collector's heuristics; dropped at once.
    for (let left = allocatedSinceBalloon; left > 0; left -= balloonBytesMax) new ArrayBuffer(Math.min(left, balloonBytesMax));
    allocatedSinceBalloon = 0;
  }
  return buffer;
}
