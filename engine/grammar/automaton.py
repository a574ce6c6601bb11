"""Regular languages as automata over code points: DFA algebra, and a DFA as GBNF.

What it is: `DFA`, whose transitions each carry a set of code points (sorted disjoint intervals,
`Charset`), so a class like [^"] is one edge, not 1.1 million; `intersect`, `contains` and
`is_empty` decide things about two languages exactly (the "format next to a pattern" rule asks
them); `minimal` trims and minimises (Hopcroft) and numbers states canonically, so equal
languages get equal automata and equal grammars; `length_dfa` is the strings of lo..hi code
points; `to_gbnf` writes a language as right-linear GBNF rules llama.cpp enforces. MAX_STATES
bounds every construction: past it is TooComplex.
What it is not: a regex reader (regex.py builds a DFA from a Python regex), JSON Schema
(string.py, number.py decide what a node means) or a regex engine for matching text.

References: Hopcroft, Motwani, Ullman, "Introduction to Automata Theory" ch. 2-4 (products,
minimisation); Hopcroft 1971, "An n log n algorithm for minimizing states in a finite automaton".
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass

MAX_CODE = 0x10FFFF
EVERYTHING = ((0, MAX_CODE),)
MAX_STATES = 4000  # DFA states per construction: beyond, the grammar would be too large to be useful


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
            nxt = next((t for cs, t in self.trans[state] if any(lo <= ord(ch) <= hi for lo, hi in cs)), None)
            if nxt is None:
                return False
            state = nxt
        return state in self.accept


def length_dfa(lo: int, hi: int | None) -> DFA:
    """Strings of lo..hi code points (hi None: no upper bound)."""
    n = hi if hi is not None else lo
    trans = [((EVERYTHING, i + 1),) for i in range(n)] + [((EVERYTHING, n),) if hi is None else ()]
    return DFA(tuple(trans), frozenset(range(lo, n + 1)))


# --- products and minimisation ------------------------------------------------------------------

def split_edges(edge_lists) -> list[tuple[Charset, tuple]]:
    """Edge lists [[(charset, target)]] -> [(charset, targets)]: the intervals the edges cut, grouped
    by what reads them; targets has one frozenset per list (empty: none of its edges does)."""
    by_set: list[dict[Charset, set[int]]] = [{} for _ in edge_lists]  # per list: charset -> targets
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


def _product(a: DFA, b: DFA, both: bool):
    """Reachable pairs of states of a and b (b's dead state None unless `both`): (pairs, trans)."""
    index: dict[tuple[int, int | None], int] = {(0, 0): 0}
    order: list[tuple[int, int | None]] = [(0, 0)]
    trans: list[list] = []
    while len(trans) < len(order):
        x, y = order[len(trans)]
        row = []
        lists = [list(a.trans[x]), list(b.trans[y]) if y is not None else []]
        for cs, (xs, ys) in split_edges(lists):
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
    lines: list[str] = []
    shared: dict[Charset, str] = {}
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
