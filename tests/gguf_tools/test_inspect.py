"""inspect_gguf and `flashdesk inspect`: the real model's numbers agree with llama.cpp's, the
shipped draft shows its DFlash keys and kind (a plain DFlash draft its own), and a broken file
is one clear line with exit status 2. Every hostile draft (tests/hostile_drafts.py) is refused by
inspect with the message loading and pairing give, and no array is printed whole."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFWriter
from hostile_drafts import HOSTILE, TAPS, write_hostile

from gguf_tools import GGUFFormatError, check_gguf, format_report, inspect_gguf
from gguf_tools.dflash import CAPTURE_ARCHS

ROOT = Path(__file__).resolve().parents[2]
DRAFT = ROOT / "engine" / "drafts" / "smollm2-dflash2.gguf"


def flashdesk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def report(model_path) -> dict:
    return inspect_gguf(model_path)


def test_real_model_agrees_with_llama_cpp(report, model_path):
    from engine.llama.model import Model

    m = Model(model_path, n_gpu_layers=0)
    try:
        info, template = m.info, m.chat_template()
        pre, bos, eos = m.meta("tokenizer.ggml.pre"), m.bos_id, m.eos_id
    finally:
        m.close()
    assert report["architecture"] == info.architecture == "llama"
    assert report["parameters"] == info.n_params
    assert sum(t["bytes"] for t in report["tensor_types"].values()) == info.size_bytes
    assert report["context_length"] == info.n_ctx_train == 8192
    assert report["block_count"] == info.n_layer == 30
    assert report["embedding_length"] == info.n_embd == 576
    assert (report["head_count"], report["head_count_kv"]) == (9, 3)
    assert report["tokenizer"]["vocab_size"] == info.n_vocab == 49152
    assert report["tokenizer"]["model"] == "gpt2" and report["tokenizer"]["pre"] == pre == "smollm"
    assert report["tokenizer"]["special_tokens"]["bos"] == bos and report["tokenizer"]["special_tokens"]["eos"] == eos
    assert report["chat_template"] == {"present": True, "length": len(template)}


def test_real_model_types_quantization_and_pairing(report, model_path):
    assert report["quantization"] == "Q4_1" and not report["quantization_guessed"] and report["file_type"] == 3
    assert {k: v["count"] for k, v in report["tensor_types"].items()} == {"Q4_1": 210, "Q8_0": 1, "F32": 61}
    assert report["tensor_count"] == 272 and report["file_size"] == Path(model_path).stat().st_size
    big = report["largest_tensors"][0]
    assert big["name"] == "token_embd.weight" and big["shape"] == [576, 49152] and big["type"] == "Q8_0"
    assert report["can_pair_dflash_draft"] and "llama" in CAPTURE_ARCHS
    assert not report["is_dflash_draft"] and report["dflash"] is None
    text = format_report(report)
    for bit in ("134.5M parameters", "30 layers", "Q4_1", "8192 tokens", "49152 tokens", "chat template yes",
                "can pair: yes"):
        assert bit in text, (bit, text)


def test_shipped_draft_shows_its_dflash_keys():
    r = inspect_gguf(DRAFT)
    meta = check_gguf(DRAFT, arrays=("dflash.target_layers",)).metadata
    assert r["is_dflash_draft"] and r["architecture"] == "dflash" and not r["can_pair_dflash_draft"]
    assert r["dflash"]["target_layers"] == meta["dflash.target_layers"]
    assert r["dflash"]["block_size"] == 8 and r["dflash"]["selector_top_k"] == 16
    assert r["dflash"]["attention.causal"] is False
    # the d2t index map (I64) is not counted as parameters
    assert "I64" in r["tensor_types"]
    assert r["parameters"] == sum(_numel(t["shape"]) for t in _all_tensors(DRAFT) if t["type"] != "I64")
    assert "DFlash draft  yes: block_size 8" in format_report(r)
    assert r["dflash_kind"] == "dflash2"
    assert "draft kind    DFlash 2 (K=16 candidates), block 8 (anchor + 7 drafted)" in format_report(r)


def test_a_plain_dflash_draft_shows_its_kind_and_block(tmp_path, model_path):
    from gguf_tools.dflash import write_random_draft

    path = tmp_path / "v1.gguf"
    write_random_draft(path, model_path, kind="dflash1", block_size=12)
    r = inspect_gguf(path)
    assert r["is_dflash_draft"] and r["dflash_kind"] == "dflash1" and "selector_top_k" not in r["dflash"]
    text = format_report(r)
    assert "DFlash draft  yes: block_size 12" in text
    assert "draft kind    DFlash v1 (no candidate selector), block 12 (anchor + 11 drafted)" in text
    out = flashdesk("inspect", str(path), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["dflash_kind"] == "dflash1"
    assert inspect_gguf(model_path)["dflash_kind"] is None  # a target is no draft of any kind


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _all_tensors(path) -> list[dict]:
    from gguf_tools import check_gguf

    return [{"shape": t.shape, "type": t.type_name} for t in check_gguf(path).tensors]


def test_other_architecture_cannot_pair_and_arrays_stay_arrays(tmp_path):
    """qwen2 does not publish layer inputs; a per-layer head count must not read as its length."""
    path = _qwen2(tmp_path / "q.gguf", [4, 8])
    r = inspect_gguf(path)
    assert not r["can_pair_dflash_draft"] and "qwen2" in r["dflash_pairing"]
    assert r["head_count"] == [4, 8] and r["parameters"] == 128
    assert r["quantization"] == "F16" and r["quantization_guessed"]
    assert r["tokenizer"]["vocab_size"] is None and not r["chat_template"]["present"]
    assert "can pair: no" in format_report(r) and "tokenizer     none" in format_report(r)


def test_broken_file_is_one_line_and_status_2(tmp_path, model_path):
    broken = tmp_path / "cut.gguf"
    broken.write_bytes(Path(model_path).read_bytes()[:20_000_000])  # cut inside the tensor data
    with pytest.raises(GGUFFormatError):
        inspect_gguf(broken)
    out = flashdesk("inspect", str(broken))
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith("error: ") and "not a valid GGUF" in lines[0] and "HINT" in lines[0]


def test_cli_json_is_the_dict_and_text_is_readable(report, model_path):
    out = flashdesk("inspect", model_path, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json.loads(json.dumps(report))
    text = flashdesk("inspect", model_path)
    assert text.returncode == 0 and text.stdout.strip() == format_report(report)


def test_shipped_draft_passes_inspect():
    out = flashdesk("inspect", str(DRAFT))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert "DFlash draft  yes: block_size 8, selector_top_k 16, target_layers [2, 9, 15, 21, 28]" in out.stdout
    assert "REFUSED" not in out.stdout
    js = flashdesk("inspect", str(DRAFT), "--json")
    assert js.returncode == 0 and json.loads(js.stdout)["draft_refusal"] is None


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_inspect_refuses_a_hostile_draft_as_loading_does(name, tmp_path, target_model):
    """A person checking a download gets the refusal loading and pairing would give (both ask
    inspect_draft; the drafter is the loading path), word for word, and a non-zero status."""
    from engine.speculative.drafters.dflash import DFlashDrafter, DraftRefused

    path = write_hostile(DRAFT, tmp_path / f"{name}.gguf", name)
    with pytest.raises(DraftRefused) as info:
        DFlashDrafter(str(path), target_model)
    why = str(info.value)
    out = flashdesk("inspect", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"error: {why}"
    assert f"DFlash draft  REFUSED: {why}" in out.stdout and "yes" not in out.stdout.split("DFlash draft")[1]
    key, value = HOSTILE[name][:2]
    if key == TAPS:  # the one array the text shows: a count and the first few, whatever its length
        shown = str(value) if len(value) <= 5 else f"{len(value)} values: {', '.join(map(str, value[:5]))}, ..."
        assert f"target_layers {shown}," in out.stdout
    assert len(out.stdout) < 2_000  # the disclosed shape's million ids would be megabytes
    js = flashdesk("inspect", str(path), "--json")
    assert js.returncode == 2 and js.stderr.strip() == f"error: {why}"
    assert json.loads(js.stdout)["draft_refusal"] == why and len(js.stdout) < 20_000


def test_a_long_array_of_a_target_is_cut_in_the_dict_and_the_text(tmp_path):
    """Per-layer values of more layers than llama.cpp allows: a count and the first items, in both."""
    path = _qwen2(tmp_path / "deep.gguf", list(range(600)))
    r = inspect_gguf(path)
    assert r["head_count"] == {"count": 600, "first": list(range(8))} and r["draft_refusal"] is None
    assert "600 values: 0, 1, 2, 3, 4, ... heads" in format_report(r)
    out = flashdesk("inspect", str(path))
    assert out.returncode == 0 and out.stdout.strip() == format_report(r)


def _qwen2(path, heads: list[int]):
    """A qwen2 GGUF with `heads` per layer and one F16 tensor, nothing else."""
    import numpy as np

    w = GGUFWriter(str(path), "qwen2")
    w.add_uint32("qwen2.block_count", len(heads))
    w.add_array("qwen2.attention.head_count", heads)
    w.add_tensor("blk.0.attn_q.weight", np.zeros((4, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
