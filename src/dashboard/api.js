// The query API as the dashboard uses it: one fetch wrapper that turns SPEC §1
// error bodies into ApiError (with the field its message names), and the
// probes that find out what the server can do (query API v2 or only v1).

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  // Validation messages start with the field as a path: "filters[1].value: expected a string".
  get field() {
    if (this.code !== "invalid_request") return undefined;
    const match = /^([A-Za-z_][\w.\[\]]*):/.exec(this.message);
    return match ? match[1] : undefined;
  }
}

export async function request(token, method, path, body) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (error) {
    throw new ApiError(0, "network", `the server could not be reached (${error.message})`);
  }
  const answer = await response.json().catch(() => undefined);
  if (!response.ok) throw new ApiError(response.status, answer?.error?.code ?? `http_${response.status}`, answer?.error?.message ?? response.statusText);
  return answer;
}

export const todayUtc = () => new Date().toISOString().slice(0, 10);

// A cheap authenticated request: a one-day trend of a name nobody sends.
export async function checkToken(token) {
  const day = todayUtc();
  await request(token, "POST", "/api/v1/query/trend", { event: "$dashboard-sign-in", dateFrom: day, dateTo: day });
}

// GET /api/v1/events exists from query API v2 (SPEC §7) on; a 404 means a v1 server.
export async function probeCapabilities(token) {
  try {
    const answer = await request(token, "GET", "/api/v1/events");
    return { v2: true, events: answer.data };
  } catch (error) {
    if (error.status === 404) {
      console.warn("Eventide dashboard: GET /api/v1/events answered 404; this server speaks query API v1 only (no time zones, breakdowns, event or property lists)");
      return { v2: false, events: undefined };
    }
    throw error;
  }
}

export async function fetchProperties(token, event) {
  const query = event ? `?event=${encodeURIComponent(event)}` : "";
  const answer = await request(token, "GET", `/api/v1/properties${query}`);
  return answer.data;
}
