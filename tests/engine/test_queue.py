"""Admission beyond the slots: requests wait first come, first served; past `max_queue` the
engine refuses at once with ServerBusy and a retry estimate; every way a request ends (done,
cancelled while waiting, cancelled while running) frees its place."""

from __future__ import annotations

import time

import pytest

from conftest import TEST_CTX
from engine import Engine, EngineConfig, SamplingParams
from engine.errors import ServerBusy
from engine.request import Completion

GREEDY = SamplingParams(temperature=0)
COUNTING = "1, 2, 3, 4, 5, 6,"  # a raw completion that counts on: runs to max_tokens


@pytest.fixture(scope="module")
def one_slot(model_path):
    eng = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=1, max_queue=2, n_threads=2,
                                               spec_mode="off"))
    yield eng
    eng.close()


def wait_until(cond, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, "timed out"
        time.sleep(0.01)


def test_waiting_requests_run_in_arrival_order_and_the_queue_limit_refuses_at_once(one_slot):
    eng = one_slot
    running = eng.generate(COUNTING, max_tokens=1500, sampling=GREEDY)
    first = next(iter(running))  # it holds the only slot
    assert not first.final
    order: list[str] = []
    waiting = []
    for name in ("b", "c"):
        h = eng.generate(f"{name}, {COUNTING}", max_tokens=3, sampling=GREEDY)
        sink = h.request.sink
        h.request.sink = lambda ev, name=name, sink=sink: (ev.final and order.append(name), sink(ev))
        waiting.append(h)
    assert eng.stats().queued == 2
    t0 = time.perf_counter()
    with pytest.raises(ServerBusy) as e:
        eng.generate(COUNTING, max_tokens=3, sampling=GREEDY)
    assert time.perf_counter() - t0 < 5  # refused at once, not after a wait (generous: a loaded CPU)
    assert 1 <= e.value.retry_after <= 60 and "--max-queue" in e.value.message
    assert eng.stats().refused == 1
    running.cancel()
    done = [Completion.collect(iter(h)) for h in waiting]
    assert order == ["b", "c"] and all(c.finish_reason == "length" for c in done)
    wait_until(lambda: eng.stats().active == 0)
    assert eng.complete(COUNTING, max_tokens=2, sampling=GREEDY).finish_reason == "length"  # room again


def test_a_request_cancelled_while_it_waits_frees_its_place(one_slot):
    eng = one_slot
    running = eng.generate(COUNTING, max_tokens=1500, sampling=GREEDY)
    next(iter(running))
    gave_up = [eng.generate(COUNTING, max_tokens=3, sampling=GREEDY) for _ in range(2)]  # the queue is full
    with pytest.raises(ServerBusy):
        eng.generate(COUNTING, max_tokens=3, sampling=GREEDY)
    for h in gave_up:
        h.cancel()
    assert [Completion.collect(iter(h)).finish_reason for h in gave_up] == ["cancelled", "cancelled"]
    later = eng.generate(COUNTING, max_tokens=3, sampling=GREEDY)  # admitted to the queue: the places are free
    running.cancel()
    assert Completion.collect(iter(later)).finish_reason == "length"
