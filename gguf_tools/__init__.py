"""GGUF tools: validate, inspect (and later convert, quantize) GGUF model files."""

from .check import GGUFFormatError, GGUFSummary, TensorEntry, check_gguf

__all__ = ["GGUFFormatError", "GGUFSummary", "TensorEntry", "check_gguf"]
