"""Token ids -> text deltas, with stop strings that may span token boundaries.

A token can end in the middle of a UTF-8 character (Chinese text often does), and a
stop string can be split over several tokens. `TextStream` emits only text that is
final: complete characters, and nothing that could still turn out to be the start of
a stop string. Not a tokenizer: bytes per token come from `Model.piece`.
"""

from __future__ import annotations

import codecs
from typing import Callable


class TextStream:
    def __init__(self, piece: Callable[[int], bytes], stop: list[str] | None = None):
        self._piece = piece
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in (stop or []) if s]
        self._held = ""  # decoded text not yet emitted: it may begin a stop string
        self.stopped_by: str | None = None

    def push(self, token: int) -> str:
        """Add one token; return the text that is now final (possibly "")."""
        if self.stopped_by is not None:
            return ""
        return self._release(self._held + self._utf8.decode(self._piece(token)))

    def flush(self) -> str:
        """End of generation: release everything still held (incomplete bytes become U+FFFD)."""
        if self.stopped_by is not None:
            return ""
        text = self._release(self._held + self._utf8.decode(b"", final=True), final=True)
        return text

    def _release(self, text: str, final: bool = False) -> str:
        if not self._stop:
            self._held = ""
            return text
        hit = min(((text.find(s), s) for s in self._stop if s in text), default=None)
        if hit is not None:
            at, s = hit
            self.stopped_by = s
            self._held = ""
            return text[:at]
        keep = 0 if final else self._partial_stop_suffix(text)
        self._held = text[len(text) - keep:] if keep else ""
        return text[: len(text) - keep]

    def _partial_stop_suffix(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:n]):
                    best = n
                    break
        return best
