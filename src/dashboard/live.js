// Live mode and the test event. Live keeps the current query fresh: pushed
// over the query listener's WebSocket (GET /api/v1/live: the server re-runs
// the query when the workspace stores events, at most once a second), and
// polled every few seconds when the socket cannot be used. Either way the
// numbers are swapped in place (the old answer stays on screen while the new
// one comes, so nothing flickers). The test-event button sends one
// `test_event` (SPEC §3) and shows it arrive in a trend query.
import { useState } from "preact/hooks";
import { request } from "./api.js";
import { html } from "./widgets.js";

export const livePeriodMs = 3000;
const liveSocketPath = "/api/v1/live";

/**
 * Subscribes one query over the live socket. `onAnswer` gets every answer
 * (the first at once); `onPushed` is called once the server has taken the
 * subscription; `onFallback` once, when the socket cannot serve it (no socket,
 * a refusal, a closed connection): the caller then polls. The token goes in
 * the first message, never in the URL. Returns the function that stops it.
 */
export function subscribeLive(token, kind, body, { onAnswer, onPushed, onFallback }) {
  let stopped = false;
  let socket;
  const fallBack = (reason) => {
    if (stopped) return;
    stopped = true;
    console.warn(`Eventide dashboard: live updates are polled every ${livePeriodMs / 1000} s (${reason})`);
    socket?.close();
    onFallback();
  };
  try {
    socket = new WebSocket(`${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}${liveSocketPath}`);
  } catch (error) {
    fallBack(error.message);
    return () => undefined;
  }
  socket.onopen = () => {
    socket.send(JSON.stringify({ type: "auth", token }));
    socket.send(JSON.stringify({ type: "subscribe", id: kind, kind, query: body }));
  };
  let pushed = false;
  socket.onmessage = (event) => {
    if (stopped) return;
    const message = JSON.parse(event.data);
    if (message.type === "answer") {
      if (!pushed) onPushed();
      pushed = true;
      onAnswer(message.answer);
    } else if (message.type === "error") {
      // The polled request meets the same error and shows it where the page shows errors.
      fallBack(`${message.error.code}: ${message.error.message}`);
    }
  };
  socket.onclose = (event) => fallBack(`the live socket closed (${event.code})`);
  return () => {
    stopped = true;
    socket.close();
  };
}

const transportTitles = {
  pushed: "Pushed by the server as events arrive (at most once a second)",
  polling: `Re-run every ${livePeriodMs / 1000} s (the live socket is not available)`,
  connecting: "Connecting to the live socket…",
};

export function LiveToggle({ live, setLive, updatedAt, transport }) {
  return html`<label class="live-toggle" title=${live ? transportTitles[transport] : "Keep the query fresh as events arrive"}>
    <input type="checkbox" checked=${live} data-testid="live" onChange=${(event) => setLive(event.currentTarget.checked)} />
    <span class=${live ? "dot on" : "dot"}></span> Live
    ${live && html`<span class="muted" data-testid="live-transport" data-transport=${transport}>${transport === "polling" ? "(polled)" : ""}</span>`}
    ${live && updatedAt && html`<span class="muted" data-testid="live-updated">updated ${updatedAt}</span>`}
  </label>`;
}

export function TestEventButton({ token, onSent }) {
  const [status, setStatus] = useState(undefined);
  const send = async () => {
    setStatus({ text: "sending…" });
    try {
      const sent = await request(token, "POST", "/api/v1/internal/test-event");
      const day = sent.timestamp.slice(0, 10);
      const trend = await request(token, "POST", "/api/v1/query/trend", { event: "test_event", dateFrom: day, dateTo: day });
      const count = trend.data.reduce((sum, point) => sum + point.count, 0);
      setStatus({ text: `test_event arrived at ${sent.timestamp} UTC; ${count} today`, ok: true });
      onSent?.();
    } catch (error) {
      setStatus({ text: `test event failed: ${error.message}`, failed: true });
    }
  };
  return html`<span class="test-event">
    <button type="button" data-testid="test-event" onClick=${send}>Send test event</button>
    ${status && html`<span class=${status.failed ? "field-error" : "muted"} data-testid="test-event-status">${status.text}</span>`}
  </span>`;
}
