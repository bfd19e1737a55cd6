/**
 * The ceiling peer of the ingest benchmark: a bare single-threaded
 * uWebSockets.js server that reads a request body and JSON.parses it, and does
 * nothing else. Eventide's ingest can only be slower (it also validates,
 * batches and fsyncs), so its rate divided by this one says how much of the
 * single-core budget the real work costs. Run as its own process:
 * `node dist/bench/ingest/ceiling-server.js` prints `{"event":"listening","port":N}`.
 *
 * Estimate: JSON.parse runs at ~300 MB/s per core on ~235-byte events, so
 * ~1.3 M events/s of parsing; with the copy into one buffer and the HTTP
 * framing a 1 000-event batch (~235 KB) costs ~1.5 ms → ~650 batches/s. A
 * single ~280-byte event costs ~1 µs to parse but ~10 µs of syscalls and
 * uWS framing → ~90 k requests/s.
 */
import uWS from "uWebSockets.js";

const bodyBytesMax = 32 * 1024 * 1024;
const answer = '{"ok":true}';

function readBodyAndAnswer(response: uWS.HttpResponse, request: uWS.HttpRequest): void {
  // Read everything from `request` synchronously: uWS reuses it after this call returns.
  const declaredLength = Number(request.getHeader("content-length"));
  // One preallocated buffer per request when the length is known, as the real server does (STYLE rule 6).
  let body = Buffer.allocUnsafe(Number.isSafeInteger(declaredLength) && declaredLength >= 0 && declaredLength <= bodyBytesMax ? declaredLength : 0);
  let length = 0;
  let aborted = false;
  response.onAborted(() => {
    aborted = true;
  });
  response.onData((chunk, isLast) => {
    if (aborted) return;
    // uWS reuses `chunk` after the callback returns, so copy now.
    const bytes = new Uint8Array(chunk);
    if (length + bytes.length > body.length) {
      if (length + bytes.length > bodyBytesMax) {
        aborted = true;
        response.cork(() => response.writeStatus("413 Payload Too Large").end('{"ok":false}', true));
        return;
      }
      const grown = Buffer.allocUnsafe(Math.max(length + bytes.length, body.length * 2));
      body.copy(grown, 0, 0, length);
      body = grown;
    }
    body.set(bytes, length);
    length += bytes.length;
    if (!isLast) return;
    let status = "200 OK";
    try {
      JSON.parse(body.toString("utf8", 0, length));
    } catch {
      status = "400 Bad Request";
    }
    response.cork(() => {
      response.writeStatus(status).writeHeader("Content-Type", "application/json").end(status === "200 OK" ? answer : '{"ok":false}');
    });
  });
}

const app = uWS.App();
app.post("/*", readBodyAndAnswer);
app.any("/*", (response) => {
  response.writeStatus("404 Not Found").end('{"ok":false}');
});

const host = process.env.CEILING_HOST ?? "127.0.0.1";
let listenSocket: uWS.us_listen_socket | null = null;
app.listen(host, Number(process.env.CEILING_PORT ?? 0), (socket) => {
  if (socket === false) {
    process.stderr.write("ceiling-server: listen failed\n");
    process.exit(1);
  }
  listenSocket = socket;
  process.stdout.write(`${JSON.stringify({ event: "listening", port: uWS.us_socket_local_port(socket) })}\n`);
});

function stop(): void {
  if (listenSocket !== null) uWS.us_listen_socket_close(listenSocket);
  listenSocket = null;
  process.exit(0);
}
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
