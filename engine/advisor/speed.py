"""How fast a catalog model would answer on this computer's processor, predicted from a quick
measurement here (measure.py), never from a table of processors.

Decoding one token on a processor reads every weight once: ggml's matrix-vector kernels stream the
quantized weights (with tied embeddings the output head reads the whole embedding too), so a GGUF's
file size is the bytes a token reads, within a few per cent. A token of a model of 1B weights or
more then costs its file's bytes over the rate this computer's decode gets through weights, plus
the per-token work that does not grow with the weights (graph set-up, norms, thread hand-offs).

- The **weight rate** is timed on a throw-away file of two wide Q4_K layers (timing_file.py): the
  rate the kernels work through quantized weights at this thread count, capped by the **memory
  rate** (a plain read of 1 GiB: on a computer with a cache as big as the timing file, the cap decides).
- The **fixed time** is what the model in use's measured decode leaves once its own bytes are paid.
- Reading a prompt costs the same share of a decode per token as it does for the model in use.

Not the memory fit (tiers.py) nor the measuring itself (measure.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# English prose runs about 0.75 words a token. A Chinese character is about one token in the Qwen
# tokenizers of the processor models (their 248k vocabulary holds common characters and many
# two-character words, so this undercounts a little rather than promise too much).
WORDS_PER_TOKEN = {"en": 0.75, "zh-TW": 1.0}
USABLE_TOKENS_PER_S = 5.0  # about 4 words a second: the pace a person reads; slower feels stuck
# One work order: the tokens its message adds to the prompt (the system prompt and worked examples
# before it are the same for every order, and their KV is reused) and its JSON answer. Medians over
# the 24 dev cases in SmolLM2's tokenizer: `.venv/bin/python -m bench cpu_tier --tokens`.
WORK_ORDER_PROMPT_TOKENS = 160
WORK_ORDER_ANSWER_TOKENS = 205


@dataclass(frozen=True)
class Rates:
    """One measurement of this computer (measure.py)."""

    memory_bytes_per_s: float  # a plain read of RAM with the decode's threads
    weights_bytes_per_s: float  # the timing file's bytes over one decode of it
    in_use_bytes: int  # the file of the model in use
    decode_s: float  # one token's decode of it
    prefill_s: float  # one prompt token's share of a batch of it
    threads: int  # llama.cpp threads the measurement used

    @property
    def read_rate(self) -> float:
        """Bytes of weights a second a decode gets through here."""
        return min(self.weights_bytes_per_s, self.memory_bytes_per_s)

    @property
    def fixed_s(self) -> float:
        """Per-token time that does not grow with the weights: what the model in use's bytes leave unexplained."""
        return max(0.0, self.decode_s - self.in_use_bytes / self.read_rate)

    def with_memory(self, memory_bytes_per_s: float) -> "Rates":
        """This computer with another memory rate (the README's table: computers with slower memory):
        the model in use's decode pays its bytes at the new rate; its fixed time and prompt share stay."""
        other = replace(self, memory_bytes_per_s=memory_bytes_per_s)
        decode_s = self.fixed_s + self.in_use_bytes / other.read_rate
        return replace(other, decode_s=decode_s, prefill_s=self.prefill_s * decode_s / self.decode_s)


@dataclass(frozen=True)
class Speed:
    tokens_per_s: float  # answering (decode), one request at a time
    work_order_s: float  # reading a typical work order and writing its JSON

    @property
    def usable(self) -> bool:
        return self.tokens_per_s >= USABLE_TOKENS_PER_S

    def words_per_s(self, language: str = "en") -> float:
        return self.tokens_per_s * WORDS_PER_TOKEN.get(language, WORDS_PER_TOKEN["en"])


def predict(weight_bytes: int, rates: Rates) -> Speed:
    """The speed of a model whose file is `weight_bytes`, on the computer `rates` measured."""
    per_token = weight_bytes / rates.read_rate + rates.fixed_s
    per_prompt_token = per_token * rates.prefill_s / rates.decode_s
    return Speed(1.0 / per_token, WORK_ORDER_PROMPT_TOKENS * per_prompt_token + WORK_ORDER_ANSWER_TOKENS * per_token)
