"""Faults under the two SQLite stores (server/stores/conversations.py, server/stores/audit.py), in child processes.

Covers kill -9 of a process writing the chat history (every write it saw return is there after
reopening; the file is intact and takes writes again) and a disk that fills up under either store:
the write is refused with a clear 507 naming the file and the next step (through the real routes
and error table), nothing saved before is lost, the same open store writes again once there is
room, and a store opened on the full disk says "free up space", not "move the file away".
Kill -9 of the audit trail's writer: tests/server/test_audit.py. Power loss is not tested.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from kill_child import kill_9_when
from server.stores.audit import AuditLog, ParseRecord
from server.stores.conversations import ConversationStore

KILL_CHILD = r"""
import sys
from server.stores.conversations import ConversationStore
store = ConversationStore(sys.argv[1])
i = 0
while True:
    if i % 20 == 0:  # a new conversation now and then: a lone INSERT, not a transaction
        cid = store.create(settings={"n": i})["id"]
        print("conversation", cid, i, flush=True)
    m = store.add_message(cid, "user" if i % 2 == 0 else "assistant", f"訊息 {i} " + "漢字" * 300, meta={"i": i})
    print("message", cid, m["id"], m["seq"], i, flush=True)
    if i % 7 == 3:
        store.rename(cid, f"對話 {i}")
        print("title", cid, i, flush=True)
    i += 1
"""


def test_kill_9_during_conversation_writes_loses_no_committed_record(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    # killed mid-loop: most likely inside a write
    argv = [sys.executable, "-c", KILL_CHILD, str(path)]
    seen = [line.split() for line in kill_9_when(argv, lambda lines: len(lines) >= 80, 60)]
    assert path.with_name(path.name + "-wal").stat().st_size > 0  # so reopening runs WAL recovery
    convs = [c for kind, c, *_ in seen if kind == "conversation"]
    messages = [rest for kind, *rest in seen if kind == "message"]
    titles = {c: int(i) for kind, c, i in (s for s in seen if s[0] == "title")}  # the last one printed wins
    with ConversationStore(path) as store:
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        got = {c: store.get(c) for c in convs}
        assert all(got[c] is not None for c in convs), "a conversation reported created is gone"
        for cid, mid, seq, i in messages:
            by_id = {m["id"]: m for m in got[cid]["messages"]}
            assert mid in by_id, f"message {i} ({mid}) was reported committed but is gone"
            m = by_id[mid]
            assert (m["seq"], m["content"], m["meta"]) == (int(seq), f"訊息 {i} " + "漢字" * 300, {"i": int(i)})
        for cid, i in titles.items():  # a rename committed after the last print may have moved it on
            assert int(got[cid]["title"].removeprefix("對話 ")) >= i
        stored = sum(len(c["messages"]) for c in got.values())
        assert len(messages) <= stored <= len(messages) + 1  # at most the one write the kill cut short of its print
        # the reopened store takes writes again, in the order it left off
        last = store.get(convs[-1])
        added = store.add_message(convs[-1], "user", "after the crash")
        assert added["seq"] == len(last["messages"]) + 1
        fresh = store.create("after the crash")
        assert store.list(q="after the crash")[0]["id"] == fresh["id"]
        assert store.get(convs[-1])["messages"][-1]["content"] == "after the crash"


# -- a full disk -------------------------------------------------------------------------------

DISK = 1 << 20  # the small disk, and in the fallback the largest file size
BALLAST = 256 << 10  # a file that fills part of that disk and is deleted to make room again
TEXT = "冷氣不冷，請派員維修。" * 800  # ~24 KB of UTF-8 per write: the disk fills in a few dozen writes

FULL_CHILD = r"""
import json, resource, shutil, sys
from pathlib import Path
from server.http import errors
kind, disk, out, mode, text = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5]
say = lambda *a: print(json.dumps(a, ensure_ascii=False), flush=True)
(disk / "ballast").write_bytes(b"\1" * int(sys.argv[6]))
FSIZE = resource.RLIMIT_FSIZE
if kind == "conversations":  # through the real routes and error table, as the browser UI writes
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from server.stores.conversations import ConversationStore
    from server.http.routes.conversations import router
    name, opener = "conversations.sqlite3", ConversationStore
    app = FastAPI()
    errors.install(app)
    store = app.state.conversations = ConversationStore(disk / name)
    app.include_router(router)
    client = TestClient(app, raise_server_exceptions=False)  # what a client gets, not the exception
    cid = client.post("/v1/conversations", json={"title": "full disk"}).json()["id"]
    say("conversation", cid)

    def write(i):
        r = client.post(f"/v1/conversations/{cid}/messages", json={"role": "user", "content": f"{i} {text}"})
        return r.status_code, r.json()
else:  # a parse's record; the route (server/http/routes/workorders.py) lets the error rise to this same table
    from server.stores.audit import AuditLog, ParseRecord
    name, opener = "workorders.sqlite3", AuditLog
    store = AuditLog(disk / name)

    def write(i):
        try:
            return 201, {"id": store.record(ParseRecord(template="work_order", model="m", input_text=f"{i} {text}",
                                                        output={"n": i}, valid=True, finish_reason="stop",
                                                        needs_review=False))}
        except Exception as e:
            api = errors.from_store(e)  # an error outside the table raises here: the test sees a traceback
            return api.status, api.body()

i = 0
while (answer := write(i))[0] == 201:
    say("saved", i, answer[1]["id"])
    i += 1
    if i == 500:
        sys.exit("the disk never filled up")
say("refused", i, *answer)
say("refused again", i, *write(i))  # the store is not wedged in a half-done transaction
soft, hard = resource.getrlimit(FSIZE)
if mode == "rlimit":
    resource.setrlimit(FSIZE, (0, hard))  # in the fallback, no file may grow at all now
try:
    opener(disk / ("fresh-" + name))
    say("opened fresh")
except Exception as e:
    say("fresh refused", type(e).__name__, str(e))
# Room again: the ballast goes (the small disk), or the size limit goes up (the fallback).
(disk / "ballast").unlink()
resource.setrlimit(FSIZE, (hard, hard))
(out / "full").mkdir()
for suffix in ("", "-wal"):  # the files as the full disk left them; the -shm is rebuilt from the WAL
    shutil.copy(disk / (name + suffix), out / "full" / (name + suffix))
say("after", i, *write(i))  # the same open store writes again
store.close()
(out / "after").mkdir()
for f in disk.glob(name + "*"):
    shutil.copy(f, out / "after" / f.name)
"""


@functools.lru_cache(maxsize=1)
def small_disk_mountable() -> bool:
    """A real small filesystem (tmpfs with size=) mounted in a user + mount namespace needs no
    privileges where the kernel allows unprivileged user namespaces (not on every CI runner)."""
    probe = Path(os.environ.get("TMPDIR", "/tmp"))
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                               f'mount -t tmpfs -o size=64k flashdesk-probe "{probe}"'],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_on_a_full_disk(kind: str, tmp_path: Path) -> tuple[str, list[list], subprocess.CompletedProcess]:
    """Run FULL_CHILD with its store on a disk that fills up. Best: a real tmpfs of DISK bytes, so
    write() fails with ENOSPC exactly as on a full disk and SQLite answers SQLITE_FULL through its
    real write path (WAL frames at commit), and freeing space is deleting a file. Where
    that cannot be mounted: RLIMIT_FSIZE with SIGXFSZ ignored, so write() past DISK bytes of one
    file fails with EFBIG (SQLite: SQLITE_IOERR_WRITE); it is per file, not per disk, and SQLite
    maps only ENOSPC to SQLITE_FULL, which is why the tmpfs comes first. SQLite's own
    max_page_count gives SQLITE_FULL too, but before any write() is tried, so it tests less."""
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    out.mkdir()
    mode = "tmpfs" if small_disk_mountable() else "rlimit"
    cmd = [sys.executable, "-c", FULL_CHILD, kind, str(disk), str(out), mode, TEXT, str(BALLAST)]
    preexec = None
    if mode == "tmpfs":
        cmd = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
               'mount -t tmpfs -o size="$1" flashdesk-full "$2" && shift 2 && exec "$@"', "sh", str(DISK),
               str(disk), *cmd]
    else:
        def preexec():
            resource.setrlimit(resource.RLIMIT_FSIZE, (DISK, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error from write(), not a killed process
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, encoding="utf-8", timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=preexec)
    assert done.returncode == 0, done.stderr[-3000:]
    return mode, [json.loads(line) for line in done.stdout.splitlines()], done


@pytest.mark.parametrize("kind", ["conversations", "audit"])
def test_a_full_disk_is_a_clear_507_and_loses_nothing_saved(kind, tmp_path):
    mode, lines, done = run_on_a_full_disk(kind, tmp_path)
    steps = {line[0]: line[1:] for line in lines}
    saved = [(i, rid) for step, i, rid in (line for line in lines if line[0] == "saved")]
    assert len(saved) >= 3, lines  # it filled up after some writes, not at the first
    name = "conversations.sqlite3" if kind == "conversations" else "workorders.sqlite3"
    what = "chat history" if kind == "conversations" else "audit log"
    for step in ("refused", "refused again"):
        i, status, body = steps[step]
        assert i == len(saved) and status == 507, (step, status, body)
        error = body["error"]
        assert error["code"] == "insufficient_storage" and error["type"] == "server_error"
        disk_words = {"tmpfs": "the disk is full",
                      "rlimit": "the disk refused the write (it may be full, or failing)"}[mode]
        assert error["message"].startswith(f"{disk_words}: the {what} {tmp_path / 'disk' / name} could not be "
                                           "written, so nothing of this request was saved"), error["message"]
        assert "HINT: free up space on that disk" in error["message"]
    assert "Traceback" not in done.stderr  # answered through the error table, not the catch-all 500
    assert "fresh refused" in steps, lines
    fresh, *why = steps["fresh refused"]  # a new file on the full disk cannot even start
    assert fresh == ("AuditLogError" if kind == "audit" else "ConversationStoreError")
    assert "HINT: free up space on that disk" in why[0] and "move the file away" not in why[0], why
    assert steps["after"][1] == 201, steps["after"]  # room again: the same open store writes

    opener = AuditLog if kind == "audit" else ConversationStore
    after_id = steps["after"][2]["id"]
    for snapshot, expect in (("full", saved), ("after", saved + [(len(saved), after_id)])):
        with opener(tmp_path / "out" / snapshot / name) as store:
            assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", snapshot
            if kind == "audit":
                assert store.count() == len(expect), snapshot  # the refused record is not half in
                assert [store.get(rid)["input_text"] for _, rid in expect] == [f"{i} {TEXT}" for i, _ in expect]
            else:
                messages = store.get(steps["conversation"][0])["messages"]
                assert [(m["id"], m["seq"], m["content"]) for m in messages] == \
                    [(rid, n + 1, f"{i} {TEXT}") for n, (i, rid) in enumerate(expect)], snapshot
            if snapshot == "full":  # the copy of a full disk's files takes writes where there is room
                if kind == "audit":
                    rid = store.record(ParseRecord(template="work_order", model="m", input_text="x", valid=True,
                                                   finish_reason="stop", needs_review=False))
                    assert store.get(rid)["input_text"] == "x"
                else:
                    assert store.add_message(steps["conversation"][0], "user", "x")["seq"] == len(expect) + 1
