"""One extraction, without HTTP: the engine request for a message, and what its answer is worth.

`request_for` renders the template's prompt and sizes the answer to the context;
`fit_request` does the same for a message that may be too long, keeping its start (the
newest text of a reply is at the top) cut at a paragraph, line or sentence end; `assess`
turns the finished completion into the result, its validity, the field confidences and the
review. Shared by the API route and bench/workorders.py, so the benchmark measures exactly
what users get.

With a backend (server/runtime/backend.py) the request is a chat with the schema as `response_format`:
the backend renders, counts and fits the prompt, and enforces the schema with its own guided
decoding. What needs the model here is reported in `Outcome.unavailable`, never faked.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field

from engine import Completion, ContextLengthExceeded, GenerationRequest, InvalidRequest, SamplingParams
from engine.api import EngineAPI
from engine.grammar import copy
from engine.speculative.params import SpecParams

from ..http.openai_format import structured
from . import dates, prompt
from .review import Review, review, without_repeats
from .spans import copied_from, field_confidence
from .templates import Template

# What a parse through a backend cannot give (server/runtime/backend.py), by the name the response lists it under
NO_CLOSING = ("closing within max_tokens needs the model here: through a backend, an answer that reaches "
              "max_tokens is cut off (invalid, needs review) instead of closed early")
NO_CONFIDENCE = "field confidence needs token probabilities, and the backend returned none"
ANSWER_TOKENS = 1280  # room kept for the answer unless max_tokens says otherwise (a right answer: 250-600)
MIN_ANSWER_TOKENS = 256
# A parse wants the JSON, not a reasoning block before it: templates that can think (Qwen3, Qwen3.5)
# close theirs empty; a template without the variable ignores it. Catalog entries already say so;
# this reaches a model imported by hand too.
TEMPLATE_VARIABLES = {"enable_thinking": False}
PARAGRAPH_SLACK = 0.75  # a cut moves back to a paragraph end when that keeps this share of what fits


def closing_reserve(schema: dict) -> int:
    """Tokens kept at the end of the answer for closing its JSON (GenerationRequest.close_within):
    about 12 per property (a forced key and a null) plus brackets, over every property the
    schema names, nested ones and $defs included."""
    def props(node) -> int:
        if isinstance(node, dict):
            return len(node.get("properties", {})) + sum(props(v) for v in node.values())
        if isinstance(node, list):
            return sum(props(v) for v in node)
        return 0
    return 12 * props(schema) + 32


@dataclass
class Outcome:
    result: dict | None
    valid: bool
    errors: list[str]
    review: Review
    confidence: dict[str, float] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)  # feature -> why (with a backend)
    sources: dict[str, list[list[int]]] = field(default_factory=dict)  # copy field -> spans of the message


def request_for(engine: EngineAPI, template: Template, text: str, sent: dt.date, language: str | None = None,
                max_tokens: int | None = None, spec: SpecParams = SpecParams()) -> GenerationRequest:
    """Greedy, grammar-constrained, with token log-probabilities; raises ContextLengthExceeded."""
    rendered = engine.render_chat(prompt.messages(template, text, sent, language), TEMPLATE_VARIABLES)
    if engine.capabilities.backend:  # it rendered a ChatPrompt, and sizes the answer to its own context
        # copy fields are checked after the fact there (review.py: not_in_message), not enforced
        fmt = {"type": "json_schema", "json_schema": {"name": template.name, "schema": copy.without(template.schema)}}
        return GenerationRequest(rendered, max_tokens, SamplingParams(temperature=0), [], spec, logprobs=True,
                              response_format=fmt)
    # the local engine: the rendered text, and its context (EngineAPI.render_chat, n_ctx)
    assert isinstance(rendered, str) and engine.n_ctx is not None
    ids = engine.tokenize_prompt(rendered)
    room = engine.n_ctx - len(ids)
    reserve = closing_reserve(template.schema)
    if max_tokens is None and room >= max(MIN_ANSWER_TOKENS, 2 * reserve):
        max_tokens = min(ANSWER_TOKENS, room)
    elif max_tokens is None or max_tokens > room or max_tokens < 2 * reserve:
        if max_tokens is not None and max_tokens < 2 * reserve <= room:
            raise InvalidRequest(f"max_tokens must be at least {2 * reserve} for this schema: the last {reserve} "
                                 "tokens are kept for closing the JSON", param="max_tokens")
        raise ContextLengthExceeded(
            f"the message ({len(text)} characters) with the template's instructions is {len(ids)} tokens, and "
            f"this model's context of {engine.n_ctx} tokens leaves no room for {max_tokens or MIN_ANSWER_TOKENS} "
            "tokens of answer. HINT: send a shorter message (one order per request), or start the server with a "
            "larger --ctx", param="text")
    return GenerationRequest(ids, max_tokens, SamplingParams(temperature=0), [], spec,
                             grammar=template.compiled.grammar_for([text]), logprobs=True, close_within=reserve)


@dataclass
class Cut:
    """What fit_request left out of a message too long for the context: its end, from `kept`
    characters on (`chars` characters, `lines` lines), cut at a `boundary`."""

    kept: int
    chars: int
    lines: int
    boundary: str  # "paragraph", "line" or "sentence"

    def note(self) -> dict:
        return {"kept_chars": self.kept, "chars": self.chars, "lines": self.lines, "boundary": self.boundary}


def fit_request(engine: EngineAPI, template: Template, text: str, sent: dt.date, language: str | None = None,
                max_tokens: int | None = None, spec: SpecParams = SpecParams()
                ) -> tuple[GenerationRequest, str, Cut | None]:
    """request_for on the whole text, else on its longest start that fits, ended at a line end
    (never inside a line, where a quantity or an address could be cut in half; sentence ends
    inside the first line only when no line fits). Returns the request, the text it reads and
    the cut. Still raises ContextLengthExceeded when not even the first line or sentence fits
    (the template's prompt alone, or one huge line that is not an email); a backend sizes the
    prompt itself, so its text is never cut here."""
    def attempt(part: str, answer: int | None) -> GenerationRequest | None:
        try:
            return request_for(engine, template, part, sent, language, answer, spec)
        except ContextLengthExceeded:
            return None

    try:
        return request_for(engine, template, text, sent, language, max_tokens, spec), text, None
    except ContextLengthExceeded as whole:
        refused = whole
    # A message cut anyway leaves the answer a quarter of the context (at most ANSWER_TOKENS),
    # not the bare minimum that would close a work order early; the minimum if nothing fits so.
    assert engine.n_ctx is not None  # only the local engine's request_for refuses a length
    roomy = max_tokens or max(min(ANSWER_TOKENS, engine.n_ctx // 4), MIN_ANSWER_TOKENS,
                              2 * closing_reserve(template.schema))
    for answer in dict.fromkeys((roomy, max_tokens)):
        for boundary, ends in (("line", _ends(text, r"\n")), ("sentence", _ends(_first_line(text), r"[.!?。！？]"))):
            found = _longest(ends, lambda end: attempt(text[:end], answer))
            if found:
                end, req = found
                if boundary == "line":  # a paragraph end close enough before it reads better
                    para = [e for e in ends if e <= end and text[e - 1:e + 1] == "\n\n"]
                    if para and para[-1] >= PARAGRAPH_SLACK * end and (again := attempt(text[:para[-1]], answer)):
                        end, req, boundary = para[-1], again, "paragraph"
                rest = text[end:]
                return req, text[:end].rstrip(), Cut(len(text[:end].rstrip()), len(rest.strip()),
                                                     len(rest.strip().splitlines()), boundary)
    raise refused


def _ends(text: str, pattern: str) -> list[int]:
    """Offsets just after each match of `pattern` (a line or sentence end), ascending."""
    return [m.end() for m in re.finditer(pattern, text) if m.end() < len(text)]


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def _longest(ends: list[int], fits) -> tuple[int, GenerationRequest] | None:
    """Binary search for the longest start text[:end] that fits (a longer start has more tokens)."""
    lo, hi, best = 0, len(ends) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        req = fits(ends[mid])
        if req is not None:
            best, lo = (ends[mid], req), mid + 1
        else:
            hi = mid - 1
    return best


def _resolve_date(template: Template, result: dict, text: str, sent: dt.date, notes: list) -> dict:
    """The template's date field from the message's own date words (dates.py), when that keeps
    the result valid; a note says what changed, and several candidate dates need review."""
    key = template.date_field
    if not key or key not in result:
        return result
    found, mentions, conflict = dates.due_date(text, sent)
    value, wrote = (found.isoformat() if found else None), result[key]
    said = ", ".join(f"{m.text!r} = {m.date.isoformat()}" for m in mentions)
    if value != wrote:
        candidate = dict(result, **{key: value})
        if not template.compiled.validate(json.dumps(candidate)):
            result = candidate
            code = "date_from_message" if said else "date_none"
            notes.append((key, code, f"the model wrote {wrote!r}; from the message: {said or 'no date'}",
                          {"wrote": wrote, "said": said}, False))
    if conflict:
        notes.append((key, "several_dates", f"the message gives several dates ({said}); the earliest is used",
                      {"said": said}, True))
        if isinstance(result.get("needs_review"), bool):  # the schema's own convention for conflicting dates
            result = dict(result, needs_review=True)
    return result


def assess(engine: EngineAPI, template: Template, done: Completion, text: str, sent: dt.date,
           cut: Cut | None = None, shown: str | None = None) -> Outcome:
    """`text` is what the model read (fit_request's), so the checks look where the model looked;
    copy fields' sources are character spans of `shown` (the message as sent; default `text`)."""
    errors = structured(template.compiled, done.text, done.finish_reason)["errors"]
    result = json.loads(done.text) if not errors else None
    confidence, repeats, unavailable = {}, 0, {}
    if not engine.capabilities.close_within:
        unavailable["close_within_max_tokens"] = NO_CLOSING
    if not engine.capabilities.logprobs and done.logprobs is None:
        unavailable["field_confidence"] = NO_CONFIDENCE
    if result is not None and done.logprobs:
        pieces = done.pieces if done.pieces is not None else [engine.piece(t) for t in done.tokens]
        confidence = field_confidence(done.text, pieces, done.logprobs)
    notes: list[tuple[str, str, str, dict, bool]] = []  # (field, code, message, params, needs review)
    if result is not None:
        deduped, repeats = without_repeats(result)
        if repeats and not template.compiled.validate(json.dumps(deduped)):  # e.g. a minItems holds
            result = deduped
        else:
            repeats = 0
        before = result.get(template.date_field) if template.date_field else None
        result = _resolve_date(template, result, text, sent, notes)
        if template.date_field and result.get(template.date_field) != before:
            confidence.pop(template.date_field, None)  # the value is no longer the model's
    fields = copy.fields(template.schema)
    verdict = review(result, errors, template.required, text, sent, confidence, repeats, copies=fields)
    for path, code, message, params, flag in notes:
        verdict.warn(path, code, message, **params)
        if flag:
            verdict.flag(code, message, path, **params)
    if cut is not None:
        verdict.flag("cut_to_fit", f"the message is too long for the context: only its first {cut.kept} characters "
                     f"were read (cut at a {cut.boundary} end); the last {cut.chars} characters ({cut.lines} lines) "
                     "were not parsed", **cut.note())
    if done.usage.closed_early and result is not None:
        verdict.flag("closed_early", "the answer ran long and was closed early to end within max_tokens: "
                     "values after that point are empty")
    sources = copied_from(result, fields, text if shown is None else shown)
    return Outcome(result, not errors, errors, verdict, confidence, unavailable, sources)
