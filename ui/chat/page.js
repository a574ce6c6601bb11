// The chat page: the conversation list (conversations.js: search, rename, delete), the open
// conversation with streamed Markdown answers, stop and regenerate, and the settings panel.
// History lives on the server (/v1/conversations), so it survives a reload, another
// browser, and a restart of flashdesk.

import { ApiError, del, get, patch, post } from "../api.js";
import { clear, confirmDialog, copyText, h } from "../dom.js";
import { errorText, t } from "../i18n.js";
import { backendOf, welcomeText } from "./backend.js";
import { ConversationList } from "./conversations.js";
import { activeGeneration, generate, stopGeneration } from "./generation.js";
import { renderInto, renderMarkdown } from "./markdown/render.js";
import { clean, rememberDefaults, savedDefaults, settingsPanel, switchModel } from "./settings.js";
import { detailsButton, summaryText } from "./stats.js";
import { tierNotice } from "./tier_notice.js";

const enc = encodeURIComponent;

export function mount(root, ctx) {
  const page = new ChatPage(root, ctx);
  page.open(ctx.arg);
  return { route: (arg) => page.open(arg), unmount: () => page.unmount() };
}

class ChatPage {
  constructor(root, ctx) {
    this.ctx = ctx;
    this.conversation = null; // {id, title, settings, messages}
    this.settings = savedDefaults();
    this.aborter = new AbortController();
    this.build(root);
    this.offHealth = ctx.onHealth((health) => {
      this.updateComposer();
      this.messages.querySelector(".welcome-text")?.replaceChildren(welcomeText(health)); // local or backend
    });
    this.conversations.load();
    this.showTierNotice();
  }

  unmount() {
    this.aborter.abort();
    this.offHealth();
    this.detach?.();
  }

  // -- layout -------------------------------------------------------------------------

  build(root) {
    this.conversations = new ConversationList({
      current: () => this.conversation?.id,
      navigate: this.ctx.navigate,
      onTitle: (id, title) => {
        if (this.conversation?.id !== id || this.conversation.title === title) return;
        this.conversation.title = title;
        this.setTitle(title);
      },
      onError: (err) => this.note(t("common.error", { message: errorText(err) }), true),
    });

    this.title = h("h1", { class: "chat-title" });
    this.settingsToggle = h("button", {
      type: "button", class: "small", "aria-expanded": "false", "aria-controls": "chat-settings",
      onclick: () => this.toggleSettings(),
    }, t("chat.settings"));
    this.sidebarToggle = h("button", {
      type: "button", class: "small sidebar-toggle", "aria-expanded": "false",
      onclick: () => {
        const open = this.layout.classList.toggle("show-sidebar");
        this.sidebarToggle.setAttribute("aria-expanded", String(open));
      },
    }, t("chat.conversations"));
    this.messages = h("div", { class: "messages", role: "log", "aria-live": "polite",
      "aria-label": t("chat.messages") });
    this.input = h("textarea", {
      id: "chat-input", rows: 3, placeholder: t("chat.input_placeholder"),
      onkeydown: (e) => {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { // isComposing: a Chinese IME is still picking
          e.preventDefault();
          this.send();
        }
      },
    });
    this.sendButton = h("button", { type: "submit", class: "primary send" }, t("chat.send"));
    this.stopButton = h("button", { type: "button", class: "danger stop", hidden: true,
      onclick: () => stopGeneration() }, t("chat.stop"));
    this.composerNote = h("p", { class: "hint composer-note", "aria-live": "polite" });
    const composer = h("form", { class: "composer", onsubmit: (e) => { e.preventDefault(); this.send(); } },
      h("label", { for: "chat-input", class: "visually-hidden" }, t("chat.input_label")),
      this.input, h("div", { class: "composer-actions" }, this.stopButton, this.sendButton), this.composerNote);
    this.noticeSlot = h("div", { class: "chat-notice-slot" });
    this.main = h("section", { class: "chat-main" },
      h("div", { class: "chat-toolbar" }, this.sidebarToggle, this.title, this.settingsToggle), this.noticeSlot,
      this.messages, composer);
    this.settingsBox = h("aside", { id: "chat-settings", class: "chat-settings", hidden: true });
    this.layout = h("div", { class: "chat-layout" }, this.conversations.element, this.main, this.settingsBox);
    root.append(this.layout);
    root.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && activeGeneration()) stopGeneration();
    });
  }

  /** "This computer can run a stronger model" (tier_notice.js), when it has something to say. */
  async showTierNotice() {
    const box = await tierNotice({ navigate: this.ctx.navigate, signal: this.aborter.signal });
    if (box && !this.aborter.signal.aborted) clear(this.noticeSlot, box);
  }

  toggleSettings(force) {
    const open = force ?? this.settingsBox.hidden;
    this.settingsBox.hidden = !open;
    this.settingsToggle.setAttribute("aria-expanded", String(open));
    if (open) {
      clear(this.settingsBox, settingsPanel(this.settings, {
        servedModel: this.ctx.health()?.model,
        backend: backendOf(this.ctx.health()),
        speculation: this.ctx.health()?.speculation,
        onChange: (s) => this.changeSettings(s),
        onSwitchModel: (name) => this.switchTo(name),
      }));
      this.settingsBox.querySelector("select, textarea, input")?.focus();
    }
  }

  changeSettings(settings) {
    this.settings = clean(settings);
    rememberDefaults(this.settings);
    if (this.conversation) { // a quiet save: the next message carries them anyway
      clearTimeout(this.saveTimer);
      const id = this.conversation.id;
      this.saveTimer = setTimeout(() =>
        patch(`/v1/conversations/${enc(id)}`, { settings: this.settings }).catch(() => {}), 400);
    }
  }

  async switchTo(name) {
    const ok = await confirmDialog(t("chat.switch_confirm", { model: name }),
      { ok: t("chat.switch_ok"), cancel: t("common.cancel") });
    if (!ok) return;
    try {
      await switchModel(name);
      this.note(t("chat.switching", { model: name }));
    } catch (err) {
      this.note(t("common.error", { message: errorText(err) }), true);
    }
  }

  // -- one conversation ----------------------------------------------------------------

  async open(id) {
    this.detach?.();
    this.detach = null;
    this.layout.classList.remove("show-sidebar");
    if (!id) {
      this.conversation = null;
      this.settings = savedDefaults();
      this.setTitle("");
      this.renderMessages();
    } else if (this.conversation?.id !== id) {
      try {
        this.conversation = await get(`/v1/conversations/${enc(id)}`);
      } catch (err) {
        this.conversation = null;
        this.setTitle("");
        clear(this.messages, h("p", { class: "error-box" },
          err instanceof ApiError && err.status === 404 ? t("chat.not_found")
            : t("common.error", { message: errorText(err) })));
        return;
      }
      this.settings = clean({ ...savedDefaults(), ...this.conversation.settings });
      this.setTitle(this.conversation.title);
      this.renderMessages();
    }
    if (!this.settingsBox.hidden) this.toggleSettings(true);
    this.attachGeneration();
    this.updateComposer();
    this.conversations.load();
    this.input.focus();
  }

  setTitle(title) {
    this.title.textContent = title || (this.conversation ? t("chat.untitled") : t("chat.new"));
  }

  renderMessages() {
    const msgs = this.conversation?.messages || [];
    if (!msgs.length) {
      clear(this.messages, this.welcome());
      return;
    }
    const lastAnswer = [...msgs].reverse().find((m) => m.role === "assistant");
    clear(this.messages, msgs.map((m) => this.bubble(m, m === lastAnswer && m === msgs[msgs.length - 1])));
    this.scrollDown(true);
  }

  welcome() {
    const examples = [t("chat.example_1"), t("chat.example_2"), t("chat.example_3")];
    return h("div", { class: "welcome" },
      h("h2", {}, t("chat.welcome_title")),
      h("p", { class: "muted welcome-text" }, welcomeText(this.ctx.health())),
      h("div", { class: "examples" }, examples.map((text) => h("button", { type: "button", class: "example",
        onclick: () => { this.input.value = text; this.input.focus(); } }, text))));
  }

  bubble(m, canRegenerate) {
    // Answers are Markdown (rendered into DOM nodes, never HTML); the user's own words stay plain text.
    const body = m.role === "assistant" ? h("div", { class: "bubble-body md" }, markdown(m.content))
      : h("div", { class: "bubble-body plain" }, m.content);
    const footer = m.role === "assistant" ? this.answerFooter(m, canRegenerate) : null;
    return h("article", { class: `msg ${m.role}`, dataset: { seq: m.seq, id: m.id } },
      h("h2", { class: "msg-role visually-hidden" }, m.role === "user" ? t("chat.you") : t("chat.assistant")),
      body, footer);
  }

  answerFooter(m, canRegenerate) {
    const meta = m.meta || {};
    const copy = h("button", { type: "button", class: "ghost small", onclick: async () => {
      copy.textContent = (await copyText(m.content)) ? t("common.copied") : t("common.copy");
      setTimeout(() => { copy.textContent = t("common.copy"); }, 1500);
    } }, t("common.copy"));
    return h("footer", { class: "msg-footer" },
      h("span", { class: "stats" }, summaryText(meta)),
      meta.usage ? detailsButton(meta) : null,
      copy,
      canRegenerate ? h("button", { type: "button", class: "ghost small regenerate", onclick: () => this.regenerate() },
        t("chat.regenerate")) : null);
  }

  // -- writing answers -----------------------------------------------------------------

  async send() {
    const text = this.input.value.trim();
    if (!text || activeGeneration() || !this.ready()) return;
    this.input.value = "";
    try {
      if (!this.conversation) {
        const conv = await post("/v1/conversations", { settings: this.settings });
        this.conversation = { ...conv, messages: [] };
        history.replaceState(null, "", `#/chat/${enc(conv.id)}`);
      }
      const msg = await post(`/v1/conversations/${enc(this.conversation.id)}/messages`,
        { role: "user", content: text });
      this.conversation.messages.push(msg);
    } catch (err) {
      this.input.value = text; // nothing lost: the message stays in the box
      this.note(t("common.error", { message: errorText(err) }), true);
      return;
    }
    this.renderMessages();
    this.startAnswer();
    this.conversations.load();
  }

  async regenerate() {
    const msgs = this.conversation.messages;
    const lastUser = [...msgs].reverse().find((m) => m.role === "user");
    if (!lastUser || activeGeneration()) return;
    try {
      await del(`/v1/conversations/${enc(this.conversation.id)}/messages?after=${lastUser.seq}`);
    } catch (err) {
      this.note(t("common.error", { message: errorText(err) }), true);
      return;
    }
    this.conversation.messages = msgs.filter((m) => m.seq <= lastUser.seq);
    this.renderMessages();
    this.startAnswer();
  }

  startAnswer() {
    generate({
      conversationId: this.conversation.id,
      history: this.conversation.messages.filter((m) => m.role !== "system"),
      settings: this.settings,
      model: this.ctx.health()?.model,
      backend: this.ctx.health()?.speculation?.backend === true,
    });
    this.attachGeneration();
  }

  /** Show the answer being written for this conversation (also after coming back to it). */
  attachGeneration() {
    const job = activeGeneration();
    this.updateComposer();
    if (!job || job.conversationId !== this.conversation?.id) return;
    const body = h("div", { class: "bubble-body md" });
    const stats = h("span", { class: "stats" });
    const live = h("article", { class: "msg assistant writing", "aria-busy": "true" },
      h("h2", { class: "msg-role visually-hidden" }, t("chat.assistant")), body,
      h("footer", { class: "msg-footer" }, stats));
    this.messages.querySelector(".welcome")?.remove();
    this.messages.append(live);
    let frame = 0;
    const draw = () => {
      frame = 0;
      // renderInto rebuilds only the blocks that changed since the last frame (streaming stays cheap).
      if (job.text) renderInto(body, job.text, markdownLabels());
      else body.replaceChildren(h("span", { class: "typing" }, t("chat.thinking")));
      stats.textContent = summaryText(job.meta);
      this.scrollDown();
    };
    const onUpdate = () => {
      if (job.finished) return this.finishAnswer(job, live);
      if (!frame) frame = requestAnimationFrame(draw); // at most one redraw per frame
    };
    job.listeners.add(onUpdate);
    this.detach = () => { job.listeners.delete(onUpdate); cancelAnimationFrame(frame); };
    draw();
  }

  finishAnswer(job, live) {
    this.detach?.();
    this.detach = null;
    if (job.saved && this.conversation?.id === job.conversationId) this.conversation.messages.push(job.saved);
    this.renderMessages();
    if (job.error) {
      this.messages.append(h("div", { class: "error-box", role: "alert" },
        t("common.error", { message: errorText(job.error) }),
        " ", h("button", { type: "button", class: "small", onclick: () => this.regenerate() }, t("common.retry"))));
      this.scrollDown(true);
    }
    live.remove();
    this.updateComposer();
    this.conversations.load();
    this.input.focus();
  }

  // -- small things --------------------------------------------------------------------

  ready() {
    return this.ctx.health()?.status === "ready";
  }

  updateComposer() {
    const busy = !!activeGeneration();
    this.stopButton.hidden = !busy;
    this.sendButton.hidden = busy;
    this.sendButton.disabled = !this.ready();
    const s = this.ctx.health()?.status;
    this.composerNote.textContent = s === "ready" || !s ? (busy ? t("chat.stop_hint") : t("chat.send_hint"))
      : s === "loading" ? t("chat.wait_loading") : t("chat.not_ready");
  }

  note(text, isError = false) {
    this.composerNote.textContent = text;
    this.composerNote.classList.toggle("error-text", isError);
  }

  scrollDown(force = false) {
    const el = this.messages;
    const near = el.scrollHeight - el.scrollTop - el.clientHeight < 120;
    if (force || near) el.scrollTop = el.scrollHeight;
  }
}

function markdownLabels() {
  return { copyLabel: t("common.copy"), copiedLabel: t("common.copied"), copyAriaLabel: t("chat.copy_code") };
}

function markdown(text) {
  return renderMarkdown(text, markdownLabels());
}
