"""bench/gpu_check.py on the CPU at tiny sizes, so that the GPU check runs when a GPU comes: its
exactness table (every row exact on the CPU build) and its random 8B-shaped model writer, here at
one layer and 512 wide."""

from __future__ import annotations

import pytest

from bench import gpu_check
from engine.llama.model import Model


def test_the_exactness_table_on_the_cpu_build(target_model):
    out = gpu_check.exactness(target_model, smoke=True)
    assert out["exact"], [c for c in out["chunks"] if c["rows_differ"]]
    assert {c["k"] for c in out["chunks"]} == {2, 5, 8} and len(out["chunks"]) == 2 + 5 + 8
    assert [m["prompt"] for m in out["multi"]] == list(gpu_check.MULTI_PROMPTS[:2])


@pytest.mark.parametrize("own_tokenizer", [False, True], ids=["synthetic-vocab", "smollm2-vocab"])
def test_the_random_model_loads_and_decodes(model_path, tmp_path, own_tokenizer):
    out = tmp_path / "random.gguf"
    gpu_check.random_model(out, n_layer=1, n_embd=512, tokenizer_from=model_path if own_tokenizer else None)
    m = Model(out)
    try:
        assert m.info.n_layer == 1 and m.info.n_embd == 512 and "Q4_K" in m.info.description
        assert m.n_vocab == (49152 if own_tokenizer else gpu_check.SYNTHETIC_VOCAB)
        cost = gpu_check.cost(m, reps=1)
        assert set(cost["c_ms"]) == set(range(1, gpu_check.N + 1)) and cost["plain_tok_s"] > 0
    finally:
        m.close()
