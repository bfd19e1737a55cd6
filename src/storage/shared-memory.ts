/**
 * Every SharedArrayBuffer of the store comes from `sharedBuffer`, because V8
 * does not count shared memory when it decides to collect: an ordinary
 * ArrayBuffer that becomes garbage adds to the external memory that triggers
 * a collection, a SharedArrayBuffer does not. Active columns grow by doubling
 * and are dropped whole at every checkpoint, so a long load left most of
 * its resident memory in dropped shared buffers, waiting for a collection
 * that the small JS heap never asked for.
 *
 * So for each `balloonBytes` of shared memory a thread allocates, it asks
 * for a full collection, which frees the dropped shared buffers too: with
 * `--expose-gc` (the server's flags, node-flags.ts) as a task of the event
 * loop (`gc({ execution: "async" })`), which costs the caller nothing.
 * Without it, the thread allocates and drops at once an ordinary ArrayBuffer
 * of that size, a balloon V8 counts and collects for. The balloon is never
 * touched, but V8's allocation of it held the server's main thread 35–80 ms
 * now and then during a load: the longest stalls a request waited out.
 */

/** Shared bytes allocated between two collections asked for (or balloons: large enough that one is mapped, not carved from the heap). */
const balloonBytes = 64 * 1024 * 1024;
/** One balloon allocation at most this large (an ArrayBuffer's length is bounded). */
const balloonBytesMax = 1024 * 1024 * 1024;

let allocatedSinceBalloon = 0;

/** V8's `gc` when the process runs with --expose-gc; its options object asks for a collection in a later task. */
const exposedGc = (globalThis as { gc?: (options: { type: "major"; execution: "async" }) => unknown }).gc;

export function sharedBuffer(byteLength: number): SharedArrayBuffer {
  const buffer = new SharedArrayBuffer(byteLength);
  allocatedSinceBalloon += byteLength;
  if (allocatedSinceBalloon >= balloonBytes) {
    if (typeof exposedGc === "function") exposedGc({ type: "major", execution: "async" });
    // Allocated only to be counted by the collector's heuristics; dropped at once.
    else for (let left = allocatedSinceBalloon; left > 0; left -= balloonBytesMax) new ArrayBuffer(Math.min(left, balloonBytesMax));
    allocatedSinceBalloon = 0;
  }
  return buffer;
}
