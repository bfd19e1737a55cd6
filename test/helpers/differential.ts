/**
 * What the differential suites share: sending a generated data set through the
 * real ingest endpoints in random order, the mix of generated queries, and one
 * seed's run — a server, its queries with a bounded number in flight, a
 * restart halfway when asked, and one report of every answer that differs.
 * What an answer must be is each suite's own (its reference and comparison).
 */
import { type GeneratedDataset, type Random, type WireEvent, toWireEvent } from "./random.js";
import { type JsonResponse, type ServerHandle, type StartOptions, post, removeDataDir, startServer } from "./server.js";

const dayMs = 86_400_000;

/**
 * Sends every generated event once (and, with `duplicates`, some a second time
 * with the same uuid, which must not be stored again), in random order: a few
 * dozen one by one through /ingest, four at a time, the rest in batches of
 * random size.
 */
export async function ingestInRandomOrder(server: ServerHandle, random: Random, dataset: GeneratedDataset, duplicates: boolean): Promise<void> {
  const wire: WireEvent[] = dataset.events.map((generated) => toWireEvent(random, generated));
  if (duplicates) {
    for (const generated of dataset.events) {
      if (generated.uuid !== undefined && random.chance(0.06)) wire.push(toWireEvent(random, generated));
    }
  }
  random.shuffle(wire);
  const singles = wire.splice(0, Math.min(48, Math.floor(wire.length / 10)));
  const batches: WireEvent[][] = [];
  while (wire.length > 0) batches.push(wire.splice(0, random.integer(1, 600)));

  const failure = (what: string, response: JsonResponse): Error =>
    new Error(`seed ${dataset.seed}: ${what} answered ${response.status} ${response.text.slice(0, 1000)}`);
  const sendSingles = async (events: WireEvent[]): Promise<void> => {
    await Promise.all(
      events.map(async (event) => {
        const response = await post(`${server.ingestUrl}/ingest`, { apiKey: server.apiKey, ...event });
        if (response.status !== 200 || response.body?.ok !== true) throw failure(`/ingest of ${JSON.stringify(event)}`, response);
      }),
    );
  };
  for (const batch of batches) {
    const response = await post(`${server.ingestUrl}/ingest/batch`, { apiKey: server.apiKey, events: batch });
    if (response.status !== 200 || response.body?.accepted !== batch.length || response.body?.errors !== undefined) {
      throw failure(`/ingest/batch of ${batch.length} events`, response);
    }
    await sendSingles(singles.splice(0, 4));
  }
  while (singles.length > 0) await sendSingles(singles.splice(0, 4));
}

/** Runs `task` over every item with at most `inFlightMax` at a time. */
export async function runConcurrently<T>(items: readonly T[], inFlightMax: number, task: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await task(items[next++]);
  };
  await Promise.all(Array.from({ length: Math.min(inFlightMax, items.length) }, worker));
}

export function truncate(text: string, length = 4000): string {
  return text.length <= length ? text : `${text.slice(0, length)}… (${text.length} characters)`;
}

export type QueryKind = "trend" | "funnel" | "retention";

/** The mix of a differential run: nine trends, seven funnels and four retentions in every twenty queries, interleaved. */
export function queryKindAt(index: number): QueryKind {
  const slot = index % 20;
  return slot < 9 ? "trend" : slot < 16 ? "funnel" : "retention";
}

/** `count` queries in queryKindAt's mix; each trend gets its ordinal among trends, so the fields it cycles reach every value. */
export function randomQueries<Trend, Funnel, Retention>(
  count: number,
  make: { trend(ordinal: number): Trend; funnel(): Funnel; retention(): Retention },
): Array<{ kind: "trend"; body: Trend } | { kind: "funnel"; body: Funnel } | { kind: "retention"; body: Retention }> {
  const queries: Array<{ kind: "trend"; body: Trend } | { kind: "funnel"; body: Funnel } | { kind: "retention"; body: Retention }> = [];
  let trendOrdinal = 0;
  for (let index = 0; index < count; index++) {
    const kind = queryKindAt(index);
    if (kind === "trend") queries.push({ kind, body: make.trend(trendOrdinal++) });
    else if (kind === "funnel") queries.push({ kind, body: make.funnel() });
    else queries.push({ kind, body: make.retention() });
  }
  return queries;
}

/** Two days anywhere from three days before the data to two after it, in order, as UTC midnights: a date range's usual pick. */
export function randomDaysAroundData(random: Random, dataset: GeneratedDataset): { fromMs: number; toMs: number } {
  const one = dataset.firstDayMs + random.integer(-3, dataset.dayCount + 2) * dayMs;
  const other = dataset.firstDayMs + random.integer(-3, dataset.dayCount + 2) * dayMs;
  return { fromMs: Math.min(one, other), toMs: Math.max(one, other) };
}

/**
 * Funnel step names: now and then a repeat of an earlier step, often the name
 * that follows the previous one (the generator's follow-ups take the next name,
 * so this makes deep funnels), otherwise `randomName`'s pick.
 */
export function randomStepNames(random: Random, dataset: GeneratedDataset, stepCount: number, randomName: () => string): string[] {
  const steps: string[] = [];
  for (let index = 0; index < stepCount; index++) {
    const previous = steps[index - 1];
    if (previous !== undefined && random.chance(0.2)) steps.push(random.pick(steps));
    else if (previous !== undefined && dataset.eventNames.includes(previous) && random.chance(0.4)) {
      steps.push(dataset.eventNames[(dataset.eventNames.indexOf(previous) + 1) % dataset.eventNames.length]);
    } else steps.push(randomName());
  }
  return steps;
}

/** A generated query: its kind names the endpoint, its body is sent as is. */
export interface GeneratedQuery {
  kind: QueryKind;
  body: unknown;
}

/** Whether an answer was the query's first or its replay on the restarted server. */
export type AnswerPhase = "first" | "after restart" | "asked again";

export interface DifferentialSeed<Query extends GeneratedQuery> {
  /** Names the run in failures (`seed 7 (restart)`), and says how to replay it and what the answers were held to. */
  title: string;
  replay: string;
  referenceName: string;
  queries: readonly Query[];
  serverOptions: StartOptions;
  queriesInFlightMax: number;
  /**
   * Stop the server with SIGTERM halfway through the queries (which seals every
   * segment) and start it again on the same data; "halfway, replaying" asks
   * the first half again on the restarted server before the rest.
   */
  restart: "none" | "halfway" | "halfway, replaying";
  /** Queries asked twice more once all are answered, since a worker may answer a repeat from what it kept (an index). */
  askedAgain?(query: Query): boolean;
  /** Problems known before the server starts (a generator that lost substance), reported with the answers. */
  notes?: readonly string[];
  mismatchesPrintedMax: number;
  notesPrintedMax: number;
  ingest(server: ServerHandle): Promise<void>;
  /** What is wrong with one answer (nothing: an empty list). */
  judge(ordinal: number, phase: AnswerPhase, response: JsonResponse): readonly string[];
  /** Read what the server counted before the restart wipes it (its metrics, say). */
  beforeRestart?(server: ServerHandle): Promise<void>;
  /** Problems found once every query has been answered (listings, say). */
  afterQueries?(server: ServerHandle): Promise<readonly string[]>;
}

interface Mismatch<Query extends GeneratedQuery> {
  ordinal: number;
  query: Query;
  detail: string;
}

/**
 * One seed of a differential suite on a server of its own: ingest, every query
 * (with the restart asked for), and one error listing every differing answer
 * and every note, so a failure shows all that went wrong, not the first.
 */
export async function runDifferentialSeed<Query extends GeneratedQuery>(run: DifferentialSeed<Query>): Promise<void> {
  const mismatches: Mismatch<Query>[] = [];
  const notes = [...(run.notes ?? [])];
  let server = await startServer(run.serverOptions);
  const dataDir = server.dataDir;
  const credentials = { apiKey: server.apiKey, token: server.token, workspaceId: server.workspaceId };
  try {
    try {
      await run.ingest(server);
    } catch (error) {
      throw new Error(`${run.title}: ingest failed: ${(error as Error).message}\nstderr:\n${server.stderr().slice(-2000)}`);
    }
    const ask = async (ordinal: number, phase: AnswerPhase): Promise<void> => {
      const query = run.queries[ordinal];
      const response = await post(`${server.queryUrl}/api/v1/query/${query.kind}`, query.body, { token: server.token });
      for (const detail of run.judge(ordinal, phase, response)) mismatches.push({ ordinal, query, detail });
    };
    const ordinals = run.queries.map((_, ordinal) => ordinal);
    const half = run.restart === "none" ? ordinals.length : Math.floor(ordinals.length / 2);
    await runConcurrently(ordinals.slice(0, half), run.queriesInFlightMax, (ordinal) => ask(ordinal, "first"));
    if (run.restart !== "none") {
      if (run.beforeRestart !== undefined) await run.beforeRestart(server);
      const exitCode = await server.stop();
      if (exitCode !== 0) notes.push(`SIGTERM exit code was ${exitCode}, not 0; stderr:\n${server.stderr().slice(-2000)}`);
      server = await startServer({ ...run.serverOptions, dataDir, credentials });
      if (run.restart === "halfway, replaying") await runConcurrently(ordinals.slice(0, half), run.queriesInFlightMax, (ordinal) => ask(ordinal, "after restart"));
      await runConcurrently(ordinals.slice(half), run.queriesInFlightMax, (ordinal) => ask(ordinal, "first"));
    }
    if (run.askedAgain !== undefined) {
      const again = ordinals.filter((ordinal) => run.askedAgain!(run.queries[ordinal]));
      for (let round = 0; round < 2; round++) await runConcurrently(again, run.queriesInFlightMax, (ordinal) => ask(ordinal, "asked again"));
    }
    if (run.afterQueries !== undefined) notes.push(...(await run.afterQueries(server)));
    if (mismatches.length > 0 || notes.length > 0) throw new Error(mismatchReport(run, mismatches, notes));
  } finally {
    await server.stop();
    removeDataDir(dataDir);
  }
}

function mismatchReport<Query extends GeneratedQuery>(run: DifferentialSeed<Query>, mismatches: Mismatch<Query>[], notes: readonly string[]): string {
  mismatches.sort((left, right) => left.ordinal - right.ordinal);
  const kinds = new Map<string, number>();
  for (const mismatch of mismatches) kinds.set(mismatch.query.kind, (kinds.get(mismatch.query.kind) ?? 0) + 1);
  const shown = mismatches
    .slice(0, run.mismatchesPrintedMax)
    .map((mismatch) => `query #${mismatch.ordinal}: POST /api/v1/query/${mismatch.query.kind} ${JSON.stringify(mismatch.query.body)}\n  ${mismatch.detail}`);
  return [
    `${run.title}: ${mismatches.length} of ${run.queries.length} answers differ from ${run.referenceName} (${[...kinds].map(([kind, count]) => `${kind} ${count}`).join(", ")}); replay with ${run.replay}`,
    ...shown,
    mismatches.length > shown.length ? `… and ${mismatches.length - shown.length} more` : "",
    ...notes.slice(0, run.notesPrintedMax),
    notes.length > run.notesPrintedMax ? `… and ${notes.length - run.notesPrintedMax} more notes` : "",
  ].join("\n\n");
}
