/**
 * Micro-benchmark of the chunk codec (src/storage/chunk-codec.ts): the
 * columnar form validated events travel in, from a worker to the WAL and the
 * active segments. Run: `node dist/bench/storage/chunk-codec.bench.js`.
 *
 * Estimate for 1 000 events of the ingest fixtures (~6 properties each):
 * - encode: per row three interns (event name, distinctId, plus the uuid copy)
 *   and ~6 addProperty calls, each a Map lookup of a short string (~30–50 ns)
 *   and an array push → ~0.4 µs a row, ~0.4 ms; finish() sizes and writes
 *   ~2 k distinct strings (~25 KB of UTF-8) and ~6 k entries → ~0.1 ms.
 *   ~0.5 ms per chunk, ~2 M events/s.
 * - decode: typed-array views over the buffer (no copy) and one
 *   TextDecoder/latin1 pass over ~25 KB of strings into ~2 k JS strings
 *   (~50 ns each) → ~0.1 ms, ~10 M events/s.
 */
import { buildBatchBodies, type BenchEvent } from "../fixtures/events.js";
import { runMicroBench } from "../runner/micro-bench.js";
import { ChunkBuilder, decodeChunk } from "../../src/storage/chunk-codec.js";
import { parseUuid } from "../../src/ingest/event-fields.js";
import { propertyText } from "../../src/ingest/event-validation.js";

const body = buildBatchBodies({ seed: 3, apiKey: "ek_bench", bodyCount: 1, endTimeMs: Date.UTC(2024, 4, 1) }).bodies[0];
const events = (JSON.parse(body.toString("utf8")) as { events: BenchEvent[] }).events;
// Inputs as validation hands them over: times parsed, uuids as bytes, property texts computed.
const rows = events.map((event) => {
  let uuid: Uint8Array | undefined;
  if (event.uuid !== undefined) {
    uuid = new Uint8Array(16);
    if (!parseUuid(event.uuid, uuid)) throw new Error(`bad uuid ${event.uuid}`);
  }
  return {
    timeMs: Date.parse(event.timestamp),
    event: event.event,
    distinctId: event.distinctId,
    uuid,
    properties: Object.entries(event.properties).map(([key, value]) => [key, propertyText(value)!] as const),
  };
});

function encode(): ArrayBuffer {
  const builder = new ChunkBuilder();
  for (const row of rows) {
    const index = builder.addRow(row.timeMs, row.event, row.distinctId, row.uuid);
    for (const [key, text] of row.properties) builder.addProperty(index, key, text);
  }
  return builder.finish();
}

const chunk = new Uint8Array(encode());
const decoded = decodeChunk(chunk);
if (decoded.rowCount !== rows.length) throw new Error(`decoded ${decoded.rowCount} rows, encoded ${rows.length}`);

/** Decodes the chunk and every string in it, as the store's apply asks for them all. */
function decodeAll(): void {
  const decoded = decodeChunk(chunk);
  for (let index = 0; index < decoded.stringCount; index++) decoded.string(index);
}

await runMicroBench(`chunk codec (1 000 events → ${(chunk.byteLength / 1024).toFixed(0)} KiB chunk, ${decoded.stringCount} distinct strings)`, [
  { name: "encode 1 000 events", estimateMicroseconds: 500, items: 1000, itemName: "event", run: encode },
  { name: "decode 1 000 events", estimateMicroseconds: 100, items: 1000, itemName: "event", run: decodeAll },
]);
