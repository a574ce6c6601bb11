"""Render chat messages to a prompt with the model's own chat template (GGUF metadata).

Rendering uses llama-cpp-python's sandboxed Jinja2 formatter, the same template
language Hugging Face uses, so a template written for `transformers` renders here too.
Not a template library: templates come from the model file only.
"""

from __future__ import annotations

import jinja2
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from ..errors import InvalidRequest, ModelLoadError
from .model import Model

ROLES = ("system", "user", "assistant", "developer", "tool")


class ChatTemplate:
    def __init__(self, model: Model, variables: dict | None = None):
        template = model.chat_template()
        if template is None:
            raise ModelLoadError(
                f"{model.path} has no chat template in its metadata. "
                "HINT: use /v1/completions with a raw prompt, or a model that ships a template."
            )
        bos_text = model.token_text(model.bos_id) if model.bos_id >= 0 else ""
        eos_text = model.token_text(model.eos_id) if model.eos_id >= 0 else ""
        self._setup(template, bos_text, eos_text, variables)

    @classmethod
    def from_text(cls, template: str, bos_text: str = "", eos_text: str = "",
                  variables: dict | None = None) -> ChatTemplate:
        """The same renderer on a template's text, with the BOS/EOS texts a model would give it:
        lets a family's real template be checked without a GGUF of that family."""
        self = cls.__new__(cls)
        self._setup(template, bos_text, eos_text, variables)
        return self

    def _setup(self, template: str, bos_text: str, eos_text: str, variables: dict | None) -> None:
        # extra template variables a model is meant to run with (catalog.json's "chat_template",
        # e.g. Qwen3's enable_thinking=false, which its DFlash draft was trained with)
        self.variables = dict(variables or {})
        self.bos_text = bos_text
        # OpenAI's "developer" role is the system prompt under a new name. A template that never
        # names it has no branch for it: Qwen3's drops such a message without a word, Qwen3.5's
        # raises. So it reaches those as "system" (llama.cpp's server does the same); a template
        # that names it (Gemma 4, gpt-oss) gets it as it is.
        self._knows_developer = "developer" in template
        try:
            self._fmt = Jinja2ChatFormatter(template, eos_token=eos_text, bos_token=bos_text)
        except jinja2.TemplateError as e:
            raise ModelLoadError(f"the model's chat template does not parse: {e}") from e

    def render(self, messages: list[dict], variables: dict | None = None) -> str:
        """messages: [{"role", "content": str}] -> prompt text ending with the assistant's turn.
        `variables` add to (and win over) the model's own for this rendering only."""
        if not messages:
            raise InvalidRequest("messages must not be empty", param="messages")
        for i, m in enumerate(messages):
            if m.get("role") not in ROLES:
                raise InvalidRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}",
                                     param=f"messages[{i}].role")
            if not isinstance(m.get("content"), str):
                raise InvalidRequest(f"messages[{i}].content must be a string", param=f"messages[{i}].content")
        if not self._knows_developer:
            messages = [m | {"role": "system"} if m["role"] == "developer" else m for m in messages]
        try:
            # llama_cpp types messages as its OpenAI TypedDicts; these are plain dicts, checked above
            return self._fmt(messages=messages,  # type: ignore[arg-type]
                             **(self.variables | (variables or {}))).prompt
        except (jinja2.TemplateError, ValueError, TypeError) as e:
            # Templates reject some conversations on purpose (raise_exception), e.g. bad role order.
            raise InvalidRequest(f"the model's chat template rejected these messages: {e}",
                                 param="messages") from e
