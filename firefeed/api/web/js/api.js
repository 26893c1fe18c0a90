// The JSON API under /api, called with the tab's token; errors become ApiError with the API's body.

export const TOKEN_KEY = "firefeed.token";

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || "HTTP " + status);
    this.status = status;
    this.body = body || {};
  }
}

// Set by app.js: what a 401 does (back to the token form).
const hooks = { unauthorized: () => {} };
export function onUnauthorized(fn) {
  hooks.unauthorized = fn;
}

export const token = () => sessionStorage.getItem(TOKEN_KEY);

// "/api/projects/<id>/<parts...>", each part encoded.
export function projectPath(project, ...parts) {
  return ["/api/projects", project, ...parts].map((p, i) => (i === 0 ? p : encodeURIComponent(p))).join("/");
}

// payload: undefined (no body), an object (JSON), or {yaml: text} (the spec as YAML text).
export async function api(method, path, payload) {
  const response = await request(method, path, payload);
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (response.status === 401) {
    hooks.unauthorized("That token was not accepted: " + ((body && body.message) || "unauthorized"));
    throw new ApiError(401, body);
  }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

export async function request(method, path, payload) {
  const headers = { Authorization: "Bearer " + token(), Accept: "application/json" };
  let body;
  if (payload !== undefined && payload !== null && typeof payload.yaml === "string") {
    headers["Content-Type"] = "application/yaml";
    body = payload.yaml;
  } else if (payload !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(payload);
  }
  return fetch(path, { method, headers, body });
}

// An error as one line: its code, and the API's message (with the key it names, for a spec error).
export function errorText(err) {
  if (!(err instanceof ApiError)) return String(err && err.message ? err.message : err);
  const b = err.body || {};
  const where = b.path ? ` at ${b.path}` : "";
  return `${b.error || "HTTP " + err.status}${where}: ${err.message}`;
}

// A route this server does not have (an older API, or an optional one such as sync status) answers the
// framework's 404 "Not Found" or a 405: the page then shows nothing for it rather than an error.
export const missingRoute = (err) =>
  err instanceof ApiError && (err.status === 405 || (err.status === 404 && err.body.message === "Not Found"));

// The report of the project's latest run that reached SUCCEEDED, or null (its exports, lookups, findings).
export async function latestSucceededReport(project) {
  const runs = await api("GET", projectPath(project, "pipeline", "runs") + "?limit=50");
  const done = runs.runs.find((r) => r.status === "SUCCEEDED");
  return done ? api("GET", "/api/runs/" + encodeURIComponent(done.run_id)) : null;
}

// Wait for a run to end (the page's own poll, at most `ms`): its last report.
export async function runEnded(runId, ms = 120000) {
  const until = Date.now() + ms;
  for (;;) {
    const report = await api("GET", "/api/runs/" + encodeURIComponent(runId));
    if (!["PENDING", "RUNNING"].includes(report.status) || Date.now() > until) return report;
    await new Promise((resolve) => setTimeout(resolve, 700));
  }
}
