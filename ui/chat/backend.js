// What the chat page says about where answers are written. With `flashdesk serve --backend`
// (GET /health carries `backend: {url, model, status}`) the messages go to that server, so the
// page must not claim "written on this computer". The backend is remembered across health
// answers: while it is down or still being reached, /health may say nothing of it, and the
// page would otherwise fall back to the local wording for a while.

import { t } from "../i18n.js";

let seen = null; // the last backend /health named; a ready server without one drives none

/** The backend this server drives ({url, model, ...}), or null when it writes answers itself. */
export function backendOf(health) {
  if (health?.backend) seen = health.backend;
  else if (health?.status === "ready") seen = null;
  return seen;
}

/** "host:port" of a backend URL, as a person would read it; the URL itself when it does not parse. */
export function hostOf(url) {
  try {
    return new URL(url).host;
  } catch {
    return url;
  }
}

/** The welcome sentence: on this computer, or on the backend server at host:port. */
export function welcomeText(health) {
  const backend = backendOf(health);
  return backend ? t("chat.welcome_text_backend", { host: hostOf(backend.url) }) : t("chat.welcome_text");
}
