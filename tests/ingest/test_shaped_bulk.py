"""The bulk path of the line formats that read by segment shape (``formats/shaped.py``) gives what
their line reader gives: the same series (steps, values bitwise, lines), events and metadata, on
logs built from the pieces real logs mix (tqdm redraws with carriage returns, train and eval dicts,
NaN/inf, quoted values, launcher prefixes, ANSI colours, a traceback in the middle of a line of
redraws, broken UTF-8, blank lines, CRLF), with chunks small enough that their edges fall inside
dicts and runs of redraws. The bulk path must also be used: a test cannot pass with every line
left to the line reader."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_text_bulk import snapshot

from trainaudit.ingest import load_run
from trainaudit.ingest.formats import shaped
from trainaudit.ingest.formats.hf import HFReader
from trainaudit.ingest.formats.shaped import ROW, ShapeTable

NUMBERS = ["0.5", "10.7052", "1.4999999998982809e-05", "nan", "inf", "-inf", "3", "0.0", "2.5E+00", "1e-3",
           "123456789012345678", ".5", "-0.25"]


@st.composite
def dicts(draw: st.DrawFn) -> str:
    keys = draw(st.lists(st.sampled_from(["loss", "grad_norm", "learning_rate", "epoch", "eval_loss", "step",
                                          "train_runtime", "mean_token_accuracy"]), min_size=1, max_size=4,
                         unique=True))
    quote = draw(st.sampled_from(["", "'"]))
    items = []
    for k in keys:
        v = draw(st.sampled_from(NUMBERS)) if k != "step" else str(draw(st.integers(0, 99)))
        items.append(f"'{k}': {quote}{v}{quote}")
    return "{" + ", ".join(items) + "}"


@st.composite
def bars(draw: st.DrawFn) -> str:
    total = draw(st.sampled_from([50, 200, 1000]))
    n = draw(st.integers(0, total))
    fill = draw(st.sampled_from(["", "█", "##"]))
    return f"{n * 100 // total:3d}%|{fill * (n * 10 // total):10s}| {n}/{total} [00:01<00:09, {draw(st.integers(1, 99))}.00it/s]"


PIECES = st.one_of(
    dicts(), bars(), bars(), bars(),
    st.sampled_from([" " * 20, "", "[rank1]: ", "\x1b[32m", "\x1b[0m", "Traceback (most recent call last):",
                     '  File "train.py", line 3, in main', "RuntimeError: CUDA out of memory", "\xff",
                     "***** Running training *****", "{'eval_loss': 2.5, 'epoch': 1.0}", "}", "noise {"]),
)


@st.composite
def logs(draw: st.DrawFn) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 60))):
        segs = draw(st.lists(PIECES, min_size=0, max_size=5))
        lines.append("\r".join(segs))
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    data = ending.join(lines) + draw(st.sampled_from(["", ending]))
    return data.encode("utf-8", "surrogateescape").replace("\xff".encode(), b"\xff")


HEAD = "".join(f"{{'loss': {3 - i / 10}, 'grad_norm': 1.0, 'learning_rate': 0.001, 'epoch': {i / 10}}}\n"
               for i in range(3)).encode()


class Placed:
    """Counts the ROW lines handed to the formats' ``place``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        real = ShapeTable.chunk

        def spy(table: ShapeTable, data: bytes) -> shaped.Chunk:
            got = real(table, data)
            self.rows += int((got.kind == ROW).sum())
            return got

        monkeypatch.setattr(ShapeTable, "chunk", spy)


def both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[tuple, tuple]:
    bulk, _ = load_run([str(path)], "hf")
    with monkeypatch.context() as m:
        m.setattr(HFReader, "bulk", False)
        lines, _ = load_run([str(path)], "hf")
    return snapshot(bulk), snapshot(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=logs(), chunk=st.sampled_from([64, 301, 4096]))
def test_hf_bulk_reads_what_the_line_reader_reads(body: bytes, chunk: int, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", chunk)
    path = tmp_path / "r.log"
    path.write_bytes(HEAD + body)
    got, want = both(path, monkeypatch)
    assert got == want


def test_a_plain_hf_log_is_placed_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shaped, "CHUNK_SIZE", 4096)
    placed = Placed(monkeypatch)
    lines = []
    for step in range(1, 301):
        redraws = "".join(f"\r{step * 100 // 300:3d}%|{'█' * (step // 30):10s}| {k}/300 [00:01<00:09,  2.{k % 10}0it/s]"
                          for k in range(step, step + 3))
        lines.append(redraws + f"\r{{'loss': {10 / step!r}, 'grad_norm': {'nan' if step > 250 else 1 / step!r}, "
                     f"'learning_rate': {step * 1e-6!r}, 'epoch': {step / 100:.2f}}}")
        if step % 100 == 0:
            lines.append(f"{{'eval_loss': {step / 7:.4f}, 'epoch': {step / 100:.2f}}}")
    path = tmp_path / "hf.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got, want = both(path, monkeypatch)
    assert got == want
    assert placed.rows > 250
    series = dict((k, (steps, lines_)) for k, steps, _, lines_ in got[0])
    assert series["loss"][0][:3] == [2, 3, 4]  # each dict at the count of the bar after it
    assert "eval_loss" in series
