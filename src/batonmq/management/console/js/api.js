// Requests to the broker's management HTTP API, with the logged-in user's credentials.
//
// As RabbitMQ's console does, the credentials are kept for the browser tab's session only
// (sessionStorage) and sent as HTTP basic authentication with every request. Requests are made
// with credentials "omit": the browser then never shows its own login dialog for a 401 (the
// Fetch standard prompts only when it includes credentials itself), and the console shows its
// login form instead.

const CREDENTIALS = "batonmq.credentials";

export class ApiError extends Error {
  constructor(status, body) {
    const reason = body && typeof body === "object" && body.reason ? body.reason : `HTTP ${status}`;
    super(String(reason));
    this.status = status;
    this.body = body;
  }
}

function basic(user, password) {
  const bytes = new TextEncoder().encode(`${user}:${password}`);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return `Basic ${btoa(binary)}`;
}

export function remember(user, password) {
  sessionStorage.setItem(CREDENTIALS, basic(user, password));
}

export function forget() {
  sessionStorage.removeItem(CREDENTIALS);
}

export function hasCredentials() {
  return sessionStorage.getItem(CREDENTIALS) !== null;
}

// One request; the decoded JSON answer (null when empty). A status outside 2xx is an ApiError,
// unless `accept` lists it (then its body is the answer).
export async function request(method, path, { body, headers = {}, accept = [] } = {}) {
  const sent = { Authorization: sessionStorage.getItem(CREDENTIALS) || "", ...headers };
  if (body !== undefined) sent["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers: sent,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  const text = await response.text();
  let answer = null;
  if (text) {
    try {
      answer = JSON.parse(text);
    } catch {
      answer = { reason: text };
    }
  }
  if (!response.ok && !accept.includes(response.status)) throw new ApiError(response.status, answer);
  return answer;
}

export const get = (path, options) => request("GET", path, options);
export const put = (path, body, options) => request("PUT", path, { ...options, body });
export const post = (path, body, options) => request("POST", path, { ...options, body });
export const del = (path, options) => request("DELETE", path, options);

// A path with each interpolated value %-encoded as one segment ("/" becomes %2F, as the API
// names the virtual host "/").
export function path(strings, ...values) {
  return strings.reduce(
    (built, part, index) => built + part + (index < values.length ? encodeURIComponent(values[index]) : ""),
    "",
  );
}

// The query string of `params`, leaving out those that are undefined or empty.
export function query(params) {
  const kept = Object.entries(params).filter(([, value]) => value !== undefined && value !== "");
  return kept.length ? `?${new URLSearchParams(kept)}` : "";
}
