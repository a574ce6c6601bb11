"""A catalog draft published as a safetensors checkpoint, converted to a DFlash GGUF on this computer
and paired with its installed target: the last step of engine/models/pull.py's `from_hub`.

What it is: the order that keeps the store's rule (nothing half-installed) for a file flashdesk writes
itself. The caller has already verified every checkpoint file against its pinned sha256; here the GGUF
is written into `<downloads>/converted/` (never a place the store reads a draft from), checked by
`ModelStore.pair` exactly as a downloaded draft GGUF is (structure, then the DFlash reading with its
hostile-draft bounds, then llama.cpp's fit against the target), and only then moved beside the model,
with the manifest saying what it was converted from. A conversion that fails, is cancelled or is
killed leaves the model installed and unpaired; its partial output is deleted (or, after a kill, by
the next try, which starts the conversion over from the verified downloads).

What it is not: the converter (gguf_tools/dflash/convert.py: both checkpoint layouts, z-lab and
vLLM speculators, and every refusal with its reason) nor the downloads (hub.py).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from ..advisor import hardware
from ..errors import InvalidModelFile
from .catalog import CatalogEntry, DraftSpec, HubFile
from .files import Progress, ProgressFactory
from .store import InstalledModel, ModelStore

OUT_DIR = "converted"  # inside the pull's downloads folder
# The converted draft's matrices, by hardware.backend(). On a processor q8_0: bench/draft_precision.py
# measured the shipped draft's tau within 0.01 of f32's in every precision (q8_0 -0.008), and
# bench/break_even.py a q8_0 draft call 33-52% cheaper than bf16 at the paired entries' real shapes,
# which is what makes a published draft pay on a processor at all. Elsewhere the checkpoint's own
# precision (bf16 for z-lab's), which was not measured against q8_0 on a graphics card.
DRAFT_DTYPE = {"cpu": "q8_0"}


def checkpoint_tag(spec: DraftSpec) -> str:
    """The manifest's draft_source of a draft converted from this checkpoint: its files' pins, or the
    commit that fixes them."""
    if spec.commit is not None:
        pins = f"{spec.commit.repo}@{spec.commit.revision}"
    else:
        pins = "\n".join(sorted(f"{f.file}:{f.sha256}" for f in spec.checkpoint))
    return f"hub-checkpoint:{hashlib.sha256(pins.encode()).hexdigest()[:16]}"


class _Bar:
    """convert_draft's `progress(done_bytes, total_bytes)` fed into a pull's progress bar, so a cancel
    takes effect between tensors as it does between download chunks."""

    def __init__(self, progress: ProgressFactory, desc: str):
        self.progress, self.desc, self.done = progress, desc, 0
        self.bar: Progress | None = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = self.progress(self.desc, total)
        self.bar.update(done - self.done)  # may raise Cancelled
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def convert_and_pair(store: ModelStore, entry: CatalogEntry, ckpt: tuple[HubFile, ...], hashes: dict[str, str],
                     downloads: Path, progress: ProgressFactory) -> InstalledModel:
    """Convert the verified checkpoint `ckpt` in `downloads` (`hashes`: each file's sha256) for the
    installed target of `entry`, then pair it; the manifest records what it was converted from. A
    refused checkpoint raises InvalidModelFile with the converter's reason."""
    from gguf_tools.convert.errors import ConvertError  # the converter loads only for this step
    from gguf_tools.dflash.convert import convert_draft

    spec = entry.draft
    assert spec is not None  # the pull converts only for an entry with a draft checkpoint
    m = store.get(entry.name)
    out_dir = downloads / OUT_DIR
    shutil.rmtree(out_dir, ignore_errors=True)  # what a killed conversion left: start it over
    out_dir.mkdir(parents=True)
    bar = _Bar(progress, f"convert {ckpt[0].repo}")
    try:
        try:
            r = convert_draft(downloads, m.path, out_dir / "draft.gguf", progress=bar,
                              dtype=DRAFT_DTYPE.get(hardware.backend(), "auto"))
        except ConvertError as e:
            raise InvalidModelFile(f"the checkpoint {ckpt[0].repo} cannot be converted: {e}") from e
        finally:
            bar.close()
        if (r.kind, r.block_size) != (spec.kind, spec.block_size):  # the catalog promised another draft
            raise InvalidModelFile(f"the checkpoint converts to a {r.kind} draft of block {r.block_size}, but the "
                                   f"catalog entry says {spec.kind} of block {spec.block_size}. HINT: fix the "
                                   "catalog entry's draft kind and block_size.")
        m = store.pair(entry.name, r.path, progress=progress, source=checkpoint_tag(spec), move=True)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)  # paired (moved away), refused or interrupted: nothing stays
    store.note(entry.name, draft_converted_from={
        "repo": ckpt[0].repo, "revision": ckpt[0].revision, "pinned": "commit" if spec.commit else "files",
        "files": {f.file: hashes[f.file] for f in ckpt}, "sizes": {f.file: f.size for f in ckpt},
        "layout": r.layout, "class": r.hf_class,
        "dtype": r.dtype})
    return store.get(entry.name)
