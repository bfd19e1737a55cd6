/**
 * The worker's index keeps an active segment's texts per key (decoded from
 * shared memory, only those that arrived since its last task) and each text's
 * number. As the key's texts grow, a column's texts and numbers equal those
 * read from scratch; a task whose snapshot is older sees only its own texts.
 */
import { describe, expect, it } from "vitest";
import { ActiveIndex } from "../../src/query/active-index.js";
import { ActiveProperties, type ActivePropertyEntries } from "../../src/storage/active-properties.js";
import { Random } from "../helpers/random.js";

/** What a text counts as in sum/avg/min/max: SPEC §7.4, written here from the rule, not the engine. */
function expectedNumber(text: string): number {
  if (!/^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(text)) return NaN;
  const number = Number(text);
  return Number.isFinite(number) ? number : NaN;
}

const texts = ["12", "-0.5", "1e400", "abc", "3.25", "-7", "1e3", "0x10", " 4", "true", "", "9007199254740993", "😀"];

describe("an active segment's texts and their numbers, kept by the worker's index", () => {
  it.each([1, 2, 3, 4, 5])("equal a reading from scratch as the key gains texts (seed %i)", (seed) => {
    const random = new Random(seed);
    const properties = new ActiveProperties();
    const slot = properties.slotFor(4);
    const index = new ActiveIndex("ws/2024-01-01/active-1");
    const unused = new SharedArrayBuffer(4);
    // The key's texts in the order they first came: text id i is model[i].
    const model = [""];
    const snapshots: ActivePropertyEntries[] = [];
    let tasks = 0;
    for (let row = 0; row < 2000; row++) {
      const text = random.chance(0.5) ? texts[random.integer(0, texts.length - 1)] : String(random.integer(-500, 500) / 4);
      if (properties.add(slot, row, text) === 1) model.push(text);
      if (!random.chance(0.05)) continue;
      snapshots.push(properties.entries(slot));
      // Tasks come in any order: now and then one carries an older snapshot than the index has seen.
      const task = random.chance(0.3) ? snapshots[random.integer(0, snapshots.length - 1)] : snapshots[snapshots.length - 1];
      const column = index.column({ rowCount: task.entryCount, event: unused, user: unused }, task);
      expect(column.texts).toEqual(model.slice(0, task.texts.count));
      const numbers = column.numbers!();
      expect(Number.isNaN(numbers[0])).toBe(true);
      for (let id = 1; id < task.texts.count; id++) expect(numbers[id], JSON.stringify(model[id])).toBe(expectedNumber(model[id]));
      tasks++;
    }
    expect(tasks).toBeGreaterThan(50);
  });
});
