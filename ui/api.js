// The UI's only way to the server: the same public HTTP API every other client uses.
// Errors come back OpenAI-shaped ({"error": {message, code, param}}) and are thrown as
// ApiError, whose message is the server's own sentence (it already says what to do).

const KEY_STORAGE = "flashdesk.apiKey";

export class ApiError extends Error {
  constructor(status, message, code = null, param = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.param = param;
  }
}

export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) || "";
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

function headers(json) {
  const out = {};
  if (json) out["Content-Type"] = "application/json";
  const key = apiKey();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

async function failure(res) {
  let body = null;
  try {
    body = await res.json();
  } catch {
    /* not JSON: a proxy page or a dropped connection */
  }
  const e = body && body.error;
  if (res.status === 401) window.dispatchEvent(new CustomEvent("flashdesk:need-key"));
  return new ApiError(res.status, (e && e.message) || `HTTP ${res.status} ${res.statusText}`,
    e && e.code, e && e.param);
}

export async function request(method, path, body, { signal } = {}) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "the flashdesk server cannot be reached; is it still running?", "offline");
  }
  if (!res.ok) throw await failure(res);
  return res.status === 204 ? null : res.json();
}

export const get = (path, opts) => request("GET", path, undefined, opts);
export const post = (path, body = {}, opts) => request("POST", path, body, opts);
export const patch = (path, body, opts) => request("PATCH", path, body, opts);
export const del = (path, opts) => request("DELETE", path, undefined, opts);

/**
 * POST with `stream: true` and read the Server-Sent Events as they arrive (EventSource
 * cannot POST). Calls onEvent(name, data) per event; `data` is parsed JSON, except the
 * final "[DONE]". Resolves when the stream ends; rejects with AbortError on stop.
 */
export async function stream(path, body, { signal, onEvent }) {
  let res;
  try {
    res = await fetch(path, { method: "POST", headers: headers(true), body: JSON.stringify(body), signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "the flashdesk server cannot be reached; is it still running?", "offline");
  }
  if (!res.ok) throw await failure(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let carry = ""; // a chunk's trailing "\r": sse-starlette ends lines with "\r\n", and a chunk may end between the two
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    let text = carry + value;
    carry = text.endsWith("\r") ? "\r" : "";
    if (carry) text = text.slice(0, -1);
    buffer += text.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      dispatch(buffer.slice(0, cut), onEvent);
      buffer = buffer.slice(cut + 2);
    }
  }
  buffer += carry ? "\n" : "";
  if (buffer.trim()) dispatch(buffer, onEvent);
}

function dispatch(frame, onEvent) {
  let name = "message";
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue; // a comment: the server's keep-alive ping
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return;
  const text = data.join("\n");
  if (text === "[DONE]") return onEvent(name, text);
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new ApiError(0, "the server sent a malformed stream event", "bad_stream");
  }
  if (name === "error" || parsed.error) {
    const e = parsed.error || parsed;
    throw new ApiError(500, e.message || "the answer failed", e.code, e.param);
  }
  onEvent(name, parsed);
}
