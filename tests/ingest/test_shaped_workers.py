"""A large log of a shaped format (``formats/shaped.py``) is chunked in worker processes, each with
a shape table of its own: the run must be what one process reads, bitwise (series, events, metadata,
input problems), for every shaped format, on generated logs of each (tqdm redraws, NaN tails,
tracebacks) and on logs that cut long lines, with chunks small enough that dozens cross the pool."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_shaped_bulk import snapshot

from trainaudit import ingest
from trainaudit.ingest import load_run
from trainaudit.ingest.chunks import OrderedWorkers
from trainaudit.ingest.formats import shaped
from trainaudit.ingest.formats.hf import HFReader
from trainaudit.ingest.formats.keras import KerasReader
from trainaudit.ingest.formats.lightning import LightningReader
from trainaudit.ingest.formats.torchtitan import TorchtitanReader
from trainaudit.safeio import Limits

REPO = Path(__file__).resolve().parents[2]


def generated(tmp_path: Path, fmt: str) -> Path:
    out = tmp_path / f"{fmt}.log"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gen_format_logs.py"), fmt, str(out), "--size", "400K",
                    "--fail-from", "0.7"], check=True, capture_output=True)
    return out


def read(path: Path, fmt: str | None, monkeypatch: pytest.MonkeyPatch, workers: int) -> tuple[tuple, list, int]:
    """The run's snapshot, its input problems, and how many chunks went to workers."""
    sent = [0]
    real = OrderedWorkers.submit

    def submit(pool: OrderedWorkers, req: object) -> None:
        sent[0] += 1
        real(pool, req)

    chunks = shaped.shaped_chunks

    def chunked(*args: Any, **kwargs: Any) -> Iterator[tuple[shaped.ShapeTable, shaped.Chunk]]:
        return chunks(*args, **{**kwargs, "workers": workers})

    with monkeypatch.context() as m:
        m.setattr(shaped, "POOL_MIN_SIZE", 0)
        m.setattr(shaped, "shaped_chunks", chunked)
        m.setattr(OrderedWorkers, "submit", submit)
        run, problems = load_run([str(path)], fmt)
    return snapshot(run), [(p.path, p.message) for p in problems], sent[0]


@pytest.mark.parametrize("fmt", ["hf", "lightning", "keras", "deepspeed", "torchtitan", "torchrun"])
@pytest.mark.parametrize("workers", [1, 2])
def test_workers_read_what_one_process_reads(fmt: str, workers: int, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = generated(tmp_path, fmt)
    for reader in (HFReader, LightningReader, KerasReader, TorchtitanReader):
        monkeypatch.setattr(reader, "chunk_size", 4096 * (4 if reader is LightningReader else 1))
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    one, problems, _ = read(path, None, monkeypatch, 0)
    pooled, pooled_problems, sent = read(path, None, monkeypatch, workers)
    assert sent >= 8  # the pool was used (one request a chunk)
    assert one[0], "nothing read"
    assert pooled == one
    assert pooled_problems == problems


def test_long_lines_are_cut_and_counted_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # lines past the input's line limit: cut where the chunk is read, in one process or in a worker
    path = tmp_path / "long.log"
    body = []
    for step in range(1, 400):
        body.append(f"{{'loss': {3 / step!r}, 'grad_norm': 1.0, 'learning_rate': 0.001, 'epoch': {step / 100}}}")
        bar = f"{step * 100 // 400:3d}%|#         | {step}/400 [00:01<00:09,  2.00it/s]"
        body.append("\r".join([bar] * (300 if step % 37 == 0 else 2)))
    path.write_text("\n".join(body) + "\n", encoding="utf-8")
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    monkeypatch.setattr(ingest, "LIMITS", Limits(line_bytes=8192))
    one, problems, _ = read(path, "hf", monkeypatch, 0)
    pooled, pooled_problems, sent = read(path, "hf", monkeypatch, 2)
    assert sent >= 10
    assert any("cut" in message for _, message in problems), problems
    assert pooled == one and pooled_problems == problems
