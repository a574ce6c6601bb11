"""The server's model: loaded in the background at start-up, so the API can answer
503 "loading" (and /health can say so) instead of refusing connections meanwhile.

`switch(name)` serves another installed model the same way: status goes back to
"loading", the old engine is closed and the new one loads in the background. It is
refused while the engine still has requests, so nobody's answer is cut off.

With a backend (settings.backend) the "model" is the backend's (server/remote.py): loading it
means asking the backend which model to drive, and switching is the backend's business.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from engine import Engine, EngineConfig, EngineError, EngineStopped, hardware
from engine.store import InstalledModel, ModelStore

from .errors import APIError
from .remote import RemoteEngine
from .upstream import BackendUnavailable
from .settings import Settings

log = logging.getLogger("flashdesk.server")

BACKEND_RETRY_S = 2.0  # how often a backend that cannot be reached yet is asked again at start-up

# (settings, stop) -> (store entry, engine); `stop` is set when the server stops: a load then gives
# up within a fraction of a second (EngineStopped). Tests may pass a loader that waits, to see the
# loading state.
Loader = Callable[[Settings, threading.Event], tuple[InstalledModel, Engine]]


def load_remote(settings: Settings) -> tuple[InstalledModel, RemoteEngine]:
    engine = RemoteEngine(settings.backend, settings.backend_key.get_secret_value() if settings.backend_key else None)
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


def load_engine(settings: Settings, stop: threading.Event | None = None) -> tuple[InstalledModel, Engine]:
    if settings.backend:
        return load_remote(settings)
    entry = ModelStore(settings.home).resolve(settings.model)
    draft = {"auto": entry.draft_path, "none": None}.get(settings.draft, settings.draft)
    cost_cache = str(entry.folder / f"verify-cost-{settings.threads}t.json") if entry.folder else None
    # A catalog model carries how it is meant to run (engine/catalog.py CatalogEntry.options): the
    # chat-template variables its draft was trained with, and the most tokens worth drafting here.
    n_draft = entry.options.get("n_draft", {}).get(hardware.backend()) if draft and draft == entry.draft_path else None
    block = min(settings.spec_block, n_draft + 1) if n_draft else settings.spec_block
    cfg = EngineConfig(n_ctx=settings.ctx, n_parallel=settings.parallel, max_queue=settings.max_queue,
                       n_threads=settings.threads,
                       verbose=settings.verbose, spec_mode=settings.speculative, spec_block=block,
                       selector=settings.selector, draft=draft, cost_cache=cost_cache,
                       spec_inexact=settings.allow_inexact_speculation,
                       chat_template_vars=entry.options.get("chat_template", {}))
    return entry, Engine.load(entry.path, cfg, stop)


class Runtime:
    def __init__(self, settings: Settings, loader: Loader = load_engine):
        self.settings = settings
        self.loader = loader
        self.status = "loading"  # loading | ready | error
        self.error: str | None = None
        self.engine: Engine | None = None
        self.model: InstalledModel | None = None  # the model served (kept during a switch until the new one is ready)
        self.loading: str | None = settings.model  # the name being loaded, while status is "loading"
        self._lock = threading.Lock()  # one switch at a time; close() waits for it
        self._closed = False
        self._stop = threading.Event()  # set by close(): a load that waits for a backend gives up
        self._thread = threading.Thread(target=self._load, args=(settings,), name="flashdesk-load", daemon=True)

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
            self.model, self.engine, self.settings = model, engine, settings
            self.status, self.error, self.loading = "ready", None, None
        log.info("model %s ready (%s)", model.name, engine.info.description)

    def _ask(self, settings: Settings) -> tuple[InstalledModel, Engine]:
        """The loader's answer. A backend that cannot be reached yet (a GPU server boots slower than we do)
        is asked again every BACKEND_RETRY_S while the status stays "loading", with the reason in `error`."""
        while True:
            try:
                return self.loader(settings, self._stop)
            except BackendUnavailable as e:
                if self.error != e.message:
                    log.warning("%s (asking again every %.0f s)", e.message, BACKEND_RETRY_S)
                self.error = e.message
                if self._stop.wait(BACKEND_RETRY_S):
                    raise EngineStopped("the server stopped before the backend answered") from None

    def _failed(self, settings: Settings, message: str) -> None:
        log.error("could not load the model %s: %s", settings.backend or settings.model, message)
        with self._lock:
            self.settings = settings  # so a later switch copies the settings of the last attempt
            self.model, self.status, self.error, self.loading = None, "error", message, None

    def switch(self, name: str) -> None:
        """Serve the installed model `name` instead: returns at once, the load runs in the background.

        404 for a name the store does not have, 409 (code "busy") while the engine has
        requests or another load is under way. Switching to the model already served
        reloads it (e.g. to pick up a draft paired since)."""
        if self.remote:
            raise APIError(409, f"this server drives the backend at {self.settings.backend}; the model it serves "
                                "is chosen there. HINT: restart flashdesk with another --backend-model",
                           code="backend_model")
        ModelStore(self.settings.home).get(name)  # unknown name: 404 with a hint, before touching anything
        with self._lock:
            if self._closed:
                raise APIError(503, "the server is shutting down", code="shutting_down")
            if self.status == "loading":
                raise APIError(409, f"the model {self.loading!r} is still loading. HINT: wait until /health "
                                    "says ready, then switch.", code="busy")
            previous = self.status
            self.status = "loading"  # first, so no new request reaches the engine while we look at it
            old = self.engine
            st = old.stats() if old is not None else {"active": 0, "queued": 0}
            if st["active"] or st["queued"]:
                self.status = previous
                raise APIError(409, f"the model is still answering {st['active']} request(s) with "
                                    f"{st['queued']} waiting. HINT: switch when they have finished "
                                    "(GET /health shows engine.active and engine.queued).", code="busy")
            # A --draft PATH was chosen for the old model; the new one uses its own paired draft.
            keep_draft = self.settings.draft in ("auto", "none")
            settings = self.settings.model_copy(update={"model": name, **({} if keep_draft else {"draft": "auto"})})
            self.engine, self.error, self.loading = None, None, name
            self._thread = threading.Thread(target=self._switch, args=(old, settings), name="flashdesk-load",
                                            daemon=True)
            self._thread.start()
        log.info("switching the served model to %s", name)

    def _switch(self, old: Engine | None, settings: Settings) -> None:
        if old is not None:
            old.close()  # frees its memory before the new model takes its own
        self._load(settings)

    def ready_engine(self, requested_model: str | None) -> Engine:
        if self.status == "loading":
            if self.remote and self.error:  # still asking a backend that cannot be reached (_ask)
                raise APIError(503, self.error, code="backend_unavailable")
            raise APIError(503, "the model is still loading; try again in a few seconds", code="model_loading")
        if self.status == "error":
            raise APIError(503, f"no model could be loaded: {self.error}", code="model_unavailable")
        if requested_model and requested_model not in self.names():
            raise APIError(404, f"model {requested_model!r} is not served here; this server serves "
                                f"{self.model.name!r} (see GET /v1/models)", code="model_not_found",
                           param="model")
        return self.engine

    def names(self) -> set[str]:
        m = self.model
        return {m.name, m.file, m.file.removesuffix(".gguf")} if m else set()

    @property
    def remote(self) -> bool:
        """Whether a backend server answers instead of a local engine (then `engine` is a RemoteEngine)."""
        return self.settings.backend is not None

    def in_use(self, name: str) -> bool:
        """Whether the store model `name` is served or being loaded (so it must not be removed)."""
        m = self.model
        served = m is not None and m.name == name and not m.source.startswith(("path:", "backend:"))
        return served or self.loading == name

    def stop(self) -> None:
        """The first step of a shutdown (a signal, any thread; returns at once): a load under way gives
        up, and open answers end with an error event after the step under way. close() follows."""
        self._stop.set()
        engine = self.engine
        if engine is not None:
            engine.stop()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread.ident is not None:  # started (close() may come before start() when start-up fails)
            thread.join(timeout=60)
        if self.engine is not None:
            self.engine.close()
