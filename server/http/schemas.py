"""Request bodies of the OpenAI-compatible API, validated by pydantic, and their
conversion to engine dataclasses (`GenerationRequest`) at the boundary.

Unknown parameters are refused (400 "unsupported parameter") rather than ignored:
silently dropping e.g. `tools` would hand back output that looks valid but never was.
`response_format` is checked here only for shape; engine/grammar/schema.py compiles it
(and refuses what its grammar could not enforce). Field names and defaults follow OpenAI's API.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine import ChatPrompt, GenerationRequest, SamplingParams
from engine.speculative.params import MAX_BLOCK, SpecParams

from ..runtime.speculation import Mode, Selector

MAX_STOP = 16


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class StreamOptions(_Strict):
    include_usage: bool = False


class Speculative(_Strict):
    """flashdesk extension: how to speculate (the output is the same either way)."""

    mode: Mode = SpecParams.mode
    selector: Selector | None = SpecParams.selector
    block: int | None = Field(default=SpecParams.block, ge=2, le=MAX_BLOCK)

    def params(self) -> SpecParams:
        return SpecParams(self.mode, self.selector, self.block)


class _Sampling(_Strict):
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="flashdesk extension: keep the k most likely tokens (0 = off)")
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    n: Literal[1] = 1
    user: str | None = None
    speculative: Speculative | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, v):
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop strings")
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        return stops

    def stops(self) -> list[str]:
        """`stop` as a list: its validator makes one of whatever a client sends, but the default (None) is
        not validated; the engine and the backend read None and [] alike (no stop strings)."""
        return self.stop if isinstance(self.stop, list) else []

    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              min_p=self.min_p, presence_penalty=self.presence_penalty,
                              frequency_penalty=self.frequency_penalty, seed=self.seed)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def limit(self) -> int | None:
        return self.max_tokens

    def spec(self) -> SpecParams:
        return self.speculative.params() if self.speculative else SpecParams()


class ChatCompletionRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    response_format: dict | None = None  # {"type": "text" | "json_object" | "json_schema", ...}

    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def chat_messages(self) -> list[dict]:
        """The messages as the engine renders them. A "developer" message stays one: the chat template
        decides (engine/llama/chat_template.py), and a backend's own template does."""
        return [{"role": m.role, "content": m.text()} for m in self.messages]

    def user_texts(self) -> list[str]:
        """What the user wrote, message by message: the texts copy fields copy from."""
        return [m.text() for m in self.messages if m.role == "user"]

    def to_engine(self, prompt: str | ChatPrompt, grammar: str | None = None) -> GenerationRequest:
        return GenerationRequest(prompt, self.limit(), self.sampling(), self.stops(), self.spec(), grammar=grammar,
                              response_format=self.response_format if grammar else None)


class CompletionRequest(_Sampling):
    prompt: str | list[int]
    max_tokens: int | None = Field(16, ge=1)  # OpenAI's default for legacy completions
    echo: Literal[False] = False

    def to_engine(self) -> GenerationRequest:
        return GenerationRequest(self.prompt, self.limit(), self.sampling(), self.stops(), self.spec())
