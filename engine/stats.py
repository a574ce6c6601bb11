"""What an engine reports about itself across requests: its load now (`EngineStats`), its running
totals (`Totals`) and what it does with speculation (`SpeculationFacts`). The local engine and a backend
(server/runtime/backend.py) report the same types, so /health and /metrics read either without asking
which engine they hold."""

from __future__ import annotations

import collections
import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from .request import StreamEvent


@dataclass(frozen=True)
class EngineStats:
    active: int  # requests being answered
    queued: int  # requests waiting for a free slot
    slots: int | None  # sequences decoded together; None: a backend keeps its own
    max_queue: int | None = None  # waiting requests allowed before a 429; None: the backend's business
    refused: int | None = None  # 429s so far; None: the backend counts its own

    @property
    def busy(self) -> int:
        """Requests in the engine, answered or waiting (a model switch waits for none)."""
        return self.active + self.queued


@dataclass(frozen=True)
class SpeculationFacts:
    """What an engine does with speculation, as /health publishes it: the drafters it has (and the
    DFlash draft's kind), its default mode, whether speculation is exact on this build (`exact`, the
    reason in `exact_why`) and on (`enabled`), on a banded build the most verify rows it stays exact
    for (`max_rows`; None: any), the cost curve's state, what it did for recent answers here (and
    for those the DFlash draft drafted for: the words about the draft follow what it did), and
    how prompts are cut so that answers do not depend on what was cached (`prompt_chunk`).
    A backend's are unknown here (None) and `backend` says so."""

    drafters: list[str]
    default: str
    exact: bool | None
    exact_why: str
    enabled: bool | None
    max_rows: int | None = None
    draft: dict | None = None  # {"kind", "block_size", "top_k"} of a paired DFlash draft
    draft_error: str | None = None  # why a configured draft is not in use
    cost_curve: str = "none"  # ready | learning | none
    measured: dict | None = None  # {"answers", "speedup"} over recent answers; None before one
    draft_measured: dict | None = None  # the same over the answers the DFlash draft drafted for; None before one
    backend: bool = False  # a backend server speculates by its own configuration
    prompt_chunk: int | None = None  # prompts cut at multiples of this, each chunk alone (engine/chunks.py)
    prompt_why: str = ""  # why, in words


MEASURED_FILE = "measured-speedup.json"  # in a model's folder (the server says where: EngineConfig.measured_cache)


@dataclass(frozen=True)
class MeasuredSpeedup:
    """What speculation did for a model's answers on this computer, kept beside the model so that the
    catalog can say it while another model is loaded: over about the last 50 answers that could
    speculate (`answers`, `speedup`: SpeculationFacts.measured) and over those its DFlash draft drafted
    for (`draft`: SpeculationFacts.draft_measured, None before one), as of `at` (epoch seconds)."""

    at: float
    answers: int
    speedup: float
    draft: dict | None = None

    def save(self, path: str | os.PathLike) -> None:
        try:
            tmp = Path(f"{path}.tmp")
            tmp.write_text(json.dumps(asdict(self)), "utf-8")
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only store: the catalog says nothing measured

    @classmethod
    def load(cls, path: str | os.PathLike) -> "MeasuredSpeedup | None":
        """The kept figures, or None: none kept, or a file that is not ours (it is only ever shown)."""
        try:
            d = json.loads(Path(path).read_text("utf-8"))
            draft = d.get("draft")
            if draft is not None and not (isinstance(draft.get("answers"), int)
                                          and isinstance(draft.get("speedup"), (int, float))):
                draft = None
            return cls(float(d["at"]), int(d["answers"]), float(d["speedup"]), draft)
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None


class Totals:
    """Running totals for /metrics: (metric, label) -> count. Written by the thread that finishes
    requests, read from the server's loop: both under a lock."""

    def __init__(self):
        self._counts: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def count(self, event: StreamEvent) -> None:
        """A request's final event: its outcome, its tokens (where known) and its speculation."""
        u = event.usage
        with self._lock:
            c = self._counts
            c[("requests", "error" if event.error else event.finish_reason)] += 1
            if u is None or not u.counted:  # a backend that sent no counts: unknown, not zero
                return
            c[("prompt_tokens", "")] += u.prompt_tokens
            c[("completion_tokens", "")] += u.completion_tokens
            if s := u.speculation:
                c[("spec_verifies", s.mode)] += s.verifies
                c[("spec_drafted", s.mode)] += s.drafted
                c[("spec_accepted", s.mode)] += s.accepted

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

