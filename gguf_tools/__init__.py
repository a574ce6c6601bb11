"""GGUF tools: validate, inspect, and write DFlash 2 drafts (later convert, quantize) GGUF model files."""

from .check import GGUFFormatError, GGUFSummary, TensorEntry, check_gguf
from .dflash_draft import DraftConfig, read_metadata, write_dflash_draft, write_random_draft

__all__ = ["DraftConfig", "GGUFFormatError", "GGUFSummary", "TensorEntry", "check_gguf", "read_metadata",
           "write_dflash_draft", "write_random_draft"]
