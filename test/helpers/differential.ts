/**
 * What the differential suites share: sending a generated data set through the
 * real ingest endpoints in random order, and running queries with a bounded
 * number in flight.
 */
import { type GeneratedDataset, type Random, type WireEvent, toWireEvent } from "./random.js";
import { type JsonResponse, type ServerHandle, post } from "./server.js";

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
