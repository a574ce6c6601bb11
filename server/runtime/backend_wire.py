"""The wire to an OpenAI-compatible backend (vLLM, SGLang, llama.cpp's or llama-cpp-python's
server): the request body made from a `GenerationRequest`, the backend's errors as engine
errors, and its Server-Sent Events read back as chunks.

What this is not: the engine adapter that runs the requests (server/runtime/backend.py), or our own
wire format (server/http/openai_format.py). Reference: OpenAI's chat and completions API, which
vLLM and SGLang follow, including `stream_options.include_usage` and the extra sampling
fields `top_k` and `min_p`.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from engine import ChatPrompt, EngineError, GenerationRequest, InvalidRequest
from engine.grammar import copy
from engine.sampling import SamplingParams

CONNECT_TIMEOUT_S = 5.0  # a backend on the LAN answers a connect at once; longer means it is down
# Between two chunks of an answer: a big backend under load may queue a request for a while
# before its first token, so this is generous; a backend that says nothing this long is stuck.
READ_TIMEOUT_S = 300.0
PROBE_TIMEOUT_S = 3.0  # GET /v1/models for /health: a health check must answer quickly

# vLLM's speculative-decoding counters on its Prometheus /metrics (docs.vllm.ai, vllm.v1.spec_decode.metrics
# SpecDecodingProm): drafts (verify steps), drafted tokens, accepted tokens; summed over engines.
SPEC_COUNTERS = {"drafts": "vllm:spec_decode_num_drafts_total",
                 "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
                 "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total"}
# SGLang's gauges (with --enable-metrics; sglang/srt/metrics/collector.py): drafted tokens accepted (0-1) and
# tokens per verify step, the bonus token included (our tau), over its last log interval; averaged over ranks.
SPEC_GAUGES = {"accept_rate": "sglang:spec_accept_rate", "accept_length": "sglang:spec_accept_length"}


class BackendUnavailable(EngineError):
    """The backend cannot be reached (connection refused, DNS, timeout): a 503."""

    code = "backend_unavailable"


class BackendFailed(EngineError):
    """The backend answered, but with a server error or a broken stream: a 502."""

    code = "backend_error"


class BackendRefused(InvalidRequest):
    """The backend refused the request as invalid (its 4xx): the client's 400, in the backend's words."""

    code = "backend_refused"


class UnsupportedWithBackend(InvalidRequest):
    """A field or feature flashdesk cannot pass to a backend, refused rather than dropped: a 400."""

    code = "unsupported_with_backend"


def base_url(url: str) -> str:
    """The backend's API root ending in /v1: `http://host:8000` and `http://host:8000/v1` are the same."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http(s) URL. HINT: --backend http://HOST:PORT (the vLLM or "
                         "SGLang server's address)")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r}: give the server's address only, without ?query or #fragment")
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path if path.endswith('/v1') else path + '/v1'}"


def refuse_unsupported(req: GenerationRequest) -> None:
    """400 for what a backend request cannot carry. Each is refused, never silently dropped."""
    spec = req.speculative
    if spec.mode != "auto" or spec.selector is not None or spec.block is not None:
        raise UnsupportedWithBackend("speculation is configured on the backend server (e.g. vLLM's "
                                     "--speculative-config), not per request. HINT: leave out `speculative`",
                                     param="speculative")
    if req.grammar and req.response_format is None:  # a grammar of our own making (work orders)
        raise UnsupportedWithBackend("a grammar made here cannot be passed to a backend; only response_format "
                                     "can", param="response_format")
    fmt = req.response_format if isinstance(req.response_format, dict) else {}
    schema = fmt.get("json_schema", {}).get("schema") if isinstance(fmt.get("json_schema"), dict) else None
    if isinstance(schema, dict) and copy.fields(schema):
        raise UnsupportedWithBackend(f'"{copy.KEYWORD}" fields are enforced by the model here; a backend would '
                                     "ignore them. HINT: drop the keyword and check the values yourself",
                                     param="response_format")
    if req.close_within:
        raise UnsupportedWithBackend("closing the JSON within max_tokens needs the model here; a backend "
                                     "cannot do it", param="max_tokens")
    if req.logprobs and not isinstance(req.prompt, ChatPrompt):
        raise UnsupportedWithBackend("token log-probabilities are read from a backend's chat answers only",
                                     param="logprobs")


def _sampling(s: SamplingParams) -> dict:
    # The OpenAI fields always; top_k and min_p (not OpenAI's, but vLLM's, SGLang's and llama.cpp's)
    # only when they are on, so a backend without them is not sent a field it may refuse.
    out = {"temperature": s.temperature, "top_p": s.top_p,
           "presence_penalty": s.presence_penalty, "frequency_penalty": s.frequency_penalty}
    if s.top_k:
        out["top_k"] = s.top_k
    if s.min_p:
        out["min_p"] = s.min_p
    if s.seed is not None:
        out["seed"] = s.seed
    return out


def request_body(req: GenerationRequest, model: str) -> tuple[str, dict]:
    """(path under /v1, JSON body) of the streamed backend request that answers `req`."""
    body = {"model": model, "stream": True, "stream_options": {"include_usage": True}, **_sampling(req.sampling)}
    if req.max_tokens is not None:
        body["max_tokens"] = req.max_tokens
    if req.stop:
        body["stop"] = list(req.stop)
    if isinstance(req.prompt, ChatPrompt):
        if req.response_format is not None:
            body["response_format"] = req.response_format  # as the client sent it: the backend enforces it
        if req.logprobs:  # each token's log p, no alternatives (chunk_parts reads them)
            body |= {"logprobs": True, "top_logprobs": 0}
        return "/chat/completions", {**body, "messages": list(req.prompt.messages)}
    return "/completions", {**body, "prompt": req.prompt}


def error_message(status: int, text: str) -> str:
    """The backend's own words from its error body (OpenAI's shape, FastAPI's `detail`, or plain text)."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:500] or f"HTTP {status}"
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return (err if isinstance(err, str) else json.dumps(err, ensure_ascii=False))[:500]
    return text.strip()[:500]


def error_for(status: int, text: str, url: str) -> EngineError:
    """The engine error of a backend's HTTP error status."""
    said = error_message(status, text)
    if status in (401, 403):
        return BackendFailed(f"the backend at {url} refused flashdesk's key ({status}: {said}). "
                             "HINT: start flashdesk with --backend-key KEY (the key the backend expects)")
    if status == 404:
        return BackendFailed(f"the backend at {url} has no such model or endpoint (404: {said}). "
                             "HINT: check --backend and --backend-model against its GET /v1/models")
    if 400 <= status < 500:
        return BackendRefused(f"the backend refused the request ({status}): {said}")
    return BackendFailed(f"the backend at {url} failed ({status}): {said}")


def sse_data(line: str) -> str | None:
    """The data of one SSE line, or None for comments, event names, ids and blank lines."""
    if not line.startswith("data:"):
        return None
    return line[5:].strip()


def chunk_parts(chunk: dict) -> tuple[str, str | None, list[tuple[bytes, float]]]:
    """(new text, finish reason or None, (bytes, log p) of each token where the chunk carries chat
    logprobs) of one streamed chunk, chat or completion."""
    if "error" in chunk:  # vLLM reports a failure inside the stream this way
        raise BackendFailed(f"the backend failed mid-answer: {error_message(500, json.dumps(chunk))}")
    text, reason, tokens = [], None, []
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta")
        text.append((delta.get("content") if isinstance(delta, dict) else choice.get("text")) or "")
        reason = choice.get("finish_reason") or reason
        for t in (choice.get("logprobs") or {}).get("content") or []:
            # OpenAI's `bytes` say a token that ends inside a UTF-8 character exactly; its `token` text cannot
            raw = bytes(t["bytes"]) if t.get("bytes") is not None else str(t.get("token", "")).encode("utf-8")
            tokens.append((raw, float(t["logprob"])))
    return "".join(text), reason, tokens


def json_object_dialect(fmt: dict | None) -> dict | None:
    """OpenAI's `{"type": "json_schema", "json_schema": {"schema": S}}` in llama-cpp-python's dialect,
    `{"type": "json_object", "schema": S}` (its server knows no other and enforces S with a grammar),
    or None when `fmt` carries no json_schema."""
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    return {"type": "json_object", "schema": (fmt.get("json_schema") or {}).get("schema", {})}


def refuses_json_schema(err: EngineError) -> bool:
    """Whether a backend's error says it takes response_format json_object only (llama-cpp-python's 500
    "Input should be 'text' or 'json_object'"): then json_object_dialect is what it understands."""
    return "json_object" in err.message and "json_schema" in err.message


def spec_figures(text: str) -> dict | None:
    """The backend's own speculation figures from its Prometheus text: SPEC_COUNTERS' totals (summed over
    their labels: engines, models) and SPEC_GAUGES' values (averaged over ranks), each under its key; None
    when the backend publishes none of them (no speculation configured, or neither vLLM nor SGLang)."""
    wanted = {name: key for key, name in (SPEC_COUNTERS | SPEC_GAUGES).items()}
    seen: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            rest = line.rsplit("}", 1)[-1] if "{" in line else line[len(name):]  # "VALUE [TIMESTAMP]"
            try:
                value = float(rest.split()[0])
            except (ValueError, IndexError):
                continue  # a line we cannot read is not a figure
            seen.setdefault(wanted[name], []).append(value)
    return {k: (sum(v) if k in SPEC_COUNTERS else sum(v) / len(v)) for k, v in seen.items()} or None
