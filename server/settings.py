"""The one typed settings source: defaults < environment (FLASHDESK_*) < CLI flags.

CLI flags arrive as keyword arguments to `Settings(...)`, which pydantic-settings
ranks above the environment. Each field's description is its help text.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.catalog import DEFAULT_MODEL

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


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
    ctx: int = Field(4096, ge=256, le=1 << 20, description="context tokens per request (prompt + answer)")
    parallel: int = Field(4, ge=1, le=64, description="requests generated together (continuous batching)")
    threads: int = Field(max(1, min(os.cpu_count() or 1, 8)), ge=1, le=512, description="CPU threads")
    api_key: SecretStr | None = Field(None, description="require `Authorization: Bearer KEY` on the API")
    allowed_hosts: list[str] = Field(default_factory=list,
                                     description="extra Host header names to accept (DNS-rebinding guard)")
    allowed_origins: list[str] = Field(default_factory=list,
                                       description="extra browser origins allowed to call the API")
    max_body_bytes: int = Field(8 << 20, ge=1024, description="largest request body accepted")
    verbose: bool = Field(False, description="print llama.cpp's own log")
    draft: str = Field("auto", description="DFlash 2 draft: auto (the model's paired draft), none, or a path")
    speculative: Literal["auto", "off", "dflash", "lookup"] = Field(
        "auto", description="default speculation for requests that do not ask (auto: only where it is faster)")
    selector: Literal["walk", "viterbi", "dp", "top1"] = Field("walk", description="DFlash 2 path selector")
    spec_block: int = Field(8, ge=2, le=16, description="largest block B (anchor + drafted tokens)")
    allow_inexact_speculation: bool = Field(
        False, description="speculate on backends whose batched logits differ from single-token ones (CUDA); "
                           "output is then not bit-identical to plain decoding")

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
