"""GGUF tools: validate, inspect, quantize (through libllama, imported only when used), and write DFlash 2
drafts (later convert) GGUF model files."""

from .check import GGUFFormatError, GGUFSummary, TensorEntry, check_gguf
from .dflash_draft import DraftConfig, read_metadata, write_dflash_draft, write_random_draft
from .inspect import format_report, inspect_gguf
from .llama_facts import CAPTURE_ARCHS
from .quantize import QTYPES, QuantizeFailed, QuantizeRefused, QuantizeReport, quantize

__all__ = ["CAPTURE_ARCHS", "DraftConfig", "GGUFFormatError", "GGUFSummary", "QTYPES", "QuantizeFailed",
           "QuantizeRefused", "QuantizeReport", "TensorEntry", "check_gguf", "format_report", "inspect_gguf",
           "quantize", "read_metadata", "write_dflash_draft", "write_random_draft"]
