"""The DFlash draft format (DFlash 2 and plain DFlash v1), in one place: format.py (keys, kinds,
`DraftConfig`, `fits` a target, `CAPTURE_ARCHS`), read.py (a draft GGUF read back:
`read_draft`), write.py (the writer and random drafts), convert.py with
convert_config.py (published Hugging Face checkpoints -> GGUF).

Not the drafter that runs a draft (engine/speculative/drafters/) nor the trainer
(draft_training/). Importing this package loads neither llama_cpp nor the converter.
"""

from .format import (ARCH, CAPTURE_ARCHS, DFLASH1, DFLASH2, KINDS, DraftConfig, DraftFile, TargetFacts,
                     capture_refusal, default_target_layers, fits, kind_of, kind_words, pick_mask_token, tensor_shapes,
                     vocab_digest)
from .read import HINT, read_checked, read_draft
from .write import random_tensors, write_dflash_draft, write_random_draft

__all__ = ["ARCH", "CAPTURE_ARCHS", "DFLASH1", "DFLASH2", "HINT", "KINDS", "DraftConfig", "DraftFile",
           "TargetFacts", "capture_refusal", "default_target_layers", "fits", "kind_of", "kind_words",
           "pick_mask_token", "random_tensors", "read_checked", "read_draft", "tensor_shapes", "vocab_digest",
           "write_dflash_draft", "write_random_draft"]
