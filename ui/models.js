// The Models page: the models installed here (size, where they came from, the paired
// speed-up draft, which one is in use), the catalog with a download button, importing a
// GGUF from a path on this computer, pairing a draft, and the hardware in plain words.
//
// Slow store work (download, import, pair) runs as a server job: the page starts it,
// then asks GET /v1/store/jobs/{id} until it is done, showing a <progress> bar with its
// phase in words. Jobs already running when the page opens show too. Every timer and
// request stops when the page unmounts.

import { get, post, del } from "./api.js";
import { refreshHealth } from "./app.js";
import { clear, formatBytes, h } from "./dom.js";
import { formatNumber, formatTime, t } from "./i18n.js";

const JOB_POLL_MS = 700;
const SWITCH_POLL_MS = 1500;
const DEFAULT_MODEL = "smollm2"; // engine/catalog.py's DEFAULT_MODEL, used when the server does not name one
const BACKEND_NAMES = { cuda: "CUDA", metal: "Metal", vulkan: "Vulkan", rocm: "ROCm", hip: "ROCm", sycl: "SYCL",
  opencl: "OpenCL", cann: "CANN", musa: "MUSA" };

let uid = 0;
const newId = (prefix) => `models-${prefix}-${++uid}`;
const enc = encodeURIComponent;

export function mount(root, ctx) {
  const page = new ModelsPage(root, ctx);
  page.start();
  return { unmount: () => page.stop() };
}

class ModelsPage {
  constructor(root, ctx) {
    this.root = root;
    this.ctx = ctx;
    this.health = ctx.health();
    this.installed = null; // null until the first answer
    this.catalog = [];
    this.defaultName = DEFAULT_MODEL;
    this.listError = null;
    this.system = null;
    this.systemError = null;
    this.trackers = new Map(); // "pull:NAME" | "import" | "pair:NAME" -> JobTracker
    this.switching = null; // {name, sawLoading, since} while a switch loads
    this.reloadNeeded = new Set(); // served models whose draft changed since they loaded
    this.cardErrors = new Map(); // model name -> message shown in its card
    this.timers = new Set();
    this.aborter = new AbortController();
    this.dead = false;
  }

  // -- lifetime ---------------------------------------------------------------------

  start() {
    this.announcer = h("div", { class: "models-announce", role: "status", "aria-live": "polite" });
    this.statusSlot = h("div", { class: "models-status" });
    this.ctaSlot = h("div");
    this.installedList = h("div", { class: "model-grid" }, h("p", { class: "muted" }, t("common.loading")));
    this.catalogList = h("div", { class: "stack" });
    this.computerBody = h("div", { class: "stack" }, h("p", { class: "muted" }, t("common.loading")));
    const importSection = this.buildImport();

    const installedH = h("h2", { id: newId("installed"), tabindex: "-1" }, t("models.installed_title"));
    const catalogH = h("h2", { id: newId("catalog"), tabindex: "-1" }, t("models.catalog_title"));
    const computerH = h("h2", { id: newId("computer"), tabindex: "-1" }, t("models.computer_title"));
    this.catalogSection = h("section", { class: "stack", "aria-labelledby": catalogH.id }, catalogH,
      h("p", { class: "hint" }, t("models.catalog_hint")), this.catalogList);

    clear(this.root, h("div", { class: "page models-page stack" },
      h("h1", {}, t("models.title")),
      h("p", { class: "hint models-intro" }, t("models.intro")),
      this.announcer,
      this.statusSlot,
      this.ctaSlot,
      h("div", { class: "models-layout" },
        h("div", { class: "models-main stack" },
          h("section", { class: "stack", "aria-labelledby": installedH.id }, installedH, this.installedList),
          this.catalogSection,
          importSection),
        h("aside", { class: "models-side" },
          h("section", { class: "card stack computer-card", "aria-labelledby": computerH.id }, computerH,
            this.computerBody)))));

    this.offHealth = this.ctx.onHealth((hl) => this.onHealth(hl));
    this.healthSig = this.signature(this.health);
    this.renderStatus();
    this.loadModels();
    this.loadSystem();
    this.loadJobs();
  }

  stop() {
    this.dead = true;
    this.offHealth?.();
    for (const id of this.timers) clearTimeout(id);
    this.timers.clear();
    this.aborter.abort();
  }

  later(ms, fn) {
    if (this.dead) return;
    const id = setTimeout(() => {
      this.timers.delete(id);
      if (!this.dead) fn();
    }, ms);
    this.timers.add(id);
  }

  sleep(ms) {
    return new Promise((resolve) => this.later(ms, resolve)); // never resolves after unmount: loops just end
  }

  opts() {
    return { signal: this.aborter.signal };
  }

  announce(text, tone = "ok") {
    // Cleared first so the same sentence twice is read twice.
    this.announcer.textContent = "";
    this.announcer.dataset.tone = tone;
    this.later(50, () => { this.announcer.textContent = text; });
  }

  // -- data -------------------------------------------------------------------------

  async loadModels() {
    try {
      const body = await get("v1/store/models", this.opts());
      this.installed = body.data || [];
      this.catalog = body.catalog || [];
      this.defaultName = body.default || (this.catalog.some((c) => c.name === DEFAULT_MODEL) ? DEFAULT_MODEL
        : this.catalog[0]?.name) || DEFAULT_MODEL;
      this.listError = null;
    } catch (e) {
      if (e.name === "AbortError") return;
      this.listError = errorText(e);
    }
    this.render();
  }

  async loadSystem() {
    try {
      this.system = await get("v1/system", this.opts());
      this.systemError = null;
    } catch (e) {
      if (e.name === "AbortError") return;
      this.systemError = errorText(e);
    }
    this.renderComputer();
  }

  async loadJobs() {
    let jobs;
    try {
      jobs = (await get("v1/store/jobs", this.opts())).data || [];
    } catch (e) {
      return; // the lists still work; a running job shows as "busy" when the user tries another
    }
    for (const job of jobs) {
      if (job.status !== "running") continue;
      const key = job.kind === "import" ? "import" : `${job.kind}:${job.model}`;
      if (!this.trackers.has(key)) this.track(key, job, null);
    }
  }

  // -- jobs -------------------------------------------------------------------------

  /** Follow a job the server started; `retry` starts it again (null: not known, e.g. found running). */
  track(key, job, retry) {
    const tracker = new JobTracker(this, key, job, retry);
    this.trackers.set(key, tracker);
    this.render();
    tracker.follow();
    return tracker;
  }

  busyJob() {
    for (const tr of this.trackers.values()) if (tr.job.status === "running") return tr;
    return null;
  }

  jobFinished(tracker) {
    const { job } = tracker;
    if (job.status === "done") {
      if (job.kind === "pair" && this.isServed(job.model)) this.reloadNeeded.add(job.model);
      this.announce(tracker.doneText());
      if (tracker.key === "import") this.importForm.reset();
    }
    this.loadModels();
  }

  async pull(name) {
    const key = `pull:${name}`;
    try {
      const job = await post("v1/store/pull", { name }, this.opts());
      this.track(key, job, () => this.pull(name));
    } catch (e) {
      if (e.name === "AbortError") return;
      this.track(key, failedJob("pull", name, errorText(e)), () => this.pull(name));
    }
  }

  // -- health and switching ---------------------------------------------------------

  signature(hl) {
    return JSON.stringify([hl?.status, hl?.model, hl?.error, hl?.speculation]);
  }

  onHealth(hl) {
    const before = this.health;
    this.health = hl;
    const s = this.switching;
    if (s) {
      if (hl.status === "loading") s.sawLoading = true;
      const settled = s.sawLoading || Date.now() - s.since > 5000; // an answer sent before the switch is stale
      if (settled && hl.status === "ready") {
        this.switching = null;
        this.reloadNeeded.delete(hl.model);
        this.announce(t("models.switch_done", { name: hl.model }));
      } else if (settled && hl.status === "error") {
        this.switching = null;
        this.cardErrors.set(s.name, t("models.switch_failed", { message: hl.error || "" }));
        this.announce(t("models.switch_failed", { message: hl.error || "" }), "error");
      }
    }
    const sig = this.signature(hl);
    if (sig === this.healthSig) return;
    this.healthSig = sig;
    this.renderStatus();
    this.renderComputer();
    if (before?.model !== hl.model || before?.status !== hl.status) this.loadModels();
    else this.render();
  }

  switchTick() {
    if (!this.switching) return;
    refreshHealth();
    this.later(SWITCH_POLL_MS, () => this.switchTick());
  }

  isServed(name) {
    return this.installed?.some((m) => m.name === name && m.serving) ||
      (this.health?.status === "ready" && this.health.model === name);
  }

  async useModel(m, { reload = false } = {}) {
    const ok = await confirmDialog(this.root, {
      title: reload ? t("models.reload_title", { name: m.name }) : t("models.use_title", { name: m.name }),
      text: [t("models.use_body")],
      confirm: reload ? t("models.reload_confirm") : t("models.use_confirm"),
    });
    if (!ok || this.dead) return;
    this.cardErrors.delete(m.name);
    try {
      await post("v1/store/serve", { name: m.name }, this.opts());
    } catch (e) {
      if (e.name === "AbortError") return;
      this.cardErrors.set(m.name, e.code === "busy" ? t("models.switch_busy") : errorText(e));
      this.render();
      return;
    }
    this.switching = { name: m.name, sawLoading: false, since: Date.now() };
    this.announce(t("models.switch_started", { name: m.name }));
    this.render();
    this.switchTick();
  }

  async deleteModel(m) {
    const ok = await confirmDialog(this.root, {
      title: t("models.delete_title", { name: m.name }),
      text: [t("models.delete_body", { size: formatBytes(m.size) }),
        m.source.startsWith("import:") ? t("models.delete_body_import", { path: m.source.slice(7) })
          : t("models.delete_body_catalog")],
      confirm: t("models.delete_confirm"),
      danger: true,
    });
    if (!ok || this.dead) return;
    try {
      await del(`v1/store/models/${enc(m.name)}`, this.opts());
      this.cardErrors.delete(m.name);
      this.announce(t("models.deleted", { name: m.name }));
    } catch (e) {
      if (e.name === "AbortError") return;
      this.cardErrors.set(m.name, errorText(e));
    }
    this.loadModels();
  }

  async pairDraft(m) {
    const key = `pair:${m.name}`;
    const start = async (path) => {
      const job = await post(`v1/store/models/${enc(m.name)}/draft`, { path }, this.opts());
      this.track(key, job, () => start(path).catch((e) => {
        if (e.name !== "AbortError") this.track(key, failedJob("pair", m.name, errorText(e)), null);
      }));
    };
    await pathDialog(this.root, {
      title: t("models.pair_title", { name: m.name }),
      text: t("models.pair_body"),
      label: t("models.pair_path"),
      hint: t("models.path_hint_draft"),
      submitLabel: t("models.pair_submit"),
      submit: start,
    });
  }

  async removeDraft(m) {
    const ok = await confirmDialog(this.root, {
      title: t("models.unpair_title", { name: m.name }),
      text: [t("models.unpair_body")],
      confirm: t("models.unpair_confirm"),
      danger: true,
    });
    if (!ok || this.dead) return;
    try {
      await del(`v1/store/models/${enc(m.name)}/draft`, this.opts());
      this.cardErrors.delete(m.name);
      if (m.serving) this.reloadNeeded.add(m.name);
      this.announce(t("models.unpaired", { name: m.name }));
    } catch (e) {
      if (e.name === "AbortError") return;
      this.cardErrors.set(m.name, errorText(e));
    }
    this.loadModels();
  }

  // -- rendering --------------------------------------------------------------------

  render() {
    if (this.dead) return;
    this.renderCta();
    this.rerender(this.installedList, () => this.installedView());
    this.rerender(this.catalogList, () => this.catalogView());
    this.updateImport();
  }

  /**
   * Replace a part's content, keeping keyboard focus on "the same" control (data-key); else on
   * the job that control belonged to (a retry replaces it), else on the part's heading.
   */
  rerender(container, build) {
    const active = document.activeElement;
    const hadFocus = active && active !== document.body && container.contains(active);
    const key = hadFocus ? active.dataset.key : undefined;
    const job = hadFocus ? active.closest(".job")?.dataset.job : undefined;
    clear(container, build());
    if (hadFocus) refocus(container, key, job);
  }

  renderStatus() {
    const hl = this.health;
    let box = null;
    if (hl?.status === "error" && !this.switching) {
      box = h("div", { class: "notice", role: "status" },
        h("p", {}, t("models.status_no_model")),
        hl.error ? h("p", { class: "hint" }, hl.error) : null);
    } else if (hl?.status === "offline") {
      box = h("div", { class: "error-box", role: "alert" }, t("models.status_offline"));
    }
    clear(this.statusSlot, box);
  }

  renderCta() {
    const entry = this.catalog.find((c) => c.name === this.defaultName);
    const missing = this.installed && entry && !entry.installed;
    this.ctaMissing = missing ? entry.name : null;
    if (!missing) return clear(this.ctaSlot);
    const titleId = newId("cta");
    const tracker = this.trackers.get(`pull:${entry.name}`);
    const busy = this.busyJob();
    this.rerender(this.ctaSlot, () => h("section", { class: "card models-cta stack", "aria-labelledby": titleId },
      h("h2", { id: titleId }, t("models.cta_title")),
      h("p", {}, t("models.cta_body", { title: entry.title || entry.name, size: formatBytes(entry.size) })),
      tracker ? tracker.el : null,
      tracker && tracker.job.status !== "done" ? null : h("div", { class: "row" },
        h("button", { class: "primary", type: "button", "data-key": `pull:${entry.name}`, disabled: !!busy,
          onclick: () => this.pull(entry.name) },
          t("models.download_size", { size: formatBytes(entry.size) })),
        h("span", { class: "hint" }, busy ? t("models.busy_hint") : t("models.needs_internet")))));
  }

  installedView() {
    if (this.listError) {
      return h("div", { class: "error-box", role: "alert" },
        h("p", {}, t("models.list_error", { message: this.listError })),
        h("button", { type: "button", "data-key": "retry-list", onclick: () => this.loadModels() }, t("common.retry")));
    }
    if (!this.installed) return h("p", { class: "muted" }, t("common.loading"));
    if (!this.installed.length) return h("p", { class: "muted" }, t("models.none_installed"));
    return this.installed.map((m) => this.modelCard(m));
  }

  modelCard(m) {
    const titleId = newId("m");
    const entry = this.catalog.find((c) => c.name === m.name && m.source === `catalog:${c.name}`);
    const switchingTo = this.switching?.name === m.name;
    const loading = m.loading || switchingTo;
    const busy = this.busyJob();
    const healthLoading = this.health?.status === "loading" || !!this.switching;
    const tracker = this.trackers.get(`pair:${m.name}`);
    const jobHere = tracker?.job.status === "running";
    const error = this.cardErrors.get(m.name);

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
    const speed = m.serving ? speedNow(m, this.health) : null;
    if (speed) facts.push([t("models.speed_now"), h("span", { class: speed.cls }, speed.text)]);

    const deleteHintId = newId("del");
    const deleteBlocked = m.serving || loading ? t("models.delete_in_use") : busy ? t("models.busy_hint") : null;
    const useBlocked = healthLoading || !!busy;

    const actions = h("div", { class: "row model-actions" },
      m.serving ? null : h("button", { type: "button", class: "primary", "data-key": `use:${m.name}`,
        disabled: useBlocked || loading, onclick: () => this.useModel(m) }, t("models.use")),
      h("button", { type: "button", "data-key": `pair:${m.name}`, disabled: !!busy,
        onclick: () => this.pairDraft(m) }, m.draft ? t("models.pair_other") : t("models.pair")),
      m.draft ? h("button", { type: "button", "data-key": `unpair:${m.name}`, disabled: !!busy,
        onclick: () => this.removeDraft(m) }, t("models.unpair")) : null,
      h("button", { type: "button", class: "danger", "data-key": `delete:${m.name}`, disabled: !!deleteBlocked,
        "aria-describedby": deleteBlocked ? deleteHintId : null, onclick: () => this.deleteModel(m) },
      t("models.delete")));

    return h("article", { class: `card model-card stack${m.serving ? " serving" : ""}`, "aria-labelledby": titleId,
      dataset: { model: m.name } },
    h("div", { class: "row model-head" },
      h("h3", { id: titleId, class: "grow" }, m.name), badge),
    entry?.title ? h("p", { class: "muted model-title" }, entry.title) : null,
    loading ? h("p", { class: "notice", role: "status" }, t("models.loading_text")) : null,
    h("dl", { class: "facts" }, facts.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    tracker ? tracker.el : null,
    this.reloadNeeded.has(m.name) && m.serving ? h("div", { class: "notice stack" },
      h("p", {}, t("models.reload_needed")),
      h("div", {}, h("button", { type: "button", class: "small", "data-key": `reload:${m.name}`,
        disabled: useBlocked, onclick: () => this.useModel(m, { reload: true }) }, t("models.reload_now")))) : null,
    error ? h("div", { class: "error-box", role: "alert" }, error) : null,
    jobHere ? null : actions,
    deleteBlocked && !jobHere ? h("p", { class: "hint", id: deleteHintId }, deleteBlocked) : null);
  }

  catalogView() {
    const entries = this.catalog.filter((c) => c.name !== this.ctaMissing);
    this.catalogSection.hidden = !entries.length && !!this.ctaMissing;
    if (!entries.length) return h("p", { class: "muted" }, this.installed ? t("models.catalog_empty") : t("common.loading"));
    const busy = this.busyJob();
    return entries.map((c) => {
      const titleId = newId("c");
      const tracker = this.trackers.get(`pull:${c.name}`);
      return h("article", { class: "card catalog-card stack", "aria-labelledby": titleId, dataset: { model: c.name } },
        h("div", { class: "row" },
          h("h3", { id: titleId, class: "grow" }, c.title || c.name),
          c.installed ? h("span", { class: "badge ok" }, t("models.installed_badge")) : null),
        h("dl", { class: "facts" },
          h("dt", {}, t("models.name")), h("dd", {}, c.name),
          h("dt", {}, t("models.size")), h("dd", {}, formatBytes(c.size)),
          h("dt", {}, t("models.license")), h("dd", {}, c.license || t("models.unknown")),
          h("dt", {}, t("models.draft")), h("dd", {}, c.has_draft ? t("models.catalog_has_draft") : t("models.draft_none"))),
        tracker ? tracker.el : null,
        c.installed || (tracker && tracker.job.status !== "done") ? null : h("div", { class: "row" },
          h("button", { type: "button", class: "primary", "data-key": `pull:${c.name}`, disabled: !!busy,
            onclick: () => this.pull(c.name) }, t("models.download_size", { size: formatBytes(c.size) })),
          h("span", { class: "hint" }, busy ? t("models.busy_hint") : t("models.needs_internet"))));
    });
  }

  // -- import -----------------------------------------------------------------------

  buildImport() {
    const titleId = newId("import");
    const pathId = newId("path");
    const pathHintId = this.importPathHintId = newId("path-hint");
    const nameId = newId("name");
    const nameHintId = newId("name-hint");
    this.importError = h("div", { class: "error-box", role: "alert", id: newId("import-err"), hidden: true });
    this.importPath = h("input", { id: pathId, type: "text", name: "path", autocomplete: "off", spellcheck: "false",
      "aria-required": "true", "aria-describedby": pathHintId, class: "path-input" });
    this.importName = h("input", { id: nameId, type: "text", name: "name", autocomplete: "off", spellcheck: "false",
      "aria-describedby": nameHintId, maxlength: "64" });
    this.importButton = h("button", { type: "submit", class: "primary", "data-key": "import" }, t("models.import_submit"));
    this.importBusyHint = h("span", { class: "hint", hidden: true }, t("models.busy_hint"));
    this.importJobSlot = h("div");
    this.importForm = h("form", { class: "stack", novalidate: true, onsubmit: (e) => this.submitImport(e) },
      h("div", { class: "field" },
        h("label", { for: pathId }, t("models.import_path")),
        h("p", { class: "hint", id: pathHintId }, t("models.path_hint_model")),
        this.importPath,
        this.importError),
      h("div", { class: "field" },
        h("label", { for: nameId }, t("models.import_name"), " ",
          h("span", { class: "hint" }, t("models.optional"))),
        h("p", { class: "hint", id: nameHintId }, t("models.import_name_hint")),
        this.importName),
      h("div", { class: "row" }, this.importButton, this.importBusyHint));
    return h("section", { class: "card stack import-card", "aria-labelledby": titleId },
      h("h2", { id: titleId, tabindex: "-1" }, t("models.import_title")),
      h("p", { class: "hint" }, t("models.import_intro")),
      this.importForm,
      this.importJobSlot);
  }

  showImportError(message) {
    this.importError.textContent = message || "";
    this.importError.hidden = !message;
    if (message) {
      this.importPath.setAttribute("aria-invalid", "true");
      this.importPath.setAttribute("aria-describedby", `${this.importError.id} ${this.importPathHintId}`);
    } else {
      this.importPath.removeAttribute("aria-invalid");
      this.importPath.setAttribute("aria-describedby", this.importPathHintId);
    }
  }

  async submitImport(e) {
    e.preventDefault();
    const path = stripQuotes(this.importPath.value.trim());
    const name = this.importName.value.trim();
    if (!path) {
      this.showImportError(t("models.import_need_path"));
      this.importPath.focus();
      return;
    }
    this.showImportError(null);
    const start = async () => {
      const job = await post("v1/store/import", { path, name: name || undefined }, this.opts());
      this.track("import", job, () => start().catch((err) => {
        if (err.name !== "AbortError") this.track("import", failedJob("import", name || null, errorText(err)), null);
      }));
    };
    this.importButton.disabled = true;
    try {
      await start();
    } catch (err) {
      if (err.name === "AbortError") return;
      this.showImportError(errorText(err));
      this.importPath.focus();
    } finally {
      this.updateImport();
    }
  }

  updateImport() {
    const busy = this.busyJob();
    this.importButton.disabled = !!busy;
    this.importBusyHint.hidden = !busy || busy.key === "import";
    const tracker = this.trackers.get("import");
    if (tracker && tracker.el.parentNode !== this.importJobSlot) {
      this.rerender(this.importJobSlot, () => tracker.el);
    }
  }

  // -- your computer ----------------------------------------------------------------

  renderComputer() {
    if (this.dead) return;
    if (this.systemError) {
      return this.rerender(this.computerBody, () => h("div", { class: "error-box", role: "alert" },
        h("p", {}, t("models.system_error", { message: this.systemError })),
        h("button", { type: "button", "data-key": "retry-system", onclick: () => this.loadSystem() }, t("common.retry"))));
    }
    const s = this.system;
    if (!s) return;
    const threads = s.threads ?? 1;
    const threadText = threads === 1 ? t("models.threads_one") : t("models.threads_other", { n: formatNumber(threads) });
    const gpus = (s.devices || []).filter((d) => d.type === "gpu" || d.type === "igpu");
    const gpuBackends = (s.backends || []).filter((b) => !["cpu", "blas", "rpc"].includes(b.toLowerCase()));
    let lead;
    let why = null;
    if (s.reason === "gpu") {
      const g = gpus[0] || {};
      lead = t("models.hw_gpu", { device: g.description || g.name || t("models.unknown"),
        backend: BACKEND_NAMES[(s.backend || "").toLowerCase()] || g.backend || s.backend });
    } else if (s.reason === "no_gpu_build") {
      lead = t("models.hw_cpu", { threads: threadText });
      why = t("models.hw_no_gpu_build");
    } else if (s.reason === "gpu_not_found") {
      lead = t("models.hw_cpu", { threads: threadText });
      why = t("models.hw_gpu_not_found", { backends: gpuBackends.map((b) => BACKEND_NAMES[b.toLowerCase()] || b).join(", ") || "GPU" });
    } else {
      lead = s.summary || t("models.unknown"); // a reason this page does not know yet: the server's own words
    }

    const facts = [
      [t("models.hw_in_use"), s.backend === "cpu" || !s.backend ? t("models.hw_processor") : t("models.hw_graphics")],
      [t("models.hw_cores"), s.cpu_count ? t("models.hw_cores_value", { cores: formatNumber(s.cpu_count), threads: threadText }) : threadText],
      s.memory_bytes ? [t("models.hw_memory"), formatBytes(s.memory_bytes)] : null,
      [t("models.hw_gpu_label"), gpus.length
        ? gpus.map((g) => [g.description || g.name, g.memory_bytes ? ` (${formatBytes(g.memory_bytes)})` : ""].join("")).join(", ")
        : t("models.hw_gpu_none")],
    ];

    const sp = speculationFacts(this.health, s);
    this.rerender(this.computerBody, () => [
      h("p", { class: "hw-lead" }, lead),
      why ? h("p", {}, why) : null,
      h("dl", { class: "facts" }, facts.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      h("h3", {}, t("models.speed_title")),
      h("p", { class: "hint" }, t("models.speed_explain")),
      h("p", { class: sp.cls }, sp.text),
      h("details", { class: "hw-details" },
        h("summary", {}, t("models.hw_details")),
        h("dl", { class: "facts" },
          h("dt", {}, t("models.hw_llama")), h("dd", {}, s.llama_cpp_version || "?"),
          h("dt", {}, t("models.hw_backends")), h("dd", {}, (s.backends || []).join(", ") || "?"),
          s.cpu_features?.length ? [h("dt", {}, t("models.hw_features")), h("dd", { class: "hw-features" }, s.cpu_features.join(" "))] : null,
          sp.why ? [h("dt", {}, t("models.hw_exact")), h("dd", {}, sp.why)] : null,
          s.home ? [h("dt", {}, t("models.hw_home")), h("dd", { class: "path" }, s.home)] : null)),
    ]);
  }
}

// -- one job --------------------------------------------------------------------------

class JobTracker {
  constructor(page, key, job, retry) {
    this.page = page;
    this.key = key;
    this.job = job;
    this.retry = retry;
    this.failures = 0;
    const phaseId = newId("phase");
    const bytesId = newId("bytes");
    this.title = h("p", { class: "job-title", tabindex: "-1" }, this.titleText());
    this.phase = h("p", { class: "job-phase", id: phaseId, role: "status", "aria-live": "polite" });
    this.progress = h("progress", { max: "1", "aria-labelledby": phaseId, "aria-describedby": bytesId });
    this.bytes = h("p", { class: "hint job-bytes", id: bytesId });
    this.result = h("div");
    this.el = h("div", { class: "job stack", dataset: { job: key, kind: job.kind } },
      this.title, this.phase, this.progress, this.bytes, this.result);
    this.update();
  }

  titleText() {
    const { kind, model } = this.job;
    const entry = this.page.catalog.find((c) => c.name === model);
    if (kind === "pull") return t("models.job_pull", { name: entry?.title || model || "" });
    if (kind === "pair") return t("models.job_pair", { name: model || "" });
    return model ? t("models.job_import_named", { name: model }) : t("models.job_import");
  }

  doneText() {
    const { kind, model } = this.job;
    if (kind === "pair") return t("models.done_pair", { name: model });
    return t("models.done_install", { name: model });
  }

  async follow() {
    while (this.job.status === "running") {
      await this.page.sleep(JOB_POLL_MS);
      try {
        this.job = await get(`v1/store/jobs/${enc(this.job.id)}`, this.page.opts());
        this.failures = 0;
      } catch (e) {
        if (e.name === "AbortError") return;
        if (e.status === 404) this.job = { ...this.job, status: "error", error: t("models.job_lost") };
        else if (++this.failures >= 8) this.job = { ...this.job, status: "error", error: errorText(e) };
        else continue;
      }
      this.update();
    }
    this.page.jobFinished(this);
  }

  update() {
    const { job } = this;
    const running = job.status === "running";
    this.el.dataset.status = job.status;
    this.el.setAttribute("aria-busy", running ? "true" : "false");
    this.title.textContent = this.titleText();
    this.progress.hidden = !running;
    this.bytes.hidden = !running;
    if (running) {
      const text = phaseText(job.phase);
      if (this.phase.textContent !== text) this.phase.textContent = text;
      if (job.total_bytes > 0) {
        const done = Math.min(job.done_bytes, job.total_bytes);
        const pct = Math.floor((100 * done) / job.total_bytes);
        this.progress.max = job.total_bytes;
        this.progress.value = done;
        this.bytes.textContent = t("models.bytes_of", { done: formatBytes(done), total: formatBytes(job.total_bytes), percent: pct });
      } else {
        this.progress.removeAttribute("value"); // indeterminate: pip says nothing we can measure
        this.bytes.textContent = job.phase === "download" ? t("models.download_wait") : t("models.please_wait");
      }
      this.progress.textContent = this.bytes.textContent; // the text equivalent, for browsers without <progress>
      clear(this.result);
      return;
    }
    this.phase.textContent = "";
    if (job.status === "done") {
      clear(this.result, h("div", { class: "row job-done" },
        h("p", { class: "grow job-ok", role: "status" }, this.doneText()),
        h("button", { type: "button", class: "small ghost", "data-key": `dismiss:${this.key}`,
          onclick: () => this.dismiss() }, t("common.close"))));
    } else {
      clear(this.result, h("div", { class: "error-box stack", role: "alert" },
        h("p", {}, t("models.job_failed"), " ", job.error || ""),
        h("div", { class: "row" },
          this.retry ? h("button", { type: "button", class: "small", "data-key": `retry:${this.key}`,
            onclick: () => this.retry() }, t("common.retry")) : null,
          h("button", { type: "button", class: "small ghost", "data-key": `dismiss:${this.key}`,
            onclick: () => this.dismiss() }, t("common.close")))));
    }
  }

  dismiss() {
    if (this.page.trackers.get(this.key) === this) this.page.trackers.delete(this.key);
    const section = this.el.closest("section");
    this.el.remove();
    this.page.render();
    if (this.key === "import") this.page.importPath.focus();
    else refocus(section?.isConnected ? section : this.page.installedList.closest("section"), null, null);
  }
}

function refocus(container, key, job) {
  const again = key && container.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (again && !again.disabled) return again.focus();
  const title = job && container.querySelector(`.job[data-job="${CSS.escape(job)}"] .job-title`);
  if (title) return title.focus();
  const heading = container.querySelector("h2") || container.closest("section")?.querySelector("h2");
  if (heading) {
    if (!heading.hasAttribute("tabindex")) heading.setAttribute("tabindex", "-1");
    heading.focus();
  }
}

/** The server's own sentence, except for the few answers this page can say in the reader's language. */
function errorText(e) {
  if (e.code === "offline") return t("models.status_offline");
  if (e.code === "busy" && e.status === 409) return t("models.busy_error");
  if (e.code === "model_in_use") return t("models.delete_in_use");
  return e.message;
}

function failedJob(kind, model, message) {
  return { id: null, kind, model, status: "error", phase: "", done_bytes: 0, total_bytes: 0, error: message };
}

// -- words ------------------------------------------------------------------------------

/** The store's progress bar names ("download", "verify model", "unpack x.gguf", "import x.gguf") in plain words. */
function phaseText(phase) {
  const word = (phase || "").split(" ")[0];
  if (word === "download") return t("models.phase_download");
  if (word === "verify" || word === "check") return t("models.phase_check");
  if (word === "unpack") return t("models.phase_unpack");
  if (word === "import") return t("models.phase_copy");
  if (word === "pair") return t("models.phase_copy_draft");
  return t("models.phase_working");
}

function sourceText(source = "") {
  if (source.startsWith("catalog:")) return t("models.source_catalog");
  if (source.startsWith("import:")) return t("models.source_import", { path: source.slice(7) });
  if (source.startsWith("path:")) return t("models.source_path", { path: source.slice(5) });
  return source || t("models.unknown");
}

function draftSourceText(draft) {
  const src = draft.source || "";
  if (src.startsWith("shipped:")) return t("models.draft_shipped");
  return t("models.draft_user", { file: draft.file });
}

/** What the speed-up does right now for the served model, from /health. */
function speedNow(m, health) {
  const sp = health?.status === "ready" ? health.speculation : null;
  if (!sp) return null;
  if (!sp.enabled) return { text: t("models.speed_off_here"), cls: "muted" };
  if (sp.draft_error) return { text: t("models.speed_draft_error", { message: sp.draft_error }), cls: "warn-text" };
  if ((sp.drafters || []).includes("dflash")) return { text: t("models.speed_draft_on"), cls: "ok-text" };
  if (m.draft) return { text: t("models.speed_draft_not_loaded"), cls: "warn-text" };
  return { text: t("models.speed_lookup_only"), cls: "" };
}

/** Whether speculative decoding is on at all on this computer, for "Your computer". */
function speculationFacts(health, system) {
  const fromHealth = health?.status === "ready" ? health.speculation : null;
  const sp = fromHealth ? { exact: fromHealth.exact, enabled: fromHealth.enabled, why: fromHealth.exact_why }
    : system.speculation;
  if (!sp) return { text: t("models.speed_unknown"), cls: "muted", why: null };
  if (sp.enabled && sp.exact) return { text: t("models.speed_on"), cls: "ok-text", why: sp.why };
  if (sp.enabled) return { text: t("models.speed_on_inexact"), cls: "warn-text", why: sp.why };
  return { text: t("models.speed_off"), cls: "warn-text", why: sp.why };
}

/** People paste paths copied from Explorer ("C:\x\y.gguf") or a terminal ('...'): drop the quotes. */
function stripQuotes(s) {
  const m = /^(["'])(.*)\1$/.exec(s);
  return m ? m[2] : s;
}

// -- dialogs ----------------------------------------------------------------------------

/** A modal yes/no question; resolves true when confirmed. Focus goes back where it was. */
function confirmDialog(root, { title, text, confirm, danger = false }) {
  return new Promise((resolve) => {
    const back = document.activeElement;
    const titleId = newId("dlg");
    const bodyId = newId("dlg-body");
    const cancel = h("button", { value: "cancel", type: "submit", formnovalidate: true }, t("common.cancel"));
    const ok = h("button", { value: "ok", type: "submit", class: danger ? "danger" : "primary" }, confirm);
    const dlg = h("dialog", { "aria-labelledby": titleId, "aria-describedby": bodyId, class: "models-dialog" },
      h("form", { method: "dialog", class: "stack" },
        h("h2", { id: titleId }, title),
        h("div", { id: bodyId }, text.map((p) => h("p", {}, p))),
        h("div", { class: "row end" }, cancel, ok)));
    dlg.addEventListener("close", () => {
      dlg.remove();
      if (back?.isConnected) back.focus();
      resolve(dlg.returnValue === "ok");
    });
    root.append(dlg);
    dlg.showModal();
    (danger ? cancel : ok).focus(); // a destructive question starts on "Cancel"
  });
}

/** A modal asking for a file path; `submit(path)` runs on OK and its error shows in the dialog. */
function pathDialog(root, { title, text, label, hint, submitLabel, submit }) {
  return new Promise((resolve) => {
    const back = document.activeElement;
    const titleId = newId("dlg");
    const inputId = newId("dlg-path");
    const hintId = newId("dlg-hint");
    const errId = newId("dlg-err");
    const input = h("input", { id: inputId, type: "text", autocomplete: "off", spellcheck: "false",
      "aria-required": "true", "aria-describedby": hintId, class: "path-input" });
    const error = h("div", { class: "error-box", role: "alert", id: errId, hidden: true });
    const ok = h("button", { type: "submit", class: "primary" }, submitLabel);
    const showError = (msg) => {
      error.textContent = msg || "";
      error.hidden = !msg;
      if (msg) {
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-describedby", `${errId} ${hintId}`);
      } else {
        input.removeAttribute("aria-invalid");
        input.setAttribute("aria-describedby", hintId);
      }
    };
    let result = null;
    const dlg = h("dialog", { "aria-labelledby": titleId, class: "models-dialog" },
      h("form", { class: "stack", novalidate: true, onsubmit: async (e) => {
        e.preventDefault();
        const path = stripQuotes(input.value.trim());
        if (!path) {
          showError(t("models.import_need_path"));
          input.focus();
          return;
        }
        ok.disabled = true;
        try {
          result = (await submit(path)) ?? true;
          dlg.close();
        } catch (err) {
          if (err.name === "AbortError") return dlg.close();
          showError(errorText(err));
          input.focus();
        } finally {
          ok.disabled = false;
        }
      } },
      h("h2", { id: titleId }, title),
      h("p", {}, text),
      h("div", { class: "field" },
        h("label", { for: inputId }, label),
        h("p", { class: "hint", id: hintId }, hint),
        input,
        error),
      h("div", { class: "row end" },
        h("button", { type: "button", onclick: () => dlg.close() }, t("common.cancel")), ok)));
    dlg.addEventListener("close", () => {
      dlg.remove();
      if (back?.isConnected) back.focus();
      resolve(result);
    });
    root.append(dlg);
    dlg.showModal();
    input.focus();
  });
}
