"""Stopping within a moment: what SIGTERM or Ctrl+C starts before uvicorn's graceful wait.

On a signal uvicorn stops accepting connections, then waits (up to timeout_graceful_shutdown)
for the open ones to finish, and only then runs the app's lifespan shutdown. An open stream
would hold it that long, and a model load longer still. `begin(app)` runs first, at the signal:
the runtime stops (a load under way gives up; open answers end with an error event after the
step under way) and running store jobs are cancelled (a download keeps its partial file, which
the next pull resumes). The connections then finish at once, and the lifespan closes the model
and the databases as on any stop.

What it is not: the lifespan (server/http/app.py), nor the desktop app's own stop (server/desktop/
launcher.py calls `begin` the same way).
"""

from __future__ import annotations

import uvicorn


def begin(app) -> None:
    """The prompt part of a stop; safe to call from a signal handler, and more than once."""
    app.state.runtime.stop()
    app.state.store_jobs.cancel_all()


class Server(uvicorn.Server):
    """uvicorn's server, which calls `begin` at the first signal."""

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit:
            begin(self.config.app)
        super().handle_exit(sig, frame)
