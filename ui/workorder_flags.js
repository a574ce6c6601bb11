// A parse's review flags in the reader's language, each tied to the field it is about.
//
// The server writes its review reasons and warnings as English sentences, meant for logs and
// the audit trail; the page translates them by matching their wording here. A sentence no
// pattern knows is shown as written, so a new server message is never lost, only untranslated.
// Pure functions apart from t().

import { t } from "./i18n.js";

// WHERE THE WORDING COMES FROM: every pattern below matches a sentence written by
//   server/workorders/review.py   review() and its checks: Review.flag() / Review.warn()
//   server/workorders/extract.py  _resolve_date() notes, and assess() (closed early)
//   server/workorders/routes.py   parse(): no sent_date given, and "the parse failed"
// Changing a message there (or adding one) means changing this table, and a new translation
// key under workorders.flag in ui/i18n/*.json.
// Each entry: [pattern, match -> {path (the field, when the sentence names it), text, severity?}].
// Order matters where patterns overlap (the "no date" case before the general date note).
const REASONS = [
  // review.py: a required field is empty ("missing items[0].quantity")
  [/^missing (\S+)$/, (m) => ({ path: m[1], text: t("workorders.flag.missing") })],
  // review.py: written through tokens the model was unsure of
  [/^uncertain (\S+) \(the model's probability [\d.]+\)$/, (m) => ({ path: m[1], text: t("workorders.flag.uncertain") })],
  // review.py: a contact (Python repr: '...' or "...") that the message does not contain
  [/^contact (['"])(.*)\1 does not appear in the message$/, (m) => ({ path: "contact", text: t("workorders.flag.not_in_message", { value: m[2] }) })],
  // review.py: a quantity that is not among the message's numbers
  [/^(\S+) (-?\d+) does not appear in the message$/, (m) => ({ path: m[1], text: t("workorders.flag.not_in_message", { value: m[2] }) })],
  // review.py: date checks
  [/^(\S+) (\S+) is before the message was sent \((\S+)\)$/, (m) => ({ path: m[1], text: t("workorders.flag.before_sent", { value: m[2], sent: m[3] }) })],
  [/^(\S+) (\S+) is not a calendar date$/, (m) => ({ path: m[1], text: t("workorders.flag.not_a_date", { value: m[2] }) })],
  [/^(\S+) is more than a year after the message was sent$/, (m) => ({ path: null, text: t("workorders.flag.far_future", { value: m[1] }) })],
  // review.py: a customer name not copied from the message (a warning on customer_name)
  [/^(['"])(.*)\1 is not written like this in the message$/, (m) => ({ path: null, text: t("workorders.flag.not_copied", { value: m[2] }) })],
  // extract.py: the date field replaced by the message's own date words
  [/^the model wrote (.*); from the message: no date$/, () => ({ path: null, text: t("workorders.flag.date_none") })],
  [/^the model wrote (.*); from the message: (.*)$/, (m) => ({ path: null, text: t("workorders.flag.date_from_message", { said: m[2] }), severity: "info" })],
  [/^the message gives several dates \((.*)\); the earliest is used$/, (m) => ({ path: null, text: t("workorders.flag.several_dates", { said: m[1] }) })],
  // review.py: the answer failed the schema or was cut off (the detail stays as the server wrote it)
  [/^the answer is not valid: (.*)$/, (m) => ({ path: null, text: t("workorders.flag.invalid", { detail: m[1] }) })],
  // review.py: the model set needs_review itself
  [/^the answer itself says needs_review$/, () => ({ path: "needs_review", text: t("workorders.flag.model_says") })],
  // review.py (counted by without_repeats)
  [/^the model wrote the same item again and again; (\d+) exact repeats were removed$/, (m) => ({ path: "items", text: t("workorders.flag.repeats", { n: m[1] }) })],
  // extract.py: assess(), when the engine closed the JSON to fit max_tokens
  [/^the answer ran long and was closed early/, () => ({ path: null, text: t("workorders.flag.closed_early") })],
  // routes.py: parse() without sent_date
  [/^not given: relative dates were resolved against today \((\S+)\)$/, (m) => ({ path: null, text: t("workorders.flag.no_sent_date", { date: m[1] }) })],
  // routes.py: the engine failed; the audit trail keeps the failed parse
  [/^the parse failed$/, () => ({ path: null, text: t("workorders.flag.failed") })],
];

/** One server sentence -> {path, text, severity?}; unknown wording comes back as written. */
export function explain(message) {
  for (const [re, fn] of REASONS) {
    const m = re.exec(message);
    if (m) return fn(m);
  }
  return { path: null, text: message };
}

/**
 * Flags of a record: review reasons first (must check), then warnings (worth a look), each
 * {path, severity: "review" | "check" | "info", text}, without repeats. A warning whose
 * sentence is also a reason is a "review" flag; a reason that names no field borrows the
 * field of the warning with the same sentence.
 */
export function flagsOf(rec) {
  const out = [];
  const seen = new Set();
  const push = (path, severity, text) => {
    const key = `${path}|${text}`;
    if (!seen.has(key)) {
      seen.add(key);
      out.push({ path, severity, text });
    }
  };
  for (const r of rec.reasons) {
    const e = explain(r);
    push(e.path || rec.warnings.find((w) => w.message === r && w.field)?.field || null, "review", e.text);
  }
  for (const w of rec.warnings) {
    const e = explain(w.message);
    const severity = rec.reasons.includes(w.message) ? "review" : e.severity || "check";
    push(w.field || e.path, severity, e.text);
  }
  return out;
}
