"""GET /health: whether the model is loaded (200 ready, 503 loading or error), for launchers,
the UI's status line and the tests.

Open without an API key (server/http/security.py), so a launcher can wait for the server. Once
ready it adds the model, the engine's load (`engine`), the context size and the speculation
facts (server/runtime/speculation.py); the names a request may use are there from the start, so
the UI can offer them while the model loads.

With --backend, `backend` says whether the server behind us answers (server/runtime/backend.py): 503
when it cannot be reached, 502 when it answers wrongly; `status` is then "error", with the
backend's reason in `error`. Its speculation counters (server/runtime/speculation.py `published`) are
asked alongside, so a slow backend delays /health once (the probes' timeout), not twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ...runtime import speculation
from ...runtime.served import Runtime

router = APIRouter()
BACKEND_STATUS = {"up": 200, "down": 503, "failing": 502}  # BackendEngine.health()'s states


@router.get("/health")
async def health(request: Request):
    rt: Runtime = request.app.state.runtime
    now = rt.served  # one snapshot: a switch may replace it meanwhile
    eng = now.engine
    body: dict[str, Any] = {"status": now.status}
    if eng is not None:
        _, model = now.answering()
        body |= {"model": model.name, "engine": dataclasses.asdict(eng.stats()), "n_ctx": eng.n_ctx}
    status = 200 if eng is not None else 503
    if eng is None:
        body["speculation"] = speculation.names()
    else:  # a backend's state is asked now (None: nothing is behind this engine)
        backend, body["speculation"] = await asyncio.gather(eng.health(), speculation.published(eng))
        if backend is not None:
            body["backend"], status = backend, BACKEND_STATUS[backend["status"]]
            if status != 200:  # nothing can be answered: the UI shows this as it shows a model that failed to load
                body["status"], body["error"] = "error", backend["error"]
    if now.error:
        body["error"] = now.error
    return JSONResponse(body, status_code=status)
