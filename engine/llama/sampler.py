"""llama.cpp's sampler chain, built once for plain sampling and for speculative sampling.

Not a sampler implementation: llama.cpp's own samplers do the math, in the order
llama-server uses (penalties -> top-k -> top-p -> min-p -> temperature -> draw).
`Sampler` draws a request's tokens; `TargetDistribution` returns, as an array, the
distribution that same chain draws from, which rejection sampling compares drafts against.
Lossless speculative sampling depends on the two being the same chain, so both are built by
`filter_chain` and nothing else adds a filter.

References: llama.cpp `include/llama.h`, "Sampling API".
"""

from __future__ import annotations

import ctypes
import random

import llama_cpp
import numpy as np

from ..sampling import SamplingParams

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


def apply(sampler, data: np.ndarray) -> llama_cpp.llama_token_data_array:
    """Run `sampler` over `data` (a TOKEN_DATA array, edited in place: samplers may set
    logits to -inf, reorder and truncate); returns llama.cpp's view (`size`, `selected`)."""
    arr = llama_cpp.llama_token_data_array(data.ctypes.data_as(llama_cpp.llama_token_data_p), len(data), -1, False)
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
    return arr


def fill(data: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """data [V] TOKEN_DATA <- every token id with its logit, in id order."""
    data["id"] = np.arange(len(data), dtype=np.int32)
    data["logit"] = logits
    data["p"] = 0.0
    return data


def filter_chain(chain, params: SamplingParams) -> None:
    """Add the filters of a non-greedy request to `chain`: top-k, top-p, min-p, temperature.
    The one place they are written: plain sampling draws after them, speculative sampling
    reads the distribution they leave."""
    add = lambda s: llama_cpp.llama_sampler_chain_add(chain, s)  # noqa: E731
    if params.top_k > 0:
        add(llama_cpp.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0.0:
        add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
    add(llama_cpp.llama_sampler_init_temp(params.temperature))


def _new_chain():
    return llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())


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
        self._data = np.empty(n_vocab if grammar is not None else 0, dtype=TOKEN_DATA)  # [V]
        chain = _new_chain()
        if params.presence_penalty or params.frequency_penalty:
            # The window is the whole output (`window` = max new tokens): OpenAI semantics.
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_penalties(
                n_vocab, max(window, 1), 1.0, params.frequency_penalty, params.presence_penalty))
        if params.greedy:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        else:
            filter_chain(chain, params)
            seed = params.seed if params.seed is not None else random.getrandbits(32)
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
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
            arr = apply(self.ptr, fill(self._data, g.mask(logits)))
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
    """The distribution the plain sampler draws from, as an array, for speculative sampling:
    `filter_chain` (the same filters as `Sampler`, without the final draw) applied to one row
    of logits, as probabilities over the whole vocabulary. Penalties are not supported here
    (requests with penalties decode plainly)."""

    def __init__(self, params: SamplingParams, n_vocab: int):
        self.ptr = _new_chain()
        filter_chain(self.ptr, params)
        self.n_vocab = n_vocab
        self._data = np.empty(n_vocab, dtype=TOKEN_DATA)  # [V] reused scratch

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """logits [V] float32 -> p [V] float32 (zero outside what the samplers keep)."""
        d = fill(self._data, logits)
        arr = apply(self.ptr, d)
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
