"""The FastAPI application: guards, error table, routes, and the model's lifetime.

`create_app(settings)` builds an app whose model loads in the background when the
server starts and is closed when it stops.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from engine.store import ModelStore

from . import errors, metrics, openai_routes
from .audit import AuditLog, AuditLogError
from .conversation_routes import router as conversation_router
from .conversations import ConversationStore, ConversationStoreError
from .jobs import Jobs
from .runtime import Loader, Runtime, load_engine
from .security import GuardMiddleware
from .settings import Settings
from .store_routes import router as store_router
from .system import router as system_router
from .ui_files import ui_app
from .workorders import routes as workorder_routes
from .workorders.templates import TemplateStore

log = logging.getLogger("flashdesk.server")


def create_app(settings: Settings, loader: Loader = load_engine) -> FastAPI:
    runtime = Runtime(settings, loader)
    home = ModelStore(settings.home).home

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        runtime.start()
        try:
            app.state.audit = AuditLog(home / "workorders.sqlite3")
        except AuditLogError as e:  # serve everything else; parsing answers 503 with this reason
            app.state.audit_error = str(e)
            log.error("%s", e)
        try:
            app.state.conversations = ConversationStore(home / "conversations.sqlite3")
        except ConversationStoreError as e:  # chat still works; saving history answers 503
            log.error("%s", e)
        try:
            yield
        finally:
            runtime.close()
            for store in (app.state.audit, app.state.conversations):
                if store is not None:
                    store.close()

    app = FastAPI(title="flashdesk", version="0.1.0", lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.state.runtime = runtime
    app.state.settings = settings
    app.state.templates = TemplateStore(home / "templates")
    app.state.store_jobs = Jobs()  # pull / import / pair, one at a time (server/store_routes.py)
    app.state.audit, app.state.audit_error, app.state.conversations = None, None, None
    errors.install(app)
    app.include_router(openai_routes.router)
    app.include_router(workorder_routes.router)
    app.include_router(conversation_router)
    app.include_router(store_router)
    app.include_router(system_router)
    app.include_router(metrics.router)
    app.add_middleware(GuardMiddleware, settings=settings)

    @app.get("/health")
    async def health(request: Request):
        rt: Runtime = request.app.state.runtime
        body = {"status": rt.status}
        if rt.status == "ready":
            eng = rt.engine
            body |= {"model": rt.model.name, "engine": eng.stats(), "n_ctx": eng.n_ctx,
                     "speculation": {"drafters": sorted(eng.drafters), "default": eng.config.spec_mode,
                                     "exact": eng.spec_exact, "exact_why": eng.spec_exact_why,
                                     "enabled": eng.spec_enabled, "draft_error": eng.draft_error,
                                     "cost_curve": eng.cost_curve}}
        if rt.error:
            body["error"] = rt.error
        return JSONResponse(body, status_code=200 if rt.status == "ready" else 503)

    ui = ui_app()
    if ui is not None:  # last: every API route above wins over a file of the same name
        app.mount("/", ui, name="ui")
    return app
