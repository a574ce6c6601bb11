"""GET /metrics: the engine's running totals in the Prometheus text format.

With --backend, the backend's own speculative-decoding totals join them where it publishes
them (vLLM), named flashdesk_backend_spec_*: they count all of the backend's traffic, not only
what came through this server.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

router = APIRouter()

# metric -> (Prometheus name, type, help, label name)
METRICS = {
    "requests": ("flashdesk_requests_total", "counter", "Finished generation requests.", "finish_reason"),
    "prompt_tokens": ("flashdesk_prompt_tokens_total", "counter", "Prompt tokens processed.", None),
    "completion_tokens": ("flashdesk_completion_tokens_total", "counter", "Tokens generated.", None),
    "spec_verifies": ("flashdesk_spec_verifies_total", "counter", "Speculative verify passes.", "mode"),
    "spec_drafted": ("flashdesk_spec_drafted_tokens_total", "counter", "Drafted tokens verified.", "mode"),
    "spec_accepted": ("flashdesk_spec_accepted_tokens_total", "counter", "Drafted tokens accepted.", "mode"),
}


# backend_wire.SPEC_COUNTERS and SPEC_GAUGES key -> (Prometheus name, type, help)
BACKEND_SPEC = {
    "drafts": ("flashdesk_backend_spec_drafts_total", "counter",
               "The backend's speculative verify steps (its own count)."),
    "draft_tokens": ("flashdesk_backend_spec_drafted_tokens_total", "counter",
                     "Tokens the backend drafted (its own count)."),
    "accepted_tokens": ("flashdesk_backend_spec_accepted_tokens_total", "counter",
                        "Drafted tokens the backend accepted (its own count)."),
    "accept_rate": ("flashdesk_backend_spec_accept_rate", "gauge",
                    "Share of drafted tokens the backend accepted over its last interval (its own figure)."),
    "accept_length": ("flashdesk_backend_spec_accept_length", "gauge",
                      "Tokens per verify step on the backend over its last interval (its own figure)."),
}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> str:
    now = request.app.state.runtime.served
    engine = now.engine
    lines = []
    totals = engine.totals.snapshot() if engine is not None else {}
    for key, (name, kind, help_, label) in METRICS.items():
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        rows = sorted((lab, v) for (k, lab), v in totals.items() if k == key)
        for lab, value in rows or ([("", 0)] if label is None else []):
            lines.append(f'{name}{{{label}="{lab}"}} {value}' if label else f"{name} {value}")
    if engine is not None:
        st = engine.stats()
        lines += ["# HELP flashdesk_active_requests Requests being generated.",
                  "# TYPE flashdesk_active_requests gauge", f"flashdesk_active_requests {st.active}",
                  "# HELP flashdesk_queued_requests Requests waiting for a free slot.",
                  "# TYPE flashdesk_queued_requests gauge", f"flashdesk_queued_requests {st.queued}"]
        if st.refused is not None:  # the local engine's queue limit (a backend keeps its own queue)
            lines += [
                "# HELP flashdesk_busy_refusals_total Requests refused with a 429 (every slot busy, the queue full).",
                "# TYPE flashdesk_busy_refusals_total counter", f"flashdesk_busy_refusals_total {st.refused}"]
    if engine is not None:
        spec = await engine.spec_figures() or {}  # only what a backend published: no zeros for the rest
        for key, (name, kind, help_) in BACKEND_SPEC.items():
            if key in spec:
                lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {spec[key]:g}"]
    return "\n".join(lines) + "\n"
