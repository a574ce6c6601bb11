// The Models page: the models installed here (size, where they came from, the paired
// speed-up draft, which one is in use), the catalog with a download button, importing a
// GGUF from a path on this computer, pairing a draft, and the hardware in plain words.
//
// Slow store work (download, import, pair) runs as a server job: the page starts it,
// then asks GET /v1/store/jobs/{id} until it is done, showing a <progress> bar with its
// phase in words. Jobs already running when the page opens show too. Every timer and
// request stops when the page unmounts.
//
// This file holds the page's state, its data and its actions; the parts it shows are
// built in cards.js (installed models), catalog.js (the catalog, what fits
// here; "#/models/NAME" opens at that card), jobs.js (a job's progress, Cancel),
// import.js (the import form, the path dialog) and hardware.js ("Your computer").

import { get, post, del } from "../api.js";
import { clear, confirmDialog, formatBytes, h } from "../dom.js";
import { t } from "../i18n.js";
import { ctaCard, installedView } from "./cards.js";
import { catalogView, measuredView, problemsView, showSpotlight, tierView } from "./catalog.js";
import { enc, errorText, newId } from "./common.js";
import { computerView, systemErrorView } from "./hardware.js";
import { ImportCard, pathDialog } from "./import.js";
import { JobTracker, failedJob, refocus } from "./jobs.js";

const SWITCH_POLL_MS = 1500;
const DEFAULT_MODEL = "smollm2"; // engine/models/catalog.py's DEFAULT_MODEL, used when the server does not name one

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
    this.modelsBody = null; // the last GET /v1/store/models answer: hardware, tiers, catalog problems
    this.spotlight = ctx.arg; // the catalog card to show first ("#/models/NAME"), once
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
    this.tierSlot = h("div", { class: "stack" }); // what fits this computer, and user catalog files that failed
    this.computerBody = h("div", { class: "stack" }, h("p", { class: "muted" }, t("common.loading")));
    this.importCard = new ImportCard(this);

    const installedH = h("h2", { id: newId("installed"), tabindex: "-1" }, t("models.installed_title"));
    const catalogH = h("h2", { id: newId("catalog"), tabindex: "-1" }, t("models.catalog_title"));
    const computerH = h("h2", { id: newId("computer"), tabindex: "-1" }, t("models.computer_title"));
    this.catalogSection = h("section", { class: "stack", "aria-labelledby": catalogH.id }, catalogH,
      this.tierSlot, h("p", { class: "hint" }, t("models.catalog_hint")), this.catalogList);

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
          this.importCard.el),
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
      this.modelsBody = body;
      // the server is timing this processor (a few seconds, once): ask again for each model's speed
      if (body.hardware?.measuring) this.later(2000, () => this.loadModels());
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
      if (!this.trackers.has(key)) this.track(key, job, job.kind === "pull" ? () => this.pull(job.model) : null);
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
      if (tracker.key === "import") this.importCard.reset();
    } else if (job.status === "cancelled") {
      this.announce(t("models.job_cancelled"));
    }
    this.loadModels();
  }

  /** The user closed a finished job: focus goes to the import field, or the heading of the job's part. */
  jobDismissed(tracker, section) {
    this.render();
    if (tracker.key === "import") this.importCard.focus();
    else refocus(section?.isConnected ? section : this.installedList.closest("section"), null, null);
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
    this.ctx.refreshHealth();
    this.later(SWITCH_POLL_MS, () => this.switchTick());
  }

  isServed(name) {
    return this.installed?.some((m) => m.name === name && m.serving) ||
      (this.health?.status === "ready" && this.health.model === name);
  }

  // -- actions ----------------------------------------------------------------------

  /** The page's yes/no question: in the page (it goes away on navigation), destructive ones start on Cancel. */
  confirm(title, paragraphs, ok, { danger = false } = {}) {
    return confirmDialog(paragraphs, { title, ok, cancel: t("common.cancel"), danger,
      focus: danger ? "cancel" : "ok", className: "models-dialog", parent: this.root });
  }

  async useModel(m, { reload = false } = {}) {
    const ok = await this.confirm(
      reload ? t("models.reload_title", { name: m.name }) : t("models.use_title", { name: m.name }),
      [t("models.use_body")],
      reload ? t("models.reload_confirm") : t("models.use_confirm"));
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
    const ok = await this.confirm(t("models.delete_title", { name: m.name }),
      [t("models.delete_body", { size: formatBytes(m.size) }),
        m.source.startsWith("import:") ? t("models.delete_body_import", { path: m.source.slice(7) })
          : t("models.delete_body_catalog")],
      t("models.delete_confirm"), { danger: true });
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
    const ok = await this.confirm(t("models.unpair_title", { name: m.name }), [t("models.unpair_body")],
      t("models.unpair_confirm"), { danger: true });
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
    this.rerender(this.installedList, () => installedView(this));
    this.rerender(this.catalogList, () => catalogView(this));
    clear(this.tierSlot, tierView(this), measuredView(this), problemsView(this));
    this.importCard.update();
    showSpotlight(this);
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

  /** While the default model is missing, its download is the first thing shown (and left out of the catalog). */
  renderCta() {
    const entry = this.catalog.find((c) => c.name === this.defaultName);
    const missing = this.installed && entry && !entry.installed;
    this.ctaMissing = missing ? entry.name : null;
    if (!missing) return clear(this.ctaSlot);
    this.rerender(this.ctaSlot, () => ctaCard(this, entry));
  }

  renderComputer() {
    if (this.dead) return;
    if (this.systemError) {
      return this.rerender(this.computerBody, () => systemErrorView(this.systemError, () => this.loadSystem()));
    }
    if (!this.system) return;
    this.rerender(this.computerBody, () => computerView(this.system, this.health));
  }
}
