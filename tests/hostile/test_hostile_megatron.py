"""The Megatron fast path reads plain files itself (byte ranges, a process pool), not through the
bounded stream every other line reader gets: it must cut over-long lines the same way, count them,
and give what the line path gives on the same cut lines."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from trainaudit.ingest import chunks, load_run
from trainaudit.ingest.formats.megatron import bulk as megatron_fast
from trainaudit.ingest.formats.megatron.lines import MegatronReader
from trainaudit.ingest.sink import RunBuilder
from trainaudit.ingest.sources import InputFile, expand_inputs
from trainaudit.model import Run, Source
from trainaudit.safeio import LIMITS

LIMIT = 4096  # a small line limit for the reader-level tests (the driver sets LIMITS.line_bytes)


def _iteration(it: int, rng: random.Random, pad: str = "") -> str:
    return (f" [2024-04-06 02:00:00] iteration {it:8d}/{9000:8d} | consumed samples: {it * 128:12d} |"
            f" elapsed time per iteration (ms): {rng.uniform(10, 999):.1f} |"
            f" learning rate: {rng.uniform(0, 1e-3):.6E} |"
            f" global batch size:   128 |{pad} lm loss: {rng.lognormvariate(0, 2):.6E} | loss scale: 1.0 |"
            f" grad norm: {rng.lognormvariate(0, 3):.3f} | number of skipped iterations:   0 |")


def _log(n: int, long_at: dict[int, int]) -> bytes:
    """``n`` iteration lines; before iteration i in ``long_at`` a line of that many bytes (junk), and
    iteration i itself padded past LIMIT so its loss is cut off."""
    rng = random.Random(3)
    out: list[str] = ["using world size: 8, data-parallel size: 8"]
    for it in range(1, n + 1):
        if it in long_at:
            out.append("x" * long_at[it])
            out.append(_iteration(it, rng, pad=" " * LIMIT))
        else:
            out.append(_iteration(it, rng))
    return ("\n".join(out) + "\n").encode()


def _read(path: Path, fast: bool, line_bytes: int | None, **kw: int) -> tuple[Run, InputFile]:
    inp = expand_inputs([str(path)])[0]
    inp.line_bytes = line_bytes
    builder = RunBuilder()
    builder.begin(Source(inp.display, "megatron"))
    MegatronReader(fast=fast, **kw).read(inp, builder)
    builder.end()
    return builder.build(), inp


def _same(a: Run, b: Run) -> None:
    assert sorted(a.series) == sorted(b.series)
    for name, s in b.series.items():
        assert a.series[name].steps.tolist() == s.steps.tolist(), name
        assert a.series[name].lines.tolist() == s.lines.tolist(), name
        assert np.array_equal(a.series[name].values, s.values, equal_nan=True), name
    assert [e.to_dict() for e in a.events] == [e.to_dict() for e in b.events]


@pytest.mark.parametrize("pooled", [False, True])
def test_fast_path_cuts_long_lines_like_the_line_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      pooled: bool) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(_log(600, {100: 3 * LIMIT, 400: 40 * LIMIT}))
    if pooled:
        monkeypatch.setattr(megatron_fast, "POOL_MIN_SIZE", 0)
    calls: list[int] = []
    real = megatron_fast.parse_chunk
    monkeypatch.setattr(megatron_fast, "parse_chunk", lambda data, tpl: calls.append(len(data)) or real(data, tpl))
    fast, fast_inp = _read(log, True, LIMIT, chunk_size=16_384, workers=2 if pooled else 1)
    line, line_inp = _read(log, False, LIMIT)
    assert pooled or calls, "the fast path was not taken"
    assert not calls or max(calls) < 16_384 + 2 * LIMIT  # ranges hold cut lines only
    assert fast_inp.cut_lines == line_inp.cut_lines == 4  # two junk lines, two padded iterations
    _same(fast, line)
    loss = line.series["lm loss"]
    lost = [s for s, v in zip(loss.steps.tolist(), loss.values.tolist(), strict=True) if np.isnan(v)]
    assert len(loss) == 600 and lost == [100, 400]  # the padded iterations lost their loss (missing: NaN)


def test_a_line_longer_than_the_limit_is_never_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What is read from disk is bounded too, not only what is parsed: a range ends where a too long
    # line passes the limit, and the rest of that line is skipped unread.
    log = tmp_path / "train.log"
    log.write_bytes(_log(600, {100: 3 * LIMIT, 400: 100 * LIMIT}))
    reads: list[int] = []
    real = chunks.read_range
    for module in (chunks, megatron_fast):  # the fast path's reads and the replay's second reads
        monkeypatch.setattr(module, "read_range", lambda path, off, n: reads.append(n) or real(path, off, n))
    fast, fast_inp = _read(log, True, LIMIT, chunk_size=16_384, workers=1)
    line, line_inp = _read(log, False, LIMIT)
    assert reads and max(reads) <= 16_384 + 2 * LIMIT
    assert fast_inp.cut_lines == line_inp.cut_lines == 4
    _same(fast, line)


def test_fast_path_without_long_lines_cuts_nothing(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(_log(300, {}))
    fast, inp = _read(log, True, LIMIT, chunk_size=8192, workers=1)
    assert inp.cut_lines == 0 and len(fast.series["lm loss"]) == 300


def test_a_megatron_log_with_a_line_past_the_limit_says_so(tmp_path: Path) -> None:
    # End to end at the real limit: the driver sets it, the fast path cuts, the problem list tells.
    log = tmp_path / "train.log"
    log.write_bytes(_log(200, {150: LIMITS.line_bytes + 100_000}))
    run, problems = load_run([str(log)])
    assert "lm loss" in run.series and len(run.series["lm loss"]) == 200  # the padding is short of 1 MiB
    assert any("1 line(s) longer than 1 MiB cut" in str(p) for p in problems), [str(p) for p in problems]
