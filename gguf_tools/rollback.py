"""Whether speculation can roll rejected tokens back on a model, expected from its GGUF file alone.

Speculative decoding writes drafted tokens into the target's memory and removes the rejected
ones. How exactly that removal works depends on the kind of memory the architecture has:

- attention (a cache of every token): drops a tail exactly at any depth;
- sliding-window attention: flashdesk makes its cache full-size (`swa_full`), so it drops no
  cell and a removal is exact too;
- recurrent state (Mamba, RWKV, Gated DeltaNet; alone or in a hybrid beside attention): one
  running state per sequence, which can go back only through llama.cpp's per-sequence state
  snapshots (the `n_rs_seq` context parameter), and the pinned llama.cpp has those for some
  architectures only. Without them speculation is refused: it would corrupt the state.

The facts are the pinned llama.cpp's, read from vendor/llama.cpp/src/llama-arch.cpp of
llama-cpp-python 0.3.36: `llm_arch_is_recurrent`, `llm_arch_is_hybrid` and
`llm_arch_supports_rs_rollback` (llama-context.cpp clamps `n_rs_seq` to 0 for the others), spelled
as the GGUF architecture strings of its LLM_ARCH_NAMES table. Update them with the pin.

This is an expectation, for `flashdesk inspect` and the Models page before a model is loaded; the
engine measures the rollback on the loaded model anyway (engine/speculative/exactness.py
`rollback_refusal`) and that measurement decides. Not a loader: it reads only metadata given to it.
"""

from __future__ import annotations

# llm_arch_is_recurrent: recurrent layers only
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# llm_arch_is_hybrid: recurrent layers beside attention layers
HYBRID_ARCHS = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
    "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp",
    "deepseek4", "minimax-01",
})
# llm_arch_supports_rs_rollback: keeps per-sequence snapshots of the recurrent state
RS_ROLLBACK_ARCHS = frozenset({
    "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe",
    "lfm2", "lfm2moe", "bailingmoe3",
})


def sliding_window(architecture: str, metadata: dict) -> int:
    """The sliding window in tokens (`<arch>.attention.sliding_window`); 0: full attention only."""
    w = metadata.get(f"{architecture}.attention.sliding_window")
    return w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else 0


def rollback_plan(architecture: str, metadata: dict) -> dict:
    """{"memory": "attention" | "sliding-window" | "recurrent", "speculation": "exact" | "refused",
    "why": plain words}; `metadata` is the file's metadata (keys with the `<arch>.` prefix)."""
    arch = architecture or ""
    if arch in RECURRENT_ARCHS or arch in HYBRID_ARCHS:
        layers = "recurrent layers" if arch in RECURRENT_ARCHS else "recurrent layers beside their attention layers"
        if arch in RS_ROLLBACK_ARCHS:
            return {"memory": "recurrent", "speculation": "exact",
                    "why": f"{arch} models have {layers} (a running summary of the text), and this llama.cpp "
                           "keeps snapshots of that summary, so the speed-up can undo rejected guesses exactly"}
        return {"memory": "recurrent", "speculation": "refused",
                "why": f"{arch} models have {layers} (a running summary of the text), and this llama.cpp "
                       "cannot take that summary back to before a rejected guess, so the speed-up stays off for "
                       "this model: it answers at normal speed, with the same words. HINT: for faster answers use a "
                       "model whose summary can be taken back (qwen35, say) or one with plain attention (llama, qwen3)"}
    window = sliding_window(arch, metadata)
    if window:
        return {"memory": "sliding-window", "speculation": "exact",
                "why": f"{arch} models look back over a window of {window} tokens in some layers; flashdesk keeps "
                       "the whole window's memory, so the speed-up can undo rejected guesses exactly"}
    return {"memory": "attention", "speculation": "exact",
            "why": f"{arch or 'this'} models keep a memory of every token (attention), so the speed-up can undo "
                   "rejected guesses exactly"}
