// The customer's original message beside the form, with every value the form holds marked
// where the message says it, so a person can check each field against its source at a
// glance. Marks follow the CURRENT (edited) values, not the model's answer; flagged fields
// get a warning colour; focusing a field lights up its marks and scrolls to the first, and
// clicking a mark (or Enter/Space on it) goes to its field.
// A copy field (x-copy in the schema) comes with `sources`, the exact spans the model copied
// it from: while its value is unchanged those spans are marked, not a guess; an edited value
// is guessed again, since the spans no longer spell it.
// The text goes in as text nodes and <mark> elements only.

import { h } from "../dom.js";
import { t } from "../i18n.js";
import { nodeAt, pathLabel } from "./form.js";

const MARKED = ["text", "longtext", "number", "list"];

function escapeRe(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * code point offset -> UTF-16 index of `text`. The server counts Python string indices (code
 * points); JS strings count UTF-16 units, so every character past the BMP (an emoji, a rare
 * CJK ideograph) before a span shifts it by one. Offsets past the end give undefined.
 */
export function utf16Offsets(text) {
  if (!/[\uD800-\uDFFF]/.test(text)) return (cp) => (cp <= text.length ? cp : undefined); // nothing to shift
  const at = [0];
  for (const ch of text) at.push(at[at.length - 1] + ch.length); // for..of walks code points
  return (cp) => at[cp];
}

/** The separator of the copy field at `path` ("contact" -> "; "), null for one copy or unknown. */
function separatorOf(schema, path) {
  const spec = schema ? (nodeAt(schema, path) || {})["x-copy"] : null;
  return spec && typeof spec === "object" && typeof spec.separator === "string" ? spec.separator : null;
}

/**
 * Whether `value` is still what the copied `parts` spell. Without the schema's separator (a parse
 * whose template is gone) several parts must be joined by one same, non-empty string.
 */
function spells(value, parts, sep) {
  if (typeof value !== "string") return false;
  if (sep !== null || parts.length === 1) return value === parts.join(sep ?? "");
  if (!value.startsWith(parts[0])) return false;
  const gap = value.indexOf(parts[1], parts[0].length) - parts[0].length;
  return gap > 0 && value === parts.join(value.slice(parts[0].length, parts[0].length + gap));
}

/** [[start, end], ...] in UTF-16 of `spans` (code points), null when one is not a span of the text. */
function toUtf16(spans, at) {
  if (!Array.isArray(spans) || !spans.length) return null;
  const out = [];
  for (const s of spans) {
    const ok = Array.isArray(s) && Number.isInteger(s[0]) && Number.isInteger(s[1]) && s[0] >= 0 && s[0] < s[1];
    if (!ok) return null;
    const [a, b] = [at(s[0]), at(s[1])];
    if (a === undefined || b === undefined) return null;
    out.push([a, b]);
  }
  return out;
}

function guess(text, one, path) {
  let re = null;
  if (typeof one === "number" && one > 0) {
    const forms = [String(one), one.toLocaleString("en-US")].filter((f, i, a) => a.indexOf(f) === i).map(escapeRe);
    re = new RegExp(`(?<![\\d.,])(?:${forms.join("|")})(?![\\d]|[.,]\\d)`, "g");
  } else if (typeof one === "string" && one.trim().length >= 2) {
    re = new RegExp(escapeRe(one.trim()), "giu");
  }
  return re ? [...text.matchAll(re)].map((m) => [m.index, m.index + m[0].length, path, false]) : [];
}

/** In order, without overlaps: at one place the longer wins, else the earlier. */
function apart(hits) {
  hits.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  const kept = [];
  for (const hit of hits) if (!kept.length || hit[0] >= kept[kept.length - 1][1]) kept.push(hit);
  return kept;
}

/**
 * [start, end, path, copied] where a field's current value is written in the message, in order
 * and without overlaps. `copied`: the exact span of `sources` (path -> [[start, end], ...] in
 * code points, a list's items as "tags[0]"), used while the value still equals what they spell;
 * such marks win over guesses. Guesses: numbers match whole, as written or with thousands commas
 * ("1,200"); text matches ignoring case, from 2 characters up; at one place the longer wins.
 */
export function findValues(text, leaves, sources = {}, schema = null) {
  const exact = [];
  const guessed = [];
  const at = utf16Offsets(text);
  for (const leaf of leaves) {
    if (!MARKED.includes(leaf.kind)) continue;
    const v = leaf.read();
    const values = Array.isArray(v) ? v : [v];
    // sources name values as the model wrote them: a table row keeps its first index, an added row has none
    const origin = "origin" in leaf ? leaf.origin : leaf.path;
    values.forEach((one, i) => {
      const key = origin !== null && (leaf.kind === "list" ? `${origin}[${i}]` : origin);
      const spans = key && Object.hasOwn(sources || {}, key) ? toUtf16(sources[key], at) : null;
      const parts = spans && spans.map(([a, b]) => text.slice(a, b));
      const unchanged = parts && spells(one, parts, separatorOf(schema, key));
      if (unchanged) exact.push(...spans.map(([a, b]) => [a, b, leaf.path, true]));
      else guessed.push(...guess(text, one, leaf.path));
    });
  }
  const copied = apart(exact);
  const free = guessed.filter((g) => !copied.some((c) => g[0] < c[1] && c[0] < g[1]));
  return [...copied, ...apart(free)].sort((a, b) => a[0] - b[0]);
}

/**
 * Fill `pre` with `text`, marking the values of `leaves` (the form's leaves()). A mark is
 * "flagged" when its field, or a field it sits in, is in `flagged` (paths); its tooltip is
 * the field's name from `schema`, and says so when the value was copied from there.
 * Returns how many marks are exact copies (the page shows their legend only then).
 */
export function paintOriginal(pre, text, leaves, flagged, schema, sources = {}) {
  const hits = findValues(text, leaves, sources, schema);
  const parts = [];
  let at = 0;
  for (const [a, b, path, copied] of hits) {
    if (a > at) parts.push(text.slice(at, a));
    const isFlagged = [...(flagged || [])].some((p) => p === path || path.startsWith(`${p}.`)
      || path.startsWith(`${p}[`));
    const cls = ["wo-mark", isFlagged && "wo-mark-flag", copied && "wo-mark-copied"].filter(Boolean).join(" ");
    const field = pathLabel(path, schema);
    // a button: Enter/Space or a click goes to the field (wireMarks)
    parts.push(h("mark", {
      class: cls, dataset: { path }, tabindex: "0", role: "button",
      title: copied ? t("workorders.mark_copied", { field }) : field,
    }, text.slice(a, b)));
    at = b;
  }
  parts.push(text.slice(at));
  pre.replaceChildren(...parts);
  return hits.filter((x) => x[3]).length;
}

/** The legend of exact-copy marks; the page shows it only while some mark is one (paintOriginal's count). */
export function copiedLegend() {
  return h("p", { class: "hint", hidden: true }, h("mark", { class: "wo-mark wo-mark-copied wo-legend" },
    t("workorders.legend_copied")), " ", t("workorders.legend_copied_hint"));
}

/** Light up the marks of `leaf` (none when null) and scroll `pre` to the first if it is out of view. */
export function showActive(pre, leaf) {
  for (const m of pre.querySelectorAll(".wo-mark-active")) m.classList.remove("wo-mark-active");
  if (!leaf) return;
  const marks = [...pre.querySelectorAll("mark")].filter((m) => m.dataset.path === leaf.path);
  for (const m of marks) m.classList.add("wo-mark-active");
  if (marks[0]) {
    const box = pre.getBoundingClientRect();
    const r = marks[0].getBoundingClientRect();
    if (r.top < box.top || r.bottom > box.bottom) pre.scrollTop += r.top - box.top - box.height / 3;
  }
}

/**
 * Tie `pre`'s marks to the form `formOf()` gives (null when none): a field that gets focus lights
 * up its marks; a click on a mark, or Enter/Space on one, focuses its field and scrolls to it.
 */
export function wireMarks(pre, formBox, formOf) {
  formBox.addEventListener("focusin", (e) => showActive(pre, formOf()?.leaves().find((l) => l.control === e.target)));
  const go = (e) => {
    const mark = e.target.closest?.("mark.wo-mark[data-path]");
    const leaf = mark && formOf()?.leaves().find((l) => l.path === mark.dataset.path);
    if (!leaf) return;
    e.preventDefault(); // Space would scroll the message instead
    leaf.control.scrollIntoView({ block: "center", behavior: "smooth" });
    leaf.control.focus({ preventScroll: true }); // as the summary's links do (summary.js)
  };
  pre.addEventListener("click", go);
  pre.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") go(e);
  });
}
