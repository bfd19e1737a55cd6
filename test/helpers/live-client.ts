/**
 * A client of the live socket (GET /api/v1/live) for tests: every message the
 * server sends is kept in order, and a test awaits the one it expects instead
 * of sleeping. Built on `ws`, whose pause() stops reading the socket, so a
 * test can play a client too slow to keep up.
 */
import WebSocket from "ws";

export interface LiveMessage {
  type: "authenticated" | "answer" | "error" | "unsubscribed";
  id?: string;
  answer?: any;
  ok?: false;
  error?: { code: string; message: string };
}

/** How an upgrade the server refused was answered over HTTP. */
export interface RefusedUpgrade {
  status: number;
  body: any;
}

export class LiveClient {
  readonly messages: LiveMessage[] = [];
  /** Resolves with the close code once the socket closed. */
  readonly closed: Promise<number>;
  private waiters: Array<() => void> = [];

  private constructor(readonly socket: WebSocket) {
    socket.on("message", (data) => {
      this.messages.push(JSON.parse(String(data)));
      for (const wake of this.waiters.splice(0)) wake();
    });
    this.closed = new Promise((resolve) => socket.on("close", (code) => {
      resolve(code);
      for (const wake of this.waiters.splice(0)) wake();
    }));
  }

  /** Opens a socket; a refused upgrade resolves with its HTTP answer instead. */
  static open(queryUrl: string): Promise<LiveClient | RefusedUpgrade> {
    const socket = new WebSocket(`${queryUrl.replace(/^http/, "ws")}/api/v1/live`);
    return new Promise((resolve, reject) => {
      socket.once("open", () => resolve(new LiveClient(socket)));
      socket.once("unexpected-response", (_request, response) => {
        let text = "";
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => (text += chunk));
        response.on("end", () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(text) }));
      });
      socket.once("error", reject);
    });
  }

  /** Opens a socket and authenticates it; fails unless both succeed. */
  static async signedIn(queryUrl: string, token: string): Promise<LiveClient> {
    const client = await LiveClient.open(queryUrl);
    if (!(client instanceof LiveClient)) throw new Error(`upgrade refused: ${client.status} ${JSON.stringify(client.body)}`);
    client.send({ type: "auth", token });
    const reply = await client.next((message) => message.type === "authenticated" || message.type === "error");
    if (reply.type !== "authenticated") throw new Error(`auth refused: ${JSON.stringify(reply)}`);
    return client;
  }

  send(message: unknown): void {
    this.socket.send(typeof message === "string" ? message : JSON.stringify(message));
  }

  subscribe(id: string, kind: string, query: unknown): void {
    this.send({ type: "subscribe", id, kind, query });
  }

  /** The first message at or after index `from` that `matches`, waiting for it; fails when the socket closes first or on timeout. */
  async next(matches: (message: LiveMessage) => boolean, from = 0, timeoutMs = 30_000): Promise<LiveMessage> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages.slice(from).find(matches);
      if (found !== undefined) return found;
      if (this.socket.readyState === WebSocket.CLOSED) throw new Error(`socket closed; messages: ${JSON.stringify(this.messages).slice(0, 2000)}`);
      if (Date.now() > deadline) throw new Error(`no matching message within ${timeoutMs} ms; messages: ${JSON.stringify(this.messages).slice(0, 2000)}`);
      await new Promise<void>((wake) => {
        const timer = setTimeout(wake, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(timer);
          wake();
        });
      });
    }
  }

  /** Answers received for a subscription, in order. */
  answers(id: string): any[] {
    return this.messages.filter((message) => message.type === "answer" && message.id === id).map((message) => message.answer);
  }

  close(): Promise<number> {
    this.socket.close();
    return this.closed;
  }
}
