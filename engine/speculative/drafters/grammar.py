"""The grammar drafter: the text a request's grammar forces next, in the target's own tokens.

Work-order JSON is mostly known before the model speaks: keys, quotes, colons and braces the
schema fixes. At each step this drafter follows the request's output through its grammar
(engine/grammar/gbnf.py) and walks ahead while the grammar allows one character only; where it allows an
optional blank or the next character (`space ::= " "?`), it takes what this output did last time
after the same character (json.dumps's habit, a blank after "," and ":", until it has seen one).
The span is tokenized as the target's tokenizer would, and its trailing blanks are left out: the
model writes a blank together with the text after it (` "`, ` null`). Where the span ends at a
choice of a few characters, a last token the model would write glued to any of them (`":"` for
`":` then `"`) is left out too.

Inside a copy field (`"x-copy"`, engine/grammar/copy.py) the grammar allows only the message's
own text: once the value's start is unique in the message, so is its continuation. The walk then
goes on with the message (source COPY, priced apart from the forced text: it is a guess where the
value stops) up to where the value seems to end (`VALUE_END`: a line break, a comma...), closes
it, and goes on with what the grammar forces after it. Where the message branches (the written
start occurs twice) the model chooses, and the span ends.

It costs no model call. The target verifies the span like any draft, so a different split by the
model, or a habit it does not keep, is a rejection: the output is plain constrained decoding's.

Not the grammar sampler the target is checked against (engine/llama/grammar.py).
"""

from __future__ import annotations

import codecs
import re
import time

from ...grammar import copy, gbnf
from ..params import COPY, GRAMMAR
from .base import Drafter, Proposal, SeqView

BLANKS = " \t\n\r"
HABIT = {",": " ", ":": " "}  # the blank written after a character until the output shows its own
MAX_CHARS = 256
# Where a copied value most likely ends: before a line break (JSON-escaped in the value), a comma or a
# semicolon, or a full stop, colon, ! or ? before a blank. A guess only: a value that goes on is
# offered again from where the model took it.
VALUE_END = re.compile(r"\\[nrt]|[,;，；、。]|[.!?:](?= |\\[nrt])")


class _Follow:
    """One sequence's place in its grammar: the parse state after the output so far."""

    def __init__(self, grammar: gbnf.Recognizer, text: str):
        self.g, self.text = grammar, text
        self.state: frozenset | None = grammar.start()  # None: lost (text the grammar refuses)
        self.seen: list[int] = []  # the output tokens followed
        self.prev = ""  # the last character followed
        self.habit = dict(HABIT)
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.copies = frozenset(grammar.names[n] for n in copy.states(grammar.names))

    def feed(self, data: bytes) -> None:
        for ch in self.decoder.decode(data):
            if self.state is None:
                return
            chars, _ = self.g.next_chars(self.state)
            if chars and chars & set(BLANKS) and chars - set(BLANKS) and not self._copying(self.state):
                # a blank was optional here (not in a copy, which writes the message's blanks)
                self.habit[self.prev] = ch if ch in BLANKS else ""
            self.state = self.g.advance(self.state, ch) or None  # None: lost (text the grammar refuses)
            self.prev = ch

    def ahead(self, limit: int = MAX_CHARS) -> tuple[list[tuple[str, str]], frozenset[str] | None]:
        """The text that follows, in pieces by source, as far as it goes: what the grammar forces
        (GRAMMAR), and inside a copy field the message's own continuation while it is unique (COPY),
        up to where the value seems to end (`VALUE_END`), its closing quote and what the grammar forces
        after it. Then the few characters one of which comes next (None: free, or the grammar may end)."""
        pieces: list[tuple[str, str]] = []
        st, prev, room = self.state, self.prev, limit
        while True:
            text, st, after = self._forced(st, prev, room)
            if text:
                pieces.append((text, GRAMMAR))
                room, prev = room - len(text), text[-1]
            if not st or not self.copies or room <= 0:
                return pieces, after
            run, st, ended, after = self._copied(st, room)
            if run:
                pieces.append((run, COPY))
                room, prev = room - len(run), run[-1]
            if not ended:
                return pieces, after

    def _forced(self, st, prev: str, limit: int):
        """From state `st`: the forced text (blanks by habit), the state where it stops, and the few
        characters one of which comes next there (None: free text, or the grammar may end)."""
        out: list[str] = []
        while st and len(out) < limit:
            if self._copying(st):
                return "".join(out), st, None
            chars, ends = self.g.next_chars(st)
            if ends or not chars:
                return "".join(out), (None if ends else st), None
            solid = chars - set(BLANKS)
            if len(chars) == 1:
                ch = next(iter(chars))
            elif len(solid) <= 1 and prev in self.habit and (self.habit[prev] in chars or solid):
                ch = self.habit[prev] or next(iter(solid))
            else:  # a choice: what may come next, the blank by habit where a blank is optional here
                blank = self.habit.get(prev)
                likely = {blank} if blank and blank in chars else solid if blank == "" and solid else chars
                return "".join(out), st, frozenset(likely)
            out.append(ch)
            st, prev = self.g.advance(st, ch), ch
        return "".join(out), st, None

    def _copying(self, st) -> bool:
        """Is a copy in progress in `st` (may one go on, or start)?"""
        if not self.copies:
            return False
        inside, _ = self.g.split_chars(st, self.copies)
        return inside is None or bool(inside)

    def _copied(self, st, limit: int):
        """From state `st` inside a copy: the copy's unique continuation, cut where the value seems to
        end; the state after it, with the copy's closing character taken when the cut is there and
        that character is the only way out (ended); and the few characters that may follow."""
        run: list[str] = []
        states = [st]
        while len(run) < limit:
            inside, _ = self.g.split_chars(states[-1], self.copies)
            if not inside or len(inside) != 1:
                break
            ch = next(iter(inside))
            nxt = self.g.advance(states[-1], ch)
            if not nxt:
                break
            run.append(ch)
            states.append(nxt)
        text = "".join(run)
        inside, outside = self.g.split_chars(states[-1], self.copies)
        m = VALUE_END.search(text + ("\\n" if inside == set() else ""))  # the message ends here: so does the value
        if m is None:  # a branch of the message (or the limit): the model chooses
            few = inside | outside if inside is not None and outside is not None else None
            return text, states[-1], False, frozenset(few) if few else None
        k = m.start()
        _, outside = self.g.split_chars(states[k], self.copies)
        if outside is None or len(outside) != 1:  # the value may end, or go on with a separator
            return text[:k], states[k], False, frozenset(outside) if outside else None
        return text[:k] + next(iter(outside)), self.g.advance(states[k], next(iter(outside))), True, None


class GrammarDrafter(Drafter):
    name = GRAMMAR
    free = True  # no model call: the loop asks for the longest path and prices what it gets

    def __init__(self, model):
        self.model = model
        self._seqs: dict[int, _Follow] = {}
        self.setup_ms = 0.0  # the last span's parse of a new request's grammar (0: none)

    def propose(self, seqs: list[SeqView], n_draft: int, unary: bool = False) -> list[Proposal]:
        out = []
        for s in seqs:
            tokens, sources = self.span(s, n_draft)
            out.append(Proposal(tokens, sources=sources, setup_ms=self.setup_ms))
        return out

    def span(self, view: SeqView, n_draft: int) -> tuple[list[int], list[str]]:
        """At most n_draft tokens of the text the grammar forces (or a copy continues) after view's
        committed tokens, and each token's source (GRAMMAR or COPY: where its first byte came from).
        `setup_ms` then holds what parsing a new request's grammar took in it."""
        self.setup_ms = 0.0
        if not view.grammar or n_draft <= 0:
            return [], []
        f = self._follow(view)
        if f is None or f.state is None:
            return [], []
        pieces, after = f.ahead()
        forced = "".join(text for text, _ in pieces)
        text = forced.rstrip(BLANKS)
        if not text:
            return [], []
        tokens = self.model.tokenize(text, add_bos=False, special=False)
        # A token the model writes glued to the character after the span (`":"` where the span ends
        # in `":`) would be rejected for sure: keep the tokens every possible next character leaves alone.
        for ch in after or ():
            glued = self.model.tokenize(forced + ch, add_bos=False, special=False)
            tokens = tokens[:next((i for i, (a, b) in enumerate(zip(tokens, glued)) if a != b), len(tokens))]
        tokens = tokens[:n_draft]
        return tokens, self._sources(tokens, pieces)

    def _sources(self, tokens: list[int], pieces: list[tuple[str, str]]) -> list[str]:
        """Each token's source: that of the piece its first byte is in."""
        ends, at = [], 0
        for text, source in pieces:
            at += len(text.encode("utf-8"))
            ends.append((at, source))
        out, at = [], 0
        for tok in tokens:
            out.append(next((source for end, source in ends if at < end), ends[-1][1]))
            at += len(self.model.piece(tok))
        return out

    def _follow(self, view: SeqView) -> _Follow | None:
        out = view.tokens[view.n_prompt:]
        f = self._seqs.get(view.seq_id)
        # a new request in this sequence (another grammar, or an output that is not this one's)
        assert view.grammar is not None, "propose() asks only for a request with a grammar"
        if f is None or f.text is not view.grammar and f.text != view.grammar or out[:len(f.seen)] != f.seen:
            t0 = time.perf_counter()
            try:
                f = self._seqs[view.seq_id] = _Follow(gbnf.parse(view.grammar), view.grammar)
            except gbnf.GrammarError:
                return None
            finally:
                self.setup_ms = (time.perf_counter() - t0) * 1e3
        for tok in out[len(f.seen):]:
            f.feed(self.model.piece(tok))
        f.seen = out
        return f

    def forget(self, seq_id: int) -> None:
        self._seqs.pop(seq_id, None)

    def close(self) -> None:
        self._seqs.clear()
