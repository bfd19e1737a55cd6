/**
 * Helpers for the durability suites: trend queries that return plain counts,
 * ISO timestamps, a tolerant batch sender (a refused connection is an answer
 * too: the server may be dead on purpose), and the bookkeeping of what the
 * server acknowledged.
 */
import { type ServerHandle, post } from "./server.js";

export const dayMs = 86_400_000;
export const hourMs = 3_600_000;

export function isoTime(timeMs: number): string {
  return new Date(timeMs).toISOString();
}

export function isoDay(timeMs: number): string {
  return new Date(timeMs).toISOString().slice(0, 10);
}

export interface TrendFilter {
  property: string;
  op: string;
  value?: string;
}

export interface TrendRequest {
  event: string;
  dateFrom: string;
  dateTo: string;
  groupBy?: "hour" | "day" | "week" | "month";
  math?: "total" | "unique";
  filters?: TrendFilter[];
}

/** Runs a trend query and returns bucket date → count; throws on anything but 200. */
export async function trend(server: Pick<ServerHandle, "queryUrl" | "token">, request: TrendRequest): Promise<Map<string, number>> {
  const response = await post(`${server.queryUrl}/api/v1/query/trend`, request, { token: server.token });
  if (response.status !== 200) throw new Error(`trend ${JSON.stringify(request)} answered ${response.status} ${response.text.slice(0, 300)}`);
  const counts = new Map<string, number>();
  for (const point of response.body.data as Array<{ date: string; count: number }>) counts.set(point.date, point.count);
  return counts;
}

export function sumCounts(counts: Map<string, number>): number {
  let total = 0;
  for (const count of counts.values()) total += count;
  return total;
}

/** The bucket label of an hour, as the trend query prints it (`YYYY-MM-DD HH:00:00`). */
export function hourLabel(timeMs: number): string {
  const iso = new Date(timeMs - (timeMs % hourMs)).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 13)}:00:00`;
}

export type BatchOutcome =
  | { kind: "acknowledged"; accepted: number }
  /** Refused with a status: nothing or everything of it may be stored (a 503 stores nothing, a 500 is unknown). */
  | { kind: "refused"; status: number; text: string }
  /** No answer: the connection failed (the server died). */
  | { kind: "unanswered"; error: string };

/** Sends one batch and classifies the outcome; never throws. */
export async function sendBatch(ingestUrl: string, apiKey: string, events: object[], timeoutMs = 15_000): Promise<BatchOutcome> {
  try {
    const response = await fetch(`${ingestUrl}/ingest/batch`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ apiKey, events }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await response.text();
    if (response.status !== 200) return { kind: "refused", status: response.status, text };
    const body = JSON.parse(text) as { accepted?: number };
    return { kind: "acknowledged", accepted: body.accepted ?? -1 };
  } catch (error) {
    return { kind: "unanswered", error: String(error) };
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
