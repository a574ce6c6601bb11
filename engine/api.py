"""What the server asks of an engine, written once: the local engine (engine.Engine) and a backend
server's adapter (server/runtime/backend.py BackendEngine) both implement `EngineAPI`, so the routes never ask
which one they hold. What the two can do differently is said in `Capabilities`, not by their type.

What this is not: HTTP. The backend's adapter lives in server/, and the engine knows nothing of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .request import ChatPrompt, GenerationRequest
from .stats import EngineStats, SpeculationFacts, Totals


@dataclass(frozen=True)
class Capabilities:
    close_within: bool  # can end a JSON answer within max_tokens by closing it (needs the grammar here)
    logprobs: bool  # token log-probabilities on every answer that asks for them (a backend: where it sends them)
    backend: bool  # a backend server answers: it speculates by its own configuration, and says so itself


LOCAL = Capabilities(close_within=True, logprobs=True, backend=False)


class EngineAPI(Protocol):
    capabilities: Capabilities
    totals: Totals  # running totals for /metrics

    @property
    def n_ctx(self) -> int | None:  # read-only here, so an engine may say `int`
        """Context per request; None: a backend that does not say."""

    @property
    def description(self) -> str:
        """What answers, in words for the log: the model file's own description, or the backend and its model."""

    def render_chat(self, messages: list[dict], variables: dict | None = None) -> str | ChatPrompt:
        """The chat as the engine's prompt: rendered text here, the messages themselves for a backend.
        `variables`: chat-template variables for this prompt only (a backend's template is its own)."""

    def tokenize_prompt(self, prompt: str | list[int]) -> list[int]: ...

    def piece(self, token: int) -> bytes:
        """The bytes of one of its token ids as they appear in text. A backend's answers carry their
        pieces instead (StreamEvent.pieces), and it raises UnsupportedWithBackend."""

    def submit(self, req: GenerationRequest) -> GenerationRequest:
        """Validate and queue `req`; its events go to `req.sink`. Raises EngineError for a bad request."""

    def stats(self) -> EngineStats: ...

    def speculation_facts(self) -> SpeculationFacts: ...

    async def health(self) -> dict | None:
        """How the server behind it answers, for /health ({"status": "up" | "down" | "failing", "error", ...});
        None: nothing is behind it (the local engine answers itself)."""

    async def models(self) -> list[dict] | None:
        """The models it serves as its server lists them (GET /v1/models entries); None: the one model
        this server loaded."""

    async def spec_figures(self) -> dict | None:
        """Its server's own speculation counters, for /health and /metrics; None where it publishes none
        (the local engine counts its own in `totals`)."""

    def stop(self) -> None: ...

    def close(self) -> None: ...
