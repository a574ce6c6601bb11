// The cards of the Models page: one per installed model (its facts, speed-up, job and
// buttons) and the call to download the default model when it is missing (the catalog's
// cards are catalog.js). Functions that build DOM from the page's state; the buttons call the page's
// actions (pull, useModel, pairDraft, removeDraft, deleteModel), which re-render.
//
// Every button carries a data-key, so the page's re-render can put focus back on it.

import { formatBytes, h } from "../dom.js";
import { formatTime, t } from "../i18n.js";
import { newId } from "./common.js";
import { speedNow } from "./hardware.js";

/** "Download the recommended model": shown above everything while the default model is missing. */
export function ctaCard(page, entry) {
  const titleId = newId("cta");
  const tracker = page.trackers.get(`pull:${entry.name}`);
  const busy = page.busyJob();
  return h("section", { class: "card models-cta stack", "aria-labelledby": titleId },
    h("h2", { id: titleId }, t("models.cta_title")),
    h("p", {}, t("models.cta_body", { title: entry.title || entry.name, size: formatBytes(entry.size) })),
    tracker ? tracker.el : null,
    tracker && tracker.job.status !== "done" ? null : h("div", { class: "row" },
      h("button", { class: "primary", type: "button", "data-key": `pull:${entry.name}`, disabled: !!busy,
        onclick: () => page.pull(entry.name) },
        t("models.download_size", { size: formatBytes(entry.size) })),
      h("span", { class: "hint" }, busy ? t("models.busy_hint") : t("models.needs_internet"))));
}

/** The installed models, or why there is no list (yet). */
export function installedView(page) {
  if (page.listError) {
    return h("div", { class: "error-box", role: "alert" },
      h("p", {}, t("models.list_error", { message: page.listError })),
      h("button", { type: "button", "data-key": "retry-list", onclick: () => page.loadModels() }, t("common.retry")));
  }
  if (!page.installed) return h("p", { class: "muted" }, t("common.loading"));
  if (!page.installed.length) return h("p", { class: "muted" }, t("models.none_installed"));
  return page.installed.map((m) => modelCard(page, m));
}

function modelCard(page, m) {
  const titleId = newId("m");
  const entry = page.catalog.find((c) => c.name === m.name && m.source === `catalog:${c.name}`);
  const switchingTo = page.switching?.name === m.name;
  const loading = m.loading || switchingTo;
  const busy = page.busyJob();
  const healthLoading = page.health?.status === "loading" || !!page.switching;
  const tracker = page.trackers.get(`pair:${m.name}`);
  const jobHere = tracker?.job.status === "running";
  const error = page.cardErrors.get(m.name);

  const badge = m.serving ? h("span", { class: "badge ok model-in-use" }, t("models.in_use"))
    : loading ? h("span", { class: "badge warn" }, t("models.loading_badge")) : null;

  const facts = [
    [t("models.size"), formatBytes(m.size)],
    [t("models.architecture"), m.architecture || t("models.unknown")],
    [t("models.source"), sourceText(m.source)],
    m.added ? [t("models.added"), formatTime(m.added)] : null,
    [t("models.draft"), m.draft
      ? h("span", {}, h("span", { class: "badge ok" }, t("models.draft_yes")), " ",
        h("span", { class: "hint" }, draftSourceText(m.draft)))
      : h("span", { class: "muted" }, t("models.draft_none"))],
  ];
  // Expected from the file (server: gguf_tools/rollback.py): a model whose memory cannot take back a wrong guess.
  if (m.rollback?.speculation === "refused") {
    facts.push([t("models.rollback_label"), h("div", { class: "warn-text rollback-refused" },
      t("models.rollback_refused", { architecture: m.architecture || t("models.unknown") }))]);
  }
  const speed = m.serving ? speedNow(m, page.health) : null;
  if (speed) {
    facts.push([t("models.speed_now"), h("span", {}, h("span", { class: speed.cls }, speed.text),
      speed.why ? h("span", { class: "hint speed-why" }, " ", speed.why) : null)]);
  }

  // Why a button is disabled is said in words, not only by greying it out.
  const deleteHintId = newId("del");
  const deleteBlocked = m.serving || loading ? t("models.delete_in_use") : busy ? t("models.busy_hint") : null;
  const useBlocked = healthLoading || !!busy;

  const actions = h("div", { class: "row model-actions" },
    m.serving ? null : h("button", { type: "button", class: "primary", "data-key": `use:${m.name}`,
      disabled: useBlocked || loading, onclick: () => page.useModel(m) }, t("models.use")),
    h("button", { type: "button", "data-key": `pair:${m.name}`, disabled: !!busy,
      onclick: () => page.pairDraft(m) }, m.draft ? t("models.pair_other") : t("models.pair")),
    m.draft ? h("button", { type: "button", "data-key": `unpair:${m.name}`, disabled: !!busy,
      onclick: () => page.removeDraft(m) }, t("models.unpair")) : null,
    h("button", { type: "button", class: "danger", "data-key": `delete:${m.name}`, disabled: !!deleteBlocked,
      "aria-describedby": deleteBlocked ? deleteHintId : null, onclick: () => page.deleteModel(m) },
    t("models.delete")));

  return h("article", { class: `card model-card stack${m.serving ? " serving" : ""}`, "aria-labelledby": titleId,
    dataset: { model: m.name } },
  h("div", { class: "row model-head" },
    h("h3", { id: titleId, class: "grow" }, m.name), badge),
  entry?.title ? h("p", { class: "muted model-title" }, entry.title) : null,
  loading ? h("p", { class: "notice", role: "status" }, t("models.loading_text")) : null,
  h("dl", { class: "facts" }, facts.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
  tracker ? tracker.el : null,
  page.reloadNeeded.has(m.name) && m.serving ? h("div", { class: "notice stack" },
    h("p", {}, t("models.reload_needed")),
    h("div", {}, h("button", { type: "button", class: "small", "data-key": `reload:${m.name}`,
      disabled: useBlocked, onclick: () => page.useModel(m, { reload: true }) }, t("models.reload_now")))) : null,
  error ? h("div", { class: "error-box", role: "alert" }, error) : null,
  jobHere ? null : actions,
  deleteBlocked && !jobHere ? h("p", { class: "hint", id: deleteHintId }, deleteBlocked) : null);
}

function sourceText(source = "") {
  if (source.startsWith("catalog:")) return t("models.source_catalog");
  if (source.startsWith("import:")) return t("models.source_import", { path: source.slice(7) });
  if (source.startsWith("path:")) return t("models.source_path", { path: source.slice(5) });
  return source || t("models.unknown");
}

const KIND_NAMES = { dflash2: "DFlash 2", dflash1: "DFlash v1" }; // names of the method: the same in every language

function draftSourceText(draft) {
  const src = draft.source || "";
  const where = src.startsWith("shipped:") ? t("models.draft_shipped")
    : src.startsWith("hub:") ? t("models.draft_hub") : t("models.draft_user", { file: draft.file });
  return KIND_NAMES[draft.kind] ? `${KIND_NAMES[draft.kind]} · ${where}` : where;
}
