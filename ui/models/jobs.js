// A store job on the Models page (download, import, pair a draft): the server runs it,
// this asks GET /v1/store/jobs/{id} until it ends and shows it as a <progress> bar with
// its phase in plain words, then "done" or the reason it failed with "Try again". A
// download has a Cancel button (POST /v1/store/jobs/{id}/cancel): the server stops at its
// next chunk and the job ends "cancelled", with nothing installed.
//
// The tracker's element is placed by the page in the card the job belongs to (catalog
// entry, installed model, import form) and survives the page's re-renders, so a screen
// reader's live region and the user's focus are not lost every 700 ms.

import { get, post } from "../api.js";
import { clear, formatBytes, h } from "../dom.js";
import { t } from "../i18n.js";
import { enc, errorText, newId } from "./common.js";

const JOB_POLL_MS = 700;

/**
 * `page` gives the tracker what it needs: catalog (for titles), sleep() and opts() (which
 * stop at unmount), trackers, render(), jobFinished(tracker), and jobDismissed(tracker, section).
 */
export class JobTracker {
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
    this.cancelError = h("p", { class: "error-text", role: "alert" });
    this.cancelButton = h("button", { type: "button", class: "small job-cancel", "data-key": `cancel:${key}`,
      onclick: () => this.cancel() }, t("common.cancel"));
    this.actions = h("div", { class: "row job-actions" }, this.cancelButton, this.cancelError);
    this.el = h("div", { class: "job stack", dataset: { job: key, kind: job.kind } },
      this.title, this.phase, this.progress, this.bytes, this.actions, this.result);
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

  /** Ask the server to stop this download; the next poll shows "cancelled" once it has. */
  async cancel() {
    this.cancelButton.disabled = true;
    this.cancelButton.textContent = t("models.cancelling");
    this.cancelError.textContent = "";
    try {
      this.job = { ...this.job, ...(await post(`v1/store/jobs/${enc(this.job.id)}/cancel`, {}, this.page.opts())) };
    } catch (e) {
      if (e.name === "AbortError") return;
      this.cancelError.textContent = t("models.cancel_failed", { message: errorText(e) });
      this.cancelButton.disabled = false;
    }
    this.update();
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
        else continue; // a few missed answers are no failure: the job goes on on the server
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
    // Only a download can be stopped half-way (the server checks its cancel flag per chunk).
    this.actions.hidden = !(running && job.kind === "pull" && job.id);
    if (job.cancelling) {
      this.cancelButton.disabled = true;
      this.cancelButton.textContent = t("models.cancelling");
    } else if (running && !this.cancelButton.disabled) {
      this.cancelButton.textContent = t("common.cancel");
    }
    if (running) {
      const text = phaseText(job, this.page.catalog.find((c) => c.name === job.model));
      if (this.phase.textContent !== text) this.phase.textContent = text; // the live region speaks on change only
      if (job.total_bytes > 0) {
        const done = Math.min(job.done_bytes, job.total_bytes);
        const pct = Math.floor((100 * done) / job.total_bytes);
        this.progress.max = job.total_bytes;
        this.progress.value = done;
        this.bytes.textContent = t("models.bytes_of",
          { done: formatBytes(done), total: formatBytes(job.total_bytes), percent: pct });
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
    } else if (job.status === "cancelled") {
      clear(this.result, h("div", { class: "notice stack job-cancelled", role: "status" },
        h("p", {}, t("models.job_cancelled")),
        h("div", { class: "row" },
          this.retry ? h("button", { type: "button", class: "small", "data-key": `retry:${this.key}`,
            onclick: () => this.retry() }, t("models.download_again")) : null,
          h("button", { type: "button", class: "small ghost", "data-key": `dismiss:${this.key}`,
            onclick: () => this.dismiss() }, t("common.close")))));
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
    this.page.jobDismissed(this, section); // the page knows where focus should land
  }
}

/** A job that never started (the server refused it): shown like one that failed, with its reason. */
export function failedJob(kind, model, message) {
  return { id: null, kind, model, status: "error", phase: "", done_bytes: 0, total_bytes: 0, error: message };
}

/**
 * After a re-render or a dismissed job, put keyboard focus back on "the same" control
 * (data-key); else on the title of the job that control belonged to (a retry replaces
 * it), else on the part's heading, so focus never falls back to the top of the page.
 */
export function refocus(container, key, job) {
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

/**
 * The store's progress bar names ("download <file>", "verify <file>", "verify model", "unpack x.gguf",
 * "import x.gguf", "pair draft.gguf") in plain words; `entry` (the catalog entry of a pull) tells
 * the draft's file from the model's.
 */
function phaseText(job, entry) {
  const [word, ...rest] = (job.phase || "").split(" ");
  const file = rest.join(" ");
  const isDraft = !!file && file === entry?.draft?.file;
  if (word === "download") {
    if (!file) return t("models.phase_download");
    return isDraft ? t("models.phase_download_draft") : t("models.phase_download_model");
  }
  if (word === "verify" || word === "check") return isDraft ? t("models.phase_check_draft") : t("models.phase_check");
  if (word === "unpack") return t("models.phase_unpack");
  if (word === "import") return t("models.phase_copy");
  if (word === "pair") return job.kind === "pull" ? t("models.phase_pair") : t("models.phase_copy_draft");
  return t("models.phase_working");
}
