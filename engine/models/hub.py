"""Fetch one pinned catalog file from a Hugging Face endpoint, through `huggingface_hub`.

What the kept client gives us: the Hub's resolve and tree APIs with their auth (`HF_TOKEN`
or a saved `hf auth login` for gated repositories), error types and redirects, and the
ranged transfer with its retries. What this module adds: `HF_ENDPOINT` (a mirror) and
`HF_HUB_OFFLINE` read at call time; the tree API's size and LFS sha256 at the pinned commit
compared with the catalog before a byte is fetched; a part file that survives a killed
process, so the next pull continues with a Range request; a free-disk check; progress into
flashdesk's progress bars (CLI tqdm, the Models page's job), where a cancel takes effect;
one error message per failure that says what to do next.

Not the install (engine/models/store.py verifies the sha256 itself and moves the file into the
store atomically) nor the catalog (catalog.py).
"""

from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors
from huggingface_hub.file_download import http_get
from huggingface_hub.utils import build_hf_headers
from tqdm.auto import tqdm

from ..errors import Cancelled, DownloadError, HubAccessDenied, NotEnoughDisk
from .catalog import CommitPin, HubFile
from .files import ProgressFactory

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK = 1 << 20  # progress, cancel and resume granularity of a transfer
PART = ".part"  # an unfinished download, beside where the finished file will be
DISK_MARGIN = 1 << 30  # keep 1 GiB free beyond the download: a full disk breaks more than the download


def endpoint() -> str:
    """Read at call time (not at import, as huggingface_hub's constants are): the server's settings
    and tests may set HF_ENDPOINT after this module loaded."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def partial_path(folder: Path, f: HubFile) -> Path | None:
    """The unfinished download of `f` in `folder`, if any (what a killed pull left)."""
    p = folder / (f.file + PART)
    return p if p.is_file() else None


def remaining_bytes(f: HubFile, folder: Path) -> int:
    done = folder / f.file
    if done.is_file() and done.stat().st_size == f.size:
        return 0
    part = partial_path(folder, f)
    return max(f.size - (part.stat().st_size if part else 0), 0)


def check_disk(files: list[HubFile], folder: Path) -> None:
    """Refuse before starting when the files cannot fit (free space is read on the store's disk)."""
    need = sum(remaining_bytes(f, folder) for f in files)
    if not need:
        return
    probe = folder
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need + DISK_MARGIN:
        raise NotEnoughDisk(f"not enough free disk space: the download needs {_gb(need)} (plus {_gb(DISK_MARGIN)} "
                            f"to spare) and {_gb(free)} is free at {probe}. HINT: free up space, or set "
                            "FLASHDESK_HOME to a folder on a bigger disk, then pull again.")


def check_pin(f: HubFile, token: str | bool | None = None) -> None:
    """The Hub's own size and LFS sha256 of the file at the pinned commit must be the catalog's:
    a mirror that serves something else is refused before anything is fetched."""
    if offline():
        return
    folder = f.file.rpartition("/")[0] or None
    try:  # the tree API at the commit: what the Hub itself says the file is
        info = list(HfApi(endpoint=endpoint(), token=token).list_repo_tree(f.repo, folder, revision=f.revision))
    except Exception as e:  # noqa: BLE001  (mapped to one clear message below)
        raise _explain(e, f) from e
    # duck-typed (getattr) as the Hub's RepoFile or a stand-in of the tests: a file here, never a folder
    entry: Any = next((i for i in info if getattr(i, "path", None) == f.file), None)
    if entry is None:
        raise DownloadError(f"{f.repo} has no file {f.file} at commit {f.revision[:12]} on {endpoint()}. "
                            "HINT: the catalog entry is out of date; update flashdesk or fix your catalog file.")
    sha = getattr(getattr(entry, "lfs", None), "sha256", None)
    if entry.size != f.size or (sha is not None and sha != f.sha256):
        raise DownloadError(f"{endpoint()} lists {f.repo}/{f.file} at commit {f.revision[:12]} with size {entry.size} "
                            f"and sha256 {sha}, but the catalog pins size {f.size} and sha256 {f.sha256}; nothing was "
                            "downloaded. HINT: if you use a mirror (HF_ENDPOINT), it serves a different file.")


def checkpoint_files(pin: CommitPin, token: str | bool | None = None) -> tuple[HubFile, ...]:
    """A checkpoint pinned by commit alone, as the Hub's tree at that commit lists it: config.json and
    the *.safetensors at the repository's top, each with its size and its hash there (the LFS sha256,
    or git's blob id for a file kept in git). DownloadError, saying why, when the commit does not exist
    or holds no checkpoint the converter reads."""
    where = HubFile(pin.repo, pin.revision, "the file list", 0, None, pin.license)
    if offline():
        raise _offline(where)
    try:
        tree = HfApi(endpoint=endpoint(), token=token).list_repo_tree(pin.repo, revision=pin.revision)
        listed: list[Any] = [i for i in tree if getattr(i, "size", None) is not None]  # files; folders have no size
    except Exception as e:  # noqa: BLE001  (mapped to one clear message)
        raise _explain(e, where) from e
    files = sorted((i for i in listed if i.path == "config.json" or i.path.endswith(".safetensors")),
                   key=lambda i: i.path)
    if [i.path for i in files[:1]] != ["config.json"] or len(files) < 2:
        names = ", ".join(sorted(i.path for i in listed)[:8]) or "nothing"
        raise DownloadError(f"{pin.repo} at commit {pin.revision[:12]} holds no draft checkpoint: a config.json and "
                            f"*.safetensors at its top were expected, and it has {names}. HINT: the catalog entry "
                            "names the wrong repository or commit; fix it, or update flashdesk.")
    return tuple(HubFile(pin.repo, pin.revision, i.path, i.size, i.lfs.sha256 if i.lfs else None, pin.license,
                         None if i.lfs else i.blob_id) for i in files)


def download(f: HubFile, folder: Path, *, progress: ProgressFactory, token: str | bool | None = None) -> Path:
    """The file, complete, at `folder/<file>`, continuing what an earlier call (or a killed process)
    left in `<file>.part`. Not yet verified: the caller hashes it against the pin before installing it.
    A progress bar that raises Cancelled (engine/models/store.py's cancel flag) stops it.

    huggingface_hub's own `hf_hub_download` resumes only within one call (its temporary file has a
    new random name each call and is deleted on failure), so this drives its two halves itself:
    `get_hf_file_metadata` (the resolve request: auth, gated and missing repos, the CDN redirect) and
    `http_get` (the ranged transfer with its retries), into a part file that outlives the process."""
    done = folder / f.file
    if done.is_file() and done.stat().st_size == f.size:
        return done
    if offline():
        raise _offline(f)
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / (f.file + PART)
    if part.is_file() and part.stat().st_size > f.size:
        part.unlink()  # longer than the file can be: not a part of it
    url = hf_hub_url(f.repo, f.file, revision=f.revision, endpoint=endpoint())
    try:
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint())
        headers = build_hf_headers(token=token)
        if urlsplit(meta.location).netloc != urlsplit(url).netloc:
            headers.pop("authorization", None)  # a signed CDN URL: the token stays with the Hub (as the client does)
        with open(part, "ab") as out, _pieces(CHUNK):
            http_get(meta.location, out, resume_size=out.tell(), headers=headers, expected_size=f.size,
                     displayed_filename=f.file, tqdm_class=_bar_class(progress, f))
    except Exception as e:  # noqa: BLE001
        raise _explain(e, f) from e
    if part.stat().st_size != f.size:
        raise DownloadError(f"{f.file} ended at {part.stat().st_size} of {f.size} bytes. HINT: run the pull again: "
                            "it continues where it stopped.")
    os.replace(part, done)
    return done


@contextmanager
def _pieces(size: int):
    """http_get reads (and reports progress, so lets a cancel in) in pieces of the module constant
    DOWNLOAD_CHUNK_SIZE, read at call time; its 10 MiB default would keep a slow link "cancelling"
    for many seconds. Set for this transfer only (the store runs one job at a time), then restored."""
    old = hf_constants.DOWNLOAD_CHUNK_SIZE
    hf_constants.DOWNLOAD_CHUNK_SIZE = min(old, size)
    try:
        yield
    finally:
        hf_constants.DOWNLOAD_CHUNK_SIZE = old


def discard(folder: Path, f: HubFile) -> None:
    """Forget a download: the finished file and the unfinished part."""
    (folder / f.file).unlink(missing_ok=True)
    (folder / (f.file + PART)).unlink(missing_ok=True)


def _bar_class(progress: ProgressFactory, f: HubFile):
    """A tqdm class for huggingface_hub that feeds flashdesk's progress bar."""

    class Bar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True  # our own bar draws; this one only counts
            super().__init__(*args, **kwargs)
            self._ours = progress(f"download {f.file}", int(kwargs.get("total") or f.size))
            if kwargs.get("initial"):
                self._ours.update(int(kwargs["initial"]))  # resumed: the bar starts where the part ends

        def update(self, n=1):
            self._ours.update(int(n or 0))  # may raise Cancelled
            return super().update(n)

        def close(self):
            if getattr(self, "_ours", None) is not None:
                self._ours.close()
                del self._ours  # closed: the getattr above finds none
            super().close()

    return Bar


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def _explain(e: Exception, f: HubFile) -> Exception:
    """One message per way a download fails, ending with the next step."""
    where = f"{f.repo} on {endpoint()}"
    again = "Run the pull again: it continues where it stopped."
    if isinstance(e, Cancelled | DownloadError):
        return e
    if isinstance(e, hf_errors.GatedRepoError):
        page = f"https://huggingface.co/{f.repo}"
        if _status(e) == 403:
            return HubAccessDenied(f"{where} refused your token (403): it has no access to this gated repository. "
                                   f"HINT: open {page}, accept its licence with the account the token belongs to, "
                                   "then pull again.")
        if _has_token(e):
            return HubAccessDenied(f"{where} did not accept your token (401): it is wrong or expired. HINT: create "
                                   "a new read token on huggingface.co, set HF_TOKEN=<token>, then pull again.")
        return HubAccessDenied(f"{where} needs a login (401): the repository is gated. HINT: accept its licence on "
                               f"{page}, create a read token, set HF_TOKEN=<token> (or run `hf auth login`), then "
                               "pull again.")
    if isinstance(e, hf_errors.RepositoryNotFoundError):
        return DownloadError(f"{where} was not found (or is private, {_status(e)}). HINT: check the repository name "
                             "in the catalog entry; a private repository needs HF_TOKEN.")
    if isinstance(e, hf_errors.RevisionNotFoundError):
        return DownloadError(f"{where} has no commit {f.revision[:12]} any more. HINT: the catalog entry is out of "
                             "date; update flashdesk or fix your catalog file.")
    if isinstance(e, hf_errors.RemoteEntryNotFoundError):
        return DownloadError(f"{where} has no file {f.file} at commit {f.revision[:12]}. HINT: the catalog entry is "
                             "out of date; update flashdesk or fix your catalog file.")
    if isinstance(e, hf_errors.LocalEntryNotFoundError | hf_errors.OfflineModeIsEnabled):
        return _offline(f) if offline() else _unreachable(f, _cause(e))
    if isinstance(e, hf_errors.HfHubHTTPError):
        return DownloadError(f"{where} answered {_status(e) or 'an error'} for {f.file}: {_short(e)}. HINT: the Hub "
                             f"or your mirror may be down; try again later. {again}")
    if _transport_error(e) and type(e).__name__ in ("ConnectError", "ConnectTimeout"):
        return _unreachable(f, _short(e))
    if _transport_error(e):
        return DownloadError(f"the connection to {endpoint()} broke while downloading {f.file} ({_short(e)}). "
                             f"HINT: {again}")
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return NotEnoughDisk(f"the disk filled up while downloading {f.file} ({e.strerror}). HINT: free up space "
                             f"(or set FLASHDESK_HOME to a bigger disk); {again.lower()}")
    if isinstance(e, OSError):
        return DownloadError(f"could not write {f.file}: {e.strerror or e}. HINT: check that the flashdesk folder "
                             "is writable.")
    return DownloadError(f"downloading {f.file} from {where} failed: {type(e).__name__}: {_short(e)}")


def _offline(f: HubFile) -> DownloadError:
    return DownloadError(f"{f.file} is not downloaded yet and offline mode is on (HF_HUB_OFFLINE). HINT: unset "
                         "HF_HUB_OFFLINE on a machine with internet access, or copy the file here and use "
                         "`flashdesk import`.")


def _unreachable(f: HubFile, why: str) -> DownloadError:
    return DownloadError(f"cannot reach {endpoint()} for {f.file} ({why}). HINT: check the internet connection "
                         "(or set HF_ENDPOINT to your mirror), then pull again.")


def _transport_error(e: Exception) -> bool:
    """A broken or refused connection, as huggingface_hub's HTTP client raises it (httpx in 1.x, its
    fork httpx2 in 2.x): told by module, so this does not bind to one transport library."""
    return type(e).__module__.split(".")[0] in ("httpx", "httpx2") or isinstance(e, ConnectionError | TimeoutError)


def _status(e: Exception) -> int | None:
    r = getattr(e, "response", None)
    return getattr(r, "status_code", None)


def _has_token(e: Exception) -> bool:
    r = getattr(e, "response", None)
    req = getattr(r, "request", None)
    return bool(req is not None and req.headers.get("authorization"))


def _cause(e: Exception) -> str:
    c = e.__cause__ or e.__context__
    return _short(c) if c else _short(e)


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__
