// The chat page's first-run notice: on a computer that can run a stronger model than it has (a
// graphics card, a Mac, or a processor fast enough for one), the Models page's tier sentence
// once, with a button that opens the Models page at that model's card ("#/models/NAME"). It
// never downloads anything: the download still needs the user's click there. "No, thanks" is
// remembered in localStorage, for that recommendation (a new graphics card, a new recommendation, one new notice).
// Nothing shows where nothing is recommended (a processor too slow for more than the default),
// nor when the recommended model is installed.

import { get } from "../api.js";
import { h } from "../dom.js";
import { t } from "../i18n.js";
import { tierSentence } from "../models/tier.js";

const STORAGE_KEY = "flashdesk.tier_notice.dismissed"; // the name of the model the user said no to

/** The notice element, or null when there is nothing to say (or the list did not load: no notice then). */
export async function tierNotice({ navigate, signal }) {
  let body;
  try {
    body = await get("v1/store/models", { signal });
  } catch {
    return null; // the chat works without it; the Models page shows what failed
  }
  const tier = tierSentence(body);
  const entry = tier?.entry;
  if (!entry || entry.installed || localStorage.getItem(STORAGE_KEY) === entry.name) return null;

  const titleId = "tier-notice-title";
  const box = h("section", { class: "notice tier-notice stack", "aria-labelledby": titleId },
    h("h2", { id: titleId }, t("chat.tier_title")),
    h("p", { class: "tier-sentence" }, tier.text),
    h("p", { class: "hint" }, t("chat.tier_note")),
    h("div", { class: "row" },
      h("button", { type: "button", class: "primary",
        onclick: () => navigate(`#/models/${encodeURIComponent(entry.name)}`) }, t("chat.tier_open")),
      h("button", { type: "button", class: "ghost", onclick: () => {
        localStorage.setItem(STORAGE_KEY, entry.name);
        box.remove();
        document.getElementById("chat-input")?.focus(); // focus must not fall back to the top of the page
      } }, t("chat.tier_dismiss"))));
  return box;
}
