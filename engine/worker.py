"""The engine: one worker thread that owns the model and context and serves all requests.

Callers (any thread) `submit` a `GenerationRequest`; it is validated and tokenized on
the caller's thread, so a bad request fails before anything is queued. The worker runs
continuous batching: every step it admits waiting requests into free slots (the one
whose kept prompt prefix saves the most, prefix.py), drops cancelled ones, builds one batch
with one token per generating slot plus prompt chunks of prefilling slots, decodes it
once, and samples each slot from its own row. Requests join and leave between steps.

Admission is first come, first served: requests wait in submission order for a free
slot. At most `max_queue` may wait; past that, `submit` refuses at once with ServerBusy and
an estimate of when to retry, so a client under load gets an answer, never only a timeout.

Not HTTP: events go to `request.sink`; the server adapts them to SSE/JSON.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable

from . import chunks, prefix
from .api import LOCAL
from .errors import (ContextLengthExceeded, EngineStopped, GenerationFailed, InvalidRequest,
                     ServerBusy)
from .llama import ggml
from .llama.chat_template import ChatTemplate
from .llama.context import Context, ContextConfig, on_own_thread
from .llama.grammar import Grammar
from .llama.model import Model, ModelInfo
from .request import ChatPrompt, Completion, FinishReason, GenerationRequest, RequestHandle, StreamEvent
from .sampling import SamplingParams
from .slot import Slot
from .speculative.drafters.base import Drafter
from .speculative.params import AUTO, Mode, Selector, SpecParams
from .speculative.setup import DrafterFactory, Speculation
from .stats import EngineStats, SpeculationFacts, Totals

log = logging.getLogger("flashdesk.engine")

ANSWER_TOKENS = 128  # an answer's length before any has finished (admission prices gaps with it)


@dataclass(frozen=True)
class EngineConfig:
    n_ctx: int = 4096  # context per sequence
    n_parallel: int = 4  # sequences decoded together
    max_queue: int = 16  # requests that may wait for a free slot (first come, first served); more: ServerBusy
    n_batch: int = 512
    n_threads: int = max(1, min(os.cpu_count() or 1, 8))
    n_gpu_layers: int = -1
    verbose: bool = False
    spec_mode: Mode = AUTO  # default for requests that do not say (SpecParams.mode)
    spec_block: int = 8  # the largest B the chooser may pick (or B itself for a fixed block)
    cost_cache: str | None = None  # JSON file for what decodes cost on this machine (learned, kept across starts)
    measured_cache: str | None = None  # JSON file for what speculation did for answers here (stats.MeasuredSpeedup)
    draft: str | None = None  # a DFlash draft GGUF (2 or v1) for this model: enables mode "dflash"
    selector: Selector = "walk"  # default path selector through a DFlash 2 lattice (a v1 draft has none)
    # Speculate even where verify rows are not bit-identical to single-token decodes (CUDA):
    # the output then follows the target's batched numerics, not plain decoding bit for bit.
    spec_inexact: bool = False
    chat_template_vars: dict = field(default_factory=dict)  # extra chat-template variables (catalog entry)


class Engine:
    """The local engine (engine/api.py EngineAPI): a llama.cpp model, its slots and its worker thread."""

    capabilities = LOCAL

    def __init__(self, model: Model, config: EngineConfig = EngineConfig(), stop: threading.Event | None = None,
                 drafters: Iterable[Drafter | DrafterFactory] = ()):
        """`stop`: once set, the start-up checks below give up (EngineStopped) instead of finishing.
        `drafters`: speculative modes beside the built-in ones (engine/speculative/setup.py)."""
        self.model = model
        self.config = config
        # rollback: a recurrent memory keeps a state snapshot per token a verify's rejected tail can hold
        self.ctx = Context(model, ContextConfig(config.n_ctx, config.n_parallel, config.n_batch, config.n_threads,
                                                rollback=config.spec_block - 1))
        self.n_ctx = self.ctx.n_ctx_seq
        if stop is not None:
            self.ctx.set_abort(stop.is_set)  # until the worker starts: its own flag stops it between steps
        self.chat_template = ChatTemplate(model, config.chat_template_vars) if model.info.has_chat_template else None
        self._slots = [Slot(i) for i in range(self.ctx.n_seq)]
        # how prompts are cut so that answers never depend on what was cached (measured, like the judge below)
        self.chunks = on_own_thread(lambda: chunks.measure(self.ctx))
        # the drafters, the exactness judge (measured here, before the worker starts) and the learned costs
        self.speculation = Speculation(model, self.ctx, config, self.chunks, drafters=drafters,
                                       on_gpu=ggml.supports_gpu_offload() and config.n_gpu_layers != 0)
        self.drafters = self.speculation.drafters  # name -> drafter: the speculative modes this engine has
        if stop is not None:
            self.ctx.set_abort(None)
        self.totals = Totals()  # for /metrics
        self._admission = threading.Lock()  # guards the three counts below (callers' threads and the worker)
        self._in_flight = 0  # submitted, final event not yet sent: running or waiting
        self._refused = 0  # ServerBusy so far
        self._mean_s: float | None = None  # moving mean of a request's time from submit to its final event
        self._mean_answer = float(ANSWER_TOKENS)  # moving mean of an answer's tokens (worker thread)
        self._queue: queue.Queue[GenerationRequest | None] = queue.Queue()
        self._waiting: list[GenerationRequest] = []  # taken off the queue, no free slot yet
        self._stopping = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="flashdesk-engine", daemon=True)
        self._thread.start()

    @classmethod
    def load(cls, path: str, config: EngineConfig = EngineConfig(), stop: threading.Event | None = None,
             drafters: Iterable[Drafter | DrafterFactory] = ()) -> "Engine":
        """`stop`: set it (from any thread) to give the load up within a fraction of a second."""
        model = Model(path, n_gpu_layers=config.n_gpu_layers, verbose=config.verbose,
                      stop=stop.is_set if stop is not None else None)
        try:
            return cls(model, config, stop, drafters)
        except BaseException:
            model.close()
            raise

    @property
    def info(self) -> ModelInfo:
        return self.model.info

    @property
    def description(self) -> str:
        return self.model.info.description

    # -- caller side -----------------------------------------------------------------

    def render_chat(self, messages: list[dict], variables: dict | None = None) -> str:
        if self.chat_template is None:
            raise InvalidRequest("this model has no chat template; use a raw prompt instead")
        return self.chat_template.render(messages, variables)

    def tokenize_prompt(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, list):
            bad = [t for t in prompt if not (isinstance(t, int) and 0 <= t < self.model.n_vocab)]
            if bad:
                raise InvalidRequest(f"prompt has token ids outside the vocabulary: {bad[:5]}", param="prompt")
            return list(prompt)
        bos = self.chat_template.bos_text if self.chat_template else ""
        add_bos = None if not (bos and prompt.startswith(bos)) else False  # template wrote BOS itself
        return self.model.tokenize(prompt, add_bos=add_bos)

    def piece(self, token: int) -> bytes:
        return self.model.piece(token)

    def submit(self, req: GenerationRequest) -> GenerationRequest:
        """Validate, tokenize and queue `req`; raises EngineError for a bad request."""
        if self._stopping.is_set():
            raise EngineStopped("the engine is shutting down")
        req.sampling.validate()
        req.speculative.validate()
        self.speculation.check(req.speculative)
        if req.max_tokens is not None and req.max_tokens < 1:
            raise InvalidRequest("max_tokens must be at least 1", param="max_tokens")
        if req.grammar:
            Grammar.check(self.model.vocab, req.grammar)
        if isinstance(req.prompt, ChatPrompt):  # the messages themselves are for a backend, which renders them
            raise InvalidRequest("this engine takes a rendered prompt; render_chat() gives it", param="prompt")
        req.prompt_tokens = self.tokenize_prompt(req.prompt)
        n_prompt = len(req.prompt_tokens)
        if n_prompt == 0:
            raise InvalidRequest("the prompt is empty", param="prompt")
        wanted = req.max_tokens or 1
        if n_prompt + wanted > self.n_ctx:
            raise ContextLengthExceeded(
                f"This model's context is {self.n_ctx} tokens, but the prompt has {n_prompt} tokens "
                f"and {wanted} more were requested. HINT: shorten the prompt, lower max_tokens, "
                "or start the server with a larger --ctx.",
                param="messages",
            )
        if req.sink is None:
            raise InvalidRequest("request has no sink; use Engine.generate() for an iterator")
        n_slots = len(self._slots)
        with self._admission:
            if self._in_flight - n_slots >= self.config.max_queue:
                self._refused += 1
                wait = self._retry_after()
                raise ServerBusy(f"The server is busy: {n_slots} answers are being written and "
                                 f"{self.config.max_queue} more requests are waiting. HINT: try again in {wait} s, "
                                 "or start the server with a larger --max-queue or --parallel.", retry_after=wait)
            self._in_flight += 1
        req.sink = self._counted(req.sink)
        self._queue.put(req)
        return req

    def _counted(self, sink):
        """`sink` that, at the request's final event (whatever ends it), frees its place in the
        admission count and updates the mean request time."""
        t0 = time.perf_counter()
        done: list[bool] = []

        def counted(ev: StreamEvent) -> None:
            if ev.final and not done:
                done.append(True)
                s = time.perf_counter() - t0
                with self._admission:
                    self._in_flight -= 1
                    self._mean_s = s if self._mean_s is None else 0.8 * self._mean_s + 0.2 * s
            sink(ev)
        return counted

    def _retry_after(self) -> int:
        """Seconds until a slot is likely free: a request's mean time over the slots that share the
        work (5 s before any request has finished), between 1 and 60."""
        mean = self._mean_s if self._mean_s is not None else 5.0
        return max(1, min(60, math.ceil(mean / len(self._slots))))

    def generate(self, prompt: str | list[int], *, max_tokens: int | None = None,
                 sampling: SamplingParams = SamplingParams(), stop: list[str] | None = None,
                 speculative: SpecParams = SpecParams(), grammar: str | None = None,
                 logprobs: bool = False, close_within: int = 0) -> RequestHandle:
        handle = RequestHandle(GenerationRequest(prompt, max_tokens, sampling, list(stop or []), speculative,
                                                 grammar=grammar, logprobs=logprobs, close_within=close_within))
        self.submit(handle.request)
        return handle

    def complete(self, prompt: str | list[int], **kw) -> Completion:
        return Completion.collect(iter(self.generate(prompt, **kw)))

    def chat(self, messages: list[dict], **kw) -> Completion:
        return self.complete(self.render_chat(messages), **kw)

    def speculation_facts(self) -> SpeculationFacts:
        return self.speculation.facts()

    async def health(self) -> None:  # engine/api.py: nothing behind this engine, no server's figures
        return None

    async def models(self) -> None:
        return None

    async def spec_figures(self) -> None:
        return None

    def stats(self) -> EngineStats:
        return EngineStats(active=sum(s.busy for s in self._slots), queued=self._queue.qsize() + len(self._waiting),
                           slots=len(self._slots), max_queue=self.config.max_queue, refused=self._refused)

    def stop(self) -> None:
        """Refuse new requests and end every open one with an EngineStopped error after the step
        under way (any thread; returns at once). close() then frees the model."""
        self._stopping.set()
        self._queue.put(None)  # wake the worker

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.stop()
            self._thread.join()
            self.speculation.close()  # its draft contexts point into the target context: freed first
            self.ctx.close()
            self.model.close()

    # -- worker side -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._admit()
                for slot in self._slots:
                    if slot.busy and slot.request.cancelled.is_set():
                        self._finish(slot, StreamEvent(finish_reason="cancelled"))
                if any(s.busy for s in self._slots):
                    try:
                        self._step()
                    except Exception as e:  # a bug, not a bad request: fail this step's requests, go on
                        log.exception("engine step failed")
                        for slot in self._slots:
                            if slot.busy:
                                self._finish(slot, StreamEvent(error=GenerationFailed(f"engine error: {e}")))
                elif self.speculation.has_idle_work and self._queue.empty():
                    self.speculation.idle(self._slots[-1])
        finally:
            stopped = EngineStopped("the engine stopped before this request finished")
            for slot in self._slots:
                if slot.busy:
                    self._finish(slot, StreamEvent(error=stopped))
            for req in self._waiting + self._drain():
                try:
                    req.send(StreamEvent(error=stopped))
                except Exception:  # its receiver is gone too
                    pass
            self._waiting.clear()

    def _drain(self) -> list[GenerationRequest]:
        out: list[GenerationRequest] = []
        while True:
            try:
                r = self._queue.get_nowait()
            except queue.Empty:
                return out
            if r is not None:
                out.append(r)

    def _admit(self) -> None:
        """Move queued requests into free slots; block only when there is nothing to do."""
        waiting = self._waiting
        idle = not any(s.busy for s in self._slots) and not waiting and not self.speculation.has_idle_work
        try:
            while True:
                r = self._queue.get(block=idle)
                idle = False
                if r is None:  # close() wakes us with None
                    return
                waiting.append(r)
        except queue.Empty:
            pass
        for req in [r for r in waiting if r.cancelled.is_set()]:  # a client that gave up frees its place now
            waiting.remove(req)
            req.send(StreamEvent(finish_reason="cancelled"))
        while waiting:
            free = [s for s in self._slots if not s.busy]
            if not free:
                break
            req = waiting.pop(0)
            if req.cancelled.is_set():
                req.send(StreamEvent(finish_reason="cancelled"))
                continue
            busy = [s.seq_id for s in self._slots if s.busy]
            gap = self.speculation.gap_tokens(self._mean_answer)
            slot = prefix.best_slot(free, req.prompt_tokens, self.chunks, busy, gap)
            max_new = req.max_tokens or (self.n_ctx - len(req.prompt_tokens))
            try:
                spec, reused = self.speculation.admit(req, slot)
            except Exception as e:  # a bug (a failed measurement, say): this request fails, the worker goes on
                log.exception("could not start a request")
                prefix.drop(slot, self.ctx)  # whatever it held may be half-overwritten
                req.send(StreamEvent(error=GenerationFailed(f"engine error: {e}")))
                continue
            slot.start(req, self.model, max_new, spec, reused)

    def _step(self) -> None:
        active = [s for s in self._slots if s.busy]
        try:
            committed = self.speculation.step(active)
        except GenerationFailed as e:  # llama.cpp refused the batch: it left no trace in the cache
            for slot in active:
                self._finish(slot, StreamEvent(error=e))
            return
        for slot in active:
            if slot.seq_id in committed:
                self._commit(slot, committed[slot.seq_id])

    def _commit(self, slot: Slot, tokens: list[int]) -> None:
        """Append this step's tokens in order; the first end condition discards the rest."""
        if slot.t_first is None:
            slot.t_first = time.perf_counter()
        lp, slot.logprobs_step = slot.logprobs_step, None

        def event(text: str, done: list[int], reason: FinishReason | None = None) -> StreamEvent:
            return StreamEvent(text, done, reason, logprobs=lp[:len(done)] if lp is not None else None)

        text = ""
        for i, token in enumerate(tokens):
            done = tokens[: i + 1]
            slot.output.append(token)
            slot.last = token
            if self.model.is_eog(token):
                return self._finish(slot, event(text + slot.text.flush(), done, "stop"))
            text += slot.text.push(token)
            if slot.text.stopped_by is not None:
                return self._finish(slot, event(text, done, "stop"))
            # the next decode would put the anchor at position prompt + output - 1
            n_prompt = len(slot.request.prompt_tokens)
            if len(slot.output) >= slot.max_new or n_prompt + len(slot.output) >= self.n_ctx:
                return self._finish(slot, event(text + slot.text.flush(), done, "length"))
        if not slot.emit(event(text, list(tokens))):
            self._finish(slot, StreamEvent(finish_reason="cancelled"))

    def _finish(self, slot: Slot, event: StreamEvent) -> None:
        """Send the final event; keep the committed KV as a prefix for the next request; free the slot."""
        event.usage = slot.usage(speedup=self.speculation.finished(slot.spec))
        self._mean_answer = 0.8 * self._mean_answer + 0.2 * len(slot.output)
        self.totals.count(event)
        slot.emit(event)
        prefix.keep(slot, self.ctx, event.error is None, self.chunks)
        slot.release()
