// The shell: language, navigation between the three pages, and the server's status.
// Each page is a folder (chat/, workorders/, models/): its page.js exports
// `mount(root, ctx) -> {unmount?, route?}` and its page.css styles it; its other modules sit
// beside them, named for what they hold (the folder already says whose). What the pages share
// (api.js, dom.js, i18n.js) stays here. ctx gives a page the route argument (e.g. a
// conversation id), navigate(), the latest /health answer, and refreshHealth() to ask for it
// again soon. Pages import nothing from the shell.

import { setApiKey } from "./api.js";
import { h } from "./dom.js";
import { LANGUAGES, language, preferredLanguage, setLanguage, t, translate } from "./i18n.js";

const PAGES = {
  chat: () => import("./chat/page.js"),
  workorders: () => import("./workorders/page.js"),
  models: () => import("./models/page.js"),
};

const viewRoot = document.getElementById("view");
let mounted = null; // {name, page, arg}
let health = null;
const healthListeners = new Set();

function parseRoute() {
  const [, name = "chat", ...rest] = location.hash.replace(/^#/, "").split("/");
  return { name: name in PAGES ? name : "chat", arg: rest.length ? decodeURIComponent(rest.join("/")) : null };
}

export function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

async function route({ force = false } = {}) {
  const { name, arg } = parseRoute();
  for (const a of document.querySelectorAll(".tabs a")) {
    if (a.dataset.view === name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!force && mounted && mounted.name === name && mounted.page.route) {
    mounted.arg = arg;
    return mounted.page.route(arg);
  }
  mounted?.page.unmount?.();
  mounted = null;
  viewRoot.replaceChildren();
  const module = await PAGES[name]();
  document.title = `${t(`app.${name}`)} · flashdesk`;
  const ctx = {
    arg, navigate, refreshHealth,
    health: () => health,
    onHealth(fn) {
      healthListeners.add(fn);
      return () => healthListeners.delete(fn);
    },
  };
  mounted = { name, arg, page: module.mount(viewRoot, ctx) || {} };
}

// -- server status ------------------------------------------------------------------

async function pollHealth() {
  let next = 3000;
  try {
    const res = await fetch("health", { cache: "no-store" });
    health = await res.json();
    if (health.status === "ready") next = 15000;
  } catch {
    health = { status: "offline" };
  }
  showHealth();
  for (const fn of healthListeners) fn(health);
  setTimeout(pollHealth, next);
}

/** Ask for /health again soon (after a model switch, say), rather than at the next tick. */
function refreshHealth() {
  setTimeout(async () => {
    try {
      health = await (await fetch("health", { cache: "no-store" })).json();
    } catch {
      health = { status: "offline" };
    }
    showHealth();
    for (const fn of healthListeners) fn(health);
  }, 0);
}

function showHealth() {
  const el = document.getElementById("server-status");
  const s = health?.status || "offline";
  el.dataset.state = s;
  el.textContent = s === "ready" ? t("app.status_ready", { model: health.model })
    : s === "loading" ? t("app.status_loading")
    : s === "error" ? t("app.status_error")
    : t("app.status_offline");
  el.title = health?.error || "";
}

// -- language -----------------------------------------------------------------------

function buildLanguagePicker() {
  const select = document.getElementById("language");
  select.replaceChildren(...LANGUAGES.map((l) =>
    h("option", { value: l.code, selected: l.code === language() }, l.name)));
  select.addEventListener("change", async () => {
    await setLanguage(select.value, { remember: true });
    translate(document);
    showHealth();
    route({ force: true }); // pages build their text in code: build them again
  });
}

// -- API key ------------------------------------------------------------------------

function watchForKey() {
  const dialog = document.getElementById("key-dialog");
  window.addEventListener("flashdesk:need-key", () => {
    if (!dialog.open) dialog.showModal();
  });
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "save") {
      setApiKey(document.getElementById("key-input").value.trim());
      route({ force: true });
    }
  });
}

async function start() {
  await setLanguage(preferredLanguage());
  translate(document);
  buildLanguagePicker();
  watchForKey();
  // Page routes are "#/name"; any other hash (an in-page anchor) is not a navigation.
  window.addEventListener("hashchange", () => location.hash.startsWith("#/") && route());
  document.querySelector(".skip-link").addEventListener("click", (e) => {
    e.preventDefault(); // "#view" would look like a route; move the focus instead
    viewRoot.focus();
  });
  pollHealth();
  await route();
}

start();
