// Every word the UI shows comes from one JSON file per language (ui/i18n/<lang>.json).
// Keys are dotted paths ("chat.send"); {name} placeholders are filled from `vars`.
// A key missing in the chosen language falls back to English, then to the key itself,
// so a forgotten translation shows up as readable English rather than a blank.

export const LANGUAGES = [
  { code: "en", name: "English" },
  { code: "zh-TW", name: "繁體中文" },
];
const STORAGE_KEY = "flashdesk.lang";

let strings = {};
let fallback = {};
let current = "en";

/** The saved choice, else the browser's: any Chinese preference gets zh-TW, the one Chinese we ship. */
export function preferredLanguage() {
  const saved = localStorage.getItem(STORAGE_KEY);
  if (LANGUAGES.some((l) => l.code === saved)) return saved;
  for (const tag of navigator.languages || [navigator.language || "en"]) {
    const lower = tag.toLowerCase();
    if (lower.startsWith("zh")) return "zh-TW";
    if (lower.startsWith("en")) return "en";
  }
  return "en";
}

async function fetchStrings(code) {
  const res = await fetch(`i18n/${code}.json`, { cache: "no-cache" });
  if (!res.ok) throw new Error(`cannot load the ${code} strings (HTTP ${res.status})`);
  return res.json();
}

export async function setLanguage(code, { remember = false } = {}) {
  if (!LANGUAGES.some((l) => l.code === code)) code = "en";
  if (!Object.keys(fallback).length) fallback = await fetchStrings("en");
  strings = code === "en" ? fallback : await fetchStrings(code);
  current = code;
  document.documentElement.lang = code;
  if (remember) localStorage.setItem(STORAGE_KEY, code);
}

export function language() {
  return current;
}

function lookup(table, key) {
  let node = table;
  for (const part of key.split(".")) {
    if (node === null || typeof node !== "object") return undefined;
    node = node[part];
  }
  return typeof node === "string" ? node : undefined;
}

/** Whether the chosen language (or English) has a string for `key`. */
export function has(key) {
  return (lookup(strings, key) ?? lookup(fallback, key)) !== undefined;
}

/**
 * What to show for an API error: the reader's language for the common codes (ui/i18n/*.json
 * "errors"), else the server's own sentence, which is English but says what to do next.
 */
export function errorText(err) {
  return err?.code && has(`errors.${err.code}`) ? t(`errors.${err.code}`) : err?.message || String(err);
}

export function t(key, vars = {}) {
  const text = lookup(strings, key) ?? lookup(fallback, key) ?? key;
  return text.replace(/\{(\w+)\}/g, (m, name) => (name in vars ? String(vars[name]) : m));
}

/** Numbers in the reader's own style (1,234.5 / 1,234.5 in zh-TW too, but per locale). */
export function formatNumber(n, digits = 0) {
  return new Intl.NumberFormat(current, { maximumFractionDigits: digits, minimumFractionDigits: digits }).format(n);
}

/** ["A", "B", "C"] -> "A, B, and C" (en) or "A、B和C" (zh-TW): the reader's own way of listing. */
export function formatList(items) {
  return new Intl.ListFormat(current, { style: "long", type: "conjunction" }).format(items);
}

export function formatTime(seconds) {
  return new Intl.DateTimeFormat(current, { dateStyle: "medium", timeStyle: "short" }).format(new Date(seconds * 1000));
}

/**
 * Fill static markup: data-i18n="key" sets the text, data-i18n-attr="placeholder:key,aria-label:key"
 * sets attributes. Views built in code call t() directly instead.
 */
export function translate(root) {
  for (const el of root.querySelectorAll("[data-i18n]")) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll("[data-i18n-attr]")) {
    for (const pair of el.dataset.i18nAttr.split(",")) {
      const [attr, key] = pair.split(":").map((s) => s.trim());
      if (attr && key) el.setAttribute(attr, t(key));
    }
  }
}
