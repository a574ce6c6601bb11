"""The work-order API: parse a free-text message into validated JSON, list the templates,
and read back or export the audit trail of every parse.

POST /v1/workorders/parse           text + template (or schema) -> result, needs_review, warnings
GET  /v1/workorders/templates       built-in and user templates (and files that did not load)
GET  /v1/workorders/templates/{n}   one template with its schema
GET  /v1/workorders                 the audit trail, newest first, with filters
GET  /v1/workorders/export          the same as CSV (Excel-ready) or JSONL
GET  /v1/workorders/{id}            one stored parse

A reply email's quoted history is removed before the parse (workorders/thread.py; the answer's
`stripped` says what went; `strip_quoted: false` turns it off), and a message still too long
for the context is parsed from its start and needs review (extract.fit_request).

Extraction is greedy (temperature 0) and grammar-constrained by the template's schema, with
speculation on (prompt lookup shines here: the answer copies spans of the message). With
--backend the backend enforces the schema; the answer is validated here all the same.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Awaitable, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from engine import EngineError, InvalidRequest
from engine.errors import ServerBusy

from .. import openai_format as fmt
from ...stores.audit import AuditLog, AuditLogError, ParseRecord
from ...runtime.bridge import collect, submit
from ..errors import APIError
from ..schemas import Speculative
from ...workorders import extract
from ...workorders.templates import Template, from_schema
from ...workorders.thread import strip_quoted

router = APIRouter(prefix="/v1/workorders")
# A whole reply thread is cheap to scan for its quoted history; megabytes are refused before that.
MAX_TEXT_CHARS = 200_000
SQL_INT_MAX = 2**63 - 1  # SQLite's largest integer: a larger offset would fail in sqlite3 (a 500), not a 400


class ParseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)  # unknown fields are a 400

    text: str
    template: str | None = None
    schema_: dict | None = Field(None, alias="schema")
    instructions: str | None = Field(None, max_length=4000, description="with a custom schema: the task, in words")
    sent_date: dt.date | None = None
    language: Literal["en", "zh-TW", "zh", "mixed"] | None = None
    model: str | None = None
    max_tokens: int | None = Field(None, ge=16)
    speculative: Speculative | None = None
    strip_quoted: bool = True  # False: the caller already cleaned the text, parse it as sent


def _state(request: Request):
    return request.app.state


def _audit(request: Request) -> AuditLog:
    audit = _state(request).audit
    if audit is None:  # the app kept why it could not open the file (server/http/app.py); a 503
        raise AuditLogError(_state(request).audit_error or "see the server log")
    return audit


def _template(request: Request, body: ParseRequest) -> Template:
    if body.schema_ is not None and body.template is not None:
        raise InvalidRequest("give either template or schema, not both", param="schema")
    if body.schema_ is not None:
        return from_schema(body.schema_, body.instructions)
    if body.instructions is not None:
        raise InvalidRequest("instructions go with a custom schema; a template has its own", param="instructions")
    return _state(request).templates.get(body.template or "work_order")


async def _kept_if_failed(audit, about: dict, warnings: list, step: Awaitable):
    """Await a step of a parse; the trail keeps a failed parse too (a hang-up is a 499). A 429 is
    not kept: the request was not read at all, and the caller sends it again."""
    try:
        return await step
    except ServerBusy:
        raise
    except (EngineError, APIError) as e:
        await run_in_threadpool(audit.record, ParseRecord(
            **about, output=None, valid=False, finish_reason="error", needs_review=True,
            review_reasons=["the parse failed"], warnings=warnings, error=getattr(e, "message", str(e)),
            review_details=[{"code": "failed", "field": None, "params": {}, "message": "the parse failed"}]))
        raise


@router.post("/parse")
async def parse(body: ParseRequest, request: Request):
    text = body.text.strip()
    if not text:
        raise InvalidRequest("text is empty: send the message to parse", param="text")
    if len(text) > MAX_TEXT_CHARS:
        raise APIError(400, f"text has {len(text)} characters; at most {MAX_TEXT_CHARS} are accepted. "
                            "HINT: send one message per request", param="text", code="text_too_long")
    template = _template(request, body)
    audit = _audit(request)
    with _state(request).runtime.admit(body.model) as served:  # until the parse is in the engine's queue
        engine, served_model = served.answering()
        warnings = []
        sent = body.sent_date or dt.date.today()
        if body.sent_date is None:
            warnings.append({"field": "sent_date", "code": "no_sent_date", "params": {"date": sent.isoformat()},
                             "message": f"not given: relative dates were resolved against today ({sent.isoformat()})"})
        spec = body.speculative.params() if body.speculative else Speculative().params()
        quoted = await run_in_threadpool(strip_quoted, text) if body.strip_quoted else None
        newest = quoted.text if quoted else text
        req, read, cut = await run_in_threadpool(extract.fit_request, engine, template, newest, sent, body.language,
                                                 body.max_tokens, spec)
        stripped = {"quoted_history": quoted.note() if quoted else None, "cut_to_fit": cut.note() if cut else None}
        about = dict(template=template.name, model=served_model.name, input_text=body.text,
                     sent_date=sent.isoformat(), language=body.language)
        events = await _kept_if_failed(audit, about, warnings, submit(engine, req))
    done = await _kept_if_failed(audit, about, warnings, collect(request, req, events))
    out = extract.assess(engine, template, done, read, sent, cut, shown=body.text)
    usage = fmt.usage(done.usage)
    record = ParseRecord(**about, output=out.result, valid=out.valid,
                         finish_reason=done.finish_reason, needs_review=out.review.needs_review,
                         review_reasons=out.review.reasons, review_details=out.review.details,
                         warnings=warnings + out.review.warnings,
                         timings=usage["timings"], speculation=usage.get("speculation"),
                         error=None if out.valid else "; ".join(out.errors), unavailable=out.unavailable,
                         sources=out.sources)
    record_id = await run_in_threadpool(audit.record, record)
    return {
        "id": record_id, "object": "workorder.parse", "created": int(time.time()), "model": served_model.name,
        "template": template.name, "sent_date": sent.isoformat(), "result": out.result, "valid": out.valid,
        "errors": out.errors, "needs_review": out.review.needs_review, "review_reasons": out.review.reasons,
        "review_details": out.review.details,
        "warnings": record.warnings, "field_confidence": {k: round(v, 3) for k, v in out.confidence.items()},
        "sources": out.sources,  # x-copy fields: [[start, end], ...] of the text as sent, where each came from
        "finish_reason": fmt.finish(done.finish_reason), "usage": usage,
        "unavailable": out.unavailable,  # with a backend: what needs the model here (extract.py), and why
        "stripped": stripped,  # what the model did not read: quoted history, and the end of a too-long message
    }


@router.get("/templates")
async def templates(request: Request):
    found, broken = _state(request).templates.all()
    return {"object": "list", "data": [t.summary() for t in found.values()],
            "errors": [{"file": f, "message": why} for f, why in broken.items()],
            "user_folder": str(_state(request).templates.user_dir)}


@router.get("/templates/{name}")
async def template(name: str, request: Request):
    found, _ = _state(request).templates.all()
    if name not in found:
        raise APIError(404, f"no template {name!r}; see GET /v1/workorders/templates", code="template_not_found")
    return found[name].detail()


class Filters(BaseModel):
    """The audit trail's filters, the same query parameters for the list and the export
    (server/stores/audit.py checks their values; a bad one is an AuditQueryError, a 400)."""

    template: str | None = None
    needs_review: bool | None = None
    status: str | None = None  # one of audit.STATUSES
    since: str | None = None  # ISO 8601 date or datetime
    until: str | None = None
    q: str | None = None  # a substring of the message


@router.get("")
async def list_parses(request: Request, filters: Filters = Depends(), limit: int = Query(50, ge=1, le=1000),
                      offset: int = Query(0, ge=0, le=SQL_INT_MAX)):
    audit, where = _audit(request), filters.model_dump()
    data = await run_in_threadpool(lambda: audit.list(**where, limit=limit, offset=offset))
    total = await run_in_threadpool(lambda: audit.count(**where))
    return {"object": "list", "data": data, "total": total, "limit": limit, "offset": offset}


@router.get("/export")
async def export(request: Request, format: Literal["csv", "jsonl"] = "csv", filters: Filters = Depends()):
    chunks = _audit(request).export(format, **filters.model_dump())
    first = next(chunks, "")  # bad filters raise here, before the 200 is sent

    def body():
        yield first
        yield from chunks

    media = "text/csv; charset=utf-8" if format == "csv" else "application/x-ndjson; charset=utf-8"
    name = f"workorders-{dt.date.today().isoformat()}.{format}"
    return StreamingResponse(body(), media_type=media,
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/{record_id}")
async def get_parse(record_id: str, request: Request):
    found = await run_in_threadpool(_audit(request).get, record_id)
    if found is None:
        raise APIError(404, f"no stored parse {record_id!r}", code="workorder_not_found")
    return found
