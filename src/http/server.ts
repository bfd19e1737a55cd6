/**
 * The only module that imports uWebSockets.js: two listeners (query API and
 * ingest), routing with 404/405, bounded bodies, CORS on ingest, and one
 * finish path per request that cannot run twice.
 *
 * uWS discipline (STYLE rule 5): everything needed from `req` is read
 * synchronously in the handler; `onAborted` is attached before any await;
 * answers are written inside `res.cork` and only if the client is still there.
 */
import uWS from "uWebSockets.js";
import type { HttpResponse, HttpRequest, RecognizedString, TemplatedApp, us_listen_socket } from "uWebSockets.js";
import { limits } from "../config/limits.js";
import type { Config } from "../config/config.js";
import type { CredentialStore } from "../auth/credential-store.js";
import type { IngestReply, IngestService } from "../ingest/ingest-service.js";
import type { QueryKind, QueryService } from "../query/query-service.js";
import { errorBody, errorStatus, serviceError, type ServiceError } from "../errors.js";
import { bodyFormatOf } from "../json/msgpack-body.js";
import { loadStaticFiles, type StaticAsset, type StaticFiles } from "./static-files.js";
import { loadSdkAsset } from "./sdk-asset.js";
import { guardConnections } from "./connection-guard.js";
import { log } from "../log.js";
import { countRequest, registry } from "../metrics.js";
import { openApiDocument } from "./openapi.js";
import { routesOf, unknownRouteName, type Listener, type RouteName, type RouteSpec } from "./routes.js";
import { attachLiveSocket } from "./live-socket.js";
import type { LiveQueries } from "../query/live-queries.js";

interface RequestState {
  aborted: boolean;
  done: boolean;
  /** The route's name (metrics label), or unknownRouteName. */
  route: string;
  method: string;
  path: string;
  /** performance.now() at arrival. */
  startedAtMs: number;
  /** The listener's headers on every answer (CORS on ingest). */
  headers: Header[];
}

type Handler = (res: HttpResponse, req: HttpRequest, state: RequestState) => void;
type Route = RouteSpec & { handler: Handler };

/** Starting: listeners bound, workspace not yet announced. Stopping: a signal arrived. */
type Phase = "starting" | "ready" | "stopping";

/**
 * A header or status line as uWS takes it. The constant ones are encoded once:
 * uWS reads a Uint8Array in place but converts a JS string to UTF-8 on every
 * call, several times per answer on the single-event path.
 */
type Header = [RecognizedString, RecognizedString];
const utf8 = (text: string): Uint8Array => new Uint8Array(Buffer.from(text, "utf8"));
const utf8Header = (name: string, value: string): Header => [utf8(name), utf8(value)];

const contentTypeJson = utf8Header("Content-Type", "application/json");
const corsHeaders: Header[] = [utf8Header("Access-Control-Allow-Origin", "*")];
const preflightHeaders: Header[] = [
  utf8Header("Access-Control-Allow-Origin", "*"),
  utf8Header("Access-Control-Allow-Methods", "POST, OPTIONS"),
  utf8Header("Access-Control-Allow-Headers", "content-type, content-encoding"),
  utf8Header("Access-Control-Max-Age", "86400"),
];
/** Status lines, encoded when first sent (a handful: those of the error catalog). */
const statusLines = new Map<string, Uint8Array>();
function statusLine(status: string): Uint8Array {
  let line = statusLines.get(status);
  if (line === undefined) statusLines.set(status, (line = utf8(status)));
  return line;
}

/** Single-event bodies up to this size are read into Node's shared slab (Buffer.allocUnsafe pools below 4 KiB). */
const smallBodyBytesMax = 4095;

/** uWS takes (host, port, options, callback); its typings declare options only without a host. */
type ListenWithOptions = (host: string, port: number, options: number, callback: (socket: us_listen_socket | false) => void) => TemplatedApp;
const listenExclusivePort = 1; // LIBUS_LISTEN_EXCLUSIVE_PORT

function listenExclusive(app: TemplatedApp, host: string, port: number, callback: (socket: us_listen_socket | false) => void): void {
  (app.listen as unknown as ListenWithOptions).call(app, host, port, listenExclusivePort, callback);
}

export interface HttpServer {
  queryUrl: string;
  ingestUrl: string;
  /** From now on /ready answers 200 and the credentialed routes are served. */
  markReady(): void;
  /** Stops accepting, waits for in-flight requests (bounded), refuses what comes on open connections. */
  close(timeoutMs: number): Promise<void>;
}

export interface HttpDependencies {
  config: Config;
  credentials: CredentialStore;
  ingest: IngestService;
  /** The embedded store's query service, or the ClickHouse store's. */
  query: Pick<QueryService, "run" | "listEvents" | "listProperties" | "deleteUser">;
  live: LiveQueries;
}

export async function startHttp({ config, credentials, ingest, query, live }: HttpDependencies): Promise<HttpServer> {
  let inFlight = 0;
  let closing = false;
  let phase: Phase = "starting";
  const drainWaiters: Array<() => void> = [];

  const finishRequest = (state: RequestState) => {
    if (state.done) return false;
    state.done = true;
    inFlight--;
    if (inFlight === 0) for (const waiter of drainWaiters.splice(0)) waiter();
    return true;
  };

  /**
   * One line per answer: debug for every request, info for a refusal (4xx),
   * error for a 5xx. Method, path, route, status and the error's code and
   * message only: never headers, query strings or bodies, where secrets travel.
   */
  let logSecond = 0;
  let linesThisSecond = 0;
  let linesSuppressed = 0;
  const account = (state: RequestState, status: string, error?: ServiceError) => {
    countRequest(state.route, status.slice(0, 3), state.startedAtMs);
    const level = status[0] === "5" ? "error" : status[0] === "4" ? "info" : "debug";
    if (!log.isLevelEnabled(level)) return;
    if (limits.logRequestLinesPerSecondMax > 0) {
      const second = Math.floor(Date.now() / 1000);
      if (second !== logSecond) {
        if (linesSuppressed > 0) log.warn({ suppressed: linesSuppressed }, "request lines suppressed (EVENTIDE_LOG_REQUEST_LINES_PER_SECOND_MAX); metrics count every request");
        logSecond = second;
        linesThisSecond = 0;
        linesSuppressed = 0;
      }
      if (++linesThisSecond > limits.logRequestLinesPerSecondMax) {
        linesSuppressed++;
        return;
      }
    }
    const line = { method: state.method.toUpperCase(), path: state.path, route: state.route, status: Number(status.slice(0, 3)), durationMs: Math.round((performance.now() - state.startedAtMs) * 1000) / 1000, code: error?.code, error: error?.message };
    log[level](line, "request");
  };

  const send = (res: HttpResponse, state: RequestState, status: string, body: RecognizedString, headers: Header[], closeConnection = false, error?: ServiceError) => {
    if (!finishRequest(state) || state.aborted) return;
    account(state, status, error);
    res.cork(() => {
      res.writeStatus(statusLine(status));
      res.writeHeader(contentTypeJson[0], contentTypeJson[1]);
      for (const [name, value] of headers) res.writeHeader(name, value);
      res.end(body, closeConnection || closing);
    });
  };

  const sendError = (res: HttpResponse, state: RequestState, error: ServiceError, headers: Header[], closeConnection = false) => {
    const extra = [...headers];
    if (error.code === "overloaded" || error.code === "unavailable" || error.code === "rate_limited") {
      extra.push(["Retry-After", String(limits.retryAfterSeconds)]);
      // A browser shows a cross-origin script only the safelisted headers, and the snippet's backoff reads this one.
      if (headers === corsHeaders) extra.push(["Access-Control-Expose-Headers", "Retry-After"]);
    }
    if (error.code === "unauthorized" && headers !== corsHeaders) extra.push(["WWW-Authenticate", "Bearer"]);
    send(res, state, errorStatus[error.code], errorBody(error), extra, closeConnection, error);
  };

  const sendReply = (res: HttpResponse, state: RequestState, reply: IngestReply, headers: Header[]) => {
    if (reply.ok) send(res, state, "200 OK", reply.body, headers);
    else sendError(res, state, reply.error, headers);
  };

  const internalError = (res: HttpResponse, state: RequestState, headers: Header[]) => (error: unknown) => {
    log.error({ err: error, route: state.route }, "request failed");
    sendError(res, state, serviceError("internal_error", "internal error"), headers);
  };

  /**
   * Reads a body of at most `maxBytes` into one buffer: refused on
   * Content-Length before a byte is read, else counted while reading; no
   * per-chunk concatenation. The body arrives as the whole of its own
   * ArrayBuffer (it can be transferred), or, when `small` and its declared
   * length is at most smallBodyBytesMax, as a view into a slab Node shares
   * between small Buffers: no ArrayBuffer is made and freed per request.
   */
  const readBody = (
    res: HttpResponse,
    state: RequestState,
    contentLengthHeader: string,
    maxBytes: number,
    headers: Header[],
    onBody: (body: Uint8Array) => void,
    small = false,
    reusedBuffer?: (bytes: number) => Uint8Array | undefined,
  ) => {
    const tooLarge = () => sendError(res, state, serviceError("payload_too_large", `body is larger than ${maxBytes} bytes`), headers, true);
    let declared = -1;
    if (contentLengthHeader !== "") {
      declared = Number(contentLengthHeader);
      if (!Number.isSafeInteger(declared) || declared < 0) {
        sendError(res, state, serviceError("invalid_request", "content-length: not a valid length"), headers, true);
        return;
      }
      if (declared > maxBytes) return tooLarge();
    }
    // allocUnsafe: every byte of [0, length) is written before the body is used.
    let buffer = small && declared >= 0 && declared <= smallBodyBytesMax ? Buffer.allocUnsafe(declared) : ((declared >= 0 ? reusedBuffer?.(declared) : undefined) ?? new Uint8Array(declared >= 0 ? declared : 16 * 1024));
    let length = 0;
    res.onData((chunk, isLast) => {
      if (state.done) return;
      const bytes = new Uint8Array(chunk);
      if (length + bytes.length > buffer.length) {
        if (declared >= 0 || length + bytes.length > maxBytes) return tooLarge();
        let capacity = buffer.length * 2;
        while (capacity < length + bytes.length) capacity *= 2;
        const grown = new Uint8Array(Math.min(capacity, maxBytes));
        grown.set(buffer.subarray(0, length));
        buffer = grown;
      }
      buffer.set(bytes, length);
      length += bytes.length;
      // A short body is cut to its length: a slab slice by a view (Buffer's slice), an ArrayBuffer of its own by a copy.
      if (isLast) onBody(length === buffer.length ? buffer : buffer.slice(0, length));
    });
  };

  const begin = (res: HttpResponse, method: string, path: string, headers: Header[]): RequestState => {
    const state: RequestState = { aborted: false, done: false, route: unknownRouteName, method, path, startedAtMs: performance.now(), headers };
    inFlight++;
    res.onAborted(() => {
      state.aborted = true;
      finishRequest(state);
    });
    return state;
  };

  // ---- ingest listener ----
  const ingestRoute = (shape: "batch" | "single"): Route["handler"] => (res, req, state) => {
    const encoding = req.getHeader("content-encoding").trim().toLowerCase();
    const format = bodyFormatOf(req.getHeader("content-type"));
    const contentLength = req.getHeader("content-length");
    const receivedAtMs = Date.now();
    if (encoding !== "" && encoding !== "gzip" && encoding !== "identity") {
      return sendError(res, state, serviceError("invalid_request", "content-encoding: only gzip is supported"), corsHeaders);
    }
    const gzip = encoding === "gzip";
    const plainMax = shape === "batch" ? limits.batchBodyBytesMax : limits.ingestBodyBytesMax;
    // Compressed bodies are capped a little above the plain limit (incompressible data grows slightly);
    // the exact limit is applied after inflation, in the worker.
    const rawMax = gzip ? plainMax + (plainMax >> 10) + 1024 : plainMax;
    readBody(
      res,
      state,
      contentLength,
      rawMax,
      corsHeaders,
      (body) => {
        if (shape === "single") return ingest.single(body, gzip, receivedAtMs, (reply) => sendReply(res, state, reply, corsHeaders), format);
        ingest.batch(body, gzip, receivedAtMs, format).then((reply) => sendReply(res, state, reply, corsHeaders), internalError(res, state, corsHeaders));
      },
      shape === "single",
      ingest.reusedBodyBuffer,
    );
  };


  // ---- query listener ----
  const authorizedQuery = (
    handle: (res: HttpResponse, state: RequestState, workspaceId: string, body: Uint8Array) => void,
  ): Route["handler"] => (res, req, state) => {
    const authorization = req.getHeader("authorization");
    const contentLength = req.getHeader("content-length");
    readBody(res, state, contentLength, limits.queryBodyBytesMax, [], (body) => {
      const match = /^Bearer[ ]+(\S+)\s*$/i.exec(authorization);
      const workspaceId = match ? credentials.workspaceIdForToken(match[1]) : undefined;
      if (workspaceId === undefined) return sendError(res, state, serviceError("unauthorized", "missing or unknown Bearer token"), []);
      handle(res, state, workspaceId, body);
    });
  };

  const queryRoute = (kind: QueryKind) =>
    authorizedQuery((res, state, workspaceId, body) => {
      query.run(kind, workspaceId, body).then((reply) => sendReply(res, state, reply, []), internalError(res, state, []));
    });

  // ---- operations (SPEC §8), on both listeners unless routes.ts says otherwise ----
  const healthBody = JSON.stringify({ ok: true });
  const sendText = (res: HttpResponse, state: RequestState, contentType: string, body: string) => {
    if (!finishRequest(state) || state.aborted) return;
    account(state, "200 OK");
    res.cork(() => {
      res.writeStatus("200 OK");
      res.writeHeader("Content-Type", contentType);
      res.end(body, closing);
    });
  };
  let openApiText: string | undefined;
  const sdk = loadSdkAsset();

  // The dashboard's page and assets: no credentials, no data (see static-files.ts).
  const sendAsset = (res: HttpResponse, state: RequestState, asset: StaticAsset) => {
    if (!finishRequest(state) || state.aborted) return;
    account(state, "200 OK");
    res.cork(() => {
      res.writeStatus("200 OK");
      for (const [name, value] of asset.headers) res.writeHeader(name, value);
      res.end(asset.body, closing);
    });
  };

  const handlers: Record<RouteName, Handler> = {
    ingest: ingestRoute("single"),
    ingest_batch: ingestRoute("batch"),
    test_event: authorizedQuery((res, state, workspaceId) => {
      ingest.testEvent(workspaceId).then((reply) => sendReply(res, state, reply, []), internalError(res, state, []));
    }),
    query_trend: queryRoute("trend"),
    query_funnel: queryRoute("funnel"),
    query_retention: queryRoute("retention"),
    health: (res, _req, state) => send(res, state, "200 OK", healthBody, state.headers),
    ready: (res, _req, state) => {
      if (phase === "ready") return send(res, state, "200 OK", healthBody, state.headers);
      sendError(res, state, serviceError("unavailable", phase === "starting" ? "server is starting" : "server is shutting down"), state.headers);
    },
    metrics: (res, _req, state) => {
      registry.metrics().then((text) => sendText(res, state, registry.contentType, text), internalError(res, state, []));
    },
    openapi: (res, _req, state) => sendText(res, state, "application/json", (openApiText ??= JSON.stringify(openApiDocument()))),
    user_delete: authorizedQuery((res, state, workspaceId, body) => {
      query.deleteUser(workspaceId, body).then((reply) => sendReply(res, state, reply, []), internalError(res, state, []));
    }),
    events: authorizedQuery((res, state, workspaceId) => query.listEvents(workspaceId).then((reply) => sendReply(res, state, reply, []), internalError(res, state, []))),
    properties: (res, req, state) => {
      // Read before the body: uWS's request is only valid during this callback.
      const event = new URLSearchParams(req.getQuery() ?? "").get("event") ?? undefined;
      authorizedQuery((res, state, workspaceId) => {
        query.listProperties(workspaceId, event).then((reply) => sendReply(res, state, reply, []), internalError(res, state, []));
      })(res, req, state);
    },
    // Reached by a GET without Upgrade: websocket; the socket itself is live-socket.ts's.
    live: (res, _req, state) => sendError(res, state, serviceError("invalid_request", "this path takes a WebSocket: GET with Upgrade: websocket"), []),
    sdk: (res, req, state) => {
      const acceptEncoding = req.getHeader("accept-encoding");
      if (!finishRequest(state) || state.aborted) return;
      account(state, "200 OK");
      res.cork(() => sdk.write(res, acceptEncoding, closing));
    },
  };

  const routeTable = (listener: Listener): Map<string, Route> => {
    const table = new Map<string, Route>();
    for (const spec of routesOf(listener)) {
      if (spec.name === "metrics" && !config.metrics) continue;
      table.set(spec.path, { ...spec, handler: handlers[spec.name as RouteName] });
    }
    return table;
  };
  const ingestRoutes = routeTable("ingest");
  const queryRoutes = routeTable("query");

  const router = (routes: Map<string, Route>, headers: Header[], preflight: boolean, files?: StaticFiles) => (res: HttpResponse, req: HttpRequest) => {
    const method = req.getMethod().toLowerCase();
    // A trailing slash names the same resource; query strings are ignored.
    let path = req.getUrl();
    if (path.length > 1 && path.endsWith("/")) path = path.slice(0, -1);
    const state = begin(res, method, path, headers);
    const route = routes.get(path);
    if (route !== undefined) state.route = route.name;
    // Health and readiness answer while starting and stopping too: that is what they report.
    const operational = route !== undefined && route.credential === "none";
    if (closing && !operational) return sendError(res, state, serviceError("unavailable", "server is shutting down"), headers, true);
    // Closing the connection gives its descriptor back: see limits.httpRequestsInFlightMax.
    if (inFlight > limits.httpRequestsInFlightMax) return sendError(res, state, serviceError("overloaded", "too many requests in flight, retry later"), headers, true);
    const asset = route === undefined && method === "get" ? files?.find(path, req.getHeader("accept-encoding")) : undefined;
    if (asset !== undefined) return sendAsset(res, state, asset);
    if (route === undefined) return sendError(res, state, serviceError("not_found", `no route ${path}`), headers);
    if (phase === "starting" && !operational) return sendError(res, state, serviceError("unavailable", "server is starting, retry later"), headers);
    // A credential the registry can no longer confirm unrevoked is refused, not trusted.
    if (credentials.stale && method !== "options" && !operational) return sendError(res, state, serviceError("unavailable", "credentials cannot be checked right now (the registry is unreadable), retry later"), headers);
    if (preflight && method === "options" && !operational) return send(res, state, "204 No Content", "", preflightHeaders);
    if (method !== route.method) {
      const allowed = route.method.toUpperCase();
      return sendError(res, state, serviceError("method_not_allowed", `${method.toUpperCase()} is not allowed on ${path}; use ${allowed}`), [
        ...headers,
        ["Allow", preflight && !operational ? `${allowed}, OPTIONS` : allowed],
      ]);
    }
    // uWS decodes chunked framing and nothing else: a body sent as "gzip, chunked" would reach us still compressed.
    const transferEncoding = req.getHeader("transfer-encoding");
    if (transferEncoding !== "" && transferEncoding.trim().toLowerCase() !== "chunked") {
      return sendError(res, state, serviceError("invalid_request", "transfer-encoding: only chunked is supported (use Content-Encoding: gzip to compress)"), headers, true);
    }
    try {
      route.handler(res, req, state);
    } catch (error) {
      internalError(res, state, headers)(error);
    }
  };

  // uWS closes HTTP connections idle for 10 s on its own, which bounds slow and idle clients.
  const queryApp = uWS.App().any("/*", router(queryRoutes, [], false, loadStaticFiles()));
  const liveSockets = attachLiveSocket(queryApp, {
    credentials,
    live,
    refusal: () => (closing ? serviceError("unavailable", "server is shutting down") : phase === "starting" ? serviceError("unavailable", "server is starting, retry later") : undefined),
  });
  const ingestApp = uWS.App().any("/*", router(ingestRoutes, corsHeaders, true));

  // Exclusive ports: uSockets otherwise sets SO_REUSEPORT, and a second server started on the
  // same port would silently share its connections instead of failing to start.
  const listen = (app: TemplatedApp, port: number) =>
    new Promise<us_listen_socket>((resolve, reject) => {
      listenExclusive(app, config.host, port, (socket) => (socket ? resolve(socket) : reject(new Error(`cannot listen on ${config.host}:${port} (in use?)`))));
    });
  let querySocket: us_listen_socket | undefined = await listen(queryApp, config.queryPort);
  let ingestSocket: us_listen_socket | undefined = await listen(ingestApp, config.ingestPort);
  const queryPort = uWS.us_socket_local_port(querySocket as never);
  const ingestPort = uWS.us_socket_local_port(ingestSocket as never);
  const urlHost = config.host.includes(":") ? `[${config.host}]` : config.host;
  const closeListeners = () => {
    if (querySocket) uWS.us_listen_socket_close(querySocket);
    if (ingestSocket) uWS.us_listen_socket_close(ingestSocket);
    querySocket = ingestSocket = undefined;
  };
  // uWS listens synchronously: the callback has run when listen returns.
  const relisten = (app: TemplatedApp, port: number): us_listen_socket | undefined => {
    let socket: us_listen_socket | undefined;
    listenExclusive(app, config.host, port, (listening) => (socket = listening || undefined));
    return socket;
  };
  const guard = guardConnections({
    pause: closeListeners,
    resume() {
      if (closing) return true;
      querySocket ??= relisten(queryApp, queryPort);
      ingestSocket ??= relisten(ingestApp, ingestPort);
      return querySocket !== undefined && ingestSocket !== undefined;
    },
  });

  return {
    queryUrl: `http://${urlHost}:${queryPort}`,
    ingestUrl: `http://${urlHost}:${ingestPort}`,
    markReady() {
      if (phase === "starting") phase = "ready";
    },
    async close(timeoutMs) {
      closing = true;
      phase = "stopping";
      guard.stop();
      closeListeners();
      liveSockets.closeAll();
      if (inFlight === 0) return;
      await new Promise<void>((resolve) => {
        drainWaiters.push(resolve);
        setTimeout(resolve, timeoutMs).unref();
      });
    },
  };
}
