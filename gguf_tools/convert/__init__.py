"""Hugging Face checkpoint (config.json + *.safetensors + tokenizer) -> GGUF, without PyTorch.

    from gguf_tools.convert import convert_hf
    report = convert_hf("SmolLM2-135M-Instruct/", outtype="f16", progress=print)

Modules: `hf_config` reads config.json and picks the architecture, `safetensors_reader`
streams tensors one at a time, `encode` turns one tensor into the output type, `llama`
and `qwen3` hold the per-architecture metadata and tensor transforms, `convert` drives
them, `cli` registers `flashdesk convert`. The tokenizer part lives in `tokenizer`.
"""

from .convert import OUTTYPES, ConvertReport, convert_hf, default_out_path
from .errors import ConvertError
from .hf_config import SUPPORTED, HFModel, read_hf_config

__all__ = ["OUTTYPES", "SUPPORTED", "ConvertError", "ConvertReport", "HFModel", "convert_hf", "default_out_path",
           "read_hf_config"]
