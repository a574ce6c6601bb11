"""The first chat of a fresh install waits for no measurement (issues 16, 42).

A fresh install has no decode costs beside its model. The server is ready as soon as the model
is loaded; the chat that comes first is answered at once and speculates as soon as its own
first decodes have timed c(1) (the chooser learns from every decode); the idle fill-in times
the rest while nothing runs; the same answer comes out either way, and what was learned is kept
beside the model.
"""

from __future__ import annotations

import httpx
import openai

from conftest import ServerProcess, linked_home

CHAT = [{"role": "user", "content": "Repeat exactly: 300 tote bags, natural canvas, logo front, due Monday."}]


def health(srv) -> dict:
    return httpx.get(f"{srv.base}/health", timeout=5).json()


def test_the_first_chat_of_a_fresh_install_decodes_at_once(tmp_path, store):
    home = linked_home(tmp_path / "home", store)
    folder = home / "models" / "smollm2"
    for kept in folder.glob("verify-cost-*.json"):
        kept.unlink()  # as after `flashdesk pull`: nothing measured on this machine yet
    srv = ServerProcess(home)
    try:
        srv.wait_ready(measured=False)  # the model is loaded: what a user waits for
        h = health(srv)
        assert h["speculation"]["cost_curve"] == "learning" and "dflash" in h["speculation"]["drafters"]

        client = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="unused", max_retries=0, timeout=120)
        kw = dict(model="smollm2", messages=CHAT, temperature=0, max_tokens=32)
        first = client.chat.completions.create(**kw)
        assert first.choices[0].message.content
        assert first.usage.speculation["mode"] in ("dflash", "lookup")  # it learns as it goes

        srv.wait_ready()  # and now the fill-in is done too
        assert list(folder.glob("verify-cost-*.json")), "the learned costs are kept beside the model"
        second = client.chat.completions.create(**kw)
        assert second.choices[0].message.content == first.choices[0].message.content
        assert second.usage.speculation["mode"] in ("dflash", "lookup")
    finally:
        srv.stop()

