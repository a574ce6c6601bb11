"""OpenAI wire objects: chat.completion, chat.completion.chunk, text_completion.

Pure functions from engine results to JSON-ready dicts; no I/O.
"""

from __future__ import annotations

import time
import uuid
from typing import overload

from engine import Usage
from engine.grammar.schema import Constraint
from engine.speculative.params import SpecReport


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def finish(reason: str | None) -> str | None:
    # "cancelled" never reaches a client that is still listening; report it as a stop.
    return None if reason is None else ("length" if reason == "length" else "stop")


@overload
def usage(u: Usage) -> dict: ...
@overload
def usage(u: Usage | None) -> dict | None: ...
def usage(u: Usage | None) -> dict | None:
    if u is None:
        return None
    counted = u.counted  # False: a backend that sent no token counts (server/runtime/backend.py): null, not 0
    out = {
        "prompt_tokens": u.prompt_tokens if counted else None,
        "completion_tokens": u.completion_tokens if counted else None,
        "total_tokens": u.total_tokens if counted else None,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens if counted else None},  # KV reused from before
        # flashdesk extension: where the time went
        "timings": {"prefill_ms": round(u.prefill_ms, 2), "decode_ms": round(u.decode_ms, 2),
                    "decode_tokens_per_s": round(u.decode_tok_per_s, 2)},
    }
    if u.speculation is not None:  # flashdesk extension: tau, acceptance by position, time shares
        out["speculation"] = speculation(u.speculation)
    return out


def speculation(s: SpecReport) -> dict:
    """usage.speculation on the wire: what speculation did for this answer."""
    return {
        "mode": s.mode, "selector": s.selector, "verifies": s.verifies, "drafted": s.drafted,
        "accepted": s.accepted, "tau": round(s.tau, 3), "plain_steps": s.plain_steps,
        "acceptance_by_position": [round(x, 3) for x in s.acceptance_by_position],
        "accepted_at": list(s.accepted_at), "drafted_at": list(s.drafted_at),
        "draft_ms": round(s.draft_ms, 2), "select_ms": round(s.select_ms, 3), "verify_ms": round(s.verify_ms, 2),
        "plain_ms": round(s.plain_ms, 2), "upkeep_ms": round(s.upkeep_ms, 2),
        "committed_by_source": dict(s.committed_by_source), "speedup": s.speedup,
    }


@overload
def structured(constraint: Constraint, text: str, reason: str | None) -> dict: ...
@overload
def structured(constraint: Constraint | None, text: str, reason: str | None) -> dict | None: ...
def structured(constraint: Constraint | None, text: str, reason: str | None) -> dict | None:
    """flashdesk extension on a choice with a response_format: whether its content is a
    complete, valid answer. Output cut off by max_tokens is never reported valid."""
    if constraint is None:
        return None
    if reason == "length":
        errors = ["the answer reached max_tokens before the JSON was complete; HINT: raise max_tokens"]
    else:
        errors = constraint.validate(text)
    return {"valid": not errors, "errors": errors}


def chat_completion(cid: str, model: str, text: str, reason: str, u: Usage, check: dict | None = None) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": text},
              "logprobs": None, "finish_reason": finish(reason)}
    if check is not None:
        choice["structured_output"] = check
    return {
        "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [choice],
        "usage": usage(u),
    }


def chat_chunk(cid: str, model: str, created: int, delta: dict, reason: str | None = None,
               check: dict | None = None, tokens: int | None = None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish(reason)}
    if tokens is not None:  # flashdesk extension: how many tokens this delta's text came from (live tok/s)
        choice["tokens"] = tokens
    if check is not None:
        choice["structured_output"] = check
    return {
        "id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [choice],
    }


def usage_chunk(cid: str, obj: str, model: str, created: int, u: Usage | None) -> dict:
    return {"id": cid, "object": obj, "created": created, "model": model, "choices": [], "usage": usage(u)}


def text_completion(cid: str, model: str, created: int, text: str, reason: str | None,
                    u: Usage | None = None) -> dict:
    out = {
        "id": cid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish(reason)}],
    }
    if u is not None:
        out["usage"] = usage(u)
    return out
