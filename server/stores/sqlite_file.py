"""Opening one of flashdesk's own SQLite files (the work-order audit log, the chat history):
WAL + synchronous=FULL, our application_id, user_version migrations, and a clear error for
a file that is not ours, is damaged, or is newer than this code; and `writing`, which turns
a write the disk refused (full, or failing) into the store's own error with the next step.

What it is not: a store (audit.py and conversations.py own their tables and queries; SqliteStore
is only the connection they share the handling of).
References: https://www.sqlite.org/wal.html, https://www.sqlite.org/pragma.html
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator, Self

SQLITE_IOERR, SQLITE_FULL = 10, 13  # primary result codes, https://www.sqlite.org/rescode.html


class DiskWriteFailed(Exception):
    """Mixed into each store's "the disk refused a write" error, so server/http/errors.py answers
    them all with one row (507 Insufficient Storage)."""


def disk_problem(e: sqlite3.Error) -> str | None:
    """What a disk-level SQLite error means for the user, or None for any other error.
    SQLite says SQLITE_FULL when write() fails with ENOSPC; other failed writes (EFBIG past a
    file size limit, EIO, a failed fsync) are SQLITE_IOERR_*, which may be a full disk too."""
    code = getattr(e, "sqlite_errorcode", 0) & 0xFF  # the primary code of an extended one
    if code == SQLITE_FULL:
        return "the disk is full"
    if code == SQLITE_IOERR:
        return "the disk refused the write (it may be full, or failing)"
    return None


def open_file(path: Path, what: str, app_id: int, migrations: dict[int, list[str]], error: type[Exception],
              pragmas: tuple[str, ...] = ()) -> sqlite3.Connection:
    """A connection to `path` (`what` names it in messages, e.g. "audit log"), set up and migrated
    to max(migrations); raises `error` with the path and the next step."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we say BEGIN/COMMIT ourselves, and a lone INSERT is its own
        # transaction. timeout: wait (not fail) while another process holds the write lock.
        db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    except (OSError, sqlite3.Error) as e:
        raise error(f"cannot open the {what} {path}: {e}. HINT: check that the folder exists and is "
                    "writable.") from e
    try:
        _setup(db, path, what, app_id, migrations, error, pragmas)
    except sqlite3.DatabaseError as e:  # "file is not a database", "malformed", ...
        db.close()
        if why := disk_problem(e):  # a healthy file on a full disk: moving it away would lose it for nothing
            raise error(f"cannot open the {what} {path}: {why} (SQLite: {e}). HINT: free up space on that disk "
                        "(or check it), then start flashdesk again; the file is kept as it is.") from e
        raise error(f"{path} is not a readable flashdesk {what} (SQLite: {e}). HINT: move the file away "
                    f"(e.g. `mv '{path}' '{path}.bad'`); a new empty one is created in its place on the next "
                    "start.") from e
    except BaseException:
        db.close()
        raise
    return db


class SqliteStore:
    """A store's one connection to its file: the path, the lock every query holds (the server's
    threads share the connection), and closing. The store owns its tables and queries."""

    def __init__(self, path: str | Path, what: str, app_id: int, migrations: dict[int, list[str]],
                 error: type[Exception], pragmas: tuple[str, ...] = ()):
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        self._db = open_file(self.path, what, app_id, migrations, error, pragmas)

    def close(self) -> None:
        """Close the connection (SQLite checkpoints the WAL into the main file). Idempotent."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _setup(db, path, what, app_id, migrations, error, pragmas) -> None:
    # The first read of the header happens here, so garbage at the path fails now, not later.
    mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if mode != "wal":  # e.g. a network share without shared memory: durability would be unknown
        raise error(f"{path}: SQLite refused WAL mode (got {mode!r}). HINT: keep the {what} on a local disk.")
    db.execute("PRAGMA synchronous=FULL")  # a returned commit survives kill -9 and power loss
    db.execute("PRAGMA fullfsync=ON")  # macOS: a real flush to the platter; no-op elsewhere
    for pragma in pragmas:
        db.execute(pragma)
    latest = max(migrations)
    with transaction(db):  # IMMEDIATE: two processes starting at once migrate only once
        found = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        objects = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if found != app_id and (found != 0 or version != 0 or objects):
            raise error(f"{path} is an SQLite database but not a flashdesk {what}. HINT: move the file away.")
        if version > latest:
            raise error(f"{path} was written by a newer flashdesk (schema {version}, this one knows {latest}). "
                        "HINT: upgrade flashdesk, or move the file away.")
        for v in range(version + 1, latest + 1):
            for sql in migrations[v]:
                db.execute(sql)
            db.execute(f"PRAGMA user_version = {v}")
        db.execute(f"PRAGMA application_id = {app_id}")


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        # After SQLITE_FULL or SQLITE_IOERR SQLite may have rolled back on its own (a ROLLBACK then
        # fails and would hide the real error), and a failed COMMIT may leave the transaction open,
        # holding the write lock so that every later write of this connection fails.
        if db.in_transaction:
            with suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        raise


@contextmanager
def writing(path: Path, what: str, error: type[Exception]) -> Iterator[None]:
    """Around a write (outside its transaction, so the rollback comes first): a write the disk
    refused becomes `error` (a DiskWriteFailed), naming the file and the next step. What was
    committed before stays: the failed transaction is rolled back whole, in WAL or on disk."""
    try:
        yield
    except sqlite3.Error as e:
        why = disk_problem(e)
        if why is None:
            raise
        code = getattr(e, "sqlite_errorname", "?")
        raise error(f"{why}: the {what} {path} could not be written, so nothing of this request was saved "
                    f"there; everything saved before is kept (SQLite: {e}, {code}). HINT: free up space on that "
                    "disk (or check it), then try again.") from e
