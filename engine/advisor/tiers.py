"""Which catalog models this computer can run: the memory a model needs against the memory
flashdesk may use here, in facts a page or the CLI puts into plain words.

The memory that counts is the graphics card's own (CUDA, Vulkan, ...), or on a Mac the
unified memory Metal lets one process use (its recommended working set, which llama.cpp
reports as the Metal device's memory). Without a usable graphics card only entries marked
`cpu` are offered, each with the speed this computer's processor would give it (speed.py, from a
measurement here), and the recommended one is the best-ranked that fits the RAM and answers at a
usable speed. SmolLM2 stays the embedded default, and is never the suggestion itself: where no
bigger model keeps up, nothing is recommended.
Nothing here downloads anything; a download starts only from the user's click.

Not the catalog (catalog.py), the hardware facts (hardware.py) nor the speed model (speed.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..models.catalog import DEFAULT_MODEL, Catalog
from .speed import Rates, Speed, predict

GPU_RESERVE = 1 << 30  # the display, the driver and other programs keep about 1 GiB of a graphics card
CPU_SHARE = 0.6  # of the RAM, on a machine without a graphics card: the rest is the system's and the user's


@dataclass(frozen=True)
class Machine:
    kind: str  # "gpu" (own memory) | "unified" (a Mac's shared memory) | "cpu"
    name: str  # "NVIDIA GeForce RTX 4090", "Apple M3 Max", or "" for the processor
    memory_bytes: int  # what the models compete for: the card's memory, Metal's working set, or the RAM

    @property
    def budget(self) -> int:
        if self.kind == "gpu":
            return max(self.memory_bytes - GPU_RESERVE, 0)
        if self.kind == "unified":
            return self.memory_bytes  # Metal's recommended working set already leaves the system its share
        return int(self.memory_bytes * CPU_SHARE)


@dataclass(frozen=True)
class Offer:
    name: str
    title: str
    fits: bool
    memory_bytes: int  # needed to run it at the server's context
    download_bytes: int
    draft_kind: str | None  # "dflash2" | "dflash1" | None (prompt lookup only)
    recommended: bool = False
    speed: Speed | None = None  # on a processor: what it would do here (None: not measured, or a GPU)


def machine(gpu_offload: bool, devices: list[dict], ram_bytes: int | None) -> Machine:
    """From GET /v1/system's facts (engine/advisor/hardware.py report): the first graphics card that has memory."""
    if gpu_offload:
        for d in devices:
            if d.get("type") in ("gpu", "igpu") and d.get("memory_bytes"):
                unified = d.get("backend", "").lower() == "metal" or d.get("type") == "igpu"
                return Machine("unified" if unified else "gpu", d.get("description") or d.get("name") or "",
                               int(d["memory_bytes"]))
    return Machine("cpu", "", int(ram_bytes or 0))


def offers(catalog: Catalog, here: Machine, n_cells: int, rates: Rates | None = None) -> list[Offer]:
    """Every entry with whether it fits here (`n_cells`: the KV cells the server allocates, context x
    parallel sequences). On a graphics card or a Mac the recommended one is the fitting entry of the
    highest catalog rank. On a processor each `cpu` entry gets its speed from `rates` (this
    computer's measurement), and the recommended one is the highest-ranked fitting entry that keeps
    a usable speed; none when nothing beats the default, or when `rates` is None (not measured)."""
    out = []
    for e in catalog.entries.values():
        need = e.memory_bytes(n_cells)
        fits = need <= here.budget and (here.kind != "cpu" or e.cpu)
        speed = predict(e.target.size, rates) if here.kind == "cpu" and e.cpu and rates is not None else None
        out.append(Offer(e.name, e.title, fits, need, e.download_bytes, e.draft.kind if e.draft else None,
                         speed=speed))
    if here.kind == "cpu":
        candidates = [o for o in out if o.fits and o.speed is not None and o.speed.usable]
    else:
        candidates = [o for o in out if o.fits]
    best = max(candidates, key=lambda o: catalog.entries[o.name].rank, default=None)
    if best is not None and here.kind == "cpu" and best.name == DEFAULT_MODEL:
        best = None  # the embedded default is what this computer has already: nothing to suggest
    return [Offer(**(asdict(o) | {"recommended": o is best, "speed": o.speed})) for o in out]
