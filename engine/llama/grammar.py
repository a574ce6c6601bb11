"""A GBNF grammar applied to the target's logits: llama.cpp's grammar sampler, one per request.

What it is: `Grammar` holds a llama.cpp grammar sampler (its parse state follows the tokens
committed so far) and answers the three questions decoding asks of it: may this token come
next (`allows`), which token would a grammar-constrained greedy sampler pick from these
logits (`greedy`), and the logits with every forbidden token at -inf (`mask`, for sampling).
It is not a grammar compiler (schema.py writes the GBNF) and knows nothing of drafts:
speculation asks the same questions at each verify row (engine/speculative/constrain.py).

Why `greedy` checks the argmax first: the unconstrained argmax is the constrained one whenever
the grammar allows it (the grammar only removes tokens), so one single-token check replaces a
pass over the whole vocabulary for most tokens. llama.cpp's own common sampler does the same.
Ties go to the lowest id, like llama.cpp's greedy sampler (it keeps id order in the array).

Closing (`close`): a request that must end in valid JSON before max_tokens (the work-order
API) reserves its last tokens for closing the structure. From there on, among the tokens the
grammar allows, one that ends the open string, array or object (or writes null, false or 0)
wins over the model's choice: the answer ends as soon as the grammar lets it, with whatever
keys it still requires. Plain and speculative decoding close at the same output positions,
so they still agree token for token.

Never accept a token the grammar forbids: llama.cpp aborts the process on an end-of-generation
token before the grammar is complete, and throws through its C API on other bad tokens.

References: llama.cpp `include/llama.h` (llama_sampler_init_grammar), `src/llama-grammar.cpp`.
"""

from __future__ import annotations

import weakref

import llama_cpp
import numpy as np
from llama_cpp import llama_grammar  # noqa: F401  (llama-cpp-python's JSON Schema -> GBNF converter, for schema.py)

from .. import native
from ..errors import InvalidRequest
from .sampler import TOKEN_DATA, apply, fill


_CLOSERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (outside, inside)


def closers(piece, n_vocab: int) -> tuple[list[int], list[int], list[int]]:
    """Token ids that close JSON, computed once per vocabulary:
    outside a string: only "]", "}" and blanks, or null / false / 0;
    inside one, ending it: a quote, then only "]", "}" and blanks;
    inside one, ending it but going on: a quote, then also "," or ":" (a comma opens another
    member, so these come last: preferring them by logit alone can keep a structure open
    until max_tokens, one empty member after another)."""
    key = getattr(piece, "__self__", piece)  # the model a bound `piece` belongs to
    if key not in _CLOSERS:
        outside, ends, more = [], [], []
        for t in range(n_vocab):
            try:
                text = piece(t).decode("utf-8")
            except UnicodeDecodeError:
                continue
            brackets = text and set(text) <= set("]} \n\t") and ("]" in text or "}" in text)
            if brackets or text.strip() in ("null", "false", "0"):
                outside.append(t)
            elif text.startswith('"') and set(text[1:]) <= set("]} \n\t"):
                ends.append(t)
            elif text.startswith('"') and set(text[1:]) <= set("]},: \n\t"):
                more.append(t)
        _CLOSERS[key] = (outside, ends, more)
    return _CLOSERS[key]


def gbnf_parses(gbnf: str) -> bool:
    """Whether llama.cpp's own parser accepts `gbnf` (parsing needs no vocabulary)."""
    ptr = llama_cpp.llama_sampler_init_grammar(None, gbnf.encode("utf-8"), b"root")
    if ptr:
        llama_cpp.llama_sampler_free(ptr)
    return bool(ptr)


class Grammar:
    def __init__(self, vocab, n_vocab: int, gbnf: str, root: str = "root", piece=None):
        self.ptr = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), root.encode("utf-8"))
        if not self.ptr:
            raise InvalidRequest("llama.cpp refused the grammar of this request", param="response_format")
        self.n_vocab = n_vocab
        self.piece = piece  # token -> bytes; needed by close() only
        self.in_string = False  # the JSON text so far ends inside a string (tracked for close())
        self._escaped = False
        self.closed = False  # close() chose a token at least once
        self._one = np.zeros(1, dtype=TOKEN_DATA)  # [1] scratch for single-token checks
        self._all = np.zeros(n_vocab, dtype=TOKEN_DATA)  # [V] scratch for whole-vocabulary masks

    @classmethod
    def check(cls, vocab, gbnf: str) -> None:
        """Raise InvalidRequest unless llama.cpp accepts `gbnf` with this vocabulary."""
        cls(vocab, 1, gbnf).free()

    def allows(self, token: int) -> bool:
        d = self._one
        d["id"], d["logit"], d["p"] = token, 0.0, 0.0
        apply(self.ptr, d)
        return bool(np.isfinite(d["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """logits [V] -> a copy with the tokens the grammar forbids next at -inf."""
        d = fill(self._all, logits)
        apply(self.ptr, d)  # sets logits to -inf in place and keeps the order
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

    def close(self, logits: np.ndarray) -> int:
        """The token that closes the structure soonest: the likeliest allowed closer of the first
        group that has one, else the constrained greedy choice (a key or an enum value the
        grammar still requires)."""
        outside, ends, more = closers(self.piece, self.n_vocab)
        self.closed = True
        for group in ((ends, more) if self.in_string else (outside,)):
            allowed = [t for t in group if self.allows(t)]
            if allowed:
                return max(allowed, key=lambda t: (logits[t], -t))  # ties: the lowest id
        return self.greedy(logits)

    def accept(self, token: int) -> None:
        """Advance the parse state past `token` (which the grammar must allow)."""
        llama_cpp.llama_sampler_accept(self.ptr, token)
        if self.piece is not None:
            for ch in self.piece(token).decode("utf-8", errors="replace"):
                if self._escaped:
                    self._escaped = False
                elif ch == "\\" and self.in_string:
                    self._escaped = True
                elif ch == '"':
                    self.in_string = not self.in_string

    def clone(self) -> "Grammar":
        """An independent copy of the current parse state (for looking ahead along a path)."""
        twin = object.__new__(Grammar)
        twin.ptr = llama_cpp.llama_sampler_clone(self.ptr)
        twin.n_vocab, twin.piece = self.n_vocab, self.piece
        twin.in_string, twin._escaped, twin.closed = self.in_string, self._escaped, self.closed
        twin._one, twin._all = self._one, self._all  # scratch only; the worker thread is single
        return twin

    def free(self) -> None:
        if self.ptr:
            llama_cpp.llama_sampler_free(self.ptr)
            self.ptr = None
