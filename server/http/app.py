"""The FastAPI application: guards, error table, routes, and the model's lifetime.

`create_app(settings)` builds an app whose model loads in the background when the
server starts and is closed when it stops.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI

from engine.models.store import ModelStore

from . import errors
from ..stores.audit import AuditLog, AuditLogError
from ..stores.conversations import ConversationStore, ConversationStoreError
from ..stores.jobs import Jobs
from .routes import conversations, health, metrics, openai, store, system, workorders
from ..runtime.served import Loader, Runtime, load_engine
from .security import GuardMiddleware
from ..settings import Settings
from .ui_files import ui_app
from ..workorders.templates import TemplateStore

log = logging.getLogger("flashdesk.server")
ROUTES = (openai, workorders, conversations, store, system, metrics, health)  # server/http/routes/, one per API family


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
        except ConversationStoreError as e:  # chat still works; saving history answers 503 with this reason
            app.state.conversations_error = str(e)
            log.error("%s", e)
        try:
            yield
        finally:
            runtime.close()
            for db in (app.state.audit, app.state.conversations):
                if db is not None:
                    db.close()

    app = FastAPI(title="flashdesk", version="0.1.0", lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.state.runtime = runtime
    app.state.settings = settings
    app.state.templates = TemplateStore(home / "templates")
    app.state.store_jobs = Jobs()  # pull / import / pair, one at a time (server/http/routes/store.py)
    app.state.audit, app.state.audit_error = None, None  # the open log, or why it could not be opened (a 503)
    app.state.conversations, app.state.conversations_error = None, None
    errors.install(app)
    for family in ROUTES:
        app.include_router(family.router)
    app.add_middleware(GuardMiddleware, settings=settings)

    ui = ui_app()
    if ui is not None:  # last: every API route above wins over a file of the same name
        app.mount("/", ui, name="ui")
    return app
