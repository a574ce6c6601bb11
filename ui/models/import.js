// Bringing a GGUF file from this computer into the store: the "Add a model file" form
// on the Models page, and the dialog that asks for a draft's path when pairing one.
// Both check only that a path was typed; the server says what is wrong with it (not
// absolute, no file there, not a GGUF), and that answer shows beside the field.

import { post } from "../api.js";
import { h } from "../dom.js";
import { t } from "../i18n.js";
import { errorText, newId } from "./common.js";
import { failedJob } from "./jobs.js";

/**
 * The import form. `page` starts and shows the job: opts(), track(key, job, retry),
 * busyJob(), trackers and rerender(container, build). The job shows under the form.
 */
export class ImportCard {
  constructor(page) {
    this.page = page;
    const titleId = newId("import");
    const pathId = newId("path");
    const pathHintId = this.pathHintId = newId("path-hint");
    const nameId = newId("name");
    const nameHintId = newId("name-hint");
    this.error = h("div", { class: "error-box", role: "alert", id: newId("import-err"), hidden: true });
    this.path = h("input", { id: pathId, type: "text", name: "path", autocomplete: "off", spellcheck: "false",
      "aria-required": "true", "aria-describedby": pathHintId, class: "path-input" });
    this.name = h("input", { id: nameId, type: "text", name: "name", autocomplete: "off", spellcheck: "false",
      "aria-describedby": nameHintId, maxlength: "64" });
    this.button = h("button", { type: "submit", class: "primary", "data-key": "import" }, t("models.import_submit"));
    this.busyHint = h("span", { class: "hint", hidden: true }, t("models.busy_hint"));
    this.jobSlot = h("div");
    this.form = h("form", { class: "stack", novalidate: true, onsubmit: (e) => this.submit(e) },
      h("div", { class: "field" },
        h("label", { for: pathId }, t("models.import_path")),
        h("p", { class: "hint", id: pathHintId }, t("models.path_hint_model")),
        this.path,
        this.error),
      h("div", { class: "field" },
        h("label", { for: nameId }, t("models.import_name"), " ",
          h("span", { class: "hint" }, t("models.optional"))),
        h("p", { class: "hint", id: nameHintId }, t("models.import_name_hint")),
        this.name),
      h("div", { class: "row" }, this.button, this.busyHint));
    this.el = h("section", { class: "card stack import-card", "aria-labelledby": titleId },
      h("h2", { id: titleId, tabindex: "-1" }, t("models.import_title")),
      h("p", { class: "hint" }, t("models.import_intro")),
      this.form,
      this.jobSlot);
  }

  /** After a successful import: an empty form for the next one. */
  reset() {
    this.form.reset();
  }

  focus() {
    this.path.focus();
  }

  showError(message) {
    this.error.textContent = message || "";
    this.error.hidden = !message;
    if (message) {
      this.path.setAttribute("aria-invalid", "true");
      this.path.setAttribute("aria-describedby", `${this.error.id} ${this.pathHintId}`);
    } else {
      this.path.removeAttribute("aria-invalid");
      this.path.setAttribute("aria-describedby", this.pathHintId);
    }
  }

  async submit(e) {
    e.preventDefault();
    const { page } = this;
    const path = stripQuotes(this.path.value.trim());
    const name = this.name.value.trim();
    if (!path) {
      this.showError(t("models.import_need_path"));
      this.path.focus();
      return;
    }
    this.showError(null);
    const start = async () => {
      const job = await post("v1/store/import", { path, name: name || undefined }, page.opts());
      page.track("import", job, () => start().catch((err) => {
        if (err.name !== "AbortError") page.track("import", failedJob("import", name || null, errorText(err)), null);
      }));
    };
    this.button.disabled = true;
    try {
      await start();
    } catch (err) {
      if (err.name === "AbortError") return;
      this.showError(errorText(err)); // refused before any job started (a wrong path, the store busy)
      this.path.focus();
    } finally {
      this.update();
    }
  }

  /** One job at a time in the store: the button waits while any job runs; the import's own job shows here. */
  update() {
    const busy = this.page.busyJob();
    this.button.disabled = !!busy;
    this.busyHint.hidden = !busy || busy.key === "import";
    const tracker = this.page.trackers.get("import");
    if (tracker && tracker.el.parentNode !== this.jobSlot) {
      this.page.rerender(this.jobSlot, () => tracker.el);
    }
  }
}

/** A modal asking for a file path; `submit(path)` runs on OK and its error shows in the dialog. */
export function pathDialog(root, { title, text, label, hint, submitLabel, submit }) {
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
    root.append(dlg); // in the page, so it goes with the page when the user navigates away
    dlg.showModal();
    input.focus();
  });
}

/** People paste paths copied from Explorer ("C:\x\y.gguf") or a terminal ('...'): drop the quotes. */
function stripQuotes(s) {
  const m = /^(["'])(.*)\1$/.exec(s);
  return m ? m[2] : s;
}
