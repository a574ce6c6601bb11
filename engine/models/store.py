"""The model store: where installed models live, and how they get there.

Layout: `<home>/models/<name>/<file>.gguf` plus `<home>/models/<name>/model.json`
(the manifest: file, sha256, size, source, architecture, the catalog's options). `<home>` follows the OS
conventions (platformdirs: ~/.local/share/flashdesk, ~/Library/Application
Support/flashdesk, %LOCALAPPDATA%\\flashdesk) unless FLASHDESK_HOME is set.
A model appears in the store only after it is complete and verified: files are
written under a temporary name and renamed into place, so a killed pull or import
leaves nothing half-installed (and the next install removes what it left, see
STAGING_LOCK). A draft is paired beside its model (`draft.gguf`), never installed as a
model. Fetching a catalog entry's files: engine/models/pull.py (Hub: hub.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import platformdirs

from gguf_tools import GGUFFormatError, check_gguf

from ..errors import DownloadError, InvalidModelFile, InvalidRequest, ModelNotFound
from ..stats import MEASURED_FILE, MeasuredSpeedup
from . import catalog as catalogs
from .catalog import DEFAULT_MODEL, CatalogEntry, looks_like_draft
from . import files
from .files import ProgressFactory, no_progress, tqdm_progress
from .load_check import load_check

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def default_home() -> Path:
    env = os.environ.get("FLASHDESK_HOME")
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("flashdesk", appauthor=False))


@dataclass
class InstalledModel:
    name: str
    file: str  # file name inside the model's folder
    sha256: str
    size: int
    source: str  # "catalog:smollm2" or "import:<original path>"
    architecture: str
    added: float
    draft: str = ""  # file name of the paired DFlash draft inside the model's folder, if any
    # how the catalog means it to run: {"chat_template": {...}, "draft_kind", "n_draft": {backend: n}}
    options: dict = field(default_factory=dict)

    path: str = ""  # filled in when read from the store; not written to the manifest

    @property
    def draft_path(self) -> str | None:
        return str(Path(self.path).parent / self.draft) if self.draft else None

    @property
    def folder(self) -> Path | None:
        return Path(self.path).parent if self.source.startswith(("catalog:", "import:")) else None

    def measured(self) -> MeasuredSpeedup | None:
        """What speculation did for this model's answers here, as its last run kept it (None: never run)."""
        return MeasuredSpeedup.load(self.folder / MEASURED_FILE) if self.folder else None


class ModelStore:
    def __init__(self, home: str | os.PathLike | None = None):
        self.home = Path(home).expanduser() if home else default_home()
        self.models_dir = self.home / "models"

    # -- reading ---------------------------------------------------------------------

    def list(self) -> list[InstalledModel]:
        out = []
        if self.models_dir.is_dir():
            for d in sorted(self.models_dir.iterdir()):
                m = self._read(d)
                if m is not None:
                    out.append(m)
        return out

    def get(self, name: str) -> InstalledModel:
        m = self._read(self.models_dir / name) if NAME_RE.match(name) else None
        if m is None:
            hint = (f"run `flashdesk pull {name}`" if name in self.catalog()
                    else "run `flashdesk models` to see what is installed, or `flashdesk import FILE.gguf`")
            raise ModelNotFound(f"model {name!r} is not installed. HINT: {hint}.", param="model")
        return m

    def resolve(self, name_or_path: str | None) -> InstalledModel:
        """A store name, or a path to a GGUF file outside the store (validated, not copied)."""
        name_or_path = name_or_path or DEFAULT_MODEL
        p = Path(name_or_path).expanduser()
        if p.suffix == ".gguf" or os.sep in name_or_path:
            if not p.is_file():
                raise ModelNotFound(f"no model file at {p}", param="model")
            summary = _check(p)
            _refuse_draft(p, summary.architecture)
            return InstalledModel(p.stem.lower(), p.name, "", p.stat().st_size, f"path:{p}",
                                  summary.architecture or "unknown", p.stat().st_mtime, path=str(p))
        return self.get(name_or_path)

    def _read(self, folder: Path) -> InstalledModel | None:
        try:
            data = json.loads((folder / "model.json").read_text("utf-8"))
            known = {f.name for f in fields(InstalledModel)}
            # newer keys (draft_choice) stay in the file
            m = InstalledModel(**{k: v for k, v in data.items() if k in known})
        except (OSError, ValueError, TypeError):
            return None
        m.path = str(folder / m.file)
        if m.architecture == DRAFT_ARCH:  # a draft imported as a model by an older flashdesk: never served
            return None
        return m if os.path.isfile(m.path) else None

    # -- writing ---------------------------------------------------------------------

    def catalog(self) -> catalogs.Catalog:
        """The built-in catalog plus this home's own entries (`<home>/catalog/*.json`)."""
        return catalogs.load(self.home)

    def install_bundled(self, name: str, gguf: str | os.PathLike, *,
                        progress: ProgressFactory = tqdm_progress) -> InstalledModel:
        """Install a catalog model from its GGUF shipped inside an installer (no download): the
        same checks and layout as `pull`, including the shipped draft."""
        entry = catalogs.BUILTIN[name]
        src = Path(gguf)

        def copy(dst: Path) -> None:
            with open(src, "rb") as fi:
                files.copy(fi, dst, src.stat().st_size, f"install {entry.filename}", progress)

        m = self.install(entry.name, copy, entry.filename, f"catalog:{entry.name}", expect_sha=entry.target.sha256,
                          progress=progress, options=entry.options())
        return self.pair_shipped(m, entry, progress)

    def pair_shipped(self, m: InstalledModel, entry: CatalogEntry, progress: ProgressFactory) -> InstalledModel:
        """Pair the draft flashdesk ships for this model, unless the user paired one (or none) already.
        A pairing the user removed (`unpair`) stays removed: the manifest then says draft_choice "user"."""
        shipped = entry.draft_file
        if shipped is None:
            return m
        man = self.manifest(Path(m.path).parent)
        tag = f"shipped:{files.sha256(shipped, no_progress, 'draft')[:16]}"
        if man.get("draft_choice") == "user" or (m.draft and "draft_source" not in man):
            return m  # the user's own pairing (or their unpairing, or a pairing older than this rule) wins
        if m.draft and man.get("draft_source") == tag:
            return m  # already paired with this very draft
        return self.pair(m.name, shipped, progress=progress, source=tag)  # new install, or flashdesk upgraded its draft

    def import_file(self, path: str | os.PathLike, name: str | None = None, *,
                    progress: ProgressFactory = tqdm_progress) -> InstalledModel:
        """Validate a local GGUF (structure, then a trial load) and copy it into the store."""
        src = Path(path).expanduser()
        if not src.is_file():
            raise InvalidRequest(f"no file at {src}", param="path")
        name = (name or re.sub(r"[^a-z0-9._-]+", "-", src.stem.lower()).strip("-._"))[:64]
        if not NAME_RE.match(name):
            raise InvalidRequest(f"model name {name!r} must be 1-64 of a-z 0-9 . _ - (start with a letter or digit)",
                                 param="name")
        if (self.models_dir / name).exists():
            raise InvalidRequest(f"a model named {name!r} is already installed. HINT: pass --name.", param="name")
        _refuse_draft(src, _check(src).architecture)
        load_check(str(src))  # llama.cpp itself must accept it; a crash there happens in a child process

        def copy(dst: Path) -> None:
            with open(src, "rb") as fi:
                files.copy(fi, dst, src.stat().st_size, f"import {src.name}", progress)

        return self.install(name, copy, src.name, f"import:{src}", progress=progress)

    def remove(self, name: str) -> None:
        shutil.rmtree(self.models_dir / self.get(name).name)

    def pair(self, name: str, draft: str | os.PathLike, *, progress: ProgressFactory = tqdm_progress,
             source: str = "user", move: bool = False) -> InstalledModel:
        """Check that `draft` is a DFlash draft (v1 or 2) this model can use, then copy it beside the model
        (`move`: move it there instead, for a file flashdesk downloaded itself)."""
        from ..llama.model import Model  # loading the target is needed to check the draft against it
        from ..speculative.drafters.dflash import inspect_draft

        m = self.get(name)
        src = Path(draft).expanduser()
        if not src.is_file():
            raise InvalidRequest(f"no draft file at {src}", param="draft")
        _check(src)
        target = Model(m.path, n_gpu_layers=0)
        try:
            kind = inspect_draft(str(src), target).kind  # raises a clear refusal for a draft that does not fit
        finally:
            target.close()
        folder = self.models_dir / name
        tmp = folder / ".draft.gguf.partial"
        if move:
            os.replace(src, tmp)
        else:
            with open(src, "rb") as fi:
                files.copy(fi, tmp, src.stat().st_size, f"pair {src.name}", progress)
        os.replace(tmp, folder / "draft.gguf")
        choice = {"draft_choice": "user"} if source == "user" else {}
        self._write_manifest(folder, {**self.manifest(folder), "draft": "draft.gguf", "draft_kind": kind,
                                      "draft_source": source,
                                      **choice})
        return self.get(name)

    def unpair(self, name: str) -> InstalledModel:
        folder = self.models_dir / self.get(name).name
        (folder / "draft.gguf").unlink(missing_ok=True)
        self._write_manifest(folder, {**self.manifest(folder), "draft": "", "draft_choice": "user"})
        return self.get(name)

    def draft_source(self, m: InstalledModel) -> str:
        """Where a model's paired draft came from: "shipped:<sha prefix>" (flashdesk's own) or "user"."""
        try:
            return self.manifest(Path(m.path).parent).get("draft_source", "user")
        except (OSError, ValueError):
            return "user"

    @staticmethod
    def manifest(folder: Path) -> dict:
        return json.loads((folder / "model.json").read_text("utf-8"))

    def note(self, name: str, **facts) -> None:
        """Add facts to an installed model's manifest (e.g. what its draft was converted from)."""
        folder = Path(self.get(name).path).parent
        self._write_manifest(folder, {**self.manifest(folder), **facts})

    @staticmethod
    def _write_manifest(folder: Path, data: dict) -> None:
        tmp = folder / "model.json.partial"
        tmp.write_text(json.dumps(data, indent=2), "utf-8")
        os.replace(tmp, folder / "model.json")  # atomic: a crash leaves the old or the new manifest

    def install(self, name: str, write: Callable[[Path], None], filename: str, source: str, *,
                 expect_sha: str | None = None, progress: ProgressFactory = tqdm_progress,
                 options: dict | None = None, hashed: bool = False) -> InstalledModel:
        """`write(dst)` puts the file at dst; it is hashed there unless `hashed` (a rename of a download the
        caller already hashed to `expect_sha`: a kill during a second hash would lose the whole download)."""
        if hashed and not expect_sha:
            raise ValueError("hashed=True needs expect_sha")
        self.models_dir.mkdir(parents=True, exist_ok=True)
        _sweep_staging(self.models_dir)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=self.models_dir))
        lock = None
        try:
            lock = _hold_lock(staging / STAGING_LOCK)
            write(staging / filename)
            digest = expect_sha if hashed else files.sha256(staging / filename, progress, "verify model")
            if expect_sha and digest != expect_sha:
                raise DownloadError(f"{filename} does not have the expected sha256; not installed.")
            summary = _check(staging / filename)
            assert digest is not None  # hashed=True comes with expect_sha
            m = InstalledModel(name, filename, digest, (staging / filename).stat().st_size, source,
                               summary.architecture or "unknown", time.time(), options=options or {})
            self._write_manifest(staging, {k: v for k, v in asdict(m).items() if k != "path"})
            final = self.models_dir / name
            if final.exists():  # a stale or corrupt copy of the same name: replace it
                shutil.rmtree(final)
            lock.truncate(0)  # emptied while still locked, so no sweep takes the folder from here on
            lock.close()  # then closed: Windows renames no folder with an open file in it
            (staging / STAGING_LOCK).unlink()
            os.replace(staging, final)
        finally:
            if lock is not None:
                lock.close()
            shutil.rmtree(staging, ignore_errors=True)
        return self.get(name)


# An install writes into a hidden staging folder `.<name>-<random>` beside the models and holds an OS lock
# on its STAGING_LOCK file while it works. The OS drops the lock when the process ends, however it ends, so
# a later install can tell the folder of a killed job (removed: it may hold gigabytes) from a running one's.
STAGING_LOCK = ".install.lock"


def _hold_lock(path: Path):
    """The open lock file, locked; closing it (or the process ending) unlocks it."""
    f = open(path, "a+b")
    if not _try_lock(f):  # a new random folder: nobody else has it
        f.close()
        raise OSError(f"cannot lock {path}")
    # Written only once locked: a sweep leaves an empty lock file alone, so it never takes the folder of
    # an install that has opened its lock file but not yet locked it.
    f.write(f"{os.getpid()}\n".encode())
    f.flush()
    return f


def _try_lock(f) -> bool:
    try:
        if sys.platform == "win32":  # os.name == "nt", in the form type checkers read
            import msvcrt

            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def _sweep_staging(models_dir: Path) -> None:
    """Remove the staging folders of installs that were killed: those whose lock no process holds.
    A folder without a (written) lock file is left alone: its install may have just created it (or it
    predates the lock), and a listing never shows a folder without a manifest anyway."""
    for folder in models_dir.glob(".*-*"):
        lock_path = folder / STAGING_LOCK
        if not folder.is_dir() or not lock_path.is_file() or lock_path.stat().st_size == 0:
            continue
        try:
            with open(lock_path, "a+b") as f:
                if not _try_lock(f):
                    continue  # an install in progress (this process or another)
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)  # after closing: Windows deletes no open file


DRAFT_ARCH = "dflash"  # general.architecture of DFlash drafts (v1 and 2)


def _refuse_draft(path: Path, architecture: str | None) -> None:
    """A draft is paired with a model, never installed or served as one."""
    if architecture == DRAFT_ARCH or looks_like_draft(path.name):
        raise InvalidRequest(f"{path.name} is a speculative draft, not a chat model. HINT: pair it with the model it "
                             "was made for: `flashdesk pair MODEL " + path.name + "` (or \"Add a draft\" on the "
                             "Models page).", param="path")


def _check(path: Path):
    try:
        return check_gguf(path)
    except GGUFFormatError as e:
        raise InvalidModelFile(f"{path.name} is not a valid GGUF model: {e}") from e
    except OSError as e:
        raise InvalidModelFile(f"cannot read {path}: {e.strerror or e}") from e
