// What an answer cost and how speculation helped: the one-line summary under each
// answer (live while it streams), and the details popover (tau per position, mode,
// selector, timings). Numbers come from the stream's `usage` (flashdesk extensions:
// usage.timings, usage.speculation; see README "API"). A backend's answer has no
// usage.speculation (meta.backend): its speed-up is the backend's own, unknown per answer, so
// nothing here claims one or its absence (settings.js shows the backend's overall figures).

import { h } from "../dom.js";
import { formatNumber, t } from "../i18n.js";

let popoverCount = 0;

/** "31.2 tok/s · τ 2.4 · about 1.6× faster" from a finished answer's meta, or live figures. */
export function summaryText(meta) {
  const parts = [];
  const rate = meta.usage?.timings?.decode_tokens_per_s ?? meta.live_tok_s;
  if (rate) parts.push(t("chat.stats_rate", { rate: formatNumber(rate, 1) }));
  const spec = meta.usage?.speculation;
  if (spec && spec.mode !== "off" && spec.verifies > 0) {
    parts.push(t("chat.stats_tau", { tau: formatNumber(spec.tau, 2) }));
    if (spec.speedup) parts.push(t("chat.stats_speedup", { x: formatNumber(spec.speedup, 1) }));
  } else if (meta.usage && !meta.backend) { // no speculation, or the chooser decoded every step plainly
    parts.push(t("chat.stats_plain"));
  }
  if (meta.stopped) parts.push(t("chat.stats_stopped"));
  else if (meta.finish_reason === "length") parts.push(t("chat.stats_length"));
  return parts.join(" · ");
}

/** "JSON format 40% · the model itself 35% · ...": who wrote the answer's tokens, largest share first. */
function sourcesText(bySource) {
  const entries = Object.entries(bySource || {}).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
  const total = entries.reduce((sum, [, n]) => sum + n, 0);
  if (!total) return null;
  return entries.map(([source, n]) => {
    const key = `chat.source_${source}`;
    return `${t(key) === key ? source : t(key)} ${formatNumber((n / total) * 100, 0)}%`;
  }).join(" · ");
}

function row(label, value) {
  return value === undefined || value === null || value === "" ? null
    : h("tr", {}, h("th", { scope: "row" }, label), h("td", {}, value));
}

/** The details button and its popover (native `popover`: Escape and clicking outside close it). */
export function detailsButton(meta) {
  const id = `answer-details-${++popoverCount}`;
  const u = meta.usage || {};
  const spec = u.speculation;
  const timings = u.timings || {};
  const modeName = spec ? t(`chat.mode_${spec.mode}`) : meta.backend ? t("chat.mode_backend") : t("chat.mode_off");
  const table = h("table", { class: "stats-table" },
    row(t("chat.details_model"), meta.model),
    row(t("chat.details_mode"), modeName),
    row(t("chat.details_selector"), spec?.selector),
    row(t("chat.details_tokens"), u.completion_tokens),
    row(t("chat.details_prompt"), u.prompt_tokens !== undefined
      ? t("chat.details_prompt_value", { n: u.prompt_tokens, cached: u.prompt_tokens_details?.cached_tokens ?? 0 })
      : null),
    row(t("chat.details_prefill"), timings.prefill_ms !== undefined
      ? `${formatNumber(timings.prefill_ms, 0)} ms` : null),
    row(t("chat.details_decode"), timings.decode_ms !== undefined ? `${formatNumber(timings.decode_ms, 0)} ms` : null),
    row(t("chat.details_rate"), timings.decode_tokens_per_s
      ? t("chat.stats_rate", { rate: formatNumber(timings.decode_tokens_per_s, 1) }) : null),
    spec && spec.verifies ? row(t("chat.details_tau"), formatNumber(spec.tau, 2)) : null,
    spec && spec.verifies ? row(t("chat.details_accepted"), `${spec.accepted} / ${spec.drafted}`) : null,
    spec?.speedup ? row(t("chat.details_speedup"), `${formatNumber(spec.speedup, 2)}×`) : null,
    spec?.plain_steps ? row(t("chat.details_plain_steps"), spec.plain_steps) : null,
    spec && spec.verifies ? row(t("chat.details_sources"), sourcesText(spec.committed_by_source)) : null,
  );
  const positions = spec?.acceptance_by_position?.length
    ? h("figure", { class: "tau-chart" },
      h("figcaption", {}, t("chat.details_positions")),
      h("ol", {}, spec.acceptance_by_position.map((rate, i) => h("li", {},
        h("span", { class: "pos" }, t("chat.details_position", { n: i + 1 })),
        h("meter", { min: 0, max: 1, value: rate, "aria-label": t("chat.details_position", { n: i + 1 }) }),
        h("span", { class: "pct" }, `${formatNumber(rate * 100, 0)}%`)))))
    : null;
  const pop = h("div",
    { id, popover: "auto", class: "answer-details", role: "dialog", "aria-label": t("chat.details_title") },
    h("h3", {}, t("chat.details_title")), table, positions,
    spec ? h("p", { class: "hint" }, t("chat.details_lossless")) : null);
  const button = h("button", { type: "button", class: "ghost small", popovertarget: id }, t("chat.details"));
  return [button, pop];
}
