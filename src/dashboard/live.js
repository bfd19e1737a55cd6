// Live mode and the test event. Live re-runs the current query every few
// seconds and swaps the numbers in place (the old answer stays on screen
// while the new one loads, so nothing flickers). The test-event button sends
// one `test_event` (SPEC §3) and shows it arrive in a trend query.
import { useState } from "preact/hooks";
import { request } from "./api.js";
import { html } from "./widgets.js";

export const livePeriodMs = 3000;

export function LiveToggle({ live, setLive, updatedAt }) {
  return html`<label class="live-toggle" title=${`Re-runs the query every ${livePeriodMs / 1000} s`}>
    <input type="checkbox" checked=${live} data-testid="live" onChange=${(event) => setLive(event.currentTarget.checked)} />
    <span class=${live ? "dot on" : "dot"}></span> Live
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
