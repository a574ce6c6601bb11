"""GET /v1/system: what hardware the model runs on (engine/advisor/hardware.py gathers the facts and
a `reason` code the UI words in the reader's language), plus the served model and, once it
is loaded, the same speculation facts as /health (server/runtime/speculation.py `published`); null while loading.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from engine.advisor.hardware import report
from engine.models.store import ModelStore

from ...runtime import speculation

router = APIRouter()


@router.get("/v1/system")
async def system(request: Request):
    settings = request.app.state.settings
    now = request.app.state.runtime.served  # one snapshot: a switch may replace it meanwhile
    eng = now.engine
    return {
        "object": "system",
        **await run_in_threadpool(report, now.settings.threads),  # asks the devices: off the server's loop
        "model": {"status": now.status, "name": now.model.name if now.model else None},
        "speculation": await speculation.published(eng) if eng else None,
        "home": str(ModelStore(settings.home).home),  # where models, chats and the audit log live
    }
