// Chat settings: model, system prompt, temperature, answer length and speculation.
// The last choices are kept in this browser as the defaults for new chats, and each
// conversation stores its own copy on the server (PATCH /v1/conversations/{id}), so
// reopening a chat brings back how it was set up. The speculation modes are the server's
// (GET /health, speculation.modes): this file keeps no list of its own. With --backend the
// backend speculates by its own configuration and refuses a mode per request, so the panel
// offers no choice and shows the backend's own figures instead (speculation.backend_counters);
// its model is chosen there too, so the picker shows that one, fixed.

import { get, post } from "../api.js";
import { h } from "../dom.js";
import { formatNumber, t } from "../i18n.js";

const STORAGE_KEY = "flashdesk.chatSettings";
export const DEFAULTS = { model: "", system: "", temperature: 0.7, max_tokens: 512, speculation: "auto" };
let modes = null; // the server's speculation modes, once /health has answered
let asked = null;

/** The modes the server accepts (the same for its whole life), asked once; null while it cannot be reached. */
function serverModes() {
  asked ??= fetch("health", { cache: "no-store" }) // 503 while loading still names them
    .then((res) => res.json())
    .then((health) => (modes = health.speculation?.modes || null))
    .catch(() => { asked = null; return null; }); // offline: ask again next time
  return asked;
}
serverModes(); // now, so clean() knows them by the time a chat opens

/** A known mode, or any string until the server has said which are known (a stored choice stays). */
function knownMode(m) {
  return modes ? modes.includes(m) : typeof m === "string" && m !== "";
}

export function savedDefaults() {
  try {
    return { ...DEFAULTS, ...JSON.parse(localStorage.getItem(STORAGE_KEY) || "{}") };
  } catch {
    return { ...DEFAULTS };
  }
}

export function rememberDefaults(settings) {
  localStorage.setItem(STORAGE_KEY, JSON.stringify(settings));
}

/** Only known keys with sane values: a conversation's stored settings may come from an older UI. */
export function clean(settings) {
  const s = { ...DEFAULTS, ...(settings || {}) };
  const temperature = Number(s.temperature);
  const maxTokens = Math.round(Number(s.max_tokens));
  return {
    model: typeof s.model === "string" ? s.model : "",
    system: typeof s.system === "string" ? s.system : "",
    temperature: Number.isFinite(temperature) ? Math.min(2, Math.max(0, temperature)) : DEFAULTS.temperature,
    max_tokens: Number.isFinite(maxTokens) ? Math.min(8192, Math.max(16, maxTokens)) : DEFAULTS.max_tokens,
    speculation: knownMode(s.speculation) ? s.speculation : DEFAULTS.speculation,
  };
}

/**
 * The settings panel. `onChange(settings)` fires on every edit; `onSwitchModel(name)` when
 * the user picks an installed model that is not the one being served. `backend` (/health's, or
 * null): the backend's model is shown fixed, as the server refuses a switch (409 backend_model).
 */
export function settingsPanel(initial, { onChange, onSwitchModel, servedModel, speculation, backend }) {
  let settings = clean(initial);
  const changed = () => onChange({ ...settings });

  const model = h("select", { id: "set-model" });
  if (!backend) {
    fillModels(model, settings.model || servedModel);
    model.addEventListener("change", () => {
      settings.model = model.value;
      changed();
      if (model.value && model.value !== servedModel) onSwitchModel(model.value);
    });
  }

  const system = h("textarea", { id: "set-system", rows: 4, placeholder: t("chat.set_system_placeholder") },
    settings.system);
  system.addEventListener("input", () => { settings.system = system.value; changed(); });

  const tempValue = h("output", { for: "set-temp" }, String(settings.temperature));
  const temp = h("input", { id: "set-temp", type: "range", min: 0, max: 1.5, step: 0.1, value: settings.temperature });
  temp.addEventListener("input", () => {
    settings.temperature = Number(temp.value);
    tempValue.textContent = temp.value;
    changed();
  });

  const maxTokens = h("input", { id: "set-max", type: "number", min: 16, max: 8192, step: 16,
    value: settings.max_tokens });
  maxTokens.addEventListener("change", () => {
    settings = clean({ ...settings, max_tokens: maxTokens.value });
    maxTokens.value = settings.max_tokens;
    changed();
  });

  const spec = h("select", { id: "set-spec" });
  fillModes(spec, settings.speculation);
  spec.addEventListener("change", () => { settings.speculation = spec.value; changed(); });

  return h("form", { class: "stack chat-settings-form", onsubmit: (e) => e.preventDefault() },
    h("h2", {}, t("chat.settings")),
    backend ? backendModelField(model, backend.model) : h("label", {}, t("chat.set_model"), model),
    h("label", {}, t("chat.set_system"), system, h("span", { class: "hint" }, t("chat.set_system_hint"))),
    h("label", {}, h("span", { class: "row" }, t("chat.set_temperature"), tempValue), temp,
      h("span", { class: "hint" }, t("chat.set_temperature_hint"))),
    h("label", {}, t("chat.set_max_tokens"), maxTokens, h("span", { class: "hint" }, t("chat.set_max_tokens_hint"))),
    speculation?.backend ? backendField(speculation.backend_counters)
      : h("label", {}, t("chat.set_speculation"), spec, h("span", { class: "hint" }, t("chat.set_speculation_hint"))),
    h("button", { type: "button", class: "small", onclick: () => {
      settings = clean({ ...DEFAULTS, model: settings.model });
      system.value = ""; temp.value = settings.temperature; tempValue.textContent = String(settings.temperature);
      maxTokens.value = settings.max_tokens; spec.value = settings.speculation;
      changed();
    } }, t("chat.set_reset")));
}

/** The backend's model in the picker, fixed: it is chosen on the backend server (the local store's
 * models are not what answers), and the reason is said beside it and in its tooltip. */
function backendModelField(select, name) {
  select.replaceChildren(h("option", { value: name, selected: true }, name));
  select.disabled = true;
  select.title = t("chat.set_model_backend");
  select.setAttribute("aria-describedby", "set-model-fixed");
  return h("label", { title: t("chat.set_model_backend") }, t("chat.set_model"), select,
    h("span", { id: "set-model-fixed", class: "hint" }, t("chat.set_model_backend")));
}

/** Speed-up with a backend: who sets it, and the backend's figures, labelled as its own count over all
 * its users (nobody here can tell one answer's share). Counters null: it publishes none, and we say so. */
function backendField(counters) {
  return h("div", { class: "backend-speedup" }, t("chat.set_speculation"),
    h("span", { class: "hint" }, t("chat.set_speculation_backend")),
    h("span", { id: "backend-speedup", class: "hint" }, backendFigures(counters)));
}

function backendFigures(counters) {
  if (!counters) return t("chat.backend_spec_none");
  const { acceptance, tau } = counters; // null: not published, or nothing drafted yet; never shown as 0
  const vars = { pct: formatNumber((acceptance ?? 0) * 100, 0), tau: formatNumber(tau ?? 0, 1) };
  if (acceptance != null && tau != null) return t("chat.backend_spec_both", vars);
  if (acceptance != null) return t("chat.backend_spec_acceptance", vars);
  if (tau != null) return t("chat.backend_spec_tau", vars);
  return t("chat.backend_spec_idle");
}

/** The server's modes; until it answers, the default and the current choice (so nothing is lost). */
async function fillModes(select, wanted) {
  const options = (list, chosen) => select.replaceChildren(...list.map((m) => {
    const key = `chat.spec_${m}`;
    const label = t(key) === key ? m : t(key); // a mode newer than this UI's words shows its name
    return h("option", { value: m, selected: m === chosen }, label);
  }));
  if (modes) return options(modes, wanted);
  options([...new Set([DEFAULTS.speculation, wanted])], wanted);
  const list = await serverModes();
  if (!list) return;
  const current = select.value; // the user may have chosen meanwhile
  options(list, list.includes(current) ? current : DEFAULTS.speculation);
  if (select.value !== current) select.dispatchEvent(new Event("change")); // the settings follow
}

/** Installed models from the store; the served one first. Falls back to /v1/models. */
async function fillModels(select, wanted) {
  let names = [];
  try {
    names = (await get("/v1/store/models")).data.map((m) => m.name);
  } catch {
    try {
      names = (await get("/v1/models")).data.map((m) => m.id);
    } catch {
      /* the picker stays empty; the chat still uses the served model */
    }
  }
  select.replaceChildren(...names.map((n) => h("option", { value: n, selected: n === wanted }, n)));
}

/** Ask the server to serve another installed model (it loads in the background). */
export function switchModel(name) {
  return post("/v1/store/serve", { name });
}
