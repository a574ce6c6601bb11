"""Does a DFlash draft GGUF (DFlash 2 or v1) fit a loaded target? Checked before the draft is loaded.

A draft that does not fit would abort llama.cpp (a tap >= n_layer, features of the wrong
width) or silently draft for another vocabulary; a draft of a kind flashdesk cannot run (DSpark, a
v1 draft with a reduced vocabulary) is refused by the format's reader. The format knowledge (keys, consistency,
what must match the target) is gguf_tools' (`gguf_tools/dflash/format.py`): this module
only states what the engine knows of the target (`TargetFacts`), asks
`read_checked` (the file's own refusals, worded as `flashdesk inspect` words them) and `fits`,
and turns their problems into one `DraftRefused`.
Not the drafter (dflash.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf_tools import GGUFFormatError
from gguf_tools.dflash import HINT, DraftFile, TargetFacts, capture_refusal, fits, read_checked, vocab_digest

from ...errors import ModelLoadError
from ...llama.model import Model


class DraftRefused(ModelLoadError):
    """The draft GGUF does not fit this target (or is no DFlash draft flashdesk can run)."""


@dataclass(frozen=True)
class DraftInfo(DraftFile):
    """A draft that fits its target: its config as `read_draft` read it."""

    @property
    def top_k(self) -> int:  # dflash.py's name for selector_top_k: K candidates per block slot (0: v1)
        return self.selector_top_k


def target_facts(target: Model) -> TargetFacts:
    i = target.info
    return TargetFacts(i.architecture, i.n_embd, i.n_layer, i.n_vocab, vocab_digest(target.token_bytes()))


def inspect_draft(path: str, target: Model) -> DraftInfo:
    """Validate a draft GGUF against a loaded target without loading the draft; raises DraftRefused."""
    why = capture_refusal(target.info.architecture)
    if why:  # before the draft is read: no draft for any target of this architecture can help
        raise DraftRefused(f"{why}. HINT: use prompt lookup or plain decoding for this model.")
    try:  # the file's own refusals, in the words `flashdesk inspect` gives too
        draft, why = read_checked(path)
    except (GGUFFormatError, OSError) as e:
        raise DraftRefused(f"draft {path} is not a readable GGUF: {e}. {HINT}") from None
    if draft is None:
        raise DraftRefused(why)
    problems = fits(draft, target_facts(target))
    if problems:
        raise DraftRefused(f"draft {path} does not fit target {target.path}: {'; '.join(problems)}. {HINT}")
    return DraftInfo(**vars(draft))
