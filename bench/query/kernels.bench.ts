/**
 * Query kernel benchmark: trend, funnel and retention kernels on a synthetic
 * 2 M-row store of 30 sealed day segments (sorted, with per-event bitmaps),
 * 100 k users, without threads. Each scenario runs on all users (one core
 * doing everything) and on half of them (one core's share with 2 workers).
 * Run: `npx tsc -p tsconfig.json && node dist/bench/query/kernels.bench.js [name filter]`.
 *
 * Estimate (one core, all users): sessions of ~7.4 events, page_view ~4 of
 * them → ~1.1 M page_view rows; the 5 funnel names hold ~1.35 M rows.
 *   - trend total by day: 30 segments × 2 binary searches → ~10 µs.
 *   - trend total by hour: 1.1 M rows × (load, divide, increment) ~1 ns → ~1 ms.
 *   - trend unique by day/week: no rows read, one rangeCardinality per day
 *     (an OR of 7 bitmaps per week) over ~40 k-user bitmaps → ~50 µs.
 *   - trend unique by hour: 1.1 M rows with a per-user mark and hour mask in
 *     two 400 KB arrays (L2) → ~3 ms.
 *   - trend filtered (plan = pro): 1.1 M × (value id load + pass-table load +
 *     selection store) ~1 ns → ~1 ms; two filters + unique (day or week) add a mark pass
 *     over the kept ~20 % → ~1.5 ms.
 *   - funnel, 5 steps, 1-day window: pass 1 over 1.1 M entry rows, two gather
 *     passes over 1.35 M rows at ~2 ns/row → ~8 ms, a walk over ~100 k entry
 *     users' ~1 M entries (most stop at the first exhausted step) → ~5 ms:
 *     ~15 ms.
 *   - retention, 13 periods of 2 days: 2 × 26 bitmap ORs over ~40 k-user
 *     bitmaps, 78 intersection counts → ~0.5 ms.
 * Half of the users is one core's share with 2 workers. At the SPEC-scale
 * target (10 M events, 2 cores) each core sees 5× the half-users rows: trend
 * ≤ 5 ms, filtered/unique ≤ 10 ms, funnel ≤ 150 ms, retention ≤ 10 ms hold if
 * the half-users figures stay under 1, 2, 30 and 2 ms.
 */
import { pathToFileURL } from "node:url";
import { Bench } from "tinybench";
import { dayMs, retentionLayout, trendLayout, type GroupBy } from "../../src/query/buckets.js";
import type { FilterPlan } from "../../src/query/filters.js";
import { funnelPartial } from "../../src/query/kernels/funnel.js";
import { retentionPartial } from "../../src/query/kernels/retention.js";
import { trendPartial, type TrendMath } from "../../src/query/kernels/trend.js";
import type { SegmentView } from "../../src/query/segment-view.js";
import { sealedSegment, seededRandom } from "../../test/query/kernels-fixtures.js";

/** Imported by a profiling script, this module only builds the data and the scenarios. */
const isMain = import.meta.url === pathToFileURL(process.argv[1] ?? "").href;
const rowCountTarget = 2_000_000;
export const userCount = 100_000;
const dayCount = 30;
const firstDate = "2024-03-01";
const firstDayMs = Date.parse(`${firstDate}T00:00:00Z`);

const events = ["page_view", "signup", "view_item", "add_to_cart", "checkout", "purchase", "click", "search", "login", "logout"] as const;
const eventId = (name: (typeof events)[number]) => events.indexOf(name);
const plans = ["free", "pro", "team", "enterprise"];
const keyPlan = 0;
const keyCountry = 1;
const keyAmount = 2;

/** Sessions of plausible shape, so that funnels convert step by step and users return on later days. */
export function syntheticSegments(): { segments: SegmentView[]; rowCount: number } {
  const random = seededRandom(20240301);
  const dayRows = Array.from({ length: dayCount }, () => ({ events: [] as number[], users: [] as number[], offsets: [] as number[], amounts: [] as number[] }));
  let rowCount = 0;
  const push = (user: number, name: (typeof events)[number], timeMs: number, amount: number) => {
    const day = Math.floor((timeMs - firstDayMs) / dayMs);
    if (day >= dayCount) return;
    const rows = dayRows[day];
    rows.events.push(eventId(name));
    rows.users.push(user);
    rows.offsets.push(timeMs - firstDayMs - day * dayMs);
    rows.amounts.push(amount);
    rowCount++;
  };
  while (rowCount < rowCountTarget) {
    // Busy users are spread over the id space, as first-seen ids would be, so shards get equal work.
    const user = (Math.floor(random() * random() * userCount) * 7919) % userCount;
    let timeMs = firstDayMs + Math.floor(random() * dayCount * dayMs);
    const step = () => (timeMs += 1000 + Math.floor(random() * 120_000));
    if (random() < 0.5) push(user, "login", step(), 0);
    if (random() < 0.08) push(user, "signup", step(), 0);
    do push(user, "page_view", step(), 0);
    while (random() < 0.75);
    while (random() < 0.6) push(user, random() < 0.6 ? "click" : "search", step(), 0);
    if (random() < 0.5) {
      push(user, "view_item", step(), 0);
      if (random() < 0.5) {
        push(user, "add_to_cart", step(), 0);
        if (random() < 0.6) {
          push(user, "checkout", step(), 0);
          if (random() < 0.7) push(user, "purchase", step(), 1 + Math.floor(random() * 200));
        }
      }
    }
    if (random() < 0.3) push(user, "logout", step(), 0);
  }
  const planTexts = ["", ...plans];
  const countryTexts = ["", ...Array.from({ length: 50 }, (_, index) => `C${String(index).padStart(2, "0")}`)];
  const amountTexts = ["", ...Array.from({ length: 200 }, (_, index) => String((index + 1) / 2))];
  const segments = dayRows.map((rows, day) =>
    sealedSegment(
      `bench/${day}`,
      {
        dayStartMs: firstDayMs + day * dayMs,
        eventIds: Uint32Array.from(rows.events),
        userIds: Uint32Array.from(rows.users),
        timeOffsetMs: Uint32Array.from(rows.offsets),
        properties: [
          { keyId: keyPlan, valueIds: Uint32Array.from(rows.users, (user) => 1 + (user % plans.length)), texts: planTexts },
          { keyId: keyCountry, valueIds: Uint32Array.from(rows.users, (user) => 1 + (user % 50)), texts: countryTexts },
          { keyId: keyAmount, valueIds: Uint32Array.from(rows.amounts), texts: amountTexts },
        ],
      },
      { bitmaps: true, eventRowStartPadding: 0, valueIdWidth: 8 },
    ),
  );
  return { segments, rowCount };
}

const lastDate = new Date(firstDayMs + (dayCount - 1) * dayMs).toISOString().slice(0, 10);

function trendPlan(groupBy: GroupBy, math: TrendMath, filters: FilterPlan[]) {
  return { eventId: eventId("page_view"), layout: trendLayout(firstDate, lastDate, groupBy), filters, math };
}

/** Plan other than free, country holding a 1: about a fifth of the rows pass both. */
function twoFilters(): FilterPlan[] {
  return [
    { keyId: keyPlan, op: "neq", value: "free" },
    { keyId: keyCountry, op: "contains", value: "1" },
  ];
}

const { segments, rowCount } = syntheticSegments();
if (isMain) console.log(JSON.stringify({ rows: rowCount, segments: segments.length, users: userCount }));

const retention = retentionLayout(firstDate, new Date(firstDayMs + 25 * dayMs).toISOString().slice(0, 10), 2);
export const scenarios: Array<[string, (userLo: number, userHi: number) => unknown]> = [
  ["trend total day", (lo, hi) => trendPartial(segments, trendPlan("day", "total", []), lo, hi)],
  ["trend total hour", (lo, hi) => trendPartial(segments, trendPlan("hour", "total", []), lo, hi)],
  ["trend unique day", (lo, hi) => trendPartial(segments, trendPlan("day", "unique", []), lo, hi)],
  ["trend unique week", (lo, hi) => trendPartial(segments, trendPlan("week", "unique", []), lo, hi)],
  ["trend unique hour", (lo, hi) => trendPartial(segments, trendPlan("hour", "unique", []), lo, hi)],
  ["trend filtered eq", (lo, hi) => trendPartial(segments, trendPlan("day", "total", [{ keyId: keyPlan, op: "eq", value: "pro" }]), lo, hi)],
  ["trend 2 filters unique", (lo, hi) => trendPartial(segments, trendPlan("day", "unique", twoFilters()), lo, hi)],
  // Seven segments share each bucket: users are marked per bucket over the filters' row selection.
  ["trend 2 filters unique week", (lo, hi) => trendPartial(segments, trendPlan("week", "unique", twoFilters()), lo, hi)],
  [
    "funnel 5 steps 1 day",
    (lo, hi) =>
      funnelPartial(
        segments,
        {
          stepEventIds: [eventId("page_view"), eventId("view_item"), eventId("add_to_cart"), eventId("checkout"), eventId("purchase")],
          entryFromMs: firstDayMs,
          entryToMsExclusive: firstDayMs + dayCount * dayMs,
          windowMs: 86_400_000,
        },
        lo,
        hi,
      ),
  ],
  [
    "funnel signup 3 steps 7 days",
    (lo, hi) =>
      funnelPartial(
        segments,
        {
          stepEventIds: [eventId("signup"), eventId("view_item"), eventId("purchase")],
          entryFromMs: firstDayMs,
          entryToMsExclusive: firstDayMs + dayCount * dayMs,
          windowMs: 7 * 86_400_000,
        },
        lo,
        hi,
      ),
  ],
  [
    "retention 13 periods",
    (lo, hi) =>
      retentionPartial(
        segments,
        { cohortEventId: eventId("signup"), retentionEventId: eventId("page_view"), ...retention },
        lo,
        hi,
      ),
  ],
  [
    "retention 26 days by day",
    (lo, hi) => {
      const layout = retentionLayout(firstDate, new Date(firstDayMs + 25 * dayMs).toISOString().slice(0, 10), 1);
      return retentionPartial(segments, { cohortEventId: eventId("login"), retentionEventId: eventId("login"), ...layout }, lo, hi);
    },
  ],
];

// `node dist/bench/query/kernels.bench.js funnel` runs only the scenarios whose name contains "funnel".
const only = isMain ? (process.argv[2] ?? "") : "\u0000 nothing";
const bench = new Bench({ time: 1000, warmupTime: 200 });
for (const [name, run] of scenarios) {
  if (!name.includes(only)) continue;
  bench.add(`${name} · all users`, () => {
    run(0, userCount);
  });
  bench.add(`${name} · half users`, () => {
    run(0, userCount / 2);
  });
}
await bench.run();
for (const task of bench.tasks) {
  const result = task.result;
  if (result.state !== "completed") {
    console.log(JSON.stringify({ scenario: task.name, state: result.state }));
    continue;
  }
  console.log(
    JSON.stringify({
      scenario: task.name,
      minMs: Number(result.latency.min.toFixed(3)),
      meanMs: Number(result.latency.mean.toFixed(3)),
      p50Ms: Number(result.latency.p50.toFixed(3)),
      p99Ms: Number(result.latency.p99.toFixed(3)),
      samples: result.latency.samplesCount,
    }),
  );
}
