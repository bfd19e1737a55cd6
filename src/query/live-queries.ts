/**
 * Live queries: a subscribed query re-runs when its workspace stores new rows
 * and its answer is pushed to the subscriber. It sits beside the query
 * service, which does the work; the transport (a WebSocket, http/live-socket.ts)
 * is a sink it writes text to.
 *
 * Each subscription is a small state machine. A commit that stores rows in its
 * workspace marks it changed; a changed subscription runs as soon as its last
 * run is liveRefreshIntervalMs old, so a stream of ingests costs one query per
 * interval, not one per event. A run starts only while the sink can take a
 * message: a slow client's updates are skipped, the subscription stays
 * changed, and the sink's drain runs it once, with the latest numbers.
 */
import { limits } from "../config/limits.js";
import type { ServiceError, ServiceReply } from "../errors.js";
import { log } from "../log.js";
import type { Store } from "../storage/store.js";
import type { QueryKind } from "./schemas.js";

/** What LiveQueries needs of the query service. */
export interface QueryRunner {
  run(kind: QueryKind, workspaceId: string, bytes: Uint8Array): Promise<ServiceReply>;
}

/** One subscriber's connection, as the transport exposes it. */
export interface LiveSink {
  /** The workspace its credential reads; undefined once the credential is revoked. */
  workspaceId(): string | undefined;
  /** False while the connection holds more unsent bytes than it may: runs wait for its drain. */
  canSend(): boolean;
  /** Sends one text message; false when the connection dropped it (back-pressure), so it is sent again after the drain. */
  send(message: string): boolean;
  /** Ends the connection because its credential no longer reads the workspace. */
  revoked(): void;
}

/**
 * idle: nothing to do; waiting: changed, its timer runs until the interval has
 * passed; blocked: changed, waiting for the sink to drain; running: a query is
 * out (a change meanwhile sets `changed` and runs it again afterwards).
 */
type SubscriptionState = "idle" | "waiting" | "blocked" | "running";

interface Subscription {
  readonly id: string;
  readonly kind: QueryKind;
  readonly body: Uint8Array;
  readonly workspaceId: string;
  readonly sink: LiveSink;
  readonly owner: string;
  state: SubscriptionState;
  changed: boolean;
  /** Whether an answer was ever sent: a first answer that is an error ends the subscription (an invalid query). */
  answered: boolean;
  /** The last answer the sink took: the same numbers again (events outside the query, a cached retention) are not sent. */
  lastSentBody: string | undefined;
  ended: boolean;
  lastRunAtMs: number;
  timer: NodeJS.Timeout | undefined;
}

export type SubscribeOutcome = { ok: true } | { ok: false; error: ServiceError };

export function answerMessage(id: string, body: string): string {
  return `{"type":"answer","id":${JSON.stringify(id)},"answer":${body}}`;
}

/** SPEC §1's error shape, with the message's type and the subscription it concerns (when one). */
export function liveErrorMessage(id: string | undefined, error: ServiceError): string {
  return JSON.stringify({ type: "error", ...(id === undefined ? {} : { id }), ok: false, error: { code: error.code, message: error.message } });
}

export class LiveQueries {
  private readonly bySink = new Map<LiveSink, Map<string, Subscription>>();
  private readonly byWorkspace = new Map<string, Set<Subscription>>();
  /** Subscriptions per owner (an access token), over all its sinks. */
  private readonly ownerCounts = new Map<string, number>();

  constructor(
    private readonly queries: QueryRunner,
    store: Pick<Store, "onRowsStored">,
  ) {
    store.onRowsStored((workspaceId) => this.rowsStored(workspaceId));
  }

  /** Starts a subscription and runs it at once; its first answer (or error) goes to the sink. */
  subscribe(sink: LiveSink, owner: string, workspaceId: string, id: string, kind: QueryKind, body: Uint8Array): SubscribeOutcome {
    let subscriptions = this.bySink.get(sink);
    if (subscriptions?.has(id)) return { ok: false, error: { code: "invalid_request", message: `id: ${JSON.stringify(id)} is already subscribed on this socket` } };
    const ownerCount = this.ownerCounts.get(owner) ?? 0;
    if (ownerCount >= limits.liveSubscriptionsPerTokenMax) {
      const message = `this token holds ${ownerCount} live subscriptions, the most it may (EVENTIDE_LIVE_SUBSCRIPTIONS_PER_TOKEN_MAX); unsubscribe one first`;
      return { ok: false, error: { code: "rate_limited", message } };
    }
    if (subscriptions === undefined) this.bySink.set(sink, (subscriptions = new Map()));
    const subscription: Subscription = { id, kind, body, workspaceId, sink, owner, state: "idle", changed: true, answered: false, lastSentBody: undefined, ended: false, lastRunAtMs: -Infinity, timer: undefined };
    subscriptions.set(id, subscription);
    let workspaceSubscriptions = this.byWorkspace.get(workspaceId);
    if (workspaceSubscriptions === undefined) this.byWorkspace.set(workspaceId, (workspaceSubscriptions = new Set()));
    workspaceSubscriptions.add(subscription);
    this.ownerCounts.set(owner, ownerCount + 1);
    this.schedule(subscription);
    return { ok: true };
  }

  /** Ends one subscription; false when the sink has none by that id. */
  unsubscribe(sink: LiveSink, id: string): boolean {
    const subscription = this.bySink.get(sink)?.get(id);
    if (subscription === undefined) return false;
    this.end(subscription);
    return true;
  }

  /** Ends every subscription of a sink (its connection closed). */
  closeSink(sink: LiveSink): void {
    const subscriptions = this.bySink.get(sink);
    if (subscriptions === undefined) return;
    for (const subscription of [...subscriptions.values()]) this.end(subscription);
  }

  /** The sink can take messages again: the subscriptions it held back run now. */
  drained(sink: LiveSink): void {
    const subscriptions = this.bySink.get(sink);
    if (subscriptions === undefined) return;
    for (const subscription of subscriptions.values()) if (subscription.state === "blocked") this.schedule(subscription);
  }

  private rowsStored(workspaceId: string): void {
    const subscriptions = this.byWorkspace.get(workspaceId);
    if (subscriptions === undefined) return;
    for (const subscription of subscriptions) {
      subscription.changed = true;
      if (subscription.state === "idle") this.schedule(subscription);
    }
  }

  private end(subscription: Subscription): void {
    subscription.ended = true;
    clearTimeout(subscription.timer);
    const subscriptions = this.bySink.get(subscription.sink)!;
    subscriptions.delete(subscription.id);
    if (subscriptions.size === 0) this.bySink.delete(subscription.sink);
    const workspaceSubscriptions = this.byWorkspace.get(subscription.workspaceId)!;
    workspaceSubscriptions.delete(subscription);
    if (workspaceSubscriptions.size === 0) this.byWorkspace.delete(subscription.workspaceId);
    const ownerCount = this.ownerCounts.get(subscription.owner)! - 1;
    if (ownerCount === 0) this.ownerCounts.delete(subscription.owner);
    else this.ownerCounts.set(subscription.owner, ownerCount);
  }

  /** Runs a changed subscription now, or when its interval has passed, or when its sink drains. */
  private schedule(subscription: Subscription): void {
    if (subscription.ended || !subscription.changed || subscription.state === "running" || subscription.state === "waiting") return;
    if (!subscription.sink.canSend()) {
      subscription.state = "blocked";
      return;
    }
    // setImmediate even when due: a commit calls here before its ingest request is answered, and the answer goes first.
    const delayMs = Math.max(0, subscription.lastRunAtMs + limits.liveRefreshIntervalMs - Date.now());
    subscription.state = "waiting";
    const run = () => {
      subscription.timer = undefined;
      subscription.state = "idle";
      this.run(subscription);
    };
    if (delayMs === 0) setImmediate(run);
    else subscription.timer = setTimeout(run, delayMs);
  }

  private run(subscription: Subscription): void {
    if (subscription.ended) return;
    if (!subscription.sink.canSend()) {
      subscription.state = "blocked";
      return;
    }
    if (subscription.sink.workspaceId() !== subscription.workspaceId) return subscription.sink.revoked();
    subscription.state = "running";
    subscription.changed = false;
    subscription.lastRunAtMs = Date.now();
    this.queries.run(subscription.kind, subscription.workspaceId, subscription.body).then(
      (reply) => this.deliver(subscription, reply),
      (error: unknown) => {
        log.error({ err: error, kind: subscription.kind }, "live query failed");
        this.deliver(subscription, { ok: false, error: { code: "internal_error", message: "internal error" } });
      },
    );
  }

  private deliver(subscription: Subscription, reply: ServiceReply): void {
    subscription.state = "idle";
    if (subscription.ended) return;
    const firstAnswer = !subscription.answered;
    subscription.answered = true;
    // An invalid query is refused once and forgotten; a later failure (overloaded, a time limit) keeps the subscription.
    if (!reply.ok && firstAnswer) this.end(subscription);
    const body = reply.ok ? reply.body : undefined;
    if (body === undefined || body !== subscription.lastSentBody) {
      const message = reply.ok ? answerMessage(subscription.id, reply.body) : liveErrorMessage(subscription.id, reply.error);
      if (subscription.sink.send(message)) subscription.lastSentBody = body;
      else subscription.changed = true;
    }
    this.schedule(subscription);
  }
}
