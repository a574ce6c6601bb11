"""Where each value of a JSON text lies: (start, end, path) per string, number, true, false and null;
and where in the message each copy field's value was copied from.

Used to tie the model's per-token confidence to fields ("items[0].quantity"), and to show a
person the words a value came from. Not a general JSON parser: it reads text that json.loads
already accepted (the grammar wrote it).
"""

from __future__ import annotations

import json
import math
import re

from engine.grammar import copy

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_WS = re.compile(r"[ \t\n\r]*")
_decoder = json.JSONDecoder()


def _skip_ws(s: str, i: int) -> int:
    """Where the whitespace from `i` on ends (_WS matches the empty string too: never None)."""
    m = _WS.match(s, i)
    assert m is not None
    return m.end()


def _number_end(s: str, i: int) -> int:
    """Where the JSON number at `i` ends (the text is valid JSON: one is there)."""
    m = _NUMBER.match(s, i)
    assert m is not None, f"no JSON number at {i}"
    return m.end()


def value_spans(text: str) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    _value(text, _skip_ws(text, 0), "", out)
    return out


def _value(s: str, i: int, path: str, out: list) -> int:
    c = s[i]
    if c == "{":
        i = _skip_ws(s, i + 1)
        while s[i] != "}":
            key, i = _decoder.raw_decode(s, i)
            i = _skip_ws(s, i) + 1  # the colon
            i = _value(s, _skip_ws(s, i), f"{path}.{key}" if path else key, out)
            i = _skip_ws(s, i)
            if s[i] == ",":
                i = _skip_ws(s, i + 1)
        return i + 1
    if c == "[":
        i, n = _skip_ws(s, i + 1), 0
        while s[i] != "]":
            i = _skip_ws(s, _value(s, i, f"{path}[{n}]", out))
            n += 1
            if s[i] == ",":
                i = _skip_ws(s, i + 1)
        return i + 1
    if c == '"':
        _, end = _decoder.raw_decode(s, i)
    elif c in "tfn":
        end = i + {"t": 4, "f": 5, "n": 4}[c]
    else:
        end = _number_end(s, i)
    out.append((i, end, path))
    return end


def field_confidence(text: str, pieces: list[bytes], logprobs: list[float]) -> dict[str, float]:
    """path -> the lowest token probability among the tokens that wrote that value.

    Token boundaries are byte offsets (a token may end inside a UTF-8 character), so value
    spans are converted from characters to bytes before they are compared."""
    starts, pos = [], 0
    for p in pieces:
        starts.append(pos)
        pos += len(p)
    raw = text.encode("utf-8")
    if pos != len(raw):  # pieces do not spell the text (stop strings, flushing): no confidence
        return {}
    out: dict[str, float] = {}
    for a, b, path in value_spans(text):
        ba, bb = len(text[:a].encode("utf-8")), len(text[:b].encode("utf-8"))
        ps = [math.exp(lp) for s, p, lp in zip(starts, pieces, logprobs) if s < bb and s + len(p) > ba]
        if ps:
            out[path] = min(ps)
    return out


def copy_values(result, fields: dict, path: str = "", pattern: str = ""):
    """(path, copy spec, value) of each copy field's string in `result`; path as value_spans names
    it ("items[0].color"), `fields` engine.grammar.copy.fields of the schema ("items[].color")."""
    if isinstance(result, dict):
        for key, sub in result.items():
            yield from copy_values(sub, fields, f"{path}.{key}" if path else key,
                                   f"{pattern}.{key}" if pattern else key)
    elif isinstance(result, list):
        for i, sub in enumerate(result):
            yield from copy_values(sub, fields, f"{path}[{i}]", f"{pattern}[]")
    elif isinstance(result, (str, int)) and not isinstance(result, bool) and pattern in fields:
        yield path, fields[pattern], result


def copied_from(result, fields: dict, text: str) -> dict[str, list[list[int]]]:
    """path -> the [start, end) character spans of `text` that a copy field's value was copied
    from: each part's first occurrence (a separator's parts one by one). A part not in `text` has
    no span (a backend does not enforce copies; review.py marks such values)."""
    out: dict[str, list[list[int]]] = {}
    for path, spec, value in copy_values(result, fields):
        if isinstance(value, int):
            spans = [list(span)] if (span := copy.written(value, text)) else []
        else:
            spans = [[at, at + len(part)] for part in spec.parts(value) if part and (at := text.find(part)) >= 0]
        if spans:
            out[path] = spans
    return out
