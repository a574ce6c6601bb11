"""From the engine's worker thread to asyncio: submit a request, await its events.

The engine calls `sink(event)` on its own thread; the sink hands the event to the
request's event loop with `call_soon_threadsafe`. Leaving the iterator early (client
gone, task cancelled) cancels the request, and the worker stops it within one step.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from engine import Completion, GenerationRequest, StreamEvent
from engine.api import EngineAPI

from ..http.errors import APIError


async def submit(engine: EngineAPI, req: GenerationRequest) -> asyncio.Queue[StreamEvent]:
    """Queue `req` (tokenizing off the event loop); raises EngineError for a bad request."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[StreamEvent] = asyncio.Queue()

    def sink(ev: StreamEvent) -> None:
        loop.call_soon_threadsafe(events.put_nowait, ev)

    req.sink = sink
    await asyncio.to_thread(engine.submit, req)
    return events


async def events_of(req: GenerationRequest, events: asyncio.Queue) -> AsyncIterator[StreamEvent]:
    try:
        while True:
            ev = await events.get()
            yield ev
            if ev.final:
                return
    finally:
        req.cancel()  # a no-op once finished; otherwise the worker drops it next step


async def wait_for_disconnect(receive) -> None:
    """Returns when the client closes the connection (the body was already read)."""
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return


async def collect(request, req: GenerationRequest, events: asyncio.Queue) -> Completion:
    """Wait for the whole answer; if the client hangs up first, cancel the generation (499)."""

    async def gather():
        # events_of stops after the final event (an error is final too), so the engine's own
        # collector sees the whole answer and raises the error where there is one.
        return Completion.collect(iter([ev async for ev in events_of(req, events)]))

    work = asyncio.ensure_future(gather())
    gone = asyncio.ensure_future(wait_for_disconnect(request.receive))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():
            work.cancel()  # its finally cancels the engine request
    if not work.done() or work.cancelled():
        raise APIError(499, "client closed the connection", code="client_closed")
    return work.result()
