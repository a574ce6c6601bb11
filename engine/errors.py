"""Engine errors: one class per thing that can go wrong, each with a stable `code`.

Not HTTP: `server/http/errors.py` maps these codes to status codes and OpenAI error JSON.
Messages are written for the person reading them and end with the next step to take.
"""


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""

    code = "engine_error"

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(EngineError):
    code = "invalid_request"


class ContextLengthExceeded(EngineError):
    code = "context_length_exceeded"


class ModelNotFound(EngineError):
    code = "model_not_found"


class ModelLoadError(EngineError):
    """The file exists but is not a model this llama.cpp can load."""

    code = "model_load_error"


class InvalidModelFile(ModelLoadError):
    """The file is not a well-formed GGUF (wrong magic, truncated, hostile sizes...)."""

    code = "invalid_model_file"


class EngineStopped(EngineError):
    code = "engine_stopped"


class ServerBusy(EngineError):
    """Every slot is generating and `max_queue` requests already wait for one: come back later."""

    code = "server_busy"

    def __init__(self, message: str, *, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after  # seconds: about when a slot should be free


class GenerationFailed(EngineError):
    """llama.cpp refused a decode (e.g. no free KV cells) in the middle of a generation."""

    code = "generation_failed"


class DownloadError(EngineError):
    code = "download_error"


class NotEnoughDisk(DownloadError):
    code = "not_enough_disk"


class HubAccessDenied(DownloadError):
    """The Hub refused: a gated or private repository (401 without a token, 403 with one)."""

    code = "hub_access_denied"


class Cancelled(EngineError):
    """The user stopped a long store job (a download) before it finished."""

    code = "cancelled"
