"""Store jobs: a pull, import or pair runs in a background thread, and the browser polls it.

Copying or hashing a model takes seconds to minutes, longer than an HTTP request should
stay open, so the store routes answer 202 with a job and the UI asks
`GET /v1/store/jobs/{id}` until it says done or error. Only one job that writes the
store runs at a time (a second is refused, 409 "busy"): two writers on one folder are
never worth the locking they would need. The last KEEP jobs stay in memory; a restart
forgets them, which is fine because the store itself is the record of what happened.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from engine import EngineError
from engine.errors import Cancelled
from engine.models.store import InstalledModel, ProgressFactory

from ..http.errors import APIError

log = logging.getLogger("flashdesk.server")

KEEP = 20  # finished jobs remembered for GET /v1/store/jobs

# (progress factory, cancel flag) -> the model the job installed or changed (None when there is none)
Work = Callable[[ProgressFactory, threading.Event], "InstalledModel | None"]


@dataclass
class Job:
    kind: str  # pull | import | pair
    model: str | None
    phase: str
    id: str = field(default_factory=lambda: "storejob_" + uuid.uuid4().hex[:16])
    status: str = "running"  # running | done | error | cancelled
    done_bytes: int = 0
    total_bytes: int = 0
    error: str | None = None
    code: str | None = None  # the engine error code when status is "error" (e.g. invalid_model_file)
    started: float = field(default_factory=time.time)
    finished: float | None = None
    cancel: threading.Event = field(default_factory=threading.Event)  # set by POST /v1/store/jobs/{id}/cancel

    def request_cancel(self) -> None:
        """A running job stops at its next chunk (a download, a hash or a copy); a finished one stays."""
        if self.status == "running":
            self.cancel.set()

    def progress(self, desc: str, total: int) -> "JobProgress":
        """engine.models.store's ProgressFactory: each bar the store opens becomes the job's current phase."""
        return JobProgress(self, desc, total)

    def to_json(self) -> dict:
        return {"id": self.id, "object": "store.job", "kind": self.kind, "status": self.status,
                "phase": self.phase, "done_bytes": self.done_bytes, "total_bytes": self.total_bytes,
                "error": self.error, "code": self.code, "model": self.model,
                "cancelling": self.status == "running" and self.cancel.is_set(),
                "started": self.started, "finished": self.finished}


class JobProgress:
    """One progress bar. Plain attribute writes from the job's thread; readers may see a value
    one chunk old, never a torn one (the GIL makes each write atomic)."""

    def __init__(self, job: Job, desc: str, total: int):
        self.job = job
        job.phase, job.done_bytes, job.total_bytes = desc, 0, int(total or 0)

    def update(self, n: int) -> None:
        self.job.done_bytes += n

    def close(self) -> None:
        pass


class Jobs:
    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self._jobs: OrderedDict[str, Job] = OrderedDict()  # oldest first
        self._writing = threading.Lock()  # held while anything writes the store
        self._running: Job | None = None
        self._list_lock = threading.Lock()

    def start(self, kind: str, model: str | None, phase: str, work: Work) -> dict:
        """Run `work` in a thread as a new job; 409 if another store write is under way.
        Returns the job's JSON as it starts (a quick failure must not make a 202 say "error")."""
        if not self._writing.acquire(blocking=False):
            raise self._busy()
        job = Job(kind, model, phase)
        self._running = job
        with self._list_lock:
            self._jobs[job.id] = job
            while len(self._jobs) > self.keep:
                oldest = next(iter(self._jobs.values()))
                if oldest.status == "running":
                    break  # never forget the job that is still running
                self._jobs.popitem(last=False)
        started = job.to_json()
        threading.Thread(target=self._run, args=(job, work), name=f"flashdesk-{kind}", daemon=True).start()
        return started

    def _run(self, job: Job, work: Work) -> None:
        status, error, code = "done", None, None
        try:
            m = work(job.progress, job.cancel)
            if m is not None:
                job.model = m.name
        except Cancelled as e:
            status, error, code = "cancelled", e.message, e.code
            log.info("store %s cancelled", job.kind)
        except EngineError as e:
            status, error, code = "error", e.message, e.code
            log.warning("store %s failed: %s", job.kind, e.message)
        except Exception as e:  # a bug, not a bad file: say so rather than leave the job "running" forever
            status, error, code = "error", f"{type(e).__name__}: {e}", "internal_error"
            log.exception("store %s failed", job.kind)
        finally:
            job.finished = time.time()
            self._running = None
            self._writing.release()  # before "done" shows, so a client that saw it can start the next job
            job.error, job.code, job.status = error, code, status

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """For the quick writes done inside a request (remove, unpair): same rule as a job."""
        if not self._writing.acquire(blocking=False):
            raise self._busy()
        try:
            yield
        finally:
            self._writing.release()

    def _busy(self) -> APIError:
        r = self._running
        what = f"a {r.kind} of {r.model or 'a model'} ({r.id})" if r else "another change to the model store"
        return APIError(409, f"{what} is still running. HINT: wait until GET /v1/store/jobs says it is done, "
                             "then try again.", code="busy")

    def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise APIError(404, f"no store job {job_id!r}; jobs are kept in memory until the server restarts "
                                f"(the last {self.keep}). HINT: GET /v1/store/jobs lists them.",
                           code="job_not_found", param="id")
        return job

    def cancel(self, job_id: str) -> Job:
        """Ask a running job to stop; it does at its next chunk (a download, a hash or a copy)."""
        job = self.get(job_id)
        job.request_cancel()
        return job

    def cancel_all(self) -> None:
        """Ask every running job to stop (the server shuts down)."""
        for job in self.recent():
            job.request_cancel()

    def recent(self) -> list[Job]:
        with self._list_lock:
            return list(reversed(self._jobs.values()))  # newest first
