"""The OpenAI-compatible endpoints: /v1/chat/completions, /v1/completions, /v1/models.

Each handler validates the body (schemas.py), renders the chat template, turns the
body into a `GenerationRequest` and either streams Server-Sent Events (sse-starlette)
or waits for the final event while watching for a client disconnect. A stream that
fails after it started ends with one `error` event carrying OpenAI error JSON.
"""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from engine import EngineError
from engine.grammar.schema import compile_response_format

from .. import openai_format as fmt
from ...runtime.bridge import collect, events_of, submit
from ..errors import APIError, from_engine
from ...runtime.served import Runtime
from ..schemas import ChatCompletionRequest, CompletionRequest

router = APIRouter()


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


@router.get("/v1/models")
async def list_models(request: Request):
    now = _runtime(request).served
    served = await now.engine.models() if now.engine is not None else None
    if served is not None:  # what a backend serves, as it says (502/503 when it cannot)
        return {"object": "list", "data": served}
    data = []
    if now.model is not None:
        data.append({"id": now.model.name, "object": "model", "created": int(now.model.added),
                     "owned_by": "flashdesk", "status": now.status})
    return {"object": "list", "data": data}


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    constraint = compile_response_format(body.response_format)  # 400 for what it cannot enforce
    with _runtime(request).admit(body.model) as served:
        engine, served_model = served.answering()
        prompt = engine.render_chat(body.chat_messages())
        # x-copy fields copy from what the user wrote (engine/grammar/copy.py)
        grammar = constraint.grammar_for(body.user_texts()) if constraint else None
        req = body.to_engine(prompt, grammar)
        events = await submit(engine, req)
    cid, model = fmt.new_id("chatcmpl"), served_model.name
    if not body.stream:
        done = await collect(request, req, events)
        return fmt.chat_completion(cid, model, done.text, done.finish_reason, done.usage,
                                   fmt.structured(constraint, done.text, done.finish_reason))

    created = int(time.time())

    async def chunks():
        yield fmt.chat_chunk(cid, model, created, {"role": "assistant", "content": ""})
        parts, pending = [], 0  # tokens whose text has not been sent yet (a split UTF-8 character)
        async for ev in events_of(req, events):
            if ev.error is not None:
                raise ev.error
            parts.append(ev.text)
            pending += len(ev.tokens)
            if ev.text:
                yield fmt.chat_chunk(cid, model, created, {"content": ev.text}, tokens=pending)
                pending = 0
            if ev.final:
                yield fmt.chat_chunk(cid, model, created, {}, ev.finish_reason,
                                     fmt.structured(constraint, "".join(parts), ev.finish_reason))
                if body.include_usage:
                    yield fmt.usage_chunk(cid, "chat.completion.chunk", model, created, ev.usage)

    return _sse(chunks())


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    with _runtime(request).admit(body.model) as served:
        engine, served_model = served.answering()
        req = body.to_engine()
        events = await submit(engine, req)
    cid, model, created = fmt.new_id("cmpl"), served_model.name, int(time.time())
    if not body.stream:
        done = await collect(request, req, events)
        return fmt.text_completion(cid, model, created, done.text, done.finish_reason, done.usage)

    async def chunks():
        async for ev in events_of(req, events):
            if ev.error is not None:
                raise ev.error
            if ev.text or ev.final:
                yield fmt.text_completion(cid, model, created, ev.text, ev.finish_reason)
            if ev.final and body.include_usage:
                yield fmt.usage_chunk(cid, "text_completion", model, created, ev.usage)

    return _sse(chunks())


def _sse(chunks) -> EventSourceResponse:
    async def frames():
        try:
            async for obj in chunks:
                yield {"data": json.dumps(obj, ensure_ascii=False)}
            yield {"data": "[DONE]"}
        except EngineError as e:
            yield {"event": "error", "data": json.dumps(from_engine(e).body(), ensure_ascii=False)}
        except APIError as e:
            yield {"event": "error", "data": json.dumps(e.body(), ensure_ascii=False)}

    return EventSourceResponse(frames(), ping=15, headers={"Cache-Control": "no-cache"})
