"""Sampling parameters and the llama.cpp sampler chain that applies them.

Not a sampler implementation: llama.cpp's own samplers do the math, in the order
llama-server uses (penalties -> top-k -> top-p -> min-p -> temperature -> draw).
Temperature 0 is greedy (argmax), exactly reproducible. A seeded chain draws the
same tokens for the same logits, so `seed` makes sampling reproducible.

References: llama.cpp `include/llama.h`, "Sampling API".
"""

from __future__ import annotations

import ctypes
import math
import random
from dataclasses import dataclass

import llama_cpp
import numpy as np

from .errors import InvalidRequest


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None  # None = a fresh random seed per request

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        checks = [
            ("temperature", 0.0 <= self.temperature <= 2.0, "must be between 0 and 2"),
            ("top_p", 0.0 < self.top_p <= 1.0, "must be in (0, 1]"),
            ("top_k", self.top_k >= 0, "must be >= 0"),
            ("min_p", 0.0 <= self.min_p <= 1.0, "must be between 0 and 1"),
            ("presence_penalty", -2.0 <= self.presence_penalty <= 2.0, "must be between -2 and 2"),
            ("frequency_penalty", -2.0 <= self.frequency_penalty <= 2.0, "must be between -2 and 2"),
        ]
        for name, ok, why in checks:
            value = getattr(self, name)
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise InvalidRequest(f"{name} {why} (got {value})", param=name)


_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


class Sampler:
    """A llama.cpp sampler chain for one request. Penalties see only generated tokens.

    With a grammar (a `grammar.Grammar`), forbidden tokens are masked before the chain, as if
    the grammar sampler were its first stage; greedy decoding without penalties checks the
    plain argmax first and masks only when the grammar refuses it (same token, far cheaper).
    """

    def __init__(self, params: SamplingParams, n_vocab: int, window: int, grammar=None, close_from: int | None = None):
        self.params = params
        self.n_vocab = n_vocab
        self.grammar = grammar
        self.close_from = close_from  # output index from which the grammar closes (Grammar.close)
        self._fast_greedy = params.greedy and not (params.presence_penalty or params.frequency_penalty)
        self._data = np.empty(n_vocab if grammar is not None else 0, dtype=_TOKEN_DATA)  # [V]
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        add = lambda s: llama_cpp.llama_sampler_chain_add(chain, s)  # noqa: E731
        if params.presence_penalty or params.frequency_penalty:
            # The window is the whole output (`window` = max new tokens): OpenAI semantics.
            add(llama_cpp.llama_sampler_init_penalties(
                n_vocab, max(window, 1), 1.0, params.frequency_penalty, params.presence_penalty))
        if params.greedy:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                add(llama_cpp.llama_sampler_init_top_k(params.top_k))
            if params.top_p < 1.0:
                add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0.0:
                add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            seed = params.seed if params.seed is not None else random.getrandbits(32)
            add(llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        self.ptr = chain

    def sample(self, ctx_ptr, row: int, index: int = 0) -> int:
        """Draw output token number `index` from the logits of batch row `row`; also records
        the token for penalties."""
        g = self.grammar
        if g is None:
            return int(llama_cpp.llama_sampler_sample(self.ptr, ctx_ptr, row))
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx_ptr, row), shape=(self.n_vocab,))  # [V]
        if self.close_from is not None and index >= self.close_from:  # greedy requests only (Slot)
            token = g.close(logits)
            llama_cpp.llama_sampler_accept(self.ptr, token)  # penalties see it too
        elif self._fast_greedy:
            token = g.greedy(logits)
        else:  # what llama_sampler_sample does, on the masked logits
            d = self._data
            d["id"] = np.arange(self.n_vocab, dtype=np.int32)
            d["logit"] = g.mask(logits)
            d["p"] = 0.0
            arr = llama_cpp.llama_token_data_array(
                d.ctypes.data_as(llama_cpp.llama_token_data_p), self.n_vocab, -1, False)
            llama_cpp.llama_sampler_apply(self.ptr, ctypes.byref(arr))
            token = int(arr.data[arr.selected].id)  # samplers may reorder the array
            llama_cpp.llama_sampler_accept(self.ptr, token)
        g.accept(token)
        return token

    def free(self) -> None:
        if self.ptr:
            llama_cpp.llama_sampler_free(self.ptr)
            self.ptr = None
        if self.grammar is not None:
            self.grammar.free()


class TargetDistribution:
    """The distribution the plain sampler draws from, as an array, for speculative sampling.

    Applies llama.cpp's own top-k / top-p / min-p / temperature samplers (the same chain
    as `Sampler`, without the final draw) to one row of logits and returns the resulting
    probabilities over the whole vocabulary, so acceptance compares against exactly what
    plain decoding would have sampled from. Penalties are not supported here (requests
    with penalties decode plainly).
    """

    def __init__(self, params: SamplingParams, n_vocab: int):
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if params.top_k > 0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k))
        if params.top_p < 1.0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
        if params.min_p > 0.0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
        self.ptr = chain
        self.n_vocab = n_vocab
        self._data = np.empty(n_vocab, dtype=_TOKEN_DATA)  # [V] reused scratch

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """logits [V] float32 -> p [V] float32 (zero outside what the samplers keep)."""
        d = self._data
        d["id"] = np.arange(self.n_vocab, dtype=np.int32)
        d["logit"] = logits
        d["p"] = 0.0
        arr = llama_cpp.llama_token_data_array(
            d.ctypes.data_as(llama_cpp.llama_token_data_p), self.n_vocab, -1, False)
        llama_cpp.llama_sampler_apply(self.ptr, ctypes.byref(arr))
        kept = d[: arr.size]  # the samplers reorder and truncate the array in place
        z = kept["logit"].astype(np.float64)
        finite = np.isfinite(z)
        w = np.zeros_like(z)
        w[finite] = np.exp(z[finite] - z[finite].max())
        p = np.zeros(self.n_vocab, dtype=np.float32)  # [V]
        p[kept["id"]] = (w / w.sum()).astype(np.float32)
        return p

    def free(self) -> None:
        if self.ptr:
            llama_cpp.llama_sampler_free(self.ptr)
            self.ptr = None
