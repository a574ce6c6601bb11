"""GGUF tools: validate, inspect, quantize (through libllama, imported only when used), convert
Hugging Face checkpoints (convert/), and the DFlash 2 draft format (dflash/: keys, config, fit to
a target, writer, converter; import it from `gguf_tools.dflash`), and whether speculation can roll a
model's memory back, expected from its file (rollback.py)."""

from .check import GGUFFormatError, GGUFSummary, TensorEntry, check_gguf
from .inspect import format_report, inspect_gguf
from .quantize import QTYPES, QuantizeFailed, QuantizeRefused, QuantizeReport, quantize

__all__ = ["GGUFFormatError", "GGUFSummary", "QTYPES", "QuantizeFailed", "QuantizeRefused", "QuantizeReport",
           "TensorEntry", "check_gguf", "format_report", "inspect_gguf", "quantize"]
