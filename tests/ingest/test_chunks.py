"""``OrderedWorkers``: forked worker processes that keep their own state, serve requests
round-robin and give the results back in request order; a worker's error is raised in its
request's place, and no worker outlives the reader, also when the reader stops early."""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Callable

import pytest

from trainaudit.ingest.chunks import OrderedWorkers


def counting(i: int) -> Callable[[int], tuple[int, int, int]]:
    seen: list[int] = []  # this worker's state: the requests it was given, in order

    def work(req: int) -> tuple[int, int, int]:
        if req < 0:
            raise ValueError(f"bad request {req}")
        seen.append(req)
        return i, req, len(seen)

    return work


def test_results_come_in_request_order_from_stateful_workers() -> None:
    with OrderedWorkers(counting, 3) as pool:
        for req in range(10):
            pool.submit(req)
        assert pool.pending == 10
        got = [pool.result() for _ in range(10)]
    assert [r for _, r, _ in got] == list(range(10))
    assert [w for w, _, _ in got] == [r % 3 for r in range(10)]  # round-robin
    assert [n for _, _, n in got] == [r // 3 + 1 for r in range(10)]  # each worker saw its own requests


def test_a_worker_error_is_raised_in_its_place_and_the_rest_go_on() -> None:
    with OrderedWorkers(counting, 2) as pool:
        for req in (1, -5, 3):
            pool.submit(req)
        assert pool.result()[1] == 1
        with pytest.raises(ValueError, match="bad request -5"):
            pool.result()
        assert pool.result()[1] == 3


class Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("held a lock")
        self.lock = threading.Lock()


def failing(_: int) -> Callable[[int], int]:
    def work(req: int) -> int:
        raise Unpicklable

    return work


def test_an_error_that_does_not_pickle_comes_back_as_its_text() -> None:
    with OrderedWorkers(failing, 1) as pool:
        pool.submit(1)
        with pytest.raises(RuntimeError, match="held a lock"):
            pool.result()


def test_no_worker_outlives_a_reader_that_stops_early() -> None:
    with pytest.raises(KeyError), OrderedWorkers(counting, 2) as pool:
        for req in range(6):
            pool.submit(req)
        pool.result()
        raise KeyError("the reader failed")  # four results never taken
    assert not mp.active_children()
