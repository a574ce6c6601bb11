"""HTTP routes of the chat history: `/v1/conversations`, for the browser UI's sidebar.

What it is: an `APIRouter` over `ConversationStore` (server/stores/conversations.py), read from
`request.app.state.conversations`. Request bodies are pydantic models with extra="forbid"
so a misspelled field is a 400 from the app's handler, not silently dropped. Store calls
block on an fsync, so they run in the threadpool, never on the event loop.

What it is not: no generation (the UI calls /v1/chat/completions and then posts the
answer here), no storage logic (limits and ordering live in the store), no error mapping
(server/http/errors.py's table turns the store's errors into 400, 404 and 503), no auth (the
app's middleware guards every /v1 route).

Routes:
    POST   /v1/conversations                      {title?, settings?}       -> 201 conversation
    GET    /v1/conversations?q=&limit=&offset=                              -> {"object": "list", data, has_more}
    GET    /v1/conversations/{id}                                           -> conversation with messages
    PATCH  /v1/conversations/{id}                 {title?, settings?}       -> conversation with messages
    DELETE /v1/conversations/{id}                                           -> {"id", "object", "deleted": true}
    POST   /v1/conversations/{id}/messages        {role, content, meta?}    -> 201 message
    DELETE /v1/conversations/{id}/messages?after=SEQ                        -> {"id", "deleted": n}

References: server/http/routes/workorders.py (the same shape over the audit log), server/http/errors.py.
"""

from __future__ import annotations

from typing import Any, Callable, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ...stores.conversations import MAX_TITLE_CHARS, ConversationNotFound, ConversationStore, ConversationStoreError

router = APIRouter(prefix="/v1/conversations")
PAGE_LIMIT = 200  # a sidebar page; below the store's MAX_LIST_LIMIT so limit + 1 always fits
SQL_INT_MAX = 2**63 - 1  # SQLite's largest integer: a larger offset or seq would fail in sqlite3 (a 500), not a 400


class ConversationBody(BaseModel):
    """POST and PATCH: both fields optional; on PATCH an absent or null field is left as is."""
    model_config = ConfigDict(extra="forbid")
    title: str | None = Field(None, max_length=MAX_TITLE_CHARS)
    settings: dict[str, Any] | None = None  # whatever the settings panel sends; the store caps its size


class MessageBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str
    meta: dict[str, Any] | None = None  # usage, timings, speculation stats, finish_reason of an answer


def _store(request: Request) -> ConversationStore:
    store = getattr(request.app.state, "conversations", None)
    if store is None:  # the app kept why it could not open the file (server/http/app.py); a 503
        raise ConversationStoreError(getattr(request.app.state, "conversations_error", None)
                                     or "its file could not be opened; see the server log")
    return store


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a store call off the event loop; its errors become API errors in server/http/errors.py."""
    return await run_in_threadpool(fn, *args)


@router.post("", status_code=201)
async def create_conversation(body: ConversationBody, request: Request):
    return await _call(_store(request).create, body.title, body.settings)


@router.get("")
async def list_conversations(request: Request, q: str | None = None,
                             limit: int = Query(50, ge=1, le=PAGE_LIMIT), offset: int = Query(0, ge=0, le=SQL_INT_MAX)):
    store = _store(request)
    # One extra row tells whether there is a next page without a second COUNT query.
    rows = await _call(lambda: store.list(q=q, limit=limit + 1, offset=offset))
    has_more = len(rows) > limit
    return {"object": "list", "data": rows[:limit], "has_more": has_more, "limit": limit, "offset": offset}


@router.get("/{conversation_id}")
async def get_conversation(conversation_id: str, request: Request):
    found = await _call(_store(request).get, conversation_id)
    if found is None:
        raise ConversationNotFound(conversation_id)
    return found


@router.patch("/{conversation_id}")
async def update_conversation(conversation_id: str, body: ConversationBody, request: Request):
    store = _store(request)

    def apply() -> dict:
        # Two store calls, not one transaction: a crash between them leaves a renamed
        # conversation with its old settings, which the user can simply save again.
        if body.title is not None:
            store.rename(conversation_id, body.title)
        if body.settings is not None:
            store.update_settings(conversation_id, body.settings)
        found = store.get(conversation_id)
        if found is None:  # also the answer to an empty PATCH on an unknown id
            raise ConversationNotFound(conversation_id)
        return found

    return await _call(apply)


@router.delete("/{conversation_id}")
async def delete_conversation(conversation_id: str, request: Request):
    await _call(_store(request).delete, conversation_id)
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


@router.post("/{conversation_id}/messages", status_code=201)
async def add_message(conversation_id: str, body: MessageBody, request: Request):
    return await _call(_store(request).add_message, conversation_id, body.role, body.content, body.meta)


@router.delete("/{conversation_id}/messages")
async def delete_messages(conversation_id: str, request: Request, after: int = Query(..., ge=0, le=SQL_INT_MAX)):
    deleted = await _call(_store(request).delete_messages_after, conversation_id, after)
    return {"id": conversation_id, "object": "conversation.messages.deleted", "deleted": deleted}
