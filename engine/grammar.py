"""A GBNF grammar applied to the target's logits: llama.cpp's grammar sampler, one per request.

What it is: `Grammar` holds a llama.cpp grammar sampler (its parse state follows the tokens
committed so far) and answers the three questions decoding asks of it: may this token come
next (`allows`), which token would a grammar-constrained greedy sampler pick from these
logits (`greedy`), and the logits with every forbidden token at -inf (`mask`, for sampling).
It is not a grammar compiler (json_schema.py writes the GBNF) and knows nothing of drafts:
speculation asks the same questions at each verify row (spec/constrain.py).

Why `greedy` checks the argmax first: the unconstrained argmax is the constrained one whenever
the grammar allows it (the grammar only removes tokens), so one single-token check replaces a
pass over the whole vocabulary for most tokens. llama.cpp's own common sampler does the same.
Ties go to the lowest id, like llama.cpp's greedy sampler (it keeps id order in the array).

Never accept a token the grammar forbids: llama.cpp aborts the process on an end-of-generation
token before the grammar is complete, and throws through its C API on other bad tokens.

References: llama.cpp `include/llama.h` (llama_sampler_init_grammar), `src/llama-grammar.cpp`.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from . import native
from .errors import InvalidRequest
from .sampling import _TOKEN_DATA


class Grammar:
    def __init__(self, vocab, n_vocab: int, gbnf: str, root: str = "root"):
        self.ptr = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), root.encode("utf-8"))
        if not self.ptr:
            raise InvalidRequest("llama.cpp refused the grammar of this request", param="response_format")
        self.n_vocab = n_vocab
        self._one = np.zeros(1, dtype=_TOKEN_DATA)  # [1] scratch for single-token checks
        self._all = np.zeros(n_vocab, dtype=_TOKEN_DATA)  # [V] scratch for whole-vocabulary masks

    @classmethod
    def check(cls, vocab, gbnf: str) -> None:
        """Raise InvalidRequest unless llama.cpp accepts `gbnf` with this vocabulary."""
        cls(vocab, 1, gbnf).free()

    def allows(self, token: int) -> bool:
        d = self._one
        d["id"], d["logit"], d["p"] = token, 0.0, 0.0
        self._apply(d)
        return bool(np.isfinite(d["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """logits [V] -> a copy with the tokens the grammar forbids next at -inf."""
        d = self._all
        d["id"] = np.arange(self.n_vocab, dtype=np.int32)
        d["logit"] = logits
        d["p"] = 0.0
        self._apply(d)  # sets logits to -inf in place and keeps the order
        return d["logit"].copy()  # [V]

    def greedy(self, logits: np.ndarray, argmax: int | None = None) -> int:
        """The token a grammar-constrained greedy sampler picks from `logits` [V]."""
        best = int(native.argmax_rows(logits[None, :])[0]) if argmax is None else int(argmax)
        if self.allows(best):
            return best
        masked = self.mask(logits)
        best = int(np.argmax(masked))  # first maximum = lowest id
        if not np.isfinite(masked[best]):
            raise InvalidRequest("the grammar allows no token here", param="response_format")
        return best

    def accept(self, token: int) -> None:
        """Advance the parse state past `token` (which the grammar must allow)."""
        llama_cpp.llama_sampler_accept(self.ptr, token)

    def clone(self) -> "Grammar":
        """An independent copy of the current parse state (for looking ahead along a path)."""
        twin = object.__new__(Grammar)
        twin.ptr = llama_cpp.llama_sampler_clone(self.ptr)
        twin.n_vocab = self.n_vocab
        twin._one, twin._all = self._one, self._all  # scratch only; the worker thread is single
        return twin

    def _apply(self, d: np.ndarray) -> None:
        arr = llama_cpp.llama_token_data_array(d.ctypes.data_as(llama_cpp.llama_token_data_p), len(d), -1, False)
        llama_cpp.llama_sampler_apply(self.ptr, ctypes.byref(arr))

    def free(self) -> None:
        if self.ptr:
            llama_cpp.llama_sampler_free(self.ptr)
            self.ptr = None
