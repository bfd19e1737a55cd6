/**
 * GET /api/v1/live on the query listener: a WebSocket over which a client
 * subscribes queries and receives their answers again whenever its workspace
 * stores new events (query/live-queries.ts decides when; this module only
 * speaks the protocol). The dashboard's live mode uses it.
 *
 * The access token travels in the first message, never in the URL, so it
 * stays out of access logs and browser history; a socket that has not sent it
 * within liveAuthTimeoutMs is closed. No cookie or other ambient credential
 * authenticates a socket, so a foreign page that opens one gains nothing.
 *
 * Client → server, one JSON object per text message:
 *   {"type":"auth","token":"et_…"}
 *   {"type":"subscribe","id":"a","kind":"trend","query":{…the body of POST /api/v1/query/trend…}}
 *   {"type":"unsubscribe","id":"a"}
 * Server → client:
 *   {"type":"authenticated"}
 *   {"type":"answer","id":"a","answer":{…the 200 body of the query…}}
 *   {"type":"unsubscribed","id":"a"}
 *   {"type":"error","id":"a","ok":false,"error":{"code":"…","message":"…"}} (SPEC §1's codes; id when it concerns one)
 * An unauthorized socket gets its error and is closed with 1008.
 */
import uWS from "uWebSockets.js";
import type { HttpResponse, TemplatedApp, WebSocket } from "uWebSockets.js";
import type { CredentialStore } from "../auth/credential-store.js";
import { limits } from "../config/limits.js";
import { errorBody, errorStatus, type ServiceError } from "../errors.js";
import { parseBody } from "../json/body.js";
import { log } from "../log.js";
import { countRequest } from "../metrics.js";
import { liveErrorMessage, type LiveQueries, type LiveSink } from "../query/live-queries.js";
import type { QueryKind } from "../query/schemas.js";
import { routes } from "./routes.js";

const livePath = routes.find((route) => route.name === "live")!.path;

const queryKinds: readonly QueryKind[] = ["trend", "funnel", "retention"];
/** uWS's send status when the message was dropped: the socket held more than maxBackpressure. */
const sendDropped = 2;
/** Close codes (RFC 6455 §7.4.1): policy violation (a refused credential), going away (the server stops). */
const closePolicyViolation = 1008;
const closeGoingAway = 1001;

/** A live socket's connection state: waiting for its token, then reading a workspace, then closed. */
type SocketPhase = { kind: "unauthenticated"; timer: NodeJS.Timeout } | { kind: "authenticated"; token: string } | { kind: "closed" };

class SocketSink implements LiveSink {
  phase: SocketPhase;

  constructor(
    private readonly socket: WebSocket<SocketData>,
    private readonly credentials: CredentialStore,
  ) {
    const timer = setTimeout(() => this.refuse({ code: "unauthorized", message: `no auth message within ${limits.liveAuthTimeoutMs} ms of opening` }), limits.liveAuthTimeoutMs);
    this.phase = { kind: "unauthenticated", timer };
  }

  workspaceId(): string | undefined {
    return this.phase.kind === "authenticated" ? this.credentials.workspaceIdForToken(this.phase.token) : undefined;
  }

  canSend(): boolean {
    return this.phase.kind !== "closed" && this.socket.getBufferedAmount() < limits.liveSocketBufferedBytesMax;
  }

  send(message: string): boolean {
    if (this.phase.kind === "closed") return true;
    let status = 0;
    // Called from a resolved query, outside uWS's own callbacks: cork makes it one write.
    this.socket.cork(() => (status = this.socket.send(message, false, false)));
    return status !== sendDropped;
  }

  revoked(): void {
    this.refuse({ code: "unauthorized", message: "the access token was revoked" });
  }

  /** Sends the error and closes the socket (its close handler ends its subscriptions). */
  refuse(error: ServiceError): void {
    if (this.phase.kind === "closed") return;
    this.send(liveErrorMessage(undefined, error));
    this.socket.end(closePolicyViolation, error.code);
  }

  closed(): void {
    if (this.phase.kind === "unauthenticated") clearTimeout(this.phase.timer);
    this.phase = { kind: "closed" };
  }
}

interface SocketData {
  sink: SocketSink | undefined;
}

export interface LiveSocketDependencies {
  credentials: CredentialStore;
  live: LiveQueries;
  /** Why a new socket is refused right now (starting, stopping), or undefined. */
  refusal(): ServiceError | undefined;
}

export interface LiveSocketRoute {
  /** Closes every live socket (the server stops). */
  closeAll(): void;
}

function refuseUpgrade(res: HttpResponse, error: ServiceError, startedAtMs: number): void {
  const status = errorStatus[error.code];
  countRequest("live", status.slice(0, 3), startedAtMs);
  // The request line of server.ts's refusals; an upgrade carries no token to keep out of it.
  log.info({ method: "GET", path: livePath, route: "live", status: Number(status.slice(0, 3)), code: error.code, error: error.message }, "request");
  res.cork(() => {
    res.writeStatus(status);
    res.writeHeader("Content-Type", "application/json");
    if (error.code === "overloaded" || error.code === "unavailable") res.writeHeader("Retry-After", String(limits.retryAfterSeconds));
    res.end(errorBody(error), true);
  });
}

/** A client message, checked; a ServiceError when it is not one the protocol knows. */
type ClientMessage = { type: "auth"; token: string } | { type: "subscribe"; id: string; kind: QueryKind; query: unknown } | { type: "unsubscribe"; id: string };

function readMessage(bytes: Uint8Array): ClientMessage | ServiceError {
  const parsed = parseBody(bytes, false, limits.liveMessageBytesMax);
  if (!("value" in parsed)) return parsed;
  const message = parsed.value as Record<string, unknown>;
  const invalid = (text: string): ServiceError => ({ code: "invalid_request", message: text });
  const idError = (id: unknown) =>
    typeof id !== "string" || id.length === 0 || id.length > limits.liveSubscriptionIdLengthMax ? invalid(`id: expected a string of 1–${limits.liveSubscriptionIdLengthMax} characters`) : undefined;
  switch (message.type) {
    case "auth":
      return typeof message.token === "string" ? { type: "auth", token: message.token } : invalid("token: expected a string");
    case "subscribe": {
      const { id, kind, query } = message;
      if (!queryKinds.includes(kind as QueryKind)) return invalid(`kind: expected one of ${queryKinds.join(", ")}`);
      return idError(id) ?? { type: "subscribe", id: id as string, kind: kind as QueryKind, query };
    }
    case "unsubscribe":
      return idError(message.id) ?? { type: "unsubscribe", id: message.id as string };
    default:
      return invalid("type: expected one of auth, subscribe, unsubscribe");
  }
}

export function attachLiveSocket(app: TemplatedApp, { credentials, live, refusal }: LiveSocketDependencies): LiveSocketRoute {
  const sockets = new Set<WebSocket<SocketData>>();

  const onMessage = (sink: SocketSink, bytes: Uint8Array) => {
    const message = readMessage(bytes);
    if ("code" in message) {
      if (sink.phase.kind === "unauthenticated") return sink.refuse(message);
      return void sink.send(liveErrorMessage(undefined, message));
    }
    if (sink.phase.kind === "unauthenticated") {
      if (message.type !== "auth") return sink.refuse({ code: "unauthorized", message: "the first message must be {\"type\":\"auth\",\"token\":…}" });
      if (credentials.stale) return sink.refuse({ code: "unavailable", message: "credentials cannot be checked right now (the registry is unreadable), retry later" });
      if (credentials.workspaceIdForToken(message.token) === undefined) return sink.refuse({ code: "unauthorized", message: "unknown or revoked access token" });
      clearTimeout(sink.phase.timer);
      sink.phase = { kind: "authenticated", token: message.token };
      return void sink.send(`{"type":"authenticated"}`);
    }
    if (sink.phase.kind !== "authenticated") return;
    const workspaceId = sink.workspaceId();
    if (workspaceId === undefined) return sink.revoked();
    switch (message.type) {
      case "auth":
        return void sink.send(liveErrorMessage(undefined, { code: "invalid_request", message: "type: this socket is already authenticated" }));
      case "subscribe": {
        // The query's own bytes, as POST would carry them: the query service parses and validates them exactly as it does a request body.
        const body = Buffer.from(JSON.stringify(message.query ?? null) ?? "null", "utf8");
        const outcome = live.subscribe(sink, sink.phase.token, workspaceId, message.id, message.kind, body);
        if (!outcome.ok) sink.send(liveErrorMessage(message.id, outcome.error));
        return;
      }
      case "unsubscribe":
        if (live.unsubscribe(sink, message.id)) return void sink.send(`{"type":"unsubscribed","id":${JSON.stringify(message.id)}}`);
        return void sink.send(liveErrorMessage(message.id, { code: "invalid_request", message: `id: no subscription ${JSON.stringify(message.id)} on this socket` }));
    }
  };

  app.ws<SocketData>(livePath, {
    compression: uWS.DISABLED,
    maxPayloadLength: limits.liveMessageBytesMax,
    // Sends past this are dropped by uWS (the socket is kept); LiveQueries stops before it (canSend) and sends the latest answer after the drain.
    maxBackpressure: limits.liveSocketBufferedBytesMax,
    // uWS's own defaults, stated: a socket silent for 2 minutes is closed, and pings keep a quiet subscriber from being silent.
    idleTimeout: 120,
    sendPingsAutomatically: true,
    upgrade: (res, req, context) => {
      const startedAtMs = performance.now();
      const key = req.getHeader("sec-websocket-key");
      const extensions = req.getHeader("sec-websocket-extensions");
      const refused = refusal();
      if (refused !== undefined) return refuseUpgrade(res, refused, startedAtMs);
      if (sockets.size >= limits.liveSocketsMax) {
        return refuseUpgrade(res, { code: "overloaded", message: `${sockets.size} live sockets are open, the most the server keeps (EVENTIDE_LIVE_SOCKETS_MAX); retry later` }, startedAtMs);
      }
      countRequest("live", "101", startedAtMs);
      // No subprotocol is chosen: the protocol is this module's, named by its path.
      res.upgrade<SocketData>({ sink: undefined }, key, "", extensions, context);
    },
    open: (socket) => {
      sockets.add(socket);
      socket.getUserData().sink = new SocketSink(socket, credentials);
    },
    message: (socket, message) => {
      const sink = socket.getUserData().sink!;
      // The message's memory is uWS's and valid during this callback only: it is read before returning.
      onMessage(sink, new Uint8Array(message));
    },
    drain: (socket) => {
      const sink = socket.getUserData().sink!;
      if (sink.canSend()) live.drained(sink);
    },
    close: (socket) => {
      sockets.delete(socket);
      const sink = socket.getUserData().sink!;
      sink.closed();
      live.closeSink(sink);
    },
  });

  return {
    closeAll() {
      for (const socket of [...sockets]) socket.end(closeGoingAway, "server stopping");
      log.debug({ sockets: sockets.size }, "live sockets closed");
    },
  };
}
