"""What goes into the engine (`GenerationRequest`) and what comes out (`StreamEvent`).

Plain dataclasses: the server turns HTTP bodies into these at its boundary, and
Python users build them directly. The worker thread calls `request.sink(event)`
for every event; `RequestHandle` is the queue-backed sink for synchronous callers.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal

from .errors import EngineError
from .sampling import SamplingParams
from .speculative.params import SpecParams, SpecReport

FinishReason = Literal["stop", "length", "cancelled"]  # why a request's output ended (no error)

_ids = itertools.count(1)


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV a previous request left (not decoded again)
    closed_early: bool = False  # the grammar was closed to end within max_tokens (close_within)
    prefill_ms: float = 0.0  # submit -> first token (queueing + prompt processing)
    decode_ms: float = 0.0  # first token -> last token
    speculation: SpecReport | None = None  # what speculation did, when the request could speculate
    counted: bool = True  # False: the token counts are unknown (a backend that sent none), not zero

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def decode_tok_per_s(self) -> float:
        n = self.completion_tokens - 1
        return n / (self.decode_ms / 1000.0) if n > 0 and self.decode_ms > 0 else 0.0


@dataclass
class StreamEvent:
    """One step of output for one request. The last event has `finish_reason` or `error`."""

    text: str = ""  # newly final text (may be "")
    tokens: list[int] = field(default_factory=list)  # token ids committed in this step
    finish_reason: FinishReason | None = None
    usage: Usage | None = None  # set on the last event
    error: EngineError | None = None
    logprobs: list[float] | None = None  # log p of each token under the target (when requested)
    # The bytes of each token where no token ids are known here (a backend's answer, with logprobs)
    pieces: list[bytes] | None = None

    @property
    def final(self) -> bool:
        return self.finish_reason is not None or self.error is not None


@dataclass(frozen=True)
class ChatPrompt:
    """The messages of a chat request, kept as messages: what a backend server is sent (server/runtime/backend.py),
    which renders its own chat template (it knows the model's; we may not have the model file at all).
    The local engine renders the template itself, into a str."""

    messages: tuple[dict, ...]


@dataclass
class GenerationRequest:
    prompt: str | list[int] | ChatPrompt  # text (control tokens are parsed), token ids, or a backend's chat
    max_tokens: int | None = None  # None = until the context is full
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: list[str] = field(default_factory=list)
    speculative: SpecParams = field(default_factory=SpecParams)
    grammar: str | None = None  # GBNF (root rule "root") the output must follow, e.g. from schema.py
    # The JSON format the grammar was made from, as the client sent it: a backend is given it and enforces it
    # with its own guided decoding; the local engine follows `grammar`. Either way the answer is validated.
    response_format: dict | None = None
    logprobs: bool = False  # report log p of every output token (StreamEvent.logprobs)
    # With a grammar: the last close_within of max_tokens close the structure (Grammar.close),
    # so the answer is complete when it ends; greedy only (sampling requests ignore it)
    close_within: int = 0
    sink: Callable[[StreamEvent], None] | None = None
    id: int = field(default_factory=lambda: next(_ids))
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted_at: float = field(default_factory=time.perf_counter)
    prompt_tokens: list[int] = field(default_factory=list)  # filled in by Engine.submit

    def send(self, event: StreamEvent) -> None:
        """Hand `event` to the sink, which Engine.submit made sure every queued request has."""
        assert self.sink is not None, "a submitted request has a sink"
        self.sink(event)

    def cancel(self) -> None:
        """Ask the worker to stop this request; it stops within one step."""
        self.cancelled.set()


class RequestHandle:
    """A blocking iterator over a request's events, for callers without an event loop."""

    def __init__(self, request: GenerationRequest):
        self.request = request
        self._q: queue.Queue[StreamEvent] = queue.Queue()
        request.sink = self._q.put

    def __iter__(self) -> Iterator[StreamEvent]:
        while True:
            ev = self._q.get()
            yield ev
            if ev.final:
                return

    def cancel(self) -> None:
        self.request.cancel()


@dataclass
class Completion:
    """A finished generation, collected from its events."""

    text: str
    tokens: list[int]
    finish_reason: FinishReason
    usage: Usage
    logprobs: list[float] | None = None  # one per token, or None
    pieces: list[bytes] | None = None  # the tokens' bytes where their ids are unknown (StreamEvent.pieces)

    @classmethod
    def collect(cls, events: Iterator[StreamEvent]) -> "Completion":
        text, tokens, logprobs, pieces = [], [], [], []
        for ev in events:
            if ev.error is not None:
                raise ev.error
            text.append(ev.text)
            tokens.extend(ev.tokens)
            logprobs.extend(ev.logprobs or [])
            pieces.extend(ev.pieces or [])
            if ev.final:
                n = len(tokens) or len(pieces)
                return cls("".join(text), tokens, ev.finish_reason or "stop", ev.usage or Usage(),
                           logprobs if len(logprobs) == n and n else None, pieces or None)
        raise RuntimeError("event stream ended without a final event")
