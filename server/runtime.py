"""The server's model: loaded in the background at start-up, so the API can answer
503 "loading" (and /health can say so) instead of refusing connections meanwhile.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from engine import Engine, EngineConfig, EngineError
from engine.store import InstalledModel, ModelStore

from .errors import APIError
from .settings import Settings

log = logging.getLogger("flashdesk.server")

# (settings) -> (store entry, engine); tests may pass one that waits, to see the loading state
Loader = Callable[[Settings], tuple[InstalledModel, Engine]]


def load_engine(settings: Settings) -> tuple[InstalledModel, Engine]:
    entry = ModelStore(settings.home).resolve(settings.model)
    draft = {"auto": entry.draft_path, "none": None}.get(settings.draft, settings.draft)
    cost_cache = str(entry.folder / f"verify-cost-{settings.threads}t.json") if entry.folder else None
    cfg = EngineConfig(n_ctx=settings.ctx, n_parallel=settings.parallel, n_threads=settings.threads,
                       verbose=settings.verbose, spec_mode=settings.speculative, spec_block=settings.spec_block,
                       selector=settings.selector, draft=draft, cost_cache=cost_cache,
                       spec_inexact=settings.allow_inexact_speculation)
    return entry, Engine.load(entry.path, cfg)


class Runtime:
    def __init__(self, settings: Settings, loader: Loader = load_engine):
        self.settings = settings
        self.loader = loader
        self.status = "loading"  # loading | ready | error
        self.error: str | None = None
        self.engine: Engine | None = None
        self.model: InstalledModel | None = None
        self._thread = threading.Thread(target=self._load, name="flashdesk-load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _load(self) -> None:
        try:
            self.model, self.engine = self.loader(self.settings)
            self.status = "ready"
            log.info("model %s ready (%s)", self.model.name, self.engine.info.description)
        except EngineError as e:
            self.status, self.error = "error", e.message
            log.error("could not load the model: %s", e.message)
        except Exception as e:  # keep serving /health with the reason instead of dying silently
            self.status, self.error = "error", f"{type(e).__name__}: {e}"
            log.exception("could not load the model")

    def ready_engine(self, requested_model: str | None) -> Engine:
        if self.status == "loading":
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

    def close(self) -> None:
        self._thread.join(timeout=60)
        if self.engine is not None:
            self.engine.close()
