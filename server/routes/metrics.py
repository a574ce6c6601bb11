"""GET /metrics: the engine's running totals in the Prometheus text format."""

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


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> str:
    engine = request.app.state.runtime.engine
    lines = []
    totals = dict(engine.totals) if engine is not None else {}
    for key, (name, kind, help_, label) in METRICS.items():
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        rows = sorted((lab, v) for (k, lab), v in totals.items() if k == key)
        for lab, value in rows or ([("", 0)] if label is None else []):
            lines.append(f'{name}{{{label}="{lab}"}} {value}' if label else f"{name} {value}")
    if engine is not None:
        st = engine.stats()
        lines += ["# HELP flashdesk_active_requests Requests being generated.",
                  "# TYPE flashdesk_active_requests gauge", f"flashdesk_active_requests {st['active']}",
                  "# HELP flashdesk_queued_requests Requests waiting for a free slot.",
                  "# TYPE flashdesk_queued_requests gauge", f"flashdesk_queued_requests {st['queued']}"]
    return "\n".join(lines) + "\n"
