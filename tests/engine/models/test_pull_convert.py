"""`flashdesk pull` of a catalog draft published as a safetensors checkpoint, against the Hub stand-in
(tests/hub_standin.py) with the real huggingface_hub client: tiny checkpoints of each layout (z-lab
DFlash 2, z-lab DFlash v1, vLLM speculators dflash2) are fetched, verified, converted, checked and
paired, and the pair then serves losslessly; a file that does not hash to its pin is refused before any
conversion; a conversion that fails half-way, is cancelled or was killed leaves the model installed and
unpaired with nothing half-written, and the next pull converts cleanly; a checkpoint the converter
refuses, and a converted draft with hostile bounds, leave the model installed and unpaired with the reason.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from hostile_drafts import write_hostile
from hub_models import N_FF, N_HEAD, catalog_entry, hub_file, write_target
from hub_standin import HubStandIn, point_hub_clients_at

import gguf_tools.dflash.convert as gconvert
from engine import Completion, SamplingParams
from engine.errors import Cancelled, DownloadError
from engine.advisor import hardware
from engine.models import hub
from engine.models.draft_convert import DRAFT_DTYPE
from engine.models.pull import pull
from engine.models.store import ModelStore, no_progress
from engine.speculative.params import SpecParams
from gguf_tools.dflash import DraftConfig
from tests.gguf_tools.tiny_drafts import write_draft_checkpoint

TARGET = "tiny-org/Tiny-GGUF"
LAYOUTS = {"zlab2": ("tiny-org/Tiny-DFlash2", "z-lab", "dflash2"),
           "zlab1": ("tiny-org/Tiny-DFlash", "z-lab", "dflash1"),
           "spec2": ("tiny-org/Tiny-speculator.dflash2", "speculators", "dflash2")}
BAD = "tiny-org/Tiny-speculator.anchor"  # sample_from_anchor: refused by the converter


@pytest.fixture(scope="module")
def files(tmp_path_factory, model_path):
    d = tmp_path_factory.mktemp("ckpts")
    target = write_target(d / "Tiny-Q8_0.gguf", model_path)
    cfg = DraftConfig.for_target(target, target_layers=(1,), block_size=4, n_layer=1, n_head=N_HEAD,
                                 n_head_kv=N_HEAD, n_ff=N_FF, selector_top_k=4, selector_rank=8)
    out = {"target": target}
    for key, (_, layout, kind) in LAYOUTS.items():
        out[key] = write_draft_checkpoint(d / key, replace(cfg, kind=kind), layout, seed=7)
    bad = write_draft_checkpoint(d / "bad", cfg, "speculators", seed=7)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(config | {"sample_from_anchor": True}))
    out["bad"] = bad
    return out


@pytest.fixture(scope="module")
def standin(files):
    with HubStandIn() as h:
        h.revs = {TARGET: h.add_repo(TARGET, {"Tiny-Q8_0.gguf": files["target"]})}
        for key, repo in [(k, v[0]) for k, v in LAYOUTS.items()] + [("bad", BAD)]:
            h.revs[repo] = h.add_repo(repo, {"config.json": files[key] / "config.json",
                                             "model.safetensors": files[key] / "model.safetensors",
                                             "README.md": b"# a tiny draft\n"})
        yield h


@pytest.fixture
def hub_env(standin, monkeypatch, tmp_path):
    standin.throttle(None)
    point_hub_clients_at(standin.url, monkeypatch, tmp_path / "hf-home")
    return standin


def entry(home: Path, name: str, standin, files, key: str, by_commit: str | None = None, **pin_override) -> None:
    """A user catalog entry: the tiny target and the checkpoint `key` as its draft; `by_commit`, the
    checkpoint pinned by that commit alone."""
    repo, kind = (BAD, "dflash2") if key == "bad" else (LAYOUTS[key][0], LAYOUTS[key][2])
    path = catalog_entry(home, name, hub_file(TARGET, standin.revs[TARGET], files["target"]))
    data = json.loads(path.read_text())
    pins = [{k: v for k, v in hub_file(repo, standin.revs[repo], files[key] / f).items()
             if k in ("file", "size", "sha256")} for f in ("config.json", "model.safetensors")]
    pins[1] |= pin_override
    data["models"][0]["draft"] = {"kind": kind, "block_size": 4, "n_draft": {"cuda": 3, "metal": 3, "cpu": 3},
                                  "checkpoint": {"repo": repo, "revision": standin.revs[repo], "files": pins,
                                                 "license": "MIT"}}
    if by_commit is not None:
        data["models"][0]["draft"]["checkpoint"] = {"repo": repo, "revision": by_commit, "license": "MIT",
                                                    "size_estimate": 1 << 20}
    path.write_text(json.dumps(data))


def folder_of(home: Path, name: str) -> list[str]:
    return sorted(p.name for p in (home / "models" / name).iterdir())


@pytest.mark.parametrize("key", list(LAYOUTS))
def test_each_layout_is_fetched_verified_converted_and_paired(hub_env, files, tmp_path, key):
    home = tmp_path / "home"
    entry(home, "tiny", hub_env, files, key)
    store = ModelStore(home)
    m = pull(store, "tiny", progress=no_progress)
    assert m.draft == "draft.gguf" and m.options["draft_kind"] == LAYOUTS[key][2]
    man = store.manifest(Path(m.path).parent)
    assert man["draft_kind"] == LAYOUTS[key][2] and man["draft_source"].startswith("hub-checkpoint:")
    assert man["draft_converted_from"] | {"files": None, "sizes": None} == {
        "repo": LAYOUTS[key][0], "revision": hub_env.revs[LAYOUTS[key][0]], "layout": LAYOUTS[key][1],
        "class": {"dflash2": "DFlash2DraftModel", "dflash1": "DFlashDraftModel"}[LAYOUTS[key][2]],
        # this machine has no graphics card: the pull converts to q8_0 (draft_convert.DRAFT_DTYPE)
        "dtype": DRAFT_DTYPE.get(hardware.backend(), "f32"), "pinned": "files", "files": None, "sizes": None}
    assert folder_of(home, "tiny") == ["Tiny-Q8_0.gguf", "draft.gguf", "model.json"]
    assert not (home / "downloads" / "tiny").exists()
    n = len(hub_env.requests)
    assert pull(store, "tiny", progress=no_progress).draft == "draft.gguf"  # idempotent: nothing fetched again
    assert not [r for r in hub_env.requests[n:] if r.method == "GET"]


def test_the_converted_pairs_serve_losslessly(hub_env, files, tmp_path):
    """Greedy output through each converted pair, loaded as `flashdesk serve` loads it, equals plain decoding."""
    from server.runtime.served import load_engine
    from server.settings import Settings

    home = tmp_path / "home"
    for key in LAYOUTS:
        entry(home, key, hub_env, files, key)
        pull(ModelStore(home), key, progress=no_progress)
    prompts = ["The workshop order says", "1, 2, 3,"]
    greedy = SamplingParams(temperature=0)
    for key in LAYOUTS:
        _, eng = load_engine(Settings(home=str(home), model=key, ctx=512, parallel=2))
        try:
            assert eng.speculation.draft_error is None and "dflash" in eng.drafters
            plain = [eng.complete(p, sampling=greedy, max_tokens=16, speculative=SpecParams(mode="off")).tokens
                     for p in prompts]
            spec = [Completion.collect(iter(eng.generate(p, sampling=greedy, max_tokens=16,
                                                         speculative=SpecParams(mode="dflash", block=4))))
                    for p in prompts]
        finally:
            eng.close()
        assert [c.tokens for c in spec] == plain, key
        assert all(c.usage.speculation for c in spec), "the draft must actually have drafted"


def test_a_checkpoint_pinned_by_commit_alone_is_read_from_the_hubs_tree_verified_and_recorded(hub_env, files,
                                                                                               tmp_path):
    """Issue 53, item 1: the catalog names the repository and commit only; the pull lists the commit's
    tree for config.json and the safetensors with their sizes and hashes, checks the bytes against
    them, converts, pairs, and records what it checked in the installed manifest."""
    home = tmp_path / "home"
    repo = LAYOUTS["zlab2"][0]
    entry(home, "tiny", hub_env, files, "zlab2", by_commit=hub_env.revs[repo])
    store = ModelStore(home)
    m = pull(store, "tiny", progress=no_progress)
    assert m.draft == "draft.gguf"
    made = store.manifest(Path(m.path).parent)["draft_converted_from"]
    on_disk = {f: files["zlab2"] / f for f in ("config.json", "model.safetensors")}
    assert made["pinned"] == "commit" and made["revision"] == hub_env.revs[repo]
    assert made["files"] == {f: hashlib.sha256(p.read_bytes()).hexdigest() for f, p in on_disk.items()}
    assert made["sizes"] == {f: p.stat().st_size for f, p in on_disk.items()}
    n = len(hub_env.requests)
    assert pull(store, "tiny", progress=no_progress).draft == "draft.gguf"  # idempotent, by the commit's tag
    assert not hub_env.requests[n:]


@pytest.mark.parametrize("commit, why", [("f" * 40, "has no commit ffffffffffff"),
                                         ("target", "holds no draft checkpoint: a config.json and "
                                                    r"\*.safetensors at its top were expected, and it has README.md")])
def test_a_commit_that_is_gone_or_holds_no_checkpoint_leaves_the_target_installed_unpaired(hub_env, files, tmp_path,
                                                                                          commit, why):
    home = tmp_path / "home"
    repo = LAYOUTS["zlab2"][0]
    if commit == "target":  # a commit of the draft's repository with only a README in it
        commit = hub_env.add_repo(repo, {"config.json": None, "model.safetensors": None})
    entry(home, "tiny", hub_env, files, "zlab2", by_commit=commit)
    with pytest.raises(DownloadError, match=f"tiny is installed and runs without speculation, but its draft was "
                                            f"refused: .*{why}"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    assert ModelStore(home).get("tiny").draft == "" and folder_of(home, "tiny") == ["Tiny-Q8_0.gguf", "model.json"]
    assert not (home / "downloads" / "tiny").exists()


def test_a_file_kept_in_git_is_checked_by_its_blob_id(tmp_path):
    """The Hub's tree gives no sha256 for a small file it keeps in git (config.json): its git blob id,
    which the download must match."""
    from engine.models.catalog import HubFile
    from engine.models.pull import _verify_download

    config = tmp_path / "config.json"
    config.write_bytes(b'{"a": 1}\n')
    blob = hashlib.sha1(b"blob %d\0" % config.stat().st_size + config.read_bytes()).hexdigest()
    pin = HubFile("o/r", "a" * 40, "config.json", config.stat().st_size, None, "MIT", blob)
    assert _verify_download(config, pin, tmp_path, no_progress) == hashlib.sha256(config.read_bytes()).hexdigest()
    config.write_bytes(b'{"a": 2}\n')  # the same size, other bytes
    with pytest.raises(DownloadError, match="config.json from o/r does not have the pinned"):
        _verify_download(config, pin, tmp_path, no_progress)
    assert not config.exists()  # refused and deleted


def test_a_checkpoint_that_does_not_hash_to_its_pin_is_never_converted(hub_env, files, tmp_path, monkeypatch):
    home = tmp_path / "home"
    entry(home, "tiny", hub_env, files, "spec2", sha256="1" * 64)
    monkeypatch.setattr(hub, "check_pin", lambda f, token=None: None)  # a mirror whose tree agrees with the pin
    calls = []
    monkeypatch.setattr(gconvert, "convert_draft", lambda *a, **k: calls.append(a))
    with pytest.raises(DownloadError, match="model.safetensors from .* not have the pinned sha256"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    assert calls == [] and not (home / "models" / "tiny").exists()


def test_a_conversion_that_fails_half_way_leaves_nothing_and_the_next_pull_converts(hub_env, files, tmp_path,
                                                                                   monkeypatch):
    home = tmp_path / "home"
    entry(home, "tiny", hub_env, files, "spec2")

    def dies(path, *a, **k):  # the writer stops after part of the file, as a crash or full disk would
        Path(path).write_bytes(b"GGUF" + b"\0" * 1000)
        raise RuntimeError("the writer died")

    monkeypatch.setattr(gconvert, "write_dflash_draft", dies)
    with pytest.raises(RuntimeError, match="the writer died"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    m = ModelStore(home).get("tiny")
    assert m.draft == "" and folder_of(home, "tiny") == ["Tiny-Q8_0.gguf", "model.json"]
    left = home / "downloads" / "tiny"
    assert sorted(p.name for p in left.iterdir()) == ["config.json", "model.safetensors"]  # verified inputs only
    monkeypatch.undo()
    point_hub_clients_at(hub_env.url, monkeypatch, tmp_path / "hf-home")
    n = len(hub_env.requests)
    assert pull(ModelStore(home), "tiny", progress=no_progress).draft == "draft.gguf"
    assert not [r for r in hub_env.requests[n:] if r.method == "GET" and r.path.endswith(".safetensors")]
    assert not left.exists()


def test_a_cancelled_or_killed_conversion_leaves_nothing_and_the_next_pull_converts(hub_env, files, tmp_path):
    home = tmp_path / "home"
    entry(home, "tiny", hub_env, files, "zlab2")
    cancel = threading.Event()

    def progress(desc, total):
        class Bar:
            def update(self, n):
                if desc.startswith("convert"):
                    cancel.set()  # the user presses cancel while the draft converts

            def close(self):
                pass
        return Bar()

    with pytest.raises(Cancelled):
        pull(ModelStore(home), "tiny", progress=progress, cancel=cancel)
    assert ModelStore(home).get("tiny").draft == "" and folder_of(home, "tiny") == ["Tiny-Q8_0.gguf", "model.json"]
    assert not (home / "downloads" / "tiny").exists()
    # what a process killed mid-conversion leaves: a partial output beside verified downloads
    left = home / "downloads" / "tiny" / "converted"
    left.mkdir(parents=True)
    (left / "draft.gguf.partial").write_bytes(b"GGUF half")
    m = pull(ModelStore(home), "tiny", progress=no_progress)
    assert m.draft == "draft.gguf" and not (home / "downloads" / "tiny").exists()


def test_a_refused_checkpoint_leaves_the_model_installed_and_says_why(hub_env, files, tmp_path):
    home = tmp_path / "home"
    entry(home, "tiny", hub_env, files, "bad")
    with pytest.raises(DownloadError, match="tiny is installed and runs without speculation, but its draft was "
                                            "refused: the checkpoint .* cannot be converted: .*sample_from_anchor"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    assert ModelStore(home).get("tiny").draft == "" and folder_of(home, "tiny") == ["Tiny-Q8_0.gguf", "model.json"]
    assert not (home / "downloads" / "tiny").exists()


def test_a_converted_draft_gets_the_hostile_draft_checks(hub_env, files, tmp_path, monkeypatch):
    """Whatever the converter wrote is read as any downloaded draft is: a GGUF with a million taps is refused."""
    home = tmp_path / "home"
    entry(home, "tiny", hub_env, files, "zlab2")
    real = gconvert.convert_draft

    def hostile(*a, **k):
        r = real(*a, **k)
        write_hostile(r.path, r.path.with_name("evil.gguf"), "overlong_taps").replace(r.path)
        return r

    monkeypatch.setattr(gconvert, "convert_draft", hostile)
    with pytest.raises(DownloadError, match="its draft was refused: .*1048576 target layers; a draft taps 1 to 64"):
        pull(ModelStore(home), "tiny", progress=no_progress)
    assert ModelStore(home).get("tiny").draft == "" and folder_of(home, "tiny") == ["Tiny-Q8_0.gguf", "model.json"]


def test_the_models_page_lists_a_checkpoint_draft_with_its_files(hub_env, files, tmp_path):
    """GET /v1/store/models's catalog entry (server/http/routes/store.py): the repository, revision and each
    pinned file, said to be converted here, and counted as a draft the entry has."""
    from engine.advisor import tiers
    from server.http.routes.store import catalog_json

    home = tmp_path / "home"
    entry(home, "tiny", hub_env, files, "spec2")
    e = ModelStore(home).catalog().get("tiny")
    [offer] = [o for o in tiers.offers(ModelStore(home).catalog(), tiers.Machine("cpu", "", 8 << 30), 1024)
               if o.name == "tiny"]
    c = catalog_json(e, offer, {})
    d = c["draft"]
    assert c["has_draft"] and d["source"] == "huggingface-checkpoint" and d["converted"] is True
    assert d["repo"] == LAYOUTS["spec2"][0] and d["revision"] == hub_env.revs[d["repo"]]
    assert [f["file"] for f in d["files"]] == ["config.json", "model.safetensors"]
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in d["files"]) and d["license"] == "MIT"
