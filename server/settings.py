"""The one typed settings source: defaults < environment (FLASHDESK_*) < CLI flags.

CLI flags arrive as keyword arguments to `Settings(...)`, which pydantic-settings
ranks above the environment. Each field's description is its help text: server/flags.py
makes `flashdesk serve`'s flags from these fields (`flag` in a field's extra names a flag
that is not the field's name). The engine's knobs take their defaults from
`engine.EngineConfig` and their names from engine/speculative/params.py, so each lives once.

Not the engine's configuration: server/runtime/served.py turns these into an `EngineConfig`.
"""

from __future__ import annotations

import ipaddress

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine import EngineConfig
from engine.models.catalog import DEFAULT_MODEL
from engine.speculative.params import MAX_BLOCK

from .runtime.speculation import Mode, Selector
from .runtime.backend_wire import base_url

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
ENGINE_DEFAULTS = EngineConfig()  # the engine's own defaults (threads: this machine's cores, at most 8)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLASHDESK_", extra="ignore")

    home: str | None = Field(None, description="data folder (models, logs); default: the OS convention")
    model: str = Field(DEFAULT_MODEL, description="model to serve: a store name or a path to a .gguf")
    host: str = Field("127.0.0.1", description="address to bind; anything but loopback needs an API key")
    port: int = Field(8080, ge=0, le=65535, description="port to bind")
    ctx: int = Field(ENGINE_DEFAULTS.n_ctx, ge=256, le=1 << 20,
                     description="context tokens per request (prompt + answer)")
    parallel: int = Field(ENGINE_DEFAULTS.n_parallel, ge=1, le=64,
                          description="requests generated together (continuous batching)")
    max_queue: int = Field(ENGINE_DEFAULTS.max_queue, ge=0, le=10_000,
                           description="requests that may wait for a free slot, first come first served; "
                                       "more get a 429 with Retry-After")
    threads: int = Field(ENGINE_DEFAULTS.n_threads, ge=1, le=512, description="CPU threads")
    api_key: SecretStr | None = Field(None, description="require `Authorization: Bearer KEY` on the API")
    allowed_hosts: list[str] = Field(default_factory=list, json_schema_extra={"flag": "allowed-host"},
                                     description="extra Host header name to accept (DNS-rebinding guard; repeatable)")
    allowed_origins: list[str] = Field(default_factory=list, json_schema_extra={"flag": "allowed-origin"},
                                       description="extra browser origin allowed to call the API (repeatable)")
    max_body_bytes: int = Field(8 << 20, ge=1024, description="largest request body accepted")
    verbose: bool = Field(ENGINE_DEFAULTS.verbose, description="print llama.cpp's own log")
    draft: str = Field("auto", description="DFlash draft (2 or v1): auto (the model's paired draft), none, or a path")
    speculative: Mode = Field(ENGINE_DEFAULTS.spec_mode,
                              description="default speculation for requests that do not ask "
                                          "(auto: only where it is measured to be faster)")
    selector: Selector = Field(ENGINE_DEFAULTS.selector, description="DFlash 2 path selector (v1 drafts: top-1)")
    spec_block: int = Field(ENGINE_DEFAULTS.spec_block, ge=2, le=MAX_BLOCK, json_schema_extra={"flag": "block"},
                            description="largest speculative block B (anchor + drafted tokens)")
    allow_inexact_speculation: bool = Field(
        ENGINE_DEFAULTS.spec_inexact, description="speculate on backends whose batched logits differ from "
                                                  "single-token ones (CUDA); output is then not bit-identical "
                                                  "to plain decoding")
    # A backend instead of the local engine (server/runtime/backend.py): the model, draft and engine knobs above
    # are then the backend's business.
    backend: str | None = Field(None, description="serve an OpenAI-compatible server (vLLM, SGLang) at this URL "
                                                  "instead of a local model")
    backend_key: SecretStr | None = Field(None, description="API key the backend expects (sent as Bearer)")
    backend_model: str | None = Field(None, description="the backend's model to drive (default: the one it serves)")

    @field_validator("backend")
    @classmethod
    def _backend(cls, v):
        return base_url(v) if v else None  # FLASHDESK_BACKEND="" is unset, as an empty flag would be

    @model_validator(mode="after")
    def _safe_bind(self):
        if not is_loopback(self.host) and not (self.api_key and self.api_key.get_secret_value()):
            raise ValueError(
                f"binding to {self.host} makes the server reachable from other machines, so an API key "
                "is required. HINT: add --api-key SOME-LONG-SECRET (or set FLASHDESK_API_KEY)."
            )
        return self

    @property
    def key(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key else None
