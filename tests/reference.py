"""Plain greedy decoding straight through llama.cpp, outside the engine: the reference the
engine's own outputs (with prefix reuse, grammars, speculation) must equal token for token."""

from __future__ import annotations

import llama_cpp
import numpy as np

from conftest import TEST_CTX
from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model


def greedy_reference(model_path: str, prompt: list[int], n: int, grammar: str | None = None) -> list[int]:
    """A fresh context, the whole prompt decoded at once, then llama.cpp's sampler chain
    (grammar if given, then greedy) one token at a time."""
    model = Model(model_path)
    ctx = Context(model, ContextConfig(n_ctx_seq=TEST_CTX, n_seq=1, n_batch=512, n_threads=2))
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    if grammar:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_grammar(model.vocab, grammar.encode(),
                                                                                      b"root"))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
    try:
        out, pos, feed = [], 0, list(prompt)
        while len(out) < n:
            ctx.batch.clear()
            for start in range(0, len(feed), 512):
                ctx.batch.clear()
                chunk = feed[start:start + 512]
                rows = [ctx.batch.add(t, pos + j, 0, logits=start + j == len(feed) - 1) for j, t in enumerate(chunk)]
                ctx.decode(ctx.batch)
                pos += len(chunk)
            tok = llama_cpp.llama_sampler_sample(chain, ctx.ptr, rows[-1])  # also advances the grammar
            out.append(tok)
            if model.is_eog(tok):
                break
            feed = [tok]
        return out
    finally:
        llama_cpp.llama_sampler_free(chain)
        ctx.close()
        model.close()


def greedy_with_logits(model: Model, prompt: list[int], n: int, n_threads: int = 2,
                       n_ctx: int = 1024) -> tuple[list[int], np.ndarray]:
    """Plain greedy decoding of a loaded model by argmax: the chosen tokens and the logits each
    was chosen from [len(tokens), n_vocab] (for comparing two files of the same model)."""
    ctx = Context(model, ContextConfig(n_ctx_seq=n_ctx, n_seq=1, n_batch=512, n_threads=n_threads))
    try:
        tokens, logits, feed, pos = [], [], list(prompt), 0
        for _ in range(n):
            ctx.batch.clear()
            for j, t in enumerate(feed):
                ctx.batch.add(t, pos + j, 0, logits=j == len(feed) - 1)
            ctx.decode(ctx.batch)
            pos += len(feed)
            row = np.ctypeslib.as_array(ctx.logits_ptr(len(feed) - 1), shape=(model.n_vocab,)).copy()
            logits.append(row)
            tokens.append(int(row.argmax()))
            if model.is_eog(tokens[-1]):
                break
            feed = [tokens[-1]]
        return tokens, np.stack(logits)
    finally:
        ctx.close()
