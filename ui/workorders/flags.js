// A parse's review flags in the reader's language, each tied to the field it is about.
//
// The server gives every finding a stable code, the field it is about and its params
// (server/workorders/review.py CODES: review_details for the reasons a person must check,
// code/params on each warning), and an English sentence for logs and the CSV export. The
// page words each code itself (ui/i18n: workorders.flag.<code>); a finding without a code
// (a record from an older flashdesk) is shown as the server wrote it.
// Pure functions apart from t().

import { has, t } from "../i18n.js";

// Findings that explain rather than warn: shown as information, not as something to fix.
const INFO = new Set(["date_from_message"]);

/** One finding ({code, params, message}) in words. */
export function explain(finding) {
  const key = `workorders.flag.${finding.code}`;
  return finding.code && has(key) ? t(key, finding.params || {}) : finding.message;
}

/**
 * Flags of a record: review reasons first (must check), then warnings (worth a look), each
 * {path, severity: "review" | "check" | "info", text}, without repeats. A warning that is
 * also a reason is a "review" flag; a reason that names no field borrows the field of the
 * warning with the same sentence.
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
  const details = rec.details?.length === rec.reasons.length ? rec.details
    : rec.reasons.map((message) => ({ message })); // an older record: sentences only
  for (const d of details) {
    push(d.field || rec.warnings.find((w) => w.message === d.message && w.field)?.field || null, "review", explain(d));
  }
  for (const w of rec.warnings) {
    const severity = rec.reasons.includes(w.message) ? "review" : INFO.has(w.code) ? "info" : "check";
    push(w.field || null, severity, explain(w));
  }
  return out;
}
