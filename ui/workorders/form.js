// A work-order template's JSON Schema as an editable form: string -> text box, enum ->
// list, integer/number -> number box, date -> date picker, boolean -> tick box, a list of
// objects (line items) -> a table with add/remove, a nested object -> a fieldset.
// `read()` gives the CURRENT values typed per the schema (numbers as numbers, empty -> null
// where the schema allows null). Review flags attach to fields by their path
// ("items[0].quantity"). Labels come from the i18n file for the built-in fields, else the
// schema's title, else the key made readable.

import { h } from "../dom.js";
import { t } from "../i18n.js";

let counter = 0;
const uid = (path) => `wo-f${++counter}-${path.replace(/[^A-Za-z0-9]+/g, "-")}`;

/** t() with a fallback: the key itself comes back when a language lacks it. */
export function tr(key, fallback, vars) {
  const s = t(key, vars);
  return s === key ? fallback : s;
}

export function humanize(key) {
  const s = String(key).replace(/[_-]+/g, " ").trim();
  return s ? s[0].toUpperCase() + s.slice(1) : String(key);
}

export function fieldLabel(key, node = {}) {
  return tr(`workorders.fields.${key}`, node.title || humanize(key));
}

export function valueLabel(value) {
  return tr(`workorders.values.${value}`, humanize(value));
}

/** A path such as "items[0].quantity" in words: "Quantity (line 1)". */
export function pathLabel(path, schema) {
  const parts = [...String(path).matchAll(/([^.[\]]+)(?:\[(\d+)\])?/g)];
  if (!parts.length) return path;
  const last = parts[parts.length - 1];
  const node = schema ? nodeAt(schema, path) : {};
  const label = last[2] !== undefined && parts.length === 1
    ? t("workorders.line_n", { n: Number(last[2]) + 1 })
    : fieldLabel(last[1], node || {});
  const row = parts.slice(0, -1).reverse().find((p) => p[2] !== undefined);
  return row ? t("workorders.field_in_line", { field: label, n: Number(row[2]) + 1 }) : label;
}

// -- schema reading -----------------------------------------------------------------

function resolve(root, node) {
  let n = node || {};
  for (let i = 0; i < 10 && n.$ref; i++) {
    const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(n.$ref);
    n = (m && root[m[1]] && root[m[1]][m[2]]) || {};
  }
  for (const key of ["anyOf", "oneOf"]) {
    if (Array.isArray(n[key])) {
      const real = n[key].map((b) => resolve(root, b)).filter((b) => b.type !== "null");
      const nullable = real.length < n[key].length;
      if (real.length === 1) return { ...n, ...real[0], [key]: undefined, nullable: nullable || real[0].nullable };
    }
  }
  const types = Array.isArray(n.type) ? n.type : n.type ? [n.type] : [];
  const main = types.find((x) => x !== "null") || (n.enum ? "string" : n.properties ? "object" : undefined);
  return { ...n, mainType: main, nullable: n.nullable || types.includes("null") || (n.enum || []).includes(null) };
}

/** The resolved schema node of the value at `path` ("items[0].color"). */
export function nodeAt(schema, path) {
  let node = resolve(schema, schema);
  for (const p of String(path).matchAll(/([^.[\]]+)(?:\[(\d+)\])?/g)) {
    node = resolve(schema, (node.properties || {})[p[1]]);
    if (p[2] !== undefined) node = resolve(schema, node.items);
  }
  return node;
}

function kindOf(node) {
  if (Array.isArray(node.enum)) return "enum";
  switch (node.mainType) {
    case "boolean": return "bool";
    case "integer": case "number": return "number";
    case "string": return node.format === "date" ? "date" : (node.maxLength || 0) > 200 ? "longtext" : "text";
    case "array": return node.itemNode.mainType === "object" && node.itemNode.properties ? "table" : "list";
    case "object": return node.properties ? "object" : "json";
    default: return "json";
  }
}

/** A schema for a stored parse whose template is gone: the shape of its values. */
export function inferSchema(value) {
  if (value === null || value === undefined) return { type: ["string", "null"] };
  if (Array.isArray(value)) {
    const first = value.find((v) => v !== null) ?? "";
    return { type: "array", items: inferSchema(first) };
  }
  if (typeof value === "object") {
    return { type: "object",
      properties: Object.fromEntries(Object.entries(value).map(([k, v]) => [k, inferSchema(v)])) };
  }
  if (typeof value === "boolean") return { type: "boolean" };
  if (typeof value === "number") return { type: Number.isInteger(value) ? ["integer", "null"] : ["number", "null"] };
  return /^\d{4}-\d{2}-\d{2}$/.test(value) ? { type: ["string", "null"], format: "date" }
    : { type: ["string", "null"] };
}

// -- leaf controls ------------------------------------------------------------------

/** {control, read(), kind} for one value; `name` is the accessible label when no <label> wraps it. */
function leaf(node, kind, value, id, name) {
  const aria = name ? { "aria-label": name } : {};
  if (kind === "enum") {
    const options = [...node.enum.filter((v) => v !== null)];
    if (value !== null && value !== undefined && !options.includes(value)) options.push(value);
    const control = h("select", { id, ...aria },
      node.nullable || value === null || value === undefined
        ? h("option", { value: "" }, t("workorders.not_set")) : null,
      options.map((v) => h("option", { value: String(v), selected: v === value }, valueLabel(v))));
    if (value === null || value === undefined) control.value = "";
    return {
      control, kind,
      read: () => (control.value === "" ? null : options.find((v) => String(v) === control.value) ?? control.value),
    };
  }
  if (kind === "bool") {
    const control = h("input", { type: "checkbox", id, checked: value === true, ...aria });
    return { control, kind, read: () => control.checked };
  }
  if (kind === "number") {
    const integer = node.mainType === "integer";
    const control = h("input", {
      type: "number", id, step: integer ? "1" : "any", inputmode: integer ? "numeric" : "decimal",
      min: node.minimum ?? null, value: typeof value === "number" ? String(value) : "", ...aria,
    });
    return {
      control, kind,
      read: () => {
        const n = control.value.trim() === "" ? NaN : Number(control.value);
        return Number.isFinite(n) ? n : null;
      },
    };
  }
  if (kind === "date") {
    const control = h("input", { type: "date", id, value: typeof value === "string" ? value : "", ...aria });
    return { control, kind, read: () => control.value || (node.nullable ? null : "") };
  }
  if (kind === "list") {
    const numeric = ["integer", "number"].includes(node.itemNode.mainType);
    const control = h("input", {
      type: "text", id, inputmode: numeric ? "numeric" : null,
      value: Array.isArray(value) ? value.join(", ") : "", ...aria,
    });
    return {
      control, kind,
      read: () => {
        const parts = control.value.split(numeric ? /[,，、;\s]+/ : /[,，、;]+/).map((s) => s.trim()).filter(Boolean);
        return numeric ? parts.map(Number).filter(Number.isFinite) : parts;
      },
    };
  }
  if (kind === "json") {
    const control = h("textarea", { id, rows: 3, class: "wo-json", ...aria },
      value === undefined ? "" : JSON.stringify(value, null, 2));
    return {
      control, kind,
      read: () => {
        if (!control.value.trim()) return null;
        try { return JSON.parse(control.value); } catch { return control.value; }
      },
    };
  }
  const long = kind === "longtext";
  const text = value === null || value === undefined ? "" : String(value);
  const control = long
    ? h("textarea", { id, rows: 3, maxlength: node.maxLength ?? null, ...aria }, text)
    : h("input", { type: "text", id, maxlength: node.maxLength ?? null, value: text, ...aria });
  return {
    control, kind,
    read: () => (control.value.trim() === "" ? (node.nullable ? null : "") : control.value),
  };
}

// -- the form -----------------------------------------------------------------------

/**
 * buildForm(schema, value) -> {el, read(), leaves(), flag(path, severity, text) -> control|null, onFocus}
 * `leaves()` lists {path, origin, kind, read, control} for every current value (for highlighting);
 * `origin` is the path the value had in the answer (marks.js finds its copy sources by it).
 */
export function buildForm(schema, value) {
  const root = resolve(schema, schema);
  const places = new Map(); // path -> {wrap, control, flags}
  const leaves = []; // {path, kind, read, control, alive()}

  function place(path, wrap, control) {
    places.set(path, { wrap, control, box: null });
  }

  function field(key, rawNode, val, path) {
    const node = resolve(schema, rawNode);
    if (node.mainType === "array") node.itemNode = resolve(schema, node.items);
    const kind = kindOf(node);
    const label = fieldLabel(key, node);
    if (kind === "object") return objectField(node, val, path, label);
    if (kind === "table") return tableField(node, val, path, label);
    const id = uid(path);
    const l = leaf(node, kind, val, id);
    const hintText = kind === "list" ? t("workorders.list_hint") : null;
    const hint = hintText ? h("span", { class: "hint", id: `${id}-hint` }, hintText) : null;
    if (hint) l.control.setAttribute("aria-describedby", hint.id);
    const wrap = kind === "bool"
      ? h("div", { class: "wo-field wo-field-bool", dataset: { path } },
        h("label", { class: "inline", for: id }, l.control, label))
      : h("div", { class: `wo-field wo-field-${kind}`, dataset: { path } },
        h("label", { for: id }, h("span", { class: "wo-label" }, label), hint, l.control));
    place(path, wrap, l.control);
    leaves.push({ path, origin: path, kind, read: l.read, control: l.control, alive: () => true });
    return { el: wrap, read: l.read };
  }

  function objectField(node, val, path, label) {
    const obj = val && typeof val === "object" && !Array.isArray(val) ? val : {};
    const children = Object.entries(node.properties || {})
      .map(([k, n]) => [k, field(k, n, obj[k], path ? `${path}.${k}` : k)]);
    const el = path
      ? h("fieldset", { class: "wo-fieldset", dataset: { path } }, h("legend", {}, label),
        h("div", { class: "wo-grid" }, children.map(([, c]) => c.el)))
      : h("div", { class: "wo-grid" }, children.map(([, c]) => c.el));
    if (path) place(path, el, el.querySelector("input, select, textarea"));
    return { el, read: () => Object.fromEntries(children.map(([k, c]) => [k, c.read()])) };
  }

  function tableField(node, val, path, label) {
    const item = node.itemNode;
    const cols = Object.entries(item.properties).map(([k, n]) => {
      const rn = resolve(schema, n);
      if (rn.mainType === "array") rn.itemNode = resolve(schema, rn.items);
      return { key: k, node: rn, kind: kindOf(rn), label: fieldLabel(k, rn) };
    });
    const headId = uid(path);
    const body = h("tbody");
    const rows = [];
    const empty = h("p", { class: "muted wo-table-empty" }, t("workorders.no_lines"));

    function renumber() {
      rows.forEach((r, i) => {
        r.num.textContent = String(i + 1);
        for (const c of r.cells) c.control.setAttribute("aria-label",
          `${c.label}, ${t("workorders.line_n", { n: i + 1 })}`);
        r.remove.setAttribute("aria-label", t("workorders.remove_line", { n: i + 1 }));
      });
      empty.hidden = rows.length > 0;
      add.disabled = node.maxItems !== undefined && rows.length >= node.maxItems;
    }

    function addRow(rowVal, originalIndex) {
      const obj = rowVal && typeof rowVal === "object" ? rowVal : {};
      const rowPath = originalIndex === null ? null : `${path}[${originalIndex}]`;
      const cells = cols.map((c) => {
        const cellPath = rowPath ? `${rowPath}.${c.key}` : "";
        const kind = ["object", "table"].includes(c.kind) ? "json" : c.kind;
        const l = leaf(c.node, kind, obj[c.key], uid(cellPath || `${path}-new-${c.key}`), c.label);
        const td = h("td", { class: `wo-col-${c.kind}`, dataset: { path: cellPath } }, l.control);
        const entry = { ...l, label: c.label, key: c.key, td };
        if (rowPath) place(cellPath, td, l.control);
        return entry;
      });
      const row = { cells, num: h("th", { scope: "row", class: "wo-num" }), alive: true };
      row.remove = h("button", {
        type: "button", class: "small ghost wo-remove",
        onclick: () => {
          const i = rows.indexOf(row);
          rows.splice(i, 1);
          row.alive = false;
          row.tr.remove();
          renumber();
          (rows[i] || rows[i - 1])?.cells[0].control.focus() ?? add.focus();
          wrap.dispatchEvent(new Event("input", { bubbles: true }));
        },
      }, h("span", { "aria-hidden": "true" }, "✕"));
      row.remove.title = t("workorders.remove");
      row.tr = h("tr", { dataset: rowPath ? { path: rowPath } : {} }, row.num, cells.map((c) => c.td),
        h("td", {}, row.remove));
      if (rowPath) place(rowPath, row.tr, cells[0]?.control);
      for (const c of cells) {
        // path: where the row is now (rows come and go); origin: where it was in the answer (null: added here)
        leaves.push({
          get path() { return `${path}[${rows.indexOf(row)}].${c.key}`; }, origin: rowPath && `${rowPath}.${c.key}`,
          kind: c.kind, read: c.read, control: c.control, alive: () => row.alive,
        });
      }
      rows.push(row);
      body.append(row.tr);
      return row;
    }

    const add = h("button", {
      type: "button", class: "small",
      onclick: () => {
        const r = addRow({}, null);
        renumber();
        r.cells[0]?.control.focus();
      },
    }, h("span", { "aria-hidden": "true" }, "+"), t("workorders.add_line"));

    const table = h("table", { class: "wo-table", "aria-labelledby": headId },
      h("thead", {}, h("tr", {},
        h("th", { scope: "col", class: "wo-num" }, h("span", { class: "visually-hidden" }, t("workorders.line"))),
        cols.map((c) => h("th", { scope: "col", class: `wo-col-${c.kind}` }, c.label)),
        h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, t("workorders.actions"))))),
      body);
    const wrap = h("div", { class: "wo-field wo-field-table", dataset: { path } },
      h("div", { class: "wo-label", id: headId }, label),
      h("div", { class: "wo-table-scroll" }, table), empty, h("div", { class: "row" }, add));
    (Array.isArray(val) ? val : []).forEach((v, i) => addRow(v, i));
    renumber();
    place(path, wrap, rows[0]?.cells[0]?.control || add);
    return {
      el: wrap,
      read: () => rows.map((r) => Object.fromEntries(r.cells.map((c) => [c.key, c.read()]))),
    };
  }

  const top = root.mainType === "object" && root.properties
    ? objectField(root, value, "", "")
    : field("value", schema, value, "value");
  const el = h("div", { class: "wo-form" }, top.el);

  /** Mark the field at `path` (or its nearest ancestor); returns the control to focus. */
  function flag(path, severity, text) {
    let p = path;
    while (p && !places.has(p)) {
      const up = p.replace(/(\.[^.[\]]+|\[\d+\])$/, "");
      p = up === p ? "" : up;
    }
    const where = places.get(p);
    if (!where) return null;
    if (severity !== "info") where.wrap.classList.add("wo-flagged", `wo-flag-${severity}`);
    if (!where.box) {
      where.box = h("ul", { class: "wo-flag-msgs", id: `${where.control?.id || uid(p)}-flags` });
      where.wrap.append(where.box);
      if (where.control && where.control.tagName !== "BUTTON") {
        const was = where.control.getAttribute("aria-describedby");
        where.control.setAttribute("aria-describedby", was ? `${was} ${where.box.id}` : where.box.id);
      }
    }
    const words = severity === "info" ? text
      : t("workorders.flag_line", { severity: t(`workorders.severity_${severity}`), text });
    const compact = where.wrap.tagName === "TD" || where.wrap.tagName === "TR";
    where.box.append(h("li", { class: `wo-flag-msg wo-flag-${severity}`, title: compact ? words : null },
      h("span", { class: "wo-flag-icon", "aria-hidden": "true" }, severity === "info" ? "ℹ" : "⚠"),
      h("span", { class: compact ? "visually-hidden" : null }, words)));
    return where.control;
  }

  return {
    el,
    read: top.read,
    leaves: () => leaves.filter((l) => l.alive()),
    flag,
    has: (path) => places.has(path),
  };
}
