// The chat page's conversation list: search, the saved chats newest first, rename in place and
// delete. It reads and writes /v1/conversations itself and tells the page (page.js) what the page
// must know: a conversation's title changed, or something failed.

import { del, get, patch } from "../api.js";
import { clear, confirmDialog, h } from "../dom.js";
import { errorText, language, t } from "../i18n.js";

const enc = encodeURIComponent;

export class ConversationList {
  /**
   * `current()`: the open conversation's id (or undefined); `navigate(hash)`: the app's router;
   * `onTitle(id, title)`: the server holds this title for that conversation; `onError(err)`.
   */
  constructor({ current, navigate, onTitle, onError }) {
    Object.assign(this, { current, navigate, onTitle, onError });
    this.search = "";
    this.list = h("ul", { class: "conv-list", "aria-label": t("chat.conversations") });
    this.searchBox = h("input", {
      type: "search", placeholder: t("chat.search_placeholder"), "aria-label": t("chat.search"),
      oninput: () => {
        clearTimeout(this.searchTimer);
        this.searchTimer = setTimeout(() => { this.search = this.searchBox.value.trim(); this.load(); }, 250);
      },
    });
    this.element = h("aside", { class: "chat-sidebar", "aria-label": t("chat.conversations") },
      h("button", { type: "button", class: "primary new-chat", onclick: () => this.navigate("#/chat") }, t("chat.new")),
      this.searchBox, this.list);
  }

  async load() {
    let rows;
    try {
      rows = (await get(`/v1/conversations?limit=100${this.search ? `&q=${enc(this.search)}` : ""}`)).data;
    } catch (err) {
      clear(this.list, h("li", { class: "error-box" }, t("common.error", { message: errorText(err) })));
      return;
    }
    if (!rows.length) {
      clear(this.list,
        h("li", { class: "muted empty" }, this.search ? t("chat.no_matches") : t("chat.no_conversations")));
      return;
    }
    clear(this.list, rows.map((c) => this.item(c)));
    const mine = rows.find((c) => c.id === this.current());
    if (mine) this.onTitle(mine.id, mine.title); // the server titles a chat from its first message
  }

  item(c) {
    const current = this.current() === c.id;
    const link = h("a", { href: `#/chat/${enc(c.id)}`, class: "conv-link", "aria-current": current ? "page" : null },
      h("span", { class: "conv-title" }, c.title || t("chat.untitled")),
      h("span", { class: "conv-date" }, shortDate(c.updated_at)));
    const item = h("li", { class: current ? "current" : "" }, link,
      h("span", { class: "conv-actions" },
        h("button", { type: "button", class: "ghost small",
          "aria-label": t("chat.rename_named", { title: c.title || t("chat.untitled") }),
          onclick: () => this.rename(item, c) }, t("common.rename")),
        h("button", { type: "button", class: "ghost small",
          "aria-label": t("chat.delete_named", { title: c.title || t("chat.untitled") }),
          onclick: () => this.remove(c) }, t("common.delete"))));
    return item;
  }

  rename(item, c) {
    const input = h("input", { value: c.title, "aria-label": t("chat.rename_label"), maxlength: 200 });
    let finished = false; // Enter (or Escape) and then the blur of the removed field: act once
    const done = async (save) => {
      if (finished) return;
      finished = true;
      if (save && input.value.trim() && input.value.trim() !== c.title) {
        try {
          await patch(`/v1/conversations/${enc(c.id)}`, { title: input.value.trim() });
          this.onTitle(c.id, input.value.trim());
        } catch (err) {
          this.onError(err);
        }
      }
      this.load();
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); done(true); }
      if (e.key === "Escape") { e.stopPropagation(); done(false); }
    });
    input.addEventListener("blur", () => done(true), { once: true });
    clear(item, input);
    input.focus();
    input.select();
  }

  async remove(c) {
    const ok = await confirmDialog(t("chat.delete_confirm", { title: c.title || t("chat.untitled") }),
      { ok: t("common.delete"), cancel: t("common.cancel"), danger: true });
    if (!ok) return;
    try {
      await del(`/v1/conversations/${enc(c.id)}`);
    } catch (err) {
      this.onError(err);
    }
    if (this.current() === c.id) this.navigate("#/chat");
    this.load();
  }
}

/** "14:05" today, else "Nov 28" (in the page's language). */
function shortDate(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const today = new Date().toDateString() === d.toDateString();
  return new Intl.DateTimeFormat(language(), today ? { timeStyle: "short" } : { month: "short", day: "numeric" })
    .format(d);
}
