"""The speculation names at the server's edge: the types that validate them, and what the
server publishes about speculation, in one spelling for GET /health and GET /v1/system.

The names (modes, selectors, the largest block) are engine/speculative/params.py's: the
settings, the request schemas and the CLI take their types from here, and the UI builds its
choices from `names()` in /health instead of keeping its own list. Once a model is loaded,
the engine's facts join them: the drafters it has (and the DFlash draft's kind), its default mode, and whether
speculation is exact on this backend (`exact`, the reason in `exact_why`) and on (`enabled`),
and on a banded build the most verify rows it stays exact for (`max_rows`; null: any), and what
it did for recent answers here (`measured`: their count and estimated speed-up; null before one),
and how prompts are cut so that answers never depend on the cache (`prompt_chunk`: the chunk size
where prompts are cut at its multiples, null where anywhere; `prompt_why`).
With --backend, `published()` adds the backend's own totals over all its traffic
(`backend_counters`, from its Prometheus /metrics), asked when the route answers.

What this is not: a route, or the decision to speculate (that is the engine's).
"""

from __future__ import annotations

import dataclasses

from engine.api import EngineAPI
# The engine's Literals, re-exported for the settings and the API schemas: pydantic refuses anything else,
# listing the names.
from engine.speculative.params import MAX_BLOCK, MODES, SELECTORS
from engine.speculative.params import Mode as Mode, Selector as Selector


def names() -> dict:
    """The choices a request may send; they do not depend on the model."""
    return {"modes": list(MODES), "selectors": list(SELECTORS), "max_block": MAX_BLOCK}


def facts(engine: EngineAPI) -> dict:
    """`names()` plus what this loaded engine does with them."""
    return names() | dataclasses.asdict(engine.speculation_facts())


async def published(engine: EngineAPI) -> dict:
    """`facts()`, and for a backend `backend_counters` asked now: what /health and /v1/system publish."""
    body = facts(engine)
    if engine.capabilities.backend:
        body["backend_counters"] = backend_counters(await engine.spec_figures())
    return body


def backend_counters(counts: dict | None) -> dict | None:
    """The backend's own figures (backend_wire.spec_figures; null where it publishes none) and what they mean:
    `acceptance`, drafted tokens accepted (accepted / draft_tokens), and `tau`, tokens per verify step as in
    usage.speculation.tau (1 + accepted / drafts: vLLM's "mean acceptance length"). SGLang publishes no
    counts, only both rates over its last interval (SPEC_GAUGES): they are taken as they are. A figure it did
    not publish, or nothing drafted yet, is a null there, never a zero."""
    if counts is None:
        return None
    drafts, drafted, accepted = (counts.get(k) for k in ("drafts", "draft_tokens", "accepted_tokens"))
    rate, length = counts.get("accept_rate"), counts.get("accept_length")
    return {
        "drafts": _count(drafts), "draft_tokens": _count(drafted), "accepted_tokens": _count(accepted),
        "acceptance": round(accepted / drafted, 4) if accepted is not None and drafted else _rate(rate, 4),
        "tau": round(1 + accepted / drafts, 3) if accepted is not None and drafts else _rate(length, 3),
    }


def _rate(v: float | None, digits: int) -> float | None:
    return round(v, digits) if v else None  # SGLang's gauges read 0 before anything was drafted: not a rate


def _count(v: float | None) -> int | float | None:
    return int(v) if v is not None and v.is_integer() else v  # Prometheus writes every count as a float

