// The customer's original message beside the form, with every value the form holds marked
// where the message says it, so a person can check each field against its source at a
// glance. Marks follow the CURRENT (edited) values, not the model's answer; flagged fields
// get a warning colour; focusing a field lights up its marks and scrolls to the first.
// The text goes in as text nodes and <mark> elements only.

import { h } from "../dom.js";
import { pathLabel } from "./form.js";

function escapeRe(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * [start, end, path] where a field's current value is written in the message, in order and
 * without overlaps (at one place, the longer match wins). Numbers match whole, as written or
 * with thousands commas ("1,200"); text matches ignoring case, from 2 characters up.
 */
export function findValues(text, leaves) {
  const hits = [];
  for (const leaf of leaves) {
    if (!["text", "longtext", "number", "list"].includes(leaf.kind)) continue;
    const v = leaf.read();
    const values = Array.isArray(v) ? v : [v];
    for (const one of values) {
      let re = null;
      if (typeof one === "number" && one > 0) {
        const forms = [String(one), one.toLocaleString("en-US")].filter((f, i, a) => a.indexOf(f) === i).map(escapeRe);
        re = new RegExp(`(?<![\\d.,])(?:${forms.join("|")})(?![\\d]|[.,]\\d)`, "g");
      } else if (typeof one === "string" && one.trim().length >= 2) {
        re = new RegExp(escapeRe(one.trim()), "giu");
      }
      if (!re) continue;
      for (const m of text.matchAll(re)) hits.push([m.index, m.index + m[0].length, leaf.path]);
    }
  }
  hits.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  const kept = [];
  for (const hit of hits) if (!kept.length || hit[0] >= kept[kept.length - 1][1]) kept.push(hit);
  return kept;
}

/**
 * Fill `pre` with `text`, marking the values of `leaves` (the form's leaves()). A mark is
 * "flagged" when its field, or a field it sits in, is in `flagged` (paths); its tooltip is
 * the field's name from `schema`.
 */
export function paintOriginal(pre, text, leaves, flagged, schema) {
  const hits = findValues(text, leaves);
  const parts = [];
  let at = 0;
  for (const [a, b, path] of hits) {
    if (a > at) parts.push(text.slice(at, a));
    const isFlagged = [...(flagged || [])].some((p) => p === path || path.startsWith(`${p}.`) || path.startsWith(`${p}[`));
    parts.push(h("mark", { class: isFlagged ? "wo-mark wo-mark-flag" : "wo-mark", dataset: { path }, title: pathLabel(path, schema) }, text.slice(a, b)));
    at = b;
  }
  parts.push(text.slice(at));
  pre.replaceChildren(...parts);
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
