// The "Recent parses" card of the Work orders page: the newest parses from the audit log
// (GET /v1/workorders), each with an Open button, and the whole log as a CSV download
// (GET /v1/workorders/export) for the office's spreadsheet.
//
// The card keeps the rows it last loaded so that opening one needs no second request; the
// page tells it which record is on screen (marked aria-current) and what Open does.

import { apiKey, get } from "../api.js";
import { download, h } from "../dom.js";
import { errorText, formatTime, t } from "../i18n.js";
import { isoDate } from "./files.js";
import { fromAudit, statusBadge, templateName } from "./records.js";

const HISTORY_LIMIT = 20;

/** The customer's name when the parse found one, else the message's first line, shortened. */
function summaryOf(rec) {
  const out = rec.output || {};
  const name = typeof out.customer_name === "string" && out.customer_name.trim() ? out.customer_name.trim() : null;
  const first = (rec.text || "").trim().split(/\n/)[0];
  return name || (first.length > 70 ? `${first.slice(0, 70)}…` : first);
}

/**
 * historyCard({templateTitle(name), currentId(), open(id)}) -> {el, load(), mark(), record(id)}
 * templateTitle: the loaded template's title (or undefined); currentId: the record shown now;
 * open: what the row's Open button does. record(id) is a row of the last load, if there.
 */
export function historyCard({ templateTitle, currentId, open }) {
  let rows = new Map();

  const body = h("div", { class: "wo-history-body" });
  const status = h("span", { class: "hint", role: "status", "aria-live": "polite" });
  const el = h("section", { class: "card stack wo-history", "aria-labelledby": "wo-history-title" },
    h("div", { class: "row" },
      h("h2", { id: "wo-history-title", class: "grow" }, t("workorders.history_title")),
      h("button", { type: "button", class: "small", onclick: () => load() }, t("workorders.refresh")),
      h("button", { type: "button", class: "small", onclick: exportCsv },
        h("span", { "aria-hidden": "true" }, "⤓"), t("workorders.export_csv"))),
    status, body);

  function mark() {
    const id = currentId(); // undefined when nothing is shown: no row matches
    for (const tr of body.querySelectorAll("tr[data-id]")) {
      if (tr.dataset.id === id) tr.setAttribute("aria-current", "true");
      else tr.removeAttribute("aria-current");
    }
  }

  async function load() {
    status.textContent = t("workorders.history_loading");
    let res;
    try {
      res = await get(`v1/workorders?limit=${HISTORY_LIMIT}`);
    } catch (e) {
      status.textContent = "";
      body.replaceChildren(h("div", { class: "error-box" }, t("workorders.history_failed", { message: errorText(e) })));
      return;
    }
    const records = (res.data || []).map(fromAudit);
    rows = new Map(records.map((r) => [r.id, r]));
    status.textContent = res.total > records.length
      ? t("workorders.history_more", { n: records.length, total: res.total }) : "";
    if (!records.length) {
      body.replaceChildren(h("p", { class: "muted" }, t("workorders.history_empty")));
      return;
    }
    body.replaceChildren(h("div", { class: "wo-table-scroll" }, h("table", { class: "wo-history-table" },
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
          h("td", {}, templateName(r.template, templateTitle(r.template))),
          h("td", { class: "wo-data wo-history-summary" }, summaryOf(r)),
          h("td", {}, statusBadge(r.status)),
          h("td", {}, h("button", {
            type: "button", class: "small", "aria-label": t("workorders.open_label", { when }),
            onclick: () => open(r.id),
          }, t("workorders.open"))));
      })))));
    mark();
  }

  // A plain fetch, not api.js: the answer is a file to save, not JSON. The errors still come
  // as the API's JSON, and a 401 asks for the key the same way api.js does.
  async function exportCsv() {
    status.textContent = t("workorders.exporting");
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
      const name = /filename="([^"]+)"/.exec(res.headers.get("content-disposition") || "")?.[1]
        || `workorders-${isoDate(new Date())}.csv`;
      const text = await res.text(); // the decoder drops the BOM Excel needs to read UTF-8: put it back
      download(name, text.startsWith("\ufeff") ? text : `\ufeff${text}`, "text/csv;charset=utf-8");
      status.textContent = t("workorders.exported", { name });
    } catch (e) {
      status.textContent = "";
      body.prepend(h("div", { class: "error-box", role: "alert" },
        t("workorders.export_failed", { message: errorText(e) })));
    }
  }

  return { el, load, mark, record: (id) => rows.get(id) };
}
