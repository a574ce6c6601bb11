"""Load-time decodes run on a thread of their own that ends with them (engine/llama/context.py
`on_own_thread`): an OpenMP team left alive beside the worker's made every later decode slower."""

import threading

import pytest

from engine.llama.context import on_own_thread


def test_the_work_runs_on_a_thread_that_has_ended_when_it_returns():
    seen = []
    assert on_own_thread(lambda: seen.append(threading.current_thread()) or 42) == 42
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()


def test_an_exception_reaches_the_caller_as_it_was_raised():
    class Stopped(Exception):
        pass

    def work():
        raise Stopped("the server stopped while this decode ran")

    with pytest.raises(Stopped, match="server stopped"):
        on_own_thread(work)


def test_the_engine_judges_exactness_off_its_callers_thread(engine):
    """The judge ran (its verdict is there) and no thread it ran on is still alive."""
    assert engine.speculation.exactness.why
    assert not [t for t in threading.enumerate() if t.name == "flashdesk-decode-once"]
