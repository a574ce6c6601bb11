"""A GBNF recognizer in Python: which text a grammar forces next.

What it is: llama.cpp's grammar algorithm on code points (`src/llama-grammar.cpp`): the text is
parsed into rules of alternatives of elements (a character set or a rule reference); a parse
state is a set of stacks of positions, each stack's top a character set the next character
must match. `Recognizer.advance` follows one character and `Recognizer.next_chars` says which can
come next; the grammar drafter (engine/speculative/drafters/grammar.py) follows committed text
with them and walks ahead while exactly one character can come next: its span.

Why our own and not llama.cpp's: its C API answers "may this token come next" only, one token
at a time; the forced text would take a scan of the whole vocabulary per character. Here a
character costs microseconds.

Exactness does not rest on this module. The drafter only proposes; the target verifies under
llama.cpp's own grammar sampler, so a mistake here costs speed (a rejected span), never output.
It is tested against llama.cpp anyway (tests/engine/grammar/test_gbnf.py).

Not the grammar sampler (engine/llama/grammar.py) nor the grammar compiler (schema.py).
Deep nesting (`(a (a (a ...)?)?)?`, a thousand levels from the JSON-schema converter) is parsed
with explicit stacks, never recursion.
"""

from __future__ import annotations

import functools
import re

FEW = 4  # next_chars lists the allowed characters only when at most this many
MAX_STACKS = 256  # a state with more stacks than this is given up (an ambiguous grammar): nothing is forced
WORD = re.compile(r"[A-Za-z0-9_-]+")
_ESC = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}  # llama.cpp's escapes
_HEX = {"x": 2, "u": 4, "U": 8}


class GrammarError(ValueError):
    pass


# An element: ("c", intervals, negated) a character set, ("r", rule id) a reference.
# A position: (rule id, alternative, index); a stack: a tuple of positions, top last.

# The body of a rule that is named but not defined yet: compared by identity (an empty body is a defined rule)
UNDEFINED: list[tuple] = []


class Recognizer:
    """A parsed GBNF grammar: rules[rid] = list of alternatives, each a tuple of elements."""

    def __init__(self, text: str, root: str = "root"):
        self.names: dict[str, int] = {}
        self.rules: list[list[tuple]] = []
        _Parser(self, text).parse()
        for name, rid in self.names.items():
            if rid < len(self.rules) and self.rules[rid] is UNDEFINED:
                raise GrammarError(f"rule {name!r} is used but never defined")
        if root not in self.names:
            raise GrammarError(f"no rule {root!r}")
        self.root = self.names[root]

    def rule_id(self, name: str) -> int:
        if name not in self.names:
            self.names[name] = len(self.rules)
            self.rules.append(UNDEFINED)
        return self.names[name]

    def new_rule(self, alternatives: list[tuple]) -> int:
        self.rules.append(alternatives)
        return len(self.rules) - 1

    # -- stacks ---------------------------------------------------------------------------

    def expand(self, stacks) -> frozenset | None:
        """Every stack with its top resolved to a character set (or empty: the text may end).
        None when the state has more than MAX_STACKS stacks."""
        out, seen, todo = set(), set(), list(stacks)
        while todo:
            st = todo.pop()
            if st in seen:
                continue
            seen.add(st)
            if not st:
                out.add(st)
                continue
            rid, alt, i = st[-1]
            seq = self.rules[rid][alt]
            elem = seq[i]
            if elem[0] == "c":
                out.add(st)
                if len(out) > MAX_STACKS:
                    return None
                continue
            rest = st[:-1] + (((rid, alt, i + 1),) if i + 1 < len(seq) else ())
            for a, body in enumerate(self.rules[elem[1]]):
                todo.append(rest + ((elem[1], a, 0),) if body else rest)
        return frozenset(out)

    def start(self) -> frozenset | None:
        return self.expand([((self.root, a, 0),) if body else () for a, body in enumerate(self.rules[self.root])])

    def advance(self, stacks: frozenset, ch: str) -> frozenset | None:
        """The state after character `ch` (empty: the grammar forbids it; None: too ambiguous)."""
        c = ord(ch)
        moved = []
        for st in stacks:
            if not st:
                continue
            rid, alt, i = st[-1]
            seq = self.rules[rid][alt]
            _, ivals, neg = seq[i]
            if any(lo <= c <= hi for lo, hi in ivals) != neg:
                moved.append(st[:-1] + (((rid, alt, i + 1),) if i + 1 < len(seq) else ()))
        return self.expand(moved)

    def next_chars(self, stacks: frozenset) -> tuple[set[str] | None, bool]:
        """(the characters allowed next, None when more than a few; whether the text may end here)."""
        chars = self._chars(st for st in stacks if st)
        return chars, any(not st for st in stacks)

    def split_chars(self, stacks: frozenset, inside: frozenset[int]) -> tuple[set[str] | None, set[str] | None]:
        """The characters allowed next by the stacks whose top is in a rule of `inside` (rule ids),
        and by the others (each None when more than a few)."""
        tops = [st for st in stacks if st]
        return (self._chars(st for st in tops if st[-1][0] in inside),
                self._chars(st for st in tops if st[-1][0] not in inside))

    def _chars(self, stacks) -> set[str] | None:
        chars: set[str] = set()
        for st in stacks:
            rid, alt, i = st[-1]
            _, ivals, neg = self.rules[rid][alt][i]
            if neg or sum(hi - lo + 1 for lo, hi in ivals) > FEW:
                return None
            for lo, hi in ivals:
                chars.update(chr(c) for c in range(lo, hi + 1))
        return chars if len(chars) <= FEW else None


@functools.lru_cache(maxsize=32)
def parse(text: str) -> Recognizer:
    """A parsed grammar, cached by its text (templates send the same grammar all day)."""
    return Recognizer(text)


class _Parser:
    """GBNF text -> Recognizer rules, as llama.cpp's parser reads it (`src/llama-grammar.cpp`):
    a rule ends at a newline outside parentheses; a newline may follow `::=`, `|` and `(`."""

    def __init__(self, g: Recognizer, text: str):
        self.g, self.s, self.i = g, text, 0

    def parse(self) -> None:
        s = self.s
        while True:
            self.space(newlines=True)
            if self.i >= len(s):
                return
            m = WORD.match(s, self.i)
            if not m:
                raise GrammarError(f"expected a rule name at offset {self.i}")
            self.i = m.end()
            self.space()
            if not s.startswith("::=", self.i):
                raise GrammarError(f"expected ::= after {m.group()!r}")
            self.i += 3
            rid = self.g.rule_id(m.group())
            if self.g.rules[rid] is not UNDEFINED:
                raise GrammarError(f"rule {m.group()!r} is defined twice")
            self.g.rules[rid] = []  # defined (filled below): a self-reference is not "undefined"
            self.g.rules[rid] = self.compile(self.alternates())

    def space(self, newlines: bool = False) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == "#":
                while self.i < len(s) and s[self.i] not in "\r\n":
                    self.i += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            else:
                return

    def alternates(self) -> list[list]:
        """One rule's body as nodes, with explicit stacks for parentheses."""
        s = self.s
        frames: list[tuple[list, list]] = [([], [])]  # (alternatives so far, the current sequence) per open parenthesis
        self.space(newlines=True)
        while True:
            alts, seq = frames[-1]
            self.space(newlines=len(frames) > 1)
            c = s[self.i] if self.i < len(s) else "\n"
            if c in "\r\n" and len(frames) == 1:
                return alts + [seq]
            self.i += 1
            if c == '"':
                seq.append(("seq", [("c", ((ord(ch), ord(ch)),), False) for ch in self.chars('"')]))
            elif c == "[":
                neg = self.s.startswith("^", self.i)
                self.i += neg
                seq.append(("c", self.char_class(), neg))
            elif c == ".":
                seq.append(("c", ((0, 0x10FFFF),), False))
            elif c == "(":
                frames.append(([], []))
                self.space(newlines=True)
            elif c == ")":
                if len(frames) == 1:
                    raise GrammarError(f"unbalanced ) at offset {self.i - 1}")
                frames.pop()
                frames[-1][1].append(("alt", alts + [seq]))
            elif c == "|":
                alts.append(list(seq))
                seq.clear()
                self.space(newlines=True)
            elif c in "*+?{":
                if not seq:
                    raise GrammarError(f"{c!r} at offset {self.i - 1} follows nothing")
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(c) or self.braces()
                seq[-1] = ("rep", seq[-1], lo, hi)
            else:
                self.i -= 1
                m = WORD.match(s, self.i)
                if not m:
                    raise GrammarError(f"unexpected {c!r} at offset {self.i}")
                self.i = m.end()
                seq.append(("r", self.g.rule_id(m.group())))

    def chars(self, end: str) -> list[str]:
        """Characters up to the closing `end` (a literal), escapes decoded."""
        out: list[str] = []
        s = self.s
        while True:
            if self.i >= len(s):
                raise GrammarError("unterminated literal")
            c = s[self.i]
            self.i += 1
            if c == end:
                return out
            out.append(self.escaped() if c == "\\" else c)

    def escaped(self) -> str:
        s = self.s
        c = s[self.i] if self.i < len(s) else ""
        self.i += 1
        if c in _HEX:
            digits = s[self.i:self.i + _HEX[c]]
            self.i += _HEX[c]
            try:
                return chr(int(digits, 16))
            except ValueError:
                raise GrammarError(f"bad escape \\{c}{digits}") from None
        if c not in _ESC:
            raise GrammarError(f"unknown escape \\{c}")
        return _ESC[c]

    def char_class(self) -> tuple:
        s = self.s
        ivals: list[tuple[int, int]] = []
        while True:
            if self.i >= len(s):
                raise GrammarError("unterminated character class")
            c = s[self.i]
            self.i += 1
            if c == "]":
                return tuple(ivals)
            lo = self.escaped() if c == "\\" else c
            hi = lo
            if s.startswith("-", self.i) and self.i + 1 < len(s) and s[self.i + 1] != "]":
                self.i += 1
                c = s[self.i]
                self.i += 1
                hi = self.escaped() if c == "\\" else c
            ivals.append((ord(lo), ord(hi)))

    def braces(self) -> tuple[int, int | None]:
        m = re.compile(r"\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}").match(self.s, self.i)
        if not m:
            raise GrammarError(f"bad repetition at offset {self.i - 1}")
        self.i = m.end()
        lo = int(m.group(1))
        hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
        return lo, hi

    # -- nodes -> rules -------------------------------------------------------------------

    def compile(self, alternatives: list[list]) -> list[tuple]:
        """A rule body's nodes -> its alternatives of elements. A group becomes a rule of its
        own, compiled from a queue rather than by recursion."""
        queue: list[tuple[int, list[list]]] = []
        body = [self.elements(seq, queue) for seq in alternatives]
        while queue:
            rid, alts = queue.pop()
            self.g.rules[rid] = [self.elements(seq, queue) for seq in alts]
        return body

    def elements(self, nodes: list, queue: list) -> tuple:
        out: list = []
        for node in nodes:
            out.extend(self.node(node, queue))
        return tuple(out)

    def node(self, node, queue: list) -> tuple:
        kind = node[0]
        if kind in ("c", "r"):
            return (node,)
        if kind == "seq":
            return self.elements(node[1], queue)
        if kind == "alt":
            rid = self.g.new_rule(UNDEFINED)
            queue.append((rid, node[1]))
            return (("r", rid),)
        _, inner, lo, hi = node
        x = self.node(inner, queue)
        if hi is None:  # R ::= x R | (empty)
            rid = self.g.new_rule(UNDEFINED)
            self.g.rules[rid] = [x + (("r", rid),), ()]
            return x * lo + (("r", rid),)
        if hi < lo:
            raise GrammarError(f"repetition {{{lo},{hi}}} has max < min")
        tail: tuple = ()
        for _ in range(hi - lo):  # O_k ::= x O_(k-1) | (empty), nested as llama.cpp does
            tail = (("r", self.g.new_rule([x + tail, ()])),)
        return x * lo + tail
