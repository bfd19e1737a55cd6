/**
 * V8 flags the server process is started with: by `npm start` (package.json
 * repeats them, a script line cannot import this), the benchmarks and the
 * tests. They cannot be set from inside the process: V8 reads them when it
 * creates the heap.
 *
 * `--initial-heap-size=128`: the main thread's JavaScript heap holds ~11 MB,
 * and V8 sized its old generation's limit from that (~35 MB), which under
 * batch ingest kept it starting a full mark-compact every 100–250 ms (~40 in
 * 8 s); V8's helper threads (concurrent marking, compiles) took ~0.5 µs of
 * CPU per event, a tenth of all. With a 128 MB floor it does ~6 in 8 s and
 * they take ~0.3 µs; in paired runs at 16 connections, 3–7 % more events per
 * second for 3–8 % less CPU per event. The cost: garbage may pile up to
 * ~128 MB of heap before it is collected.
 *
 * `--expose-gc`: lets each thread ask for a collection without blocking
 * (shared-memory.ts), instead of allocating a balloon ArrayBuffer that held
 * the main thread 35–80 ms now and then during a load.
 */
export const serverNodeFlags: readonly string[] = ["--initial-heap-size=128", "--expose-gc"];
