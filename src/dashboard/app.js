// The dashboard's entry: sign-in with a query token (kept in localStorage and
// sent as a Bearer token), the probe of what the server can do, the three
// views, live mode, and the URL that holds the current query.
import { render } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError, checkToken, probeCapabilities, request } from "./api.js";
import { FunnelForm, FunnelResult } from "./funnel.js";
import { LiveToggle, TestEventButton, livePeriodMs, subscribeLive } from "./live.js";
import { RetentionForm, RetentionResult } from "./retention.js";
import { defaults, queryPath, readUrl, requestBody, urlFor, views } from "./state.js";
import { TrendForm, TrendResult } from "./trend.js";
import { html } from "./widgets.js";

const tokenKey = "eventide.token";
const titles = { trend: "Trend", funnel: "Funnel", retention: "Retention" };
const forms = { trend: TrendForm, funnel: FunnelForm, retention: RetentionForm };
const results = { trend: TrendResult, funnel: FunnelResult, retention: RetentionResult };

// A query worth running as soon as it is opened from a link: its events are named.
function complete(view, query) {
  switch (view) {
    case "trend":
      return query.event !== "";
    case "funnel":
      return query.steps.length > 0 && query.steps.every((step) => step !== "");
    case "retention":
      return query.cohortEvent !== "" && query.retentionEvent !== "";
  }
  return false;
}

function SignIn({ onToken, message }) {
  const [token, setToken] = useState("");
  const [state, setState] = useState({ checking: false, error: message });
  const submit = async (event) => {
    event.preventDefault();
    setState({ checking: true });
    try {
      await checkToken(token.trim());
      onToken(token.trim());
    } catch (error) {
      setState({ checking: false, error: error.status === 401 ? "That token was refused: it is unknown or revoked (401)." : error.message });
    }
  };
  return html`<form class="sign-in" onSubmit=${submit}>
    <h1>Eventide</h1>
    <p>Sign in with a query token (<code>npx eventide token create WORKSPACE</code> makes one).</p>
    <input type="password" autocomplete="current-password" placeholder="query token" value=${token} data-testid="token" onInput=${(event) => setToken(event.currentTarget.value)} />
    <button type="submit" data-testid="sign-in" disabled=${state.checking || token.trim() === ""}>${state.checking ? "Checking…" : "Sign in"}</button>
    ${state.error && html`<p class="field-error" role="alert" data-testid="sign-in-error">${state.error}</p>`}
  </form>`;
}

function Dashboard({ token, caps, signOut }) {
  const initial = useRef(readUrl());
  const [view, setView] = useState(initial.current.view);
  const [drafts, setDrafts] = useState(() => ({ ...Object.fromEntries(views.map((name) => [name, defaults(name)])), [initial.current.view]: initial.current.query }));
  const [outcomes, setOutcomes] = useState({});
  const [live, setLive] = useState(initial.current.live);
  const [transport, setTransport] = useState("connecting");
  // The event list was read at sign-in; a test event sent since shows the workspace is no longer empty.
  const [testEventSent, setTestEventSent] = useState(false);
  const sequence = useRef({});

  const show = useCallback((runView, query, body, answer) => {
    setOutcomes((all) => ({ ...all, [runView]: { answer, query, body, answers: (all[runView]?.answers ?? 0) + 1, updatedAt: new Date().toLocaleTimeString() } }));
  }, []);

  const run = useCallback(
    async (runView, query, { push = false, silent = false } = {}) => {
      const number = (sequence.current[runView] = (sequence.current[runView] ?? 0) + 1);
      if (push) {
        const url = urlFor(runView, query, live);
        if (url !== location.search) history.pushState(null, "", url);
      }
      if (!silent) setOutcomes((all) => ({ ...all, [runView]: { ...all[runView], loading: true, error: undefined } }));
      let body;
      try {
        body = requestBody(runView, query, caps);
        const answer = await request(token, "POST", queryPath(runView), body);
        if (sequence.current[runView] !== number) return;
        show(runView, query, body, answer);
      } catch (error) {
        if (sequence.current[runView] !== number) return;
        if (error.status === 401) return signOut("The server refused the token (401): sign in again.");
        setOutcomes((all) => ({ ...all, [runView]: { ...all[runView], loading: false, error: error instanceof ApiError ? error : new ApiError(0, "error", error.message) } }));
      }
    },
    [token, caps, live, signOut, show],
  );

  // A link opened with a query runs it; the back and forward buttons restore and re-run theirs.
  useEffect(() => {
    if (initial.current.given && complete(initial.current.view, initial.current.query)) run(initial.current.view, initial.current.query);
    const restore = () => {
      const state = readUrl();
      setView(state.view);
      setDrafts((all) => ({ ...all, [state.view]: state.query }));
      setLive(state.live);
      if (complete(state.view, state.query)) run(state.view, state.query);
    };
    window.addEventListener("popstate", restore);
    return () => window.removeEventListener("popstate", restore);
  }, []);

  const outcome = outcomes[view];
  const lastQuery = outcome?.query;
  // Live: the query is subscribed on the live socket, which pushes each new answer; when the socket
  // fails, it is polled instead. A poll is timed from the end of the last one: on a slow server a fixed
  // interval would start a new query before the previous answered, and each would discard the one before.
  useEffect(() => {
    if (!live || lastQuery === undefined) return undefined;
    let timer;
    let active = true;
    const refresh = async () => {
      await run(view, lastQuery, { silent: true });
      if (active) timer = setTimeout(refresh, livePeriodMs);
    };
    const poll = () => {
      if (!active) return;
      setTransport("polling");
      timer = setTimeout(refresh, livePeriodMs);
    };
    setTransport("connecting");
    let stop = () => undefined;
    try {
      const body = requestBody(view, lastQuery, caps);
      stop = subscribeLive(token, view, body, {
        onAnswer: (answer) => active && show(view, lastQuery, body, answer),
        onPushed: () => active && setTransport("pushed"),
        onFallback: poll,
      });
    } catch {
      poll();
    }
    return () => {
      active = false;
      clearTimeout(timer);
      stop();
    };
  }, [live, view, lastQuery, run, token, caps, show]);

  const toggleLive = (on) => {
    setLive(on);
    history.replaceState(null, "", urlFor(view, drafts[view], on));
  };
  const switchView = (name) => {
    if (name === view) return;
    setView(name);
    history.pushState(null, "", urlFor(name, drafts[name], live));
    if (outcomes[name] === undefined && complete(name, drafts[name])) run(name, drafts[name]);
  };
  const set = (change) => setDrafts((all) => ({ ...all, [view]: { ...all[view], ...change } }));
  const submit = (event) => {
    event.preventDefault();
    run(view, drafts[view], { push: true });
  };

  const Form = forms[view];
  const Result = results[view];
  return html`<div class="shell">
    <header>
      <strong class="brand">Eventide</strong>
      <nav>${views.map((name) => html`<button type="button" class=${name === view ? "tab active" : "tab"} data-testid=${`tab-${name}`} onClick=${() => switchView(name)}>${titles[name]}</button>`)}</nav>
      <span class="spacer"></span>
      <${LiveToggle} live=${live} setLive=${toggleLive} updatedAt=${outcome?.updatedAt} transport=${transport} />
      <${TestEventButton} token=${token} onSent=${() => (setTestEventSent(true), lastQuery && run(view, lastQuery, { silent: true }))} />
      <button type="button" class="link" data-testid="sign-out" onClick=${() => signOut()}>Sign out</button>
    </header>
    ${!caps.v2 && html`<p class="notice" data-testid="v1-notice">This server answers query API v1: dates are UTC; time zones, breakdowns, property maths, funnel order and exclusions, and the event and property lists are not available.</p>`}
    ${caps.events && caps.events.length === 0 && !testEventSent && html`<p class="notice" data-testid="no-events-notice">This workspace has no events yet: send one with the curl line below, or the “Send test event” button.</p>`}
    <main>
      <form class="query" noValidate onSubmit=${submit} data-testid=${`${view}-form`}>
        <${Form} query=${drafts[view]} set=${set} caps=${caps} token=${token} error=${outcome?.error} />
        <div class="actions">
          <button type="submit" class="primary" data-testid="run">Run query</button>
          ${outcome?.loading && html`<span class="loading" data-testid="loading">Loading…</span>`}
        </div>
      </form>
      <section class=${outcome?.loading ? "output stale" : "output"} data-testid="output" data-answers=${outcome?.answers ?? 0} data-state=${outcome?.loading ? "loading" : outcome?.error ? "error" : outcome?.answer ? "ready" : "empty"}>
        ${outcome?.answer && html`<${Result} answer=${outcome.answer} query=${outcome.query} />`}
        ${!outcome && html`<p class="muted">Choose the events and run the query.</p>`}
      </section>
    </main>
  </div>`;
}

function App() {
  const [token, setToken] = useState(() => localStorage.getItem(tokenKey) ?? "");
  const [session, setSession] = useState({ phase: token ? "checking" : "signed-out" });
  // The sign-in form has just checked a token it hands over: no need to ask the server twice.
  const checked = useRef("");

  const signOut = useCallback((message) => {
    localStorage.removeItem(tokenKey);
    setToken("");
    setSession({ phase: "signed-out", message });
  }, []);

  useEffect(() => {
    if (!token) return;
    let current = true;
    setSession({ phase: "checking" });
    (checked.current === token ? Promise.resolve() : checkToken(token))
      .then(() => probeCapabilities(token))
      .then(
        (caps) => current && setSession({ phase: "ready", caps }),
        (error) => current && (error.status === 401 ? signOut("The saved token was refused (401): sign in again.") : setSession({ phase: "failed", message: error.message })),
      );
    return () => (current = false);
  }, [token]);

  const onToken = (value) => {
    checked.current = value;
    localStorage.setItem(tokenKey, value);
    setToken(value);
  };
  switch (session.phase) {
    case "signed-out":
      return html`<${SignIn} onToken=${onToken} message=${session.message} />`;
    case "checking":
      return html`<p class="boot">Connecting…</p>`;
    case "failed":
      return html`<div class="sign-in"><p class="field-error" role="alert">${session.message}</p><button type="button" onClick=${() => location.reload()}>Retry</button> <button type="button" class="link" onClick=${() => signOut()}>Sign out</button></div>`;
    case "ready":
      return html`<${Dashboard} token=${token} caps=${session.caps} signOut=${signOut} />`;
  }
}

const root = document.getElementById("app");
root.textContent = "";
render(html`<${App} />`, root);
