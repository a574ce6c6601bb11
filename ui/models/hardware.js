// "Your computer" on the Models page: what flashdesk runs on (processor or graphics card,
// and why not the graphics card when there is one), and whether the speed-up
// (speculative decoding) is on, in plain words first, the exact facts folded below.
// Functions only: they build DOM from the /v1/system and /health answers, the page
// decides when.

import { formatBytes, h } from "../dom.js";
import { formatNumber, t } from "../i18n.js";
import { FASTER } from "./common.js";

const BACKEND_NAMES = { cuda: "CUDA", metal: "Metal", vulkan: "Vulkan", rocm: "ROCm", hip: "ROCm", sycl: "SYCL",
  opencl: "OpenCL", cann: "CANN", musa: "MUSA" };

/** The card's content when /v1/system did not answer; `retry` asks again. */
export function systemErrorView(message, retry) {
  return h("div", { class: "error-box", role: "alert" },
    h("p", {}, t("models.system_error", { message })),
    h("button", { type: "button", "data-key": "retry-system", onclick: retry }, t("common.retry")));
}

/** The card's content from GET /v1/system (`system`) and the latest /health answer. */
export function computerView(system, health) {
  const s = system;
  const threads = s.threads ?? 1;
  const threadText = threads === 1 ? t("models.threads_one") : t("models.threads_other", { n: formatNumber(threads) });
  const gpus = (s.devices || []).filter((d) => d.type === "gpu" || d.type === "igpu");
  const { lead, why } = leadText(s, gpus, threadText);

  const facts = [
    [t("models.hw_in_use"), s.backend === "cpu" || !s.backend ? t("models.hw_processor") : t("models.hw_graphics")],
    [t("models.hw_cores"), s.cpu_count
      ? t("models.hw_cores_value", { cores: formatNumber(s.cpu_count), threads: threadText }) : threadText],
    s.memory_bytes ? [t("models.hw_memory"), formatBytes(s.memory_bytes)] : null,
    [t("models.hw_gpu_label"), gpus.length
      ? gpus.map((g) => [g.description || g.name, g.memory_bytes ? ` (${formatBytes(g.memory_bytes)})` : ""].join(""))
        .join(", ")
      : t("models.hw_gpu_none")],
  ];

  const sp = speculationFacts(health, s);
  return [
    h("p", { class: "hw-lead" }, lead),
    why ? h("p", {}, why) : null,
    h("dl", { class: "facts" }, facts.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("h3", {}, t("models.speed_title")),
    h("p", { class: "hint" }, t("models.speed_explain")),
    h("p", { class: sp.cls }, sp.text),
    sp.measured ? h("p", { "data-key": "speed-measured" }, sp.measured) : null,
    h("details", { class: "hw-details" },
      h("summary", {}, t("models.hw_details")),
      h("dl", { class: "facts" },
        h("dt", {}, t("models.hw_llama")), h("dd", {}, s.llama_cpp_version || "?"),
        h("dt", {}, t("models.hw_backends")), h("dd", {}, (s.backends || []).join(", ") || "?"),
        s.cpu_features?.length ? [h("dt", {}, t("models.hw_features")),
          h("dd", { class: "hw-features" }, s.cpu_features.join(" "))] : null,
        sp.why ? [h("dt", {}, t("models.hw_exact")), h("dd", {}, sp.why)] : null,
        s.home ? [h("dt", {}, t("models.hw_home")), h("dd", { class: "path" }, s.home)] : null)),
  ];
}

/** The first sentence (what runs the model) and, when it is not the graphics card, why not. */
function leadText(s, gpus, threadText) {
  if (s.reason === "gpu") {
    const g = gpus[0] || {};
    return { lead: t("models.hw_gpu", { device: g.description || g.name || t("models.unknown"),
      backend: BACKEND_NAMES[(s.backend || "").toLowerCase()] || g.backend || s.backend }), why: null };
  }
  if (s.reason === "no_gpu_build") {
    return { lead: t("models.hw_cpu", { threads: threadText }), why: t("models.hw_no_gpu_build") };
  }
  if (s.reason === "gpu_not_found") {
    const gpuBackends = (s.backends || []).filter((b) => !["cpu", "blas", "rpc"].includes(b.toLowerCase()));
    return { lead: t("models.hw_cpu", { threads: threadText }),
      why: t("models.hw_gpu_not_found",
        { backends: gpuBackends.map((b) => BACKEND_NAMES[b.toLowerCase()] || b).join(", ") || "GPU" }) };
  }
  const build = s.llama_build || {};
  const fallback = { // the package has a graphics-card (CUDA) build, and this is why it was not used
    driver_missing: () => t("models.hw_driver_missing"),
    driver_too_old: () => t("models.hw_driver_too_old",
      { have: build.driver?.cuda_version || "?", need: build.cuda_needed ?? "?" }),
    no_cuda_device: () => t("models.hw_no_cuda_device"),
    cuda_load_failed: () => t("models.hw_cuda_load_failed", { error: build.error || "?" }),
  }[s.reason];
  if (fallback) return { lead: t("models.hw_cpu", { threads: threadText }), why: fallback() };
  // a reason this page does not know yet: the server's own words
  return { lead: s.summary || t("models.unknown"), why: null };
}

/** Whether speculative decoding is on at all on this computer, for "Your computer". */
function speculationFacts(health, system) {
  // The same facts in both answers (server/runtime/speculation.py); /health is polled, so fresher.
  const sp = (health?.status === "ready" ? health.speculation : null) || system.speculation;
  if (!sp) return { text: t("models.speed_unknown"), cls: "muted", why: null };
  // a graphics card exact only up to a band of rows (server/runtime/speculation.py); the processor's band (16) is wider
  // than any verify flashdesk makes, so it goes unsaid there
  const measured = sp.enabled ? measuredText(sp.measured) : null;
  if (sp.enabled && sp.exact && sp.max_rows && system.backend && system.backend !== "cpu") {
    return { text: t("models.speed_on_gpu", { n: sp.max_rows - 1 }), cls: "ok-text", why: sp.exact_why, measured };
  }
  if (sp.enabled && sp.exact) return { text: t("models.speed_on"), cls: "ok-text", why: sp.exact_why, measured };
  if (sp.enabled) return { text: t("models.speed_on_inexact"), cls: "warn-text", why: sp.exact_why, measured };
  return { text: t("models.speed_off"), cls: "warn-text", why: sp.exact_why };
}

/** What the speed-up did here for recent answers (server/runtime/speculation.py `measured`), never a promise:
 * a computer where checking guesses costs about what it wins says so. */
function measuredText(m) {
  if (!m) return t("models.speed_measured_none");
  const x = formatNumber(m.speedup, 1);
  return m.speedup >= FASTER ? t("models.speed_measured", { n: formatNumber(m.answers), x })
    : t("models.speed_measured_flat", { n: formatNumber(m.answers), x });
}

/** The loaded draft, in the words of what it did here (`draft_measured`: the answers it drafted for),
 * never a promise: on a computer where it costs what it wins, automatic mode leaves it for lookup. */
function draftNow(m) {
  if (!m) return { text: t("models.speed_draft_on"), cls: "ok-text" };
  const x = formatNumber(m.speedup, 1), n = formatNumber(m.answers);
  return m.speedup >= FASTER ? { text: t("models.speed_draft_measured", { n, x }), cls: "ok-text" }
    : { text: t("models.speed_draft_flat", { n, x }), cls: "warn-text" };
}

/** What the speed-up does right now for the served model `m` (a model card's "Speed-up now"), from /health. */
export function speedNow(m, health) {
  const sp = health?.status === "ready" ? health.speculation : null;
  if (!sp) return null;
  // the engine's own words for why (its load-time measurement): this model's memory, or this computer's build
  if (!sp.enabled) return { text: t("models.speed_off_here"), cls: "muted", why: sp.exact_why };
  if (sp.draft_error) return { text: t("models.speed_draft_error", { message: sp.draft_error }), cls: "warn-text" };
  if ((sp.drafters || []).includes("dflash")) return draftNow(sp.draft_measured);
  if (m.draft) return { text: t("models.speed_draft_not_loaded"), cls: "warn-text" };
  return { text: t("models.speed_lookup_only"), cls: "" };
}
