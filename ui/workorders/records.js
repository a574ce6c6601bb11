// One parse as the Work orders page holds it, whichever way it arrived: just made
// (POST /v1/workorders/parse) or read back from the audit log (GET /v1/workorders[/id]).
// The two answers name the same things differently; the page and the history list read
// only this shape. Also how a record's template and status are shown, shared by both.

import { h } from "../dom.js";
import { t } from "../i18n.js";
import { tr } from "./form.js";

/** The answer of POST /v1/workorders/parse, for the message `text` that was sent. */
export function fromParse(res, text) {
  return {
    id: res.id, template: res.template, model: res.model, time: res.created, text, sentDate: res.sent_date,
    output: res.result, valid: res.valid, needsReview: res.needs_review, reasons: res.review_reasons || [],
    details: res.review_details || [], warnings: res.warnings || [],
    error: res.valid ? null : (res.errors || []).join("; ") || null,
    status: !res.valid ? "invalid" : res.needs_review ? "needs_review" : "ok",
    unavailable: res.unavailable || {}, // through a backend: what it could not do (unavailable.js)
    sources: res.sources || {}, // copy fields: where in `text` each was copied from (marks.js)
  };
}

/** One row of the audit log. */
export function fromAudit(r) {
  return {
    id: r.id, template: r.template, model: r.model, time: Date.parse(r.created_at) / 1000, text: r.input_text,
    sentDate: r.sent_date, output: r.output, valid: r.valid, needsReview: r.needs_review,
    reasons: r.review_reasons || [], details: r.review_details || [], warnings: r.warnings || [], error: r.error,
    status: r.status, unavailable: r.unavailable || {}, // kept since audit log version 3
    sources: r.sources || {}, // kept since audit log version 4; {} for older records
  };
}

/** A template's name in the reader's language: the i18n file, else its title, else its name. */
export function templateName(name, title) {
  return tr(`workorders.templates.${name}`, title || name);
}

/** ✓/⚠ and the status in words: the icon is decoration, the words are what is read out. */
export function statusBadge(status) {
  const cls = status === "ok" ? "badge ok" : status === "error" ? "badge wo-badge-error" : "badge warn";
  const icon = status === "ok" ? "✓" : "⚠";
  return h("span", { class: cls }, h("span", { "aria-hidden": "true" }, `${icon} `), t(`workorders.status.${status}`));
}
