// "Models you can download" on the Models page: the tier sentence for this computer, the
// user catalog files that did not load, and one card per catalog entry with what a
// non-engineer needs to decide (download size, memory needed, whether it fits here, its
// speed-up draft, both licences, where it comes from) and the download button.
//
// The recommended entry comes first; entries that do not fit come last and look secondary,
// but keep their button: the user decides. Nothing downloads without a click. Functions
// that build DOM from the page's state (page.js); the button calls page.pull(name).

import { formatBytes, h } from "../dom.js";
import { formatNumber, formatTime, language, t } from "../i18n.js";
import { FASTER, newId } from "./common.js";
import { fitText, speedText, tierSentence } from "./tier.js";

const BIG_DOWNLOAD = 1e9; // from here on the button says the size: nobody should start 16 GB by surprise

/** The sentence at the top of the section (null until the list has loaded). */
export function tierView(page) {
  const tier = page.modelsBody ? tierSentence(page.modelsBody) : null;
  if (!tier) return null;
  return h("p", { class: `tier-line${tier.entry ? " tier-recommend" : ""}` }, tier.text);
}

/** When the processor speeds were measured, under the tier sentence: a figure from a busy day would
 * mislead, and the date says how old it is (null without a measurement, e.g. with a graphics card). */
export function measuredView(page) {
  const at = page.modelsBody?.hardware?.speed_measured_at;
  if (!at || !page.catalog.some((c) => c.speed)) return null;
  return h("p", { class: "hint speed-measured-at" }, t("models.speed_measured_at", { date: formatTime(at) }));
}

/** User catalog files (<home>/catalog/*.json) that were skipped, each with the reason. */
export function problemsView(page) {
  const problems = page.modelsBody?.catalog_problems || [];
  if (!problems.length) return null;
  return h("div", { class: "notice stack catalog-problems", role: "status" },
    problems.map((p) => h("p", {}, t("models.catalog_problem", { file: p.file, error: p.error }))));
}

/** Opened as "#/models/NAME" (the chat page's notice): bring that card into view and focus it, once. */
export function showSpotlight(page) {
  const name = page.spotlight;
  const card = name && page.installed
    ? page.catalogList.querySelector(`.catalog-card[data-model="${CSS.escape(name)}"]`) : null;
  if (!card) return;
  page.spotlight = null;
  page.spotlit = name; // catalogCard keeps the card marked through re-renders
  card.classList.add("spotlight");
  card.scrollIntoView({ block: "center" });
  card.focus({ preventScroll: true });
}

/** The catalog's cards, best first: the recommended entry, then those that fit, then the rest. The
 * default model is left out while it is missing: the page's call to download it shows instead. */
export function catalogView(page) {
  const entries = page.catalog.filter((c) => c.name !== page.ctaMissing);
  page.catalogSection.hidden = !entries.length && !!page.ctaMissing;
  if (!entries.length) return h("p", { class: "muted" },
    page.installed ? t("models.catalog_empty") : t("common.loading"));
  const busy = page.busyJob();
  const hw = page.modelsBody?.hardware;
  const rank = (c) => (c.recommended ? 0 : fitText(c, hw)?.fits === false ? 2 : 1);
  const sorted = entries.map((c, i) => [rank(c), i, c]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map((x) => x[2]);
  return sorted.map((c) => catalogCard(page, c, busy, hw));
}

function catalogCard(page, c, busy, hw) {
  const titleId = newId("c");
  const tracker = page.trackers.get(`pull:${c.name}`);
  const fit = fitText(c, hw);
  const size = c.download_bytes ?? c.size;
  const own = (c.source || "").startsWith("user:");
  const classes = ["card", "catalog-card", "stack", c.recommended ? "recommended" : "",
    fit?.fits === false ? "unfit" : "", page.spotlit === c.name ? "spotlight" : ""];

  const facts = [
    [t("models.download_label"), formatBytes(size)],
    c.memory_bytes ? [t("models.memory_label"), formatBytes(c.memory_bytes)] : null,
    c.speed ? [t("models.speed_label"), speedText(c.speed)] : null, // on a processor: predicted from a measurement here
    [t("models.speedup_label"), draftWords(c)],
    [c.draft ? t("models.license_model") : t("models.license"), c.target?.license || c.license || t("models.unknown")],
    c.draft ? [t("models.license_draft"), c.draft.license || t("models.unknown")] : null,
    [t("models.name"), c.name],
  ];

  // Focusable (and keyed, for the page's re-render) so "#/models/NAME" can take the user to it.
  return h("article", { class: classes.filter(Boolean).join(" "), "aria-labelledby": titleId, tabindex: "-1",
    "data-key": `card:${c.name}`, dataset: { model: c.name } },
  h("div", { class: "row catalog-head" },
    h("h3", { id: titleId, class: "grow" }, c.title || c.name),
    c.recommended ? h("span", { class: "badge ok catalog-recommended" }, t("models.recommended_badge")) : null,
    own ? h("span", { class: "badge catalog-own", title: c.source.slice(5) }, t("models.own_entry")) : null,
    c.installed ? h("span", { class: "badge ok" }, t("models.installed_badge")) : null),
  c.target ? h("p", { class: "hint catalog-from" }, sourceWords(c)) : null,
  c.summary ? h("p", { class: "catalog-summary" }, c.summaries?.[language()] || c.summary) : null,
  fit ? h("p", { class: `catalog-fit ${fit.fits ? "fit-yes" : "fit-no"}` }, fit.text) : null,
  h("dl", { class: "facts" }, facts.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
  tracker ? tracker.el : null,
  c.installed || (tracker && tracker.job.status !== "done") ? null : h("div", { class: "row" },
    h("button", { type: "button", class: fit?.fits === false ? "" : "primary", "data-key": `pull:${c.name}`,
      disabled: !!busy, onclick: () => page.pull(c.name) },
    size >= BIG_DOWNLOAD ? t("models.download_big", { size: formatBytes(size) }) : t("common.download")),
    h("span", { class: "hint" }, busy ? t("models.busy_hint") : t("models.needs_internet"))));
}

/** Which speed-up comes with the entry (its DFlash draft, or prompt lookup alone), and what it did on
 * this computer once the model has run (`measured`, kept beside the model): never a promise before. */
function draftWords(c) {
  const kind = !c.draft ? (c.has_draft ? t("models.catalog_has_draft") : t("models.catalog_lookup"))
    : !c.has_draft ? t("models.catalog_lookup") // a shipped draft this installation lacks
    : c.draft.kind === "dflash1" ? t("models.catalog_dflash1") : t("models.catalog_dflash2");
  const m = c.measured;
  if (!m) return kind;
  const words = { n: formatNumber(m.answers), x: formatNumber(m.speedup, 1), date: formatTime(m.at) };
  return [kind, h("br"), h("span", { class: "hint catalog-measured" },
    t(m.speedup >= FASTER ? "models.catalog_measured" : "models.catalog_measured_flat", words))];
}

/** "from unsloth/Qwen3.8-27B-GGUF", and the draft's repository when it is another one. */
function sourceWords(c) {
  const target = c.target;
  const main = target.source === "pypi" ? t("models.from_pypi", { wheel: target.wheel || target.file })
    : t("models.from_repo", { repo: target.repo });
  const d = c.draft;
  if (!d) return main;
  if (d.source === "shipped") return [main, " · ", t("models.draft_shipped_with")];
  if (d.repo && d.repo !== target.repo) return [main, " · ", t("models.draft_from_repo", { repo: d.repo })];
  return main;
}
