"""server/stores/audit.py: the work-order audit trail. No model, no server: the SQLite file only.

Covers record/get/list/count and their filters, the CSV (BOM, formula guard) and JSONL
exports, durability under kill -9 of a writing process, two writer threads, and the
clear error for a file that is not an audit log. Power loss is not tested (it cannot be
from a test); synchronous=FULL is what covers it.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import sqlite3
import sys
import threading
import time
from contextlib import closing

import pytest

from kill_child import kill_9_when
from server.stores.audit import AuditLog, AuditLogError, ParseRecord

CHINESE = "台北市信義區 冷氣不冷，請於週五前派員維修。聯絡人：陳小姐 0912-345-678"


def entry(text: str = "fix the pump", **kw) -> ParseRecord:
    base = dict(template="work_order", model="smollm2", input_text=text, output={"title": text[:10]},
                valid=True, finish_reason="stop", needs_review=False, timings={"total_ms": 12.5})
    return ParseRecord(**(base | kw))


@pytest.fixture
def log(tmp_path):
    with AuditLog(tmp_path / "sub" / "audit.db") as a:  # parent dirs are created
        yield a


def test_record_get_round_trip(log):
    e = entry(CHINESE, template="complaint", sent_date="2024-05-01", language="zh-TW",
              output={"地址": "台北市信義區", "items": [1, 2]}, needs_review=True,
              review_reasons=["缺少日期", "phone?"], warnings=[{"field": "date", "message": "不確定"}],
              speculation={"mode": "dflash", "accepted": 3}, created_at="2024-05-01T08:00:00+08:00")
    rid = log.record(e)
    assert rid.startswith("wo_") and len(rid) == 27 and int(rid[3:], 16) >= 0
    got = log.get(rid)
    assert got["created_at"] == "2024-05-01T00:00:00.000Z"  # normalised to UTC with ms
    for k in ("template", "input_text", "sent_date", "language", "output", "valid", "needs_review",
              "review_reasons", "warnings", "timings", "speculation", "error", "finish_reason", "model"):
        assert got[k] == getattr(e, k), k
    assert got["status"] == "needs_review" and got["id"] == rid
    assert log.get("wo_nope") is None
    with closing(sqlite3.connect(log.path)) as db:
        raw = db.execute("SELECT output FROM records").fetchone()[0]
    assert "台北市" in raw  # stored readable (ensure_ascii=False), not \\u escapes


def test_created_at_defaults_to_now_utc_ms(log):
    got = log.get(log.record(entry()))
    assert got["created_at"].endswith("Z") and len(got["created_at"]) == 24


def test_list_newest_first_limit_offset_count(log):
    ids = [log.record(entry(f"job {i}", created_at=f"2024-05-{i + 1:02d}T10:00:00Z")) for i in range(5)]
    same = [log.record(entry(f"tie {i}", created_at="2024-06-01T00:00:00Z")) for i in range(2)]
    assert [r["id"] for r in log.list()] == same[::-1] + ids[::-1]  # equal times: insertion order
    assert [r["id"] for r in log.list(limit=2, offset=3)] == [ids[3], ids[2]]
    assert log.count() == 7 and log.list(limit=0) == []
    with pytest.raises(ValueError):
        log.list(limit=-1)


def test_filters(log):
    log.record(entry("pump broken", created_at="2024-05-01T23:59:59.999Z"))
    log.record(entry("Quote for 50%_off PUMPS", template="quote_request", created_at="2024-05-02T00:00:00Z"))
    log.record(entry("50 percent x off", template="quote_request", needs_review=True, created_at="2024-05-03"))
    log.record(entry("boom", valid=False, output=None, error="timeout", created_at="2024-05-04T12:00:00Z"))
    log.record(entry(CHINESE, template="custom", created_at="2024-05-05T12:00:00Z"))

    def texts(**f):
        assert log.count(**f) == len(rows := log.list(**f))
        return sorted(r["input_text"] for r in rows)

    assert texts(template="quote_request") == ["50 percent x off", "Quote for 50%_off PUMPS"]
    assert texts(needs_review=True) == ["50 percent x off"]
    assert len(texts(needs_review=False)) == 4
    assert texts(status="error") == ["boom"]
    assert texts(q="pump") == ["Quote for 50%_off PUMPS", "pump broken"]  # case-insensitive
    assert texts(q="50%_") == ["Quote for 50%_off PUMPS"]  # % and _ are literal, not wildcards
    assert texts(q="x_off") == []  # as a wildcard _ would match "x off"
    assert texts(q="%") == ["Quote for 50%_off PUMPS"]
    assert texts(q="信義區") == [CHINESE]
    assert texts(until="2024-05-01") == ["pump broken"]  # a date includes its whole day
    assert texts(since="2024-05-05") == [CHINESE]
    assert texts(since="2024-05-02", until="2024-05-03T00:00:00Z") == ["50 percent x off", "Quote for 50%_off PUMPS"]
    assert texts(since="2024-05-02T08:00:00+08:00", until="2024-05-02") == ["Quote for 50%_off PUMPS"]
    assert texts(template="quote_request", needs_review=False, q="quote") == ["Quote for 50%_off PUMPS"]
    for bad in ({"since": "yesterday"}, {"status": "weird"}):
        with pytest.raises(ValueError):
            log.list(**bad)
    with pytest.raises(TypeError):
        log.count(nope=1)


def test_export_csv_bom_and_formula_guard(log):
    evil = '=HYPERLINK("http://evil.example","click")'
    log.record(entry(evil, created_at="2024-05-01T00:00:00Z", review_reasons=["-bad", "ok"]))
    log.record(entry(CHINESE + "\n第二行, \"quoted\"", needs_review=True, created_at="2024-05-02T00:00:00Z"))
    log.record(entry("@SUM(A1)", template="custom", created_at="2024-05-03T00:00:00Z"))
    data = "".join(log.export("csv")).encode("utf-8")  # what StreamingResponse sends
    assert data.startswith(codecs.BOM_UTF8)
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    # oldest first; the newline, comma and quotes of the second cell survive the CSV quoting
    assert [r["input_text"] for r in rows] == ["'" + evil, CHINESE + "\n第二行, \"quoted\"", "'@SUM(A1)"]
    assert rows[0]["review_reasons"] == "'-bad; ok"
    assert rows[1]["needs_review"] == "true" and rows[1]["valid"] == "true"
    assert json.loads(rows[1]["output"]) == {"title": CHINESE[:10]}
    assert rows[0]["id"].startswith("wo_") and rows[0]["error"] == ""
    assert list(rows[0]) == ["id", "created_at", "template", "model", "needs_review", "valid", "finish_reason",
                             "review_reasons", "sent_date", "language", "input_text", "output", "timings", "error"]
    assert [r["input_text"] for r in csv.DictReader(io.StringIO(
        "".join(log.export("csv", template="custom")).lstrip("\ufeff")))] == ["'@SUM(A1)"]
    assert log.get(rows[0]["id"])["input_text"] == evil  # the guard is for CSV only


def test_export_jsonl_pages_and_filters(log, monkeypatch):
    monkeypatch.setattr("server.stores.audit.EXPORT_PAGE", 3)  # several chunks, and page edges on ties
    ids = [log.record(entry(f"{CHINESE} {i}", needs_review=i % 2 == 0,
                            created_at="2024-05-01T00:00:00Z" if i < 4 else None)) for i in range(8)]
    chunks = list(log.export("jsonl"))
    assert len(chunks) == 3
    lines = "".join(chunks).splitlines()
    recs = [json.loads(line) for line in lines]
    assert [r["id"] for r in recs] == ids and recs[5] == log.get(ids[5])
    assert [json.loads(x)["id"] for x in "".join(log.export("jsonl", needs_review=False)).splitlines()] == ids[1::2]
    assert list(log.export("jsonl", q="no such text")) == []
    with pytest.raises(ValueError):
        log.export("xlsx")


CHILD = r"""
import sys
from server.stores.audit import AuditLog, ParseRecord
log = AuditLog(sys.argv[1])
i = 0
while True:
    rid = log.record(ParseRecord(template="work_order", model="m", input_text=f"工單 {i} " + "漢字" * 200,
                                 output={"n": i, "名稱": "冷氣"}, valid=True, finish_reason="stop",
                                 needs_review=i % 3 == 0, review_reasons=[f"r{i}"]))
    print(rid, i, flush=True)
    i += 1
"""


def test_kill_9_loses_no_committed_record(tmp_path):
    path = tmp_path / "audit.db"
    # killed mid-loop: most likely inside a write
    argv = [sys.executable, "-c", CHILD, str(path)]
    seen = [line.split() for line in kill_9_when(argv, lambda lines: len(lines) >= 60, 30)]
    assert path.with_name("audit.db-wal").stat().st_size > 0  # so reopening runs WAL recovery
    with AuditLog(path) as log:
        assert log._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for rid, i in seen:
            got = log.get(rid)
            assert got is not None, f"record {i} ({rid}) was reported committed but is gone"
            assert got["input_text"] == f"工單 {i} " + "漢字" * 200
            assert got["output"] == {"n": int(i), "名稱": "冷氣"} and got["review_reasons"] == [f"r{i}"]
        assert log.count() >= len(seen)  # the last one may have committed but not printed
        assert log.get(log.record(entry("after the crash")))["input_text"] == "after the crash"
        assert log.count(q="after the crash") == 1


def test_two_threads_lose_nothing(log):
    barrier, ids, errors = threading.Barrier(2), {0: [], 1: []}, []

    def work(t):
        try:
            barrier.wait()
            for i in range(150):
                ids[t].append(log.record(entry(f"thread {t} job {i}")))
                if i % 25 == 0:
                    log.list(limit=5), log.count()  # readers interleave with the other writer
        except Exception as e:  # noqa: BLE001 -- reported by the assert below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in (0, 1)]
    [t.start() for t in threads]
    [t.join(timeout=30) for t in threads]
    assert not errors
    assert log.count() == 300 and len(set(ids[0] + ids[1])) == 300
    assert log.count(q="thread 1 job") == 150
    assert all(log.get(rid)["input_text"] == f"thread 0 job {i}" for i, rid in enumerate(ids[0]))


def test_garbage_file_gives_a_clear_error(tmp_path):
    path = tmp_path / "audit.db"
    path.write_bytes(b"this is not sqlite at all\n" * 100)
    with pytest.raises(AuditLogError) as e:
        AuditLog(path)
    assert str(path) in str(e.value) and "HINT: move the file away" in str(e.value)


def test_foreign_or_newer_sqlite_file_is_refused(tmp_path):
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE invoices (n)")
        db.commit()
    with pytest.raises(AuditLogError, match="not a flashdesk audit log"):
        AuditLog(other)
    newer = tmp_path / "newer.db"
    AuditLog(newer).close()
    with closing(sqlite3.connect(newer)) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(AuditLogError, match="newer flashdesk"):
        AuditLog(newer)


def test_reopen_keeps_records_and_wal_mode(tmp_path):
    path = tmp_path / "audit.db"
    with AuditLog(path) as log:
        rid = log.record(entry(CHINESE))
    t0 = time.monotonic()
    with AuditLog(path) as log:
        assert log.get(rid)["input_text"] == CHINESE
        assert log._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert log._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert time.monotonic() - t0 < 5


def test_a_version_1_log_gains_review_details(tmp_path):
    """A log written before review reasons carried codes opens, keeps its records (with no
    details) and stores details for new ones."""
    from server.stores import audit, sqlite_file

    path = tmp_path / "v1.db"
    old = sqlite_file.open_file(path, "audit log", audit.APPLICATION_ID, {1: audit.MIGRATIONS[1]}, AuditLogError)
    old.execute("INSERT INTO records (id, created_at, status, template, model, input_text, valid, finish_reason, "
                "needs_review, review_reasons, warnings, timings) VALUES ('wo_old', '2026-01-01T00:00:00.000Z', "
                "'needs_review', 'work_order', 'smollm2', 'text', 1, 'stop', 1, '[\"missing x\"]', '[]', '{}')")
    old.close()
    with AuditLog(path) as log:
        assert log.get("wo_old")["review_details"] == [] and log.get("wo_old")["review_reasons"] == ["missing x"]
        details = [{"code": "missing", "field": "x", "params": {}, "message": "missing x"}]
        rid = log.record(entry("new", review_reasons=["missing x"], review_details=details))
        assert log.get(rid)["review_details"] == details
        assert log.get("wo_old")["unavailable"] == {}  # version 3: nothing was unavailable to a local parse
        rid = log.record(entry("remote", unavailable={"field_confidence": "no logprobs"}))
        assert log.get(rid)["unavailable"] == {"field_confidence": "no logprobs"}
        assert log.get("wo_old")["sources"] == {}  # version 4: no copy fields before
        rid = log.record(entry("copied", sources={"customer_name": [[5, 16]]}))
        assert log.get(rid)["sources"] == {"customer_name": [[5, 16]]}
        assert log._db.execute("PRAGMA user_version").fetchone()[0] == max(audit.MIGRATIONS) == 4
