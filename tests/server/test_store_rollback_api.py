"""GET /v1/store/models says, per installed model, whether speculation can roll rejected tokens
back on it (`rollback`, expected from the file: gguf_tools/rollback.py), and a file replaced in
place is read again. In-process server on a home of its own; no model is loaded (the listing reads
metadata only), so the files need not be loadable."""

from __future__ import annotations

import shutil

import httpx
import pytest

from conftest import ThreadServer
from engine.models.store import ModelStore, no_progress
from server.http.app import create_app
from server.settings import Settings
from tiny_gguf import write_arch_only, write_valid


def no_model(settings):
    raise RuntimeError("this test loads no model")


@pytest.fixture
def home(tmp_path):
    store = ModelStore(tmp_path / "home")
    for name, write in (("plain", write_valid), ("next", lambda p: write_arch_only(p, "qwen3next")),
                        ("window", lambda p: write_arch_only(p, "gemma4", {"attention.sliding_window": 512}))):
        src = tmp_path / f"{name}.gguf"
        write(src)
        store.install(name, lambda dst, src=src: shutil.copy(src, dst), f"{name}.gguf", f"import:{src}",
                      progress=no_progress)
    return store.home


def listed(base: str) -> dict[str, dict]:
    r = httpx.get(f"{base}/v1/store/models", timeout=30)
    assert r.status_code == 200, r.text
    return {m["name"]: m for m in r.json()["data"]}


def test_each_installed_model_carries_its_rollback_verdict(home):
    srv = ThreadServer(create_app(Settings(home=str(home)), no_model))
    try:
        models = listed(srv.base)
        assert models["plain"]["rollback"]["memory"] == "attention"
        assert models["plain"]["rollback"]["speculation"] == "exact"
        assert models["window"]["rollback"]["memory"] == "sliding-window"
        nxt = models["next"]["rollback"]
        assert nxt["memory"] == "recurrent" and nxt["speculation"] == "refused"
        assert "qwen3next" in nxt["why"] and "HINT:" in nxt["why"]

        # the same file name, another architecture: the listing reads the new file, not its cache
        path = home / "models" / "plain" / "plain.gguf"
        write_arch_only(path.with_suffix(".new"), "mamba")
        path.with_suffix(".new").replace(path)
        assert listed(srv.base)["plain"]["rollback"]["speculation"] == "refused"

        path.unlink()  # a file gone: the model leaves the listing, which still answers
        assert "plain" not in listed(srv.base)
    finally:
        srv.stop()
