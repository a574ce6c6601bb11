// Building DOM without HTML strings: every piece of text goes in as a text node, so
// nothing a model, a customer e-mail or a file name contains can become markup.

/**
 * h("button", {class: "primary", onclick: fn, "aria-label": "Send"}, "Send")
 * props: class, text, dataset {..}, on* (functions), hidden/disabled/checked/value
 * (properties), anything else becomes an attribute. Children: nodes, strings, numbers,
 * arrays of those; null, undefined and false are skipped.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key in PROPS) el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

// Set as properties, not attributes: their attribute only holds the initial state.
const PROPS = { value: 1, checked: 1, disabled: 1, hidden: 1, selected: 1, open: 1 };

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** Human sizes: 98362432 -> "98.4 MB" (decimal units, like file managers). */
export function formatBytes(n) {
  if (!Number.isFinite(n) || n < 0) return "";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}

/** A file the browser saves: the JSON of a work order, an export. */
export function download(filename, text, type = "application/json") {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h("a", { href: url, download: filename, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** Copy text; falls back to a hidden textarea where the clipboard API is not allowed
 *  (it exists only in secure contexts: https or localhost, not http://<LAN address>). */
export async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch {
    /* permission denied: try the legacy path */
  }
  const area = h("textarea", { readonly: true, class: "offscreen", "aria-hidden": "true" });
  area.value = text;
  const before = document.activeElement;
  document.body.append(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch {
    ok = false;
  }
  area.remove();
  before?.focus?.(); // keyboard users stay on the button they pressed
  return ok;
}

/**
 * A yes/no question in a modal <dialog> (keyboard: Tab between the buttons, Escape = no).
 * Resolves true when the user confirms.
 */
export function confirmDialog(message, { ok, cancel, danger = false }) {
  return new Promise((resolve) => {
    const dialog = h("dialog", { class: "confirm", "aria-label": message },
      h("form", { method: "dialog", class: "stack" },
        h("p", {}, message),
        h("div", { class: "row end" },
          h("button", { value: "no" }, cancel),
          h("button", { value: "yes", class: danger ? "danger" : "primary" }, ok))));
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(dialog.returnValue === "yes");
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}
