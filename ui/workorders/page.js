// The Work orders page: paste a customer's message (or drop a .txt/.eml file), pick a
// template, and read the parsed fields as an editable form beside the original text, with
// the review flags on the fields they concern. Copy/Download give the EDITED values.
// Recent parses come from the audit log (GET /v1/workorders); #/workorders/<id> opens one.
//
// This file holds the page's state and wiring; the parts live beside it:
//   form.js         the template's schema as an editable form
//   files.js        reading .txt/.eml files (charsets, MIME, encoded words)
//   drop.js         dropping such a file on the input card
//   flags.js        the server's review sentences in the reader's language
//   summary.js      those flags on the form's fields and in the summary box
//   unavailable.js  what a parse through a backend server could not do
//   marks.js        the original message with the form's values marked, and copies' exact spans
//   history.js      the recent-parses card and the CSV export
//   records.js      a parse as the page holds it, from either API answer

import { get, post, ApiError } from "../api.js";
import { clear, copyText, download, formatBytes, h } from "../dom.js";
import { errorText, formatTime, t } from "../i18n.js";
import { acceptFiles } from "./drop.js";
import { isoDate, messageFileKind, readMessageFile } from "./files.js";
import { buildForm, inferSchema, tr } from "./form.js";
import { historyCard } from "./history.js";
import { copiedLegend, paintOriginal, wireMarks } from "./marks.js";
import { fromAudit, fromParse, statusBadge, templateName } from "./records.js";
import { showReview } from "./summary.js";
import { unavailableNote } from "./unavailable.js";

const MAX_FILE = 1024 * 1024;
const TEMPLATE_KEY = "flashdesk.woTemplate";

// What survives a re-mount (the language switch rebuilds the page): the draft and the result.
const saved = { text: "", template: null, sentDate: null, mail: null, record: null, values: null };
const schemaCache = new Map();

function today() {
  return isoDate(new Date());
}

/** A template's schema, asked once per page load; a template the server no longer has: one read off its output. */
async function schemaFor(name, output) {
  if (schemaCache.has(name)) return schemaCache.get(name);
  try {
    const detail = await get(`v1/workorders/templates/${encodeURIComponent(name)}`);
    schemaCache.set(name, detail.schema);
    return detail.schema;
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return inferSchema(output || {});
    throw e;
  }
}

// -- the page -------------------------------------------------------------------------

export function mount(root, ctx) {
  const page = new WorkOrdersPage(root, ctx);
  return { route: (arg) => page.route(arg), unmount: () => page.unmount() };
}

class WorkOrdersPage {
  constructor(root, ctx) {
    this.ctx = ctx;
    this.templates = [];
    this.current = null; // {record, form, schema, flagged: Set, flagCount} (the last two from showReview)
    this.controller = null;
    this.timer = null;
    this.repaintTimer = null;
    this.statusTimer = null;
    this.build(root);

    this.ready = this.loadTemplates().then(() => { // the parse this page showed last, unless the route names another
      if (saved.record && (!ctx.arg || saved.record.id === ctx.arg)) return this.show(saved.record, saved.values);
      if (ctx.arg) return this.loadRecord(ctx.arg);
    });
    if (saved.mail) this.showMail(saved.mail);
    this.history.load();
  }

  route(arg) {
    if (!arg || arg === this.current?.record.id) return;
    this.ready.then(() => this.loadRecord(arg));
  }

  unmount() {
    this.controller?.abort();
    clearInterval(this.timer);
    clearTimeout(this.repaintTimer);
    clearTimeout(this.statusTimer);
    this.stopDrops();
    saved.text = this.textArea.value;
    saved.template = this.templateSelect.value || saved.template;
    saved.sentDate = this.dateInput.value;
    if (this.current?.form) saved.values = this.current.form.read();
  }

  // -- layout -------------------------------------------------------------------------

  build(root) {
    // -- the input card
    this.templateSelect = h("select", { id: "wo-template", onchange: () => this.showTemplateHint() });
    this.templateHint = h("span", { class: "hint", id: "wo-template-hint" });
    this.templateSelect.setAttribute("aria-describedby", this.templateHint.id);
    this.dateInput = h("input", { type: "date", id: "wo-sent", value: saved.sentDate || today(),
      "aria-describedby": "wo-sent-hint" });
    this.textArea = h("textarea", {
      id: "wo-text", rows: 9, spellcheck: "false", placeholder: t("workorders.text_placeholder"),
      "aria-describedby": "wo-drop-hint",
    }, saved.text);
    const fileInput = h("input", {
      type: "file", accept: ".txt,.eml,text/plain,message/rfc822", hidden: true, id: "wo-file",
      "aria-label": t("workorders.choose_file"),
      onchange: () => {
        if (fileInput.files[0]) this.readFile(fileInput.files[0]);
        fileInput.value = "";
      },
    });
    this.mailInfo = h("div", { class: "wo-mail", hidden: true });
    this.parseButton = h("button", { type: "submit", class: "primary wo-parse" }, t("workorders.parse"));
    this.stopButton = h("button", { type: "button", hidden: true, onclick: () => this.controller?.abort() },
      t("workorders.stop"));
    this.elapsed = h("span", { class: "hint wo-elapsed", "aria-hidden": "true" });
    this.status = h("p", { class: "wo-status", role: "status", "aria-live": "polite" });
    this.errorBox = h("div", { class: "error-box", role: "alert", hidden: true });
    const drop = h("div", { class: "wo-drop" },
      h("label", { for: "wo-text" }, h("span", { class: "wo-label" }, t("workorders.text_label"))), this.textArea,
      h("div", { class: "row wo-file-row" },
        h("button", { type: "button", onclick: () => fileInput.click() }, t("workorders.choose_file")), fileInput,
        h("button", { type: "button", class: "ghost wo-example", onclick: () => this.fillExample() },
          t("workorders.try_example")),
        h("span", { class: "hint", id: "wo-drop-hint" }, t("workorders.drop_hint"))),
      this.mailInfo);
    this.inputForm = h("form", {
      class: "card stack wo-input", "aria-labelledby": "wo-input-title",
      onsubmit: (e) => { e.preventDefault(); this.parse(); },
    },
    h("h2", { id: "wo-input-title" }, t("workorders.input_title")),
    h("div", { class: "wo-input-top" },
      h("label", { for: "wo-template", class: "grow" },
        h("span", { class: "wo-label" }, t("workorders.template_label")), this.templateSelect, this.templateHint),
      h("label", { for: "wo-sent", class: "wo-sent" }, h("span", { class: "wo-label" }, t("workorders.sent_label")),
        this.dateInput, h("span", { class: "hint", id: "wo-sent-hint" }, t("workorders.sent_hint")))),
    drop, this.errorBox,
    h("div", { class: "row" }, this.parseButton, this.stopButton, this.elapsed, this.status));

    // -- the result
    this.resultTitle = h("h2", { id: "wo-result-title", tabindex: "-1" }, t("workorders.result_title"));
    this.resultMeta = h("p", { class: "wo-meta" });
    this.summary = h("div", { class: "wo-summary" });
    this.limits = h("div", { class: "wo-limits" }); // what a backend could not do (unavailable.js)
    this.originalText = h("pre", { class: "wo-text wo-data", tabindex: "0", "aria-labelledby": "wo-original-title" });
    this.formBox = h("div", { class: "wo-form-box" });
    this.copyStatus = h("span", { class: "wo-copy-status", role: "status", "aria-live": "polite" });
    this.resultError = h("div", { class: "error-box", hidden: true });
    this.result = h("section", { class: "wo-result stack", "aria-labelledby": "wo-result-title", hidden: true },
      h("div", { class: "row wo-result-head" }, this.resultTitle, this.resultMeta),
      this.summary, this.limits, this.resultError,
      h("div", { class: "wo-columns" },
        h("section", { class: "card wo-original", "aria-labelledby": "wo-original-title" },
          h("h3", { id: "wo-original-title" }, t("workorders.original_title")),
          h("p", { class: "hint" }, h("mark", { class: "wo-mark wo-legend" }, t("workorders.legend_mark")), " ",
            t("workorders.legend_hint")),
          this.copiedLegend = copiedLegend(), this.originalText),
        h("section", { class: "card wo-fields stack", "aria-labelledby": "wo-fields-title" },
          h("h3", { id: "wo-fields-title" }, t("workorders.fields_title")), this.formBox,
          h("div", { class: "row wo-actions" },
            h("button", { type: "button", onclick: () => this.copyJson() }, t("workorders.copy_json")),
            h("button", { type: "button", onclick: () => this.downloadJson() },
              h("span", { "aria-hidden": "true" }, "⤓"), t("workorders.download_json")),
            this.copyStatus))));

    // -- history (history.js): Open shows the record, through the route when it is another
    this.history = historyCard({
      templateTitle: (name) => this.templates.find((x) => x.name === name)?.title,
      currentId: () => this.current?.record.id,
      open: (id) => {
        if (this.current?.record.id === id) this.loadRecord(id);
        else this.ctx.navigate(`#/workorders/${encodeURIComponent(id)}`);
      },
    });

    root.replaceChildren(h("div", { class: "page wo-page stack" },
      h("div", {}, h("h1", {}, t("workorders.title")), h("p", { class: "hint wo-intro" }, t("workorders.intro"))),
      this.inputForm, this.result, this.history.el));

    // -- drag and drop (drop.js): the input card takes files; elsewhere they are refused
    this.stopDrops = acceptFiles(drop, (files) => this.readFile(files[0], files.length));

    this.formBox.addEventListener("input", () => {
      clearTimeout(this.repaintTimer);
      this.repaintTimer = setTimeout(() => this.paint(), 200);
    });
    wireMarks(this.originalText, this.formBox, () => this.current?.form); // fields light marks, marks find fields
  }

  // -- helpers --------------------------------------------------------------------------

  say(text) {
    this.status.textContent = text;
  }

  showError(box, message) {
    box.replaceChildren(h("strong", {}, t("workorders.error_prefix")), " ", message);
    box.hidden = false;
  }

  showTemplateHint() {
    const tpl = this.templates.find((x) => x.name === this.templateSelect.value);
    this.templateHint.textContent = tpl ? tr(`workorders.template_hints.${tpl.name}`, tpl.description || "") : "";
    if (tpl) localStorage.setItem(TEMPLATE_KEY, tpl.name);
  }

  async loadTemplates() {
    try {
      const res = await get("v1/workorders/templates");
      this.templates = res.data || [];
      const want = saved.template || localStorage.getItem(TEMPLATE_KEY) || "work_order";
      this.templateSelect.replaceChildren(...this.templates.map((x) =>
        h("option", { value: x.name, selected: x.name === want }, templateName(x.name, x.title))));
      const has = (name) => this.templates.some((x) => x.name === name);
      if (!has(want) && has("work_order")) this.templateSelect.value = "work_order";
      this.showTemplateHint();
    } catch (e) {
      this.showError(this.errorBox, t("workorders.templates_failed", { message: errorText(e) }));
    }
  }

  fillExample() {
    const name = this.templateSelect.value;
    this.textArea.value = tr(`workorders.examples.${name}`, t("workorders.examples.work_order"));
    this.dateInput.value = today();
    this.mailInfo.hidden = true;
    saved.mail = null;
    this.errorBox.hidden = true;
    this.say(t("workorders.example_filled"));
    this.textArea.focus();
  }

  showMail(mail) {
    saved.mail = mail;
    this.mailInfo.hidden = !mail;
    if (!mail) return;
    const line = (key, value) => value && h("div", {}, h("span", { class: "wo-mail-key" }, t(key)), " ",
      h("span", { class: "wo-data" }, value));
    clear(this.mailInfo, line("workorders.mail_file", mail.name), line("workorders.mail_from", mail.from),
      line("workorders.mail_subject", mail.subject), line("workorders.mail_date", mail.date));
  }

  async readFile(file, count = 1) {
    this.errorBox.hidden = true;
    const kind = messageFileKind(file);
    if (!kind) return this.showError(this.errorBox, t("workorders.file_type", { name: file.name }));
    const tooBig = file.size > MAX_FILE
      && t("workorders.file_too_big", { name: file.name, size: formatBytes(file.size) });
    if (tooBig) return this.showError(this.errorBox, tooBig);
    try {
      const { text, mail } = await readMessageFile(file, kind);
      this.textArea.value = text;
      if (mail?.date) this.dateInput.value = mail.date;
      this.showMail(mail && { name: file.name, from: mail.from, subject: mail.subject, date: mail.date });
    } catch (e) {
      this.showError(this.errorBox, t("workorders.file_unreadable", { name: file.name, message: errorText(e) }));
      return;
    }
    if (!this.textArea.value.trim()) this.showError(this.errorBox, t("workorders.file_empty", { name: file.name }));
    this.say(count > 1 ? t("workorders.file_loaded_first", { name: file.name })
      : t("workorders.file_loaded", { name: file.name }));
  }

  busy(on) {
    this.parseButton.disabled = on;
    this.parseButton.setAttribute("aria-busy", on ? "true" : "false");
    this.parseButton.replaceChildren(...(on ? [h("span", { class: "wo-spinner", "aria-hidden": "true" }),
      t("workorders.parsing")] : [t("workorders.parse")]));
    this.stopButton.hidden = !on;
    this.inputForm.setAttribute("aria-busy", on ? "true" : "false");
    clearInterval(this.timer);
    this.elapsed.textContent = "";
    if (on) {
      const start = Date.now();
      this.timer = setInterval(() => {
        const s = Math.round((Date.now() - start) / 1000);
        this.elapsed.textContent = s >= 3 ? t("workorders.elapsed", { s }) : "";
      }, 1000);
    }
  }

  async parse() {
    this.errorBox.hidden = true;
    const text = this.textArea.value;
    if (!text.trim()) {
      this.showError(this.errorBox, t("workorders.need_text"));
      this.textArea.focus();
      return;
    }
    if (!this.templateSelect.value) {
      this.showError(this.errorBox, t("workorders.need_template"));
      return;
    }
    this.busy(true);
    this.say(t("workorders.parsing_status"));
    this.controller = new AbortController();
    const body = { text, template: this.templateSelect.value };
    if (this.dateInput.value) body.sent_date = this.dateInput.value;
    try {
      const res = await post("v1/workorders/parse", body, { signal: this.controller.signal });
      const rec = fromParse(res, text);
      await this.show(rec);
      this.say(rec.status === "ok" && !this.current.flagCount ? t("workorders.done_ok") : t("workorders.done_check"));
      this.resultTitle.focus();
      this.ctx.navigate(`#/workorders/${encodeURIComponent(rec.id)}`);
    } catch (e) {
      if (e.name === "AbortError") this.say(t("workorders.stopped"));
      else {
        this.say("");
        this.showError(this.errorBox, errorText(e));
      }
    } finally {
      this.controller = null;
      this.busy(false);
      this.history.load();
    }
  }

  // -- showing a result -----------------------------------------------------------------

  async show(rec, values = null) {
    const schema = rec.output ? await schemaFor(rec.template, rec.output) : null;
    this.current = { record: rec, schema, form: null };
    saved.record = rec;
    saved.values = values;
    this.result.hidden = false;
    this.resultMeta.replaceChildren(
      h("span", {}, templateName(rec.template, this.templates.find((x) => x.name === rec.template)?.title)),
      h("span", { "aria-hidden": "true" }, " · "),
      h("span", {}, rec.time ? formatTime(rec.time) : ""),
      " ", statusBadge(rec.status));
    this.resultError.hidden = true;
    if (rec.error && !rec.output) this.showError(this.resultError,
      t("workorders.record_failed", { message: rec.error }));

    this.formBox.replaceChildren();
    if (rec.output && schema) {
      this.current.form = buildForm(schema, values || rec.output);
      this.formBox.append(this.current.form.el);
    } else {
      this.formBox.append(h("p", { class: "muted" }, t("workorders.no_fields")));
    }
    Object.assign(this.current, showReview(this.summary, rec, this.current.form, schema));
    clear(this.limits, unavailableNote(rec.unavailable));
    this.paint();
    this.history.mark();
  }

  paint() {
    const cur = this.current;
    if (!cur?.record) return;
    const [rec, leaves] = [cur.record, cur.form?.leaves() || []];
    const copies = paintOriginal(this.originalText, rec.text || "", leaves, cur.flagged, cur.schema, rec.sources);
    this.copiedLegend.hidden = !copies; // the copies' legend only where there is such a mark
  }

  currentJson() {
    return JSON.stringify(this.current.form ? this.current.form.read() : this.current.record.output, null, 2);
  }

  flash(text) {
    this.copyStatus.textContent = text;
    clearTimeout(this.statusTimer);
    this.statusTimer = setTimeout(() => { this.copyStatus.textContent = ""; }, 2500);
  }

  async copyJson() {
    if (!this.current) return;
    this.flash((await copyText(this.currentJson())) ? t("workorders.copied") : t("workorders.copy_failed"));
  }

  downloadJson() {
    if (!this.current) return;
    const rec = this.current.record;
    download(`workorder-${rec.id || today()}.json`, `${this.currentJson()}\n`);
    this.flash(t("workorders.downloaded"));
  }

  async loadRecord(id) {
    try {
      const rec = this.history.record(id) || fromAudit(await get(`v1/workorders/${encodeURIComponent(id)}`));
      this.textArea.value = rec.text || "";
      if (this.templates.some((x) => x.name === rec.template)) this.templateSelect.value = rec.template;
      this.showTemplateHint();
      if (rec.sentDate) this.dateInput.value = rec.sentDate;
      this.showMail(null);
      await this.show(rec);
      this.result.scrollIntoView({ block: "start" });
      this.resultTitle.focus({ preventScroll: true });
    } catch (e) {
      this.showError(this.errorBox, t("workorders.open_failed", { message: errorText(e) }));
    }
  }
}
