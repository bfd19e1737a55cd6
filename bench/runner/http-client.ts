/**
 * The benches' HTTP client: one POST over a keep-alive agent, answered as a
 * whole. Eventide (uWS) closes a connection idle for limits.idleTimeoutSeconds;
 * a bench that then reuses that socket — because its event loop was busy (the
 * reference answers are synchronous) and never saw the close — gets
 * ECONNRESET "socket hang up" before any byte of an answer. So agents drop
 * their idle sockets at half the server's timeout, and an idempotent request
 * (a query; a batch without uuids is not one) whose reused socket was reset
 * is sent once more on a fresh one, as Node's `request.reusedSocket` documents.
 *
 * Estimate: a keep-alive POST on loopback costs the client ~50–100 µs, small
 * next to a 1 000-event batch (~3 ms of server work); a retry costs one TCP
 * connect (~0.1 ms) and happens at most once per idle period.
 */
import { Agent, request as httpRequest, type ClientRequest } from "node:http";
import { limits } from "../../src/config/limits.js";

export interface HttpAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** The first attempt went over a reused socket the server had closed, and was sent again. */
  retriedAfterIdleReset: boolean;
}

export interface PostOptions {
  headers?: Record<string, string>;
  timeoutMs?: number;
  /** Safe to send twice (a query): a reset of a reused idle socket is then retried once on a new one. */
  idempotent?: boolean;
}

/** Below the server's idle timeout, so the agent, not the server, ends an idle connection whenever the event loop runs. */
export const idleSocketMs = (limits.idleTimeoutSeconds * 1000) / 2;

/** A keep-alive agent of up to `sockets` connections that drops a socket idle for idleSocketMs. */
export function keepAliveAgent(sockets: number): Agent {
  return new Agent({ keepAlive: true, maxSockets: sockets, timeout: idleSocketMs });
}

/** POST; resolves once the whole answer has arrived. */
export async function post(agent: Agent, url: string, body: string | Buffer, options: PostOptions = {}): Promise<HttpAnswer> {
  const payload = typeof body === "string" ? Buffer.from(body, "utf8") : body;
  try {
    return await postOnce(agent, url, payload, options);
  } catch (error) {
    if (!(options.idempotent === true && error instanceof IdleSocketReset)) throw error;
    return { ...(await postOnce(agent, url, payload, options)), retriedAfterIdleReset: true };
  }
}

/** ECONNRESET on a socket the agent reused: most likely the server had closed it while idle. */
class IdleSocketReset extends Error {}

function postOnce(agent: Agent, url: string, payload: Buffer, options: PostOptions): Promise<HttpAnswer> {
  const timeoutMs = options.timeoutMs ?? 120_000;
  return new Promise((resolvePost, rejectPost) => {
    const target = new URL(url);
    const outgoing: ClientRequest = httpRequest(
      {
        agent,
        method: "POST",
        hostname: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        headers: { "content-type": "application/json", "content-length": String(payload.length), ...options.headers },
        timeout: timeoutMs,
      },
      (incoming) => {
        const chunks: Buffer[] = [];
        incoming.on("data", (chunk: Buffer) => chunks.push(chunk));
        incoming.on("end", () =>
          resolvePost({ status: incoming.statusCode ?? 0, headers: incoming.headers, text: Buffer.concat(chunks).toString("utf8"), retriedAfterIdleReset: false }),
        );
        incoming.on("error", rejectPost);
      },
    );
    outgoing.on("timeout", () => outgoing.destroy(new Error(`no answer from ${url} within ${timeoutMs} ms`)));
    outgoing.on("error", (error: NodeJS.ErrnoException) => {
      if (outgoing.reusedSocket && error.code === "ECONNRESET") rejectPost(new IdleSocketReset(`${url}: reused idle socket was reset (${error.message})`, { cause: error }));
      else rejectPost(error);
    });
    outgoing.end(payload);
  });
}
