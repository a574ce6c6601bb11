"""Regular languages for the grammar: a Python regex as a DFA, DFA algebra, and a DFA as GBNF.

What it is: `search_dfa(p)` is the set of strings s for which `re.search(p, s)` finds a match (what
jsonschema's "pattern" means), as a deterministic automaton over code points; `intersect`,
`contains` and `is_empty` decide things about two languages exactly (the "format next to a
pattern" rule asks them); `to_gbnf` writes a language as right-linear GBNF rules llama.cpp
enforces. Each transition carries a set of code points (sorted disjoint intervals), so a class
like [^"] is one edge, not 1.1 million.
What it is not: JSON Schema (string.py decides what a string node means) or a regex
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
point (search semantics), subset construction over the intervals each state's edges split, trim,
and Moore minimisation. MAX_STATES bounds every construction: a regex past it is TooComplex.
References: Python's Lib/re/_parser.py and _constants.py (the parse tree); Hopcroft, Motwani,
Ullman, "Introduction to Automata Theory" ch. 2-4 (subset construction, products, minimisation).
"""

from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass
from re import _constants as sre
from re import _parser

MAX_CODE = 0x10FFFF
EVERYTHING = ((0, MAX_CODE),)
MAX_STATES = 4000  # DFA states per construction: beyond, the grammar would be too large to be useful
MAX_NFA = 60000
MAX_REPEAT = 2000


class Unsupported(ValueError):
    """A regex feature whose language this module does not compute."""


class TooComplex(ValueError):
    """The automaton would pass MAX_STATES."""


Charset = tuple  # ((lo, hi), ...) sorted, disjoint, not adjacent


def charset(pairs) -> Charset:
    out: list[list[int]] = []
    for lo, hi in sorted(pairs):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def negate(cs: Charset) -> Charset:
    out, nxt = [], 0
    for lo, hi in cs:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    return tuple(out + ([(nxt, MAX_CODE)] if nxt <= MAX_CODE else []))


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


@dataclass(frozen=True)
class DFA:
    """start is state 0; trans[s] = ((charset, target), ...) with disjoint charsets; a missing
    character goes to a dead state. Every state can reach an accepting one (trimmed)."""
    trans: tuple
    accept: frozenset

    @property
    def size(self) -> int:
        return len(self.trans)

    def matches(self, text: str) -> bool:
        """Is `text` in the language? (For checks and tests; the grammar is what enforces it.)"""
        state = 0
        for ch in text:
            state = next((t for cs, t in self.trans[state] if any(lo <= ord(ch) <= hi for lo, hi in cs)), None)
            if state is None:
                return False
        return state in self.accept


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


def length_dfa(lo: int, hi: int | None) -> DFA:
    """Strings of lo..hi code points (hi None: no upper bound)."""
    n = hi if hi is not None else lo
    trans = [((EVERYTHING, i + 1),) for i in range(n)] + [((EVERYTHING, n),) if hi is None else ()]
    return DFA(tuple(trans), frozenset(range(lo, n + 1)))


# --- NFA -> DFA, and products --------------------------------------------------------------------

def _split(edge_lists) -> list[tuple[Charset, tuple]]:
    """Edge lists [[(charset, target)]] -> [(charset, targets)]: the intervals the edges cut, grouped
    by what reads them; targets has one frozenset per list (empty: none of its edges does)."""
    by_set = [{} for _ in edge_lists]  # per list: charset -> targets
    for k, edges in enumerate(edge_lists):
        for cs, target in edges:
            by_set[k].setdefault(cs, set()).add(target)
    sets = tuple(sorted({cs for d in by_set for cs in d}))
    groups: dict[tuple, list] = {}
    for piece, inside in _cut(sets):
        key = tuple(frozenset(t for i in inside for t in d.get(sets[i], ())) for d in by_set)
        if any(key):
            groups.setdefault(key, []).append(piece)
    return [(_union(pieces), key) for key, pieces in groups.items()]


def _union(sets: list) -> Charset:
    return sets[0] if len(sets) == 1 else charset([pair for cs in sets for pair in cs])


@functools.lru_cache(maxsize=4096)
def _cut(sets: tuple) -> list[tuple[Charset, frozenset]]:
    """Charsets -> the pieces they cut the code points into, each with the indices of the sets that
    hold it (one sweep over the interval ends). Cached: the states of one automaton mostly read the
    same few sets (a \\w beside a literal), and \\w alone has hundreds of intervals."""
    events: dict[int, list] = {}
    for i, cs in enumerate(sets):
        for lo, hi in cs:
            events.setdefault(lo, []).append((1, i))
            events.setdefault(hi + 1, []).append((-1, i))
    active: set = set()
    pieces: dict[frozenset, list] = {}
    points = sorted(events)
    for here, nxt in zip(points, points[1:] + [None]):
        for sign, i in events[here]:
            (active.add if sign > 0 else active.discard)(i)
        if active and nxt is not None:
            run = pieces.setdefault(frozenset(active), [])
            if run and run[-1][1] == here - 1:
                run[-1] = (run[-1][0], nxt - 1)
            else:
                run.append((here, nxt - 1))
    return [(tuple(p), key) for key, p in pieces.items()]


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
    index, order, trans = {first: 0}, [first], []
    while len(trans) < len(order):
        here = order[len(trans)]
        edges = [(cs, t) for q, locked in here if not locked for cs, t in nfa.edges[q]]
        row = []
        for cs, (targets,) in _split([edges]):
            nxt = closure({(t, False) for t in targets}, False)
            if nxt not in index:
                if len(order) >= MAX_STATES:
                    raise TooComplex(f"more than {MAX_STATES} states")
                index[nxt] = len(order)
                order.append(nxt)
            row.append((cs, index[nxt]))
        trans.append(row)
    return minimal(trans, {i for i, s in enumerate(order) if any(q == accept for q, _ in s)})


def _product(a: DFA, b: DFA, both: bool):
    """Reachable pairs of states of a and b (b's dead state None unless `both`): (pairs, trans)."""
    index, order, trans = {(0, 0): 0}, [(0, 0)], []
    while len(trans) < len(order):
        x, y = order[len(trans)]
        row = []
        lists = [list(a.trans[x]), list(b.trans[y]) if y is not None else []]
        for cs, (xs, ys) in _split(lists):
            if not xs or (both and not ys):
                continue
            tx, ty = min(xs), min(ys) if ys else None  # one each: a DFA's edges are disjoint
            if (tx, ty) not in index:
                if len(order) >= MAX_STATES:
                    raise TooComplex(f"more than {MAX_STATES} states")
                index[(tx, ty)] = len(order)
                order.append((tx, ty))
            row.append((cs, index[(tx, ty)]))
        trans.append(row)
    return order, trans


def intersect(a: DFA, b: DFA) -> DFA:
    pairs, trans = _product(a, b, both=True)
    return minimal(trans, {i for i, (x, y) in enumerate(pairs) if x in a.accept and y in b.accept})


def contains(big: DFA, small: DFA) -> bool:
    """Every string of `small` is in `big`."""
    pairs, _ = _product(small, big, both=False)
    return all(y is not None and y in big.accept for x, y in pairs if x in small.accept)


def is_empty(d: DFA) -> bool:
    return not d.accept


def minimal(trans: list, accept: set) -> DFA:
    """Rows [(charset, target)] (state 0 the start) -> a DFA: trimmed (only states from which an
    accepting one is reachable), minimised, renumbered from 0."""
    back: list[set] = [set() for _ in trans]
    for s, row in enumerate(trans):
        for _, t in row:
            back[t].add(s)
    live, todo = set(accept), list(accept)
    while todo:
        for s in back[todo.pop()]:
            if s not in live:
                live.add(s)
                todo.append(s)
    if 0 not in live:
        return DFA(((),), frozenset())  # the empty language: one state, not accepting
    order = [0] + sorted(live - {0})
    index = {s: i for i, s in enumerate(order)}
    rows = [[(cs, index[t]) for cs, t in trans[s] if t in live] for s in order]
    finals = {index[s] for s in accept if s in live}
    block = _hopcroft(rows, finals)
    edges: dict[int, list] = {}  # block -> its edges to blocks
    for s, row in enumerate(rows):
        edges.setdefault(block[s], _grouped((cs, block[t]) for cs, t in row))
    number, order = {block[0]: 0}, [block[0]]  # breadth first from the start, edges in character order:
    for b in order:  # equal languages get equal automata, so equal grammars
        for _, t in sorted(edges[b]):
            if t not in number:
                number[t] = len(order)
                order.append(t)
    out = tuple(tuple(sorted((cs, number[t]) for cs, t in edges[b])) for b in order)
    return DFA(out, frozenset(number[block[s]] for s in finals))


def _hopcroft(rows: list, accept: set) -> list[int]:
    """Hopcroft's partition refinement (O(k n log n)) -> the block of each state. The alphabet is
    the classes of characters no transition tells apart (often 2 or 3, even beside \\w); a
    missing transition goes to a dead state n, which is its own block."""
    n = len(rows)
    bounds = sorted({b for row in rows for cs, _ in row for lo, hi in cs for b in (lo, hi + 1)})
    member: dict[tuple, list] = {}  # each distinct charset -> the elementary intervals it covers
    for row in rows:
        for cs, _ in row:
            if cs not in member:
                member[cs] = [i for lo, hi in cs
                              for i in range(bisect.bisect_left(bounds, lo), bisect.bisect_left(bounds, hi + 1))]
    sig: list[list] = [[] for _ in bounds]
    for k, cs in enumerate(member):
        for i in member[cs]:
            sig[i].append(k)
    cls_of: dict[tuple, int] = {}
    cls = [cls_of.setdefault(tuple(x), len(cls_of)) for x in sig]  # elementary interval -> class
    letters = sorted({cls[i] for i, x in enumerate(sig) if x})  # the rest all go to the dead state
    delta = [[n] * len(cls_of) for _ in range(n + 1)]
    for s, row in enumerate(rows):
        for cs, t in row:
            for i in member[cs]:
                delta[s][cls[i]] = t
    inv: list[dict] = [{} for _ in cls_of]
    for s in range(n + 1):
        for c in letters:
            inv[c].setdefault(delta[s][c], []).append(s)
    finals = set(accept)
    blocks = [b for b in (finals, set(range(n)) - finals, {n}) if b]
    block = [0] * (n + 1)
    for i, b in enumerate(blocks):
        for s in b:
            block[s] = i
    work = {(i, c) for i in range(len(blocks)) for c in letters}
    while work:
        a, c = work.pop()
        pre = [s for t in blocks[a] for s in inv[c].get(t, ())]
        hit: dict[int, set] = {}
        for s in pre:
            hit.setdefault(block[s], set()).add(s)
        for y, inside in hit.items():
            if len(inside) == len(blocks[y]):
                continue
            rest = blocks[y] - inside
            small, big = (inside, rest) if len(inside) <= len(rest) else (rest, inside)
            blocks[y] = big
            blocks.append(small)
            for s in small:
                block[s] = len(blocks) - 1
            for d in letters:  # (y, d) stays if pending; else the smaller half is enough
                work.add((len(blocks) - 1, d))
    return block[:n]


def _grouped(edges) -> list:
    by: dict = {}
    for cs, t in edges:
        by.setdefault(t, []).append(cs)
    return [(_union(sets), t) for t, sets in sorted(by.items())]


# --- DFA -> GBNF ---------------------------------------------------------------------------------

_SHORT = {8: "b", 9: "t", 10: "n", 12: "f", 13: "r"}  # JSON's one-letter escapes
_SPECIAL = charset([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0xD800, 0xDFFF)])


def to_gbnf(d: DFA, name: str, json_string: bool = True) -> list[str]:
    """GBNF rules `name`, `name-1`, ... for the language (state i is rule name-i, 0 is `name`).
    json_string: each character as JSON string content ('"' '\\\\' and controls as JSON escapes;
    surrogates left out: they are no characters). A set written as more than one piece, or a long
    class, gets a rule of its own (name-cN), shared by every state that reads it."""
    assert d.accept, "the empty language has no grammar"
    rule = [name] + [f"{name}-{i}" for i in range(1, d.size)]
    lines, shared = [], {}
    for s, row in enumerate(d.trans):
        if s and not row:
            continue  # an end: the edges into it name no rule
        alts = ['""'] if s in d.accept else []
        for cs, t in row:
            nxt = "" if not d.trans[t] else f" {rule[t]}"
            pieces = _pieces(cs, json_string)
            if len(pieces) > 1 or len(pieces[0]) > 40:
                if cs not in shared:
                    shared[cs] = f"{name}-c{len(shared)}"
                    lines.append(f"{shared[cs]} ::= " + " | ".join(pieces))
                pieces = [shared[cs]]
            alts += [piece + nxt for piece in pieces]
        lines.append(f"{rule[s]} ::= " + " | ".join(alts))
    return lines


def _pieces(cs: Charset, json_string: bool) -> list[str]:
    plain = _minus(cs, _SPECIAL) if json_string else cs
    out = ["[" + "".join(_esc(lo) if lo == hi else f"{_esc(lo)}-{_esc(hi)}" for lo, hi in plain) + "]"] if plain else []
    if json_string:
        for lo, hi in cs:
            for c in range(max(lo, 0), min(hi, 0x5C) + 1):
                if c < 0x20:  # as json.dumps writes it
                    out.append('"\\\\' + _SHORT[c] + '"' if c in _SHORT else f'"\\\\u{c:04x}"')
                elif c in (0x22, 0x5C):
                    out.append('"\\\\\\' + chr(c) + '"')
    return out


def _minus(cs: Charset, other: Charset) -> Charset:
    keep = negate(other)
    out = []
    for lo, hi in cs:
        for klo, khi in keep:
            if klo <= hi and lo <= khi:
                out.append((max(lo, klo), min(hi, khi)))
    return tuple(out)


def _esc(c: int) -> str:
    if chr(c).isascii() and chr(c).isalnum():
        return chr(c)
    return f"\\u{c:04X}" if c <= 0xFFFF else f"\\U{c:08X}"
