"""Tests of the chat history: ConversationStore (server/stores/conversations.py) and its routes
(server/http/routes/conversations.py) on a minimal FastAPI app. No model, no engine.

What it is not: a test of the wiring in server/http/app.py (the lead wires the router there).
"""

from __future__ import annotations

import sqlite3

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from server.http import errors
from server.http.routes.conversations import router
from server.stores.conversations import (AUTO_TITLE_CHARS, MAX_CONTENT_BYTES, MAX_SETTINGS_BYTES, ConversationNotFound,
                                  ConversationStore, ConversationStoreError)


@pytest.fixture
def store(tmp_path):
    with ConversationStore(tmp_path / "conversations.sqlite3") as s:
        yield s


# -- store -------------------------------------------------------------------------------------

def test_create_get_rename_settings(store):
    c = store.create(settings={"system_prompt": "你是客服", "temperature": 0.2, "speculative": "auto"})
    assert c["id"].startswith("c_") and len(c["id"]) == 26
    assert c["title"] == "" and c["messages"] == []
    assert c["created_at"].endswith("Z") and c["created_at"] == c["updated_at"]
    assert store.get(c["id"])["settings"]["system_prompt"] == "你是客服"

    renamed = store.rename(c["id"], "  報價單  ")
    assert renamed["title"] == "報價單" and renamed["updated_at"] > c["updated_at"]
    updated = store.update_settings(c["id"], {"max_tokens": 256})
    assert updated["settings"] == {"max_tokens": 256}  # replaced, not merged
    assert store.get("c_nope") is None
    with pytest.raises(ConversationNotFound):
        store.rename("c_nope", "x")
    with pytest.raises(ConversationNotFound):
        store.update_settings("c_nope", {})


def test_ids_sort_by_creation(store):
    ids = [store.create()["id"] for _ in range(5)]
    assert ids == sorted(ids)


def test_messages_seq_meta_and_title_from_first_user_message(store):
    c = store.create()
    store.add_message(c["id"], "system", "Be brief.")
    assert store.get(c["id"])["title"] == ""  # a system message does not name the chat
    long = "請問\n  冷氣   維修" + "很" * 100
    m = store.add_message(c["id"], "user", long)
    assert m["seq"] == 2 and m["role"] == "user" and m["content"] == long and m["meta"] is None
    title = store.get(c["id"])["title"]
    assert title.startswith("請問 冷氣 維修") and len(title) == AUTO_TITLE_CHARS
    meta = {"finish_reason": "stop", "usage": {"completion_tokens": 12}, "speculation": {"accept_rate": 0.8}}
    a = store.add_message(c["id"], "assistant", "好的", meta=meta)
    assert a["seq"] == 3 and a["meta"] == meta
    store.add_message(c["id"], "user", "second question")
    got = store.get(c["id"])
    assert got["title"] == title  # only the first user message sets it
    assert [m["seq"] for m in got["messages"]] == [1, 2, 3, 4]
    assert got["updated_at"] > c["updated_at"]


def test_title_kept_when_already_set(store):
    c = store.create(title="My chat")
    store.add_message(c["id"], "user", "hello")
    assert store.get(c["id"])["title"] == "My chat"


def test_list_orders_by_last_update(store):
    a, b, c = (store.create(title=t)["id"] for t in "abc")
    assert [x["id"] for x in store.list()] == [c, b, a]
    store.add_message(a, "user", "bump")
    listed = store.list()
    assert [x["id"] for x in listed] == [a, c, b]
    assert listed[0]["message_count"] == 1 and "messages" not in listed[0]
    assert [x["id"] for x in store.list(limit=1, offset=1)] == [c]
    with pytest.raises(ValueError):
        store.list(limit=-1)


def test_search_titles_and_contents(store):
    t = store.create(title="冷氣維修報價")["id"]
    m = store.create(title="other")["id"]
    store.add_message(m, "user", "請幫我查詢電梯保養合約")
    pct = store.create(title="sale")["id"]
    store.add_message(pct, "assistant", "50%_off today")
    plain = store.create(title="50 percent xoff")["id"]
    store.add_message(plain, "user", "500 off")

    assert [x["id"] for x in store.list(q="維修")] == [t]
    assert [x["id"] for x in store.list(q="電梯保養")] == [m]
    assert [x["id"] for x in store.list(q="50%_off")] == [pct]  # wildcards taken literally
    assert [x["id"] for x in store.list(q="%")] == [pct]
    assert [x["id"] for x in store.list(q="_")] == [pct]
    assert {x["id"] for x in store.list(q="OFF")} == {pct, plain}  # ASCII case-insensitive
    assert store.list(q="沒有這個") == []


def test_delete_cascades_to_messages(store):
    c = store.create()["id"]
    keep = store.create()["id"]
    store.add_message(c, "user", "x")
    store.add_message(keep, "user", "y")
    store.delete(c)
    assert store.get(c) is None
    with pytest.raises(ConversationNotFound):
        store.delete(c)
    with pytest.raises(ConversationNotFound):
        store.add_message(c, "user", "z")
    n = sqlite3.connect(store.path).execute("SELECT count(*) FROM messages").fetchone()[0]
    assert n == 1
    assert len(store.get(keep)["messages"]) == 1


def test_regenerate_with_delete_messages_after(store):
    c = store.create()["id"]
    store.add_message(c, "user", "q1")
    store.add_message(c, "assistant", "a1")
    store.add_message(c, "user", "q2")
    store.add_message(c, "assistant", "bad answer")
    assert store.delete_messages_after(c, 3) == 1
    assert [m["content"] for m in store.get(c)["messages"]] == ["q1", "a1", "q2"]
    assert store.add_message(c, "assistant", "better answer")["seq"] == 4
    assert store.delete_messages_after(c, 10) == 0
    assert store.delete_messages_after(c, 0) == 4
    with pytest.raises(ValueError):
        store.delete_messages_after(c, -1)
    with pytest.raises(ConversationNotFound):
        store.delete_messages_after("c_nope", 0)


def test_limits_raise_value_error(store):
    c = store.create()["id"]
    with pytest.raises(ValueError, match="settings"):
        store.create(settings={"system_prompt": "x" * MAX_SETTINGS_BYTES})
    with pytest.raises(ValueError, match="settings"):
        store.update_settings(c, {"p": "字" * (MAX_SETTINGS_BYTES // 3)})  # 3 UTF-8 bytes each: bytes count
    with pytest.raises(ValueError):
        store.create(settings=["not", "a", "dict"])
    with pytest.raises(ValueError, match="title"):
        store.create(title="t" * 201)
    with pytest.raises(ValueError, match="content"):
        store.add_message(c, "user", "x" * (MAX_CONTENT_BYTES + 1))
    with pytest.raises(ValueError, match="role"):
        store.add_message(c, "tool", "x")
    store.add_message(c, "user", "x" * MAX_CONTENT_BYTES)  # exactly the limit is fine
    assert store.get(c)["messages"][0]["seq"] == 1


def test_reopen_keeps_everything(tmp_path):
    path = tmp_path / "sub" / "c.sqlite3"
    with ConversationStore(path) as s:
        c = s.create(title="標題", settings={"temperature": 0.7})["id"]
        s.add_message(c, "user", "你好")
        s.add_message(c, "assistant", "您好", meta={"finish_reason": "stop"})
        before = s.get(c)
    with ConversationStore(path) as s:
        assert s.get(c) == before
        assert s.add_message(c, "user", "again")["seq"] == 3


def test_garbage_file_gives_clear_error(tmp_path):
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"this is not a database at all\n" * 200)
    with pytest.raises(ConversationStoreError, match="HINT"):
        ConversationStore(bad)
    other = tmp_path / "other.sqlite3"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(ConversationStoreError, match="not a flashdesk conversations file"):
        ConversationStore(other)


# -- routes ------------------------------------------------------------------------------------

@pytest.fixture
def client(tmp_path):
    app = FastAPI()
    errors.install(app)
    app.state.conversations = ConversationStore(tmp_path / "conversations.sqlite3")
    app.include_router(router)
    with TestClient(app) as c:
        yield c
    app.state.conversations.close()


def test_routes_crud(client):
    r = client.post("/v1/conversations", json={"settings": {"temperature": 0.3}})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]

    r = client.post(f"/v1/conversations/{cid}/messages", json={"role": "user", "content": "冷氣不冷怎麼辦"})
    assert r.status_code == 201 and r.json()["seq"] == 1
    r = client.post(f"/v1/conversations/{cid}/messages",
                    json={"role": "assistant", "content": "請檢查濾網", "meta": {"finish_reason": "stop"}})
    assert r.json()["meta"] == {"finish_reason": "stop"}

    got = client.get(f"/v1/conversations/{cid}").json()
    assert got["title"] == "冷氣不冷怎麼辦" and len(got["messages"]) == 2

    r = client.patch(f"/v1/conversations/{cid}", json={"title": "維修"})
    assert r.status_code == 200 and r.json()["title"] == "維修" and r.json()["settings"] == {"temperature": 0.3}
    r = client.patch(f"/v1/conversations/{cid}", json={"settings": {"max_tokens": 64}})
    assert r.json()["title"] == "維修" and r.json()["settings"] == {"max_tokens": 64}

    other = client.post("/v1/conversations", json={"title": "another"}).json()["id"]
    page = client.get("/v1/conversations", params={"limit": 1}).json()
    assert page["object"] == "list" and [c["id"] for c in page["data"]] == [other] and page["has_more"] is True
    found = client.get("/v1/conversations", params={"q": "濾網"}).json()
    assert [c["id"] for c in found["data"]] == [cid] and found["has_more"] is False

    r = client.delete(f"/v1/conversations/{cid}/messages", params={"after": 1})
    assert r.json()["deleted"] == 1
    assert len(client.get(f"/v1/conversations/{cid}").json()["messages"]) == 1

    r = client.delete(f"/v1/conversations/{cid}")
    assert r.json() == {"id": cid, "object": "conversation.deleted", "deleted": True}
    assert client.get(f"/v1/conversations/{cid}").status_code == 404


def test_routes_unknown_id_is_404(client):
    for method, url, body in [("GET", "/v1/conversations/c_nope", None),
                              ("PATCH", "/v1/conversations/c_nope", {"title": "x"}),
                              ("PATCH", "/v1/conversations/c_nope", {}),
                              ("DELETE", "/v1/conversations/c_nope", None),
                              ("POST", "/v1/conversations/c_nope/messages", {"role": "user", "content": "x"}),
                              ("DELETE", "/v1/conversations/c_nope/messages?after=0", None)]:
        r = client.request(method, url, json=body)
        assert r.status_code == 404, (method, url, r.text)
        assert r.json()["error"]["code"] == "conversation_not_found"


def test_routes_bad_requests_are_400(client):
    cid = client.post("/v1/conversations", json={}).json()["id"]
    r = client.post("/v1/conversations", json={"title": "x", "colour": "red"})
    assert r.status_code == 400 and "colour" in r.json()["error"]["message"]
    r = client.post(f"/v1/conversations/{cid}/messages", json={"role": "tool", "content": "x"})
    assert r.status_code == 400
    r = client.post("/v1/conversations", json={"settings": {"p": "x" * MAX_SETTINGS_BYTES}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    assert client.get("/v1/conversations", params={"limit": 201}).status_code == 400
    assert client.delete(f"/v1/conversations/{cid}/messages").status_code == 400  # after= is required


def test_routes_store_unavailable_is_503():
    app = FastAPI()
    errors.install(app)
    app.state.conversations = None
    app.include_router(router)
    r = TestClient(app).get("/v1/conversations")
    assert r.status_code == 503 and r.json()["error"]["code"] == "conversations_unavailable"
