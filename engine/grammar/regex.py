"""A Python regex as a DFA: the language jsonschema's "pattern" means, built for the grammar.

What it is: `search_dfa(p)` is the set of strings s for which `re.search(p, s)` finds a match (what
jsonschema's "pattern" means), as a deterministic automaton over code points (automaton.py's DFA).
What it is not: the automaton algebra or the GBNF writer (automaton.py: intersect, contains,
is_empty, minimal, to_gbnf), JSON Schema (string.py decides what a string node means) or a regex
engine for matching text.

Exact or refused: the regex is read by Python's own parser (re._parser, the one `re.search` uses),
so classes, escapes, \\d \\w \\s (their Unicode sets, found by re itself) and repeats mean what
they mean to jsonschema. Backreferences, lookaround, \\b,
atomic groups, possessive repeats and flags change the language in ways an automaton of this kind
does not follow: refused (Unsupported). One deliberate narrowing: `$` matches only at the end
(Python's also matches before a final newline), so the language is a subset of Python's, and
anything enforced from it still matches the pattern.

Construction: Thompson NFA with ^ and $ as conditional epsilon moves (^ only before the first
character; $ locks the state so it cannot read more), unanchored sides as loops over every code
point (search semantics), subset construction over the intervals each state's edges split, then
automaton.minimal (trim and minimise). MAX_STATES bounds every construction: a regex past it is
TooComplex.
References: Python's Lib/re/_parser.py and _constants.py (the parse tree); Hopcroft, Motwani,
Ullman, "Introduction to Automata Theory" ch. 2 (subset construction).
"""

from __future__ import annotations

import functools
import re
# sre's own parser: private modules of the standard library, which typeshed leaves out
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]

from .automaton import DFA, EVERYTHING, MAX_CODE, MAX_STATES, Charset, TooComplex, charset, minimal, negate, split_edges

MAX_NFA = 60000
MAX_REPEAT = 2000


class Unsupported(ValueError):
    """A regex feature whose language this module does not compute."""


@functools.cache
def _every_character() -> str:
    return "".join(map(chr, range(MAX_CODE + 1)))


@functools.cache
def _category(name: str) -> Charset:
    """The code points one of sre's classes (\\d \\D \\s \\S \\w \\W) matches: found by re itself
    over every code point, so the set is what jsonschema's re.search uses; once per process."""
    regex = {"DIGIT": r"\d+", "NOT_DIGIT": r"\D+", "SPACE": r"\s+", "NOT_SPACE": r"\S+",
             "WORD": r"\w+", "NOT_WORD": r"\W+"}[name]
    return tuple((m.start(), m.end() - 1) for m in re.finditer(regex, _every_character()))


# --- regex -> NFA ------------------------------------------------------------------------------

class _NFA:
    def __init__(self):
        self.edges: list[list] = []  # state -> [(charset, target)]
        self.eps: list[list] = []  # state -> [(None | "^" | "$", target)]

    def new(self) -> int:
        if len(self.edges) >= MAX_NFA:
            raise TooComplex(f"more than {MAX_NFA} automaton states")
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def char(self, s: int, cs: Charset) -> int:
        t = self.new()
        if cs:
            self.edges[s].append((cs, t))
        return t

    def seq(self, items, s: int) -> int:
        for op, av in items:
            s = self.item(op, av, s)
        return s

    def item(self, op, av, s: int) -> int:
        if op is sre.LITERAL:
            return self.char(s, ((av, av),))
        if op is sre.NOT_LITERAL:
            return self.char(s, negate(((av, av),)))
        if op is sre.ANY:  # no DOTALL: anything but "\n"
            return self.char(s, negate(((10, 10),)))
        if op is sre.IN:
            return self.char(s, _class(av))
        if op is sre.BRANCH:
            end = self.new()
            for alt in av[1]:
                a = self.new()
                self.eps[s].append((None, a))
                self.eps[self.seq(alt, a)].append((None, end))
            return end
        if op is sre.SUBPATTERN:
            _, add, remove, sub = av
            if add or remove:
                raise Unsupported("inline flags such as (?i:...) are not supported")
            return self.seq(sub, s)
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):  # laziness does not change which strings match
            lo, hi, sub = av
            bounded = hi is not sre.MAXREPEAT
            if lo > MAX_REPEAT or (bounded and hi > MAX_REPEAT):
                raise Unsupported(f"repetition counts above {MAX_REPEAT} are not supported")
            for _ in range(lo):
                s = self.seq(sub, s)
            end = self.new()
            if not bounded:
                self.eps[s].append((None, end))
                self.eps[self.seq(sub, s)].append((None, s))
                return end
            for _ in range(hi - lo):
                self.eps[s].append((None, end))
                s = self.seq(sub, s)
            self.eps[s].append((None, end))
            return end
        if op is sre.AT:
            if av in (sre.AT_BEGINNING, sre.AT_BEGINNING_STRING):
                cond = "^"
            elif av in (sre.AT_END, sre.AT_END_STRING):
                cond = "$"
            else:
                raise Unsupported(r"\b and \B are not supported")
            t = self.new()
            self.eps[s].append((cond, t))
            return t
        names = {sre.GROUPREF: "backreferences", sre.GROUPREF_EXISTS: "conditional groups",
                 sre.ASSERT: "lookaround assertions", sre.ASSERT_NOT: "lookaround assertions",
                 sre.ATOMIC_GROUP: "atomic groups", sre.POSSESSIVE_REPEAT: "possessive repeats"}
        raise Unsupported(f"{names.get(op, str(op).lower())} are not supported")


def _class(items) -> Charset:
    pairs, negated = [], False
    for op, av in items:
        if op is sre.NEGATE:
            negated = True
        elif op is sre.LITERAL:
            pairs.append((av, av))
        elif op is sre.RANGE:
            pairs.append(av)
        elif op is sre.CATEGORY:
            pairs += _category(str(av).removeprefix("CATEGORY_"))
        else:
            raise Unsupported(f"{str(op).lower()} in a class is not supported")
    cs = charset(pairs)
    return negate(cs) if negated else cs


@functools.lru_cache(maxsize=256)
def search_dfa(pattern: str) -> DFA:
    """The strings in which re.search(pattern, s) finds a match ($ only at the end)."""
    try:
        tree = _parser.parse(pattern)
    except re.error as e:
        raise Unsupported(f"not a valid regular expression ({e})") from None
    if tree.state.flags & ~int(re.UNICODE):
        raise Unsupported("flags such as (?i) are not supported")
    nfa = _NFA()
    start = nfa.new()
    nfa.edges[start].append((EVERYTHING, start))  # a match may start anywhere
    body = nfa.new()
    nfa.eps[start].append((None, body))
    end = nfa.seq(tree, body)
    nfa.edges[end].append((EVERYTHING, end))  # and anything may follow it
    return _determinise(nfa, start, end)


# --- NFA -> DFA ---------------------------------------------------------------------------------

def _determinise(nfa: _NFA, start: int, accept: int) -> DFA:
    def closure(items, at_start: bool) -> frozenset:
        seen, todo = set(items), list(items)
        while todo:
            q, locked = todo.pop()
            for cond, t in nfa.eps[q]:
                if cond == "^" and not at_start:
                    continue
                nxt = (t, locked or cond == "$")
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return frozenset(seen)

    first = closure({(start, False)}, True)
    index, order = {first: 0}, [first]
    trans: list[list] = []
    while len(trans) < len(order):
        here = order[len(trans)]
        edges = [(cs, t) for q, locked in here if not locked for cs, t in nfa.edges[q]]
        row = []
        for cs, (targets,) in split_edges([edges]):
            nxt = closure({(t, False) for t in targets}, False)
            if nxt not in index:
                if len(order) >= MAX_STATES:
                    raise TooComplex(f"more than {MAX_STATES} states")
                index[nxt] = len(order)
                order.append(nxt)
            row.append((cs, index[nxt]))
        trans.append(row)
    return minimal(trans, {i for i, s in enumerate(order) if any(q == accept for q, _ in s)})
