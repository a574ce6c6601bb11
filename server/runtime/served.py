"""The server's model: loaded in the background at start-up, so the API can answer
503 "loading" (and /health can say so) instead of refusing connections meanwhile.

`switch(name)` serves another installed model the same way: status goes back to
"loading", the old engine is closed and the new one loads in the background. It is
refused while the engine still has requests, or a request is on its way into it (`admit`),
so nobody's answer is cut off.

What is served is one frozen `Served`, swapped whole under the lock: a request reads it once,
so its engine, its model's name and the status it was admitted under belong together even
while a switch runs in another thread.

With a backend (settings.backend) the "model" is the backend's (server/runtime/backend.py): loading it
means asking the backend which model to drive, and switching is the backend's business.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Literal

from engine import Engine, EngineConfig, EngineError, EngineStopped
from engine.advisor import hardware
from engine.api import EngineAPI
from engine.stats import MEASURED_FILE, EngineStats
from engine.models.store import InstalledModel, ModelStore

from ..http.errors import APIError
from .backend import BackendEngine
from .backend_wire import BackendUnavailable
from ..settings import Settings

log = logging.getLogger("flashdesk.server")

BACKEND_RETRY_S = 2.0  # how often a backend that cannot be reached yet is asked again at start-up

# (settings, stop) -> (store entry, engine); `stop` is set when the server stops: a load then gives
# up within a fraction of a second (EngineStopped). Tests may pass a loader that waits, to see the
# loading state.
Loader = Callable[[Settings, threading.Event], tuple[InstalledModel, EngineAPI]]


def load_backend(settings: Settings) -> tuple[InstalledModel, BackendEngine]:
    assert settings.backend is not None  # load_engine's choice
    engine = BackendEngine(settings.backend, settings.backend_key.get_secret_value() if settings.backend_key else None)
    try:
        about = engine.resolve(settings.backend_model) or {}
    except BaseException:
        engine.close()
        raise
    name = engine.model_name
    created = about.get("created")
    entry = InstalledModel(name=name, file=name, sha256="", size=0, source=f"backend:{engine.url}",
                           architecture="backend", added=created if isinstance(created, (int, float)) else time.time())
    return entry, engine


def load_engine(settings: Settings, stop: threading.Event | None = None) -> tuple[InstalledModel, EngineAPI]:
    if settings.backend:
        return load_backend(settings)
    entry = ModelStore(settings.home).resolve(settings.model)
    draft = {"auto": entry.draft_path, "none": None}.get(settings.draft, settings.draft)
    cost_cache = str(entry.folder / f"verify-cost-{settings.threads}t.json") if entry.folder else None
    measured = str(entry.folder / MEASURED_FILE) if entry.folder else None  # the catalog says it
    # A catalog model carries how it is meant to run (engine/models/catalog.py CatalogEntry.options): the
    # chat-template variables its draft was trained with, and the most tokens worth drafting here.
    n_draft = entry.options.get("n_draft", {}).get(hardware.backend()) if draft and draft == entry.draft_path else None
    block = min(settings.spec_block, n_draft + 1) if n_draft else settings.spec_block
    cfg = EngineConfig(n_ctx=settings.ctx, n_parallel=settings.parallel, max_queue=settings.max_queue,
                       n_threads=settings.threads,
                       verbose=settings.verbose, spec_mode=settings.speculative, spec_block=block,
                       selector=settings.selector, draft=draft, cost_cache=cost_cache,
                       measured_cache=measured,
                       spec_inexact=settings.allow_inexact_speculation,
                       chat_template_vars=entry.options.get("chat_template", {}))
    return entry, Engine.load(entry.path, cfg, stop)


Status = Literal["loading", "ready", "error"]  # what /health says first; the UI waits on "loading"


@dataclass(frozen=True)
class Served:
    """What the server serves at one moment (Runtime.served): replaced whole, never changed."""

    settings: Settings  # of the model served, or of the last load tried
    status: Status = "loading"
    engine: EngineAPI | None = None  # set exactly while status is "ready": an Engine or a BackendEngine
    model: InstalledModel | None = None  # the model served (kept during a switch until the new one is ready)
    error: str | None = None
    loading: str | None = None  # the name being loaded, while status is "loading"

    @property
    def via_backend(self) -> bool:
        """Whether a backend server answers instead of a local engine (then `engine` is a BackendEngine)."""
        return self.settings.backend is not None

    def answering(self) -> tuple[EngineAPI, InstalledModel]:
        """The engine and the model of a "ready" snapshot, such as Runtime.admit() yields."""
        assert self.engine is not None and self.model is not None, self.status
        return self.engine, self.model

    def names(self) -> set[str]:
        m = self.model
        return {m.name, m.file, m.file.removesuffix(".gguf")} if m else set()

    def holds(self, name: str) -> bool:
        """Whether the store model `name` is served or being loaded (so it must not be removed)."""
        m = self.model
        served = m is not None and m.name == name and not m.source.startswith(("path:", "backend:"))
        return served or self.loading == name


class Runtime:
    def __init__(self, settings: Settings, loader: Loader = load_engine):
        self.loader = loader
        self.served = Served(settings, loading=settings.model)
        self._lock = threading.Lock()  # one switch at a time; close() waits for it; guards `served` changes
        self._admitting = 0  # requests admitted whose work has not reached the engine's queue yet
        self._closed = False
        self._stop = threading.Event()  # set by close(): a load that waits for a backend gives up
        self._thread = threading.Thread(target=self._load, args=(settings,), name="flashdesk-load", daemon=True)

    def _set(self, **changes) -> None:
        """Swap in a new snapshot (the caller holds the lock)."""
        self.served = dataclasses.replace(self.served, **changes)

    def start(self) -> None:
        self._thread.start()

    def _load(self, settings: Settings) -> None:
        try:
            model, engine = self._ask(settings)
        except EngineError as e:
            self._failed(settings, e.message)
            return
        except Exception as e:  # keep serving /health with the reason instead of dying silently
            log.exception("could not load the model")
            self._failed(settings, f"{type(e).__name__}: {e}")
            return
        with self._lock:
            if self._closed:  # the server stopped while this was loading: nobody will close it later
                engine.close()
                return
            self.served = Served(settings, "ready", engine, model)
        log.info("model %s ready (%s)", model.name, engine.description)

    def _ask(self, settings: Settings) -> tuple[InstalledModel, EngineAPI]:
        """The loader's answer. A backend that cannot be reached yet (a GPU server boots slower than we do)
        is asked again every BACKEND_RETRY_S while the status stays "loading", with the reason in `error`."""
        while True:
            try:
                return self.loader(settings, self._stop)
            except BackendUnavailable as e:
                if self.served.error != e.message:
                    log.warning("%s (asking again every %.0f s)", e.message, BACKEND_RETRY_S)
                with self._lock:
                    self._set(error=e.message)
                if self._stop.wait(BACKEND_RETRY_S):
                    raise EngineStopped("the server stopped before the backend answered") from None

    def _failed(self, settings: Settings, message: str) -> None:
        log.error("could not load the model %s: %s", settings.backend or settings.model, message)
        with self._lock:  # the settings of the last attempt: a later switch copies them
            self.served = Served(settings, "error", error=message)

    def switch(self, name: str) -> None:
        """Serve the installed model `name` instead: returns at once, the load runs in the background.

        404 for a name the store does not have, 409 (code "busy") while the engine has
        requests or another load is under way. Switching to the model already served
        reloads it (e.g. to pick up a draft paired since)."""
        current = self.served.settings  # the backend and the home never change: read outside the lock
        if current.backend is not None:
            raise APIError(409, f"this server drives the backend at {current.backend}; the model it serves "
                                "is chosen there. HINT: restart flashdesk with another --backend-model",
                           code="backend_model")
        ModelStore(current.home).get(name)  # unknown name: 404 with a hint, before touching anything
        with self._lock:
            if self._closed:
                raise APIError(503, "the server is shutting down", code="shutting_down")
            now = self.served
            if now.status == "loading":
                raise APIError(409, f"the model {now.loading!r} is still loading. HINT: wait until /health "
                                    "says ready, then switch.", code="busy")
            old = now.engine
            st = old.stats() if old is not None else EngineStats(0, 0, None)
            if st.busy or self._admitting:
                raise APIError(409, f"the model is still answering {st.active + self._admitting} request(s) "
                                    f"with {st.queued} waiting. HINT: switch when they have finished "
                                    "(GET /health shows engine.active and engine.queued).", code="busy")
            # A --draft PATH was chosen for the old model; the new one uses its own paired draft.
            keep_draft = now.settings.draft in ("auto", "none")
            settings = now.settings.model_copy(update={"model": name, **({} if keep_draft else {"draft": "auto"})})
            self._set(status="loading", engine=None, error=None, loading=name)  # the old model's name stays
            self._thread = threading.Thread(target=self._switch, args=(old, settings), name="flashdesk-load",
                                            daemon=True)
            self._thread.start()
        log.info("switching the served model to %s", name)

    def _switch(self, old: EngineAPI | None, settings: Settings) -> None:
        if old is not None:
            old.close()  # frees its memory before the new model takes its own
        self._load(settings)

    @contextmanager
    def admit(self, requested_model: str | None) -> Iterator[Served]:
        """The snapshot a request is served from, while it makes its way into the engine's queue:
        503 while loading or after a failed load, 404 for a model not served here. A switch is
        refused until the block ends (the request is then in the engine's own count)."""
        with self._lock:
            now = self.served
            if now.status == "loading":
                if now.via_backend and now.error:  # still asking a backend that cannot be reached (_ask)
                    raise APIError(503, now.error, code="backend_unavailable")
                raise APIError(503, "the model is still loading; try again in a few seconds", code="model_loading")
            if now.status == "error":
                raise APIError(503, f"no model could be loaded: {now.error}", code="model_unavailable")
            if requested_model and requested_model not in now.names():
                assert now.model is not None  # set with the engine ("ready")
                raise APIError(404, f"model {requested_model!r} is not served here; this server serves "
                                    f"{now.model.name!r} (see GET /v1/models)", code="model_not_found",
                               param="model")
            self._admitting += 1
        try:
            yield now
        finally:
            with self._lock:
                self._admitting -= 1

    def idle(self) -> bool:
        """Whether no request is admitted, answered or waiting and no model is loading: then the
        processor is free for measuring this computer (engine/advisor/measure.py)."""
        now = self.served
        if now.status == "loading" or self._admitting:
            return False
        return now.engine is None or not now.engine.stats().busy

    def stop(self) -> None:
        """The first step of a shutdown (a signal, any thread; returns at once): a load under way gives
        up, and open answers end with an error event after the step under way. close() follows."""
        self._stop.set()
        engine = self.served.engine
        if engine is not None:
            engine.stop()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread.ident is not None:  # started (close() may come before start() when start-up fails)
            thread.join(timeout=60)
        engine = self.served.engine
        if engine is not None:
            engine.close()
