/**
 * The index of previous parts (previous-parts.ts) against a plain union: on
 * seeded random units (segments' values by text, so that one text has
 * different ids in different units; users dense and sparse, a value in few
 * units or in every one), the users of a value in any run of units are the
 * distinct users of that value's sets in the run. Also: an index is found
 * only by an event and key it was built for and holding every part asked,
 * parts are indexed on their second asking, not their first, and an index
 * past the budget is refused (and not tried again).
 */
import roaring from "roaring";
import { describe, expect, it } from "vitest";
import { askedAgain, buildPreviousParts, keptPreviousParts, refusedBefore, type UnitPart } from "../../src/query/kernels/previous-parts.js";
import { seededRandom } from "./kernels-fixtures.js";

const { RoaringBitmap32 } = roaring;
const texts = ["", "US", "FR", "1", "true", '{"a":1}'];

function randomUnits(seed: number): { units: UnitPart[]; members: Array<Map<string, Set<number>>> } {
  const random = seededRandom(seed);
  const unitCount = 1 + Math.floor(random() * 80);
  const userCount = 1 + Math.floor(random() * (random() < 0.5 ? 40 : 3_000));
  const units: UnitPart[] = [];
  // Per unit, each text's users ("" for "not set").
  const members: Array<Map<string, Set<number>>> = [];
  for (let unit = 0; unit < unitCount; unit++) {
    // A segment's own value ids: its texts in a shuffled order.
    const order = texts.slice(1).sort(() => random() - 0.5);
    const unitTexts = ["", ...order];
    const users = unitTexts.map(() => {
      const set = new Set<number>();
      const size = random() < 0.2 ? 0 : Math.floor(random() * Math.min(userCount, 400));
      for (let at = 0; at < size; at++) set.add(Math.floor(random() * userCount));
      return set;
    });
    units.push({ key: `seg${seed}/${unit}/0/1`, users: users.map((set) => (set.size === 0 && random() < 0.5 ? undefined : new RoaringBitmap32(set))), texts: unitTexts });
    members.push(new Map(unitTexts.map((text, id) => [text, users[id]])));
  }
  return { units, members };
}

describe("the users of a value over a run of units are those of a union", () => {
  it.each(Array.from({ length: 60 }, (_, index) => 400 + index))("seed %i", (seed) => {
    const { units, members } = randomUnits(seed);
    const built = buildPreviousParts(3, 1, units, 4096);
    // Units without a member make no index.
    expect(built !== undefined).toBe(members.some((unit) => [...unit.values()].some((set) => set.size > 0)));
    if (built === undefined) return;
    const index = built;
    const random = seededRandom(seed * 7);
    for (let query = 0; query < 40; query++) {
      const first = Math.floor(random() * units.length);
      const last = first + Math.floor(random() * (units.length - first));
      const counts = new Float64Array(index.texts.length);
      const present = new Uint8Array(index.texts.length);
      index.addUsers(first, last, counts, present);
      for (const text of texts) {
        const union = new Set<number>();
        for (let unit = first; unit <= last; unit++) for (const user of members[unit].get(text)!) union.add(user);
        const value = text === "" ? 0 : index.idOfText.get(text);
        const context = `seed ${seed}: "${text}" in units ${first}…${last}`;
        if (value === undefined) {
          expect(union.size, context).toBe(0);
          continue;
        }
        expect(index.users(value, first, last), context).toBe(union.size);
        expect(counts[value], context).toBe(union.size);
        expect(present[value], context).toBe(union.size > 0 ? 1 : 0);
      }
    }
  });
});

describe("an index is kept and found", () => {
  it("by its event and key, when it holds every part asked", () => {
    const { units } = randomUnits(900);
    const keys = units.map((unit) => unit.key);
    expect(buildPreviousParts(11, 2, units, 4096)).toBeDefined();
    expect(keptPreviousParts(11, 2, keys)).toBeDefined();
    expect(keptPreviousParts(11, 2, keys.slice(1, 3))).toBeDefined();
    expect(keptPreviousParts(12, 2, keys)).toBeUndefined();
    expect(keptPreviousParts(11, 3, keys)).toBeUndefined();
    expect(keptPreviousParts(11, 2, [...keys, "other/0/0/1"])).toBeUndefined();
  });

  it("not when its lists would pass the budget, however few their members (each costs an array), and not tried again", () => {
    // 300 units of 1 200 values, one member each: 360 000 lists.
    const one = new RoaringBitmap32([7]);
    const texts = ["", ...Array.from({ length: 1_200 }, (_, value) => `v${value}`)];
    const units: UnitPart[] = Array.from({ length: 300 }, (_, unit) => ({ key: `many/${unit}/0/1`, users: texts.map((_, id) => (id === 0 ? undefined : one)), texts }));
    const keys = units.map((unit) => unit.key);
    expect(refusedBefore(31, 1, keys)).toBe(false);
    expect(buildPreviousParts(31, 1, units, 4096)).toBeUndefined();
    expect(refusedBefore(31, 1, keys)).toBe(true);
    expect(keptPreviousParts(31, 1, keys)).toBeUndefined();
  });

  it("not over more values than asked", () => {
    const { units } = randomUnits(901);
    expect(buildPreviousParts(13, 2, units, 2)).toBeUndefined();
  });

  it("on the second asking of the same parts", () => {
    expect(askedAgain(21, 4, ["a/0/1", "b/0/1"])).toBe(false);
    expect(askedAgain(21, 4, ["a/0/1", "b/0/1"])).toBe(true);
    expect(askedAgain(21, 4, ["a/0/1"])).toBe(false);
    // Another event's or key's misses do not overwrite these.
    expect(askedAgain(21, 5, ["x/0/1"])).toBe(false);
    expect(askedAgain(21, 4, ["a/0/1"])).toBe(true);
  });
});
