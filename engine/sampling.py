"""Sampling parameters of a request, and their validation.

Not the sampler: llama.cpp's sampler chain applies them (engine/llama/sampler.py).
Temperature 0 is greedy (argmax), exactly reproducible; a seed makes sampling reproducible.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass

from .errors import InvalidRequest


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None  # None = a fresh random seed per request

    @property
    def greedy(self) -> bool:
        # the temperature llama.cpp's sampler gets is a float32: below about 1e-45 it is 0, an argmax
        return ctypes.c_float(self.temperature).value <= 0.0

    def validate(self) -> None:
        checks = [
            ("temperature", 0.0 <= self.temperature <= 2.0, "must be between 0 and 2"),
            ("top_p", 0.0 < self.top_p <= 1.0, "must be in (0, 1]"),
            ("top_k", self.top_k >= 0, "must be >= 0"),
            ("min_p", 0.0 <= self.min_p <= 1.0, "must be between 0 and 1"),
            ("presence_penalty", -2.0 <= self.presence_penalty <= 2.0, "must be between -2 and 2"),
            ("frequency_penalty", -2.0 <= self.frequency_penalty <= 2.0, "must be between -2 and 2"),
        ]
        for name, ok, why in checks:
            value = getattr(self, name)
            if not ok or (isinstance(value, float) and not math.isfinite(value)):
                raise InvalidRequest(f"{name} {why} (got {value})", param=name)
