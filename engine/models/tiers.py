"""Which catalog models this computer can run: the memory a model needs against the memory
flashdesk may use here, in facts a page or the CLI puts into plain words.

The memory that counts is the graphics card's own (CUDA, Vulkan, ...), or on a Mac the
unified memory Metal lets one process use (its recommended working set, which llama.cpp
reports as the Metal device's memory). Without a usable graphics card only entries marked
`cpu` are offered, and nothing is recommended: SmolLM2 stays the default there.
Nothing here downloads anything; a download starts only from the user's click.

Not the catalog (catalog.py) nor the hardware facts themselves (hardware.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .catalog import Catalog

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


def machine(gpu_offload: bool, devices: list[dict], ram_bytes: int | None) -> Machine:
    """From GET /v1/system's facts (engine/hardware.py report): the first graphics card that has memory."""
    if gpu_offload:
        for d in devices:
            if d.get("type") in ("gpu", "igpu") and d.get("memory_bytes"):
                unified = d.get("backend", "").lower() == "metal" or d.get("type") == "igpu"
                return Machine("unified" if unified else "gpu", d.get("description") or d.get("name") or "",
                               int(d["memory_bytes"]))
    return Machine("cpu", "", int(ram_bytes or 0))


def offers(catalog: Catalog, here: Machine, n_cells: int) -> list[Offer]:
    """Every entry with whether it fits here (`n_cells`: the KV cells the server allocates, context x
    parallel sequences). On a graphics card or a Mac the recommended one is the fitting entry of the
    highest catalog rank; on a processor nothing is (SmolLM2 stays the default)."""
    out = []
    for e in catalog.entries.values():
        need = e.memory_bytes(n_cells)
        fits = need <= here.budget and (here.kind != "cpu" or e.cpu)
        out.append(Offer(e.name, e.title, fits, need, e.download_bytes, e.draft.kind if e.draft else None))
    if here.kind != "cpu":
        best = max((o for o in out if o.fits), key=lambda o: catalog.entries[o.name].rank, default=None)
        out = [Offer(**(asdict(o) | {"recommended": o is best})) for o in out]
    return out

