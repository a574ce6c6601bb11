"""The catalog as data (engine/models/catalog.json against catalog.schema.json) and the hardware tiers
(engine/advisor/tiers.py): every built-in pin is complete, no target is a draft, the memory a model needs
follows its files and KV cache, and each kind of computer is offered what fits it."""

from __future__ import annotations

import json

import pytest

from engine.models import catalog
from engine.advisor import tiers
from engine.models.catalog import HubFile, PypiFile, looks_like_draft

GiB = 1 << 30
CELLS = 4096 * 4  # the server's default context x parallel sequences


def test_the_builtin_catalog_is_complete_and_pinned():
    cat = catalog.load(None)
    assert cat.problems == [] and catalog.DEFAULT_MODEL in cat
    assert set(cat.names()) >= {"smollm2", "qwen3-4b", "qwen3.5-2b", "qwen3.5-4b", "qwen3-8b", "qwen3.8-27b",
                                "muse-glimmer-30b", "gemma-4-26b-a4b", "qwen3.6-35b-a3b"}
    kinds = set()
    for e in cat.entries.values():
        files = [e.target] + ([e.draft.hub] if e.draft and e.draft.hub else [])
        for f in files:
            assert len(f.sha256) == 64 and f.size > 0 and f.license
            if isinstance(f, HubFile):
                assert len(f.revision) == 40 and f.file.endswith(".gguf")
        assert not looks_like_draft(e.target.file), e.name
        if e.draft and e.draft.hub:
            assert looks_like_draft(e.draft.hub.file) or "DFlash" in e.draft.hub.file
            kinds.add(e.draft.kind)
            assert set(e.draft.n_draft) == {"cuda", "metal", "cpu"}
            assert all(n < e.draft.block_size for n in e.draft.n_draft.values())
    assert kinds == {"dflash2", "dflash1"}  # both kinds of published draft are offered
    smol = cat.get("smollm2")
    assert isinstance(smol.target, PypiFile) and smol.draft.shipped_path is not None  # offline default stays


def test_memory_is_files_plus_kv_plus_overhead():
    e = catalog.BUILTIN["qwen3.8-27b"]
    assert e.download_bytes == e.target.size + e.draft.hub.size
    assert e.memory_bytes(CELLS) == e.download_bytes + 65536 * CELLS + catalog.OVERHEAD_BYTES


@pytest.mark.parametrize("name", ["dflash-Qwen3-8B-Q8_0.gguf", "Qwen3.8-27B-DFlash2-Q4_K_M.gguf",
                                  "mtp-gemma-4-26B-A4B-it.gguf", "dspark-Qwen3-8B-BF16.gguf", "draft.gguf",
                                  "EAGLE3-llama.gguf"])
def test_draft_file_names_are_recognised(name):
    assert looks_like_draft(name)


@pytest.mark.parametrize("name", ["Qwen3-8B-Q4_K_M.gguf", "gemma-4-26B-A4B-it-Q4_0.gguf", "SmolLM2-135M.gguf",
                                  "Muse-Glimmer-30B-UD-Q4_K_XL.gguf", "drafting-model.gguf"])
def test_model_file_names_are_not_drafts(name):
    assert not looks_like_draft(name)


def test_a_user_file_replaces_a_builtin_and_a_bad_one_is_reported(tmp_path):
    (tmp_path / "catalog").mkdir()
    data = json.loads(catalog.BUILTIN_FILE.read_text())
    mine = next(m for m in data["models"] if m["name"] == "qwen3-8b") | {"title": "Our Qwen3-8B"}
    (tmp_path / "catalog" / "ours.json").write_text(json.dumps({"models": [mine]}))
    bad = dict(mine, name="bad", target={"hub": dict(mine["target"]["hub"], sha256="abc")})
    (tmp_path / "catalog" / "bad.json").write_text(json.dumps({"models": [bad]}))
    cat = catalog.load(tmp_path)
    assert cat.get("qwen3-8b").title == "Our Qwen3-8B" and cat.get("qwen3-8b").source == "user:ours.json"
    [(file, why)] = cat.problems
    assert file.endswith("bad.json") and "sha256" in why and "bad" not in cat


def offered(here: tiers.Machine) -> tuple[list[str], str | None]:
    offers = tiers.offers(catalog.load(None), here, CELLS)
    return [o.name for o in offers if o.fits], next((o.name for o in offers if o.recommended), None)


def test_a_24_gb_graphics_card_is_offered_the_flagship_pair():
    fits, best = offered(tiers.Machine("gpu", "NVIDIA GeForce RTX 4090", 24 * GiB))
    assert best == "qwen3.8-27b" and {"gemma-4-26b-a4b", "muse-glimmer-30b", "qwen3-8b"} <= set(fits)


def test_smaller_cards_and_macs_get_what_fits():
    assert offered(tiers.Machine("gpu", "NVIDIA GeForce RTX 4060 Ti", 16 * GiB))[1] == "qwen3-8b"
    assert offered(tiers.Machine("gpu", "NVIDIA GeForce RTX 3060", 12 * GiB))[1] == "qwen3-8b"
    assert offered(tiers.Machine("unified", "Apple M2", int(10.7 * GiB)))[1] == "qwen3-8b"  # a 16 GB Mac
    assert offered(tiers.Machine("unified", "Apple M3 Max", 48 * GiB))[1] == "qwen3.8-27b"
    fits, best = offered(tiers.Machine("gpu", "NVIDIA GeForce GTX 1050", 4 * GiB))  # 3 GiB after the reserve
    assert best == "qwen3.5-2b" and "qwen3-4b" not in fits and "qwen3.5-4b" not in fits


def test_a_machine_without_a_graphics_card_keeps_smollm2_and_is_offered_cpu_models_only():
    fits, best = offered(tiers.Machine("cpu", "", 32 * GiB))
    assert best is None and set(fits) == {"smollm2", "qwen3-4b", "qwen3.5-2b", "qwen3.5-4b"}


def test_machine_reads_the_devices_as_the_system_route_lists_them():
    cuda = [{"type": "cpu", "backend": "CPU", "memory_bytes": 64 * GiB},
            {"type": "gpu", "backend": "CUDA", "description": "NVIDIA GeForce RTX 4090", "memory_bytes": 24 * GiB}]
    assert tiers.machine(True, cuda, 64 * GiB) == tiers.Machine("gpu", "NVIDIA GeForce RTX 4090", 24 * GiB)
    metal = [{"type": "gpu", "backend": "Metal", "description": "Apple M3 Max", "memory_bytes": 40 * GiB}]
    assert tiers.machine(True, metal, 48 * GiB).kind == "unified"
    assert tiers.machine(False, cuda, 64 * GiB) == tiers.Machine("cpu", "", 64 * GiB)  # a CPU-only build


def test_a_draft_published_as_a_checkpoint_is_named_by_its_files():
    """The checkpoint form: one repo, revision and licence, config.json and the safetensors each pinned."""
    pin = {"size": 10, "sha256": "a" * 64}
    target = {"hub": {"repo": "org/T-GGUF", "revision": "b" * 40, "file": "T-Q8_0.gguf", "size": 100,
                      "sha256": "c" * 64, "license": "Apache-2.0"}}

    def doc(files):
        draft = {"kind": "dflash2", "block_size": 8, "n_draft": {"cuda": 7, "metal": 7, "cpu": 3},
                 "checkpoint": {"repo": "org/T-speculator.dflash2", "revision": "d" * 40, "license": "MIT",
                                "files": files}}
        return {"models": [{"name": "t", "title": "T", "target": target, "kv_bytes_per_token": 1, "draft": draft}]}

    (e,) = catalog.parse(doc([{"file": "config.json", **pin}, {"file": "model.safetensors", "size": 5000,
                                                               "sha256": "e" * 64}]), "test")
    assert e.draft.hub is None and [f.file for f in e.draft.checkpoint] == ["config.json", "model.safetensors"]
    assert {(f.repo, f.revision, f.license) for f in e.draft.checkpoint} == {("org/T-speculator.dflash2", "d" * 40,
                                                                              "MIT")}
    assert (e.draft.license, e.draft.download_size, e.draft.size, e.download_bytes) == ("MIT", 5010, 5000, 5110)
    with pytest.raises(catalog.CatalogError, match="contain"):  # no config.json: nothing says what the weights are
        catalog.parse(doc([{"file": "model.safetensors", **pin}, {"file": "x.safetensors", **pin}]), "test")
    with pytest.raises(catalog.CatalogError, match="names a file twice"):
        catalog.parse(doc([{"file": "config.json", **pin}, {"file": "model.safetensors", **pin},
                           {"file": "config.json", **pin}]), "test")


def test_a_checkpoint_can_be_pinned_by_its_commit_alone():
    """Issue 53, item 1: repo, commit and licence, and an estimate of the bytes for the memory fit;
    the files are read from the Hub's tree at that commit when pulled. Files and estimate together,
    or neither, is refused."""
    target = {"hub": {"repo": "org/T-GGUF", "revision": "b" * 40, "file": "T-Q8_0.gguf", "size": 100,
                      "sha256": "c" * 64, "license": "Apache-2.0"}}

    def doc(**checkpoint):
        draft = {"kind": "dflash2", "block_size": 16, "n_draft": {"cuda": 7, "metal": 3, "cpu": 3},
                 "checkpoint": {"repo": "z-lab/T-DFlash", "revision": "d" * 40, "license": "MIT", **checkpoint}}
        return {"models": [{"name": "t", "title": "T", "target": target, "kv_bytes_per_token": 1, "draft": draft}]}

    (e,) = catalog.parse(doc(size_estimate=1 << 30), "test")
    assert e.draft.checkpoint == () and e.draft.converted
    assert e.draft.commit == catalog.CommitPin("z-lab/T-DFlash", "d" * 40, "MIT", 1 << 30)
    assert (e.draft.license, e.draft.size, e.download_bytes) == ("MIT", 1 << 30, 100 + (1 << 30))
    files = [{"file": "config.json", "size": 1, "sha256": "a" * 64}, {"file": "m.safetensors", "size": 1,
                                                                       "sha256": "a" * 64}]
    for bad in (doc(), doc(size_estimate=5, files=files)):
        with pytest.raises(catalog.CatalogError):
            catalog.parse(bad, "test")
