"""flashdesk engine: load a GGUF model with llama.cpp and generate tokens.

Knows nothing of HTTP. Typical use:

    from engine import Engine, SamplingParams
    eng = Engine.load("model.gguf")
    print(eng.chat([{"role": "user", "content": "Hi"}], sampling=SamplingParams(temperature=0)).text)
    eng.close()
"""

from .llama.build import select_build

select_build()  # before any module below imports llama_cpp: which build it loads (CPU or CUDA)

from .errors import (ContextLengthExceeded, DownloadError, EngineError, EngineStopped, GenerationFailed,
                     InvalidModelFile, InvalidRequest, ModelLoadError, ModelNotFound)
from .request import ChatPrompt, Completion, GenerationRequest, RequestHandle, StreamEvent, Usage
from .sampling import SamplingParams
from .worker import Engine, EngineConfig

__all__ = [
    "ChatPrompt", "Completion", "ContextLengthExceeded", "DownloadError", "Engine", "EngineConfig", "EngineError",
    "EngineStopped", "GenerationFailed", "GenerationRequest", "InvalidModelFile", "InvalidRequest",
    "ModelLoadError", "ModelNotFound", "RequestHandle", "SamplingParams", "StreamEvent", "Usage",
]
