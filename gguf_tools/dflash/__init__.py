"""The DFlash 2 draft format, in one place: format.py (keys, `DraftConfig`, reading a draft
back, `fits` a target, `CAPTURE_ARCHS`), write.py (the writer and random drafts),
convert.py with convert_config.py (published Hugging Face checkpoints -> GGUF).

Not the drafter that runs a draft (engine/speculative/drafters/) nor the trainer
(draft_training/). Importing this package loads neither llama_cpp nor the converter.
"""

from .format import (ARCH, CAPTURE_ARCHS, DraftConfig, DraftFile, TargetFacts, capture_refusal,
                     default_target_layers, fits, pick_mask_token, tensor_shapes, vocab_digest)
from .write import random_tensors, write_dflash_draft, write_random_draft

__all__ = ["ARCH", "CAPTURE_ARCHS", "DraftConfig", "DraftFile", "TargetFacts", "capture_refusal",
           "default_target_layers", "fits", "pick_mask_token", "random_tensors", "tensor_shapes", "vocab_digest",
           "write_dflash_draft", "write_random_draft"]
