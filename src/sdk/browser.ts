/**
 * The browser snippet, served by the ingest listener at /sdk.js: an ES module
 * with no dependencies, at the very start of an event's path (page → this
 * queue → POST /ingest/batch). Every event gets a uuid when it is captured, so
 * each re-send (a retry, the unload path, a reload that finds the queue in
 * localStorage) is acknowledged by the server without being stored twice.
 * Bounds are options with defaults here: this file runs in users' pages, not
 * in the server, and cannot read the server's limits.
 */

// The project compiles without the DOM library; the few browser objects used are typed here.
interface BrowserStorage {
  readonly length: number;
  key(index: number): string | null;
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}
interface BrowserResponse {
  status: number;
  headers: { get(name: string): string | null };
  json(): Promise<any>;
}
interface BrowserGlobals {
  location: { href: string; pathname: string };
  document: { referrer: string; visibilityState: string; addEventListener(type: string, listener: () => void): void };
  screen?: { width: number; height: number };
  navigator: { sendBeacon?(url: string, body: string): boolean };
  localStorage?: BrowserStorage;
  crypto: { randomUUID?(): string; getRandomValues(bytes: Uint8Array): Uint8Array };
  Request?: { prototype: object };
  addEventListener(type: string, listener: () => void): void;
  fetch(url: string, init: { method: "POST"; body: string; keepalive?: boolean }): Promise<BrowserResponse>;
  setTimeout(callback: () => void, delayMs: number): number;
  clearTimeout(handle: number): void;
  console: { warn(...values: unknown[]): void };
}

export interface EventideOptions {
  apiKey: string;
  /** The ingest URL, e.g. `https://ingest.example.com`. */
  host: string;
  /** Capture a `$pageview` when init runs (default true). */
  capturePageview?: boolean;
  /** Send as soon as this many events wait (default 20). */
  flushAt?: number;
  /** …or this long after the first of them was captured (default 1 000 ms). */
  flushIntervalMs?: number;
  /** Events kept while they cannot be sent; more are dropped and counted in stats().dropped (default 1 000). */
  queueEventsMax?: number;
  /** Keep unsent events in localStorage so a reload or a crash of the tab does not lose them (default "localStorage"). */
  persistence?: "localStorage" | "memory";
  /** The longest wait between two retries (default 30 000 ms). */
  retryDelayMaxMs?: number;
}

export interface EventideStats {
  /** Captured and not yet acknowledged. */
  queued: number;
  /** Acknowledged by the server. */
  accepted: number;
  /** Refused by the server (invalid event, unknown API key): they will never be stored. */
  refused: number;
  /** Not queued because the queue was full, or too old when found in localStorage. */
  dropped: number;
  /** Requests sent again after a network error, 429, 5xx. */
  retries: number;
}

interface QueuedEvent {
  event: string;
  distinctId: string;
  properties: Record<string, unknown>;
  timestamp: string;
  uuid: string;
}

export const libVersion = "0.1.0";
const queueKeyPrefix = "eventide:queue:";
const distinctIdKey = "eventide:distinct_id";
/** keepalive requests (fetch or sendBeacon) may have 64 KiB of bodies in flight per page in all; leave room for the envelope. */
const unloadBytesMax = 60 * 1024;
/** The server names at most 100 refused events per answer: smaller batches have every refusal named. */
const batchEventsMax = 100;
/** The server remembers a uuid for 7 days: an event re-sent later could be stored twice, so older persisted events are dropped (and counted). */
const persistedAgeMaxMs = 6 * 86_400_000;
const retryDelayBaseMs = 500;

export function createEventide() {
  const browser = globalThis as unknown as BrowserGlobals;
  let options: Required<EventideOptions> | undefined;
  let endpoint = "";
  let distinctId = "";
  let queue: QueuedEvent[] = [];
  const counters = { accepted: 0, refused: 0, dropped: 0, retries: 0 };
  let sending = false;
  let attempt = 0;
  let timer: number | undefined;
  let storageWrite = false;
  /** Events the unload path sent since the page was last visible: a pagehide after visibilitychange does not send them again. */
  let unloadSent = new Set<string>();
  const tabKey = queueKeyPrefix + uuid();

  function uuid(): string {
    if (browser.crypto.randomUUID) return browser.crypto.randomUUID();
    // randomUUID exists only in secure contexts (https); getRandomValues everywhere.
    const bytes = browser.crypto.getRandomValues(new Uint8Array(16));
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }

  function storage(): BrowserStorage | undefined {
    try {
      return options?.persistence === "localStorage" ? browser.localStorage : undefined;
    } catch {
      return undefined; // storage blocked (privacy settings, sandboxed frame)
    }
  }

  function store(key: string, value: string | undefined): void {
    try {
      const target = storage();
      if (value === undefined) target?.removeItem(key);
      else target?.setItem(key, value);
    } catch {
      // Quota exceeded or storage blocked: the in-memory queue still holds the events.
    }
  }

  /** Writes the queue once per task, after the last change of it: a page cannot unload between a change and its write. */
  function persistQueue(): void {
    if (storageWrite) return;
    storageWrite = true;
    queueMicrotask(() => {
      storageWrite = false;
      store(tabKey, queue.length === 0 ? undefined : JSON.stringify(queue));
    });
  }

  /** Takes over the queues other tabs left behind (closed, crashed); a live tab's events may then go twice, which their uuids make harmless. */
  function adoptPersistedQueues(): void {
    const source = storage();
    if (source === undefined) return;
    const known = new Set(queue.map((event) => event.uuid));
    const keys: string[] = [];
    for (let index = 0; index < source.length; index++) {
      const key = source.key(index);
      if (key !== null && key.startsWith(queueKeyPrefix) && key !== tabKey) keys.push(key);
    }
    for (const key of keys) {
      let events: QueuedEvent[] = [];
      try {
        events = JSON.parse(source.getItem(key) ?? "[]");
      } catch {
        // A damaged entry holds nothing that can be sent.
      }
      store(key, undefined);
      for (const event of events) {
        if (known.has(event.uuid)) continue;
        known.add(event.uuid);
        if (Date.now() - Date.parse(event.timestamp) > persistedAgeMaxMs || queue.length >= options!.queueEventsMax) counters.dropped++;
        else queue.push(event);
      }
    }
    persistQueue();
  }

  function schedule(delayMs: number): void {
    if (timer !== undefined) browser.clearTimeout(timer);
    timer = browser.setTimeout(() => {
      timer = undefined;
      void flush();
    }, delayMs);
  }

  /** Removes acknowledged or refused events; an event the unload path settled already is not counted twice. */
  function settle(uuids: Set<string>, refused: Set<string>): void {
    const before = queue.length;
    queue = queue.filter((event) => {
      if (!uuids.has(event.uuid)) return true;
      if (refused.has(event.uuid)) counters.refused++;
      else counters.accepted++;
      return false;
    });
    if (queue.length !== before) persistQueue();
  }

  /** Applies an answer to the events it was for; returns the wait before a retry, or undefined when the events are settled. */
  async function answer(events: QueuedEvent[], response: BrowserResponse): Promise<number | undefined> {
    const uuids = new Set(events.map((event) => event.uuid));
    if (response.status === 200) {
      const body = await response.json();
      const refused = new Set<string>((body.errors ?? []).map((error: { index: number }) => events[error.index].uuid));
      settle(uuids, refused);
      return undefined;
    }
    if (response.status === 408 || response.status === 429 || response.status >= 500) {
      const retryAfterSeconds = Number(response.headers.get("retry-after"));
      return Number.isFinite(retryAfterSeconds) ? retryAfterSeconds * 1000 : 0;
    }
    // 400, 401, 413: sending these again would be refused again.
    browser.console.warn(`eventide: ${events.length} events refused with status ${response.status}`);
    settle(uuids, uuids);
    return undefined;
  }

  async function flush(): Promise<void> {
    if (options === undefined || sending || queue.length === 0) return;
    sending = true;
    const events = queue.slice(0, batchEventsMax);
    let retryAfterMs: number | undefined;
    try {
      const response = await browser.fetch(endpoint, { method: "POST", body: envelope(events) });
      retryAfterMs = await answer(events, response);
    } catch {
      retryAfterMs = 0; // offline, DNS, connection reset: the events stay queued
    }
    sending = false;
    if (retryAfterMs === undefined) {
      attempt = 0;
      if (queue.length >= options.flushAt) void flush();
      else if (queue.length > 0) schedule(options.flushIntervalMs);
      return;
    }
    counters.retries++;
    // Exponential backoff with full jitter, but never sooner than the server asked.
    const backoffMs = Math.min(options.retryDelayMaxMs, retryDelayBaseMs * 2 ** attempt++) * Math.random();
    schedule(Math.max(retryAfterMs, backoffMs));
  }

  function envelope(events: QueuedEvent[]): string {
    // A string body goes as text/plain: a simple CORS request, with no preflight; the server reads any content type.
    return JSON.stringify({ apiKey: options!.apiKey, events });
  }

  /**
   * The page is going away (or may be frozen): everything unacknowledged goes
   * in keepalive requests, which outlive the page, up to their 64 KiB budget;
   * what does not fit stays in localStorage for the next page. fetch with
   * keepalive still reports its answer when the page lives on; sendBeacon
   * (browsers without keepalive) never does, so its events stay queued and
   * are sent again later, acknowledged then without being stored twice.
   */
  function unload(): void {
    if (options === undefined) return;
    const keepalive = browser.Request !== undefined && "keepalive" in browser.Request.prototype;
    const envelopeBytes = options.apiKey.length + 40;
    let budgetBytes = unloadBytesMax;
    let chunk: QueuedEvent[] = [];
    let chunkBytes = envelopeBytes;
    const send = () => {
      if (chunk.length === 0) return;
      const events = chunk;
      const body = envelope(events);
      for (const event of events) unloadSent.add(event.uuid);
      if (keepalive) browser.fetch(endpoint, { method: "POST", body, keepalive: true }).then((response) => answer(events, response)).catch(() => undefined);
      else browser.navigator.sendBeacon?.(endpoint, body);
      budgetBytes -= chunkBytes;
      chunk = [];
      chunkBytes = envelopeBytes;
    };
    for (const event of queue) {
      if (unloadSent.has(event.uuid)) continue;
      const eventBytes = new Blob([JSON.stringify(event)]).size + 1;
      if (chunk.length === batchEventsMax || chunkBytes + eventBytes > budgetBytes) send();
      if (chunkBytes + eventBytes > budgetBytes) break;
      chunk.push(event);
      chunkBytes += eventBytes;
    }
    send();
    store(tabKey, queue.length === 0 ? undefined : JSON.stringify(queue));
  }

  function standardProperties(): Record<string, unknown> {
    return {
      $url: browser.location.href,
      $path: browser.location.pathname,
      $referrer: browser.document.referrer || "$direct",
      $screen_width: browser.screen?.width,
      $screen_height: browser.screen?.height,
      $lib: "eventide-js",
      $lib_version: libVersion,
    };
  }

  function capture(event: string, properties: Record<string, unknown> = {}): void {
    if (options === undefined) return browser.console.warn("eventide: capture before init is ignored");
    if (queue.length >= options.queueEventsMax) {
      counters.dropped++;
      return;
    }
    queue.push({ event, distinctId, properties: { ...standardProperties(), ...properties }, timestamp: new Date().toISOString(), uuid: uuid() });
    persistQueue();
    // A batch on its way, or a backoff running, sends the rest when it ends.
    if (sending || attempt > 0) return;
    if (queue.length >= options.flushAt) void flush();
    else if (timer === undefined) schedule(options.flushIntervalMs);
  }

  return {
    init(given: EventideOptions): void {
      if (options !== undefined) return browser.console.warn("eventide: init called twice; the first options stay");
      options = {
        capturePageview: true,
        flushAt: 20,
        flushIntervalMs: 1000,
        queueEventsMax: 1000,
        persistence: "localStorage",
        retryDelayMaxMs: 30_000,
        ...given,
      };
      endpoint = `${options.host.replace(/\/+$/, "")}/ingest/batch`;
      let stored: string | null | undefined;
      try {
        stored = storage()?.getItem(distinctIdKey);
      } catch {
        stored = undefined;
      }
      distinctId = stored || uuid();
      store(distinctIdKey, distinctId);
      adoptPersistedQueues();
      browser.document.addEventListener("visibilitychange", () => {
        if (browser.document.visibilityState === "hidden") unload();
        else unloadSent = new Set();
      });
      browser.addEventListener("pagehide", unload);
      browser.addEventListener("online", () => {
        attempt = 0;
        void flush();
      });
      if (options.capturePageview) capture("$pageview");
      if (queue.length > 0) schedule(0);
    },

    capture,

    /** Later events carry this id; earlier ones keep the anonymous id they were captured with (no alias is made). */
    identify(newDistinctId: string): void {
      distinctId = String(newDistinctId);
      store(distinctIdKey, distinctId);
    },

    /** Back to a new anonymous id (on logout). */
    reset(): void {
      distinctId = uuid();
      store(distinctIdKey, distinctId);
    },

    distinctId: (): string => distinctId,

    /** Sends what is queued now, without waiting for the batch to fill or the interval to pass. */
    flush,

    stats: (): EventideStats => ({ queued: queue.length, ...counters }),
  };
}

export const eventide = createEventide();
export default eventide;
