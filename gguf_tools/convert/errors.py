"""The one error type of the Hugging Face -> GGUF converter.

Every refusal (unsupported architecture, bad checkpoint, output already there) is a
`ConvertError` whose message says what is wrong and, where there is one, the next step
(a "HINT: ..." line). The CLI prints the message as is; the UI can show it verbatim.
"""

from __future__ import annotations


class ConvertError(Exception):
    """A checkpoint that cannot be converted, with a message fit for the user."""
