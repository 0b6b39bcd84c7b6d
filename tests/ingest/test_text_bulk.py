"""The text reader in bulk (a chunk of lines at a time, grouped by shape) gives exactly what it
gives line by line: the same series (steps, values bitwise, lines, in the same order), the same
events with the same steps, the same metadata. Checked on every corpus log, on logs of real tiny
CPU training runs, on the benchmark's generated mix, on a log written to break it (restarts,
tracebacks, ranks, ANSI, carriage returns, NaN, headers that change, numbers of every facts) and
on random logs; with the step decided after a few records and chunks of a few KB, so the bulk
path and its chunk edges are exercised on small files. The same again with the chunks grouped
by one and by two worker processes (each with its own book of shapes), as a large file is
read."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shared_data import REPO

from trainaudit.errors import InputError
from trainaudit.ingest.extract import Extractor
from trainaudit.ingest.formats.text import lines as text_reader
from trainaudit.ingest.formats.text import bulk as text_bulk
from trainaudit.ingest.sink import RunBuilder
from trainaudit.ingest.sources import expand_inputs
from trainaudit.model import Run, Source, SourceKind
from trainaudit.safeio import LIMITS

CORPUS_LOGS = sorted((REPO / "tests" / "corpus" / "logs").glob("*/log.txt"))


def read(path: Path, bulk: bool, workers: int = 0) -> Run:
    inp = expand_inputs([str(path)])[0]
    inp.line_bytes = LIMITS.line_bytes
    sink = RunBuilder()
    sink.begin(Source(inp.display, "text", SourceKind.LOG, inp.size))
    text_reader.read_metrics(inp, sink, scan_events=True, bulk=bulk, workers=workers)
    sink.end()
    return sink.build()


def snapshot(run: Run) -> tuple:
    series = [(k, s.steps.tolist(), s.values.tobytes(), s.lines.tolist()) for k, s in run.series.items()]
    events = [(e.kind, e.line, e.step, e.rank, e.message, repr(sorted(e.data.items(), key=str))) for e in run.events]
    return series, events, repr(sorted(run.meta.items(), key=str))


class Spy:
    """Counts the records placed in bulk and the chunks each book grouped, so a test cannot pass
    with the bulk path or the workers unused."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
        self.workers = workers
        self.placed = 0
        self.declined = 0  # chunks left to the line reader
        self.books: set[int] = set()
        self.all_books = set(range(1, workers + 1)) if workers else {0}
        real = Extractor.place_many
        chunk = text_bulk.BulkLines.chunk

        def spy_chunk(lines: text_bulk.BulkLines, data: object, base: int, grouped: object = None) -> int | None:
            taken = chunk(lines, data, base, grouped)  # type: ignore[arg-type]
            if taken is None:
                self.declined += 1
            else:
                self.books.add(0 if grouped is None else grouped.book)  # type: ignore[attr-defined]
            return taken

        monkeypatch.setattr(text_bulk.BulkLines, "chunk", spy_chunk)

        def place_many(ex: Extractor, n: int, groups: list) -> object:
            out = real(ex, n, groups)
            if out is not None:
                self.placed += n
            return out

        monkeypatch.setattr(Extractor, "place_many", place_many)


@pytest.fixture(params=[0, 1, 2], ids=["in-process", "1-worker", "2-workers"])
def small(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[Spy]:
    monkeypatch.setattr(Extractor, "decide_after", 3)
    monkeypatch.setattr(text_reader, "CHUNK_SIZE", 4096)
    monkeypatch.setattr(text_reader, "POOL_MIN_SIZE", 0)
    monkeypatch.setattr(text_bulk, "SMALL_RUN", 2)
    monkeypatch.setattr(text_bulk, "LINE_SHARE", 0)  # every chunk in bulk, however many lines are for the line reader
    spy = Spy(monkeypatch, request.param)
    yield spy
    if spy.placed:  # bulk chunks are grouped by the workers' books (1, 2) only, or by the reader's (0)
        assert spy.books == spy.all_books or (spy.books and spy.books < spy.all_books)


def same(path: Path, spy: Spy) -> None:
    got = snapshot(read(path, bulk=True, workers=spy.workers))
    assert got == snapshot(read(path, bulk=False)), path


def test_every_corpus_log(small: Spy) -> None:
    assert len(CORPUS_LOGS) >= 150
    for path in CORPUS_LOGS:
        same(path, small)
    assert small.placed > 500  # short pastes: most runs of records are below the bulk size


def test_real_cpu_training_logs(small: Spy, synth_runs: object) -> None:
    logs = []
    for name in ("healthy-warmup-cosine", "healthy-restart", "nan-batch", "crash-shape-error", "hf-trainer-lr-jump"):
        case = synth_runs.get(name)  # type: ignore[attr-defined]
        logs += [p for p in case.dir.rglob("*") if p.is_file() and p.suffix in (".log", ".txt")]
    assert len(logs) >= 3
    for path in logs:
        same(path, small)
    assert small.placed > 100


def test_benchmark_mix(small: Spy, tmp_path: Path) -> None:
    out = tmp_path / "mixed.log"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gen_generic_log.py"), str(out), "--size", "400K"],
                   check=True, capture_output=True)
    same(out, small)
    assert small.placed > 3000
    assert small.books == small.all_books


def hostile_lines(rng: random.Random, n: int) -> list[str]:
    """Lines of many spellings and every kind of trouble for a shape, with a step that restarts."""
    out: list[str] = []
    step, epoch = 0, 0
    for _ in range(n):
        step += 1
        if rng.random() < 0.01:
            epoch += 1
            step = 0 if rng.random() < 0.5 else step  # an inner counter that restarts with its epoch
        if rng.random() < 0.005:
            step = max(0, step - 50)  # a run restarted from a checkpoint: the counter goes back alone
        x = rng.choice([rng.uniform(0, 5), 0.0, 1.0, float(rng.randrange(5)), -rng.random(), 1e-30 * rng.random(),
                        rng.random() * 1e25])
        k = rng.randrange(24)
        lines = [
            f"iter {step} loss {x:.4f} lr {rng.random():.2e}",
            f"Epoch[{epoch}] Batch[{step}] Speed: {rng.uniform(0, 600):.2f} samples/sec accuracy={rng.random():.4f}",
            f"{{'loss': {x!r}, 'grad_norm': {rng.random()!r}, 'epoch': {epoch + step / 100:.2f}}}",
            f'{{"step": {step}, "loss": {x!r}, "lr": {rng.random() * 1e-3!r}}}',
            f"| {step} | {x:.4f} | {rng.random():.3f} |",
            f"{step:8d}  {x:10.5f}  {rng.uniform(0, 100):.1f}",
            "| step | loss | acc |",
            "    step      loss    tok/s",
            f"[epoch {epoch}][iter {step}/500] loss: {x:.4f}, lr: {rng.random():.2e}",
            f"{rng.randrange(100)}%|###| {step}/1000 [00:{step % 60:02d}<00:10, {rng.uniform(0.5, 3):.2f}s/it, loss={x:.3g}]",
            f"[rank{rng.randrange(2)}]: step {step} loss {x:.4f}",
            f"\x1b[32mstep {step}\x1b[0m loss {x:.4f}",
            f"step {step} loss nan grad_norm inf",
            f"step {step}: loss = {x:,.2f} time 0:00:{step % 60:02d}.5",
            "WARNING: the use_reentrant parameter should be passed explicitly",
            f"Saving checkpoint to /ckpt/step_{step}.pt",
            "",
            f"global step {step}: loss = {x:.6g} ({rng.random():.3f} sec/step)",
            f"step {step} perplexity {rng.uniform(1, 99):.2f} f1 {rng.random():.2f} mem 12,345 MB",
            f"éval step {step} loss {x:.4f}",
            f"step {step} loss {x:.4f} " + "x" * 1100,
            f"Iteration {step}, loss = {x:.5g}",
            # a shorter bar (an evaluation's), and a longer one with a postfix: their rates are kept or not
            f"Evaluating: {rng.randrange(100)}%|##| {rng.randrange(1, 41)}/40 [00:00<00:01, {rng.uniform(5, 20):.2f}it/s]",
            f"{rng.randrange(100)}%|#| {step}/{rng.choice([40, 1000, 5000])} [00:01<00:09, {rng.uniform(1, 3):.2f}it/s, "
            f"loss={x:.3g}]",
        ]
        out.append(lines[k])
        if rng.random() < 0.01:
            out += ["Traceback (most recent call last):", '  File "train.py", line 12, in <module>',
                    f"    loss = step({step})", "RuntimeError: CUDA error: an illegal memory access was encountered"]
        if rng.random() < 0.01:
            out.append(f"{rng.randrange(100)}%|##| {step}/1000 [00:01<00:02, 4.2it/s]\r"
                       f"{rng.randrange(100)}%|###| {step + 1}/1000 [00:01<00:01, 4.3it/s, loss={x:.2f}]")
    return out


def test_progress_bars_of_several_lengths(small: Spy, tmp_path: Path) -> None:
    # a training bar, evaluation bars of 12 and 4 batches (the last with a metric of its own) and, midway,
    # a longer bar: rates of a bar shorter than the longest before it are left out, in bulk as line by line
    lines = []
    for s in range(1, 3001):
        total = 3000 if s < 2000 else 9000
        lines.append(f" {s // 30}%|#  | {s}/{total} [00:{s % 60:02d}<01:00,  2.{s % 10}0it/s, loss={1 / s:.5f}]")
        if s % 50 == 0:
            lines += [f" {e * 8}%|#  | {e}/12 [00:00<00:01, 10.{e}0it/s]" for e in range(1, 13)]
            lines.append(f" 50%|#  | 2/4 [00:00<00:00, 9.{s % 7}0it/s, val_loss=0.{s % 9}]")
    path = tmp_path / "bars.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    same(path, small)
    run = read(path, bulk=True, workers=small.workers)
    assert run.series["it/s"].values.min() >= 2.0 and run.series["it/s"].values.max() < 3.0
    assert run.series["val_loss"].steps.tolist() == list(range(50, 3001, 50))  # at the training's step
    assert small.placed > 1000


@pytest.mark.parametrize("seed", range(6))
def test_hostile_mix(small: Spy, tmp_path: Path, seed: int) -> None:
    path = tmp_path / "hostile.log"
    path.write_text("\n".join(hostile_lines(random.Random(seed), 3000)) + "\n", encoding="utf-8")
    same(path, small)
    assert small.placed > 300
    assert small.books == small.all_books


@pytest.mark.parametrize("workers", [0, 2])
def test_chunks_mostly_for_the_line_reader_are_left_to_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         workers: int) -> None:
    # Rank prefixes on every line, and the hostile mix (a third of its lines are for the line
    # reader): such chunks are read line by line; a chunk of plain records still goes in bulk.
    monkeypatch.setattr(Extractor, "decide_after", 3)
    monkeypatch.setattr(text_reader, "CHUNK_SIZE", 4096)
    monkeypatch.setattr(text_reader, "POOL_MIN_SIZE", 0)
    spy = Spy(monkeypatch, workers)
    rng = random.Random(3)
    ranks = [f"[rank{i % 4}]: step {i // 4} loss {rng.random():.4f}" for i in range(2000)]
    plain = [f"step {i} loss {rng.random():.4f} lr {rng.random():.2e}" for i in range(2000, 4000)]
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(ranks + hostile_lines(rng, 2000) + plain) + "\n", encoding="utf-8")
    same(path, spy)
    assert spy.declined > 20
    assert spy.placed > 1500


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32 - 1), st.integers(20, 400))
def test_random_logs(small: Spy, tmp_path: Path, seed: int, n: int) -> None:
    rng = random.Random(seed)
    lines = hostile_lines(rng, n)
    rng.shuffle(lines)  # steps out of order too
    path = tmp_path / f"random-{seed}.log"
    path.write_text("\n".join(lines), encoding="utf-8")  # the last line without its newline
    same(path, small)


def test_the_cli_reads_in_bulk(tmp_path: Path) -> None:
    """A whole file through ``parse``: the default chunk size and step decision, bulk engaged."""
    out = tmp_path / "mixed.log"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gen_generic_log.py"), str(out), "--size", "3M"],
                   check=True, capture_output=True)
    assert snapshot(read(out, bulk=True)) == snapshot(read(out, bulk=False))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_file_cut_short_while_read_is_an_input_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       workers: int) -> None:
    # Cut short after it was listed (the job writing it rotated it, say): one input error naming
    # it, raised in the reader whether a worker or the reader itself found the short range.
    monkeypatch.setattr(text_reader, "CHUNK_SIZE", 4096)
    monkeypatch.setattr(text_reader, "POOL_MIN_SIZE", 0)
    path = tmp_path / "train.log"
    path.write_text("".join(f"step {i} loss {1 / (i + 1):.4f}\n" for i in range(3000)), encoding="utf-8")
    inp = expand_inputs([str(path)])[0]
    with path.open("r+b") as f:
        f.truncate(inp.size // 2)
    sink = RunBuilder()
    sink.begin(Source(inp.display, "text", SourceKind.LOG, inp.size))
    with pytest.raises(InputError, match=r"train\.log: the file changed while it was read \(cut short\)"):
        text_reader.read_metrics(inp, sink, scan_events=True, workers=workers)
