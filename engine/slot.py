"""One active sequence in the shared context: its request, sampler, text and positions.

A slot is bound to a fixed sequence id (= KV stream) of the context. It does no
decoding itself; the worker batches all slots into one decode per step.
"""

from __future__ import annotations

import time

from .llama.grammar import Grammar
from .llama.model import Model
from .request import GenerationRequest, StreamEvent, Usage
from .llama.sampler import Sampler
from .speculative.state import SpecState
from .text import TextStream


class Slot:
    def __init__(self, seq_id: int):
        self.seq_id = seq_id
        self.req: GenerationRequest | None = None
        self.spec: SpecState | None = None
        self.cached: list[int] = []  # tokens whose KV the last request left (prefix.py)
        self.cached_drafter = None  # the drafter whose state also covers them
        # recurrent memory: (n, a copy of the state after the last prompt's n tokens), so a later prompt
        # that shares them but not all of `cached` still reuses them (prefix.py)
        self.checkpoint: tuple[int, object] | None = None

    def start(self, req: GenerationRequest, model: Model, max_new: int, spec: SpecState | None = None,
              reused: int = 0) -> None:
        self.req = req
        self.spec = spec  # None: this request decodes plainly
        grammar = Grammar(model.vocab, model.n_vocab, req.grammar, piece=model.piece) if req.grammar else None
        # the last close_within tokens are for closing the grammar's structure (Grammar.close)
        self.close_from = (max(max_new - req.close_within, 0)
                           if grammar and req.close_within and req.sampling.greedy else None)
        self.sampler = Sampler(req.sampling, model.n_vocab, window=max_new, grammar=grammar, close_from=self.close_from)
        self.text = TextStream(model.piece, req.stop)
        self.pending = list(req.prompt_tokens[reused:])  # prompt tokens not yet decoded
        self.n_past = reused  # tokens of this sequence in the KV cache
        self.reused = reused  # prompt tokens whose KV a previous request left
        self.output: list[int] = []
        self.last: int = -1  # last sampled token, decoded next step
        self.max_new = max_new
        self.t_first: float | None = None
        self.logprobs_step: list[float] | None = None  # of the tokens the last step committed

    @property
    def request(self) -> GenerationRequest:
        """The request it runs; only a busy slot is asked."""
        assert self.req is not None, "a free slot has no request"
        return self.req

    @property
    def busy(self) -> bool:
        return self.req is not None

    @property
    def prefilling(self) -> bool:
        return bool(self.pending)

    def history(self) -> list[int]:
        """Every committed token: prompt + output (the anchor is the last)."""
        return self.request.prompt_tokens + self.output

    def usage(self, speedup: float | None = None) -> Usage:
        now = time.perf_counter()
        first = self.t_first or now
        return Usage(
            prompt_tokens=len(self.request.prompt_tokens),
            cached_tokens=self.reused,
            closed_early=bool(self.sampler.grammar and self.sampler.grammar.closed),
            completion_tokens=len(self.output),
            prefill_ms=(first - self.request.submitted_at) * 1000.0,
            decode_ms=(now - first) * 1000.0,
            speculation=self.spec.stats.report(speedup) if self.spec is not None else None,
        )

    def emit(self, event: StreamEvent) -> bool:
        """Hand an event to the request's sink; False if the receiver is gone."""
        try:
            self.request.send(event)
            return True
        except Exception:  # a closed event loop or queue: treat as a disconnect
            return False

    def release(self) -> None:
        """Free the request's state (the worker has dealt with the KV cache and drafter first)."""
        self.sampler.free()
        if self.spec is not None:
            self.spec.free()
            self.spec = None
        self.req = None
