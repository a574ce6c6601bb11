"""Copy fields: a string whose value must be a stretch of the request's own text.

What it is: the schema keyword `"x-copy"` (ours; JSON Schema lets a vocabulary add keywords, and
validators ignore ones they do not know). On a `"type": "string"` node, `true` means "a copy", and
`{"separator": "; "}` means one or more copies joined by that separator (phone numbers and emails
that stand apart in the message). A copy is a non-empty substring of one of the source texts
(the work-order message; a chat's user messages) that neither starts nor ends with whitespace.
Characters are copied as written: no case change, no spelling fixed, nothing translated. On an
`"integer"` node, `true` means a number the text writes in digits ("2,000" is 2000; "0912" is
912), within the node's bounds; a number written in words ("a dozen") is not one.

The substrings of a text are a regular language. Its suffix automaton recognizes every substring
with at most 2n - 1 states for n characters, and it is deterministic, so llama.cpp's grammar keeps
one stack per copy in progress. Every state is reached by one character only (every string a
state stands for ends in the same character), so "does not end with whitespace" is a property
of the state. `substrings` builds it for several texts at once (a copy never spans two), and
`define` writes the rules one request needs: the schema's grammar is compiled once (schema.py),
with the rule names of its copies (`Constraint.copy_rules`) left for each request to define.

What it is not: provenance (where in the text a value was copied from: server/workorders/spans.py),
the review of a parse (server/workorders), or a drafter.

References: Blumer, Blumer, Haussler, Ehrenfeucht, Chen, Seiferas 1985, "The smallest automaton
recognizing the subwords of a text"; the generalized construction for several texts as in
Mohri, Moreno, Weinstein 2009, "General suffix automaton construction algorithm and space bounds".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from . import automaton

KEYWORD = "x-copy"
SPACE = frozenset(" \t\n\r\f\v\u00a0\u3000")  # no copy starts or ends with these
_DIGITS = re.compile(r"\d+(?:[,，]\d{3})*(?!\d)")  # ASCII or not: int() reads any decimal digit
NOTHING = "[^\\u0000-\\U0010FFFF]"  # a GBNF class no character is in: a rule of no number


@dataclass(frozen=True)
class Rule:
    """A rule each request defines: the string copies (numbers None), or the numbers in lo..hi."""
    name: str
    numbers: tuple[int, int] | None = None


@dataclass(frozen=True)
class Copy:
    """What one `x-copy` node asks for."""
    separator: str | None = None  # None: one copy; else one or more joined by it

    @staticmethod
    def read(value) -> Copy:
        """The keyword's value -> Copy; ValueError (why) when it is not one we take."""
        if value is True:
            return Copy()
        if isinstance(value, dict) and set(value) == {"separator"}:
            sep = value["separator"]
            if isinstance(sep, str) and sep and sep.strip(" ") and not any(c in sep for c in '"\\') \
                    and all(c.isprintable() for c in sep):
                return Copy(sep)
            raise ValueError('"separator" must be printable text with something besides spaces, '
                             'and no \'"\' or \'\\\'')
        raise ValueError('must be true or {"separator": "..."}')

    def expression(self, rule: str) -> str:
        """The GBNF of the quoted value, `rule` the request's substring language."""
        if self.separator is None:
            return f'"\\"" {rule} "\\"" space'
        return f'"\\"" {rule} ({json.dumps(self.separator)} {rule})* "\\"" space'

    def parts(self, value: str) -> list[str]:
        return [value] if self.separator is None else value.split(self.separator)


def free_name(grammar: str) -> str:
    """A rule name for the copies that no rule of `grammar` starts with (splice.py's start "own")."""
    taken = [line.split(" ::= ")[0] for line in grammar.split("\n") if " ::= " in line]
    name = "copy"
    while any(t.startswith(name) for t in taken):
        name += "x"
    return name


def states(names) -> set[str]:
    """Of a whole request grammar's rule `names` (as Constraint.grammar_for writes it), those of its
    string copies' automaton: the longest `copy`, `copyx`, ... name defined (free_name makes the
    schema's own rules never start with it) and its `-N` states and `-cN` classes. A schema without
    copy fields but with a rule named like one is read as having them: the grammar drafter then
    guesses where nothing is copied, which costs a rejected span, never output."""
    base = max((n for n in names if re.fullmatch("copyx*", n)), key=len, default=None)
    if base is None:
        return set()
    return {n for n in names if n == base or re.fullmatch(re.escape(base) + r"-c?\d+", n)}


def substrings(sources: list[str]) -> automaton.DFA | None:
    """The copies of `sources` as a DFA (state 0 the start), None when there are none (no text
    that is not whitespace)."""
    nxt: list[dict[str, int]] = [{}]
    length, link, label = [0], [-1], [""]

    def new(n: int, edges: dict, parent: int, c: str) -> int:
        nxt.append(edges)
        length.append(n)
        link.append(parent)
        label.append(c)
        return len(nxt) - 1

    def split(p: int, c: str, q: int) -> int:
        """q's strings longer than p's + c move to a clone that takes p's + c itself."""
        clone = new(length[p] + 1, dict(nxt[q]), link[q], c)
        while p != -1 and nxt[p].get(c) == q:
            nxt[p][c] = clone
            p = link[p]
        link[q] = clone
        return clone

    for text in sources:
        last = 0
        for c in text:
            if c in nxt[last]:  # this text's prefix is already known from an earlier text
                q = nxt[last][c]
                last = q if length[q] == length[last] + 1 else split(last, c, q)
                continue
            cur = new(length[last] + 1, {}, 0, c)
            p = last
            while p != -1 and c not in nxt[p]:
                nxt[p][c] = cur
                p = link[p]
            if p != -1:
                q = nxt[p][c]
                link[cur] = q if length[q] == length[p] + 1 else split(p, c, q)
            last = cur
    nxt[0] = {c: t for c, t in nxt[0].items() if c not in SPACE}
    accept = {s for s in range(1, len(nxt)) if label[s] not in SPACE}
    return _trimmed(nxt, accept)


def _trimmed(nxt: list[dict[str, int]], accept: set[int]) -> automaton.DFA | None:
    """The states reachable from 0 that reach an accepting one, renumbered in reach order."""
    seen, order = {0}, [0]
    for s in order:
        for t in nxt[s].values():
            if t not in seen:
                seen.add(t)
                order.append(t)
    back: dict[int, list[int]] = {}
    for s in order:
        for t in nxt[s].values():
            back.setdefault(t, []).append(s)
    live = {s for s in order if s in accept}
    todo = list(live)
    while todo:
        for s in back.get(todo.pop(), ()):
            if s not in live:
                live.add(s)
                todo.append(s)
    if 0 not in live:
        return None
    number = {s: i for i, s in enumerate(s for s in order if s in live)}
    trans = []
    for s in number:
        by: dict[int, list] = {}
        for c, t in nxt[s].items():
            if t in live:
                by.setdefault(number[t], []).append((ord(c), ord(c)))
        trans.append(tuple((automaton.charset(pairs), t) for t, pairs in sorted(by.items())))
    return automaton.DFA(tuple(trans), frozenset(number[s] for s in live if s in accept))


def define(wanted, sources: list[str]) -> list[str]:
    """GBNF lines for every copy.Rule in `wanted`; ValueError when there is no string to copy."""
    lines = []
    for r in wanted:
        if r.numbers is None:
            lines += rules(sources, r.name)
        else:
            lo, hi = r.numbers
            found = sorted(n for n in numbers(sources) if lo <= n <= hi)
            lines.append(f"{r.name} ::= " + (" | ".join(f'"{n}"' for n in found) if found else NOTHING))
    return lines


def numbers(sources: list[str]) -> set[int]:
    """The integers `sources` write in digits, thousands separators read as such."""
    return {int(m[0].replace(",", "").replace("，", "")) for text in sources for m in _DIGITS.finditer(text)}


def written(n: int, text: str) -> tuple[int, int] | None:
    """Where `text` first writes the integer n in digits (numbers' reading), None if nowhere."""
    return next(((m.start(), m.end()) for m in _DIGITS.finditer(text)
                 if int(m[0].replace(",", "").replace("，", "")) == n), None)


def rules(sources: list[str], rule: str) -> list[str]:
    """GBNF lines defining `rule` as the copies of `sources`; ValueError when there are none."""
    dfa = substrings(sources)
    if dfa is None:
        raise ValueError("the text has nothing to copy from")
    return automaton.to_gbnf(dfa, rule)


def fields(schema: dict) -> dict[str, Copy]:
    """The copy fields of a (compiled, so well-formed) schema, by instance path with [] for any item
    ("customer_name", "items[].color"), as server/workorders/spans.py names values."""
    out: dict[str, Copy] = {}
    defs = {f"#/{c}/{k}": v for c in ("$defs", "definitions") for k, v in schema.get(c, {}).items()}

    def visit(node, path: str, seen: frozenset) -> None:
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref in defs and ref not in seen:
            visit(defs[ref], path, seen | {ref})
        if KEYWORD in node:
            out[path] = Copy.read(node[KEYWORD])
        for key in ("anyOf", "oneOf"):
            for alt in node.get(key, []):
                visit(alt, path, seen)
        for name, sub in node.get("properties", {}).items():
            visit(sub, f"{path}.{name}" if path else name, seen)
        if isinstance(node.get("items"), dict):
            visit(node["items"], f"{path}[]", seen)
        for sub in node.get("prefixItems", []):
            visit(sub, f"{path}[]", seen)

    visit(schema, "", frozenset())
    return out


def without(schema):
    """`schema` with every x-copy removed (for a backend, which cannot enforce it)."""
    if isinstance(schema, dict):
        return {k: without(v) for k, v in schema.items() if k != KEYWORD}
    if isinstance(schema, list):
        return [without(v) for v in schema]
    return schema
