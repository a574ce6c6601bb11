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
 * Resolves true when the user confirms; focus then goes back where it was.
 * Options beyond the two labels:
 *  - title: a heading that names the dialog (aria-labelledby); `message` (a string, or an
 *    array of paragraphs) then describes it (aria-describedby). Without one the message
 *    itself is the dialog's name.
 *  - focus: "ok" | "cancel", the button the dialog starts on; a destructive question should
 *    start on "cancel", so a reflexive Enter does no harm. Unset: the browser's choice.
 *  - className: added to "confirm", for a page's own dialog width and spacing.
 *  - parent: where the dialog lives (default <body>); a page passes its root so the
 *    question goes away with the page when the user navigates elsewhere.
 */
let confirmIds = 0;
export function confirmDialog(message, { ok, cancel, danger = false, title, focus, className, parent } = {}) {
  return new Promise((resolve) => {
    const back = document.activeElement;
    const n = ++confirmIds;
    const titleId = title ? `confirm-title-${n}` : null;
    const bodyId = title ? `confirm-body-${n}` : null;
    const cancelButton = h("button", { value: "no" }, cancel);
    const okButton = h("button", { value: "yes", class: danger ? "danger" : "primary" }, ok);
    const dialog = h("dialog", {
      class: className ? `confirm ${className}` : "confirm",
      "aria-label": title ? null : message,
      "aria-labelledby": titleId,
      "aria-describedby": bodyId,
    },
    h("form", { method: "dialog", class: "stack" },
      title ? h("h2", { id: titleId }, title) : null,
      title ? h("div", { id: bodyId }, [message].flat().map((p) => h("p", {}, p))) : h("p", {}, message),
      h("div", { class: "row end" }, cancelButton, okButton)));
    dialog.addEventListener("close", () => {
      dialog.remove();
      if (back?.isConnected) back.focus();
      resolve(dialog.returnValue === "yes");
    });
    (parent || document.body).append(dialog);
    dialog.showModal();
    if (focus === "ok") okButton.focus();
    else if (focus === "cancel") cancelButton.focus();
  });
}
