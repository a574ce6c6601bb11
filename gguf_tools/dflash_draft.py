"""The old import path of the DFlash 2 draft writer; the format's home is gguf_tools/dflash/.

Kept only for files its owners have yet to move to `gguf_tools.dflash`: bench/invariance.py,
bench/profile.py, bench/spec.py, tests/engine/test_store.py and
tests/engine/speculative/test_dflash_{drafter,invariance,parity}.py. Delete this file once
none of them imports it (`git grep gguf_tools.dflash_draft`). Nothing is defined here.
"""

from .dflash import DraftConfig, random_tensors, write_dflash_draft, write_random_draft

__all__ = ["DraftConfig", "random_tensors", "write_dflash_draft", "write_random_draft"]
