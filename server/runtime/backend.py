"""The backend engine: the engine's interface (`submit(GenerationRequest)`, `StreamEvent`s to the
request's sink) in front of an OpenAI-compatible backend, so the routes serve a vLLM or SGLang
server exactly as they serve the local llama.cpp engine.

Like the local engine it owns one thread: an asyncio loop with one HTTP client, where every
request is one streamed backend request. `submit` waits until the backend has accepted the
request (so a refused or unreachable backend is an HTTP status, not a broken stream), then the
chunks flow to the sink. A cancelled request (the client hung up) is seen within WATCH_S and
its backend request is closed, which is how vLLM, SGLang and llama.cpp learn to stop.

What this is not: the wire format (server/runtime/backend_wire.py) or the settings (server/settings.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import cast

import httpx

from engine import ChatPrompt, EngineError, GenerationRequest, InvalidRequest, StreamEvent, Usage
from engine.errors import EngineStopped
from engine.request import FinishReason
from engine.speculative.params import AUTO
from engine.api import Capabilities
from engine.stats import EngineStats, SpeculationFacts, Totals

from . import backend_wire
from .backend_wire import BackendFailed, BackendUnavailable, UnsupportedWithBackend

log = logging.getLogger("flashdesk.server")

WATCH_S = 0.05  # how often the cancel flags are read: the local engine reads them once per step


class BackendEngine:
    """A backend server as an engine (engine/api.py EngineAPI), through its OpenAI-compatible API."""

    # the backend's own tokens, no grammar here to close early; log-probabilities only where it sends them
    capabilities = Capabilities(close_within=False, logprobs=False, backend=True)

    def __init__(self, url: str, key: str | None = None):
        self.url = backend_wire.base_url(url)
        self.model_name = ""  # what resolve() chose
        self.n_ctx: int | None = None  # the backend's context length, where it says (vLLM does)
        self.description = f"the backend at {self.url}"  # EngineAPI.description, for the log
        self.totals = Totals()  # as Engine.totals
        # llama-cpp-python's server takes a schema only as {"type": "json_object", "schema": ...}; once it has
        # refused OpenAI's json_schema, every schema is sent so (backend_wire.json_object_dialect)
        self.json_object_schemas = False
        self._active: dict[int, tuple[GenerationRequest, asyncio.Task]] = {}
        self._stopping = False  # stop(): the server shuts down
        # The backend's last GET /v1/models entries. While answers stream they stand in for asking again: a
        # stream is proof enough that it is up, and llama-cpp-python's server by default ends every streaming
        # answer when any other request comes in, GET /v1/models included.
        self._served: list[dict] | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="flashdesk-backend", daemon=True)
        self._thread.start()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        timeout = httpx.Timeout(backend_wire.READ_TIMEOUT_S, connect=backend_wire.CONNECT_TIMEOUT_S)
        self._client = self._call(self._make_client(headers, timeout))
        self._watcher = asyncio.run_coroutine_threadsafe(self._watch(), self._loop)

    async def _make_client(self, headers: dict, timeout: httpx.Timeout) -> httpx.AsyncClient:
        return httpx.AsyncClient(headers=headers, timeout=timeout)  # made on the loop that uses it

    def _call(self, coro):
        """Run `coro` on the engine's loop and wait for it (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _await(self, coro):
        """Run `coro` on the engine's loop and await it from the server's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    # -- what the routes call, as on engine.Engine --------------------------------------

    def render_chat(self, messages: list[dict], variables: dict | None = None) -> ChatPrompt:
        return ChatPrompt(tuple(dict(m) for m in messages))  # the backend renders with its own settings

    def tokenize_prompt(self, prompt) -> list[int]:
        raise UnsupportedWithBackend("counting a prompt's tokens needs the model's tokenizer here; with "
                                     "--backend the backend counts them")

    def piece(self, token: int) -> bytes:
        raise UnsupportedWithBackend("a token's text needs the model's tokenizer here; with --backend the "
                                     "answers carry their pieces")

    def submit(self, req: GenerationRequest) -> GenerationRequest:
        """Validate `req`, send it and wait until the backend accepts it; raises EngineError."""
        if self._stopping:
            raise EngineStopped("the server is shutting down")
        req.sampling.validate()
        backend_wire.refuse_unsupported(req)
        if req.max_tokens is not None and req.max_tokens < 1:
            raise InvalidRequest("max_tokens must be at least 1", param="max_tokens")
        if req.sink is None:
            raise InvalidRequest("request has no sink")
        path, body = backend_wire.request_body(req, self.model_name)
        self._call(self._start(req, path, body))
        return req

    def resolve(self, model: str | None) -> dict | None:
        """Ask the backend which model to drive (before serving; blocking): `model`, or the one it serves
        when None. Returns its GET /v1/models entry, or None when the backend cannot be reached but
        `model` was named (requests then answer 503 until it is up). Raises BackendUnavailable or
        BackendFailed when there is no model to drive."""
        if model is not None:
            self._named(model)
        try:
            models = self._call(self._models())
        except BackendUnavailable as e:
            if model is None:
                raise BackendUnavailable(f"{e.message}; without --backend-model NAME flashdesk must ask it which "
                                         "model to drive before it can start") from None
            log.warning("%s", e.message)
            return None
        ids = [m.get("id") for m in models]
        if model is None:
            if len(ids) != 1:
                raise BackendFailed(f"the backend at {self.url} serves {len(ids)} models "
                                    f"({', '.join(map(str, ids)) or 'none'}). HINT: choose one with "
                                    "--backend-model NAME")
            model = ids[0]
        entry = next((m for m in models if m.get("id") == model), None)
        if entry is None:
            raise BackendFailed(f"the backend at {self.url} does not serve {model!r}; it serves "
                                f"{', '.join(map(str, ids)) or 'nothing'}. HINT: --backend-model NAME")
        self._named(model)
        if isinstance(entry.get("max_model_len"), int):  # vLLM says its context length here
            self.n_ctx = entry["max_model_len"]
        return entry

    def _named(self, model: str) -> None:
        self.model_name = model
        self.description = f"the backend at {self.url}, model {model}"

    def stats(self) -> EngineStats:
        return EngineStats(active=len(self._active), queued=0, slots=None)  # the backend keeps its own queue

    def speculation_facts(self) -> SpeculationFacts:
        """A backend speculates by its own configuration, unseen from here (its counters: spec_figures)."""
        return SpeculationFacts([], AUTO, None, "speculation runs on the backend server, configured there", None,
                                backend=True)

    async def health(self) -> dict:
        """The backend's state for /health (awaited from the server's loop): up, down or failing."""
        return await self._await(self._health())

    async def models(self) -> list[dict]:
        """The backend's GET /v1/models entries; raises BackendUnavailable or BackendFailed."""
        if self._active and self._served is not None:  # see _served
            return self._served
        return await self._await(self._models())

    async def spec_figures(self) -> dict | None:
        """The backend's own speculation figures (backend_wire.spec_figures), None where it publishes none."""
        return await self._await(self._spec_figures())

    def stop(self) -> None:
        """As Engine.stop: no new requests; open answers end with an EngineStopped error (any thread)."""
        self._stopping = True
        if not self._loop.is_closed():
            for _, task in list(self._active.values()):
                self._loop.call_soon_threadsafe(task.cancel)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._watcher.cancel()
        self.stop()
        try:
            self._call(self._client.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()

    # -- on the engine's loop --------------------------------------------------------------

    async def _start(self, req: GenerationRequest, path: str, body: dict) -> None:
        translated = backend_wire.json_object_dialect(body.get("response_format"))
        if translated is not None and self.json_object_schemas:
            body = body | {"response_format": translated}
        try:
            resp = await self._send(path, body)
        except EngineError as e:
            if translated is None or self.json_object_schemas or not backend_wire.refuses_json_schema(e):
                raise
            log.info("the backend at %s takes schemas as json_object: sending them so from now on", self.url)
            self.json_object_schemas = True
            resp = await self._send(path, body | {"response_format": translated})
        self._active[req.id] = (req, asyncio.create_task(self._relay(req, resp)))

    async def _send(self, path: str, body: dict) -> httpx.Response:
        """The backend's streamed answer to one request; its error status raised as an EngineError."""
        try:
            resp = await self._client.send(self._client.build_request("POST", self.url + path, json=body),
                                           stream=True)
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        if resp.status_code >= 400:
            text = (await resp.aread()).decode("utf-8", "replace")
            await resp.aclose()
            raise backend_wire.error_for(resp.status_code, text, self.url)
        return resp

    async def _relay(self, req: GenerationRequest, resp: httpx.Response) -> None:
        sink = req.sink
        assert sink is not None  # submit() refuses a request without one
        first = last = None
        got, reason = None, None
        try:
            try:
                async for line in resp.aiter_lines():
                    data = backend_wire.sse_data(line)
                    if data is None:
                        continue
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    got = chunk.get("usage") or got
                    text, finished, tokens = backend_wire.chunk_parts(chunk)
                    reason = finished or reason
                    if text or tokens:
                        last = time.perf_counter()
                        first = first or last
                        sink(StreamEvent(text=text, pieces=[b for b, _ in tokens] or None,
                                             logprobs=[lp for _, lp in tokens] or None))
            except (httpx.HTTPError, ValueError) as e:  # the connection broke, or a chunk was not JSON
                raise BackendFailed(f"the backend at {self.url} stopped mid-answer: {_why(e)}. "
                                    "HINT: see the backend's own log") from None
            if reason is None:
                raise BackendFailed(f"the backend at {self.url} ended the answer without a finish reason. HINT: "
                                    "see the backend's own log; llama-cpp-python's server ends an answer whenever "
                                    "another request comes in unless it is started with --interrupt_requests False")
            # passed on as the backend said it: one may name others than ours (vLLM's "abort"); the routes
            # tell only "length" apart (openai_format.finish), and the audit log keeps the backend's word
            said = cast(FinishReason, reason)
            self._finish(req, StreamEvent(finish_reason=said, usage=_usage(got, req.submitted_at, first, last)))
        except BackendFailed as e:
            log.warning("%s", e.message)
            self._finish(req, StreamEvent(error=e))
        except asyncio.CancelledError:  # the client hung up, or the server stops: close the backend request
            if self._stopping:
                self._finish(req, StreamEvent(error=EngineStopped("the server stopped before this answer finished")))
            else:
                self._finish(req, StreamEvent(finish_reason="cancelled", usage=_usage(None, req.submitted_at, first,
                                                                                      last)))
        finally:
            self._active.pop(req.id, None)
            await resp.aclose()

    def _finish(self, req: GenerationRequest, ev: StreamEvent) -> None:
        self.totals.count(ev)
        assert req.sink is not None  # submit() refuses a request without one
        req.sink(ev)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_S)
            for req, task in list(self._active.values()):
                if req.cancelled.is_set():
                    task.cancel()

    async def _models(self) -> list[dict]:
        try:
            resp = await self._client.get(self.url + "/models", timeout=backend_wire.PROBE_TIMEOUT_S)
        except httpx.HTTPError as e:
            raise self._unreachable(e) from None
        if resp.status_code >= 400:
            raise backend_wire.error_for(resp.status_code, resp.text, self.url)
        try:
            data = resp.json()["data"]
            assert isinstance(data, list)
        except (ValueError, KeyError, TypeError, AssertionError):
            raise BackendFailed(f"the backend at {self.url} answered GET /v1/models without a list of "
                                "models. HINT: is --backend the address of an OpenAI-compatible server?") from None
        self._served = data
        return data

    async def _spec_figures(self) -> dict | None:
        root = self.url.removesuffix("/v1")  # Prometheus /metrics is at the server's root, beside /v1
        try:
            resp = await self._client.get(root + "/metrics", timeout=backend_wire.PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            return None  # /health says why the backend cannot be reached; /metrics just lacks its counters
        return backend_wire.spec_figures(resp.text) if resp.status_code == 200 else None

    async def _health(self) -> dict:
        state = {"url": self.url, "model": self.model_name}
        if self._active and self._served is not None:
            return state | {"status": "up", "models": [m.get("id") for m in self._served]}
        try:
            ids = [m.get("id") for m in await self._models()]
        except BackendUnavailable as e:
            return state | {"status": "down", "error": e.message}
        except BackendFailed as e:
            return state | {"status": "failing", "error": e.message}
        if self.model_name not in ids:
            return state | {"status": "failing", "models": ids,
                            "error": f"the backend does not serve {self.model_name!r} (it serves "
                                     f"{', '.join(map(str, ids)) or 'nothing'}). HINT: --backend-model NAME"}
        return state | {"status": "up", "models": ids}

    def _unreachable(self, e: Exception) -> BackendUnavailable:
        return BackendUnavailable(f"cannot reach the backend at {self.url}: {_why(e)}. HINT: start it, or check "
                                  "--backend (flashdesk keeps serving and retries on the next request)")


def _why(e: Exception) -> str:
    return str(e) or type(e).__name__


def _usage(got: dict | None, submitted: float, first: float | None, last: float | None) -> Usage:
    """Our Usage from the backend's `usage` object (None when it sent none) and the times we saw."""
    prefill = ((first or time.perf_counter()) - submitted) * 1000.0
    decode = ((last - first) * 1000.0) if first is not None and last is not None else 0.0
    if not got:
        return Usage(prefill_ms=prefill, decode_ms=decode, counted=False)
    cached = (got.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Usage(prompt_tokens=int(got.get("prompt_tokens") or 0),
                 completion_tokens=int(got.get("completion_tokens") or 0), cached_tokens=int(cached),
                 prefill_ms=prefill, decode_ms=decode)
