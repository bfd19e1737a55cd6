/**
 * Data lifecycle figures (`node dist/bench/storage/lifecycle.bench.js`): the
 * time to delete one user from a store of --events (default 10 M) sealed
 * events, and export → import throughput over --round-trip-events (default
 * 1 M), with every compared answer equal after the round trip. Peers measured
 * in the same run: for the import, the same events (the exported file's lines,
 * uuids included) sent through /ingest/batch in full 1 000-event batches over
 * --ingest-connections (default 16) connections into a fresh server, paired
 * with an import into another fresh server, --pairs (default 3) times, the
 * order alternating; for a deletion, the server's restart (a clean stop seals
 * every row, then a start reads every segment back).
 *
 * Estimate, 10 M events over 30 days (~330 k per day, one sealed segment per
 * day after the restart): a deletion first checkpoints (nothing active: a WAL
 * rotation and a publish, ~10 ms), scans every segment's user column (40 MB
 * at ~1 GB/s, ~40 ms; segments not yet in memory are loaded first, ~50 B per
 * row, 0.5 GB at ~1 GB/s, ~0.5 s) and rewrites each day holding the user's
 * rows: a busy user is in every day, 30 rewrites of ~330 k rows at ~1 µs per
 * row (the merge path: copy, sort, encode, fsync) ≈ 10 s on one worker; a user
 * seen on one day rewrites one segment, ~0.3 s. Export writes ~150 B per
 * event as NDJSON (~150 MB per million); import posts it through ingest, so
 * it cannot beat ingest's ~250 k events/s on 2 cores.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

import { generateDataset, distinctIdOf, type Dataset } from "../fixtures/dataset.js";
import { machineInfo, machineLine } from "../runner/machine.js";
import { startEventide, type Target } from "../runner/server.js";
import { keepAliveAgent, post } from "../runner/http-client.js";
import { formatCount, median } from "../runner/stats.js";
import { loadDataset } from "../suite/dataset-load.js";

const repositoryRoot = resolve(import.meta.dirname, "..", "..", "..");

function say(text: string): void {
  process.stdout.write(`${text}\n`);
}

async function postJson(url: string, token: string, body: unknown): Promise<{ status: number; json: any }> {
  const response = await fetch(url, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
  return { status: response.status, json: await response.json() };
}

function eventide(args: string[], dataDir: string): Promise<any> {
  return new Promise((resolveRun, reject) => {
    execFile(process.execPath, [join(repositoryRoot, "bin", "eventide.js"), ...args], { env: { ...process.env, EVENTIDE_DATA_DIR: dataDir }, maxBuffer: 1 << 26 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`eventide ${args.join(" ")}: ${error.message}\n${stderr}`));
      else resolveRun(JSON.parse(stdout));
    });
  });
}

/** Users by number of events, busiest first. */
function usersByActivity(dataset: Dataset): Array<{ user: number; events: number }> {
  const counts = new Map<number, number>();
  for (const user of dataset.columns.user) counts.set(user, (counts.get(user) ?? 0) + 1);
  return [...counts].map(([user, events]) => ({ user, events })).sort((left, right) => right.events - left.events);
}

async function loadInto(target: Target, dataset: Dataset): Promise<number> {
  const report = await loadDataset(target, dataset, { inflight: 4, onProgress: () => {} });
  return report.eventsPerSecond;
}

/**
 * A server over the store the deletion figures need: loaded now, or with `store`, the data directory a previous run
 * loaded with the same options and left behind (a 10 M load takes minutes on a busy machine). Resolves with the
 * server and the time of its (re)start, the peer of the deletions.
 */
async function deletionStore(dataset: Dataset, store: string | undefined): Promise<{ server: Target; startMs: number }> {
  if (store !== undefined) {
    const { token } = await eventide(["token", "create", "default", "--label", "lifecycle bench"], store);
    const startedAtMs = performance.now();
    const server = await startEventideOn(store, { apiKey: "unused", token });
    return { server, startMs: performance.now() - startedAtMs };
  }
  const loader = await startEventide({ repositoryRoot, keepData: true });
  say(`loading into ${loader.dataDirectory} (kept for --store)`);
  const ingestRate = await loadInto(loader, dataset);
  say(`loaded at ${formatCount(ingestRate)} events/s`);
  // Stopped (which seals every row) and started again without the runner's start-up time limit: a 10 M store on a busy machine outlasts it.
  const stopCode = await loader.stop();
  if (stopCode !== 0) throw new Error(`eventide exited ${stopCode} on SIGTERM: ${loader.stderrTail()}`);
  const startedAtMs = performance.now();
  const server = await startEventideOn(loader.dataDirectory!, { apiKey: loader.apiKey, token: loader.token });
  return { server, startMs: performance.now() - startedAtMs };
}

async function deletionFigures(eventCount: number, userCount: number, dayCount: number, store: string | undefined): Promise<void> {
  say(`\n=== user deletion from ${formatCount(eventCount)} events, ${formatCount(userCount)} users, ${dayCount} days (load ${loadavg()[0].toFixed(1)})`);
  const dataset = generateDataset({ eventCount, userCount, dayCount, seed: 7, startDate: "2024-01-01", batchEvents: 1000 });
  const { server, startMs: restartMs } = await deletionStore(dataset, store);
  try {
    say(`start on the sealed store: ${(restartMs / 1000).toFixed(2)} s`);
    const ranked = usersByActivity(dataset);
    const chosen = [
      { label: "busiest user", ...ranked[0] },
      { label: "median user", ...ranked[Math.floor(ranked.length / 2)] },
      { label: "a one-event user", ...ranked[ranked.length - 1] },
    ];
    for (const { label, user, events } of chosen) {
      const startMs = performance.now();
      const answer = await postJson(`${server.queryUrl}/api/v1/users/delete`, server.token, { distinctId: distinctIdOf(dataset, user) });
      const elapsedMs = performance.now() - startMs;
      if (answer.status !== 200 || answer.json.deletedEvents !== events) throw new Error(`deleting ${label}: ${answer.status} ${JSON.stringify(answer.json)}, expected ${events} events`);
      say(`delete ${label} (${events} events): ${(elapsedMs / 1000).toFixed(2)} s, ${((elapsedMs / restartMs) * 100).toFixed(0)} % of the start (load ${loadavg()[0].toFixed(1)})`);
    }
  } finally {
    await server.stop();
  }
}

const answersCompared: Array<[string, object]> = [
  ["trend", { event: "$pageview", dateFrom: "2024-01-01", dateTo: "2024-01-30" }],
  ["trend", { event: "purchase", dateFrom: "2024-01-01", dateTo: "2024-01-30", math: "unique" }],
  ["trend", { event: "$pageview", dateFrom: "2024-01-01", dateTo: "2024-01-30", filters: [{ property: "country", op: "eq", value: "US" }] }],
  ["funnel", { steps: ["$pageview", "signup", "purchase"], dateFrom: "2024-01-01", dateTo: "2024-01-30", conversionWindow: 604_800 }],
  ["retention", { cohortEvent: "signup", retentionEvent: "$pageview", dateFrom: "2024-01-01", dateTo: "2024-01-28", windowDays: 7 }],
];

async function answers(target: Target): Promise<string[]> {
  const results: string[] = [];
  for (const [kind, body] of answersCompared) results.push(JSON.stringify((await postJson(`${target.queryUrl}/api/v1/query/${kind}`, target.token, body)).json));
  return results;
}

/** The exported file's lines, cut into batches of 1 000 as the import cuts them (the file's events fit the caps). */
function fileBatches(file: string): Buffer[][] {
  const text = readFileSync(file);
  const batches: Buffer[][] = [];
  let batch: Buffer[] = [];
  for (let start = 0; start < text.length; ) {
    let end = text.indexOf(10, start);
    if (end < 0) end = text.length;
    if (end > start) batch.push(text.subarray(start, end));
    start = end + 1;
    if (batch.length === 1000) {
      batches.push(batch);
      batch = [];
    }
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}

/**
 * The import's peer: the same events (the file's lines, uuids included) through /ingest/batch into a fresh
 * server, in full 1 000-event batches over `connections` keep-alive connections, as the ingest bench loads;
 * bodies are built before the clock starts, so the figure is the server's alone. Events per second.
 */
async function ingestFile(target: Target, batches: Buffer[][], connections: number): Promise<number> {
  const head = Buffer.from(`{"apiKey":${JSON.stringify(target.apiKey)},"events":[`);
  const comma = Buffer.from(",");
  const tail = Buffer.from("]}");
  const bodies = batches.map((lines) => Buffer.concat([head, ...lines.flatMap((line, index) => (index === 0 ? [line] : [comma, line])), tail]));
  const events = batches.reduce((sum, lines) => sum + lines.length, 0);
  const agent = keepAliveAgent(connections);
  let next = 0;
  const startMs = performance.now();
  const worker = async () => {
    for (let index = next++; index < bodies.length; index = next++) {
      for (;;) {
        const answer = await post(agent, `${target.ingestUrl}/ingest/batch`, bodies[index]);
        if (answer.status === 503) {
          await new Promise((resolveWait) => setTimeout(resolveWait, 100));
          continue;
        }
        if (answer.status !== 200 || JSON.parse(answer.text).accepted !== batches[index].length) throw new Error(`ingest peer: batch ${index} answered ${answer.status}: ${answer.text.slice(0, 300)}`);
        break;
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: connections }, worker));
  } finally {
    agent.destroy();
  }
  return events / ((performance.now() - startMs) / 1000);
}

/** `eventide import` of the file into a fresh running server; events per second of the command's whole run (its start included). */
async function importFile(target: Target, file: string): Promise<number> {
  const startMs = performance.now();
  const imported = await eventide(["import", file, "--data-dir", target.dataDirectory!, "--ingest-url", target.ingestUrl], target.dataDirectory!);
  const seconds = (performance.now() - startMs) / 1000;
  if (imported.refused !== 0) throw new Error(`import refused ${imported.refused} lines: ${JSON.stringify(imported.errors)}`);
  return imported.accepted / seconds;
}

async function roundTripFigures(eventCount: number, userCount: number, dayCount: number, pairs: number, connections: number): Promise<void> {
  say(`\n=== export → import of ${formatCount(eventCount)} events (load ${loadavg()[0].toFixed(1)})`);
  const dataset = generateDataset({ eventCount, userCount, dayCount, seed: 11, startDate: "2024-01-01", batchEvents: 1000 });
  const source = await startEventide({ repositoryRoot, keepData: false });
  const work = mkdtempSync(join(tmpdir(), "eventide-bench-lifecycle-"));
  try {
    const loadRate = await loadInto(source, dataset);
    say(`load of the generated events (no uuids, 4 connections): ${formatCount(loadRate)} events/s`);
    const expected = await answers(source);
    const file = join(work, "events.ndjson");
    const exportStartMs = performance.now();
    const exported = await eventide(["export", "--output", file], source.dataDirectory!);
    const exportSeconds = (performance.now() - exportStartMs) / 1000;
    say(`export: ${formatCount(exported.exported)} events in ${exportSeconds.toFixed(1)} s, ${formatCount(exported.exported / exportSeconds)} events/s, ${(statSync(file).size / 2 ** 20).toFixed(0)} MiB`);

    // Pairs on fresh servers, the order alternating so that a drift in the machine's load favours neither.
    const batches = fileBatches(file);
    const ratios: number[] = [];
    const ingestRates: number[] = [];
    const importRates: number[] = [];
    for (let pair = 0; pair < pairs; pair++) {
      const rates = { ingest: 0, import: 0 };
      for (const peer of pair % 2 === 0 ? (["ingest", "import"] as const) : (["import", "ingest"] as const)) {
        const server = await startEventide({ repositoryRoot, keepData: false });
        try {
          rates[peer] = peer === "ingest" ? await ingestFile(server, batches, connections) : await importFile(server, file);
        } finally {
          await server.stop();
          server.cleanup();
        }
      }
      ratios.push(rates.import / rates.ingest);
      ingestRates.push(rates.ingest);
      importRates.push(rates.import);
      say(`pair ${pair + 1}: ingest ${formatCount(rates.ingest)} events/s (${connections} connections), import ${formatCount(rates.import)} events/s, import/ingest ${(rates.import / rates.ingest).toFixed(2)} (load ${loadavg()[0].toFixed(1)})`);
    }
    say(`median of ${pairs} pairs: ingest ${formatCount(median(ingestRates))} events/s, import ${formatCount(median(importRates))} events/s, import/ingest ${median(ratios).toFixed(2)}`);

    const target = join(work, "target");
    const created = await eventide(["init", "--data-dir", target], target);
    const importStartMs = performance.now();
    const imported = await eventide(["import", file, "--data-dir", target], target);
    const importSeconds = (performance.now() - importStartMs) / 1000;
    say(`import with a private server (its start and its sealing stop included): ${formatCount(imported.accepted)} events in ${importSeconds.toFixed(1)} s, ${formatCount(imported.accepted / importSeconds)} events/s, ${((imported.accepted / importSeconds / median(ingestRates)) * 100).toFixed(0)} % of the ingest median`);
    const copy = await startEventideOn(target, created);
    try {
      const got = await answers(copy);
      const equal = got.every((answer, index) => answer === expected[index]);
      say(`answers after the round trip: ${equal ? "all equal" : "DIFFERENT"} (${answersCompared.length} queries)`);
      if (!equal) process.exitCode = 1;
    } finally {
      await copy.stop();
    }
  } finally {
    await source.stop();
    source.cleanup();
    rmSync(work, { recursive: true, force: true });
  }
}

/** A server over an existing data directory, with the credentials `eventide init` printed. */
async function startEventideOn(dataDir: string, credentials: { apiKey: string; token: string }): Promise<Target & { stop(): Promise<number | null> }> {
  const { spawn } = await import("node:child_process");
  const { createInterface } = await import("node:readline");
  const child = spawn(process.execPath, [join(repositoryRoot, "dist", "src", "main.js")], {
    env: { ...process.env, EVENTIDE_DATA_DIR: dataDir, EVENTIDE_QUERY_PORT: "0", EVENTIDE_INGEST_PORT: "0", EVENTIDE_HOST: "127.0.0.1" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const listening = await new Promise<{ queryUrl: string; ingestUrl: string }>((resolveLine) => {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const parsed = JSON.parse(line);
      if (parsed.event === "listening") resolveLine(parsed);
    });
  });
  const exited = new Promise<number | null>((resolveExit) => child.once("exit", resolveExit));
  return {
    kind: "self-started",
    ...listening,
    ...credentials,
    pid: child.pid,
    stop: () => {
      child.kill("SIGTERM");
      return exited;
    },
    cleanup: () => {},
    stderrTail: () => "",
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      events: { type: "string", default: "10000000" },
      "round-trip-events": { type: "string", default: "1000000" },
      users: { type: "string", default: "1000000" },
      days: { type: "string", default: "30" },
      only: { type: "string" },
      store: { type: "string" },
      pairs: { type: "string", default: "3" },
      "ingest-connections": { type: "string", default: "16" },
    },
  });
  say(machineLine(machineInfo(repositoryRoot)));
  const users = Number(values.users);
  const days = Number(values.days);
  if (values.only !== "round-trip") await deletionFigures(Number(values.events), users, days, values.store);
  if (values.only !== "delete") await roundTripFigures(Number(values["round-trip-events"]), Math.min(users, Number(values["round-trip-events"]) / 10), days, Number(values.pairs), Number(values["ingest-connections"]));
}

await main();
