// A parse's review flags put where a person will act on them: each on its field in the form
// (form.js flag()), and a summary box above the result that counts the fields to
// check and links to each. Flags that name no field the form has (a note about the whole
// answer) are listed in the summary as text. "info" flags (e.g. a date taken from the
// message's own words) are shown on the field but neither counted nor summarised.

import { clear, h } from "../dom.js";
import { t } from "../i18n.js";
import { flagsOf } from "./flags.js";
import { pathLabel } from "./form.js";

function plural(key, n) {
  return t(n === 1 ? `${key}_one` : `${key}_other`, { n });
}

/** "{field}: {text}" from the i18n pattern, with the field as a button. */
function linkLine(button, text) {
  const [before, after = ""] = t("workorders.summary_line", { text }).split("{field}");
  return [before, button, after];
}

/**
 * Flag `form` (null when the record has no fields) with the record's flags and fill `summary`.
 * Returns {flagged: Set of flagged field paths (for the marks in the original text),
 * flagCount: fields and notes to look at (0 -> the page may say "nothing flagged")}.
 */
export function showReview(summary, rec, form, schema) {
  const flags = flagsOf(rec);
  const onField = [];
  const general = [];
  for (const f of flags) {
    const control = f.path && form ? form.flag(f.path, f.severity, f.text) : null;
    if (control) onField.push({ ...f, control });
    else general.push(f);
  }
  const real = onField.filter((f) => f.severity !== "info");
  const flagged = new Set(real.map((f) => f.path));
  // Table cells count once per field: "items[0].quantity" and "items[1].quantity" are one field.
  const fieldsOf = (list) => new Set(list.map((f) => f.path.replace(/\[\d+\]$/, ""))).size;
  const must = fieldsOf(real.filter((f) => f.severity === "review"));
  const look = fieldsOf(real);
  const notes = general.filter((f) => f.severity !== "info");
  const flagCount = look + notes.length;
  if (!real.length && !notes.length && rec.status === "ok") {
    summary.className = "wo-summary wo-summary-ok";
    summary.replaceChildren(h("p", {}, h("span", { "aria-hidden": "true" }, "✓ "), t("workorders.nothing_flagged")));
    return { flagged, flagCount };
  }
  summary.className = "wo-summary notice";
  const goto = (f) => h("button", {
    type: "button", class: "wo-link",
    onclick: () => {
      f.control.scrollIntoView({ block: "center", behavior: "smooth" });
      f.control.focus({ preventScroll: true });
    },
  }, pathLabel(f.path, schema));
  clear(summary,
    h("p", { class: "wo-summary-title" }, h("span", { "aria-hidden": "true" }, "⚠ "),
      h("strong", {}, must ? plural("workorders.flags_count", must)
        : look ? plural("workorders.look_count", look) : t("workorders.check_answer"))),
    real.length ? h("ul", { class: "wo-summary-list" }, real.map((f) => h("li", { class: `wo-flag-${f.severity}` },
      linkLine(goto(f), f.text),
      f.severity === "review" ? h("span", { class: "wo-must" }, t("workorders.must_check")) : null))) : null,
    notes.length ? h("ul", { class: "wo-summary-list" }, notes.map((f) => h("li", {}, f.text))) : null);
  return { flagged, flagCount };
}
