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

It costs no model call. The target verifies the span like any draft, so a different split by the
model, or a habit it does not keep, is a rejection: the output is plain constrained decoding's.

Not the grammar sampler the target is checked against (engine/llama/grammar.py).
"""

from __future__ import annotations

import codecs

from ...grammar import gbnf
from ..params import GRAMMAR
from .base import Drafter, Proposal, SeqView

BLANKS = " \t\n\r"
HABIT = {",": " ", ":": " "}  # the blank written after a character until the output shows its own
MAX_CHARS = 256


class _Follow:
    """One sequence's place in its grammar: the parse state after the output so far."""

    def __init__(self, grammar: gbnf.Recognizer, text: str):
        self.g, self.text = grammar, text
        self.state = grammar.start()
        self.seen: list[int] = []  # the output tokens followed
        self.prev = ""  # the last character followed
        self.habit = dict(HABIT)
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> None:
        for ch in self.decoder.decode(data):
            if self.state is None:
                return
            chars, _ = self.g.next_chars(self.state)
            if chars and chars & set(BLANKS) and chars - set(BLANKS):  # a blank was optional here
                self.habit[self.prev] = ch if ch in BLANKS else ""
            self.state = self.g.advance(self.state, ch) or None  # None: lost (text the grammar refuses)
            self.prev = ch

    def forced(self, limit: int = MAX_CHARS) -> tuple[str, frozenset[str] | None]:
        """The text that follows for sure (blanks by habit), as far as it goes, and the few
        characters one of which comes next there (None: free text, or the grammar may end)."""
        out, st, prev = [], self.state, self.prev
        while st and len(out) < limit:
            chars, ends = self.g.next_chars(st)
            if ends or not chars:
                return "".join(out), None
            solid = chars - set(BLANKS)
            if len(chars) == 1:
                ch = next(iter(chars))
            elif len(solid) <= 1 and prev in self.habit and (self.habit[prev] in chars or solid):
                ch = self.habit[prev] or next(iter(solid))
            else:  # a choice: what may come next, the blank by habit where a blank is optional here
                blank = self.habit.get(prev)
                likely = {blank} if blank and blank in chars else solid if blank == "" and solid else chars
                return "".join(out), frozenset(likely)
            out.append(ch)
            st, prev = self.g.advance(st, ch), ch
        return "".join(out), None


class GrammarDrafter(Drafter):
    name = GRAMMAR
    free = True  # no model call: the loop asks for the longest path and prices what it gets

    def __init__(self, model):
        self.model = model
        self._seqs: dict[int, _Follow] = {}

    def propose(self, seqs: list[SeqView], n_draft: int, unary: bool = False) -> list[Proposal]:
        return [Proposal(self.span(s, n_draft)) for s in seqs]

    def span(self, view: SeqView, n_draft: int) -> list[int]:
        """At most n_draft tokens of the text the grammar forces after view's committed tokens."""
        if not view.grammar or n_draft <= 0:
            return []
        f = self._follow(view)
        if f is None or f.state is None:
            return []
        forced, after = f.forced()
        text = forced.rstrip(BLANKS)
        if not text:
            return []
        tokens = self.model.tokenize(text, add_bos=False, special=False)
        # A token the model writes glued to the character after the span (`":"` where the span ends
        # in `":`) would be rejected for sure: keep the tokens every possible next character leaves alone.
        for ch in after or ():
            glued = self.model.tokenize(forced + ch, add_bos=False, special=False)
            tokens = tokens[:next((i for i, (a, b) in enumerate(zip(tokens, glued)) if a != b), len(tokens))]
        return tokens[:n_draft]

    def _follow(self, view: SeqView) -> _Follow | None:
        out = view.tokens[view.n_prompt:]
        f = self._seqs.get(view.seq_id)
        # a new request in this sequence (another grammar, or an output that is not this one's)
        if f is None or f.text is not view.grammar and f.text != view.grammar or out[:len(f.seen)] != f.seen:
            try:
                f = self._seqs[view.seq_id] = _Follow(gbnf.parse(view.grammar), view.grammar)
            except gbnf.GrammarError:
                return None
        for tok in out[len(f.seen):]:
            f.feed(self.model.piece(tok))
        f.seen = out
        return f

    def forget(self, seq_id: int) -> None:
        self._seqs.pop(seq_id, None)

    def close(self) -> None:
        self._seqs.clear()
