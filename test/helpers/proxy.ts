/**
 * Proxies that stand between a client under test and the real server, to
 * make the network misbehave the way it does in production: a TCP relay whose
 * target can move (a server restarted on a new port) and which resets its
 * connections while the target is down, and an HTTP proxy that answers some
 * requests itself (503 with Retry-After) or loses the server's answer. Neither
 * imitates the server: every answer that is not a fault comes from it.
 */
import { createServer as createHttpServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createTcpServer, connect, type AddressInfo, type Socket } from "node:net";

export interface Proxy {
  url: string;
  close(): Promise<void>;
}

export interface TcpRelay extends Proxy {
  /** Destroys every connection. */
  resetAll(): void;
  /**
   * From now on the server's answers are swallowed (the client never sees them);
   * resolves once one was, so the server has stored a batch its client will send again.
   */
  swallowAnswers(): Promise<void>;
  /** Answers reach the client again. */
  passAnswers(): void;
}

/** A TCP relay to `target()`'s port, read on each new connection; with no target a connection is reset at once. */
export async function startTcpRelay(target: () => number | undefined): Promise<TcpRelay> {
  const sockets = new Set<Socket>();
  let swallowing: (() => void) | undefined;
  const server = createTcpServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.on("error", () => client.destroy());
    const port = target();
    if (port === undefined) return void client.resetAndDestroy();
    const upstream = connect(port, "127.0.0.1");
    sockets.add(upstream);
    upstream.on("close", () => {
      sockets.delete(upstream);
      client.destroy();
    });
    upstream.on("error", () => client.resetAndDestroy());
    client.on("close", () => upstream.destroy());
    client.pipe(upstream);
    upstream.on("data", (chunk: Buffer) => {
      if (swallowing === undefined) return void client.write(chunk);
      swallowing();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    resetAll() {
      for (const socket of sockets) socket.destroy();
    },
    swallowAnswers: () => new Promise((resolve) => (swallowing = resolve)),
    passAnswers() {
      swallowing = undefined;
    },
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

/** What the HTTP proxy does with one request to `/ingest/batch`. */
export type Fault =
  /** Answer 503 overloaded with Retry-After, without forwarding. */
  | "refuse"
  /** Forward it (the server stores the events), then answer 503 as if the answer were lost. */
  | "lose-answer"
  | "forward";

/**
 * An HTTP proxy to `targetUrl`: each POST to /ingest/batch gets the fault
 * `faultFor(index, contentLength)` (index counts those POSTs from 0; NaN
 * without the header); every other request is
 * forwarded as is. Its own answers carry the CORS headers the server sends.
 */
export async function startFaultProxy(targetUrl: string, faultFor: (index: number, contentLength: number) => Fault): Promise<Proxy & { batchRequests(): number }> {
  let batchIndex = 0;
  const refuse = (response: ServerResponse) => {
    response.writeHead(503, {
      "content-type": "application/json",
      "retry-after": "1",
      "access-control-allow-origin": "*",
      "access-control-expose-headers": "Retry-After",
    });
    response.end(JSON.stringify({ ok: false, error: { code: "overloaded", message: "proxy fault" } }));
  };
  const server = createHttpServer((request: IncomingMessage, response: ServerResponse) => {
    const isBatch = request.method === "POST" && request.url?.startsWith("/ingest/batch") === true;
    const fault: Fault = isBatch ? faultFor(batchIndex++, Number(request.headers["content-length"] ?? Number.NaN)) : "forward";
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      if (fault === "refuse") return refuse(response);
      const headers = { ...request.headers };
      delete headers.host;
      const upstream = httpRequest(new URL(request.url ?? "/", targetUrl), { method: request.method, headers, agent: false }, (answer) => {
        const body: Buffer[] = [];
        answer.on("data", (chunk: Buffer) => body.push(chunk));
        answer.on("end", () => {
          if (fault === "lose-answer") return refuse(response);
          response.writeHead(answer.statusCode ?? 502, answer.headers);
          response.end(Buffer.concat(body));
        });
      });
      upstream.on("error", () => response.destroy());
      upstream.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    batchRequests: () => batchIndex,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
