"""The engine: one worker thread that owns the model and context and serves all requests.

Callers (any thread) `submit` a `GenerationRequest`; it is validated and tokenized on
the caller's thread, so a bad request fails before anything is queued. The worker runs
continuous batching: every step it admits waiting requests into free slots, drops
cancelled ones (freeing their KV cells), builds one batch with one token per generating
slot plus prompt chunks of prefilling slots, decodes it once, and samples each slot
from its own row. Requests join and leave between steps.

Not HTTP: events go to `request.sink`; the server adapts them to SSE/JSON.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass

from .chat import ChatTemplate
from .context import Context, ContextConfig
from .errors import ContextLengthExceeded, EngineStopped, GenerationFailed, InvalidRequest
from .model import Model, ModelInfo
from .request import Completion, GenerationRequest, RequestHandle, StreamEvent
from .sampling import SamplingParams
from .slot import Slot

log = logging.getLogger("flashdesk.engine")


@dataclass(frozen=True)
class EngineConfig:
    n_ctx: int = 4096  # context per sequence
    n_parallel: int = 4  # sequences decoded together
    n_batch: int = 512
    n_threads: int = max(1, min(os.cpu_count() or 1, 8))
    n_gpu_layers: int = -1
    verbose: bool = False


class Engine:
    def __init__(self, model: Model, config: EngineConfig = EngineConfig()):
        self.model = model
        self.config = config
        self.ctx = Context(model, ContextConfig(config.n_ctx, config.n_parallel, config.n_batch, config.n_threads))
        self.n_ctx = self.ctx.n_ctx_seq
        self.chat_template = ChatTemplate(model) if model.info.has_chat_template else None
        self._slots = [Slot(i) for i in range(self.ctx.n_seq)]
        self._queue: queue.Queue[GenerationRequest | None] = queue.Queue()
        self._waiting: list[GenerationRequest] = []  # taken off the queue, no free slot yet
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flashdesk-engine", daemon=True)
        self._thread.start()

    @classmethod
    def load(cls, path: str, config: EngineConfig = EngineConfig()) -> "Engine":
        model = Model(path, n_gpu_layers=config.n_gpu_layers, verbose=config.verbose)
        try:
            return cls(model, config)
        except BaseException:
            model.close()
            raise

    @property
    def info(self) -> ModelInfo:
        return self.model.info

    # -- caller side -----------------------------------------------------------------

    def render_chat(self, messages: list[dict]) -> str:
        if self.chat_template is None:
            raise InvalidRequest("this model has no chat template; use a raw prompt instead")
        return self.chat_template.render(messages)

    def tokenize_prompt(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, list):
            bad = [t for t in prompt if not (isinstance(t, int) and 0 <= t < self.model.n_vocab)]
            if bad:
                raise InvalidRequest(f"prompt has token ids outside the vocabulary: {bad[:5]}", param="prompt")
            return list(prompt)
        bos = self.chat_template.bos_text if self.chat_template else ""
        add_bos = None if not (bos and prompt.startswith(bos)) else False  # template wrote BOS itself
        return self.model.tokenize(prompt, add_bos=add_bos)

    def submit(self, req: GenerationRequest) -> GenerationRequest:
        """Validate, tokenize and queue `req`; raises EngineError for a bad request."""
        if self._stopping.is_set():
            raise EngineStopped("the engine is shutting down")
        req.sampling.validate()
        if req.max_tokens is not None and req.max_tokens < 1:
            raise InvalidRequest("max_tokens must be at least 1", param="max_tokens")
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
        self._queue.put(req)
        return req

    def generate(self, prompt: str | list[int], *, max_tokens: int | None = None,
                 sampling: SamplingParams = SamplingParams(), stop: list[str] | None = None) -> RequestHandle:
        handle = RequestHandle(GenerationRequest(prompt, max_tokens, sampling, list(stop or [])))
        self.submit(handle.request)
        return handle

    def complete(self, prompt: str | list[int], **kw) -> Completion:
        return Completion.collect(iter(self.generate(prompt, **kw)))

    def chat(self, messages: list[dict], **kw) -> Completion:
        return self.complete(self.render_chat(messages), **kw)

    def stats(self) -> dict:
        busy = sum(s.busy for s in self._slots)
        return {"active": busy, "queued": self._queue.qsize() + len(self._waiting), "slots": len(self._slots)}

    def close(self) -> None:
        if not self._stopping.is_set():
            self._stopping.set()
            self._queue.put(None)  # wake the worker
            self._thread.join()
            self.ctx.close()
            self.model.close()

    # -- worker side -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._admit()
                for slot in self._slots:
                    if slot.busy and slot.req.cancelled.is_set():
                        self._finish(slot, StreamEvent(finish_reason="cancelled"))
                if any(s.busy for s in self._slots):
                    try:
                        self._step()
                    except Exception as e:  # a bug, not a bad request: fail this step's requests, go on
                        log.exception("engine step failed")
                        for slot in self._slots:
                            if slot.busy:
                                self._finish(slot, StreamEvent(error=GenerationFailed(f"engine error: {e}")))
        finally:
            stopped = EngineStopped("the engine stopped before this request finished")
            for slot in self._slots:
                if slot.busy:
                    self._finish(slot, StreamEvent(error=stopped))
            for req in self._waiting + self._drain():
                try:
                    req.sink(StreamEvent(error=stopped))
                except Exception:  # its receiver is gone too
                    pass
            self._waiting.clear()

    def _drain(self) -> list[GenerationRequest]:
        out = []
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
        idle = not any(s.busy for s in self._slots) and not waiting
        try:
            while True:
                r = self._queue.get(block=idle)
                idle = False
                if r is None:  # close() wakes us with None
                    return
                waiting.append(r)
        except queue.Empty:
            pass
        for slot in self._slots:  # lowest free sequence id first keeps batches contiguous
            if not waiting:
                break
            if slot.busy:
                continue
            req = waiting.pop(0)
            if req.cancelled.is_set():
                req.sink(StreamEvent(finish_reason="cancelled"))
                continue
            max_new = req.max_tokens or (self.n_ctx - len(req.prompt_tokens))
            slot.start(req, self.model, max_new)

    def _step(self) -> None:
        batch = self.ctx.batch
        batch.clear()
        active = [s for s in self._slots if s.busy]
        prefill_room = batch.capacity - sum(not s.prefilling for s in active)
        for slot in active:  # in sequence id order, which keeps llama.cpp's ubatches whole
            slot.row = None
            if slot.prefilling:
                n = min(len(slot.pending), prefill_room)
                if n == 0:
                    continue
                prefill_room -= n
                chunk, slot.pending = slot.pending[:n], slot.pending[n:]
                for j, tok in enumerate(chunk):
                    last = not slot.pending and j == n - 1
                    row = batch.add(tok, slot.n_past + j, slot.seq_id, logits=last)
                    if last:
                        slot.row = row
                slot.n_past += n
            else:
                slot.row = batch.add(slot.last, slot.n_past, slot.seq_id, logits=True)
                slot.n_past += 1
        try:
            self.ctx.decode(batch)
        except GenerationFailed as e:
            for slot in active:
                if slot.row is not None or slot.prefilling:
                    self._finish(slot, StreamEvent(error=e))
            return
        for slot in active:
            if slot.row is not None:
                self._commit(slot, slot.sampler.sample(self.ctx.ptr, slot.row))

    def _commit(self, slot: Slot, token: int) -> None:
        if slot.t_first is None:
            slot.t_first = time.perf_counter()
        slot.output.append(token)
        slot.last = token
        if self.model.is_eog(token):
            self._finish(slot, StreamEvent(text=slot.text.flush(), tokens=[token], finish_reason="stop"))
            return
        text = slot.text.push(token)
        if slot.text.stopped_by is not None:
            self._finish(slot, StreamEvent(text=text, tokens=[token], finish_reason="stop"))
        elif len(slot.output) >= slot.max_new or slot.n_past + 1 >= self.n_ctx:
            self._finish(slot, StreamEvent(text=text + slot.text.flush(), tokens=[token], finish_reason="length"))
        elif not slot.emit(StreamEvent(text=text, tokens=[token])):
            self._finish(slot, StreamEvent(finish_reason="cancelled"))

    def _finish(self, slot: Slot, event: StreamEvent) -> None:
        """Send the final event, free the sequence's KV cells and the slot."""
        event.usage = slot.usage()
        slot.emit(event)
        self.ctx.forget(slot.seq_id)
        slot.release()
