"""What every benchmark of the suite shares: the one result record, the A B A B runner, medians.

A Record says what was timed and on what (build, commit, device, model), with which parameters,
the samples and their medians and ratios; the suite writes it as JSON and as Markdown
(bench/suite.py). A benchmark's own named figures (spec's table, soak's requests) sit beside the
record's fields at the top level of the JSON, so a reader finds them where the benchmark put them.

Nothing here imports `engine` at import time: the suite drops the caller's flashdesk settings
before any benchmark loads the engine (bench/harness.py, drop_callers_settings).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import TypeVar

from bench.harness import ROOT, test_home

T = TypeVar("T")

OUT_DIR = ROOT / "bench" / "out"


def __getattr__(name: str):
    """GREEDY, the suite's one greedy sampling (the same token ids for every mode, so speculation is
    checked against plain), made on first use: importing the engine must wait for the suite to
    drop the caller's settings. (draft_training/evaluate.py keeps its own: the wheel ships
    draft_training, never bench.)"""
    if name == "GREEDY":
        from engine import SamplingParams

        return SamplingParams(temperature=0)
    raise AttributeError(name)


@dataclass
class Record:
    bench: str
    params: dict
    samples: list = field(default_factory=list)  # one row per timed run, as the benchmark measured it
    medians: dict = field(default_factory=dict)
    ratios: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)  # the benchmark's own named results (top level in JSON)
    markdown: str = ""  # the benchmark's own Markdown table, if it draws one (the .md only)
    ok: bool = True  # False: the benchmark found a fault (speculative output unlike plain, a lost record)
    build: dict = field(default_factory=dict)
    commit: str = ""
    device: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)

    def stamp(self) -> Record:
        """Fill in what was timed on: this build, commit, device, and the model file a benchmark
        named as {"path": ...} (its name, size and a hash of its head replace the path)."""
        self.build, self.commit, self.device = build(), commit(), device()
        if "path" in self.model:
            self.model = {**model_facts(self.model["path"]), **{k: v for k, v in self.model.items() if k != "path"}}
        return self

    def to_json(self) -> dict:
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("figures", "markdown")}
        clash = set(own) & set(self.figures)
        assert not clash, f"a figure may not take a record field's name: {sorted(clash)}"
        return {**own, **self.figures}

    @classmethod
    def from_json(cls, data: dict) -> Record:
        names = {f.name for f in fields(cls)} - {"figures", "markdown"}
        return cls(**{k: v for k, v in data.items() if k in names},
                   figures={k: v for k, v in data.items() if k not in names})

    def to_markdown(self) -> str:
        lines = [f"# {self.bench}", "", "| | |", "|---|---|", f"| commit | {self.commit or '-'} |",
                 f"| build | {_flat(self.build)} |", f"| device | {_flat(self.device)} |",
                 f"| model | {_flat(self.model)} |", f"| parameters | {_flat(self.params)} |",
                 f"| samples | {len(self.samples)} |", f"| ok | {'yes' if self.ok else 'NO'} |", ""]
        for title, values in (("Medians", self.medians), ("Ratios", self.ratios)):
            if values:
                lines += [f"## {title}", "", "| | |", "|---|---|"]
                lines += [f"| {k} | {_cell(v)} |" for k, v in values.items()] + [""]
        if self.markdown:
            lines += [self.markdown.rstrip(), ""]
        return "\n".join(lines)

    def write(self, out: str | Path) -> tuple[Path, Path]:
        """The one rule of --out: PATH.json and PATH.md (a .json or .md suffix given is dropped)."""
        base = out_base(out)
        base.parent.mkdir(parents=True, exist_ok=True)
        paths = base.with_name(base.name + ".json"), base.with_name(base.name + ".md")
        paths[0].write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False, default=str) + "\n", "utf-8")
        paths[1].write_text(self.to_markdown() + "\n", "utf-8")
        return paths


def out_base(out: str | Path) -> Path:
    p = Path(out)
    return p.with_suffix("") if p.suffix in (".json", ".md") else p


def out_json(out: str | Path) -> Path:
    """Where the record of `--out PATH` is as JSON (what a later benchmark reads back)."""
    base = out_base(out)
    return base.with_name(base.name + ".json")


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.4g}"
    return str(v)


def _flat(d: dict) -> str:
    return ", ".join(f"{k} {_cell(v)}" for k, v in d.items() if v not in (None, "", [], {})) or "-"


# What a run was timed on


def commit() -> str:
    """The repository's commit, with `+changes` when the working tree differs from it."""
    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""
    head = git("rev-parse", "--short", "HEAD")
    return head + ("+changes" if head and git("status", "--porcelain", "--untracked-files=no") else "")


def build() -> dict:
    """llama-cpp-python's version and, where this process loaded llama.cpp, its build: which folder
    (engine/llama/build.py), flashdesk's patch state (the batch-invariant band, or stock) and the
    build id a measured cost curve is keyed by."""
    out: dict = {"llama_cpp_python": _version("llama_cpp_python")}
    if "llama_cpp" not in sys.modules:  # a benchmark that only ran servers: load nothing here
        return out
    from engine.llama import ggml
    from engine.llama.build import select_build

    chosen = select_build()
    case, band = ggml.exactness_case()
    out |= {"library": chosen.name, "folder": str(chosen.folder), "patch": case, "band": band,
            "build_id": ggml.build_id()}
    return out


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def device() -> dict:
    out = {"cpu": _cpu_name(), "cores": os.cpu_count(), "machine": platform.machine(), "os": platform.system()}
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True) if _which("nvidia-smi") else None
    if smi is not None and smi.returncode == 0 and smi.stdout.strip():
        out["gpu"] = ", ".join(smi.stdout.split("\n")).strip(", ")
    return out


def _which(name: str) -> bool:
    import shutil

    return shutil.which(name) is not None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def model_facts(path: str | Path) -> dict:
    """The model file timed: its name, size, and a sha256 of its first MiB (its header and
    metadata, which differ between quantizations and checkpoints; a whole hash takes minutes)."""
    p = Path(path)
    if not p.is_file():
        return {"name": str(path)}
    with open(p, "rb") as f:
        head = hashlib.sha256(f.read(1 << 20)).hexdigest()[:16]
    return {"name": p.name, "bytes": p.stat().st_size, "sha256_first_mib": head}


def test_model(name: str = "smollm2"):
    """A catalog model from the tests' own cache (pulled there once per machine): its StoredModel."""
    from engine.models.pull import pull
    from engine.models.store import ModelStore, no_progress

    return pull(ModelStore(test_home()), name, progress=no_progress)


def model_path(model: str | None, default: str = "smollm2") -> str:
    """What --model names: a GGUF file, or a catalog model from the tests' cache (default SmolLM2)."""
    if model and Path(model).is_file():
        return str(model)
    return test_model(model or default).path


def draft_for(model, choice: str | None, seed: int = 0) -> tuple[str | None, str]:
    """(path, what it is) of the draft a speed or invariance run drafts with: `auto` the model's
    paired draft (else a random one), `random` a random DFlash 2 draft (its acceptance is almost
    nil: it measures the machinery's costs), `none`, or a path."""
    if choice == "auto" and model.draft_path:
        return model.draft_path, "paired"
    if choice in ("auto", "random", None):
        import tempfile

        from gguf_tools.dflash import write_random_draft

        path = str(Path(tempfile.mkdtemp()) / "random-dflash2.gguf")
        write_random_draft(path, model.path, seed=seed)
        return path, "random (costs only)"
    return (None, "none") if choice == "none" else (choice, choice)


# The A B A B runner


def rotation(sides: Sequence[str], rnd: int) -> list[str]:
    """The order of round `rnd`: A B C, then B C A, ...: every side goes first as often, so the
    machine's drift (heat, a neighbour's job) falls on all sides alike."""
    k = rnd % len(sides)
    return list(sides[k:]) + list(sides[:k])


def alternate(sides: dict[str, Callable[[], T]], rounds: int,
              report: Callable[[int, str, T], None] | None = None) -> dict[str, list[T]]:
    """Runs every side once per round, in rotation, and returns each side's samples (a time, or a
    measurement's dict) in round order."""
    samples: dict[str, list[T]] = {s: [] for s in sides}
    for rnd in range(rounds):
        for s in rotation(list(sides), rnd):
            samples[s].append(sides[s]())
            if report:
                report(rnd, s, samples[s][-1])
    return samples


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {s: statistics.median(xs) for s, xs in samples.items() if xs}


def paired_ratios(samples: dict[str, list[float]], base: str) -> dict[str, float]:
    """Each side against `base`: the median over rounds of the ratio within a round, so drift
    between rounds cancels."""
    return {s: statistics.median(x / b for x, b in zip(xs, samples[base]) if b)
            for s, xs in samples.items() if s != base and xs}
