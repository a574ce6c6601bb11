"""The work-order audit trail: one SQLite row per `POST /v1/workorders/parse` call.

What it is: `AuditLog`, a small append-only store (SQLite in WAL mode, stdlib `sqlite3`)
with record / get / list / count and a streamed CSV or JSONL export, and `ParseRecord`,
the dataclass a parse handler fills in. Dict and list fields are stored as JSON text
(ensure_ascii=False, so Traditional Chinese round-trips and stays readable in the file).

What it is not: no HTTP (server/http/errors.py's table maps `AuditLogError`, `AuditWriteFailed`
(a full or failing disk: 507) and `AuditQueryError` to error JSON), no retention or deletion
policy, no full-text index (`q` is a LIKE scan, fine for the thousands of rows an office
produces), no encryption.

Durability: `journal_mode=WAL` + `synchronous=FULL` (+ `fullfsync` on macOS). Every
`record()` is one transaction that is fsynced before it returns, so a returned record
survives kill -9 of the server (WAL alone gives that) *and* an OS crash or power loss,
as far as the disk honours fsync (that is what FULL adds over NORMAL).

Concurrency: ONE connection (`check_same_thread=False`) behind a `threading.Lock`.
SQLite admits one writer at a time anyway, the lock keeps a transaction from
interleaving with another thread's, and it lets Starlette iterate `export()` from
whichever threadpool thread it likes (threading.local connections would tie a cursor
to one thread). Export reads in pages, taking the lock per page and holding no cursor
across a yield, so a long download never blocks `record()` for more than one page. WAL
lets other processes (the sqlite3 CLI, a backup) read while the server writes. `record()`
blocks for one fsync (about a millisecond on an SSD); from an async handler prefer
`await run_in_threadpool(log.record, entry)`.

References: https://www.sqlite.org/wal.html, https://www.sqlite.org/pragma.html#pragma_synchronous,
https://owasp.org/www-community/attacks/CSV_Injection
"""

from __future__ import annotations

import builtins
import csv
import io
import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from . import sqlite_file
from typing import Any, Iterator

APPLICATION_ID = 0x46444B41  # "FDKA" in the SQLite header: tells our file from any other SQLite file
# PRAGMA user_version is the highest key; MIGRATIONS[n] takes a log from n-1 to n
MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE records (
            seq INTEGER PRIMARY KEY,          -- insertion order: breaks created_at ties
            id TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL,         -- 2024-05-01T08:00:00.123Z: text order == time order
            status TEXT NOT NULL,             -- derived in record(), see STATUSES
            template TEXT NOT NULL, model TEXT NOT NULL, input_text TEXT NOT NULL,
            sent_date TEXT, language TEXT,
            output TEXT,                      -- JSON object or NULL
            valid INTEGER NOT NULL, finish_reason TEXT NOT NULL, needs_review INTEGER NOT NULL,
            review_reasons TEXT NOT NULL, warnings TEXT NOT NULL, timings TEXT NOT NULL,  -- JSON
            speculation TEXT, error TEXT)""",
        "CREATE INDEX records_time ON records(created_at)",
    ],
    # Each review reason's code and params, so a reader's UI can say it in their language.
    2: ["ALTER TABLE records ADD COLUMN review_details TEXT NOT NULL DEFAULT '[]'"],
    # What a parse through a backend could not give (extract.Outcome.unavailable), so a reopened parse says it too.
    3: ["ALTER TABLE records ADD COLUMN unavailable TEXT NOT NULL DEFAULT '{}'"],
    # Where each copy field's value was copied from (extract.Outcome.sources), so a reopened parse shows it too.
    4: ["ALTER TABLE records ADD COLUMN sources TEXT NOT NULL DEFAULT '{}'"],
}
JSON_FIELDS = ("output", "review_reasons", "review_details", "warnings", "timings", "speculation", "unavailable",
               "sources")
BOOL_FIELDS = ("valid", "needs_review")
# One word per record for the UI's filter, first match wins: a failed call, then an output
# that broke the schema, then one a person must check, else ok.
STATUSES = ("error", "invalid", "needs_review", "ok")
CSV_COLUMNS = ("id", "created_at", "template", "model", "needs_review", "valid", "finish_reason",
               "review_reasons", "sent_date", "language", "input_text", "output", "timings", "error")
CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # OWASP: Excel may evaluate these
EXPORT_PAGE = 500  # rows per export chunk (and per lock hold)
MAX_LIST_LIMIT = 1000


class AuditLogError(Exception):
    """The audit log file cannot be used; the message names the path and the next step."""


class AuditWriteFailed(AuditLogError, sqlite_file.DiskWriteFailed):
    """The disk refused a record (full, or failing): it is not saved, earlier ones are."""


class AuditQueryError(ValueError):
    """A filter, page or export format the caller can fix: the API answers 400."""


@dataclass(kw_only=True)
class ParseRecord:
    """One parse call, as the handler saw it. created_at is set by record() when None."""
    created_at: str | None = None  # UTC ISO 8601 with ms; any ISO 8601 is normalised to that
    template: str  # "work_order", "quote_request", "complaint", a user template name, or "custom"
    model: str
    input_text: str
    sent_date: str | None = None
    language: str | None = None
    output: dict | None = None  # the parsed JSON
    valid: bool  # output validated against the template's schema
    finish_reason: str
    needs_review: bool
    review_reasons: list[str] = field(default_factory=list)
    review_details: list[dict] = field(default_factory=list)  # per reason: {"code", "field", "params", "message"}
    warnings: list[dict] = field(default_factory=list)  # [{"field", "message", "code", "params"}]
    timings: dict = field(default_factory=dict)
    speculation: dict | None = None
    error: str | None = None
    unavailable: dict = field(default_factory=dict)  # feature -> why, with a backend (workorders/extract.py)
    sources: dict = field(default_factory=dict)  # copy field -> [[start, end], ...] of input_text (extract.py)


class AuditLog(sqlite_file.SqliteStore):
    """The audit trail in one SQLite file. Thread-safe; see the module docstring."""

    def __init__(self, path: str | Path):
        super().__init__(path, "audit log", APPLICATION_ID, MIGRATIONS, AuditLogError)

    # -- writing -----------------------------------------------------------------------------

    def record(self, entry: ParseRecord) -> str:
        """Insert one record, commit (fsynced) and return its id: "wo_" + 24 hex chars,
        12 of milliseconds then 12 random, so ids sort by time like a ULID."""
        row = asdict(entry)
        row["created_at"] = utc_iso(datetime.fromisoformat(row["created_at"])) if row["created_at"] else utc_now()
        row["id"] = f"wo_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(6)}"
        row["status"] = ("error" if entry.error is not None else "invalid" if not entry.valid
                         else "needs_review" if entry.needs_review else "ok")
        for k in JSON_FIELDS:  # serialise before taking the lock: a bad value fails alone
            row[k] = None if row[k] is None else _compact(row[k])
        for k in BOOL_FIELDS:
            row[k] = int(bool(row[k]))
        cols = ", ".join(row)
        marks = ", ".join(f":{k}" for k in row)
        with self._lock, sqlite_file.writing(self.path, "audit log", AuditWriteFailed):
            self._db.execute(f"INSERT INTO records ({cols}) VALUES ({marks})", row)  # autocommit: one tx
        return row["id"]

    # -- reading -----------------------------------------------------------------------------

    def get(self, record_id: str) -> dict | None:
        with self._lock:
            cur = self._db.execute("SELECT * FROM records WHERE id = ?", (record_id,))
            row = cur.fetchone()
            return None if row is None else _decode(cur.description, row)

    def list(self, *, template: str | None = None, needs_review: bool | None = None, status: str | None = None,
             since: str | None = None, until: str | None = None, q: str | None = None,
             limit: int = 50, offset: int = 0) -> list[dict]:
        """Newest first (created_at, then insertion order). Filters combine with AND:
        template and status exact (status in STATUSES); q a case-insensitive (ASCII letters;
        CJK has no case) substring of input_text, % and _ taken literally; since/until ISO
        8601 dates or datetimes, UTC when no offset is given; since is inclusive, until a
        date includes that whole day, until a datetime is inclusive."""
        if not 0 <= limit <= MAX_LIST_LIMIT or offset < 0:
            raise AuditQueryError(f"limit must be 0..{MAX_LIST_LIMIT} and offset >= 0 (got {limit}, {offset})")
        where, params = _where(template=template, needs_review=needs_review, status=status,
                               since=since, until=until, q=q)
        sql = f"SELECT * FROM records WHERE {where} ORDER BY created_at DESC, seq DESC LIMIT ? OFFSET ?"
        with self._lock:
            cur = self._db.execute(sql, params + [limit, offset])
            return [_decode(cur.description, r) for r in cur.fetchall()]

    def count(self, **filters: Any) -> int:
        """How many records match; the same keyword filters as list()."""
        where, params = _where(**filters)
        with self._lock:
            return self._db.execute(f"SELECT count(*) FROM records WHERE {where}", params).fetchone()[0]

    def export(self, fmt: str, **filters: Any) -> Iterator[str]:
        """Every matching record, OLDEST first (a log reads top-down), streamed as str chunks
        of up to EXPORT_PAGE records for a StreamingResponse (which encodes them as UTF-8).

        "jsonl": one full record per line. "csv": the flat CSV_COLUMNS; the first chunk
        starts with U+FEFF (the UTF-8 BOM once encoded) so Excel reads the file as UTF-8
        and shows Chinese correctly; cells starting with = + - @ tab or CR get a leading
        apostrophe so Excel shows them as text instead of running them (OWASP CSV injection).
        Filters are those of list(); no limit. Pages are not one snapshot: a record made
        during the download is included when it sorts after the last page sent."""
        if fmt not in ("csv", "jsonl"):
            raise AuditQueryError(f"export format must be 'csv' or 'jsonl', got {fmt!r}")
        where, params = _where(**filters)  # validate now, not at the first next()
        return self._export(fmt, where, params)

    # builtins.list: in this class `list` is the method above
    def _export(self, fmt: str, where: str, params: builtins.list) -> Iterator[str]:
        if fmt == "csv":
            yield "\ufeff" + _csv_line(CSV_COLUMNS)
        after: tuple[str, int] = ("", 0)  # keyset paging: no cursor held across yields or threads
        sql = (f"SELECT * FROM records WHERE {where} AND (created_at, seq) > (?, ?) "
               f"ORDER BY created_at, seq LIMIT {EXPORT_PAGE}")
        while True:
            with self._lock:
                cur = self._db.execute(sql, params + list(after))
                rows = cur.fetchall()
                desc = cur.description
            if not rows:
                return
            names = [c[0] for c in desc]
            after = (rows[-1][names.index("created_at")], rows[-1][names.index("seq")])
            records = [_decode(desc, r) for r in rows]
            if fmt == "jsonl":
                yield "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
            else:
                yield "".join(_csv_line(_csv_cells(r)) for r in records)


# -- helpers ---------------------------------------------------------------------------------

def utc_iso(dt: datetime) -> str:
    """2024-05-01T08:00:00.123Z. A naive datetime is taken as UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def utc_now() -> str:
    return utc_iso(datetime.now(timezone.utc))


def _bound(name: str, value: str, *, upper: bool) -> tuple[str, str]:
    """since/until -> (SQL operator, canonical created_at text). Text comparison is time
    comparison because every stored created_at has the same fixed format."""
    try:
        if len(value) == 10:  # a date: since = its midnight, until = the end of that day
            d = datetime.combine(date.fromisoformat(value), datetime.min.time())
            return ("<", utc_iso(d + timedelta(days=1))) if upper else (">=", utc_iso(d))
        return ("<=" if upper else ">=", utc_iso(datetime.fromisoformat(value)))
    except (TypeError, ValueError):
        raise AuditQueryError(f"{name}={value!r} is not an ISO 8601 date or datetime "
                         f"(e.g. 2024-05-01 or 2024-05-01T08:00:00Z)") from None


def _where(*, template: str | None = None, needs_review: bool | None = None, status: str | None = None,
           since: str | None = None, until: str | None = None, q: str | None = None) -> tuple[str, list]:
    """The filters of list()/count()/export() as one SQL condition with ? parameters."""
    terms: list[tuple[str, Any]] = []  # (SQL condition, its one parameter)
    if template is not None:
        terms.append(("template = ?", template))
    if needs_review is not None:
        terms.append(("needs_review = ?", int(bool(needs_review))))
    if status is not None:
        if status not in STATUSES:
            raise AuditQueryError(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
        terms.append(("status = ?", status))
    for name, value, upper in (("since", since, False), ("until", until, True)):
        if value is not None:
            op, iso = _bound(name, value, upper=upper)
            terms.append((f"created_at {op} ?", iso))
    if q:
        # Escape the escape char first, then the wildcards, so "50%_off" matches only itself.
        pattern = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        terms.append(("input_text LIKE ? ESCAPE '\\'", f"%{pattern}%"))
    return " AND ".join(["1"] + [t for t, _ in terms]), [p for _, p in terms]


def _decode(description: Any, row: tuple) -> dict:
    """A table row -> the public dict: ParseRecord's fields plus id and status (no seq)."""
    d = {col[0]: value for col, value in zip(description, row)}
    d.pop("seq", None)
    for k in JSON_FIELDS:
        d[k] = None if d[k] is None else json.loads(d[k])
    for k in BOOL_FIELDS:
        d[k] = bool(d[k])
    return d


def _compact(value: Any) -> str:
    """JSON without spaces; ensure_ascii=False keeps Chinese as itself (readable, a third the bytes)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _csv_cells(r: dict) -> list[str]:
    flat = dict(r, review_reasons="; ".join(r["review_reasons"]),
                output=None if r["output"] is None else _compact(r["output"]), timings=_compact(r["timings"]),
                needs_review=str(r["needs_review"]).lower(), valid=str(r["valid"]).lower())
    return [_csv_safe("" if flat[c] is None else str(flat[c])) for c in CSV_COLUMNS]


def _csv_safe(cell: str) -> str:
    return "'" + cell if cell.startswith(CSV_FORMULA_STARTS) else cell


def _csv_line(cells: Any) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow(cells)  # quoting of commas, quotes and newlines in cells
    return buf.getvalue()
