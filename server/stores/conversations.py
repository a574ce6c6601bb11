"""The chat history store of the browser UI: conversations and their messages in SQLite.

What it is: `ConversationStore`, CRUD over two tables (conversations, messages) in one
SQLite file (WAL, stdlib `sqlite3`), opened like the audit log by `server/stores/sqlite_file.py`
(`synchronous=FULL`, application_id + user_version migrations, `ConversationStoreError`
with a HINT for a file that is not ours), one connection behind a lock. Dict fields
(settings, meta) are stored as JSON text with ensure_ascii=False so Chinese stays readable.

What it is not: no HTTP (server/http/errors.py's table maps `ConversationNotFound` to 404,
`ConversationInputError` to 400, `ConversationWriteFailed` (a full or failing disk) to 507
and `ConversationStoreError` to 503), no generation (the UI calls /v1/chat/completions
itself and stores the answer with add_message), no users or permissions (one local user),
no full-text index (`q` is a LIKE scan over titles and contents, fine for a desk's history).

Durability and concurrency: as in server/stores/audit.py; every write method is one transaction,
fsynced before it returns. Blocking: call it from async code through `run_in_threadpool`.

References: server/stores/audit.py, https://www.sqlite.org/wal.html,
https://www.sqlite.org/foreignkeys.html, https://www.sqlite.org/lang_expr.html#like
"""

from __future__ import annotations

import json
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from . import sqlite_file

APPLICATION_ID = 0x46444B43  # "FDKC": our conversations file, not the audit log ("FDKA") nor another SQLite file
SCHEMA_VERSION = 1  # PRAGMA user_version; MIGRATIONS[n] takes a store from n-1 to n
MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE conversations (
            id TEXT PRIMARY KEY,              -- c_ + 12 hex ms + 12 hex random: sorts by creation time
            title TEXT NOT NULL DEFAULT '',   -- '' until renamed or set from the first user message
            created_at TEXT NOT NULL,         -- 2024-05-01T08:00:00.123Z: text order == time order
            updated_at TEXT NOT NULL,         -- strictly increasing within a process, see _stamp()
            settings TEXT NOT NULL DEFAULT '{}')  -- JSON object the UI owns (system prompt, temperature...)""",
        "CREATE INDEX conversations_updated ON conversations(updated_at)",
        """CREATE TABLE messages (
            id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,             -- 1, 2, 3... within a conversation: the display order
            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
            content TEXT NOT NULL,
            created_at TEXT NOT NULL,
            meta TEXT,                        -- JSON object or NULL (usage, timings, speculation, finish_reason)
            UNIQUE (conversation_id, seq))""",
    ],
}
ROLES = ("system", "user", "assistant")
MAX_TITLE_CHARS = 200
AUTO_TITLE_CHARS = 60  # a title taken from the first user message: short enough for a sidebar
MAX_SETTINGS_BYTES = 16 * 1024  # UTF-8 bytes of the JSON text
MAX_CONTENT_BYTES = 1024 * 1024
MAX_META_BYTES = 64 * 1024
MAX_LIST_LIMIT = 1000


class ConversationStoreError(Exception):
    """The conversations file cannot be used; the message names the path and the next step."""


class ConversationWriteFailed(ConversationStoreError, sqlite_file.DiskWriteFailed):
    """The disk refused a write (full, or failing): that write is not saved, earlier ones are."""


class ConversationInputError(ValueError):
    """A value the caller can fix (a size limit, a role, a seq, a page): the API answers 400."""


class ConversationNotFound(LookupError):
    """No conversation with this id (never created, or deleted)."""

    def __init__(self, conversation_id: str):
        super().__init__(f"no conversation {conversation_id!r}")
        self.conversation_id = conversation_id


class ConversationStore(sqlite_file.SqliteStore):
    """The chat history in one SQLite file. Thread-safe; see the module docstring."""

    def __init__(self, path: str | Path):
        # foreign_keys is off by default per connection; ON DELETE CASCADE needs it
        super().__init__(path, "conversations file", APPLICATION_ID, MIGRATIONS, ConversationStoreError,
                         ("PRAGMA foreign_keys=ON",))
        self._last_ms = 0  # the last stamp handed out, so updated_at never ties or goes back

    def _stamp(self) -> tuple[int, str]:
        """(ms, ISO text) for a write, strictly after the previous one. Two writes in the same
        millisecond would otherwise tie on updated_at and the sidebar order would be arbitrary.
        Call with the lock held."""
        self._last_ms = max(time.time_ns() // 1_000_000, self._last_ms + 1)
        dt = datetime.fromtimestamp(self._last_ms / 1000, timezone.utc).replace(tzinfo=None)
        return self._last_ms, dt.isoformat(timespec="milliseconds") + "Z"

    def _writing(self):
        """Around every write: a full or failing disk becomes ConversationWriteFailed."""
        return sqlite_file.writing(self.path, "chat history", ConversationWriteFailed)

    def _existing(self, conversation_id: str) -> dict:
        """_get() of a conversation this thread just wrote, under the lock: it is there."""
        conv = self._get(conversation_id)
        assert conv is not None, conversation_id
        return conv

    def _require(self, conversation_id: str) -> dict:
        row = self._db.execute("SELECT title FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise ConversationNotFound(conversation_id)
        return {"title": row[0]}

    # -- conversations -----------------------------------------------------------------------

    def create(self, title: str | None = None, settings: dict | None = None) -> dict:
        """A new, empty conversation; returns it as get() would."""
        title_text = _title(title)
        settings_text = _settings(settings)  # validate before the lock: a bad value fails alone
        with self._lock, self._writing():
            ms, now = self._stamp()
            cid = f"c_{ms:012x}{secrets.token_hex(6)}"
            self._db.execute("INSERT INTO conversations (id, title, created_at, updated_at, settings) "
                             "VALUES (?, ?, ?, ?, ?)", (cid, title_text, now, now, settings_text))
            return self._existing(cid)

    def get(self, conversation_id: str) -> dict | None:
        """The conversation with its messages in seq order, or None."""
        with self._lock:
            return self._get(conversation_id)

    def _get(self, conversation_id: str) -> dict | None:
        cur = self._db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,))
        row = cur.fetchone()
        if row is None:
            return None
        conv = _conversation(cur.description, row)
        cur = self._db.execute("SELECT * FROM messages WHERE conversation_id = ? ORDER BY seq", (conversation_id,))
        conv["messages"] = [_message(cur.description, r) for r in cur.fetchall()]
        return conv

    def list(self, q: str | None = None, limit: int = 50, offset: int = 0) -> list[dict]:
        """Conversations without their messages (with message_count), most recently updated
        first. q: a case-insensitive (ASCII letters; CJK has no case) substring of the title
        OR of any message content, % and _ taken literally."""
        if not 0 <= limit <= MAX_LIST_LIMIT or offset < 0:
            raise ConversationInputError(f"limit must be 0..{MAX_LIST_LIMIT} and offset >= 0 "
                                         f"(got {limit}, {offset})")
        where, params = "1", []
        if q:
            # Escape the escape char first, then the wildcards, so "50%_off" matches only itself.
            pattern = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            where = ("(c.title LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m "
                     "WHERE m.conversation_id = c.id AND m.content LIKE ? ESCAPE '\\'))")
            params = [pattern, pattern]
        sql = (f"SELECT c.*, (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) AS message_count "
               f"FROM conversations c WHERE {where} ORDER BY c.updated_at DESC, c.id DESC LIMIT ? OFFSET ?")
        with self._lock:
            cur = self._db.execute(sql, params + [limit, offset])
            return [_conversation(cur.description, r) for r in cur.fetchall()]

    def rename(self, conversation_id: str, title: str) -> dict:
        return self._set_column(conversation_id, "title", _title(title))

    def update_settings(self, conversation_id: str, settings: dict) -> dict:
        """Replace (not merge) the settings: the UI sends its whole settings panel."""
        return self._set_column(conversation_id, "settings", _settings(settings))

    def _set_column(self, conversation_id: str, column: Literal["title", "settings"], value: str) -> dict:
        with self._lock, self._writing(), sqlite_file.transaction(self._db):
            self._require(conversation_id)
            self._db.execute(f"UPDATE conversations SET {column} = ?, updated_at = ? WHERE id = ?",
                             (value, self._stamp()[1], conversation_id))
            return self._existing(conversation_id)

    def delete(self, conversation_id: str) -> None:
        """Delete the conversation and (ON DELETE CASCADE) its messages."""
        with self._lock, self._writing():
            cur = self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            if cur.rowcount == 0:
                raise ConversationNotFound(conversation_id)

    # -- messages ----------------------------------------------------------------------------

    def add_message(self, conversation_id: str, role: str, content: str, meta: dict | None = None) -> dict:
        """Append a message (seq = last + 1), touch updated_at, and, when the title is still
        empty and this is a user message, take the title from its first 60 characters."""
        if role not in ROLES:
            raise ConversationInputError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
        if not isinstance(content, str):
            raise ConversationInputError("content must be a string")
        if len(content.encode("utf-8")) > MAX_CONTENT_BYTES:
            raise ConversationInputError(f"content is over {MAX_CONTENT_BYTES // 1024} KB; "
                                         "split it or attach less text")
        meta_text = None if meta is None else _json_object("meta", meta, MAX_META_BYTES)
        with self._lock, self._writing(), sqlite_file.transaction(self._db):
            conv = self._require(conversation_id)
            seq = self._db.execute("SELECT coalesce(max(seq), 0) + 1 FROM messages WHERE conversation_id = ?",
                                   (conversation_id,)).fetchone()[0]
            ms, now = self._stamp()
            mid = f"m_{ms:012x}{secrets.token_hex(6)}"
            self._db.execute("INSERT INTO messages (id, conversation_id, seq, role, content, created_at, meta) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (mid, conversation_id, seq, role, content, now, meta_text))
            title = conv["title"]
            if not title and role == "user":
                title = " ".join(content.split())[:AUTO_TITLE_CHARS]  # newlines and runs of spaces -> one space
            self._db.execute("UPDATE conversations SET updated_at = ?, title = ? WHERE id = ?",
                             (now, title, conversation_id))
            cur = self._db.execute("SELECT * FROM messages WHERE id = ?", (mid,))
            return _message(cur.description, cur.fetchone())

    def delete_messages_after(self, conversation_id: str, seq: int) -> int:
        """Delete the messages with seq > `seq` and return how many. "Regenerate" passes the
        seq of the last user message, dropping the answer below it; seq 0 clears the chat.
        The next add_message reuses the freed seq numbers (seq is max + 1)."""
        if seq < 0:
            raise ConversationInputError(f"seq must be >= 0, got {seq}")
        with self._lock, self._writing(), sqlite_file.transaction(self._db):
            self._require(conversation_id)
            cur = self._db.execute("DELETE FROM messages WHERE conversation_id = ? AND seq > ?", (conversation_id, seq))
            if cur.rowcount:
                self._db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?",
                                 (self._stamp()[1], conversation_id))
            return cur.rowcount


# -- helpers ---------------------------------------------------------------------------------

def _title(title: str | None) -> str:
    if title is None:
        return ""
    if not isinstance(title, str):
        raise ConversationInputError("title must be a string")
    title = title.strip()
    if len(title) > MAX_TITLE_CHARS:
        raise ConversationInputError(f"title is over {MAX_TITLE_CHARS} characters")
    return title


def _settings(settings: dict | None) -> str:
    return _json_object("settings", {} if settings is None else settings, MAX_SETTINGS_BYTES)


def _json_object(name: str, value: Any, max_bytes: int) -> str:
    """A dict -> compact JSON text, refusing anything else or anything over max_bytes of UTF-8."""
    if not isinstance(value, dict):
        raise ConversationInputError(f"{name} must be a JSON object")
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise ConversationInputError(f"{name} is not JSON-serialisable: {e}") from None
    if len(text.encode("utf-8")) > max_bytes:
        raise ConversationInputError(f"{name} is over {max_bytes // 1024} KB as JSON; "
                                     "keep long texts out of it")
    return text


def _conversation(description: Any, row: tuple) -> dict:
    d = {col[0]: value for col, value in zip(description, row)}
    d["settings"] = json.loads(d["settings"])
    return d


def _message(description: Any, row: tuple) -> dict:
    d = {col[0]: value for col, value in zip(description, row)}
    d["meta"] = None if d["meta"] is None else json.loads(d["meta"])
    return d
