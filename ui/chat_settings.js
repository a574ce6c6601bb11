// Chat settings: model, system prompt, temperature, answer length and speculation.
// The last choices are kept in this browser as the defaults for new chats, and each
// conversation stores its own copy on the server (PATCH /v1/conversations/{id}), so
// reopening a chat brings back how it was set up.

import { get, post } from "./api.js";
import { h } from "./dom.js";
import { t } from "./i18n.js";

const STORAGE_KEY = "flashdesk.chatSettings";
export const DEFAULTS = { model: "", system: "", temperature: 0.7, max_tokens: 512, speculation: "auto" };
const MODES = ["auto", "off", "dflash", "lookup"];

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
    speculation: MODES.includes(s.speculation) ? s.speculation : "auto",
  };
}

/**
 * The settings panel. `onChange(settings)` fires on every edit; `onSwitchModel(name)` when
 * the user picks an installed model that is not the one being served.
 */
export function settingsPanel(initial, { onChange, onSwitchModel, servedModel }) {
  let settings = clean(initial);
  const changed = () => onChange({ ...settings });

  const model = h("select", { id: "set-model" });
  fillModels(model, settings.model || servedModel);
  model.addEventListener("change", () => {
    settings.model = model.value;
    changed();
    if (model.value && model.value !== servedModel) onSwitchModel(model.value);
  });

  const system = h("textarea", { id: "set-system", rows: 4, placeholder: t("chat.set_system_placeholder") }, settings.system);
  system.addEventListener("input", () => { settings.system = system.value; changed(); });

  const tempValue = h("output", { for: "set-temp" }, String(settings.temperature));
  const temp = h("input", { id: "set-temp", type: "range", min: 0, max: 1.5, step: 0.1, value: settings.temperature });
  temp.addEventListener("input", () => {
    settings.temperature = Number(temp.value);
    tempValue.textContent = temp.value;
    changed();
  });

  const maxTokens = h("input", { id: "set-max", type: "number", min: 16, max: 8192, step: 16, value: settings.max_tokens });
  maxTokens.addEventListener("change", () => {
    settings = clean({ ...settings, max_tokens: maxTokens.value });
    maxTokens.value = settings.max_tokens;
    changed();
  });

  const spec = h("select", { id: "set-spec" },
    MODES.map((m) => h("option", { value: m, selected: m === settings.speculation }, t(`chat.spec_${m}`))));
  spec.addEventListener("change", () => { settings.speculation = spec.value; changed(); });

  return h("form", { class: "stack chat-settings-form", onsubmit: (e) => e.preventDefault() },
    h("h2", {}, t("chat.settings")),
    h("label", {}, t("chat.set_model"), model),
    h("label", {}, t("chat.set_system"), system, h("span", { class: "hint" }, t("chat.set_system_hint"))),
    h("label", {}, h("span", { class: "row" }, t("chat.set_temperature"), tempValue), temp,
      h("span", { class: "hint" }, t("chat.set_temperature_hint"))),
    h("label", {}, t("chat.set_max_tokens"), maxTokens, h("span", { class: "hint" }, t("chat.set_max_tokens_hint"))),
    h("label", {}, t("chat.set_speculation"), spec, h("span", { class: "hint" }, t("chat.set_speculation_hint"))),
    h("button", { type: "button", class: "small", onclick: () => {
      settings = clean({ ...DEFAULTS, model: settings.model });
      system.value = ""; temp.value = settings.temperature; tempValue.textContent = String(settings.temperature);
      maxTokens.value = settings.max_tokens; spec.value = settings.speculation;
      changed();
    } }, t("chat.set_reset")));
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
