"""`flashdesk pull` from a Hugging Face endpoint, against the local stand-in Hub (tests/hub_standin.py)
with the real huggingface_hub client: fetch, verify and pair a target with its DFlash 2 or v1 draft;
resume after a kill mid-file and after a dropped connection; a wrong hash, a full disk, 401/403/404,
a dead upstream and a cancel each refused with nothing half-installed; a user catalog entry; and
speculation through the pulled pair, served the way `flashdesk serve` loads it, staying lossless.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hub_models import catalog_entry, hub_file, write_draft, write_target
from hostile_drafts import write_hostile
from hub_standin import HubStandIn, point_hub_clients_at

from conftest import ROOT
from engine import Completion, SamplingParams
from engine.models import hub
from engine.errors import Cancelled, DownloadError, HubAccessDenied, InvalidRequest, NotEnoughDisk
from engine.speculative.params import SpecParams
from engine.models.store import ModelStore, no_progress
from engine.models.pull import pull

REPO, DRAFT_REPO, GATED = "tiny-org/Tiny-GGUF", "tiny-org/Tiny-DFlash2-GGUF", "gated-org/Tiny-GGUF"
BIG = "tiny-org/Tiny-F32-GGUF"  # a 12.6 MB target: a transfer of several pieces (hub.CHUNK), killed in the middle
PIECE = 10 * hub.CHUNK  # the transfer writes whole pieces, so a resume starts at a multiple of hub.CHUNK
TOKEN = "hf_right_token"


@pytest.fixture(scope="module")
def files(tmp_path_factory, model_path):
    d = tmp_path_factory.mktemp("hubfiles")
    target = write_target(d / "Tiny-Q8_0.gguf", model_path)
    return {"target": target, "big": write_target(d / "Tiny-F32.gguf", model_path, embd_dtype=np.float32),
            "v2": write_draft(d / "Tiny-DFlash2-Q4_K_M.gguf", target, "dflash2"),
            "v1": write_draft(d / "dflash-Tiny-Q8_0.gguf", target, "dflash1"),
            "other": write_draft(d / "Other-DFlash2.gguf", Path(model_path), "dflash2"),  # SmolLM2's, not Tiny's
            "hostile": write_hostile(d / "Tiny-DFlash2-Q4_K_M.gguf", d / "Evil-DFlash2.gguf", "overlong_taps")}


@pytest.fixture(scope="module")
def standin(files):
    with HubStandIn() as h:
        rev = h.add_repo(REPO, {"Tiny-Q8_0.gguf": files["target"], "dflash-Tiny-Q8_0.gguf": files["v1"],
                                "README.md": b"# tiny\n"})
        drev = h.add_repo(DRAFT_REPO, {"Tiny-DFlash2-Q4_K_M.gguf": files["v2"], "Evil-DFlash2.gguf": files["hostile"]})
        grev = h.add_repo(GATED, {"Tiny-Q8_0.gguf": files["target"]}, token=TOKEN)
        brev = h.add_repo(BIG, {"Tiny-F32.gguf": files["big"], "Other-DFlash2.gguf": files["other"]})
        h.revs = {REPO: rev, DRAFT_REPO: drev, GATED: grev, BIG: brev}
        yield h


@pytest.fixture
def hub_env(standin, monkeypatch, tmp_path):
    """This test's own endpoint, HF home and no token: nothing of the user's Hugging Face setup."""
    standin.throttle(None)
    point_hub_clients_at(standin.url, monkeypatch, tmp_path / "hf-home")
    return standin


def target_pin(standin, files, repo=REPO, **override):
    return hub_file(repo, standin.revs.get(repo, "a" * 40), files["big" if repo == BIG else "target"]) | override


def draft_pin(standin, files, kind):
    if kind == "dflash2":
        return hub_file(DRAFT_REPO, standin.revs[DRAFT_REPO], files["v2"])
    return hub_file(REPO, standin.revs[REPO], files["v1"], license="MIT")


def fetched(standin, since: int, file: str) -> list:
    return [r for r in standin.requests[since:] if r.method == "GET" and r.path.endswith(file) or
            r.method == "GET" and r.path.startswith("/_lfs/") and file in r.path]


def installed(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "models").iterdir()) if (home / "models").is_dir() else []


@pytest.mark.parametrize("kind", ["dflash2", "dflash1"])
def test_pull_fetches_verifies_and_pairs_the_draft(hub_env, files, tmp_path, kind):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files), draft_pin(hub_env, files, kind), kind=kind,
                  chat_template={"enable_thinking": False})
    store = ModelStore(home)
    m = pull(store, "tiny", progress=no_progress)
    assert m.sha256 == target_pin(hub_env, files)["sha256"] and m.source == "catalog:tiny"
    assert m.draft == "draft.gguf" and Path(m.draft_path).read_bytes() == files[{"dflash2": "v2",
                                                                                "dflash1": "v1"}[kind]].read_bytes()
    assert m.options == {"chat_template": {"enable_thinking": False}, "draft_kind": kind,
                         "n_draft": {"cuda": 3, "metal": 3, "cpu": 3}}
    assert not (home / "downloads" / "tiny").exists()  # the download folder goes once both are in
    n = len(hub_env.requests)
    assert pull(store, "tiny", progress=no_progress).sha256 == m.sha256  # idempotent: nothing fetched again
    assert not [r for r in hub_env.requests[n:] if r.method == "GET"]


def test_a_pull_keeps_the_users_own_draft_choice(hub_env, files, tmp_path):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files), draft_pin(hub_env, files, "dflash2"))
    store = ModelStore(home)
    pull(store, "tiny", progress=no_progress)
    store.unpair("tiny")
    n = len(hub_env.requests)
    assert pull(store, "tiny", progress=no_progress).draft == ""  # unpaired stays unpaired
    assert not [r for r in hub_env.requests[n:] if r.method == "GET"]


def test_a_draft_that_does_not_fit_leaves_the_model_installed_and_says_so(hub_env, files, tmp_path):
    home = tmp_path / "home"
    other = hub_file(BIG, hub_env.revs[BIG], files["other"])
    catalog_entry(home, "tiny", target_pin(hub_env, files), other)
    with pytest.raises(DownloadError, match="tiny is installed and runs without speculation, but its draft was "
                                            "refused: .*n_embd"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    m = ModelStore(home).get("tiny")
    assert m.draft == "" and not (home / "downloads" / "tiny").exists()


def test_a_hostile_draft_is_refused_at_pull_and_the_model_stays(hub_env, files, tmp_path):
    """The disclosed shape (tests/hostile_drafts.py: a million target layers) as a catalog entry's draft:
    downloaded and verified against its pin, then refused by our reading before llama.cpp sees it."""
    home = tmp_path / "home"
    evil = hub_file(DRAFT_REPO, hub_env.revs[DRAFT_REPO], files["hostile"])
    catalog_entry(home, "tiny", target_pin(hub_env, files), evil)
    with pytest.raises(DownloadError, match="its draft was refused: .*1048576 target layers; a draft taps 1 to 64"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    m = ModelStore(home).get("tiny")
    assert m.draft == "" and not (home / "downloads" / "tiny").exists()
    assert sorted(p.name for p in (home / "models" / "tiny").iterdir()) == ["Tiny-Q8_0.gguf", "model.json"]


def test_the_pulled_pair_serves_losslessly(hub_env, files, tmp_path):
    """Greedy output through the pulled pair, loaded as `flashdesk serve` loads it, equals plain decoding."""
    from server.runtime.served import load_engine
    from server.settings import Settings

    home = tmp_path / "home"
    for name, kind in (("tiny2", "dflash2"), ("tiny1", "dflash1")):
        catalog_entry(home, name, target_pin(hub_env, files), draft_pin(hub_env, files, kind), kind=kind)
        pull(ModelStore(home), name, progress=no_progress)
    prompts = ["The workshop order says", "Dear customer, your print job", "1, 2, 3,"]
    greedy = SamplingParams(temperature=0)
    for name in ("tiny2", "tiny1"):
        entry, eng = load_engine(Settings(home=str(home), model=name, ctx=512, parallel=2))
        try:
            assert eng.speculation.draft_error is None and "dflash" in eng.drafters
            plain = [eng.complete(p, sampling=greedy, max_tokens=24, speculative=SpecParams(mode="off")).tokens
                     for p in prompts]
            hs = [eng.generate(p, sampling=greedy, max_tokens=24, speculative=SpecParams(mode="dflash", block=4))
                  for p in prompts]
            spec = [Completion.collect(iter(h)) for h in hs]
        finally:
            eng.close()
        assert [c.tokens for c in spec] == plain, name
        assert all(c.usage.speculation for c in spec), "the draft must actually have drafted"


def test_resume_after_a_killed_pull(hub_env, files, tmp_path):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files, repo=BIG))
    pin = ModelStore(home).catalog().get("tiny").target
    hub_env.throttle(pin.size // 8)  # ~8 s for the file: time to kill it after its first piece
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "server.cli", "--home", str(home), "pull", "tiny"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    folder = home / "downloads" / "tiny"
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None:
        part = hub.partial_path(folder, pin)
        if part is not None and part.stat().st_size >= PIECE:
            break
        time.sleep(0.05)
    else:
        p.kill()
        pytest.fail(f"the download never got a piece written: {p.stderr.read().decode()[-500:]}")
    p.send_signal(signal.SIGKILL)
    p.wait(10)
    assert not (home / "models" / "tiny").exists()  # killed: nothing installed
    done = hub.partial_path(folder, pin).stat().st_size
    hub_env.throttle(None)
    n = len(hub_env.requests)
    m = pull(ModelStore(home), "tiny", progress=no_progress)
    assert m.sha256 == pin.sha256 and not folder.exists()
    ranges = [r.range for r in hub_env.requests[n:] if r.method == "GET" and r.range]
    assert ranges == [f"bytes={done}-"], ranges  # continued where the killed process stopped, not restarted


def test_a_broken_connection_says_pull_again_and_then_resumes(hub_env, files, tmp_path):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files, repo=BIG))
    hub_env.fault(drop_after=PIECE + 500_000)  # the link breaks after the first piece is written...
    hub_env.fault(status=503, path="/_lfs/", times=1)  # ...and the client's own retry meets a dead upstream
    with pytest.raises(DownloadError, match="503.*continues where it stopped"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    assert not (home / "models" / "tiny").exists()
    n = len(hub_env.requests)
    assert pull(ModelStore(home), "tiny", progress=no_progress).draft == ""
    assert [r.range for r in hub_env.requests[n:] if r.method == "GET" and r.range] == [f"bytes={PIECE}-"]


def test_a_wrong_pin_is_refused_before_downloading(hub_env, files, tmp_path):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files, sha256="0" * 64))
    n = len(hub_env.requests)
    with pytest.raises(DownloadError, match="catalog pins size .* nothing was downloaded"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    assert installed(home) == [] and not fetched(hub_env, n, "Tiny-Q8_0.gguf")


def test_a_file_that_does_not_hash_to_its_pin_is_not_installed(hub_env, files, tmp_path, monkeypatch):
    """A mirror whose tree agrees with the pin but whose bytes do not: the sha256 after the download decides."""
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files, sha256="1" * 64))
    monkeypatch.setattr(hub, "check_pin", lambda f, token=None: None)
    with pytest.raises(DownloadError, match="not have the pinned sha256; it was deleted and nothing was installed"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    assert installed(home) == []
    assert not list((home / "downloads").rglob("*.gguf")) if (home / "downloads").exists() else True


def test_too_little_free_disk_is_refused_before_starting(hub_env, files, tmp_path, monkeypatch):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files), draft_pin(hub_env, files, "dflash2"))
    real = hub.shutil.disk_usage
    monkeypatch.setattr(hub.shutil, "disk_usage", lambda p: real(p)._replace(free=50 << 20))
    n = len(hub_env.requests)
    with pytest.raises(NotEnoughDisk, match="needs 0.0 GB .* free at") as info:
        pull(ModelStore(home), "tiny", progress=no_progress)
    assert "FLASHDESK_HOME" in info.value.message
    assert hub_env.requests[n:] == [] and installed(home) == []


def _file_size_limit(limit: int):
    """For a child process: files it writes stop growing at `limit` bytes (EFBIG, as on a full disk)."""
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error from write(), not a killed process
    return apply


def test_a_disk_that_fills_up_mid_download_says_so_and_the_next_pull_continues(hub_env, files, tmp_path):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files, repo=BIG))
    pin = ModelStore(home).catalog().get("tiny").target
    out = subprocess.run([sys.executable, "-m", "server.cli", "--home", str(home), "pull", "tiny"],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
                         preexec_fn=_file_size_limit(5 * hub.CHUNK))
    assert out.returncode == 2 and "the disk filled up while downloading Tiny-F32.gguf" in out.stderr, out.stderr
    assert "free up space" in out.stderr and not (home / "models" / "tiny").exists()
    kept = hub.partial_path(home / "downloads" / "tiny", pin).stat().st_size
    assert kept == 5 * hub.CHUNK  # what fitted is kept...
    n = len(hub_env.requests)
    assert pull(ModelStore(home), "tiny", progress=no_progress).sha256 == pin.sha256  # ...and continued from
    assert [r.range for r in hub_env.requests[n:] if r.method == "GET" and r.range] == [f"bytes={kept}-"]


def test_gated_and_missing_repositories_say_what_to_do(hub_env, files, tmp_path, monkeypatch):
    home = tmp_path / "home"
    catalog_entry(home, "gated", target_pin(hub_env, files, repo=GATED))
    store = ModelStore(home)
    with pytest.raises(HubAccessDenied, match=r"needs a login \(401\).*HF_TOKEN"):
        pull(store, "gated", progress=no_progress)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(HubAccessDenied, match=r"\((401|403)\)"):
        pull(store, "gated", progress=no_progress)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert pull(store, "gated", progress=no_progress).name == "gated"

    catalog_entry(home, "gone", target_pin(hub_env, files, repo="nobody/Nothing-GGUF"))
    with pytest.raises(DownloadError, match="was not found"):
        pull(store, "gone", progress=no_progress)
    catalog_entry(home, "nofile", target_pin(hub_env, files, file="Tiny-Q2_K.gguf"))
    with pytest.raises(DownloadError, match="has no file Tiny-Q2_K.gguf"):
        pull(store, "nofile", progress=no_progress)
    assert installed(home) == ["gated"]


def test_a_dead_upstream_is_an_error_not_a_hang(hub_env, files, tmp_path):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files))
    hub_env.fault(status=503, path="/_lfs/")  # the file server (the API's 5xx get retried with backoff for ~20 s)
    with pytest.raises(DownloadError, match="503"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    assert installed(home) == []


def test_an_unreachable_endpoint_says_so(files, tmp_path, monkeypatch, hub_env):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")  # nothing listens on port 1
    with pytest.raises(DownloadError, match="cannot reach http://127.0.0.1:1 .*HF_ENDPOINT"):
        pull(ModelStore(home), "tiny", progress=no_progress)


def test_offline_mode_says_so(hub_env, files, tmp_path, monkeypatch):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="offline mode is on"):
        pull(ModelStore(home), "tiny", progress=no_progress)


def test_cancel_stops_the_download_and_leaves_nothing(hub_env, files, tmp_path):
    home = tmp_path / "home"
    catalog_entry(home, "tiny", target_pin(hub_env, files, repo=BIG), draft_pin(hub_env, files, "dflash1"))
    hub_env.throttle(files["big"].stat().st_size // 3)  # ~4 s for the file: the cancel comes in the middle
    cancel, seen = threading.Event(), []

    def progress(desc, total):
        class Bar:
            def update(self, n):
                seen.append(n)
                if sum(seen) > total // 3:
                    cancel.set()

            def close(self):
                pass
        return Bar()

    with pytest.raises(Cancelled):
        pull(ModelStore(home), "tiny", progress=progress, cancel=cancel)
    assert installed(home) == [] and not (home / "downloads" / "tiny").exists()


def test_user_catalog_entries_and_their_problems(hub_env, files, tmp_path):
    home = tmp_path / "home"
    catalog_entry(home, "mine", target_pin(hub_env, files))
    (home / "catalog" / "broken.json").write_text('{"models": [{"name": "x"}]}')
    bad_name = target_pin(hub_env, files, file="dflash-Tiny-Q8_0.gguf")
    catalog_entry(home, "draftlike", bad_name)
    cat = ModelStore(home).catalog()
    assert "mine" in cat and "smollm2" in cat and cat.get("mine").source == "user:mine.json"
    problems = dict(cat.problems)
    assert "title" in problems[str(home / "catalog" / "broken.json")]
    assert "named like a draft" in problems[str(home / "catalog" / "draftlike.json")]


def test_a_draft_file_is_never_a_chat_model(files, tmp_path):
    store = ModelStore(tmp_path / "home")
    with pytest.raises(InvalidRequest, match="is a speculative draft, not a chat model"):
        store.import_file(files["v1"])
    with pytest.raises(InvalidRequest, match="is a speculative draft"):
        store.resolve(str(files["v2"]))
