// What this computer can run, in plain words, from GET /v1/store/models (`hardware` and each
// catalog entry's `fits`, `recommended`, `cpu`, `speed`): the one sentence that names the model to
// suggest ("Your NVIDIA GeForce RTX 4090 (24 GB) can run … : 16.5 GB download."; on a computer
// without a usable graphics card, with the speed its processor would give: "about 4 words a
// second here, about 50 seconds per work order"), and each card's fit and speed words.
// Shared by the Models page and the chat page's first-run notice, so both say the same.
// Functions only: no requests, no state; engine/advisor/tiers.py decides what fits.

import { formatBytes } from "../dom.js";
import { formatList, formatNumber, language, t } from "../i18n.js";

const GIB = 2 ** 30;

/** "about 4 words a second here, about 50 seconds per work order", from an entry's `speed` (words
 * of the reader's language, as engine/advisor/speed.py counts them). */
export function speedText(speed) {
  const words = speed.words_per_s?.[language()] ?? speed.words_per_s?.en ?? speed.tokens_per_s;
  const secs = speed.work_order_s;
  const vars = { words: formatNumber(words, words < 3 ? 1 : 0) };
  if (secs >= 120) return t("models.speed_minutes", { ...vars, minutes: formatNumber(secs / 60, secs < 600 ? 1 : 0) });
  return t("models.speed_seconds", { ...vars, seconds: formatNumber(secs >= 20 ? Math.round(secs / 5) * 5 : secs) });
}

/** A graphics card's or a Mac's memory as it is sold: 25769803776 bytes -> "24 GB" (GiB, whole). */
export function memoryText(bytes) {
  return `${formatNumber(Math.round((bytes || 0) / GIB))} GB`;
}

/** "Mac" for Apple's unified memory (its name is the chip's, "Apple M3 Max"), else the card's own name. */
export function deviceText(hw) {
  if (hw.kind === "unified" && (!hw.name || /apple/i.test(hw.name))) return "Mac";
  return hw.name || "GPU"; // a driver that names no card: the word on the box, in either language
}

/** "Qwen3.8-27B (UD-Q4_K_S) with its DFlash 2 draft": the title and, when it has one, its draft. */
export function modelWithDraft(entry) {
  const title = entry.title || entry.name;
  const kind = entry.has_draft ? entry.draft?.kind : null;
  if (kind === "dflash2") return t("models.tier_with_dflash2", { title });
  if (kind === "dflash1") return t("models.tier_with_dflash1", { title });
  return title;
}

/**
 * The tier sentence for a /v1/store/models answer: {text, entry} where entry is the recommended
 * catalog entry (null when there is none), or null when the answer says nothing about hardware.
 */
export function tierSentence(body) {
  const hw = body?.hardware;
  const catalog = body?.catalog || [];
  if (!hw) return null;
  const standard = catalog.find((c) => c.name === body.default);
  const standardTitle = standard?.title || body.default || "SmolLM2";
  if (hw.kind === "cpu") return cpuSentence(catalog, body.default, standardTitle);
  const entry = catalog.find((c) => c.recommended) || null;
  const device = deviceText(hw);
  // A Mac's models share its memory: fit is judged on Metal's working set (memory_bytes, ~3/4 of
  // the RAM), but a person knows their Mac by the memory it was sold with (ram_bytes).
  const memory = memoryText(hw.kind === "unified" && hw.ram_bytes ? hw.ram_bytes : hw.memory_bytes);
  if (!entry) return { text: t("models.tier_none", { device, memory, default: standardTitle }), entry: null };
  const vars = { device, memory, model: modelWithDraft(entry), size: formatBytes(entry.download_bytes ?? entry.size) };
  return { text: t(entry.installed ? "models.tier_gpu_installed" : "models.tier_gpu", vars), entry };
}

/** A computer without a usable graphics card: the best model its processor keeps up with, and how
 * fast; or why the default stays (no entry fast enough, or no measurement to go on). */
function cpuSentence(catalog, defaultName, standardTitle) {
  const entry = catalog.find((c) => c.recommended) || null;
  if (entry) {
    const vars = { model: modelWithDraft(entry), speed: speedText(entry.speed),
      size: formatBytes(entry.download_bytes ?? entry.size) };
    return { text: t(entry.installed ? "models.tier_cpu_installed" : "models.tier_cpu_recommend", vars), entry };
  }
  const lines = [t("models.tier_cpu", { default: standardTitle })];
  const others = catalog.filter((c) => c.cpu && c.fits && c.name !== defaultName);
  const fastest = others.filter((c) => c.speed).sort((a, b) => b.speed.tokens_per_s - a.speed.tokens_per_s)[0];
  if (fastest) lines.push(t("models.tier_cpu_slow",
    { model: fastest.title || fastest.name, speed: speedText(fastest.speed) }));
  else if (others.length) lines.push(t("models.tier_cpu_more",
    { models: formatList(others.map((c) => c.title || c.name)) }));
  // Chinese puts no space between sentences
  return { text: lines.join(language().startsWith("zh") ? "" : " "), entry: null };
}

/** One catalog card's "does it fit here" words and whether it fits: {text, fits}; null when not known. */
export function fitText(entry, hw) {
  const kind = hw?.kind;
  if (typeof entry.fits !== "boolean") return null; // a server older than the hardware tiers
  if (kind === "cpu" && !entry.cpu) return { text: t("models.fit_needs_gpu"), fits: false };
  if (!entry.fits) return { text: t("models.fit_no"), fits: false };
  if (kind === "gpu") return { text: t("models.fit_gpu"), fits: true };
  if (kind === "unified") return { text: t("models.fit_unified"), fits: true };
  return { text: t("models.fit_cpu"), fits: true };
}
