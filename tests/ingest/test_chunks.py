"""``OrderedWorkers``: forked worker processes that keep their own state, serve requests
round-robin and give the results back in request order; a worker's error is raised in its
request's place, and no worker outlives the reader, also when the reader stops early."""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from trainaudit.errors import InputError
from trainaudit.ingest import chunks
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
    with OrderedWorkers(counting, 3, depth=4) as pool:
        for req in range(10):
            assert not pool.full
            pool.submit(req)
        assert pool.pending == 10 and not pool.full
        pool.submit(10)
        pool.submit(11)
        assert pool.full  # 12 in flight: 4 a worker
        pool.result()
        pool.result()
        got = [pool.result() for _ in range(10)]
    assert [r for _, r, _ in got] == list(range(2, 12))
    assert [w for w, _, _ in got] == [r % 3 for r in range(2, 12)]  # round-robin
    assert [n for _, _, n in got] == [r // 3 + 1 for r in range(2, 12)]  # each worker saw its own requests


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


def arrays(i: int) -> Callable[[int], dict[str, object]]:
    def work(n: int) -> dict[str, object]:
        return {"rows": np.arange(n, dtype=np.int64) + i, "values": np.full((n, 3), float(n)), "n": n,
                "strided": np.arange(2 * n)[::2]}

    return work


def test_arrays_come_back_through_shared_memory_as_writable_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    # A slot of 64 KB: the results of 100 and 1000 rows fit, 5000 rows (160 KB) is pickled whole.
    # The slots are reused (depth 2): a result taken is a copy, not a view of the slot.
    through_slots = []
    take = chunks._Slots.take
    monkeypatch.setattr(chunks._Slots, "take", lambda *a: through_slots.append(1) or take(*a))
    with OrderedWorkers(arrays, 2, depth=2, slot_bytes=64 << 10) as pool:
        taken = []
        for n in (100, 1000, 5000, 100, 1000, 5000, 7, 8):
            if pool.full:
                taken.append(pool.result())
            pool.submit(n)
        while pool.pending:
            taken.append(pool.result())
    for k, (got, n) in enumerate(zip(taken, (100, 1000, 5000, 100, 1000, 5000, 7, 8))):
        assert got["n"] == n
        assert (got["rows"] == np.arange(n) + k % 2).all()
        assert got["values"].shape == (n, 3) and (got["values"] == n).all()
        assert (got["strided"] == np.arange(0, 2 * n, 2)).all()
        got["values"][0, 0] = -1.0  # writable
    assert len(through_slots) == 6


def test_a_range_from_a_file_that_changed_is_an_input_error(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"step 1 loss 2.0\nstep 2 loss 1.9\nstep 3 loss 1.8\n")
    ranges = list(chunks.file_ranges(str(log), log.stat().st_size, 1 << 20))
    assert ranges == [(0, log.stat().st_size)]
    first = chunks.read_range(str(log), 0, ranges[0][1])
    assert chunks.reread_range(str(log), 0, ranges[0][1], None, chunks.count_lines(first), "train.log") == first
    log.write_bytes(first.replace(b"\n", b" ", 1))  # rewritten: as long, one line fewer
    with pytest.raises(InputError, match=r"train\.log: the file changed while it was read"):
        chunks.reread_range(str(log), 0, ranges[0][1], None, chunks.count_lines(first), "train.log")
    log.write_bytes(b"step 1 loss 2.0\n")  # cut short by the job that writes it
    with pytest.raises(InputError, match=r"train\.log: the file changed while it was read \(cut short\)"):
        chunks.reread_range(str(log), 0, ranges[0][1], None, chunks.count_lines(first), "train.log")
