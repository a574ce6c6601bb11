// The Work orders page: paste a customer's message (or drop a .txt/.eml file), pick a
// template, and read the parsed fields as an editable form beside the original text, with
// the review flags on the fields they concern. Copy/Download give the EDITED values.
// Recent parses come from the audit log (GET /v1/workorders); #/workorders/<id> opens one.
// The schema form lives in workorder_form.js.

import { apiKey, get, post, ApiError } from "./api.js";
import { clear, copyText, download, formatBytes, h } from "./dom.js";
import { formatTime, t } from "./i18n.js";
import { buildForm, inferSchema, pathLabel, tr } from "./workorder_form.js";

const MAX_FILE = 1024 * 1024;
const HISTORY_LIMIT = 20;
const TEMPLATE_KEY = "flashdesk.woTemplate";

// What survives a re-mount (the language switch rebuilds the page): the draft and the result.
const saved = { text: "", template: null, sentDate: null, mail: null, record: null, values: null };
const schemaCache = new Map();

function today() {
  const d = new Date();
  return isoDate(d);
}

function isoDate(d) {
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
}

function plural(key, n) {
  return t(n === 1 ? `${key}_one` : `${key}_other`, { n });
}

// -- review messages ----------------------------------------------------------------
// The server writes its reasons in English for logs; the page says them in the reader's
// language and ties each to the field it is about. Unknown wording is shown as written.

const REASONS = [
  [/^missing (\S+)$/, (m) => ({ path: m[1], text: t("workorders.flag.missing") })],
  [/^uncertain (\S+) \(the model's probability [\d.]+\)$/, (m) => ({ path: m[1], text: t("workorders.flag.uncertain") })],
  [/^contact (['"])(.*)\1 does not appear in the message$/, (m) => ({ path: "contact", text: t("workorders.flag.not_in_message", { value: m[2] }) })],
  [/^(\S+) (-?\d+) does not appear in the message$/, (m) => ({ path: m[1], text: t("workorders.flag.not_in_message", { value: m[2] }) })],
  [/^(\S+) (\S+) is before the message was sent \((\S+)\)$/, (m) => ({ path: m[1], text: t("workorders.flag.before_sent", { value: m[2], sent: m[3] }) })],
  [/^(\S+) (\S+) is not a calendar date$/, (m) => ({ path: m[1], text: t("workorders.flag.not_a_date", { value: m[2] }) })],
  [/^(\S+) is more than a year after the message was sent$/, (m) => ({ path: null, text: t("workorders.flag.far_future", { value: m[1] }) })],
  [/^(['"])(.*)\1 is not written like this in the message$/, (m) => ({ path: null, text: t("workorders.flag.not_copied", { value: m[2] }) })],
  [/^the model wrote (.*); from the message: no date$/, () => ({ path: null, text: t("workorders.flag.date_none") })],
  [/^the model wrote (.*); from the message: (.*)$/, (m) => ({ path: null, text: t("workorders.flag.date_from_message", { said: m[2] }), severity: "info" })],
  [/^the message gives several dates \((.*)\); the earliest is used$/, (m) => ({ path: null, text: t("workorders.flag.several_dates", { said: m[1] }) })],
  [/^the answer is not valid: (.*)$/, (m) => ({ path: null, text: t("workorders.flag.invalid", { detail: m[1] }) })],
  [/^the answer itself says needs_review$/, () => ({ path: "needs_review", text: t("workorders.flag.model_says") })],
  [/^the model wrote the same item again and again; (\d+) exact repeats were removed$/, (m) => ({ path: "items", text: t("workorders.flag.repeats", { n: m[1] }) })],
  [/^the answer ran long and was closed early/, () => ({ path: null, text: t("workorders.flag.closed_early") })],
  [/^not given: relative dates were resolved against today \((\S+)\)$/, (m) => ({ path: null, text: t("workorders.flag.no_sent_date", { date: m[1] }) })],
  [/^the parse failed$/, () => ({ path: null, text: t("workorders.flag.failed") })],
];

function explain(message) {
  for (const [re, fn] of REASONS) {
    const m = re.exec(message);
    if (m) return fn(m);
  }
  return { path: null, text: message };
}

/** Flags of a record: review reasons first (must check), then warnings (worth a look). */
function flagsOf(rec) {
  const out = [];
  const seen = new Set();
  const push = (path, severity, text) => {
    const key = `${path}|${text}`;
    if (!seen.has(key)) {
      seen.add(key);
      out.push({ path, severity, text });
    }
  };
  for (const r of rec.reasons) {
    const e = explain(r);
    push(e.path || rec.warnings.find((w) => w.message === r && w.field)?.field || null, "review", e.text);
  }
  for (const w of rec.warnings) {
    const e = explain(w.message);
    const severity = rec.reasons.includes(w.message) ? "review" : e.severity || "check";
    push(w.field || e.path, severity, e.text);
  }
  return out;
}

// -- records ------------------------------------------------------------------------

function fromParse(res, text) {
  return {
    id: res.id, template: res.template, model: res.model, time: res.created, text, sentDate: res.sent_date,
    output: res.result, valid: res.valid, needsReview: res.needs_review, reasons: res.review_reasons || [],
    warnings: res.warnings || [], error: res.valid ? null : (res.errors || []).join("; ") || null,
    status: !res.valid ? "invalid" : res.needs_review ? "needs_review" : "ok",
  };
}

function fromAudit(r) {
  return {
    id: r.id, template: r.template, model: r.model, time: Date.parse(r.created_at) / 1000, text: r.input_text,
    sentDate: r.sent_date, output: r.output, valid: r.valid, needsReview: r.needs_review,
    reasons: r.review_reasons || [], warnings: r.warnings || [], error: r.error, status: r.status,
  };
}

function templateName(name, title) {
  return tr(`workorders.templates.${name}`, title || name);
}

function statusBadge(status) {
  const cls = status === "ok" ? "badge ok" : status === "error" ? "badge wo-badge-error" : "badge warn";
  const icon = status === "ok" ? "✓" : "⚠";
  return h("span", { class: cls }, h("span", { "aria-hidden": "true" }, `${icon} `), t(`workorders.status.${status}`));
}

// -- message files --------------------------------------------------------------------

function binaryString(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return s;
}

function bytesOf(binary) {
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i) & 0xff;
  return out;
}

/** Bytes as text: the charset named, else UTF-8, else Big5 (older Taiwanese Windows files). */
function decodeText(bytes, charset = null) {
  if (charset) {
    try {
      return new TextDecoder(charset).decode(bytes);
    } catch { /* an unknown charset label: guess below */ }
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    try {
      return new TextDecoder("big5", { fatal: true }).decode(bytes);
    } catch {
      return new TextDecoder("utf-8").decode(bytes);
    }
  }
}

function headerParam(value, name) {
  const m = new RegExp(`;\\s*${name}\\s*=\\s*(?:"([^"]*)"|([^;\\s]+))`, "i").exec(value || "");
  return m ? (m[1] ?? m[2]) : null;
}

/** RFC 2047 words in headers: =?UTF-8?B?...?= and =?Big5?Q?...?=. */
function decodeHeader(binary) {
  const joined = binary.replace(/\?=\s+=\?/g, "?==?");
  let out = "";
  let last = 0;
  for (const m of joined.matchAll(/=\?([^?]+)\?([BbQq])\?([^?]*)\?=/g)) {
    out += decodeText(bytesOf(joined.slice(last, m.index)));
    let raw;
    try {
      raw = m[2].toUpperCase() === "B" ? atob(m[3])
        : m[3].replace(/_/g, " ").replace(/=([0-9A-Fa-f]{2})/g, (x, hex) => String.fromCharCode(parseInt(hex, 16)));
    } catch {
      raw = m[0];
    }
    out += decodeText(bytesOf(raw), m[1].replace(/\*.*$/, ""));
    last = m.index + m[0].length;
  }
  return (out + decodeText(bytesOf(joined.slice(last)))).trim();
}

function splitMessage(binary) {
  const m = /\r?\n\r?\n/.exec(binary);
  const head = m ? binary.slice(0, m.index) : binary;
  const body = m ? binary.slice(m.index + m[0].length) : "";
  const headers = {};
  for (const line of head.replace(/\r?\n[ \t]+/g, " ").split(/\r?\n/)) {
    const c = line.indexOf(":");
    if (c > 0) {
      const key = line.slice(0, c).trim().toLowerCase();
      if (!(key in headers)) headers[key] = line.slice(c + 1).trim();
    }
  }
  return { headers, body };
}

function htmlToText(html) {
  const doc = new DOMParser().parseFromString(html, "text/html");
  for (const el of doc.querySelectorAll("script, style, head")) el.remove();
  for (const el of doc.querySelectorAll("br")) el.replaceWith("\n");
  for (const el of doc.querySelectorAll("p, div, tr, li, h1, h2, h3")) el.append("\n");
  return (doc.body?.textContent || "").replace(/\n{3,}/g, "\n\n");
}

/** The readable text of one MIME entity: {text, html} (null when it has none). */
function bodyText(headers, body, depth = 0) {
  const ctype = headers["content-type"] || "text/plain";
  const type = ctype.split(";")[0].trim().toLowerCase();
  if (/^attachment/i.test(headers["content-disposition"] || "")) return null;
  if (type.startsWith("multipart/")) {
    const boundary = headerParam(ctype, "boundary");
    if (!boundary || depth > 5) return null;
    const parts = [];
    let part = null;
    for (const line of body.split(/\r?\n/)) {
      if (line.trimEnd() === `--${boundary}--`) break;
      if (line.trimEnd() === `--${boundary}`) {
        if (part) parts.push(part.join("\n"));
        part = [];
      } else if (part) part.push(line);
    }
    if (part) parts.push(part.join("\n"));
    const found = parts.map((p) => {
      const s = splitMessage(p);
      return bodyText(s.headers, s.body, depth + 1);
    }).filter(Boolean);
    return found.find((f) => !f.html) || found[0] || null;
  }
  if (!type.startsWith("text/")) return null;
  const encoding = (headers["content-transfer-encoding"] || "").toLowerCase();
  let raw = body;
  if (encoding === "base64") {
    try { raw = atob(body.replace(/\s+/g, "")); } catch { raw = body; }
  } else if (encoding === "quoted-printable") {
    raw = body.replace(/=\r?\n/g, "").replace(/=([0-9A-Fa-f]{2})/g, (x, hex) => String.fromCharCode(parseInt(hex, 16)));
  }
  const text = decodeText(bytesOf(raw), headerParam(ctype, "charset"));
  return type === "text/html" ? { text: htmlToText(text), html: true } : { text, html: false };
}

/** An .eml file -> {text, from, subject, date (YYYY-MM-DD or null), dateText}. */
export function parseEml(binary) {
  const { headers, body } = splitMessage(binary);
  const found = bodyText(headers, body);
  const sent = headers.date ? new Date(headers.date.replace(/\s*\([^)]*\)\s*$/, "")) : null;
  return {
    text: (found ? found.text : decodeText(bytesOf(body))).replace(/\r\n?/g, "\n").trim(),
    from: headers.from ? decodeHeader(headers.from) : "",
    subject: headers.subject ? decodeHeader(headers.subject) : "",
    date: sent && !Number.isNaN(sent.getTime()) ? isoDate(sent) : null,
  };
}

// -- original text with the values it gave ----------------------------------------------

function escapeRe(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** [start, end, path] where a field's current value is written in the message. */
function findValues(text, leaves) {
  const hits = [];
  for (const leaf of leaves) {
    if (!["text", "longtext", "number", "list"].includes(leaf.kind)) continue;
    const v = leaf.read();
    const values = Array.isArray(v) ? v : [v];
    for (const one of values) {
      let re = null;
      if (typeof one === "number" && one > 0) {
        const forms = [String(one), one.toLocaleString("en-US")].filter((f, i, a) => a.indexOf(f) === i).map(escapeRe);
        re = new RegExp(`(?<![\\d.,])(?:${forms.join("|")})(?![\\d]|[.,]\\d)`, "g");
      } else if (typeof one === "string" && one.trim().length >= 2) {
        re = new RegExp(escapeRe(one.trim()), "giu");
      }
      if (!re) continue;
      for (const m of text.matchAll(re)) hits.push([m.index, m.index + m[0].length, leaf.path]);
    }
  }
  hits.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
  const kept = [];
  for (const hit of hits) if (!kept.length || hit[0] >= kept[kept.length - 1][1]) kept.push(hit);
  return kept;
}

// -- the page -------------------------------------------------------------------------

export function mount(root, ctx) {
  let templates = [];
  let current = null; // {record, form, schema, flagged: Set}
  let controller = null;
  let timer = null;
  let historyRows = new Map();
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
  const originalText = h("pre", { class: "wo-text wo-data", tabindex: "0", "aria-labelledby": "wo-original-title" });
  const formBox = h("div", { class: "wo-form-box" });
  const copyStatus = h("span", { class: "wo-copy-status", role: "status", "aria-live": "polite" });
  const resultError = h("div", { class: "error-box", hidden: true });
  const result = h("section", { class: "wo-result stack", "aria-labelledby": "wo-result-title", hidden: true },
    h("div", { class: "row wo-result-head" }, resultTitle, resultMeta),
    summary, resultError,
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

  // -- history
  const historyBody = h("div", { class: "wo-history-body" });
  const historyStatus = h("span", { class: "hint", role: "status", "aria-live": "polite" });
  const history = h("section", { class: "card stack wo-history", "aria-labelledby": "wo-history-title" },
    h("div", { class: "row" },
      h("h2", { id: "wo-history-title", class: "grow" }, t("workorders.history_title")),
      h("button", { type: "button", class: "small", onclick: () => loadHistory() }, t("workorders.refresh")),
      h("button", { type: "button", class: "small", onclick: exportCsv }, h("span", { "aria-hidden": "true" }, "⤓"), t("workorders.export_csv"))),
    historyStatus, historyBody);

  const page = h("div", { class: "page wo-page stack" },
    h("div", {}, h("h1", {}, t("workorders.title")), h("p", { class: "hint wo-intro" }, t("workorders.intro"))),
    inputForm, result, history);
  root.replaceChildren(page);

  // -- drag and drop: the input card takes files; elsewhere a dropped file must not open in the tab
  const hasFiles = (e) => [...(e.dataTransfer?.types || [])].includes("Files");
  drop.addEventListener("dragover", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
    drop.classList.add("wo-drag");
  });
  drop.addEventListener("dragleave", (e) => {
    if (!drop.contains(e.relatedTarget)) drop.classList.remove("wo-drag");
  });
  drop.addEventListener("drop", (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    drop.classList.remove("wo-drag");
    const files = e.dataTransfer.files;
    if (files.length) readFile(files[0], files.length);
  });
  const guard = (e) => {
    if (hasFiles(e) && !drop.contains(e.target)) e.preventDefault();
  };
  window.addEventListener("dragover", guard);
  window.addEventListener("drop", guard);

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
      showError(errorBox, t("workorders.templates_failed", { message: e.message }));
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
    const ext = /\.([^.]+)$/.exec(file.name)?.[1]?.toLowerCase() || "";
    const eml = ext === "eml" || file.type === "message/rfc822";
    if (!eml && ext !== "txt" && !(ext === "" && file.type === "text/plain")) {
      showError(errorBox, t("workorders.file_type", { name: file.name }));
      return;
    }
    if (file.size > MAX_FILE) {
      showError(errorBox, t("workorders.file_too_big", { name: file.name, size: formatBytes(file.size) }));
      return;
    }
    try {
      const bytes = new Uint8Array(await file.arrayBuffer());
      if (eml) {
        const mail = parseEml(binaryString(bytes));
        textArea.value = mail.text;
        if (mail.date) dateInput.value = mail.date;
        showMail({ name: file.name, from: mail.from, subject: mail.subject, date: mail.date });
      } else {
        textArea.value = decodeText(bytes).replace(/\r\n?/g, "\n").trim();
        showMail(null);
      }
    } catch (e) {
      showError(errorBox, t("workorders.file_unreadable", { name: file.name, message: e.message }));
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
        showError(errorBox, e.message);
      }
    } finally {
      controller = null;
      busy(false);
      loadHistory();
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
    renderFlags(rec);
    paint();
    markHistory();
  }

  function renderFlags(rec) {
    const flags = flagsOf(rec);
    const onField = [];
    const general = [];
    for (const f of flags) {
      const control = f.path && current.form ? current.form.flag(f.path, f.severity, f.text) : null;
      if (control) onField.push({ ...f, control });
      else general.push(f);
    }
    const real = onField.filter((f) => f.severity !== "info");
    current.flagged = new Set(real.map((f) => f.path));
    const fieldsOf = (list) => new Set(list.map((f) => f.path.replace(/\[\d+\]$/, ""))).size;
    const must = fieldsOf(real.filter((f) => f.severity === "review"));
    const look = fieldsOf(real);
    const notes = general.filter((f) => f.severity !== "info");
    current.flagCount = look + notes.length;
    if (!real.length && !notes.length && rec.status === "ok") {
      summary.className = "wo-summary wo-summary-ok";
      summary.replaceChildren(h("p", {}, h("span", { "aria-hidden": "true" }, "✓ "), t("workorders.nothing_flagged")));
      return;
    }
    summary.className = "wo-summary notice";
    const goto = (f) => h("button", {
      type: "button", class: "wo-link",
      onclick: () => {
        f.control.scrollIntoView({ block: "center", behavior: "smooth" });
        f.control.focus({ preventScroll: true });
      },
    }, pathLabel(f.path, current.schema));
    clear(summary,
      h("p", { class: "wo-summary-title" }, h("span", { "aria-hidden": "true" }, "⚠ "),
        h("strong", {}, must ? plural("workorders.flags_count", must) : look ? plural("workorders.look_count", look) : t("workorders.check_answer"))),
      real.length ? h("ul", { class: "wo-summary-list" }, real.map((f) => h("li", { class: `wo-flag-${f.severity}` },
        linkLine(goto(f), f.text), f.severity === "review" ? h("span", { class: "wo-must" }, t("workorders.must_check")) : null))) : null,
      notes.length ? h("ul", { class: "wo-summary-list" }, notes.map((f) => h("li", {}, f.text))) : null);
  }

  /** "{field}: {text}" from the i18n pattern, with the field as a button. */
  function linkLine(button, text) {
    const [before, after = ""] = t("workorders.summary_line", { text }).split("{field}");
    return [before, button, after];
  }

  function paint() {
    const rec = current?.record;
    if (!rec) return;
    const text = rec.text || "";
    const leaves = current.form ? current.form.leaves() : [];
    const hits = findValues(text, leaves);
    const parts = [];
    let at = 0;
    for (const [a, b, path] of hits) {
      if (a > at) parts.push(text.slice(at, a));
      const flagged = [...(current.flagged || [])].some((p) => p === path || path.startsWith(`${p}.`) || path.startsWith(`${p}[`));
      parts.push(h("mark", { class: flagged ? "wo-mark wo-mark-flag" : "wo-mark", dataset: { path }, title: pathLabel(path, current.schema) }, text.slice(a, b)));
      at = b;
    }
    parts.push(text.slice(at));
    originalText.replaceChildren(...parts);
  }

  formBox.addEventListener("input", () => {
    clearTimeout(repaintTimer);
    repaintTimer = setTimeout(paint, 200);
  });
  formBox.addEventListener("focusin", (e) => {
    const leaf = current?.form?.leaves().find((l) => l.control === e.target);
    for (const m of originalText.querySelectorAll(".wo-mark-active")) m.classList.remove("wo-mark-active");
    if (!leaf) return;
    const marks = [...originalText.querySelectorAll("mark")].filter((m) => m.dataset.path === leaf.path);
    for (const m of marks) m.classList.add("wo-mark-active");
    if (marks[0]) {
      const box = originalText.getBoundingClientRect();
      const r = marks[0].getBoundingClientRect();
      if (r.top < box.top || r.bottom > box.bottom) originalText.scrollTop += r.top - box.top - box.height / 3;
    }
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
      const rec = historyRows.get(id) || fromAudit(await get(`v1/workorders/${encodeURIComponent(id)}`));
      textArea.value = rec.text || "";
      if (templates.some((x) => x.name === rec.template)) templateSelect.value = rec.template;
      showTemplateHint();
      if (rec.sentDate) dateInput.value = rec.sentDate;
      showMail(null);
      await show(rec);
      result.scrollIntoView({ block: "start" });
      resultTitle.focus({ preventScroll: true });
    } catch (e) {
      showError(errorBox, t("workorders.open_failed", { message: e.message }));
    }
  }

  // -- history

  function summaryOf(rec) {
    const out = rec.output || {};
    const name = typeof out.customer_name === "string" && out.customer_name.trim() ? out.customer_name.trim() : null;
    const first = (rec.text || "").trim().split(/\n/)[0];
    return name || (first.length > 70 ? `${first.slice(0, 70)}…` : first);
  }

  function markHistory() {
    for (const tr of historyBody.querySelectorAll("tr[data-id]")) {
      if (current && tr.dataset.id === current.record.id) tr.setAttribute("aria-current", "true");
      else tr.removeAttribute("aria-current");
    }
  }

  async function loadHistory() {
    historyStatus.textContent = t("workorders.history_loading");
    let res;
    try {
      res = await get(`v1/workorders?limit=${HISTORY_LIMIT}`);
    } catch (e) {
      historyStatus.textContent = "";
      historyBody.replaceChildren(h("div", { class: "error-box" }, t("workorders.history_failed", { message: e.message })));
      return;
    }
    const records = (res.data || []).map(fromAudit);
    historyRows = new Map(records.map((r) => [r.id, r]));
    historyStatus.textContent = res.total > records.length ? t("workorders.history_more", { n: records.length, total: res.total }) : "";
    if (!records.length) {
      historyBody.replaceChildren(h("p", { class: "muted" }, t("workorders.history_empty")));
      return;
    }
    historyBody.replaceChildren(h("div", { class: "wo-table-scroll" }, h("table", { class: "wo-history-table" },
      h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, t("workorders.col_time")),
        h("th", { scope: "col" }, t("workorders.col_template")),
        h("th", { scope: "col" }, t("workorders.col_customer")),
        h("th", { scope: "col" }, t("workorders.col_status")),
        h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, t("workorders.actions"))))),
      h("tbody", {}, records.map((r) => {
        const when = r.time ? formatTime(r.time) : "";
        return h("tr", { dataset: { id: r.id } },
          h("td", { class: "wo-nowrap" }, when),
          h("td", {}, templateName(r.template, templates.find((x) => x.name === r.template)?.title)),
          h("td", { class: "wo-data wo-history-summary" }, summaryOf(r)),
          h("td", {}, statusBadge(r.status)),
          h("td", {}, h("button", {
            type: "button", class: "small", "aria-label": t("workorders.open_label", { when }),
            onclick: () => {
              if (current?.record.id === r.id) loadRecord(r.id);
              else ctx.navigate(`#/workorders/${encodeURIComponent(r.id)}`);
            },
          }, t("workorders.open"))));
      })))));
    markHistory();
  }

  async function exportCsv() {
    historyStatus.textContent = t("workorders.exporting");
    try {
      const headers = apiKey() ? { Authorization: `Bearer ${apiKey()}` } : {};
      let res;
      try {
        res = await fetch("v1/workorders/export?format=csv", { headers });
      } catch {
        throw new Error(t("workorders.offline"));
      }
      if (!res.ok) {
        let message = `HTTP ${res.status}`;
        try { message = (await res.json()).error.message || message; } catch { /* not JSON */ }
        if (res.status === 401) window.dispatchEvent(new CustomEvent("flashdesk:need-key"));
        throw new Error(message);
      }
      const name = /filename="([^"]+)"/.exec(res.headers.get("content-disposition") || "")?.[1] || `workorders-${today()}.csv`;
      const text = await res.text(); // the decoder drops the BOM Excel needs to read UTF-8: put it back
      download(name, text.startsWith("\ufeff") ? text : `\ufeff${text}`, "text/csv;charset=utf-8");
      historyStatus.textContent = t("workorders.exported", { name });
    } catch (e) {
      historyStatus.textContent = "";
      historyBody.prepend(h("div", { class: "error-box", role: "alert" }, t("workorders.export_failed", { message: e.message })));
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
  loadHistory();

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
      window.removeEventListener("dragover", guard);
      window.removeEventListener("drop", guard);
      saved.text = textArea.value;
      saved.template = templateSelect.value || saved.template;
      saved.sentDate = dateInput.value;
      if (current?.form) saved.values = current.form.read();
    },
  };
}
