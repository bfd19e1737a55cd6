/**
 * Growable typed-array columns over SharedArrayBuffers (Arrow JS builder
 * style: length apart from capacity, capacity doubles). Workers read a
 * snapshot — the current buffer and the row count at the time the query
 * started — while the main thread keeps appending: rows below the snapshot
 * count are never written again, and growth allocates a new buffer, leaving
 * the old one intact for readers that still hold it.
 */
import { sharedBuffer } from "./shared-memory.js";
type TypedArrayConstructor<T> = { new (buffer: SharedArrayBuffer, byteOffset?: number, length?: number): T; BYTES_PER_ELEMENT: number };

export class SharedColumn<T extends Uint8Array | Uint32Array> {
  buffer: SharedArrayBuffer;
  values: T;

  constructor(
    private readonly Type: TypedArrayConstructor<T>,
    private readonly valuesPerRow: number,
    initialRows = 1024,
  ) {
    this.buffer = sharedBuffer(initialRows * valuesPerRow * Type.BYTES_PER_ELEMENT);
    this.values = new Type(this.buffer);
  }

  /** Makes room for rows [0, rowCount). */
  ensureRows(rowCount: number): void {
    const needed = rowCount * this.valuesPerRow;
    if (needed <= this.values.length) return;
    let capacity = this.values.length;
    while (capacity < needed) capacity *= 2;
    const buffer = sharedBuffer(capacity * this.Type.BYTES_PER_ELEMENT);
    const values = new this.Type(buffer);
    values.set(this.values);
    this.buffer = buffer;
    this.values = values;
  }

  get byteLength(): number {
    return this.buffer.byteLength;
  }
}
