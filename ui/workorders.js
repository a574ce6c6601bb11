// The Work orders page: paste a customer's message (or drop a .txt/.eml file), pick a
// template, and read the parsed fields as an editable form beside the original text, with
// the review flags on the fields they concern. Copy/Download give the EDITED values.
// Recent parses come from the audit log (GET /v1/workorders); #/workorders/<id> opens one.
//
// This file holds the page's state and wiring; the parts live beside it:
//   workorder_form.js     the template's schema as an editable form
//   workorder_files.js    reading .txt/.eml files (charsets, MIME, encoded words)
//   workorder_drop.js     dropping such a file on the input card
//   workorder_flags.js    the server's review sentences in the reader's language
//   workorder_summary.js  those flags on the form's fields and in the summary box
//   workorder_unavailable.js  what a parse through a backend server could not do
//   workorder_marks.js    the original message with the form's values marked
//   workorder_history.js  the recent-parses card and the CSV export
//   workorder_records.js  a parse as the page holds it, from either API answer

import { get, post, ApiError } from "./api.js";
import { clear, copyText, download, formatBytes, h } from "./dom.js";
import { errorText, formatTime, t } from "./i18n.js";
import { acceptFiles } from "./workorder_drop.js";
import { isoDate, messageFileKind, parseEml, readMessageFile } from "./workorder_files.js";
import { buildForm, inferSchema, tr } from "./workorder_form.js";
import { historyCard } from "./workorder_history.js";
import { paintOriginal, showActive } from "./workorder_marks.js";
import { fromAudit, fromParse, statusBadge, templateName } from "./workorder_records.js";
import { showReview } from "./workorder_summary.js";
import { unavailableNote } from "./workorder_unavailable.js";

// This module exported parseEml before it moved; kept so that any importer still finds it.
export { parseEml };

const MAX_FILE = 1024 * 1024;
const TEMPLATE_KEY = "flashdesk.woTemplate";

// What survives a re-mount (the language switch rebuilds the page): the draft and the result.
const saved = { text: "", template: null, sentDate: null, mail: null, record: null, values: null };
const schemaCache = new Map();

function today() {
  return isoDate(new Date());
}

// -- the page -------------------------------------------------------------------------

export function mount(root, ctx) {
  let templates = [];
  let current = null; // {record, form, schema, flagged: Set, flagCount} (the last two from showReview)
  let controller = null;
  let timer = null;
  let repaintTimer = null;
  let statusTimer = null;

  // -- the input card
  const templateSelect = h("select", { id: "wo-template", onchange: () => showTemplateHint() });
  const templateHint = h("span", { class: "hint", id: "wo-template-hint" });
  templateSelect.setAttribute("aria-describedby", templateHint.id);
  const dateInput = h("input", { type: "date", id: "wo-sent", value: saved.sentDate || today(), "aria-describedby": "wo-sent-hint" });
  const textArea = h("textarea", {
    id: "wo-text", rows: 9, spellcheck: "false", placeholder: t("workorders.text_placeholder"),
    "aria-describedby": "wo-drop-hint",
  }, saved.text);
  const fileInput = h("input", {
    type: "file", accept: ".txt,.eml,text/plain,message/rfc822", hidden: true, id: "wo-file",
    "aria-label": t("workorders.choose_file"),
    onchange: () => {
      if (fileInput.files[0]) readFile(fileInput.files[0]);
      fileInput.value = "";
    },
  });
  const mailInfo = h("div", { class: "wo-mail", hidden: true });
  const parseButton = h("button", { type: "submit", class: "primary wo-parse" }, t("workorders.parse"));
  const stopButton = h("button", { type: "button", hidden: true, onclick: () => controller?.abort() }, t("workorders.stop"));
  const elapsed = h("span", { class: "hint wo-elapsed", "aria-hidden": "true" });
  const status = h("p", { class: "wo-status", role: "status", "aria-live": "polite" });
  const errorBox = h("div", { class: "error-box", role: "alert", hidden: true });
  const drop = h("div", { class: "wo-drop" },
    h("label", { for: "wo-text" }, h("span", { class: "wo-label" }, t("workorders.text_label"))),
    textArea,
    h("div", { class: "row wo-file-row" },
      h("button", { type: "button", onclick: () => fileInput.click() }, t("workorders.choose_file")),
      fileInput,
      h("button", { type: "button", class: "ghost wo-example", onclick: fillExample }, t("workorders.try_example")),
      h("span", { class: "hint", id: "wo-drop-hint" }, t("workorders.drop_hint"))),
    mailInfo);
  const inputForm = h("form", {
    class: "card stack wo-input", "aria-labelledby": "wo-input-title",
    onsubmit: (e) => {
      e.preventDefault();
      parse();
    },
  },
  h("h2", { id: "wo-input-title" }, t("workorders.input_title")),
  h("div", { class: "wo-input-top" },
    h("label", { for: "wo-template", class: "grow" }, h("span", { class: "wo-label" }, t("workorders.template_label")), templateSelect, templateHint),
    h("label", { for: "wo-sent", class: "wo-sent" }, h("span", { class: "wo-label" }, t("workorders.sent_label")), dateInput,
      h("span", { class: "hint", id: "wo-sent-hint" }, t("workorders.sent_hint")))),
  drop,
  errorBox,
  h("div", { class: "row" }, parseButton, stopButton, elapsed, status));

  // -- the result
  const resultTitle = h("h2", { id: "wo-result-title", tabindex: "-1" }, t("workorders.result_title"));
  const resultMeta = h("p", { class: "wo-meta" });
  const summary = h("div", { class: "wo-summary" });
  const limits = h("div", { class: "wo-limits" }); // what a backend could not do (workorder_unavailable.js)
  const originalText = h("pre", { class: "wo-text wo-data", tabindex: "0", "aria-labelledby": "wo-original-title" });
  const formBox = h("div", { class: "wo-form-box" });
  const copyStatus = h("span", { class: "wo-copy-status", role: "status", "aria-live": "polite" });
  const resultError = h("div", { class: "error-box", hidden: true });
  const result = h("section", { class: "wo-result stack", "aria-labelledby": "wo-result-title", hidden: true },
    h("div", { class: "row wo-result-head" }, resultTitle, resultMeta),
    summary, limits, resultError,
    h("div", { class: "wo-columns" },
      h("section", { class: "card wo-original", "aria-labelledby": "wo-original-title" },
        h("h3", { id: "wo-original-title" }, t("workorders.original_title")),
        h("p", { class: "hint" }, h("mark", { class: "wo-mark wo-legend" }, t("workorders.legend_mark")), " ", t("workorders.legend_hint")),
        originalText),
      h("section", { class: "card wo-fields stack", "aria-labelledby": "wo-fields-title" },
        h("h3", { id: "wo-fields-title" }, t("workorders.fields_title")),
        formBox,
        h("div", { class: "row wo-actions" },
          h("button", { type: "button", onclick: copyJson }, t("workorders.copy_json")),
          h("button", { type: "button", onclick: downloadJson }, h("span", { "aria-hidden": "true" }, "⤓"), t("workorders.download_json")),
          copyStatus))));

  // -- history (workorder_history.js): Open shows the record, through the route when it is another
  const history = historyCard({
    templateTitle: (name) => templates.find((x) => x.name === name)?.title,
    currentId: () => current?.record.id,
    open: (id) => {
      if (current?.record.id === id) loadRecord(id);
      else ctx.navigate(`#/workorders/${encodeURIComponent(id)}`);
    },
  });

  const page = h("div", { class: "page wo-page stack" },
    h("div", {}, h("h1", {}, t("workorders.title")), h("p", { class: "hint wo-intro" }, t("workorders.intro"))),
    inputForm, result, history.el);
  root.replaceChildren(page);

  // -- drag and drop (workorder_drop.js): the input card takes files; elsewhere they are refused
  const stopDrops = acceptFiles(drop, (files) => readFile(files[0], files.length));

  // -- helpers

  function say(text) {
    status.textContent = text;
  }

  function showError(box, message) {
    box.replaceChildren(h("strong", {}, t("workorders.error_prefix")), " ", message);
    box.hidden = false;
  }

  function showTemplateHint() {
    const tpl = templates.find((x) => x.name === templateSelect.value);
    templateHint.textContent = tpl ? tr(`workorders.template_hints.${tpl.name}`, tpl.description || "") : "";
    if (tpl) localStorage.setItem(TEMPLATE_KEY, tpl.name);
  }

  async function loadTemplates() {
    try {
      const res = await get("v1/workorders/templates");
      templates = res.data || [];
      const want = saved.template || localStorage.getItem(TEMPLATE_KEY) || "work_order";
      templateSelect.replaceChildren(...templates.map((x) =>
        h("option", { value: x.name, selected: x.name === want }, templateName(x.name, x.title))));
      if (!templates.some((x) => x.name === want) && templates.some((x) => x.name === "work_order")) templateSelect.value = "work_order";
      showTemplateHint();
    } catch (e) {
      showError(errorBox, t("workorders.templates_failed", { message: errorText(e) }));
    }
  }

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

  function fillExample() {
    const name = templateSelect.value;
    textArea.value = tr(`workorders.examples.${name}`, t("workorders.examples.work_order"));
    dateInput.value = today();
    mailInfo.hidden = true;
    saved.mail = null;
    errorBox.hidden = true;
    say(t("workorders.example_filled"));
    textArea.focus();
  }

  function showMail(mail) {
    saved.mail = mail;
    if (!mail) {
      mailInfo.hidden = true;
      return;
    }
    const line = (key, value) => value && h("div", {}, h("span", { class: "wo-mail-key" }, t(key)), " ", h("span", { class: "wo-data" }, value));
    clear(mailInfo,
      line("workorders.mail_file", mail.name), line("workorders.mail_from", mail.from), line("workorders.mail_subject", mail.subject),
      line("workorders.mail_date", mail.date));
    mailInfo.hidden = false;
  }

  async function readFile(file, count = 1) {
    errorBox.hidden = true;
    const kind = messageFileKind(file);
    if (!kind) {
      showError(errorBox, t("workorders.file_type", { name: file.name }));
      return;
    }
    if (file.size > MAX_FILE) {
      showError(errorBox, t("workorders.file_too_big", { name: file.name, size: formatBytes(file.size) }));
      return;
    }
    try {
      const { text, mail } = await readMessageFile(file, kind);
      textArea.value = text;
      if (mail?.date) dateInput.value = mail.date;
      showMail(mail && { name: file.name, from: mail.from, subject: mail.subject, date: mail.date });
    } catch (e) {
      showError(errorBox, t("workorders.file_unreadable", { name: file.name, message: errorText(e) }));
      return;
    }
    if (!textArea.value.trim()) showError(errorBox, t("workorders.file_empty", { name: file.name }));
    say(count > 1 ? t("workorders.file_loaded_first", { name: file.name }) : t("workorders.file_loaded", { name: file.name }));
  }

  function busy(on) {
    parseButton.disabled = on;
    parseButton.setAttribute("aria-busy", on ? "true" : "false");
    parseButton.replaceChildren(...(on ? [h("span", { class: "wo-spinner", "aria-hidden": "true" }), t("workorders.parsing")] : [t("workorders.parse")]));
    stopButton.hidden = !on;
    inputForm.setAttribute("aria-busy", on ? "true" : "false");
    clearInterval(timer);
    elapsed.textContent = "";
    if (on) {
      const start = Date.now();
      timer = setInterval(() => {
        const s = Math.round((Date.now() - start) / 1000);
        elapsed.textContent = s >= 3 ? t("workorders.elapsed", { s }) : "";
      }, 1000);
    }
  }

  async function parse() {
    errorBox.hidden = true;
    const text = textArea.value;
    if (!text.trim()) {
      showError(errorBox, t("workorders.need_text"));
      textArea.focus();
      return;
    }
    if (!templateSelect.value) {
      showError(errorBox, t("workorders.need_template"));
      return;
    }
    busy(true);
    say(t("workorders.parsing_status"));
    controller = new AbortController();
    const body = { text, template: templateSelect.value };
    if (dateInput.value) body.sent_date = dateInput.value;
    try {
      const res = await post("v1/workorders/parse", body, { signal: controller.signal });
      const rec = fromParse(res, text);
      await show(rec);
      say(rec.status === "ok" && !current.flagCount ? t("workorders.done_ok") : t("workorders.done_check"));
      resultTitle.focus();
      ctx.navigate(`#/workorders/${encodeURIComponent(rec.id)}`);
    } catch (e) {
      if (e.name === "AbortError") say(t("workorders.stopped"));
      else {
        say("");
        showError(errorBox, errorText(e));
      }
    } finally {
      controller = null;
      busy(false);
      history.load();
    }
  }

  // -- showing a result

  async function show(rec, values = null) {
    const schema = rec.output ? await schemaFor(rec.template, rec.output) : null;
    current = { record: rec, schema, form: null };
    saved.record = rec;
    saved.values = values;
    result.hidden = false;
    resultMeta.replaceChildren(
      h("span", {}, templateName(rec.template, templates.find((x) => x.name === rec.template)?.title)),
      h("span", { "aria-hidden": "true" }, " · "),
      h("span", {}, rec.time ? formatTime(rec.time) : ""),
      " ", statusBadge(rec.status));
    resultError.hidden = true;
    if (rec.error && !rec.output) showError(resultError, t("workorders.record_failed", { message: rec.error }));

    formBox.replaceChildren();
    if (rec.output && schema) {
      current.form = buildForm(schema, values || rec.output);
      formBox.append(current.form.el);
    } else {
      formBox.append(h("p", { class: "muted" }, t("workorders.no_fields")));
    }
    Object.assign(current, showReview(summary, rec, current.form, schema));
    clear(limits, unavailableNote(rec.unavailable));
    paint();
    history.mark();
  }

  function paint() {
    if (!current?.record) return;
    paintOriginal(originalText, current.record.text || "", current.form ? current.form.leaves() : [], current.flagged, current.schema);
  }

  formBox.addEventListener("input", () => {
    clearTimeout(repaintTimer);
    repaintTimer = setTimeout(paint, 200);
  });
  formBox.addEventListener("focusin", (e) => {
    showActive(originalText, current?.form?.leaves().find((l) => l.control === e.target));
  });

  function currentJson() {
    return JSON.stringify(current.form ? current.form.read() : current.record.output, null, 2);
  }

  function flash(text) {
    copyStatus.textContent = text;
    clearTimeout(statusTimer);
    statusTimer = setTimeout(() => { copyStatus.textContent = ""; }, 2500);
  }

  async function copyJson() {
    if (!current) return;
    flash((await copyText(currentJson())) ? t("workorders.copied") : t("workorders.copy_failed"));
  }

  function downloadJson() {
    if (!current) return;
    const rec = current.record;
    download(`workorder-${rec.id || today()}.json`, `${currentJson()}\n`);
    flash(t("workorders.downloaded"));
  }

  async function loadRecord(id) {
    try {
      const rec = history.record(id) || fromAudit(await get(`v1/workorders/${encodeURIComponent(id)}`));
      textArea.value = rec.text || "";
      if (templates.some((x) => x.name === rec.template)) templateSelect.value = rec.template;
      showTemplateHint();
      if (rec.sentDate) dateInput.value = rec.sentDate;
      showMail(null);
      await show(rec);
      result.scrollIntoView({ block: "start" });
      resultTitle.focus({ preventScroll: true });
    } catch (e) {
      showError(errorBox, t("workorders.open_failed", { message: errorText(e) }));
    }
  }

  // -- start

  const ready = loadTemplates().then(async () => {
    if (ctx.arg && saved.record?.id === ctx.arg) {
      await show(saved.record, saved.values);
    } else if (ctx.arg) {
      await loadRecord(ctx.arg);
    } else if (saved.record) {
      await show(saved.record, saved.values);
    }
  });
  if (saved.mail) showMail(saved.mail);
  history.load();

  return {
    route(arg) {
      if (!arg || arg === current?.record.id) return;
      ready.then(() => loadRecord(arg));
    },
    unmount() {
      controller?.abort();
      clearInterval(timer);
      clearTimeout(repaintTimer);
      clearTimeout(statusTimer);
      stopDrops();
      saved.text = textArea.value;
      saved.template = templateSelect.value || saved.template;
      saved.sentDate = dateInput.value;
      if (current?.form) saved.values = current.form.read();
    },
  };
}
