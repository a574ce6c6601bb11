"""Every error the API returns, in OpenAI's JSON shape, from one table.

`{"error": {"message", "type", "param", "code"}}` with the status OpenAI clients
expect: the `openai` package turns these into BadRequestError, AuthenticationError,
NotFoundError and so on. Engine errors and the stores' errors (the audit log, the chat
history) are mapped here and nowhere else; the routes just let them rise.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import (ContextLengthExceeded, DownloadError, EngineError, EngineStopped, GenerationFailed,
                           InvalidModelFile, InvalidRequest, ModelLoadError, ModelNotFound, ServerBusy)

from ..stores.audit import AuditLogError, AuditQueryError
from ..stores.conversations import ConversationInputError, ConversationNotFound, ConversationStoreError
from ..stores.sqlite_file import DiskWriteFailed
from ..runtime.backend_wire import BackendFailed, BackendUnavailable

log = logging.getLogger("flashdesk.server")

# engine error class -> (HTTP status, OpenAI error type). First match wins (subclasses first).
ENGINE_ERRORS: list[tuple[type[EngineError], int, str]] = [
    (ContextLengthExceeded, 400, "invalid_request_error"),
    (InvalidRequest, 400, "invalid_request_error"),
    (ModelNotFound, 404, "invalid_request_error"),
    (InvalidModelFile, 400, "invalid_request_error"),
    (ServerBusy, 429, "rate_limit_error"),  # with Retry-After (from_engine)
    (ModelLoadError, 503, "server_error"),
    (EngineStopped, 503, "server_error"),
    (DownloadError, 502, "server_error"),
    (BackendUnavailable, 503, "server_error"),  # --backend: the server behind us (server/runtime/backend_wire.py)
    (BackendFailed, 502, "server_error"),
    (GenerationFailed, 500, "server_error"),
    (EngineError, 500, "server_error"),
]

# store error class -> (HTTP status, code, param, message with {e} for the store's own words).
# The stores know nothing of HTTP; their messages already name the file and the next step.
STORE_ERRORS: list[tuple[type[Exception], int, str, str | None, str]] = [
    # A full (or failing) disk under either store: 507 Insufficient Storage says "not stored", and the
    # message names the file and what to free; a client may send the same request again afterwards.
    (DiskWriteFailed, 507, "insufficient_storage", None, "{e}"),
    (ConversationNotFound, 404, "conversation_not_found", "id", "{e}; see GET /v1/conversations"),
    (ConversationInputError, 400, "invalid_request", None, "{e}"),
    (ConversationStoreError, 503, "conversations_unavailable", None, "the chat history is unavailable: {e}"),
    (AuditQueryError, 400, "invalid_request", None, "{e}"),
    (AuditLogError, 503, "audit_unavailable", None, "the work-order audit log could not be opened: {e}"),
]

STATUS_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
    429: "rate_limit_error", 503: "server_error", 507: "server_error",
}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None,
                 type: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type or STATUS_TYPES.get(status, "server_error")
        self.headers = headers

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def from_engine(e: EngineError) -> APIError:
    for cls, status, etype in ENGINE_ERRORS:
        if isinstance(e, cls):
            retry = getattr(e, "retry_after", None)  # ServerBusy: when to come back, as HTTP says it
            return APIError(status, e.message, code=e.code, param=e.param, type=etype,
                            headers={"Retry-After": str(retry)} if retry is not None else None)
    raise AssertionError("unreachable: EngineError is the last row")


def from_store(e: Exception) -> APIError:
    for cls, status, code, param, message in STORE_ERRORS:
        if isinstance(e, cls):
            return APIError(status, message.format(e=e), code=code, param=param)
    raise AssertionError(f"{type(e).__name__} is not a row of STORE_ERRORS")


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api(_: Request, e: APIError):
        return e.response()

    async def _store(_: Request, e: Exception):
        return from_store(e).response()

    for cls, *_ in STORE_ERRORS:
        app.add_exception_handler(cls, _store)

    @app.exception_handler(EngineError)
    async def _engine(_: Request, e: EngineError):
        return from_engine(e).response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(loc) or None
        msg = first.get("msg", "invalid request")
        if first.get("type") == "extra_forbidden":
            msg = f"unsupported parameter: {param}"
        elif first.get("type") == "json_invalid" or not loc:
            msg, param = "the request body must be a JSON object (Content-Type: application/json)", None
        return APIError(400, f"{msg}" + (f" ({param})" if param and "unsupported" not in msg else ""),
                        param=param, code="invalid_request").response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException):
        if e.status_code == 404:
            return APIError(404, f"no such endpoint: {request.method} {request.url.path}",
                            code="unknown_url").response()
        if e.status_code == 405:
            return APIError(405, f"method {request.method} is not allowed on {request.url.path}",
                            code="method_not_allowed").response()
        return APIError(e.status_code, str(e.detail)).response()

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, e: Exception):
        log.exception("unhandled error")
        return APIError(500, "internal server error; see the server log", code="internal_error").response()
