// What a parse through a backend server could not do (POST /v1/workorders/parse `unavailable`:
// feature -> the server's reason, server/workorders/extract.py; {} when the model runs here).
// Said briefly under the review summary, so nobody takes e.g. the absence of "unsure" marks
// for certainty. Each feature is named in the reader's language (ui/i18n:
// workorders.unavailable.<feature>; a newer one shows its name) with the server's English
// reason beside it as the detail, as review notes keep the server's sentence for codes they lack.

import { h } from "../dom.js";
import { has, t } from "../i18n.js";

/** The note for a record's `unavailable` map, or null when nothing is missing. */
export function unavailableNote(unavailable) {
  const features = Object.entries(unavailable || {});
  if (!features.length) return null;
  const label = (name) => has(`workorders.unavailable.${name}`) ? t(`workorders.unavailable.${name}`) : name;
  return h("div", { class: "wo-unavailable hint", role: "note" },
    h("p", {}, t("workorders.unavailable_title")),
    h("ul", {}, features.map(([name, why]) => h("li", { dataset: { feature: name } },
      label(name), why ? h("span", { class: "wo-unavailable-why" }, ` (${why})`) : null))));
}
