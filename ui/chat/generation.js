// One answer being written: streamed from /v1/chat/completions, kept here (not in the
// page's DOM) so it goes on while the user looks at another page or switches language,
// and saved to the conversation when it ends, stopped or not. The page subscribes to
// redraw; at most one answer is written at a time.

import { ApiError, post, stream } from "../api.js";

let active = null;

export function activeGeneration() {
  return active;
}

function notify(job) {
  for (const fn of job.listeners) fn(job);
}

/**
 * Start writing the answer to `history` ([{role, content}] in order) in conversation
 * `conversationId`. Resolves the job when the answer is saved (job.saved) or failed (job.error).
 */
export function generate({ conversationId, history, settings, model, backend = false }) {
  const job = {
    conversationId, text: "", tokens: 0, firstAt: 0, error: null, saved: null, finished: false,
    // `backend`: a backend server wrote it, speculating by its own configuration (stats.js says nothing of it)
    meta: backend ? { model, backend } : { model, speculation_requested: settings.speculation },
    controller: new AbortController(), listeners: new Set(),
  };
  active = job;
  job.done = run(job, history, settings, model).finally(() => {
    job.finished = true;
    if (active === job) active = null;
    notify(job);
  });
  return job;
}

export function stopGeneration() {
  active?.controller.abort();
}

async function run(job, history, settings, model) {
  let messages = history.map(({ role, content }) => ({ role, content }));
  const system = settings.system.trim() ? [{ role: "system", content: settings.system.trim() }] : [];
  for (;;) {
    try {
      await streamAnswer(job, [...system, ...messages], settings, model);
      break;
    } catch (err) {
      if (err.name === "AbortError") {
        job.meta.stopped = true;
        break;
      }
      // A long chat outgrew the context: leave out the oldest turn and ask again, the way
      // a person forgets the start of a long talk, rather than refusing to answer at all.
      if (err instanceof ApiError && err.code === "context_length_exceeded" && !job.text && messages.length > 1) {
        messages = messages.slice(messages[1]?.role === "assistant" ? 2 : 1);
        job.meta.trimmed = (job.meta.trimmed || 0) + 1;
        continue;
      }
      job.error = err;
      break;
    }
  }
  if (job.text) {
    try {
      job.saved = await post(`/v1/conversations/${encodeURIComponent(job.conversationId)}/messages`,
        { role: "assistant", content: job.text, meta: job.meta });
    } catch (err) {
      job.error = job.error || err;
    }
  }
}

async function streamAnswer(job, messages, settings, model) {
  const body = {
    model, messages, stream: true, stream_options: { include_usage: true },
    temperature: settings.temperature, max_tokens: settings.max_tokens,
  };
  if (!job.meta.backend) body.speculative = { mode: settings.speculation }; // a backend refuses one per request
  await stream("/v1/chat/completions", body, {
    signal: job.controller.signal,
    onEvent: (_name, chunk) => {
      if (chunk === "[DONE]") return;
      const choice = chunk.choices?.[0];
      if (choice) {
        const delta = choice.delta?.content || "";
        if (delta) {
          const now = performance.now();
          if (!job.firstAt) job.firstAt = now;
          job.text += delta;
          job.tokens += choice.tokens || 0;
          const seconds = (now - job.firstAt) / 1000;
          // The first token arrives with the prompt's time; the rate counts the ones after it.
          if (seconds > 0.2 && job.tokens > 1) job.meta.live_tok_s = (job.tokens - 1) / seconds;
        }
        if (choice.finish_reason) job.meta.finish_reason = choice.finish_reason;
      }
      if (chunk.usage) job.meta.usage = chunk.usage;
      notify(job);
    },
  });
}
